"""Only what cardquota could refuse or mutate reaches it: the ``matchConditions`` of manifests/base/webhooks.yaml,
read as shipped and evaluated as the API server evaluates them (tests/webhook_conditions.py), proved both ways.

* Sound: for generated objects and updates of every admitted kind, whenever cardquota — called as its server calls
  it, through :class:`Admission` over a cache of a small cluster — would deny the write or patch it, the API server
  calls the webhook (and no condition fails to evaluate).
* Out of the way: the writes cardquota always allows unchanged are not sent — Volcano's status writes (the
  PodGroup CRD has no status subresource, ``subresources: {}`` in volcano-sh/volcano
  config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml, and the scheduler writes the whole object with
  ``Update`` in pkg/scheduler/cache/cache.go ``defaultStatusUpdater.UpdatePodGroup``, v1.16.0-alpha.1), the
  card-free PodGroups vc-controller creates for every Volcano Job (pkg/controllers/job/job_controller_actions.go
  ``createOrUpdatePodGroup``, which copies the Job's annotations), metadata-only updates, other ConfigMaps.

What is left unsent on purpose loses only advisory warnings, never a denial or a patch: the minResources-beyond-
capability warning of a PodGroup without card.request, the affinity-typo warning of a card-free Volcano Job's
templates, the pruned-``spec.dra`` warning on queues without card.quota or spec.dra, and the "already so before this
update" warnings of updates that change nothing the rules read.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest
from builders import container, gpu_node, node, pod, podgroup, queue
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_conditions import Decision, all_webhooks, decide, matching_rules

from cardquota.core.keys import GPU_INDEX_PREFIX
from cardquota.core.policies.cards import MAX_JOB_TASKS
from cardquota.core.policies.config import DEFAULT_SCHEDULER_CONFIGMAP, PolicyConfig
from cardquota.operator.settings import Settings
from cardquota.runtime.cache import ClusterCache
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.review import AdmissionRequest

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
NAMESPACE = "cardquota-system"
SCHEDULER = "system:serviceaccount:volcano-system:volcano-scheduler"
CONTROLLERS = "system:serviceaccount:volcano-system:volcano-controllers"
OWN = f"system:serviceaccount:{NAMESPACE}:cardquota"
EXTENDER = f"system:serviceaccount:{NAMESPACE}:cardquota-extender"
HOOKS = all_webhooks()
VALIDATING = {hook["name"] for hook in HOOKS if hook["clientConfig"]["service"]["path"].startswith("/validate/")}


def _cluster() -> ClusterCache:
    cache = ClusterCache()
    cache.load([gpu_node("a100-1", A100, 8), gpu_node("h100-1", H100, 8), node("cpu-1"),
                queue("team-a", {A100: 6, H100: 4}), queue("child", {A100: 2}, parent="team-a"), queue("cpu-only"),
                queue("default"), podgroup("running", namespace="ml", queue="team-a", phase="Running",
                                           request={A100: 2})])
    return cache


ADMISSION = Admission(_cluster(), PolicyConfig(), own_users=Settings(namespace=NAMESPACE).unrefused_users)

# (API group, version, resource, kind, namespaced) of every kind the webhooks admit.
KINDS = {
    "Queue": ("scheduling.volcano.sh", "v1beta1", "queues", False),
    "PodGroup": ("scheduling.volcano.sh", "v1beta1", "podgroups", True),
    "VolcanoJob": ("batch.volcano.sh", "v1alpha1", "jobs", True),
    "VolcanoCronJob": ("batch.volcano.sh", "v1alpha1", "cronjobs", True),
    "Pod": ("", "v1", "pods", True),
    "Node": ("", "v1", "nodes", False),
    "ConfigMap": ("", "v1", "configmaps", True),
    "Deployment": ("apps", "v1", "deployments", True),
}


def _kind_name(manifest: Mapping[str, Any]) -> str:
    return str(manifest["kind"])


def outcome(kind: str, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None, operation: str,
            user: str = "alice") -> dict[str, Decision]:
    """hook name -> what the API server does with it, for every hook whose rules match the write."""
    group, _, resource, _ = KINDS[kind]
    return {hook["name"]: decide(hook, new, old, operation=operation, user=user) for hook in HOOKS
            if matching_rules(hook, group, resource, operation)}


def called(kind: str, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None = None, *,
           user: str = "alice") -> set[str]:
    operation = "CREATE" if old is None else "UPDATE"
    return {name for name, decision in outcome(kind, new, old, operation, user).items()
            if decision is not Decision.SKIP}


def review(kind: str, new: Mapping[str, Any], old: Mapping[str, Any] | None, user: str) -> tuple[bool, bool]:
    """(denied, patched): what cardquota's validating and mutating webhooks answer, as its server answers them."""
    group, _, _, namespaced = KINDS[kind]
    metadata = new.get("metadata") or {}
    request = AdmissionRequest("uid-1", group, str(new["kind"]), "CREATE" if old is None else "UPDATE",
                               str(metadata.get("namespace", "")) if namespaced else "", str(metadata.get("name", "")),
                               new, old, False, user)
    validating = ADMISSION.review(request, mutating=False)
    mutating = ADMISSION.review(request, mutating=True)
    return not validating.allowed, bool(mutating.patch)


