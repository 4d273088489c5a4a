"""The deployment as shipped: every YAML under manifests/ and crds/, the Dockerfile, the Makefile and the Grafana
dashboard hold the invariants a cluster admin relies on — checked offline against the code they deploy, so the
manifests cannot drift from the operator (ports, names, failure modes, metric names, webhook routes)."""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import celpy
import jsonpatch
import jsonschema
import pytest
import yaml
from builders import container, pod, podgroup
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client
from object_walk import walk
from volcano_crds import patched_crd

from cardquota.core.ledger import Ledger
from cardquota.core.policies.config import DEFAULT_SCHEDULER_CONFIGMAP, FailureMode, PolicyConfig
from cardquota.core.policies.cronjob import admit as admit_volcano_cronjob
from cardquota.core.policies.pod import admit as admit_pod
from cardquota.core.policies.registry import POLICIES
from cardquota.core.policies.schedconf import admit as admit_schedconf
from cardquota.core.policies.schedconf import conf_violations
from cardquota.core.policies.workload import admit as admit_workload
from cardquota.core.schedconf.fragment import EXTENDER_URL, extender_stanza, gated_stanza, merged_conf
from cardquota.core.schedconf.source import EXTENDER_CONFIGMAP
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.kube import CACHED_RESOURCES, DRA_GROUP
from cardquota.loader import load_paths
from cardquota.operator.controller import Publisher
from cardquota.operator.metrics import QueueCardCollector
from cardquota.operator.reflector import CLAIM_KINDS
from cardquota.operator.settings import Role, Settings
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.metrics import REGISTRY
from cardquota.webhooks.admission import ADMITTED
from cardquota.webhooks.kinds import AdmittedKind

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
NAMESPACE = "cardquota-system"
PROTECTED_NAMESPACES = ("kube-system", NAMESPACE)
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
KUSTOMIZE_FILES = {"kustomization.yaml"}


def _documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def _yaml_files() -> list[Path]:
    return sorted([*MANIFESTS.rglob("*.yaml"), *(REPO / "crds").rglob("*.yaml")])


def _objects(folder: Path) -> list[dict[str, Any]]:
    return [document for path in sorted(folder.glob("*.yaml")) if path.name not in KUSTOMIZE_FILES
            for document in _documents(path)]


BASE = _objects(MANIFESTS / "base")


