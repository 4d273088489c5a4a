"""UPDATEs of the fail-closed kinds (Queue, PodGroup, Volcano Job, the scheduler ConfigMap) are judged on what they
change (ratcheting, as Kubernetes does for CRD validation, KEP-4008): a violation already there before the update is
a warning while every value it depends on is unchanged, a value the update sets or changes is judged in full;
lowering a queue's quota warns with the numbers. Each case first failed on the code before ratcheting (every UPDATE
was judged as a CREATE); those under "ratcheting by value" failed on the code that compared messages."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from builders import gpu_node, pod, podgroup, queue
from hypothesis import assume, event, given
from hypothesis import strategies as st
from verdicts import denied_at

from cardquota.core import keys
from cardquota.core.keys import CARD_USAGE
from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.common import UNCHANGED_NOTE
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict
from cardquota.core.violations import Reason

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
CONFIG = PolicyConfig()


def cluster(*objects: dict[str, Any]) -> ClusterSnapshot:
    snapshot = Ledger.build([gpu_node("a100-1", A100, 8), gpu_node("h100-1", H100, 8), *objects]).snapshot
    snapshot.complete = True
    return snapshot


def updated(manifest: dict[str, Any], **annotations: str) -> dict[str, Any]:
    changed = copy.deepcopy(manifest)
    changed["metadata"].setdefault("annotations", {}).update(annotations)
    return changed


def labelled(manifest: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(manifest)
    changed["metadata"].setdefault("labels", {})["team"] = "vision"
    return changed


def carried(verdict: Verdict) -> list[str]:
    return [warning for warning in verdict.warnings if UNCHANGED_NOTE in warning]


USAGE = {CARD_USAGE: f"{A100} 0/4"}


def test_our_usage_annotation_on_a_queue_whose_quota_is_unreadable_is_not_refused() -> None:
    broken = queue("team-a", '{"NVIDIA-A100": "four"}')  # edited by hand since: the README says it keeps being served
    snapshot = cluster(broken)
    verdict = admit(updated(broken, **USAGE), broken, snapshot, CONFIG)
    assert verdict.allowed
    (warning,) = carried(verdict)
    assert warning.startswith('metadata.annotations["volcano.sh/card.quota"]')
    assert not admit(broken, None, snapshot, CONFIG).allowed  # creating it is still refused


def test_an_annotation_update_of_a_child_whose_parent_was_deleted_is_not_refused() -> None:
    child = queue("child", {A100: 2}, parent="gone")
    snapshot = cluster(child)
    verdict = admit(updated(child, **USAGE), child, snapshot, CONFIG)
    assert verdict.allowed
    assert carried(verdict) == [f'spec.parent: parent queue gone does not exist ({UNCHANGED_NOTE})']


def test_a_label_update_of_a_podgroup_over_a_lowered_quota_is_not_refused_but_raising_its_request_is() -> None:
    group = podgroup("train", namespace="ml", queue="team-a", request={A100: 8})
    snapshot = cluster(queue("team-a", {A100: 2}), group)  # the quota was 8 when the group was created
    verdict = admit(labelled(group), group, snapshot, CONFIG)
    assert verdict.allowed
    (warning,) = carried(verdict)
    assert "requests 8 NVIDIA-A100 but queue team-a allows at most 2" in warning

    raised = updated(group, **{keys.CARD_REQUEST: json.dumps({A100: 9})})
    denied_at(admit(raised, group, snapshot, CONFIG),
              ('metadata.annotations["volcano.sh/card.request"]', Reason.INVALID))

    moved = copy.deepcopy(group)
    moved["spec"]["queue"] = "nowhere"
    assert not admit(moved, group, snapshot, CONFIG).allowed  # a changed field is judged in full


def volcano_job(queue_name: str, request: dict[str, int]) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "annotations": {keys.CARD_REQUEST: json.dumps(request)}},
            "spec": {"queue": queue_name, "minAvailable": 1, "tasks": []}}


def test_a_volcano_job_update_ratchets_like_its_podgroup() -> None:
    job = volcano_job("team-a", {A100: 8})
    snapshot = cluster(queue("team-a", {A100: 2}))
    assert not admit(job, None, snapshot, CONFIG).allowed
    verdict = admit(labelled(job), job, snapshot, CONFIG)
    assert verdict.allowed
    assert len(carried(verdict)) == 1


def test_a_new_problem_beside_a_carried_one_is_still_denied() -> None:
    child = queue("child", {A100: 2}, parent="gone")
    snapshot = cluster(child)
    bad = copy.deepcopy(child)
    bad["spec"]["dra"] = {"guarantees": {}}  # a new problem in a value the missing parent does not depend on
    verdict = admit(bad, child, snapshot, CONFIG)
    denied_at(verdict, ("spec.dra.guarantees", Reason.NOT_SUPPORTED))
    assert carried(verdict) == [f'spec.parent: parent queue gone does not exist ({UNCHANGED_NOTE})']


def test_a_new_problem_in_a_value_a_carried_one_depends_on_denies_both() -> None:
    """The missing parent is found because the queue has a card quota: a quota the update writes is judged in full,
    the missing parent with it."""
    child = queue("child", {A100: 2}, parent="gone")
    snapshot = cluster(child)
    bad = updated(child, **{keys.CARD_QUOTA: json.dumps({A100: -1})})
    verdict = admit(bad, child, snapshot, CONFIG)
    denied_at(verdict, ('metadata.annotations["volcano.sh/card.quota"]', Reason.INVALID),
              ("spec.parent", Reason.NOT_FOUND))
    assert carried(verdict) == []


@pytest.mark.parametrize("kind", ["queue", "podgroup"])
def test_create_is_judged_in_full(kind: str) -> None:
    snapshot = cluster(queue("team-a", {A100: 2}))
    manifest = (queue("child", {A100: 2}, parent="gone") if kind == "queue"
                else podgroup("pg", queue="team-a", request={A100: 8}))
    assert not admit(manifest, None, snapshot, CONFIG).allowed


def test_lowering_a_quota_below_current_use_and_below_podgroups_warns_with_the_numbers() -> None:
    before = queue("team-a", {A100: 8, H100: 4})
    running = [pod(f"w-{i}", namespace="ml", card=A100, gpus=1, group="big", node_name="a100-1") for i in range(5)]
    groups = [podgroup("big", namespace="ml", queue="team-a", phase="Running", request={A100: 5}),
              podgroup("huge", namespace="ml", queue="team-a", phase="Pending", request={A100: 8}),
              podgroup("either", namespace="ml", queue="team-a", phase="Pending", request={f"{A100}|{H100}": 7}),
              podgroup("small", namespace="ml", queue="team-a", phase="Pending", request={A100: 1}),
              podgroup("other", namespace="ml", queue="team-b", phase="Pending", request={A100: 8})]
    snapshot = cluster(before, queue("team-b", {A100: 8}), *groups, *running)
    after = updated(before, **{keys.CARD_QUOTA: json.dumps({A100: 2, H100: 4})})
    verdict = admit(after, before, snapshot, CONFIG)
    assert verdict.allowed
    lowered = [w for w in verdict.warnings if "lowered" in w]
    assert lowered == [
        "NVIDIA-A100 quota lowered from 8 to 2, below the 5 queue team-a holds or has reserved now: running work "
        "keeps its cards, new work waits until usage falls below the quota",
        "3 PodGroups of queue team-a request more than the lowered quota allows and can never run: "
        "ml/big (5 NVIDIA-A100, at most 2), ml/either (7 NVIDIA-A100|NVIDIA-H100, at most 6), "
        "ml/huge (8 NVIDIA-A100, at most 2)",
    ]
    raised = updated(before, **{keys.CARD_QUOTA: json.dumps({A100: 10, H100: 4})})
    assert [w for w in admit(raised, before, snapshot, CONFIG).warnings if "lowered" in w] == []


# ------------------------------------------------------------------------------------------------------ pods

def bound(card: str, node_name: str | None = "a100-1") -> dict[str, Any]:
    return pod("w", namespace="ml", card=card, gpus=1, queue="team-a", node_name=node_name)


def renamed(manifest: dict[str, Any], card: str | None) -> dict[str, Any]:
    changed = copy.deepcopy(manifest)
    if card is None:
        del changed["metadata"]["annotations"][keys.CARD_NAME]
    else:
        changed["metadata"]["annotations"][keys.CARD_NAME] = card
    return changed


@pytest.mark.parametrize("new_name", [H100, f"{A100}|{H100}", None])
def test_card_name_of_a_bound_pod_cannot_change(new_name: str | None) -> None:
    """``kubectl annotate pod w volcano.sh/card.name=...`` would move the pod's cards to another quota line."""
    snapshot = cluster(queue("team-a", {A100: 4, H100: 4}))
    before = bound(A100)
    verdict = admit(renamed(before, new_name), before, snapshot, CONFIG)
    denied_at(verdict, ('metadata.annotations["volcano.sh/card.name"]', Reason.FORBIDDEN))
    assert "cannot change on a pod bound to node a100-1 (was NVIDIA-A100)" in verdict.message