# ----------------------------------------------------------------------------------------------- generators

PLACEMENT = f"{GPU_INDEX_PREFIX}main"
"""The mGPU placement of the builders' container ``main``: the extender's to write once the pod is bound."""
_ANNOTATION_KEYS = ["volcano.sh/card.request", "volcano.sh/card.quota", "volcano.sh/card.name",
                    "volcano.sh/crossquota-scoring-strategy", "vke.volcengine.com/container-multiple-gpu",
                    "volcano.sh/card.usage", "team", "scheduling.k8s.io/group-name", PLACEMENT,
                    "cardquota.io/preemption"]
_ANNOTATION_VALUES = [json.dumps({A100: 2}), json.dumps({A100: 100}), json.dumps({"NVIDIA-X": 1}),
                      json.dumps({f"{A100}|{H100}": 3}), '{"NVIDIA-A100": 2, "NVIDIA-H100": 1}', A100,
                      f"{A100}|{H100}", "bogus", "most-allocated", "1", "", "LowerPriority"]
annotations = st.dictionaries(st.sampled_from(_ANNOTATION_KEYS), st.sampled_from(_ANNOTATION_VALUES), max_size=3)
resources = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "vke.volcengine.com/mgpu-core",
                     "vke.volcengine.com/mgpu-memory", "example.com/fpga"]),
    st.sampled_from(["0", "1", "2", "8", "100", "1Gi"]), max_size=3)
queue_names = st.sampled_from(["team-a", "child", "cpu-only", "default", "missing"])


def valid_limits(requests: dict[str, str], limits: dict[str, str]) -> dict[str, str]:
    """``limits`` as the API server validates them against ``requests``: an extended resource requested is limited
    to the same amount, and a cpu or memory request is not above its limit (k8s.io/kubernetes
    pkg/apis/core/validation/validation.go, ``ValidateResourceRequirements``: "Limit must be set for non
    overcommitable resources", "must be less than or equal to … limit"), so generated writes reach the webhooks
    rather than the API server's validation."""
    valid = dict(limits)
    for name, amount in requests.items():
        if name not in ("cpu", "memory") or name in valid:
            valid[name] = amount
    return valid


@st.composite
def template(draw: st.DrawFn) -> dict[str, Any]:
    """A pod's metadata and spec: anything, or a well-formed card pod (which the mutations need to happen)."""
    if draw(st.booleans()):
        manifest = pod("t", card=draw(st.sampled_from([A100, f"{A100}|{H100}", H100])), gpus=draw(st.integers(1, 3)),
                       queue=draw(queue_names), annotations=draw(annotations))
    else:
        requests, limits = draw(resources), draw(resources)
        manifest = pod("t", annotations=draw(annotations),
                       containers=[container(requests=requests, limits=valid_limits(requests, limits))],
                       init_containers=draw(st.one_of(st.none(),
                                                      st.builds(lambda r: [container("init", limits=r)], resources))))
    return {"metadata": {"annotations": manifest["metadata"]["annotations"]}, "spec": manifest["spec"]}


@st.composite
def volcano_job_spec(draw: st.DrawFn) -> dict[str, Any]:
    tasks = [{"name": f"t{index}", "replicas": draw(st.integers(0, 4)), "template": draw(template())}
             for index in range(draw(st.integers(0, 3)))]
    spec: dict[str, Any] = {"queue": draw(queue_names), "tasks": tasks}
    if draw(st.booleans()):
        spec["minAvailable"] = draw(st.integers(0, 6))
    return spec