def _one(kind: str, objects: list[dict[str, Any]] = BASE) -> dict[str, Any]:
    found = [obj for obj in objects if obj["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _webhooks(kind: str) -> list[dict[str, Any]]:
    hooks: list[dict[str, Any]] = _one(kind)["webhooks"]
    return hooks


ALL_WEBHOOKS = [*_webhooks("ValidatingWebhookConfiguration"), *_webhooks("MutatingWebhookConfiguration")]
CONTAINER = _one("Deployment")["spec"]["template"]["spec"]["containers"][0]


# ----------------------------------------------------------------------------------------------- every file


@pytest.mark.parametrize("path", _yaml_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_yaml_file_parses_into_named_kubernetes_objects(path: Path) -> None:
    documents = _documents(path)
    assert documents, f"{path} is empty"
    for document in documents:
        assert document.get("apiVersion"), f"{path}: a document without apiVersion"
        assert document.get("kind"), f"{path}: a document without kind"
        if path.name not in KUSTOMIZE_FILES:
            assert document["metadata"]["name"], f"{path}: a {document['kind']} without a name"


def test_namespaced_objects_live_in_the_operator_namespace() -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration",
                      "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for obj in BASE:
        expected = None if obj["kind"] in cluster_scoped else NAMESPACE
        assert obj["metadata"].get("namespace") == expected, f"{obj['kind']} {obj['metadata']['name']}"


# ------------------------------------------------------------------------------------------------------ RBAC


def _rules(kind: str) -> list[dict[str, Any]]:
    """The rules of every ``kind`` of the base (all bound to the operator's account: see the bindings' test)."""
    return [rule for obj in BASE if obj["kind"] == kind for rule in obj["rules"]]


def _grants(kind: str) -> dict[tuple[str, str, str], set[str]]:
    """(apiGroup, resource, resourceName or "") -> verbs, of the base's ClusterRole or Role."""
    return _grants_of([{"rules": _rules(kind)}])


def _grants_of(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], set[str]]:
    """(apiGroup, resource, resourceName or "") -> verbs, of every rule of the objects."""
    grants: dict[tuple[str, str, str], set[str]] = {}
    for obj in objects:
        for rule in obj.get("rules") or []:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for name in rule.get("resourceNames") or [""]:
                        grants.setdefault((group, resource, name), set()).update(rule["verbs"])
    return grants


def test_rbac_has_no_wildcard_anywhere() -> None:
    for kind in ("ClusterRole", "Role"):
        for rule in _rules(kind):
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in (rule.get(field) or []), f"{kind} {field} has a wildcard"
                assert not any("*" in str(item) for item in rule.get(field) or []), f"{kind} {field}"


def test_the_cluster_role_grants_exactly_what_the_operator_calls() -> None:
    settings = Settings()
    expected: dict[tuple[str, str, str], set[str]] = {}
    for prefix, plural, _, _ in CACHED_RESOURCES:  # the initial full list, then Kopf's watches
        group = "" if prefix == "/api/v1" else prefix.split("/")[2]
        expected[(group, plural, "")] = {"list", "watch"}
    expected[("", "nodes", "")].add("patch")  # volcano.sh/card.types
    expected[("", "pods", "")] |= {"get", "patch"}  # the card-quota gate (ClusterRole cardquota-card-gate): a pod
    # read before its A|B request is narrowed, and the lift written; and the DRA claims it reads for DRA quotas
    expected[("", "pods/eviction", "")] = {"create"}  # the gate's preemption: victims evicted, budgets holding
    expected[("policy", "poddisruptionbudgets", "")] = {"list"}  # (read before a victim gang is evicted)
    for plural, _ in CLAIM_KINDS:
        expected[("resource.k8s.io", plural, "")] = {"list", "watch"}
    expected[("scheduling.volcano.sh", "queues", "")].add("patch")  # card.allocated/.inqueue/.pending/.usage
    expected[("scheduling.volcano.sh", "queues", "")].add("get")  # read again after a patch refused as too large
    expected[("", "events", "")] = {"create"}
    expected[("apiextensions.k8s.io", "customresourcedefinitions", "queues.scheduling.volcano.sh")] = {"get"}
    for resource in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        for name in settings.webhook_configurations:
            expected[("admissionregistration.k8s.io", resource, name)] = {"get", "patch"}
    assert _grants("ClusterRole") == expected


def test_the_namespaced_role_covers_only_the_tls_secret_and_the_lease() -> None:
    role = _one("Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert _grants("Role") == {
        ("", "secrets", ""): {"create"},
        ("", "secrets", Settings().tls_secret): {"get", "patch"},
        ("apps", "deployments", Settings().deployment): {"get"},
        ("coordination.k8s.io", "leases", ""): {"create"},
        ("coordination.k8s.io", "leases", "cardquota-controller"): {"get", "patch"},
        ("", "configmaps", EXTENDER_CONFIGMAP): {"get"},  # the plugins' arguments the events apply
    }


def test_bindings_give_the_roles_to_the_deployment_service_account() -> None:
    account = _one("ServiceAccount")["metadata"]["name"]
    assert _one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == account
    for binding, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        bindings = [obj for obj in BASE if obj["kind"] == binding]
        roles = {obj["metadata"]["name"] for obj in BASE if obj["kind"] == role}
        assert {obj["roleRef"]["name"] for obj in bindings} == roles  # every role bound, once
        for obj in bindings:
            assert obj["roleRef"]["apiGroup"] == "rbac.authorization.k8s.io"
            assert obj["roleRef"]["kind"] == role
            assert obj["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]


# -------------------------------------------------------------------------------------------------- webhooks


def _admitted_kind(hook: dict[str, Any]) -> AdmittedKind:
    (rule,) = hook["rules"]
    group, resource = rule["apiGroups"][0], rule["resources"][0]
    kinds = {(kind.group, f"{kind.kind.lower()}s"): kind for kind in ADMITTED.values()}
    return kinds[(group, resource)]


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A LabelSelector against a label set (matchLabels and the In/NotIn/Exists/DoesNotExist expressions)."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if not {"In": present and labels[key] in values, "NotIn": not present or labels[key] not in values,
                "Exists": present, "DoesNotExist": not present}[operator]:
            return False
    return True


@pytest.mark.parametrize("hook", ALL_WEBHOOKS, ids=lambda hook: hook["name"])
def test_every_webhook_has_the_safe_settings(hook: dict[str, Any]) -> None:
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert hook["timeoutSeconds"] == 5
    for namespace in PROTECTED_NAMESPACES:
        assert not _selects(hook["namespaceSelector"], {"kubernetes.io/metadata.name": namespace}), namespace
    assert _selects(hook["namespaceSelector"], {"kubernetes.io/metadata.name": "volcano-system"})


@pytest.mark.parametrize("hook", ALL_WEBHOOKS, ids=lambda hook: hook["name"])
def test_failure_policy_follows_the_kinds_failure_mode(hook: dict[str, Any]) -> None:
    """The API server's failurePolicy says what happens when cardquota cannot be reached; the kind's failure mode
    what cardquota answers when it cannot check: the same for the validating webhook of creates and updates. A
    webhook that can only warn (queue deletions) or only put a value in canonical form (the queue's card.quota)
    fails open: refusing a write for it would stop what cardquota never refuses. A mutation that changes what happens
    to the object (a Job's derived card.request, a pod's node affinity) follows its kind."""
    kind = _admitted_kind(hook)
    validating = hook in _webhooks("ValidatingWebhookConfiguration")
    operations = set(hook["rules"][0]["operations"])
    decides = (validating and operations & {"CREATE", "UPDATE"}) or (not validating and kind.mutation_matters)
    mode = kind.failure_mode if decides else FailureMode.OPEN
    if hook["name"] == GATED_MUTATION:
        mode = FailureMode.CLOSED  # it adds the card-quota gate: see the next test
    assert hook["failurePolicy"] == {FailureMode.OPEN: "Ignore", FailureMode.CLOSED: "Fail"}[mode]


GATED_MUTATION = "pods.mutate.cardquota.io"


def test_the_card_pod_mutation_fails_closed_with_the_gate_and_open_without() -> None:
    """The pod mutation adds the card-quota scheduling gate: a card pod it never saw would be placed unchecked, a
    refused one is created again by its controller (docs/troubleshooting.md). components/no-card-gate puts it back
    to Ignore, drops the gate's role and binding and the Deployments' CARDQUOTA_CARD_GATE."""
    (hook,) = [hook for hook in _webhooks("MutatingWebhookConfiguration") if hook["name"] == GATED_MUTATION]
    assert hook["failurePolicy"] == "Fail"
    assert hook["matchConditions"] == [{"name": "card-or-dra-claim-pods-only", "expression": (
        "(has(object.metadata.annotations) && 'volcano.sh/card.name' in object.metadata.annotations) || "
        "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)")}]
    assert {"name": "CARDQUOTA_CARD_GATE", "value": "1"} in CONTAINER["env"]
    component = _documents(MANIFESTS / "components" / "no-card-gate" / "kustomization.yaml")[0]
    patched = [json.dumps(patch) for patch in component["patches"]]
    assert any("failurePolicy" in text and "Ignore" in text and "/webhooks/2" in text for text in patched)
    assert [hook["name"] for hook in _webhooks("MutatingWebhookConfiguration")][2] == GATED_MUTATION


@pytest.mark.parametrize("hook", ALL_WEBHOOKS, ids=lambda hook: hook["name"])
def test_every_webhook_calls_the_operator_service_on_a_served_route(hook: dict[str, Any]) -> None:
    service = _one("Service")
    reference = hook["clientConfig"]["service"]
    assert (reference["name"], reference["namespace"]) == (service["metadata"]["name"], NAMESPACE)
    assert reference["name"] == Settings().service
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == reference["port"]]
    assert port["targetPort"] == "webhook"
    validating = hook in _webhooks("ValidatingWebhookConfiguration")
    assert re.fullmatch(r"/(validate|mutate)/[a-z]+", reference["path"])
    assert reference["path"].startswith("/validate/" if validating else "/mutate/")
    assert "caBundle" not in hook["clientConfig"], "the operator sets the caBundle; a stale one must not ship"


def test_the_webhooks_admit_exactly_the_kinds_of_the_core_registry_with_its_policies() -> None:
    """One list of admitted kinds (issue 21): the webhooks' table is derived from the core's POLICIES, which
    ``cardquota check`` uses too, so the CLI and the webhooks cannot judge different kinds."""
    assert set(ADMITTED) == set(POLICIES)
    assert all(kind.admit is POLICIES[key] for key, kind in ADMITTED.items())


def test_every_admitted_kind_is_validated_and_the_mutating_kinds_are_mutated() -> None:
    validated = {_admitted_kind(hook).kind for hook in _webhooks("ValidatingWebhookConfiguration")}
    mutated = {_admitted_kind(hook).kind for hook in _webhooks("MutatingWebhookConfiguration")}
    assert validated == {kind.kind for kind in ADMITTED.values()}
    # The policies that return patches: canonical card.quota, card.request from the tasks, the pod's affinity.
    assert mutated == {"Queue", "Job", "Pod"}


def test_the_webhook_configuration_names_are_the_ones_the_operator_patches() -> None:
    names = (_one("ValidatingWebhookConfiguration")["metadata"]["name"],
             _one("MutatingWebhookConfiguration")["metadata"]["name"])
    assert names == Settings().webhook_configurations


def test_queue_deletions_are_reviewed_and_pods_only_on_create() -> None:
    operations = {(hook["name"].split(".")[0], hook["name"].split(".")[1]): hook["rules"][0]["operations"]
                  for hook in ALL_WEBHOOKS}
    assert "DELETE" not in operations[("queues", "validate")]
    assert operations[("queuedeletions", "validate")] == ["DELETE"]
    assert operations[("pods", "validate")] == ["CREATE", "UPDATE"]  # UPDATE: only when a card annotation changes
    assert operations[("pods", "mutate")] == ["CREATE"]
    assert operations[("nodes", "validate")] == ["CREATE", "UPDATE"]


OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


def _readme_webhook_rows() -> list[tuple[str, tuple[str, ...], str]]:
    """manifests/README.md's webhook table as (path, operations, failurePolicy), one entry per path a row names."""
    text = (MANIFESTS / "README.md").read_text()
    section = text.split("\n## Webhooks\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in re.split(r"(?<!\\)\|", lines[0])[1:-1]]
    assert header[:4] == ["kind", "operations", "failurePolicy", "path"], header
    rows = []
    for line in lines[2:]:
        _kind, operations, policy, paths = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:5]]
        named = tuple(word for word in re.findall(r"[A-Z]+", operations) if word in OPERATIONS)
        routes = re.findall(r"`(/[a-z/]+)`", paths)
        assert named, f"manifests/README.md: a webhook row without operations: {line}"
        assert routes, f"manifests/README.md: a webhook row without a path: {line}"
        rows += [(route, named, policy) for route in routes]
    return rows


