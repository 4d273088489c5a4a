{{/*
Every object comes from the repository's kustomize manifests (files/manifests links to manifests/): the chart reads
base/ and components/ and changes only what the values set, as the overlays' patches do. tests/unit/test_chart.py
holds the rendered objects to `kubectl kustomize` of the overlays.
*/}}

{{/* cardquota's namespace: namespace.name, or the release's. */}}
{{- define "cardquota.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end }}

{{/* The image of every container: image.repository:image.tag (the chart's appVersion when empty). */}}
{{- define "cardquota.image" -}}
{{- printf "%s:%s" (required "image.repository: name your registry's cardquota image" .Values.image.repository) (.Values.image.tag | default .Chart.AppVersion | toString) -}}
{{- end }}

{{/*
The objects of one file under files/manifests (dict "root" $ "path" "base/rbac.yaml"), as a JSON list, moved into
cardquota's namespace as an overlay's `namespace:` and manifests/transformers/namespace move them: the objects'
namespace, the bindings' subjects, the webhooks' service, and the webhooks' CEL conditions and namespaceSelectors
that name it.
*/}}
{{- define "cardquota.documents" -}}
{{- $text := .root.Files.Get (printf "files/manifests/%s" .path) -}}
{{- if not $text }}{{ fail (printf "files/manifests/%s is missing from the chart" .path) }}{{ end -}}
{{- $text = replace "cardquota-system" (include "cardquota.namespace" .root) $text -}}
{{- $objects := list -}}
{{- range regexSplit "(?m)^---[ \t]*$" $text -1 -}}
{{- $object := fromYaml . -}}
{{- if $object.Error }}{{ fail (printf "files/manifests/%s: %s" $.path $object.Error) }}{{ end -}}
{{- if $object.kind }}{{ $objects = append $objects $object }}{{ end -}}
{{- end -}}
{{- toJson $objects -}}
{{- end }}

{{/* The labels kustomize's base gives every object and pod template. */}}
{{- define "cardquota.partOf" -}}
app.kubernetes.io/name: cardquota
app.kubernetes.io/part-of: cardquota
{{- end }}

{{/* What Helm adds: who manages the object (on the objects only, never on pod templates or selectors). */}}
{{- define "cardquota.helmLabels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* One object (dict "root" $ "object" OBJ) as a YAML document, labelled. */}}
{{- define "cardquota.emit" -}}
{{- $object := .object -}}
{{- $partOf := include "cardquota.partOf" .root | fromYaml -}}
{{- $labels := merge (include "cardquota.helmLabels" .root | fromYaml) (deepCopy $partOf) ($object.metadata.labels | default dict) -}}
{{- $_ := set $object.metadata "labels" $labels -}}
{{- if and (kindIs "map" $object.spec) (hasKey $object.spec "template") -}}
{{- $template := $object.spec.template -}}
{{- $_ := set $template.metadata "labels" (merge ($template.metadata.labels | default dict) (deepCopy $partOf)) -}}
{{- end }}
---
{{ toYaml $object }}
{{- end }}

{{/*
A container of ours (dict "root" $ "container" C "resources" R): the image, its pull policy, the resources, and the
log format of the processes that take --log-format.
*/}}
{{- define "cardquota.container" -}}
{{- $c := .container -}}
{{- $_ := set $c "image" (include "cardquota.image" .root) -}}
{{- if .root.Values.image.pullPolicy }}{{ $_ := set $c "imagePullPolicy" .root.Values.image.pullPolicy }}{{ end -}}
{{- if hasKey $c "args" }}{{ $_ := set $c "args" (list (printf "--log-format=%s" .root.Values.logFormat)) }}{{ end -}}
{{- $_ := set $c "resources" .resources -}}
{{- end }}

{{/* tls.mode, checked. */}}
{{- define "cardquota.certManager" -}}
{{- if eq .Values.tls.mode "cert-manager" }}true{{ else if ne .Values.tls.mode "self-managed" }}{{ fail (printf "tls.mode: %q is neither self-managed nor cert-manager" .Values.tls.mode) }}{{ end -}}
{{- end }}

{{/* Where the operator reads a mounted certificate (cert-manager mode). */}}
{{- define "cardquota.certDir" -}}/etc/cardquota/tls{{- end }}

{{- /* components/no-card-gate: without cardGate.enabled, the container's CARDQUOTA_CARD_GATE goes. */ -}}
{{- /* The card-quota settings (docs/admission.md): a variable only where a value differs from the default, so the
default render stays the kustomize base's. */ -}}
{{- define "cardquota.cardPolicyEnv" -}}
{{- if ne .root.Values.unquotedQueues "zero" -}}
{{- $_ := set .container "env" (append (.container.env | default list) (dict "name" "CARDQUOTA_UNQUOTED_QUEUES" "value" .root.Values.unquotedQueues)) -}}
{{- end -}}
{{- if ne .root.Values.cardPodsOutsideVolcano "warn" -}}
{{- $_ := set .container "env" (append (.container.env | default list) (dict "name" "CARDQUOTA_CARD_PODS_OUTSIDE_VOLCANO" "value" .root.Values.cardPodsOutsideVolcano)) -}}
{{- end -}}
{{- end -}}

{{- /* --trusted-cidrs of one process, where the list is not empty. */ -}}
{{- define "cardquota.trustedCIDRsEnv" -}}
{{- if .cidrs -}}
{{- $_ := set .container "env" (append (.container.env | default list) (dict "name" "CARDQUOTA_TRUSTED_CIDRS" "value" (join "," .cidrs))) -}}
{{- end -}}
{{- end -}}

{{- define "cardquota.cardGateEnv" -}}
{{- if not .root.Values.cardGate.enabled -}}
{{- $kept := list -}}
{{- range .container.env }}{{ if ne .name "CARDQUOTA_CARD_GATE" }}{{ $kept = append $kept . }}{{ end }}{{ end -}}
{{- $_ := set .container "env" $kept -}}
{{- end -}}
{{- end -}}