@st.composite
def manifests(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    """A schema-valid object of the kind (what reaches a validating webhook: the API server checked the schema)."""
    metadata: dict[str, Any] = {"name": "x", "annotations": draw(annotations)}
    if KINDS[kind][3]:
        metadata["namespace"] = "ml"
    if kind == "Queue":
        metadata["name"] = draw(st.sampled_from(["team-a", "child", "new"]))
        spec: dict[str, Any] = {"weight": 1}
        parent = draw(st.sampled_from([None, "root", "team-a", "child", "missing"]))
        if parent is not None:
            spec["parent"] = parent
        if draw(st.booleans()):  # a quota that parses, often in a form the mutation rewrites
            metadata["annotations"]["volcano.sh/card.quota"] = draw(st.sampled_from(
                ['{"NVIDIA-A100": 1}', '{"NVIDIA-A100":1}', '{ "NVIDIA-H100": 2, "NVIDIA-A100": 1 }', "{}"]))
        dra = draw(st.sampled_from([None, {}, {"capability": {"gpu.example.com": 2}}, {"bogus": 1},
                                    {"capability": {"gpu.example.com": "lots"}}]))
        if dra is not None:
            spec["dra"] = dra
        return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": metadata, "spec": spec,
                "status": {"state": "Open"}}
    if kind == "PodGroup":
        spec = {"minMember": draw(st.integers(0, 4)), "queue": draw(queue_names)}
        if draw(st.booleans()):
            spec["minResources"] = draw(st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
                                                        st.sampled_from(["1", "64", "1Ti", "4"]), max_size=2))
        return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": metadata,
                "spec": spec, "status": {"phase": draw(st.sampled_from(["Pending", "Inqueue", "Running"]))}}
    if kind == "VolcanoJob":
        if draw(st.booleans()):  # no card.request: the mutation derives one from the card tasks
            metadata["annotations"].pop("volcano.sh/card.request", None)
        return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": metadata,
                "spec": draw(volcano_job_spec())}
    if kind == "VolcanoCronJob":
        job_template: dict[str, Any] = {"spec": draw(volcano_job_spec())}
        if draw(st.booleans()):
            job_template["metadata"] = {"annotations": draw(annotations)}
        return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "CronJob", "metadata": metadata,
                "spec": {"schedule": "0 2 * * *", "jobTemplate": job_template}}
    if kind == "Pod":
        shaped = draw(template())
        bound = draw(st.booleans())  # (bound: what it carries is counted on a node, and some of it cannot change)
        if bound:
            shaped["spec"]["nodeName"] = "a100-1"
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {**metadata, **shaped["metadata"]},
                "spec": shaped["spec"], "status": {"phase": "Running" if bound else "Pending"}}
    if kind == "Node":
        metadata.pop("namespace", None)
        # (no volcano.sh/crossquota-nvidia.com/gpu: the API server refuses an annotation key with two slashes)
        metadata["annotations"].update(draw(st.dictionaries(
            st.sampled_from(["volcano.sh/crossquota-cpu", "volcano.sh/crossquota-memory",
                             "volcano.sh/crossquota-percentage-cpu"]),
            st.sampled_from(["8", "-1", "lots", "1Gi"]), max_size=2)))
        return node("n1") | {"metadata": metadata}
    if kind == "ConfigMap":
        metadata["name"] = draw(st.sampled_from([DEFAULT_SCHEDULER_CONFIGMAP, "other"]))
        metadata["namespace"] = "volcano-system"
        conf = draw(st.sampled_from([
            "actions: enqueue, allocate\ntiers:\n- plugins:\n  - name: capacity-card\n",
            "actions: enqueue\ntiers: [", "- just a list", "actions: enqueue, allocate\ntiers:\n- plugins:\n"
            "  - name: capacity-card\n  - name: capacity\n"]))
        data = draw(st.sampled_from([None, {}, {"volcano-scheduler.conf": conf}]))
        manifest: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
        if data is not None:
            manifest["data"] = data
        binary = draw(st.sampled_from([None, {}, {"logo.png": "iVBORw0KGgo="},
                                       {"volcano-scheduler.conf": base64.b64encode(conf.encode()).decode()}]))
        if binary is not None and not set(binary) & set(data or {}):  # (the API server refuses a key in both)
            manifest["binaryData"] = binary
        return manifest
    shaped = draw(template())
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {"replicas": 2, "template": shaped}}


METADATA_CHANGES = ("status", "labels", "annotation", "managedFields", "resourceVersion", "finalizers")