def test_the_readme_webhook_table_is_the_shipped_webhooks() -> None:
    """Each webhook of base/webhooks.yaml is a row (its path, operations and failurePolicy) of manifests/README.md's
    table, and each row's path is a shipped webhook's: the Node webhook listed as UPDATE only (issue 43) fails."""
    shipped = []
    for hook in ALL_WEBHOOKS:
        (rule,) = hook["rules"]
        shipped.append((hook["clientConfig"]["service"]["path"], tuple(rule["operations"]), hook["failurePolicy"]))
    assert sorted(_readme_webhook_rows()) == sorted(shipped)


def test_the_pod_mutation_is_reinvoked_after_later_mutating_webhooks() -> None:
    """Another mutating webhook running after ours may rewrite spec.affinity: the API server calls ours again
    (IfNeeded), and our patch is idempotent, so a pod that has the terms gets none."""
    (hook,) = [hook for hook in _webhooks("MutatingWebhookConfiguration") if hook["name"].startswith("pods.")]
    assert hook["reinvocationPolicy"] == "IfNeeded"
    card_pod = pod("p", card="NVIDIA-A100", gpus=1, queue="team-a")
    first = admit_pod(card_pod, None, EXAMPLE_SNAPSHOT, PolicyConfig())
    assert first.patch
    mutated = jsonpatch.apply_patch(card_pod, list(first.patch))
    assert admit_pod(mutated, None, EXAMPLE_SNAPSHOT, PolicyConfig()).patch == ()


# ----------------------------------------------------------------------------------- matchConditions (CEL)

CEL = celpy.Environment()


OWN_USER = f"system:serviceaccount:{NAMESPACE}:{Settings().service_account}"
NOT_OURS = "not-cardquota-itself"


def _condition(hook_name: str) -> Any:
    """The hook's matchConditions, all of which must hold for the API server to call it (the one excluding
    cardquota's own writes is tested on its own below)."""
    (hook,) = [hook for hook in ALL_WEBHOOKS if hook["name"] == hook_name]
    programs = [CEL.program(CEL.compile(condition["expression"])) for condition in hook["matchConditions"]]
    return lambda activation: all(bool(program.evaluate(activation)) for program in programs)


def _matches(program: Any, obj: Mapping[str, Any], user: str = "alice", old: Mapping[str, Any] | None = None) -> bool:
    """Would the API server call the hook for this object: a CREATE, or with ``old`` an UPDATE from it."""
    request = {"userInfo": {"username": user}, "operation": "CREATE" if old is None else "UPDATE"}
    return bool(program({"object": celpy.json_to_cel(dict(obj)), "oldObject": celpy.json_to_cel(old),
                         "request": celpy.json_to_cel(request)}))


@pytest.mark.parametrize("hook", ALL_WEBHOOKS, ids=lambda hook: hook["name"])
def test_the_writes_cardquota_makes_never_reach_its_own_webhooks(hook: dict[str, Any]) -> None:
    """The operator patches annotations of queues and nodes: those webhooks exclude its service accounts (the one the
    deployment runs as, and the controllers' when they run apart), so a down or refusing webhook cannot block the
    controller; the others never see it."""
    conditions = {condition["name"]: condition["expression"] for condition in hook.get("matchConditions") or []}
    kind = _admitted_kind(hook).kind
    if kind not in ("Queue", "Node"):
        assert NOT_OURS not in conditions
        return
    assert _one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == Settings().service_account
    program = CEL.program(CEL.compile(conditions[NOT_OURS]))
    own = Settings(namespace=NAMESPACE).own_users
    assert OWN_USER in own  # this process's account, and the controllers' when they run apart:
    assert own - {OWN_USER} == {f"system:serviceaccount:{NAMESPACE}:cardquota-controller"}
    for user, called in (*((user, False) for user in sorted(own)), ("alice", True),
                         (f"system:serviceaccount:{NAMESPACE}:other", True)):
        request = celpy.json_to_cel({"userInfo": {"username": user}})
        assert bool(program.evaluate({"request": request})) is called, user


VALIDATE_PODS = _condition("pods.validate.cardquota.io")
MUTATE_PODS = _condition("pods.mutate.cardquota.io")
EXAMPLE_SNAPSHOT = Ledger.build(d.manifest for d in load_paths([str(REPO / "examples" / "cluster.yaml")])).snapshot


@pytest.mark.parametrize(("manifest", "validated", "mutated"), [
    (pod("plain", containers=[container(requests={"cpu": "1", "memory": "1Gi"})]), False, False),
    (pod("no-resources", containers=[{"name": "c", "image": "i"}]), False, False),
    (pod("other-annotation", annotations={"team": "a"}), False, False),
    (pod("card", card="NVIDIA-A100", gpus=1), True, True),
    (pod("gpu-without-card-name", gpus=1), True, False),
    (pod("gpu-in-init-container", init_containers=[container(limits={"nvidia.com/gpu": "1"})]), True, False),
    (pod("mgpu", containers=[container(limits={"vke.volcengine.com/mgpu-core": "50"})]), True, False),
    (pod("mgpu-annotation", annotations={"vke.volcengine.com/container-multiple-gpu": "1"}), True, False),
    (pod("crossquota", annotations={"volcano.sh/crossquota-scoring-strategy": "most-allocated"}), True, False),
], ids=lambda value: value["metadata"]["name"] if isinstance(value, dict) else str(value))
def test_pod_match_conditions_let_through_exactly_the_pods_cardquota_acts_on(
    manifest: dict[str, Any], validated: bool, mutated: bool,
) -> None:
    assert _matches(VALIDATE_PODS, manifest) is validated
    assert _matches(MUTATE_PODS, manifest) is mutated


_resources = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "vke.volcengine.com/mgpu-core",
                     "vke.volcengine.com/mgpu-memory", "example.com/fpga", "hugepages-2Mi"]),
    st.sampled_from(["0", "1", "2", "100", "1Gi"]), max_size=3)
_annotations = st.dictionaries(
    st.sampled_from(["volcano.sh/card.name", "volcano.sh/crossquota-scoring-strategy", "team",
                     "vke.volcengine.com/container-multiple-gpu", "scheduling.volcano.sh/queue-name"]),
    st.sampled_from(["NVIDIA-A100", "NVIDIA-A100|NVIDIA-H100", "bogus", "most-allocated", "1", "default", ""]),
    max_size=3)


@given(annotations=_annotations, requests=_resources, limits=_resources, init=st.one_of(st.none(), _resources))
def test_a_pod_the_match_condition_skips_is_one_the_pod_policy_leaves_alone(
    annotations: dict[str, str], requests: dict[str, str], limits: dict[str, str], init: dict[str, str] | None,
) -> None:
    """Soundness of the filter: whenever the API server would not call the webhook, the pod policy would have
    allowed the pod unchanged, without a warning."""
    manifest = pod("p", annotations=annotations, containers=[container(requests=requests, limits=limits)],
                   init_containers=None if init is None else [container(limits=init)])
    verdict = admit_pod(manifest, None, EXAMPLE_SNAPSHOT, PolicyConfig())
    if not _matches(VALIDATE_PODS, manifest):
        assert (verdict.allowed, verdict.warnings, verdict.patch) == (True, (), ()), verdict
    if not _matches(MUTATE_PODS, manifest):
        assert not verdict.patch