PLACEMENT = f"{keys.GPU_INDEX_PREFIX}main"


def with_placement(manifest: dict[str, Any], **placement: str | None) -> dict[str, Any]:
    """The pod with mGPU placement annotations set (None: removed), keyed by container."""
    changed = copy.deepcopy(manifest)
    for container_name, cards in placement.items():
        key = f"{keys.GPU_INDEX_PREFIX}{container_name}"
        if cards is None:
            changed["metadata"]["annotations"].pop(key, None)
        else:
            changed["metadata"]["annotations"][key] = cards
    return changed


@pytest.mark.parametrize(("change", "path", "more"), [
    ({"main": "1"}, PLACEMENT, ""),
    ({"main": None}, PLACEMENT, ""),
    ({"side": "2"}, f"{keys.GPU_INDEX_PREFIX}side", ""),
    ({"main": "1", "side": "2"}, PLACEMENT, " (and 1 more vke.volcengine.com/gpu-index-container-* annotations)"),
], ids=["rewritten", "removed", "added", "two"])
def test_the_mgpu_placement_of_a_bound_pod_cannot_change(change: dict[str, str | None], path: str,
                                                          more: str) -> None:
    """The node's mGPU agent allocates by it and the scheduling rules count the pod's shares on those cards: only
    the extender, which wrote it (and whose writes never reach the policy), may change it."""
    snapshot = cluster(queue("team-a", {A100: 4}))
    before = with_placement(bound(A100), main="0")
    verdict = admit(with_placement(before, **change), before, snapshot, CONFIG)
    denied_at(verdict, (f'metadata.annotations["{path}"]', Reason.FORBIDDEN))
    assert f"cannot change on a pod bound to node a100-1{more}: it says which cards" in verdict.message
    pending = with_placement(bound(A100, node_name=None), main="0")
    assert admit(with_placement(pending, **change), pending, snapshot, CONFIG).allowed  # (placed, not yet bound)
    assert admit(updated(before, team="a"), before, snapshot, CONFIG).allowed


