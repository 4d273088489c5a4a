"""The Helm chart (charts/cardquota), rendered and linted by Helm's own engine (the helm-python-sdk package binds
Helm v4's Go SDK: no helm binary), held to the kustomize manifests it is made from.

One source of truth: the chart's templates read manifests/base and manifests/components (charts/cardquota/files/
manifests is a link to manifests/) and change only what a value sets, as the overlays' patches do. So:

- the chart lints clean and renders with its defaults and with each option switched, and each option does what it
  says (OPTIONS);
- for the settings of each shipped overlay (dev, dev-extender, production), of the separate-controller component
  over the base, and of every component in another namespace, the chart renders the objects ``kubectl kustomize``
  renders, compared object by object (kind, name, namespace) and field by field; the only differences are the
  labels Helm adds (HELM_LABELS, the allow-list);
- its webhooks are the base's webhooks.yaml, the file tests/unit/test_match_conditions.py and test_manifests.py
  check, and in another namespace their CEL conditions and namespaceSelectors name that namespace, as
  manifests/transformers/namespace makes an overlay's (the doctor's check, ``other_namespaces``);
- kubernetes-validate validates every rendered object strictly, as test_validate_manifests does the overlays.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shutil
import subprocess
import tarfile
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from object_walk import WEBHOOK_KINDS, strings, webhooks
from unit.test_validate_manifests import EXPECTED_UNKNOWN, OLDEST, VERSIONS, validate_strict
from webhook_conditions import Decision, configuration_documents, decide

from cardquota.core.doctor import OWN_WRITES_CONDITION, other_namespaces
from cardquota.operator.settings import Settings
from cardquota.runtime.tls import service_dns_names

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "cardquota"
MANIFESTS = REPO / "manifests"
KUBECTL = shutil.which("kubectl")
NAMESPACE = "cardquota-system"
RELEASE = "cardquota"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]

# The allow-list: what the chart renders that the overlays do not, and why. Helm's labels of what it manages
# (app.kubernetes.io/managed-by, instance; helm.sh/chart), on the objects' metadata only, never on pod templates
# or selectors (a chart upgrade must not restart pods nor orphan them). Nothing else may differ.
HELM_LABELS = {
    "app.kubernetes.io/managed-by": "Helm",
    "app.kubernetes.io/instance": RELEASE,
    "helm.sh/chart": f"cardquota-{VERSION}",
}

# Custom resources kubernetes-validate has no schema for, beyond the manifests' (test_validate_manifests).
CHART_UNKNOWN = {
    ("cert-manager.io/v1", "Certificate"): "cert-manager CRD (tls.mode cert-manager)",
    ("cert-manager.io/v1", "Issuer"): "cert-manager CRD (tls.mode cert-manager, no issuerRef of one's own)",
}

Objects = list[dict[str, Any]]


# --------------------------------------------------------------------------------------------------- rendering


@functools.cache
def _chart() -> Any:
    return helm.Chart.load(CHART)


@functools.cache
def _render(values_json: str, namespace: str) -> str:
    rendered = _chart().render(values=json.loads(values_json), name=RELEASE, namespace=namespace, is_install=True)
    return json.dumps([document for text in rendered.values() for document in yaml.safe_load_all(text) if document])


def render(values: dict[str, Any], namespace: str = NAMESPACE) -> Objects:
    """The chart's objects for these values, installed with ``-n namespace`` (a fresh copy each call)."""
    return list(json.loads(_render(json.dumps(values, sort_keys=True), namespace)))


def kustomize(directory: Path) -> Objects:
    assert KUBECTL is not None
    result = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def key(obj: dict[str, Any]) -> tuple[str, str, str]:
    metadata = obj["metadata"]
    return obj["kind"], metadata["name"], metadata.get("namespace", "")


def one(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    (found,) = [obj for obj in objects if obj["kind"] == kind and obj["metadata"]["name"] == name]
    return found


def kinds(objects: Objects) -> set[str]:
    return {obj["kind"] for obj in objects}


def containers(objects: Objects) -> Iterator[dict[str, Any]]:
    for obj in objects:
        if obj["kind"] == "Deployment":
            yield from obj["spec"]["template"]["spec"]["containers"]


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}


# ------------------------------------------------------------------------------------------ chart and package


def test_the_chart_carries_the_package_version() -> None:
    metadata = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert metadata["apiVersion"] == "v2"
    assert (metadata["version"], metadata["appVersion"]) == (VERSION, VERSION)
    assert _chart().version == VERSION
    (operator,) = [c for c in containers(render({})) if c["name"] == "operator"]
    # image.tag defaults to appVersion; the repository to a name that can never be pulled (the user sets it)
    assert operator["image"] == f"registry.invalid/set-your-registry/cardquota:{VERSION}"