def metadata_only_change(old: Mapping[str, Any], change: str, token: int = 1) -> dict[str, Any]:
    """The object after an update that touches no field cardquota reads: status, labels, another annotation,
    managedFields, resourceVersion or finalizers (``token`` varies the value written)."""
    new = copy.deepcopy(dict(old))
    metadata = new["metadata"]
    if change == "status":
        new["status"] = {"phase": ["Pending", "Inqueue", "Running", "Completed"][token % 4], "running": token}
    elif change == "labels":
        metadata["labels"] = {"app": f"a{token}"}
    elif change == "annotation":
        metadata.setdefault("annotations", {})["example.com/note"] = f"n{token}"
    elif change == "managedFields":
        metadata["managedFields"] = [{"manager": "vc-scheduler", "operation": "Update", "apiVersion": "v1",
                                      "time": f"2026-01-01T00:00:{token % 60:02d}Z"}]
    elif change == "resourceVersion":
        metadata["resourceVersion"] = str(token)
    else:
        assert change == "finalizers"
        metadata["finalizers"] = [f"example.com/keep-{token}"]
    return new


def annotations_changed(new: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """``new`` with the annotations of ``other`` (and its binaryData, for a ConfigMap, when no key of it is in
    ``new``'s data): the old object of an update that changed those alone (a pod's bound card.name or mGPU
    placement rewritten or removed, a ConfigMap's binaryData)."""
    old = copy.deepcopy(dict(new))
    old["metadata"]["annotations"] = copy.deepcopy(other["metadata"]["annotations"])
    old.pop("binaryData", None)
    if "binaryData" in other and not set(other["binaryData"]) & set(old.get("data") or {}):
        old["binaryData"] = copy.deepcopy(other["binaryData"])
    return old


@st.composite
def writes(draw: st.DrawFn, kind: str) -> tuple[dict[str, Any], dict[str, Any] | None, str]:
    """(object, old object or None for a CREATE, user): a create, a metadata-only update, an update of the
    annotations (and a ConfigMap's binaryData) alone, or any update (a Pod's update keeps its spec). The extender
    writes Pods only (its role grants nothing else)."""
    new = draw(manifests(kind))
    user = draw(st.sampled_from(["alice", SCHEDULER, CONTROLLERS, OWN, *([EXTENDER] if kind == "Pod" else [])]))
    shape = draw(st.sampled_from(["create", "metadata-only", "annotations", "any"]))
    if shape == "create":
        return new, None, user
    if shape == "metadata-only":
        return metadata_only_change(new, draw(st.sampled_from(METADATA_CHANGES)), draw(st.integers(0, 99))), new, user
    if shape == "annotations":
        return new, annotations_changed(new, draw(manifests(kind))), user
    old = draw(manifests(kind))
    old["metadata"]["name"] = new["metadata"]["name"]
    if kind == "Pod":  # the spec of a pod cannot change; its annotations can
        old["spec"] = copy.deepcopy(new["spec"])
    return new, old, user


# ----------------------------------------------------------------------------------- (a) sound: never skipped


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_whatever_cardquota_would_deny_or_patch_reaches_it(kind: str, data: st.DataObject) -> None:
    new, old, user = data.draw(writes(kind))
    denied, patched = review(kind, new, old, user)
    operation = "CREATE" if old is None else "UPDATE"
    decisions = outcome(kind, new, old, operation, user)
    assert Decision.REFUSE not in decisions.values(), decisions  # a condition never fails on a valid object
    sent = {name for name, decision in decisions.items() if decision is Decision.CALL}
    if denied:
        assert sent & VALIDATING, f"denied but no validating webhook is called: {decisions}"
    if patched:
        assert sent - VALIDATING, f"patched but no mutating webhook is called: {decisions}"


def test_the_generators_reach_denials_and_patches_of_every_volcano_kind() -> None:
    """The property above is not vacuous: each Volcano kind has a denial (and the mutated kinds a patch) the
    conditions must send, and a write they skip."""
    assert review("Queue", queue("new", {A100: 100}, parent="team-a"), None, "alice") == (True, False)
    assert review("Queue", queue("new", '{ "NVIDIA-A100": 2 }'), None, "alice") == (False, True)
    bad_request = podgroup("pg", namespace="ml", queue="team-a", request={A100: 100})
    assert review("PodGroup", bad_request, None, CONTROLLERS)[0]
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"queue": "team-a", "tasks": [{"name": "w", "replicas": 2, "template": _card_template(2)}]}}
    assert review("VolcanoJob", job, None, "alice") == (False, True)
    assert called("VolcanoJob", job) == {"jobs.validate.cardquota.io", "jobs.mutate.cardquota.io"}
    conf = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": DEFAULT_SCHEDULER_CONFIGMAP, "namespace": "volcano-system"},
            "data": {"volcano-scheduler.conf": "actions: enqueue\ntiers: ["}}
    assert review("ConfigMap", conf, None, "alice")[0]
    assert called("ConfigMap", conf) == {"schedulerconfig.validate.cardquota.io"}