def test_card_name_of_a_pending_pod_is_judged_in_full_and_unchanged_problems_ratchet() -> None:
    snapshot = cluster(queue("team-a", {A100: 4, H100: 4}))
    pending = bound(A100, node_name=None)
    assert admit(renamed(pending, H100), pending, snapshot, CONFIG).allowed
    assert not admit(renamed(pending, "garbage|"), pending, snapshot, CONFIG).allowed
    lowered = cluster(queue("team-a", {H100: 4}))  # the queue's A100 quota was removed since the pod was created
    before = bound(A100)
    verdict = admit(updated(before, **{"volcano.sh/card.note": "x"}), before, lowered, CONFIG)
    assert verdict.allowed
    assert len(carried(verdict)) == 1


@pytest.mark.parametrize("old_metadata", [None, "garbage", {"name": "team-a", "annotations": ["not", "a", "map"]}])
def test_an_old_object_with_unreadable_metadata_does_not_break_the_quota_lowering_check(old_metadata: Any) -> None:
    manifest = queue("team-a", {A100: 2})
    old = {**queue("team-a", {A100: 8}), "metadata": old_metadata}
    verdict = admit(manifest, old, cluster(manifest), CONFIG)
    assert verdict.allowed
    assert not [w for w in verdict.warnings if "lowered" in w]