def test_the_chart_reads_the_repository_manifests() -> None:
    """files/manifests is the manifests/ folder itself, not a copy that could drift."""
    link = CHART / "files" / "manifests"
    assert link.is_symlink()
    assert link.resolve() == MANIFESTS.resolve()


# --------------------------------------------------------------------------------------- options, one by one


def _deployment(objects: Objects, name: str = "cardquota") -> dict[str, Any]:
    return one(objects, "Deployment", name)


def _pod(objects: Objects, name: str = "cardquota") -> dict[str, Any]:
    spec: dict[str, Any] = _deployment(objects, name)["spec"]["template"]["spec"]
    return spec


def _check_defaults(objects: Objects) -> None:
    assert "Namespace" not in kinds(objects)  # helm install --create-namespace makes it
    assert {obj["metadata"].get("namespace") for obj in objects} <= {NAMESPACE, None}
    assert not kinds(objects) & {"Certificate", "Issuer", "ServiceMonitor", "ConfigMap"}
    assert _deployment(objects)["spec"]["replicas"] == 2
    assert _pod(objects)["priorityClassName"] == "system-cluster-critical"
    assert one(objects, "ResourceQuota", "cardquota-critical-pods")
    assert {obj["metadata"]["name"] for obj in objects if obj["kind"] == "NetworkPolicy"} == {
        "cardquota-webhook", "cardquota-metrics"}
    (operator,) = _pod(objects)["containers"]
    assert operator["args"] == ["--log-format=json"]
    assert "imagePullPolicy" not in operator
    assert "CARDQUOTA_ROLE" not in env(operator)
    assert "CARDQUOTA_CERT_DIR" not in env(operator)
    assert all("caBundle" not in hook["clientConfig"] for hook in webhooks(objects))


def _check_namespace_created(objects: Objects) -> None:
    namespace = one(objects, "Namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def _check_namespace_named(objects: Objects) -> None:
    assert {obj["metadata"].get("namespace") for obj in objects} == {"gpu-admin", None}
    assert one(objects, "ClusterRoleBinding", "cardquota")["subjects"][0]["namespace"] == "gpu-admin"


def _check_image(objects: Objects) -> None:
    assert {(c["image"], c["imagePullPolicy"]) for c in containers(objects)} == {
        ("registry.example/gpu/cardquota:1.2.3", "Always")}
    assert len(list(containers(objects))) == 3  # the webhooks', the controllers' and the extender's


def _check_replicas(objects: Objects) -> None:
    assert _deployment(objects)["spec"]["replicas"] == 3
    assert _deployment(objects, "cardquota-controller")["spec"]["replicas"] == 4


def _check_log_format(objects: Objects) -> None:
    assert _pod(objects)["containers"][0]["args"] == ["--log-format=text"]


def _check_namespace_queues(objects: Objects) -> None:
    """Both Deployments follow Namespaces' queues and both accounts may list and watch them
    (components/namespace-queues); the extender reads no namespace."""
    for name in ("cardquota", "cardquota-controller"):
        assert env(_pod(objects, name)["containers"][0])["CARDQUOTA_MAP_NAMESPACE_QUEUES"] == "1"
        rules = one(objects, "ClusterRole", name)["rules"]
        assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]} in rules
    assert "CARDQUOTA_MAP_NAMESPACE_QUEUES" not in env(_pod(objects, "cardquota-extender")["containers"][0])
    extender_rules = one(objects, "ClusterRole", "cardquota-extender")["rules"]
    assert all("namespaces" not in rule["resources"] for rule in extender_rules)


def _check_card_policy(objects: Objects) -> None:
    """The webhooks, the controllers and the extender all run with the card-quota settings (each reads them)."""
    for name in ("cardquota", "cardquota-controller", "cardquota-extender"):
        variables = env(_pod(objects, name)["containers"][0])
        assert variables["CARDQUOTA_UNQUOTED_QUEUES"] == "unlimited"
        assert variables["CARDQUOTA_CARD_PODS_OUTSIDE_VOLCANO"] == "enforce"


def _check_trusted_cidrs(objects: Objects) -> None:
    """The webhook port's trusted sources on the operator, the scheduler's on the extender (--trusted-cidrs)."""
    assert env(_pod(objects)["containers"][0])["CARDQUOTA_TRUSTED_CIDRS"] == "10.0.0.0/24,fd00::1"
    assert env(_pod(objects, "cardquota-extender")["containers"][0])["CARDQUOTA_TRUSTED_CIDRS"] == "10.244.0.0/16"
    assert "CARDQUOTA_TRUSTED_CIDRS" not in env(_pod(objects, "cardquota-controller")["containers"][0])