def _card_template(gpus: int) -> dict[str, Any]:
    manifest = pod("t", card=A100, gpus=gpus)
    return {"metadata": manifest["metadata"], "spec": manifest["spec"]}


def test_a_volcano_job_with_more_tasks_than_cardquota_checks_is_sent_even_without_cards() -> None:
    """The one denial of a card-free Job: more tasks than a review may cost."""
    plain = pod("t", containers=[container(requests={"cpu": "1"})])
    tasks = [{"name": f"t{i}", "replicas": 1, "template": {"spec": plain["spec"]}} for i in range(MAX_JOB_TASKS + 1)]
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"queue": "default", "tasks": tasks}}
    assert review("VolcanoJob", job, None, "alice")[0]
    assert "jobs.validate.cardquota.io" in called("VolcanoJob", job)
    job["spec"]["tasks"] = tasks[:MAX_JOB_TASKS]
    assert not review("VolcanoJob", job, None, "alice")[0]
    assert called("VolcanoJob", job) == set()


# ---------------------------------------------------------------------------- (b) out of the way: not sent


def _card_podgroup(phase: str) -> dict[str, Any]:
    return podgroup("job-1-3f2a", namespace="ml", queue="team-a", phase=phase, request={A100: 2})


def _phase_change(manifest: Mapping[str, Any], phase: str) -> dict[str, Any]:
    """What the scheduler's UpdatePodGroup sends: the object it read, with a new status and resourceVersion."""
    new = copy.deepcopy(dict(manifest))
    new["status"] = {"phase": phase, "running": 2 if phase == "Running" else 0,
                     "conditions": [{"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready"}]}
    new["metadata"]["resourceVersion"] = "1002"
    return new


@pytest.mark.parametrize("request_annotation", [True, False], ids=["card", "cpu-only"])
@pytest.mark.parametrize(("before", "after"), [("Pending", "Inqueue"), ("Inqueue", "Running"),
                                               ("Running", "Completed")])
def test_the_schedulers_podgroup_status_writes_never_reach_cardquota(
        request_annotation: bool, before: str, after: str) -> None:
    """The PodGroup CRD has no status subresource: Volcano's scheduler moves every gang through its phases with a
    plain Update of the whole PodGroup. None of them reaches cardquota, card PodGroups included — the policy
    ratchets, so an update that leaves spec and card.request as they were is never refused."""
    old = _card_podgroup(before) if request_annotation else podgroup("job-1-3f2a", namespace="ml", phase=before)
    old["metadata"]["resourceVersion"] = "1001"
    new = _phase_change(old, after)
    assert called("PodGroup", new, old, user=SCHEDULER) == set()
    assert review("PodGroup", new, old, SCHEDULER) == (False, False)


def test_the_podgroups_vc_controller_creates_for_card_free_jobs_never_reach_cardquota() -> None:
    """vc-controller creates one PodGroup per Volcano Job, with the Job's annotations and its minResources."""
    for annotations in ({}, {"volcano.sh/task-spec": "worker", "example.com/team": "a"}):
        created = podgroup("job-2-9c1d", namespace="ml", queue="default", phase="Pending")
        created["metadata"]["annotations"] = dict(annotations)
        created["spec"]["minResources"] = {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"}
        created.pop("status")
        assert called("PodGroup", created, user=CONTROLLERS) == set()
    card = _card_podgroup("Pending")
    assert called("PodGroup", card, user=CONTROLLERS) == {"podgroups.validate.cardquota.io"}


def test_a_podgroup_update_that_changes_its_spec_or_card_request_is_sent() -> None:
    old = _card_podgroup("Inqueue")
    for change in ({"spec": {**old["spec"], "queue": "child"}},
                   {"metadata": {**old["metadata"], "annotations": {"volcano.sh/card.request": '{"NVIDIA-A100":4}'}}}):
        new = copy.deepcopy(old) | change
        assert called("PodGroup", new, old) == {"podgroups.validate.cardquota.io"}


def test_a_card_pod_moved_to_a_queue_without_its_quota_is_sent_and_denied() -> None:
    """A pod's ``scheduling.volcano.sh/queue-name`` can change after create (annotations are mutable), and the
    ledger charges the pod to the queue it names: the pod policy denies a move to a queue without quota for its card
    type, so the update must reach it (found by the property above)."""
    old = pod("x", namespace="ml", card=A100, queue="team-a", gpus=1)
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] = "cpu-only"
    assert review("Pod", new, old, "alice") == (True, False)
    assert called("Pod", new, old) == {"pods.validate.cardquota.io"}