@pytest.mark.parametrize(("before", "after", "called"), [
    ({"volcano.sh/card.name": "NVIDIA-A100"}, {"volcano.sh/card.name": "NVIDIA-A100", "team": "a"}, False),
    ({"volcano.sh/card.name": "NVIDIA-A100"}, {"volcano.sh/card.name": "NVIDIA-H100"}, True),
    ({"volcano.sh/card.name": "NVIDIA-A100"}, {}, True),
    ({}, {"volcano.sh/card.name": "NVIDIA-A100"}, True),
    ({"vke.volcengine.com/gpu-index": "0"}, {"vke.volcengine.com/gpu-index": "1"}, False),  # the extender's result
    ({}, {"volcano.sh/crossquota-scoring-strategy": "bogus"}, True),  # the pod policy judges these two as well
    ({"vke.volcengine.com/container-multiple-gpu": "1"}, {"vke.volcengine.com/container-multiple-gpu": "x"}, True),
    (None, {"volcano.sh/card.name": "garbage|"}, True),
])
def test_pod_updates_reach_the_webhook_only_when_an_annotation_the_policy_reads_changes(
        before: dict[str, str] | None, after: dict[str, str], called: bool) -> None:
    new = pod("p", gpus=1, annotations=after)
    old = None if before is None else pod("p", gpus=1, annotations=before)
    if before is not None and not before:
        del old["metadata"]["annotations"]  # type: ignore[index]
    assert _matches(VALIDATE_PODS, new, old=old) is called


def test_node_match_condition_only_sends_crossquota_annotated_nodes() -> None:
    program = _condition("nodes.validate.cardquota.io")
    node = {"metadata": {"name": "n", "annotations": {"volcano.sh/card.types": "{}"}}}
    assert not _matches(program, node)
    assert not _matches(program, {"metadata": {"name": "n"}})
    node["metadata"]["annotations"]["volcano.sh/crossquota-cpu"] = "8"
    assert _matches(program, node)


def test_the_scheduler_configmap_webhook_sees_only_the_scheduler_configmap() -> None:
    program = _condition("schedulerconfig.validate.cardquota.io")
    assert _matches(program, {"metadata": {"name": DEFAULT_SCHEDULER_CONFIGMAP}})
    assert not _matches(program, {"metadata": {"name": "kube-root-ca.crt"}})


# ------------------------------------------------------------------------------------- Deployment, Service