def _check_resources(objects: Objects) -> None:
    """Helm merges a map of values into the defaults (a key set to null drops one)."""
    assert _pod(objects)["containers"][0]["resources"] == {"requests": {"cpu": "1", "memory": "256Mi"},
                                                           "limits": {"memory": "3Gi"}}
    assert _pod(objects, "cardquota-controller")["containers"][0]["resources"] == {
        "requests": {"cpu": "2"}, "limits": {"memory": "8Gi"}}
    assert _pod(objects, "cardquota-extender")["containers"][0]["resources"] == {
        "requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "5Gi"}}


def _check_no_priority(objects: Objects) -> None:
    assert "priorityClassName" not in _pod(objects)
    assert "ResourceQuota" not in kinds(objects)


def _check_other_priority(objects: Objects) -> None:
    assert _pod(objects)["priorityClassName"] == "gpu-critical"
    quota = one(objects, "ResourceQuota", "cardquota-critical-pods")
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == ["gpu-critical"]


def _check_separate_controller(objects: Objects) -> None:
    assert env(_pod(objects)["containers"][0])["CARDQUOTA_ROLE"] == "webhook"
    controller = _pod(objects, "cardquota-controller")
    assert env(controller["containers"][0])["CARDQUOTA_ROLE"] == "controller"
    assert controller["serviceAccountName"] == "cardquota-controller"
    webhook_role = one(objects, "ClusterRole", "cardquota")
    assert not [rule for rule in webhook_role["rules"] if "pods" in rule["resources"]]  # no pods in its cache
    assert [rule for rule in one(objects, "ClusterRole", "cardquota-controller")["rules"]
            if "pods" in rule["resources"]]
    assert {"Service", "PodDisruptionBudget"} <= {obj["kind"] for obj in objects
                                                  if obj["metadata"]["name"] == "cardquota-controller"}


def _check_extender(objects: Objects) -> None:
    assert _deployment(objects, "cardquota-extender")["spec"]["replicas"] == 1
    conf = one(objects, "ConfigMap", "cardquota-extender-conf")
    assert conf["data"] == {"volcano-scheduler.conf":
                            (MANIFESTS / "components" / "extender" / "volcano-scheduler.conf").read_text()}
    policy = one(objects, "NetworkPolicy", "cardquota-extender")
    assert policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "volcano-system"}


def _check_no_network_policies(objects: Objects) -> None:
    assert "NetworkPolicy" not in kinds(objects)
    assert one(objects, "Deployment", "cardquota-extender")  # (the extender is on: its policy is off too)