def test_removing_the_card_name_of_a_bound_pod_that_requests_no_extended_resource_is_sent_and_denied() -> None:
    """A bound pod's cards are counted under its card.name, which cannot change (the pod policy). A pod whose only
    sign of a card was that annotation — it requests nothing with a ``/`` — had nothing left for the first
    condition to see once it was removed: the condition looks at the old object's annotations too (found by the
    property above, once it drew bound pods)."""
    old = pod("x", namespace="ml", card=A100, queue="team-a", node_name="a100-1",
              containers=[container(requests={"cpu": "1"})])
    new = copy.deepcopy(old)
    del new["metadata"]["annotations"]["volcano.sh/card.name"]
    assert review("Pod", new, old, "alice") == (True, False)
    assert called("Pod", new, old) == {"pods.validate.cardquota.io"}


@pytest.mark.parametrize("change", ["rewritten", "removed", "added"])
@pytest.mark.parametrize("requests", [{"vke.volcengine.com/mgpu-core": "30"}, {"cpu": "1"}], ids=["mgpu", "cpu"])
def test_the_mgpu_placement_of_a_bound_pod_is_sent_and_refused_unless_the_extender_writes_it(
        change: str, requests: dict[str, str]) -> None:
    """The ``vke.volcengine.com/gpu-index-container-*`` annotations say which cards each container runs on: the
    node's mGPU agent allocates by them and the scheduling rules count the pod's shares there. Once the pod is bound
    only the extender, which wrote them, may change them; its writes to pods not yet bound are not sent at all."""
    placement = {} if change == "added" else {PLACEMENT: "0"}
    old = pod("x", namespace="ml", node_name="a100-1", containers=[container(requests=requests)],
              annotations=placement)
    new = copy.deepcopy(old)
    if change == "removed":
        del new["metadata"]["annotations"][PLACEMENT]
    else:
        new["metadata"]["annotations"][PLACEMENT] = "1"
    assert review("Pod", new, old, "alice") == (True, False)
    assert called("Pod", new, old) == {"pods.validate.cardquota.io"}
    assert review("Pod", new, old, EXTENDER) == (False, False)
    del old["spec"]["nodeName"], new["spec"]["nodeName"]
    assert review("Pod", new, old, "alice") == (False, False)
    assert called("Pod", new, old, user=EXTENDER) == set()


def test_a_scheduler_configuration_moved_under_binary_data_is_sent_and_refused() -> None:
    """Volcano's scheduler reads binaryData keys too (a ConfigMap volume writes them as files); cardquota checks the
    configuration under data only, so it refuses one under binaryData — and an update that changes only binaryData
    reaches it."""
    conf = "actions: enqueue, allocate\ntiers:\n- plugins:\n  - name: capacity-card\n"
    old = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": DEFAULT_SCHEDULER_CONFIGMAP, "namespace": "volcano-system"},
           "data": {}, "binaryData": {"volcano-scheduler.conf": base64.b64encode(b"actions: enqueue\n").decode()}}
    new = copy.deepcopy(old)
    new["binaryData"]["volcano-scheduler.conf"] = base64.b64encode(conf.encode()).decode()
    assert review("ConfigMap", new, old, "alice") == (True, False)
    assert called("ConfigMap", new, old) == {"schedulerconfig.validate.cardquota.io"}
    assert called("ConfigMap", {**old, "binaryData": {}}, old) == {"schedulerconfig.validate.cardquota.io"}
    assert called("ConfigMap", {key: value for key, value in old.items() if key != "binaryData"}, old) == {
        "schedulerconfig.validate.cardquota.io"}
    assert called("ConfigMap", metadata_only_change(old, "labels"), old) == set()