def test_deployment_runs_two_hardened_replicas_with_probes_and_resources() -> None:
    deployment = _one("Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = CONTAINER["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    # A read-only root filesystem: the serving certificate files go to an emptyDir at /tmp.
    (mount,) = CONTAINER["volumeMounts"]
    assert mount["mountPath"] == "/tmp"
    assert "emptyDir" in next(volume for volume in spec["volumes"] if volume["name"] == mount["name"])
    assert CONTAINER["resources"]["requests"]
    assert CONTAINER["resources"]["limits"]["memory"]
    assert CONTAINER["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert CONTAINER["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_the_webhook_replicas_run_at_a_critical_priority_their_namespace_admits() -> None:
    """The replicas serving the webhooks are on the admission path of every card object: system-cluster-critical, as
    Volcano's admission webhook runs. A cluster that limits critical classes with the ResourceQuota plugin's
    limitedResources admits such pods only where a ResourceQuota's scope covers the class: the base ships one, with
    room for the replicas and a rollout's surge twice over (terminating pods still count)."""
    deployment = _one("Deployment")
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
    quota = _one("ResourceQuota")
    assert quota["metadata"]["namespace"] == NAMESPACE
    assert quota["spec"]["scopeSelector"] == {"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["system-cluster-critical"]}]}
    assert set(quota["spec"]["hard"]) == {"pods"}  # it caps nothing but the critical pods
    surge = deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"]
    assert int(quota["spec"]["hard"]["pods"]) >= 2 * (deployment["spec"]["replicas"] + surge)
    assert "priorityClassName" not in _one("Deployment", SEPARATE)["spec"]["template"]["spec"], \
        "the controllers serve no admission: they keep the default priority"


def test_ports_match_the_operator_settings_and_the_service() -> None:
    settings = Settings()
    ports = {port["name"]: port["containerPort"] for port in CONTAINER["ports"]}
    assert ports == {"webhook": settings.port, "metrics": settings.metrics_port}
    env = {item["name"]: item.get("value") for item in CONTAINER["env"]}
    assert env["CARDQUOTA_WEBHOOK_PORT_NUMBER"] == str(settings.port)
    assert env["CARDQUOTA_METRICS_PORT_NUMBER"] == str(settings.metrics_port)
    assert env["CARDQUOTA_SERVICE"] == settings.service == _one("Service")["metadata"]["name"]
    service_targets = {port["targetPort"] for port in _one("Service")["spec"]["ports"]}
    assert service_targets == set(ports)


def test_service_and_disruption_budget_select_the_deployment_pods() -> None:
    labels = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert _selects(_one("Deployment")["spec"]["selector"], labels)
    assert _selects({"matchLabels": _one("Service")["spec"]["selector"]}, labels)
    budget = _one("PodDisruptionBudget")["spec"]
    assert _selects(budget["selector"], labels)
    assert budget["minAvailable"] == 1


def test_the_namespace_enforces_the_restricted_pod_security_standard() -> None:
    assert _one("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


# ------------------------------------------------------------------------------------ image, Dockerfile, make


def _kustomization(folder: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((MANIFESTS / folder / "kustomization.yaml").read_text())
    return document


def test_image_names_and_tags_are_consistent() -> None:
    assert CONTAINER["image"] == "cardquota"  # the name every overlay's `images` entry rewrites
    (base,) = _kustomization("base")["images"]
    assert (base["name"], base["newTag"]) == ("cardquota", VERSION)
    (production,) = _kustomization("overlays/production")["images"]
    assert (production["name"], production["newTag"]) == ("cardquota", VERSION)
    (dev,) = _kustomization("overlays/dev")["images"]
    makefile = (REPO / "Makefile").read_text()
    image = re.search(r"^IMAGE \?= (\S+)$", makefile, re.MULTILINE)
    assert image is not None
    assert f"{dev['newName']}:{dev['newTag']}" == image.group(1)
    assert "imagePullPolicy\n      value: Never" in (MANIFESTS / "overlays/dev/kustomization.yaml").read_text()


def test_dockerfile_runs_the_operator_as_a_non_root_user() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python:\$\{PYTHON_VERSION\}-slim$", dockerfile, re.MULTILINE)
    user = re.findall(r"^USER (\S+)$", dockerfile, re.MULTILINE)
    assert user
    assert user[-1].split(":")[0].isdigit()
    assert user[-1].split(":")[0] != "0"
    runs_as = _one("Deployment")["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    assert int(user[-1].split(":")[0]) == runs_as
    assert re.findall(r"^ENTRYPOINT (.+)$", dockerfile, re.MULTILINE)[-1] == '["cardquota", "operator"]'
    assert "PYTHONDONTWRITEBYTECODE=1" in dockerfile  # nothing written next to the code on a read-only root
    ignored = (REPO / ".dockerignore").read_text()
    for copied in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.MULTILINE):
        for path in copied.split():
            assert f"!{path}" in ignored or f"!{path}/" in ignored, f"{path} is copied but .dockerignore drops it"


def test_makefile_offers_the_deployment_targets_with_help_as_default() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^\.DEFAULT_GOAL := help$", makefile, re.MULTILINE)
    documented = set(re.findall(r"^([a-z0-9-]+):.*## ", makefile, re.MULTILINE))
    assert documented >= {"help", "demo", "test", "lint", "bench", "image", "deploy", "undeploy", "e2e", "kind-up",
                          "kind-down"}
    assert "apply -k manifests/overlays/dev" in makefile


def test_make_image_skips_with_a_message_without_docker(tmp_path: Path) -> None:
    result = subprocess.run(["make", "--no-print-directory", "image", "DOCKER=/nonexistent/docker"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "make image: skipped: no usable Docker daemon" in result.stdout


# --------------------------------------------------------------------------------------------------- CRDs


def _crd(name: str) -> dict[str, Any]:
    """Volcano's own CRD (v1.15.1, the release the e2e installs) with cardquota's additions."""
    return patched_crd(name, "v1.15.1")


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize(("crd_name", "kind"), [
    ("podgroups.scheduling.volcano.sh", "PodGroup"), ("jobs.batch.volcano.sh", "Job"),
])
def test_volcano_podgroup_and_job_crds_accept_the_bundled_examples(crd_name: str, kind: str) -> None:
    crd = _crd(crd_name)
    group, version = crd["spec"]["group"], crd["spec"]["versions"][0]["name"]
    files = [str(REPO / "examples" / "cluster.yaml"), *map(str, sorted((REPO / "examples" / "check").glob("*.yaml")))]
    examples = [dict(d.manifest) for d in load_paths(files) if d.manifest["kind"] == kind
                and d.manifest["apiVersion"] == f"{group}/{version}"]
    assert examples
    validator = jsonschema.Draft7Validator(_schema(crd))
    for manifest in examples:
        assert [error.message for error in validator.iter_errors(manifest)] == []


def test_the_volcano_podgroup_crd_rejects_a_negative_min_member() -> None:
    manifest = podgroup("pg")
    manifest["spec"]["minMember"] = -1
    assert list(jsonschema.Draft7Validator(_schema(_crd("podgroups.scheduling.volcano.sh"))).iter_errors(manifest))


def test_the_scheduler_configmap_example_enables_the_card_plugins_and_passes_the_policy() -> None:
    (document,) = _documents(REPO / "crds" / "examples" / "volcano-scheduler-configmap.yaml")
    assert document["metadata"]["name"] == DEFAULT_SCHEDULER_CONFIGMAP
    config = yaml.safe_load(document["data"]["volcano-scheduler.conf"])
    plugins = {plugin["name"] for tier in config["tiers"] for plugin in tier["plugins"]}
    assert {"capacity-card", "crossquota", "predicates"} <= plugins
    verdict = admit_schedconf(document, None, EXAMPLE_SNAPSHOT, PolicyConfig())
    assert verdict.allowed, verdict.message
    assert not verdict.warnings


# ---------------------------------------------------------------------------------------- Grafana dashboard


def _exported_metric_names() -> set[str]:
    """Every sample name /metrics can show (a Publisher is attached, so the controller's counters appear)."""
    cache = ClusterCache()
    cache.load(d.manifest for d in load_paths([str(REPO / "examples" / "cluster.yaml")]))
    collector = QueueCardCollector(cache, Publisher(cache, client.ApiClient()))
    names = {sample.name for family in collector.collect() for sample in family.samples}
    for family in REGISTRY.collect():
        names |= {family.name, f"{family.name}_total", f"{family.name}_bucket", f"{family.name}_count",
                  f"{family.name}_sum"}
    return names


def test_every_dashboard_expression_names_an_exported_metric() -> None:
    dashboard = json.loads((MANIFESTS / "components" / "grafana" / "dashboard.json").read_text())
    exported = _exported_metric_names()
    expressions = [value["expr"] for value in walk(dashboard) if isinstance(value, Mapping) and "expr" in value]
    queries = [value for value in walk(dashboard["templating"]) if isinstance(value, str)
               and value.startswith("label_values(")]
    assert expressions
    assert queries
    for expression in [*expressions, *queries]:
        names = set(re.findall(r"\b((?:volcano|cardquota)_[a-z_]+)\b", expression))
        assert names, expression
        assert names <= exported, f"{expression}: {sorted(names - exported)} not exported"
    shown = {name for expression in expressions for name in re.findall(r"\b(?:volcano|cardquota)_[a-z_]+", expression)}
    for wanted in ("volcano_queue_card_deserved", "volcano_queue_card_allocated", "cardquota_queue_card_inqueue",
                   "cardquota_queue_card_pending", "cardquota_webhook_duration_seconds_bucket"):
        assert wanted in shown
    assert any('verdict="denied"' in expression for expression in expressions)


def test_queue_gauges_are_never_summed_across_replicas() -> None:
    """Every replica exports the queue gauges from its own cache: summing them would multiply the usage."""
    dashboard = json.loads((MANIFESTS / "components" / "grafana" / "dashboard.json").read_text())
    for value in walk(dashboard):
        if isinstance(value, Mapping) and "expr" in value and "_queue_card_" in value["expr"]:
            assert "sum" not in value["expr"], value["expr"]


# ------------------------------------------------------------------------------------------------ kustomize

KUBECTL = shutil.which("kubectl")


def _render(overlay: str) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    result = subprocess.run([KUBECTL, "kustomize", str(MANIFESTS / "overlays" / overlay)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (kubectl kustomize renders the overlays)")
@pytest.mark.parametrize("overlay", ["dev", "production", "dev-extender"])
def test_overlays_render_with_kustomize(overlay: str) -> None:
    rendered = _render(overlay)
    kinds = {obj["kind"] for obj in rendered}
    assert kinds >= {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                     "Deployment", "PodDisruptionBudget", "Service", "ValidatingWebhookConfiguration",
                     "MutatingWebhookConfiguration", "ResourceQuota"}
    critical = [d["metadata"]["name"] for d in rendered if d["kind"] == "Deployment"
                and d["spec"]["template"]["spec"].get("priorityClassName") == "system-cluster-critical"]
    assert critical == ["cardquota"]  # the webhook replicas; not the controllers, not the extender
    deployments = {obj["metadata"]["name"]: obj for obj in rendered if obj["kind"] == "Deployment"}
    operator = deployments["cardquota"]["spec"]["template"]["spec"]["containers"][0]
    if overlay == "dev-extender":
        extender = deployments["cardquota-extender"]["spec"]["template"]["spec"]["containers"][0]
        assert (extender["image"], extender["imagePullPolicy"]) == ("cardquota:dev", "Never")
        # the account the webhooks let write the mGPU placement of bound pods (--extender-service-account)
        account = deployments["cardquota-extender"]["spec"]["template"]["spec"]["serviceAccountName"]
        assert f"system:serviceaccount:{NAMESPACE}:{account}" in Settings(namespace=NAMESPACE).unrefused_users
        configmaps = {obj["metadata"]["name"] for obj in rendered if obj["kind"] == "ConfigMap"}
        assert configmaps == {"cardquota-extender-conf"}
    elif overlay == "dev":
        assert (operator["image"], operator["imagePullPolicy"]) == ("cardquota:dev", "Never")
        assert "ServiceMonitor" not in kinds
    else:
        assert operator["image"].endswith(f"/cardquota:{VERSION}")
        assert "ServiceMonitor" in kinds
        (dashboard,) = [obj for obj in rendered if obj["kind"] == "ConfigMap"]
        assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
        json.loads(dashboard["data"]["cardquota.json"])
    for obj in rendered:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "cardquota"
        if obj["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration",
                               "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                               "ValidatingAdmissionPolicyBinding"}:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]
        else:  # (kustomize gives the two policy kinds a namespace: transformers/namespace takes it off)
            assert "namespace" not in obj["metadata"], obj["kind"]


def _readme_section(title: str) -> str:
    text = (MANIFESTS / "README.md").read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (kubectl kustomize renders the overlays)")
def test_the_service_monitor_is_selected_by_kube_prometheus_stack_and_the_readme_patch_renames_it(
        tmp_path: Path) -> None:
    """kube-prometheus-stack's Prometheus selects ``release: <its release>`` by default (issue 43: the
    ServiceMonitor had no such label); manifests/README.md's patch, put in an overlay over production as it says,
    sets another release name and leaves the rest."""
    (monitor,) = [obj for obj in _render("production") if obj["kind"] == "ServiceMonitor"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (snippet,) = re.findall(r"^```yaml\n(.*?)^```$", _readme_section("Prometheus and Grafana"), re.M | re.S)
    shutil.copytree(MANIFESTS, tmp_path / "manifests")
    folder = tmp_path / "manifests" / "overlays" / "mine"
    folder.mkdir()
    (folder / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["../production"],
        **yaml.safe_load(snippet)}))
    result = subprocess.run([str(KUBECTL), "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    (patched,) = [obj for obj in yaml.safe_load_all(result.stdout) if obj and obj["kind"] == "ServiceMonitor"]
    assert patched["metadata"]["labels"] == {**monitor["metadata"]["labels"], "release": "prometheus"}
    assert patched["spec"] == monitor["spec"]


# ------------------------------------------------------------------------------------------------- extender

EXTENDER = _objects(MANIFESTS / "components" / "extender")


def test_the_extender_runs_one_replica_on_the_port_the_example_configmap_calls() -> None:
    deployment = _one("Deployment", EXTENDER)
    assert deployment["spec"]["replicas"] == 1
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["cardquota", "extender"]
    env = {item["name"]: item["value"] for item in container["env"]}
    service = _one("Service", EXTENDER)
    (port,) = service["spec"]["ports"]
    assert int(env["CARDQUOTA_EXTENDER_PORT_NUMBER"]) == port["port"] == container["ports"][0]["containerPort"]
    assert _selects({"matchLabels": service["spec"]["selector"]}, deployment["spec"]["template"]["metadata"]["labels"])
    (example,) = _documents(REPO / "crds" / "examples" / "volcano-scheduler-configmap-extender.yaml")
    conf = yaml.safe_load(example["data"]["volcano-scheduler.conf"])
    (plugin,) = [p for tier in conf["tiers"] for p in tier["plugins"] if p["name"] == "extender"]
    url = f"http://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{port['port']}"
    assert plugin["arguments"]["extender.urlPrefix"] == url == EXTENDER_URL
    assert "extender.managedResources" not in plugin["arguments"]  # every task: crossquota and capability need it
    assert admit_schedconf(example, None, EXAMPLE_SNAPSHOT, PolicyConfig()).allowed
    mounted = (MANIFESTS / "components" / "extender" / "volcano-scheduler.conf").read_text()
    assert conf_violations(mounted) == []
    assert SchedulerConfig.from_conf(mounted).mgpu.enabled
    assert env["CARDQUOTA_SCHEDULER_CONF"].endswith("/volcano-scheduler.conf")


def test_the_extender_may_list_and_watch_what_it_follows_and_write_only_pods() -> None:
    """The watched session (operator/watch.py follow, with the DRA claims): every kind listed and watched is
    granted list and watch, and the only writes are the mGPU result patch onto pods and its degraded event."""
    granted: dict[tuple[str, str], set[str]] = {}
    rules = _one("ClusterRole", EXTENDER)["rules"]
    event_rule = {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}
    assert event_rule in rules  # (operator/extender.py report_degraded)
    for rule in (rule for rule in rules if rule != event_rule):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    followed = {(prefix.removeprefix("/apis/").removeprefix("/api").split("/")[0] if prefix.startswith("/apis/")
                 else "", plural) for prefix, plural, _, _ in CACHED_RESOURCES}
    followed |= {(DRA_GROUP, plural) for plural, _ in CLAIM_KINDS}
    assert set(granted) == followed
    assert all({"list", "watch"} <= verbs for verbs in granted.values())
    reads = {"list", "watch", "get"}
    assert {key: verbs - reads for key, verbs in granted.items() if verbs - reads} == {("", "pods"): {"patch"}}
    # The one write in a rule of its own (to be bound per namespace where the cluster-wide grant is too wide).
    writes = [rule for rule in rules if set(rule["verbs"]) - reads and rule != event_rule]
    assert writes == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]


def test_the_example_configmap_sends_no_session_body() -> None:
    (example,) = _documents(REPO / "crds" / "examples" / "volcano-scheduler-configmap-extender.yaml")
    conf = yaml.safe_load(example["data"]["volcano-scheduler.conf"])
    (plugin,) = [p for tier in conf["tiers"] for p in tier["plugins"] if p["name"] == "extender"]
    assert "extender.onSessionOpenVerb" not in plugin["arguments"]


def test_the_shipped_fragment_is_the_stanza_the_cli_merges() -> None:
    """manifests/components/extender/extender-plugin.conf (what users merge by hand) is the entry
    ``kubectl cardquota scheduler-conf`` merges; the whole-ConfigMap example is that command's output for a cluster
    with no ConfigMap (Volcano's default configuration, the user's plugins kept), not a second definition."""
    fragment = yaml.safe_load((MANIFESTS / "components" / "extender" / "extender-plugin.conf").read_text())
    gated = extender_stanza(gated=gated_stanza((), crossquota=False))  # (the gate is on as shipped)
    assert fragment == [gated]
    (example,) = _documents(REPO / "crds" / "examples" / "volcano-scheduler-configmap-extender.yaml")
    assert yaml.safe_load(example["data"]["volcano-scheduler.conf"]) == merged_conf(None, gated)
    assert example["metadata"] == {"name": DEFAULT_SCHEDULER_CONFIGMAP, "namespace": "volcano-system"}


def test_the_shipped_configuration_leaks_nothing_on_the_example_cluster() -> None:
    """The example ConfigMap, with the extender's conf as the plugins' arguments, over examples/cluster.yaml (MIG,
    NPU, shared GPUs, queues with a cpu/memory capability): no warning from the ConfigMap policy."""
    (example,) = _documents(REPO / "crds" / "examples" / "volcano-scheduler-configmap-extender.yaml")
    assert admit_schedconf(example, None, EXAMPLE_SNAPSHOT, PolicyConfig(card_gate=True)).warnings == ()


def test_a_managed_resources_string_is_refused_since_it_makes_the_scheduler_exit() -> None:
    (example,) = _documents(REPO / "crds" / "examples" / "volcano-scheduler-configmap-extender.yaml")
    broken = yaml.safe_load(example["data"]["volcano-scheduler.conf"])
    for tier in broken["tiers"]:
        for plugin in tier["plugins"]:
            if plugin["name"] == "extender":
                plugin["arguments"]["extender.managedResources"] = "nvidia.com/gpu"
    example["data"]["volcano-scheduler.conf"] = yaml.safe_dump(broken)
    verdict = admit_schedconf(example, None, EXAMPLE_SNAPSHOT, PolicyConfig())
    assert not verdict.allowed
    assert "the scheduler exits on a string" in verdict.message



# ------------------------------------------------------------------------------------------------- workloads

VALIDATE_DEPLOYMENTS = _condition("deployments.validate.cardquota.io")
VALIDATE_CRONJOBS = _condition("cronjobs.validate.cardquota.io")
VALIDATE_HPAS = _condition("horizontalpodautoscalers.validate.cardquota.io")


def _deployment(template_pod: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
            "spec": {"replicas": 2, "template": {"metadata": template_pod["metadata"], "spec": template_pod["spec"]}}}


def test_workload_match_conditions_look_at_the_pod_template() -> None:
    card = _deployment(pod("p", card="NVIDIA-A100", gpus=1))
    plain = _deployment(pod("p", containers=[container(requests={"cpu": "1"})]))
    assert _matches(VALIDATE_DEPLOYMENTS, card)
    assert not _matches(VALIDATE_DEPLOYMENTS, plain)
    cronjob = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
               "spec": {"jobTemplate": {"spec": {"template": card["spec"]["template"]}}}}
    assert _matches(VALIDATE_CRONJOBS, cronjob)
    assert _matches(VALIDATE_HPAS, {"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}}})
    assert not _matches(VALIDATE_HPAS, {"spec": {"scaleTargetRef": {"kind": "CustomThing", "name": "d"}}})


@given(annotations=_annotations, requests=_resources, limits=_resources, init=st.one_of(st.none(), _resources))
def test_a_workload_the_match_condition_skips_is_one_the_workload_policy_leaves_alone(
    annotations: dict[str, str], requests: dict[str, str], limits: dict[str, str], init: dict[str, str] | None,
) -> None:
    template_pod = pod("p", annotations=annotations, containers=[container(requests=requests, limits=limits)],
                       init_containers=None if init is None else [container(limits=init)])
    deployment = _deployment(template_pod)
    if not _matches(VALIDATE_DEPLOYMENTS, deployment):
        verdict = admit_workload(deployment, None, EXAMPLE_SNAPSHOT, PolicyConfig())
        assert (verdict.allowed, verdict.warnings, verdict.patch) == (True, (), ()), verdict


VALIDATE_VOLCANO_CRONJOBS = _condition("volcanocronjobs.validate.cardquota.io")


def _volcano_cronjob(template_pod: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    job_template: dict[str, Any] = {"spec": {"queue": "default", "tasks": [
        {"name": "w", "replicas": 1, "template": {"metadata": template_pod["metadata"],
                                                  "spec": template_pod["spec"]}}]}}
    if annotations is not None:
        job_template["metadata"] = {"annotations": annotations}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "0 2 * * *", "jobTemplate": job_template}}


def test_volcano_cronjob_match_condition_looks_at_the_job_template() -> None:
    """Issue 18 item 5: a Volcano CronJob whose job template carries a card goes to the webhook, a plain one not."""
    assert _matches(VALIDATE_VOLCANO_CRONJOBS, _volcano_cronjob(pod("p", card="NVIDIA-A100", gpus=1)))
    assert _matches(VALIDATE_VOLCANO_CRONJOBS, _volcano_cronjob(pod("p", gpus=1)))
    plain = pod("p", containers=[container(requests={"cpu": "1"})])
    assert _matches(VALIDATE_VOLCANO_CRONJOBS, _volcano_cronjob(plain, {"volcano.sh/card.request": '{"A":1}'}))
    assert not _matches(VALIDATE_VOLCANO_CRONJOBS, _volcano_cronjob(plain))
    assert not _matches(VALIDATE_VOLCANO_CRONJOBS, {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "CronJob",
                                                    "metadata": {"name": "c"}, "spec": {"schedule": "@daily"}})


@given(annotations=_annotations, requests=_resources, limits=_resources, init=st.one_of(st.none(), _resources))
def test_a_volcano_cronjob_the_match_condition_skips_is_one_the_policy_leaves_alone(
    annotations: dict[str, str], requests: dict[str, str], limits: dict[str, str], init: dict[str, str] | None,
) -> None:
    """Issue 18 item 5: whatever the condition skips, the CronJob policy would have allowed unchanged."""
    template_pod = pod("p", annotations=annotations, containers=[container(requests=requests, limits=limits)],
                       init_containers=None if init is None else [container(limits=init)])
    cronjob = _volcano_cronjob(template_pod)
    if not _matches(VALIDATE_VOLCANO_CRONJOBS, cronjob):
        verdict = admit_volcano_cronjob(cronjob, None, EXAMPLE_SNAPSHOT, PolicyConfig())
        assert (verdict.allowed, verdict.warnings, verdict.patch) == (True, (), ()), verdict


# ------------------------------------------------------------------------------------- separate controller

SEPARATE = _objects(MANIFESTS / "components" / "separate-controller")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (kubectl kustomize renders the overlays)")
def test_production_splits_the_webhooks_from_the_controllers_and_dev_keeps_one_process() -> None:
    """components/separate-controller: the Service that receives admission reviews selects only the
    ``--role webhook`` pods, the controller pods (``--role controller``) only the metrics Service; each runs as its
    own ServiceAccount, bound to its own roles (both among the accounts whose writes the webhooks never refuse)."""
    rendered = _render("production")
    deployments = {obj["metadata"]["name"]: obj for obj in rendered if obj["kind"] == "Deployment"}
    services = {obj["metadata"]["name"]: obj for obj in rendered if obj["kind"] == "Service"}

    def role(name: str) -> Role:
        (container,) = deployments[name]["spec"]["template"]["spec"]["containers"]
        roles = [item["value"] for item in container["env"] if item["name"] == "CARDQUOTA_ROLE"]
        assert len(roles) == 1, name
        return Role(roles[0])

    def labels(name: str) -> dict[str, str]:
        return dict(deployments[name]["spec"]["template"]["metadata"]["labels"])

    assert (role("cardquota"), role("cardquota-controller")) == (Role.WEBHOOK, Role.CONTROLLER)
    webhook_service = services[Settings().service]["spec"]["selector"]
    assert _selects({"matchLabels": webhook_service}, labels("cardquota"))
    assert not _selects({"matchLabels": webhook_service}, labels("cardquota-controller"))
    controller_service = services["cardquota-controller"]["spec"]["selector"]
    assert _selects({"matchLabels": controller_service}, labels("cardquota-controller"))
    accounts = {name: d["spec"]["template"]["spec"]["serviceAccountName"] for name, d in deployments.items()}
    assert accounts == {"cardquota": Settings().service_account,
                        "cardquota-controller": Settings().controller_service_account}
    bindings = {(obj["kind"], obj["metadata"]["name"]): obj for obj in rendered if obj["kind"].endswith("Binding")}
    for account in accounts.values():
        for kind, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
            assert bindings[(kind, account)]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role,
                                                            "name": account}
            assert bindings[(kind, account)]["subjects"] == [
                {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    controller = deployments["cardquota-controller"]
    assert _selects(controller["spec"]["selector"], labels("cardquota-controller"))
    (container,) = controller["spec"]["template"]["spec"]["containers"]
    assert [port["name"] for port in container["ports"]] == ["metrics"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert controller["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["image"] == deployments["cardquota"]["spec"]["template"]["spec"]["containers"][0]["image"]
    budgets = [obj for obj in rendered if obj["kind"] == "PodDisruptionBudget"]
    assert sorted(_selects(budget["spec"]["selector"], labels("cardquota-controller")) for budget in budgets) == [
        False, True]
    dev = [obj for obj in _render("dev") if obj["kind"] == "Deployment"]
    assert [d["metadata"]["name"] for d in dev] == ["cardquota"]
    assert "CARDQUOTA_ROLE" not in {item["name"] for item in dev[0]["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_the_separate_controller_component_names_only_what_the_operator_reads() -> None:
    """The controller container sets the role, namespace, service account and metrics port, and listens on that port
    only (no webhook port: it serves no admission)."""
    (controller,) = [obj for obj in SEPARATE if obj["kind"] == "Deployment"]
    (container,) = controller["spec"]["template"]["spec"]["containers"]
    env = {item["name"] for item in container["env"]}
    assert env == {"CARDQUOTA_ROLE", "CARDQUOTA_NAMESPACE", "CARDQUOTA_SERVICE_ACCOUNT",
                   "CARDQUOTA_METRICS_PORT_NUMBER", "CARDQUOTA_CARD_GATE"}
    assert int(next(item["value"] for item in container["env"] if item["name"] == "CARDQUOTA_METRICS_PORT_NUMBER")) \
        == Settings().metrics_port == container["ports"][0]["containerPort"]


def test_the_split_roles_share_out_the_base_roles_without_a_wildcard() -> None:
    """The webhook's narrowed roles and the controller's together grant what the one-process roles grant, no more;
    the webhooks keep no pod and no write but their certificate's (each grant used: tests/reliability/
    test_least_privilege.py runs each process against them)."""
    webhook = _documents(MANIFESTS / "components" / "separate-controller" / "webhook-rbac.yaml")
    gate = [obj for obj in BASE if obj["kind"] == "ClusterRole" and obj["metadata"]["name"] == "cardquota-card-gate"]
    controller = [*gate,  # the component binds the gate's role to the controllers' account instead (test_chart.py)
                  *[obj for obj in SEPARATE if obj["kind"] in ("ClusterRole", "Role")]]
    base = [obj for obj in BASE if obj["kind"] in ("ClusterRole", "Role")]
    together = _grants_of(webhook)
    for key, verbs in _grants_of(controller).items():
        together.setdefault(key, set()).update(verbs)
    assert together == _grants_of(base)
    webhook_grants = _grants_of(webhook)
    assert ("", "pods", "") not in webhook_grants
    writes = {key for key, verbs in webhook_grants.items() if verbs - {"get", "list", "watch"}}
    assert {resource for _, resource, _ in writes} == {"secrets", "validatingwebhookconfigurations",
                                                      "mutatingwebhookconfigurations"}
    for obj in [*webhook, *controller]:
        assert "*" not in json.dumps(obj.get("rules"))


# ---------------------------------------------------------------------------------------- NetworkPolicies

MONITORING = {"kubernetes.io/metadata.name": "monitoring"}
VOLCANO_SYSTEM = {"kubernetes.io/metadata.name": "volcano-system"}
SCHEDULER_POD = {"app": "volcano-scheduler"}
"""The Volcano scheduler's pod label in its installer and Helm chart (installer/helm/chart/volcano/templates/
scheduler.yaml and installer/volcano-development.yaml, v1.15.1: ``app: volcano-scheduler`` in volcano-system)."""


def _peer_matches(peer: Mapping[str, Any], source: Mapping[str, Any], policy_namespace: str) -> bool:
    """Whether a NetworkPolicy ``from`` entry admits ``source``: {"ip"} for a host or an address outside the
    cluster, {"namespace_labels", "pod_labels"} for a pod (networking.k8s.io/v1 semantics: both selectors of one
    entry must match; a podSelector alone means the policy's own namespace)."""
    if "ipBlock" in peer:
        if "ip" not in source:
            return False
        address = ipaddress.ip_address(source["ip"])
        block = peer["ipBlock"]
        return (address in ipaddress.ip_network(block["cidr"])
                and not any(address in ipaddress.ip_network(cidr) for cidr in block.get("except") or []))
    if "pod_labels" not in source:
        return False
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], source["namespace_labels"]):
            return False
    elif source["namespace_labels"].get("kubernetes.io/metadata.name") != policy_namespace:
        return False
    return _selects(peer.get("podSelector") or {}, source["pod_labels"])


def _admitted(policies: list[dict[str, Any]], pod_labels: Mapping[str, str], port: Mapping[str, Any],
              source: Mapping[str, Any]) -> bool:
    """Whether a connection from ``source`` to a container ``port`` ({"name", "containerPort"}) of a pod of the
    operator's namespace with ``pod_labels`` is let through by ``policies`` (all open when none selects it)."""
    selecting = [policy for policy in policies if "Ingress" in policy["spec"].get("policyTypes", ["Ingress"])
                 and _selects(policy["spec"]["podSelector"], pod_labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            ports = rule.get("ports")
            if ports and not any(item.get("port") in (port.get("name"), port["containerPort"]) for item in ports):
                continue
            peers = rule.get("from")
            if not peers or any(_peer_matches(peer, source, policy["metadata"]["namespace"]) for peer in peers):
                return True
    return False


def _pod(namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {"namespace_labels": {"kubernetes.io/metadata.name": namespace}, "pod_labels": dict(labels)}


ANYWHERE = [{"ip": "203.0.113.7"}, {"ip": "10.0.0.1"}, _pod("default", {"app": "anything"}),
            _pod(NAMESPACE, {"app.kubernetes.io/component": "other"})]
EXPECTED_CALLERS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
    # port name: (sources let through, sources refused)
    "webhook": (ANYWHERE, []),
    "metrics": ([_pod("monitoring", {"app.kubernetes.io/name": "prometheus"})],
                [*ANYWHERE, _pod("volcano-system", SCHEDULER_POD)]),
    "extender": ([_pod("volcano-system", SCHEDULER_POD)],
                 [*ANYWHERE, _pod("volcano-system", {"app": "volcano-controllers"}), _pod("default", SCHEDULER_POD),
                  _pod("monitoring", {"app.kubernetes.io/name": "prometheus"})]),
}
"""Who reaches each port: the API server (anywhere: no selector can name it), the metrics scrapers' namespace, the
Volcano scheduler's pods only."""


def _check_policies(objects: list[dict[str, Any]]) -> set[str]:
    """Every container port of every Deployment of ``objects`` is reachable by exactly the expected callers;
    returns the port names seen."""
    policies = [obj for obj in objects if obj["kind"] == "NetworkPolicy"]
    seen: set[str] = set()
    for deployment in (obj for obj in objects if obj["kind"] == "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert any(_selects(policy["spec"]["podSelector"], labels) for policy in policies), \
            f"no NetworkPolicy selects the pods of Deployment {deployment['metadata']['name']}"
        for served in deployment["spec"]["template"]["spec"]["containers"]:
            for port in served.get("ports") or []:
                allowed, refused = EXPECTED_CALLERS[port["name"]]
                seen.add(port["name"])
                name = f"{deployment['metadata']['name']}:{port['name']}"
                assert all(_admitted(policies, labels, port, source) for source in allowed), name
                assert not any(_admitted(policies, labels, port, source) for source in refused), name
    return seen


def test_the_network_policies_let_each_port_be_reached_only_by_its_callers() -> None:
    """base (the operator's 9443 and 8080), components/separate-controller (the controller's 8080) and
    components/extender (8713), as written: ingress only, one rule per port, by named port."""
    components = MANIFESTS / "components"
    objects = [*BASE, *_objects(components / "separate-controller"), *EXTENDER]
    assert _check_policies(objects) == {"webhook", "metrics", "extender"}
    for policy in (obj for obj in objects if obj["kind"] == "NetworkPolicy"):
        assert policy["spec"]["policyTypes"] == ["Ingress"], policy["metadata"]["name"]
        assert policy["metadata"]["namespace"] == NAMESPACE
    (extender_policy,) = [obj for obj in EXTENDER if obj["kind"] == "NetworkPolicy"]
    (rule,) = extender_policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": VOLCANO_SYSTEM},
                             "podSelector": {"matchLabels": SCHEDULER_POD}}]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (kubectl kustomize renders the overlays)")
@pytest.mark.parametrize("overlay", ["dev", "production", "dev-extender"])
def test_every_rendered_overlay_keeps_each_port_to_its_callers(overlay: str) -> None:
    rendered = _render(overlay)
    seen = _check_policies(rendered)
    assert seen == ({"webhook", "metrics", "extender"} if overlay == "dev-extender" else {"webhook", "metrics"})