def _check_network_policy_namespaces(objects: Objects) -> None:
    metrics = one(objects, "NetworkPolicy", "cardquota-metrics")["spec"]["ingress"][0]["from"][0]
    assert metrics["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "prometheus"}
    extender = one(objects, "NetworkPolicy", "cardquota-extender")["spec"]["ingress"][0]["from"][0]
    assert extender["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "scheduling"}
    assert extender["podSelector"] == {"matchLabels": {"app": "volcano-scheduler"}}


def _check_cert_manager(objects: Objects, *, own_issuer: bool = True) -> None:
    """cert-manager issues Secret cardquota-webhook-tls (the name the operator and doctor know) for the names the
    operator's own certificate carries; the Deployment mounts it and points --cert-dir at it (the operator then
    follows the files and writes no Secret nor caBundle: processes.serve_admissions); the CA injector fills the
    caBundle from that Certificate."""
    settings = Settings()
    serving = one(objects, "Certificate", "cardquota-webhook")
    assert serving["metadata"]["namespace"] == NAMESPACE
    assert serving["spec"]["secretName"] == settings.tls_secret
    assert set(serving["spec"]["dnsNames"]) == set(service_dns_names(settings.service, NAMESPACE))
    pod = _pod(objects)
    directory = env(pod["containers"][0])["CARDQUOTA_CERT_DIR"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == directory]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == settings.tls_secret
    assert mount["readOnly"] is True
    for obj in objects:
        if obj["kind"] in WEBHOOK_KINDS:
            assert obj["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/cardquota-webhook"
    issuers = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "Issuer"}
    if own_issuer:
        assert serving["spec"]["issuerRef"] == {"name": "cardquota-ca", "kind": "Issuer", "group": "cert-manager.io"}
        assert issuers == {"cardquota-selfsigned", "cardquota-ca"}
        ca = one(objects, "Certificate", "cardquota-ca")
        assert ca["spec"]["isCA"] is True
        assert one(objects, "Issuer", "cardquota-ca")["spec"]["ca"]["secretName"] == ca["spec"]["secretName"]
    else:
        assert serving["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
        assert issuers == set()


def _certificate_grants(rule: dict[str, Any]) -> bool:
    """A grant only the self-managed certificate uses: the Secret, the Deployment that owns it, the caBundle."""
    resources = set(rule["resources"])
    return bool(resources & {"secrets", "validatingwebhookconfigurations", "mutatingwebhookconfigurations"}) or (
        "deployments" in resources and rule.get("resourceNames") == [Settings().deployment])


@pytest.mark.parametrize("separate", [False, True])
def test_with_cert_manager_the_operator_loses_the_grants_of_its_own_certificate(separate: bool) -> None:
    """With a mounted certificate the operator reads files and writes no Secret and no caBundle
    (processes.serve_admissions), so its roles keep every other grant and none of those."""
    values: dict[str, Any] = {"separateController": {"enabled": separate}}
    self_managed, cert_manager = render(values), render({**values, "tls": {"mode": "cert-manager"}})
    dropped = 0
    for kind in ("ClusterRole", "Role"):
        rules = one(self_managed, kind, "cardquota")["rules"]
        dropped += sum(map(_certificate_grants, rules))
        assert one(cert_manager, kind, "cardquota")["rules"] == [r for r in rules if not _certificate_grants(r)]
    assert dropped == 4  # secrets create, secrets get/patch, the Deployment's get, the two configurations
    assert [one(cert_manager, "ClusterRole", name) for name in ("cardquota-controller",) if separate] == [
        one(self_managed, "ClusterRole", name) for name in ("cardquota-controller",) if separate]


def _own_labels(obj: dict[str, Any]) -> dict[str, str]:
    """An object's labels but Helm's and cardquota's own (app.kubernetes.io/*, helm.sh/*)."""
    return {name: value for name, value in obj["metadata"]["labels"].items()
            if not name.startswith(("app.kubernetes.io/", "helm.sh/"))}


def _check_service_monitor(objects: Objects) -> None:
    monitor = one(objects, "ServiceMonitor", "cardquota")
    assert monitor["spec"]["endpoints"][0]["interval"] == "15s"
    # what kube-prometheus-stack's Prometheus selects by default, under the release name its README installs
    assert _own_labels(monitor) == {"release": "kube-prometheus-stack"}


def _check_service_monitor_labels(objects: Objects) -> None:
    """serviceMonitor.labels: another release name, a label of one's own; the chart's labels stay."""
    monitor = one(objects, "ServiceMonitor", "cardquota")
    assert _own_labels(monitor) == {"release": "prometheus", "team": "gpu"}
    assert monitor["metadata"]["labels"]["app.kubernetes.io/name"] == "cardquota"


def _check_service_monitor_without_release(objects: Objects) -> None:
    """serviceMonitor.labels.release: null leaves the label out (a Prometheus that selects by something else)."""
    assert _own_labels(one(objects, "ServiceMonitor", "cardquota")) == {}


def _check_dashboard(objects: Objects) -> None:
    dashboard = one(objects, "ConfigMap", "cardquota-dashboard")
    assert dashboard["metadata"]["namespace"] == NAMESPACE
    assert _own_labels(dashboard) == {"grafana_dashboard": "1"}
    assert json.loads(dashboard["data"]["cardquota.json"]) == json.loads(
        (MANIFESTS / "components" / "grafana" / "dashboard.json").read_text())


def _check_dashboard_for_a_sidecar_elsewhere(objects: Objects) -> None:
    """grafanaDashboard.namespace and .labels: in Grafana's namespace, for a sidecar that searches only its own
    (the grafana chart's searchNamespace: null) and selects another label; everything else stays in cardquota's."""
    dashboard = one(objects, "ConfigMap", "cardquota-dashboard")
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert _own_labels(dashboard) == {"dashboards": "cardquota"}
    assert {obj["metadata"].get("namespace") for obj in objects if obj is not dashboard} <= {NAMESPACE, None}


EVERYTHING = {"namespace": {"create": True}, "separateController": {"enabled": True}, "extender": {"enabled": True},
              "tls": {"mode": "cert-manager"}, "serviceMonitor": {"enabled": True},
              "grafanaDashboard": {"enabled": True}}

OPTIONS: dict[str, tuple[dict[str, Any], Callable[[Objects], None]]] = {
    "defaults": ({}, _check_defaults),
    "namespace.create": ({"namespace": {"create": True}}, _check_namespace_created),
    "namespace.name": ({**EVERYTHING, "namespace": {"name": "gpu-admin"}}, _check_namespace_named),
    "image": ({"image": {"repository": "registry.example/gpu/cardquota", "tag": "1.2.3", "pullPolicy": "Always"},
               "separateController": {"enabled": True}, "extender": {"enabled": True}}, _check_image),
    "replicas": ({"replicas": 3, "separateController": {"enabled": True, "replicas": 4}}, _check_replicas),
    "logFormat": ({"logFormat": "text"}, _check_log_format),
    "mapNamespaceQueues": ({"mapNamespaceQueues": True, "separateController": {"enabled": True},
                            "extender": {"enabled": True}}, _check_namespace_queues),
    "cardPolicy": ({"unquotedQueues": "unlimited", "cardPodsOutsideVolcano": "enforce",
                    "separateController": {"enabled": True}, "extender": {"enabled": True}}, _check_card_policy),
    "trustedCIDRs": ({"trustedCIDRs": ["10.0.0.0/24", "fd00::1"], "separateController": {"enabled": True},
                      "extender": {"enabled": True, "trustedCIDRs": ["10.244.0.0/16"]}}, _check_trusted_cidrs),
    "resources": ({"resources": {"requests": {"cpu": "1"}, "limits": {"memory": "3Gi"}},
                   "separateController": {"enabled": True, "resources": {"requests": {"cpu": "2", "memory": None},
                                                                          "limits": {"memory": "8Gi"}}},
                   "extender": {"enabled": True, "resources": {"limits": {"memory": "5Gi"}}}}, _check_resources),
    "priorityClassName.empty": ({"priorityClassName": ""}, _check_no_priority),
    "priorityClassName.other": ({"priorityClassName": "gpu-critical"}, _check_other_priority),
    "separateController": ({"separateController": {"enabled": True}}, _check_separate_controller),
    "extender": ({"extender": {"enabled": True}}, _check_extender),
    "networkPolicy.off": ({"networkPolicy": {"enabled": False}, "extender": {"enabled": True}},
                          _check_no_network_policies),
    "networkPolicy.namespaces": ({"networkPolicy": {"metricsNamespace": "prometheus",
                                                    "schedulerNamespace": "scheduling"},
                                  "extender": {"enabled": True}}, _check_network_policy_namespaces),
    "tls.cert-manager": ({"tls": {"mode": "cert-manager"}}, _check_cert_manager),
    "tls.cert-manager.issuerRef": ({"tls": {"mode": "cert-manager", "certManager": {
        "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}}}},
        functools.partial(_check_cert_manager, own_issuer=False)),
    "serviceMonitor": ({"serviceMonitor": {"enabled": True, "interval": "15s"}}, _check_service_monitor),
    "serviceMonitor.labels": ({"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus",
                                                                            "team": "gpu"}}},
                              _check_service_monitor_labels),
    "serviceMonitor.labels.release-null": ({"serviceMonitor": {"enabled": True, "labels": {"release": None}}},
                                           _check_service_monitor_without_release),
    "grafanaDashboard": ({"grafanaDashboard": {"enabled": True}}, _check_dashboard),
    "grafanaDashboard.elsewhere": ({"grafanaDashboard": {"enabled": True, "namespace": "monitoring", "labels": {
        "grafana_dashboard": None, "dashboards": "cardquota"}}}, _check_dashboard_for_a_sidecar_elsewhere),
}


def _lint_findings(values: dict[str, Any]) -> list[str]:
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
    # severity 1 is information: Chart.yaml's "icon is recommended" (the project has no icon); 2 warning, 3 error
    return [*report["errors"], *(f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2)]


@pytest.mark.parametrize("option", OPTIONS)
def test_each_option_lints_clean_renders_and_does_what_it_says(option: str) -> None:
    values, check = OPTIONS[option]
    assert _lint_findings(values) == []
    check(render(values, namespace="gpu-admin" if option == "namespace.name" else NAMESPACE))


def test_lint_reports_a_broken_template(tmp_path: Path) -> None:
    """(the lint above is Helm's: it finds a template that does not parse, in a copy of the chart)"""
    copied = tmp_path / "cardquota"
    shutil.copytree(CHART, copied)  # (the manifests the link points at are copied in)
    with (copied / "templates" / "service-broken.yaml").open("w") as broken:
        broken.write("{{- if .Values.replicas }}\nkind: Service\n")
    report = helm.lint(copied, {}, strict=True, namespace=NAMESPACE)
    assert [m for m in report["messages"] if m["severity"] == 3 and "service-broken.yaml" in m["error"]], report


@pytest.mark.parametrize(("values", "message"), [
    ({"separateControler": {"enabled": True}}, "additional properties 'separateControler' not allowed"),
    ({"extender": {"enable": True}}, "additional properties 'enable' not allowed"),
    ({"tls": {"mode": "letsencrypt"}}, "at '/tls/mode': value must be one of 'self-managed', 'cert-manager'"),
    ({"replicas": 0}, "at '/replicas': minimum: got 0, want 1"),
    ({"image": {"pullPolicy": "Sometimes"}}, "at '/image/pullPolicy'"),
    ({"namespace": {"name": "GPU_admin"}}, "at '/namespace/name'"),
    ({"grafanaDashboard": {"namespace": "Monitoring"}}, "at '/grafanaDashboard/namespace'"),
    ({"serviceMonitor": {"labels": {"release": 1}}}, "at '/serviceMonitor/labels/release'"),
])
def test_values_schema_refuses_a_misspelt_or_impossible_value(values: dict[str, Any], message: str) -> None:
    """values.schema.json: a misspelt key would otherwise be ignored silently (the option left at its default)."""
    with pytest.raises(helm.HelmValuesError, match=re.escape(message)):
        _chart().render(values=values, name=RELEASE, namespace=NAMESPACE)
    assert any(message in finding for finding in _lint_findings(values))


def _paths(values: dict[str, Any], schema: dict[str, Any], where: str = "") -> Iterator[tuple[str, bool]]:
    """(each key path of values.yaml, whether the schema names it)"""
    definitions = json.loads((CHART / "values.schema.json").read_text())["definitions"]
    for name, value in values.items():
        known = schema.get("properties", {}).get(name)
        if known is not None and "$ref" in known:
            known = definitions[known["$ref"].rsplit("/", 1)[1]]
        yield f"{where}.{name}", known is not None
        if known is not None and isinstance(value, dict) and known.get("additionalProperties") is False:
            yield from _paths(value, known, f"{where}.{name}")


def test_the_schema_names_every_value_and_accepts_the_defaults() -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    paths = dict(_paths(defaults, schema))
    assert [path for path, known in paths.items() if not known] == []
    assert {".tls.certManager.issuerRef", ".separateController.resources", ".networkPolicy.metricsNamespace"} <= set(
        paths)
    assert defaults == _chart().values
    for values in [defaults, *(values for values, _ in OPTIONS.values())]:
        _chart().validate_schema(values)  # (raises HelmValuesError on a value the schema refuses)


def test_an_empty_image_repository_fails_the_render_with_its_name() -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape("image.repository: name your registry's cardquota image")):
        _chart().render(values={"image": {"repository": ""}}, name=RELEASE, namespace=NAMESPACE)


def test_the_packaged_chart_renders_the_same_objects(tmp_path: Path) -> None:
    """`helm package` copies the linked manifests into the archive (and leaves out what .helmignore names: the
    overlays, the transformers), so an archive installs what the directory does."""
    archive = Path(helm.package(CHART, destination=tmp_path))
    assert archive.name == f"cardquota-{VERSION}.tgz"
    with tarfile.open(archive) as packed:
        names = packed.getnames()
    assert "cardquota/files/manifests/base/webhooks.yaml" in names
    assert not [name for name in names if "/overlays/" in name or "/transformers/" in name]
    with helm.Chart.load_archive(archive.read_bytes()) as packaged:
        rendered = packaged.render(values=EVERYTHING, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = [document for text in rendered.values() for document in yaml.safe_load_all(text) if document]
    assert {key(obj): obj for obj in objects} == {key(obj): obj for obj in render(EVERYTHING)}


# ------------------------------------------------------------------------------ kubernetes-validate, strictly


@pytest.mark.parametrize("option", OPTIONS)
def test_rendered_objects_validate_strictly(option: str) -> None:
    """Every version from the oldest supported to the newest for the defaults and everything on; the oldest and the
    newest for the other options (the same templates, other values)."""
    values, _ = OPTIONS[option]
    versions = VERSIONS if option in ("defaults", "namespace.name") else sorted({OLDEST, VERSIONS[-1]})
    unknown = {**EXPECTED_UNKNOWN, **CHART_UNKNOWN}
    problems, validated = [], 0
    for version in versions:
        for obj in render(values):
            if (obj["apiVersion"], obj["kind"]) in unknown:
                continue
            validated += 1
            problems += [f"{version} {obj['kind']}/{obj['metadata']['name']}: {error}"
                         for error in validate_strict(obj, version)]
    assert problems == []
    assert validated >= 10 * len(versions)


# ------------------------------------------------------------------------------------------------- webhooks


def test_the_webhooks_are_the_manifests_webhooks() -> None:
    """In cardquota-system the chart's webhook configurations are base/webhooks.yaml's to the letter, so every check
    of test_match_conditions.py and test_manifests.py over that file (rules, failure policies, CEL conditions,
    namespaceSelectors, no caBundle) holds for the chart. Only Helm's labels are added; with cert-manager, the CA
    injector's annotation."""
    shipped = {document["metadata"]["name"]: document for document in configuration_documents()}
    for values in ({}, {"tls": {"mode": "cert-manager"}}):
        rendered = [obj for obj in render(values) if obj["kind"] in WEBHOOK_KINDS]
        assert {obj["metadata"]["name"] for obj in rendered} == set(shipped) == set(Settings().webhook_configurations)
        for obj in rendered:
            metadata = obj["metadata"]
            assert metadata.pop("labels") == {"app.kubernetes.io/name": "cardquota",
                                              "app.kubernetes.io/part-of": "cardquota", **HELM_LABELS}
            if values:
                injected = {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/cardquota-webhook"}
                assert metadata.pop("annotations") == injected
            assert obj == shipped[metadata["name"]]


CARD_QUEUE = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
              "metadata": {"name": "team-a", "annotations": {"volcano.sh/card.quota": '{"NVIDIA-A100": 8}'}},
              "spec": {"weight": 1}}


@pytest.mark.parametrize("namespace", ["gpu-admin", NAMESPACE])
def test_the_webhooks_follow_the_namespace_value(namespace: str) -> None:
    """As manifests/transformers/namespace does for an overlay: the CEL condition that lets cardquota's own writes
    through names the accounts in ``namespace`` (a card Queue written by them skips the webhook; by the same names in
    another namespace it does not), and every namespaceSelector leaves ``namespace`` out. Nothing else names
    cardquota-system (the extender's conf is data: a comment in it names the default namespace)."""
    objects = render({**EVERYTHING, "namespace": {"name": namespace}})
    assert [f"{hook['name']}: {found}" for hook in webhooks(objects)
            if (found := other_namespaces(hook, namespace))] == []
    own = sorted(Settings(namespace=namespace).own_users)
    stranger = "elsewhere" if namespace == NAMESPACE else NAMESPACE
    queue_hooks = [hook for hook in webhooks(objects) if hook["name"] == "queues.validate.cardquota.io"]
    assert len(queue_hooks) == 1
    (hook,) = queue_hooks
    assert any(condition["name"] == OWN_WRITES_CONDITION for condition in hook["matchConditions"])
    for user in own:
        assert decide(hook, CARD_QUEUE, None, operation="CREATE", user=user) is Decision.SKIP, user
        assert decide(hook, CARD_QUEUE, None, operation="CREATE",
                      user=user.replace(f":{namespace}:", f":{stranger}:")) is Decision.CALL, user
    assert decide(hook, CARD_QUEUE, None, operation="CREATE", user="alice") is Decision.CALL
    if namespace != NAMESPACE:
        leftovers = [obj["kind"] for obj in objects if obj["kind"] != "ConfigMap"
                     and any(NAMESPACE in text for text in strings(obj))]
        assert leftovers == []


# ------------------------------------------------------------------------------------------ = the overlays


def _kustomization(folder: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((folder / "kustomization.yaml").read_text())
    return loaded


def image_values(overlay: Path) -> dict[str, Any]:
    """The overlay's own image setting (kustomize `images`), else its bases', as the chart's image values."""
    for entry in _kustomization(overlay).get("images", []):
        if entry["name"] == "cardquota":
            assert "newTag" in entry, f"{overlay}: an image without a tag, which the chart's image values cannot say"
            return {"repository": entry.get("newName", "cardquota"), "tag": str(entry["newTag"])}
    for resource in _kustomization(overlay).get("resources", []):
        if (overlay / resource / "kustomization.yaml").is_file():
            return image_values((overlay / resource).resolve())
    raise AssertionError(f"{overlay}: no kustomize `images` entry for cardquota here nor in its bases")


# The settings each overlay expresses (its components and patches), as values. The image is read from the overlay.
# The settings each overlay expresses (its components and patches) as `helm install --set` arguments (what the
# install instructions give), parsed by Helm's own parser. The image is read from the overlay (image_values).
DEV = "namespace.create=true,image.pullPolicy=Never,logFormat=text"
OVERLAYS: dict[str, str] = {
    "dev": DEV,
    "dev-extender": f"{DEV},extender.enabled=true",
    # (its patch of the webhooks' Deployment sets the requested cpu; the rest of its resources are the defaults)
    "production": "namespace.create=true,separateController.enabled=true,serviceMonitor.enabled=true,"
                  "grafanaDashboard.enabled=true,resources.requests.cpu=500m",
}
# Overlays of our own over a copy of manifests/ (kustomize reads no absolute paths): a component over the base.
OWN_OVERLAYS: dict[str, tuple[str, list[str], dict[str, Any]]] = {
    "separate-controller": (NAMESPACE, ["separate-controller"],
                            {"namespace": {"create": True}, "separateController": {"enabled": True}}),
    "everything-elsewhere": ("gpu-admin", ["separate-controller", "extender", "metrics", "grafana"],
                             {"namespace": {"create": True, "name": "gpu-admin"},
                              "separateController": {"enabled": True}, "extender": {"enabled": True},
                              "serviceMonitor": {"enabled": True}, "grafanaDashboard": {"enabled": True}}),
    "namespace-queues": (NAMESPACE, ["separate-controller", "namespace-queues"],
                         {"namespace": {"create": True}, "separateController": {"enabled": True},
                          "mapNamespaceQueues": True}),
    "namespace-queues-elsewhere": ("gpu-admin", ["namespace-queues"],
                                   {"namespace": {"create": True, "name": "gpu-admin"}, "mapNamespaceQueues": True}),
    "no-card-gate": (NAMESPACE, ["no-card-gate"], {"namespace": {"create": True}, "cardGate": {"enabled": False}}),
    "separate-controller-no-card-gate": (NAMESPACE, ["separate-controller", "no-card-gate"],
                                         {"namespace": {"create": True}, "separateController": {"enabled": True},
                                          "cardGate": {"enabled": False}}),
}


def _differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        found = []
        for name in sorted(set(expected) | set(actual)):
            where = f"{path}.{name}"
            if name not in actual:
                found.append(f"{where}: only in the overlay")
            elif name not in expected:
                found.append(f"{where}: only in the chart")
            else:
                found += _differences(expected[name], actual[name], where)
        return found
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [line for index, (e, a) in enumerate(zip(expected, actual, strict=True))
                for line in _differences(e, a, f"{path}[{index}]")]
    return [] if expected == actual else [f"{path}: overlay {expected!r}, chart {actual!r}"]


def compare(overlay: Objects, chart: Objects) -> list[str]:
    """Every difference between the overlay's objects and the chart's, once the allow-list (HELM_LABELS) is taken
    out of the chart's (each of those labels must be there)."""
    chart = copy.deepcopy(chart)
    problems = []
    for obj in chart:
        labels = obj["metadata"].get("labels", {})
        for name, value in HELM_LABELS.items():
            if labels.pop(name, None) != value:
                problems.append(f"{'/'.join(key(obj))}: label {name} is not {value!r}")
    theirs, ours = {key(obj): obj for obj in overlay}, {key(obj): obj for obj in chart}
    problems += [f"{'/'.join(k)}: only in the overlay" for k in sorted(set(theirs) - set(ours))]
    problems += [f"{'/'.join(k)}: only in the chart" for k in sorted(set(ours) - set(theirs))]
    for k in sorted(set(theirs) & set(ours)):
        problems += [f"{'/'.join(k)} {line}" for line in _differences(theirs[k], ours[k])]
    assert len(theirs) == len(overlay), "two objects of the same kind, name and namespace"
    assert len(ours) == len(chart), "two objects of the same kind, name and namespace"
    return problems


needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (kubectl kustomize renders the "
                                                           "overlays the chart is compared with)")


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_chart_renders_the_overlays_objects(overlay: str) -> None:
    folder = MANIFESTS / "overlays" / overlay
    values = helm.parse_set_string(OVERLAYS[overlay])
    values["image"] = {**values.get("image", {}), **image_values(folder)}
    rendered = kustomize(folder)
    assert compare(rendered, render(values)) == []
    assert len(rendered) >= 13


@needs_kubectl
@pytest.mark.parametrize("name", OWN_OVERLAYS)
def test_the_chart_renders_what_the_components_add(tmp_path: Path, name: str) -> None:
    namespace, components, values = OWN_OVERLAYS[name]
    shutil.copytree(MANIFESTS, tmp_path / "manifests")
    folder = tmp_path / "manifests" / "overlays" / name
    folder.mkdir()
    (folder / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": namespace,
        "transformers": ["../../transformers/namespace"], "resources": ["../../base"],
        "components": [f"../../components/{component}" for component in components],
        # (the base's `images` do not reach what a component adds after it: every overlay sets its own)
        "images": [{"name": "cardquota", "newTag": VERSION}]}))
    rendered = kustomize(folder)
    assert compare(rendered, render({**values, "image": image_values(folder)}, namespace=namespace)) == []
    assert {obj["metadata"].get("namespace") for obj in rendered} == {namespace, None}


def test_the_comparison_names_each_difference() -> None:
    """(what the two tests above would print) a changed field, a missing object and a missing Helm label."""
    chart = render({})
    overlay = copy.deepcopy(chart)
    for obj in overlay:
        for name in HELM_LABELS:
            obj["metadata"]["labels"].pop(name)
    assert compare(overlay, chart) == []
    one(overlay, "Deployment", "cardquota")["spec"]["replicas"] = 5
    overlay.append({"kind": "ConfigMap", "metadata": {"name": "extra", "namespace": NAMESPACE}})
    del one(chart, "Service", "cardquota")["metadata"]["labels"]["helm.sh/chart"]
    assert compare(overlay, chart) == [
        f"Service/cardquota/{NAMESPACE}: label helm.sh/chart is not 'cardquota-{VERSION}'",
        f"ConfigMap/extra/{NAMESPACE}: only in the overlay",
        f"Deployment/cardquota/{NAMESPACE} .spec.replicas: overlay 5, chart 2",
    ]