def test_a_queue_update_carrying_a_non_canonical_quota_over_is_not_rewritten() -> None:
    """The mutating webhook is not called for an update that leaves card.quota as it was (its matchConditions in
    manifests/base/webhooks.yaml): the policy agrees, so the CLI and the webhook give one answer. A quota the update
    writes is put in canonical form as on create."""
    stored = queue("team-a", '{ "NVIDIA-A100": 4 }')
    snapshot = cluster(stored)
    assert admit(labelled(stored), stored, snapshot, CONFIG).patch == ()
    rewritten = admit(updated(stored, **{keys.CARD_QUOTA: '{ "NVIDIA-A100": 5 }'}), stored, snapshot, CONFIG)
    assert [operation["value"] for operation in rewritten.patch] == ['{"NVIDIA-A100":5}']


BROKEN_CONF = "actions: enqueue, allocate\ntiers: ["


def scheduler_configmap(conf: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG.scheduler_configmap,
                                                                  "namespace": "volcano-system"},
            "data": {"volcano-scheduler.conf": conf}}


def test_a_scheduler_configmap_update_that_keeps_its_configuration_is_not_refused() -> None:
    """A relabelled scheduler ConfigMap (a Volcano upgrade that leaves the configuration alone) is not refused for a
    configuration already loaded; the webhook is not even called for it (its matchConditions). Writing a broken
    configuration still is."""
    stored = scheduler_configmap(BROKEN_CONF)
    snapshot = cluster()
    verdict = admit(labelled(stored), stored, snapshot, CONFIG)
    assert verdict.allowed
    assert carried(verdict)
    good = scheduler_configmap("actions: enqueue, allocate\ntiers:\n- plugins:\n  - name: capacity-card\n")
    assert admit(good, None, snapshot, CONFIG).allowed
    assert not admit(stored, good, snapshot, CONFIG).allowed


# ------------------------------------------------------------------------------- ratcheting by value, not by message
# A violation is carried over an UPDATE only while every value it depends on is unchanged (KEP-4008 compares the
# value at the error's path between the old and the new object). These messages do not contain the value the update
# changes ("queue gone does not exist", a JSON syntax error), so comparing messages let each update below through
# with the violation "already so before this update". Each case failed on the code that compared (path, message).