def _card_job(*, with_request: bool) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "train", "namespace": "ml", "resourceVersion": "7"}
    if with_request:
        metadata["annotations"] = {"volcano.sh/card.request": json.dumps({A100: 4})}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": metadata,
            "spec": {"queue": "team-a", "minAvailable": 2,
                     "tasks": [{"name": "w", "replicas": 2, "template": _card_template(2)}]},
            "status": {"state": {"phase": "Pending"}}}


def test_volcano_job_status_goes_to_its_subresource_which_no_webhook_names() -> None:
    """The Job CRD has a status subresource (config/crd/volcano/bases/batch.volcano.sh_jobs.yaml): vc-controller's
    status writes are ``jobs/status``, which no rule names."""
    for hook in HOOKS:
        for resource in ("jobs", "podgroups", "queues", "cronjobs"):
            assert not matching_rules(hook, "batch.volcano.sh", resource, "UPDATE", subresource="status")
            assert not matching_rules(hook, "scheduling.volcano.sh", resource, "UPDATE", subresource="status")


@pytest.mark.parametrize("kind", ["Queue", "PodGroup", "VolcanoJob", "VolcanoCronJob", "ConfigMap"])
@pytest.mark.parametrize("change", METADATA_CHANGES)
def test_metadata_only_updates_of_card_objects_never_reach_cardquota(kind: str, change: str) -> None:
    """Card objects — whose creation and real changes go through cardquota — are not sent when an update touches
    only what the rules do not read."""
    old = {
        "Queue": queue("team-a", {A100: 6}),
        "PodGroup": _card_podgroup("Running"),
        "VolcanoJob": _card_job(with_request=True),
        "VolcanoCronJob": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "CronJob",
                           "metadata": {"name": "nightly", "namespace": "ml"},
                           "spec": {"schedule": "@daily",
                                    "jobTemplate": {"spec": _card_job(with_request=False)["spec"]}}},
        "ConfigMap": {"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": DEFAULT_SCHEDULER_CONFIGMAP, "namespace": "volcano-system"},
                      "data": {"volcano-scheduler.conf": "actions: enqueue\n"}},
    }[kind]
    assert called(kind, old), "a card object's creation is sent"
    new = metadata_only_change(old, change)
    assert called(kind, new, old, user=CONTROLLERS) == set()


def test_card_free_volcano_work_and_queues_never_reach_cardquota() -> None:
    plain = pod("t", containers=[container(requests={"cpu": "4", "memory": "8Gi"})])
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "etl", "namespace": "ml"},
           "spec": {"queue": "default", "tasks": [{"name": "w", "replicas": 8, "template": {
               "metadata": {"annotations": {"example.com/owner": "data"}}, "spec": plain["spec"]}}]}}
    assert called("VolcanoJob", job) == set()
    cron = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "ml"},
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": job["spec"]}}}
    assert called("VolcanoCronJob", cron) == set()
    assert called("Queue", queue("cpu-team")) == set()
    capacity = queue("cpu-team")
    capacity["spec"]["capability"] = {"cpu": "100"}
    assert called("Queue", capacity, queue("cpu-team")) == set()
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt",
                                                                   "namespace": "volcano-system"}, "data": {}}
    assert called("ConfigMap", other) == set()


def test_a_card_job_already_carrying_its_request_is_not_sent_to_the_mutation() -> None:
    assert called("VolcanoJob", _card_job(with_request=True)) == {"jobs.validate.cardquota.io"}
    assert called("VolcanoJob", _card_job(with_request=False)) == {"jobs.validate.cardquota.io",
                                                                    "jobs.mutate.cardquota.io"}


def test_queue_deletions_go_to_a_webhook_that_fails_open() -> None:
    """Deleting a queue is never refused (cardquota only warns of the card work it strands): a down cardquota must
    not refuse it either."""
    decisions = outcome("Queue", None, queue("team-a", {A100: 6}), "DELETE")
    assert decisions == {"queuedeletions.validate.cardquota.io": Decision.CALL}
    (hook,) = [hook for hook in HOOKS if hook["name"] == "queuedeletions.validate.cardquota.io"]
    assert hook["failurePolicy"] == "Ignore"


# ------------------------------------------------------------------------------------------------- limits