def with_dra(manifest: dict[str, Any], dra: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(manifest)
    changed["spec"]["dra"] = dra
    return changed


def card_renamed(manifest: dict[str, Any], card: str) -> dict[str, Any]:
    return updated(manifest, **{keys.CARD_NAME: card})


VGPU = "gpu.nvidia.com"
GONE_QUEUE = pod("w", namespace="ml", card=A100, gpus=1, queue="gone")
QUEUE_NAME_PATH = f'metadata.annotations["{keys.QUEUE_NAME}"]'
CARD_QUOTA = f'metadata.annotations["{keys.CARD_QUOTA}"]'
BY_VALUE = {  # id: (stored object, the update, where the update is denied)
    "child-queue-raises-its-quota-while-its-parent-is-gone": (
        queue("child", {A100: 5}, parent="gone"), queue("child", {A100: 100_000}, parent="gone"),
        [("spec.parent", Reason.NOT_FOUND)]),
    "podgroup-raises-its-request-in-a-deleted-queue": (
        podgroup("pg", namespace="ml", queue="gone", request={A100: 1}),
        podgroup("pg", namespace="ml", queue="gone", request={A100: 5_000}),
        [("spec.queue", Reason.NOT_FOUND)]),
    "a-malformed-quota-swapped-for-another": (
        queue("team-a", '{"NVIDIA-A100": 4'), queue("team-a", '{"NVIDIA-A100": 100000'),
        [(CARD_QUOTA, Reason.INVALID)]),
    "volcano-job-raises-its-request-in-a-deleted-queue": (
        volcano_job("gone", {A100: 1}), volcano_job("gone", {A100: 5_000}), [("spec.queue", Reason.NOT_FOUND)]),
    "pending-pod-in-a-deleted-queue-renames-its-card": (
        GONE_QUEUE, card_renamed(GONE_QUEUE, H100), [(QUEUE_NAME_PATH, Reason.NOT_FOUND)]),
    "child-queue-raises-its-dra-capability-while-its-parent-is-gone": (
        with_dra(queue("child", parent="gone"), {"capability": {VGPU: {"count": 4}}}),
        with_dra(queue("child", parent="gone"), {"capability": {VGPU: {"count": 4_000}}}),
        [("spec.parent", Reason.NOT_FOUND)]),
    "a-broken-scheduler-configuration-swapped-for-another": (
        scheduler_configmap("- enqueue"), scheduler_configmap("- allocate"),
        [('data["volcano-scheduler.conf"]', Reason.INVALID)]),
}


@pytest.mark.parametrize(("stored", "update", "expected"), BY_VALUE.values(), ids=BY_VALUE.keys())
def test_an_update_that_changes_a_value_a_violation_depends_on_is_judged_in_full(
        stored: dict[str, Any], update: dict[str, Any], expected: list[tuple[str, Reason]]) -> None:
    snapshot = cluster()
    verdict = admit(update, stored, snapshot, CONFIG)
    denied_at(verdict, *expected)
    assert carried(verdict) == []
    # what ratcheting is for still holds for the same object: labels, and cardquota's own usage annotations
    for unrelated in (labelled(stored), updated(stored, **USAGE)):
        verdict = admit(unrelated, stored, snapshot, CONFIG)
        assert verdict.allowed, verdict.message
        assert [warning.split(": ", 1)[0] for warning in carried(verdict)] == [path for path, _ in expected]


def test_after_a_refused_raise_the_parent_can_be_created_again_with_a_sane_quota() -> None:
    """The end of the story the message comparison allowed: the child, raised to 100,000 cards while its parent was
    gone, then blocked re-creating the parent ("10 is below child queue child's quota of 100000")."""
    child = queue("child", {A100: 5}, parent="org")
    raised = queue("child", {A100: 100_000}, parent="org")
    verdict = admit(raised, child, cluster(child), CONFIG)  # org was deleted: the snapshot has the child alone
    stored = raised if verdict.allowed else child
    parent = queue("org", {A100: 10})
    recreated = admit(parent, None, cluster(stored), CONFIG)
    assert recreated.allowed, recreated.message


# ------------------------------------------------------------------------------------------ the property, fuzzed

Location = tuple[str, ...]
QUOTA_TEXTS = ['{"NVIDIA-A100": 4}', '{"NVIDIA-A100": 100000}', '{"NVIDIA-A100": 4', '{"NVIDIA-A100": 9',
               '{"NVIDIA-A100": "four"}', '{"NVIDIA-A100": -1}', "[]", "{}", '{"NVIDIA-H100": 2}']
REQUEST_TEXTS = [*QUOTA_TEXTS, '{"NVIDIA-A100|NVIDIA-H100": 3}', '{"NVIDIA-A100": 1}']
VALUES: dict[str, list[Any]] = {
    keys.CARD_QUOTA: QUOTA_TEXTS, keys.CARD_REQUEST: REQUEST_TEXTS,
    keys.CARD_NAME: [A100, H100, f"{A100}|{H100}", "A||B", ""],
    keys.QUEUE_NAME: ["team-a", "gone", "ghost", ""], keys.GROUP_NAME: ["pg", "missing"],
    keys.CONTAINER_MULTIPLE_GPU: ["1", "1,2", "x"],
    "volcano.sh/crossquota-scoring-strategy": ["most-allocated", "bogus"],
    "queue": ["team-a", "gone", "ghost", "", 7], "parent": ["org", "gone", "root", ""],
    "dra": [{"capability": {VGPU: {"count": 4}}}, {"capability": {VGPU: {"count": 4_000}}}, {"guarantees": {}}, {}],
    "conf": ["- enqueue", "- allocate", "actions: 1", "tiers: [", "actions: enqueue\ntiers: []\n"],
}
FIELDS: dict[str, list[Location]] = {  # per kind, where a value lives: what the fuzzed update changes or removes
    "Queue": [("metadata", "annotations", keys.CARD_QUOTA), ("spec", "parent"), ("spec", "dra")],
    "PodGroup": [("metadata", "annotations", keys.CARD_REQUEST), ("spec", "queue")],
    "Job": [("metadata", "annotations", keys.CARD_REQUEST), ("spec", "queue")],
    "Pod": [("metadata", "annotations", name) for name in (keys.CARD_NAME, keys.QUEUE_NAME, keys.GROUP_NAME,
                                                           keys.CONTAINER_MULTIPLE_GPU,
                                                           "volcano.sh/crossquota-scoring-strategy")],
    "ConfigMap": [("data", "volcano-scheduler.conf")],
}
MISSING_QUEUE_READS: dict[str, set[Location]] = {
    # the values the "queue/parent queue X does not exist" rules read (for Queues, the card quota's: a spec.dra
    # without capability does not look for the parent)
    "Queue": {FIELDS["Queue"][0], FIELDS["Queue"][1]},
    "PodGroup": set(FIELDS["PodGroup"]), "Job": set(FIELDS["Job"]),
    "Pod": set(FIELDS["Pod"][:3]),
}
FUZZ_CLUSTER = cluster(queue("team-a", {A100: 2}), queue("org", {A100: 10}))


def parent_also_read_by_dra(stored: dict[str, Any], update: dict[str, Any], location: Location) -> bool:
    """A Queue's card quota changed while its ``spec.dra.capability`` stays as it was: the DRA rule reports the same
    missing parent from values the update left alone, so carrying it is right."""
    capability = ("spec", "dra", "capability")
    return (stored["kind"] == "Queue" and location == FIELDS["Queue"][0]
            and read(stored, capability) is not None and read(stored, capability) == read(update, capability))


def rendered(location: Location) -> str:
    head, *rest = location
    if head == "metadata":
        return f'metadata.annotations["{rest[1]}"]'
    return f'data["{rest[0]}"]' if head == "data" else ".".join(location)


def values_for(location: Location) -> list[Any]:
    return VALUES.get(location[-1]) or VALUES["conf" if location[0] == "data" else location[-1]]


def placed(manifest: dict[str, Any], location: Location, value: Any) -> dict[str, Any]:
    """A copy with ``value`` at ``location`` (None: removed)."""
    changed = copy.deepcopy(manifest)
    parent = changed
    for name in location[:-1]:
        parent = parent.setdefault(name, {})
    if value is None:
        parent.pop(location[-1], None)
    else:
        parent[location[-1]] = value
    return changed


def read(manifest: dict[str, Any], location: Location) -> Any:
    value: Any = manifest
    for name in location:
        value = value.get(name) if isinstance(value, dict) else None
    return value


@st.composite
def stored_objects(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(FIELDS)))
    manifest = {
        "Queue": lambda: queue("child", parent="org"),
        "PodGroup": lambda: podgroup("pg", namespace="ml", queue="team-a"),
        "Job": lambda: volcano_job("team-a", {A100: 1}),
        "Pod": lambda: pod("w", namespace="ml", card=A100, gpus=1, queue="team-a",
                           resource=draw(st.sampled_from(["nvidia.com/gpu", "vke.volcengine.com/mgpu-core"]))),
        "ConfigMap": lambda: scheduler_configmap(BROKEN_CONF),
    }[kind]()
    for location in FIELDS[kind]:
        manifest = placed(manifest, location, draw(st.sampled_from([None, *values_for(location)])))
    return manifest