@pytest.mark.parametrize("hook", HOOKS, ids=lambda hook: hook["name"])
def test_conditions_stay_within_the_api_servers_limits(hook: dict[str, Any]) -> None:
    """At most 64 matchConditions per webhook, each a qualified name of at most 63 characters (the API's
    MatchCondition field doc, k8s.io/api/admissionregistration/v1 types.go). Every comprehension runs over a list
    the API server bounds (annotations, at most 256 tasks before ``size()`` answers, containers, resource names) and
    is linear in it, so a real object stays far inside the 1,000,000 runtime cost units one expression may spend
    (``cel.CostLimit(celconfig.PerCallLimit)`` in k8s.io/apiserver/pkg/cel/environment/base.go) and the 2,500,000 a
    webhook's conditions may spend together (``RuntimeCELCostBudgetMatchConditions``,
    k8s.io/apiserver/pkg/apis/cel/config.go); an object built to exceed them is refused by a Fail webhook, never let
    through (tests/webhook_conditions.py, Decision.REFUSE)."""
    conditions = hook.get("matchConditions") or []
    assert len(conditions) <= 64
    names = [condition["name"] for condition in conditions]
    assert len(set(names)) == len(names)
    for name in names:
        assert len(name) <= 63
        assert name.replace("-", "").replace(".", "").replace("_", "").isalnum()


@pytest.mark.parametrize("hook", [hook for hook in HOOKS if hook["failurePolicy"] == "Fail"],
                         ids=lambda hook: hook["name"])
def test_no_fail_closed_webhook_receives_every_write(hook: dict[str, Any]) -> None:
    """A webhook that refuses writes when cardquota is down narrows what it receives to what cardquota could
    refuse: it has conditions beyond excluding cardquota itself (what they let through and what they skip is tested
    above)."""
    own = {"not-cardquota-itself"}
    assert {condition["name"] for condition in hook.get("matchConditions") or []} - own, hook["name"]


def test_with_the_gate_pods_naming_dra_claims_reach_the_pod_mutation_and_are_gated_under_a_dra_quota() -> None:
    """The gate's pod mutation is called for card pods and for pods naming DRA claims (its matchCondition), and
    the mutation gates the latter while some queue sets a DRA capability; a pod naming neither is not sent."""
    cache = _cluster()
    bounded = queue("dra-team")
    bounded["spec"]["dra"] = {"capability": {"gpu.example.com": {"count": 2}}}
    cache.apply("ADDED", bounded)
    gating = Admission(cache, PolicyConfig(card_gate=True), own_users=Settings(namespace=NAMESPACE).own_users)

    def claiming(queue_name: str) -> dict[str, Any]:
        made = pod("p", namespace="ml", queue=queue_name)
        made["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
        return made

    def patched(manifest: dict[str, Any]) -> bool:
        request = AdmissionRequest("uid-1", "", "Pod", "CREATE", "ml", "p", manifest, None, False, "alice")
        return bool(gating.review(request, mutating=True).patch)

    assert "pods.mutate.cardquota.io" in called("Pod", claiming("dra-team"))
    assert patched(claiming("dra-team"))
    # Some queue sets a DRA capability: a pod naming claims is gated whatever its queue (its PodGroup may not be
    # known yet); one whose queue turns out unbounded goes through in the gate's next round.
    assert patched(claiming("team-a"))
    unbounded = Admission(_cluster(), PolicyConfig(card_gate=True), own_users=Settings(namespace=NAMESPACE).own_users)
    request = AdmissionRequest("uid-1", "", "Pod", "CREATE", "ml", "p", claiming("team-a"), None, False, "alice")
    assert not unbounded.review(request, mutating=True).patch  # (no queue sets one: nothing to gate for)
    plain = pod("p", namespace="ml", queue="dra-team")
    assert "pods.mutate.cardquota.io" not in called("Pod", plain)
    assert not patched(plain)


def test_a_queue_with_a_misspelt_card_annotation_reaches_the_queue_webhook() -> None:
    """The Queue webhook's condition sends queues with any volcano.sh/card.* annotation: one whose only card key is
    misspelt (``card.quotas``) is warned about at apply time, not silently left without a quota."""
    misspelt = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                "metadata": {"name": "team", "annotations": {"volcano.sh/card.quotas": '{"NVIDIA-A100": 4}'}},
                "spec": {"weight": 1}}
    assert "queues.validate.cardquota.io" in called("Queue", misspelt)
    plain = {**misspelt, "metadata": {"name": "team", "annotations": {"team": "ml"}}}
    assert "queues.validate.cardquota.io" not in called("Queue", plain)