@given(stored_objects(), st.data())
def test_an_update_that_changes_a_violating_value_never_carries_that_violation(stored: dict[str, Any],
                                                                               data: st.DataObject) -> None:
    """Whatever the object and whatever of its values the update changes or removes (with a label beside, or not):
    no violation at that value, or inside it, is let through as "already so before this update"; and a missing
    queue or parent queue is carried only by an update that leaves every value that rule reads as it was."""
    kind = stored["kind"]
    location = data.draw(st.sampled_from(FIELDS[kind]))
    value = data.draw(st.sampled_from([None, *values_for(location)]))
    assume(read(stored, location) != value)
    update = placed(labelled(stored) if data.draw(st.booleans()) else stored, location, value)
    verdict = admit(update, stored, FUZZ_CLUSTER, CONFIG)
    changed = rendered(location)
    for warning in carried(verdict):
        path = warning.split(": ", 1)[0]
        assert path != changed, warning
        assert not path.startswith((f"{changed}.", f"{changed}[")), warning
        if location in MISSING_QUEUE_READS.get(kind, set()) and not parent_also_read_by_dra(stored, update, location):
            assert "does not exist" not in warning, warning
    event(f"{kind} {changed}: {'allowed' if verdict.allowed else 'denied'}, {len(carried(verdict))} carried")
