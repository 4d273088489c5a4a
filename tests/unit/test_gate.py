"""The card-quota gate's decisions: which gated pods go through, together or alone, for which card type, and why the
others wait (cardquota.core.gate)."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest
from builders import gpu_node, pod, podgroup, queue

from cardquota.core import keys
from cardquota.core.gate import (
    GateRound,
    HeadOfLine,
    Lift,
    Wait,
    gate_operations,
    gate_round,
    needs_gate,
)
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Pod
from cardquota.core.policies.pod import narrowed_affinity_operations

A100 = "NVIDIA-A100"
H100 = "NVIDIA-H100"
NODES = [gpu_node("a100-1", A100, 8), gpu_node("h100-1", H100, 8)]
T0 = "2026-12-07T10:00:00Z"


def at(second: int) -> str:
    return f"2026-12-07T10:00:{second:02d}Z"


def gated(name: str, *, card: str = A100, gpus: int = 1, queue_name: str = "team", created: str = T0,
          **fields: Any) -> dict[str, Any]:
    return pod(name, namespace="ml", card=card, gpus=gpus, queue=queue_name, gated=True, created=created,
               uid=f"uid-{name}", **fields)


def decide(*manifests: dict[str, Any], in_flight: tuple[Lift, ...] = (),
           head_of_line: HeadOfLine = HeadOfLine.BEST_EFFORT_FIFO) -> GateRound:
    return gate_round(Ledger.build([*NODES, *manifests]), in_flight, head_of_line)


def lifted(result: GateRound) -> list[tuple[str, str]]:
    return [(lift.pod[1], lift.card_type) for lift in result.lifts]


def reasons(result: GateRound) -> dict[tuple[str, ...], str]:
    return {tuple(key[1] for key in wait.pods): wait.reason for wait in result.waits}


# ------------------------------------------------------------------------------------------------ one pod


def test_a_gated_pod_whose_cards_fit_goes_through_with_a_patch_that_lifts_only_cardquotas_gate() -> None:
    result = decide(queue("team", {A100: 4}), gated("p", gpus=2))
    assert lifted(result) == [("p", A100)]
    [lift] = result.lifts
    manifest = gated("p", gpus=2)
    manifest["spec"]["schedulingGates"].insert(0, {"name": "example.com/other"})
    lift = Lift(lift.pod, lift.uid, lift.queue, lift.card_type, lift.cards, lift.card_name,
                ("example.com/other", keys.CARD_GATE))
    patched = jsonpatch.apply_patch(manifest, list(lift.operations()))
    assert patched["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    assert patched["metadata"]["annotations"][keys.CARD_NAME] == A100  # (one type: nothing narrowed)


def test_the_lift_fails_on_a_pod_recreated_or_whose_gates_changed() -> None:
    [lift] = decide(queue("team", {A100: 4}), gated("p")).lifts
    operations = list(lift.operations())
    recreated = gated("p")
    recreated["metadata"]["uid"] = "uid-other"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(recreated, operations)
    lifted_already = gated("p")
    lifted_already["spec"]["schedulingGates"] = []
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(lifted_already, operations)


@pytest.mark.parametrize(("holders", "reason"), [
    ([pod("run", namespace="ml", card=A100, gpus=4, queue="team", node_name="a100-1")],
     "waiting at the card-quota gate: queue team has 0 of 4 NVIDIA-A100 free; 0 pods ahead"),
    # an unbound pod past the gate holds its cards as a bound one does
    ([pod("through", namespace="ml", card=A100, gpus=3, queue="team")],
     "waiting at the card-quota gate: queue team has 1 of 4 NVIDIA-A100 free; 0 pods ahead"),
])
def test_a_pod_whose_cards_do_not_fit_waits_and_says_why(holders: list[dict[str, Any]], reason: str) -> None:
    result = decide(queue("team", {A100: 4}), *holders, gated("p", gpus=2))
    assert result.lifts == []
    assert reasons(result) == {("p",): reason}


def test_pods_that_hold_nothing_do_not_count_against_the_room() -> None:
    result = decide(queue("team", {A100: 4}),
                    pod("done", namespace="ml", card=A100, gpus=4, queue="team", node_name="a100-1",
                        phase="Succeeded"),
                    gated("p", gpus=4))
    assert lifted(result) == [("p", A100)]


def test_a_queue_without_quota_for_the_type_lets_nothing_through() -> None:
    result = decide(queue("team", {H100: 4}), gated("p"))
    assert reasons(result) == {("p",): "waiting at the card-quota gate: queue team has 0 of 0 NVIDIA-A100 free; "
                                        "0 pods ahead"}


def test_in_flight_lifts_hold_their_cards_until_the_watch_brings_them_back() -> None:
    flying = Lift(("ml", "earlier"), "uid-earlier", "team", A100, 3, A100, (keys.CARD_GATE,))
    result = decide(queue("team", {A100: 4}), gated("earlier", gpus=3), gated("p", gpus=2), in_flight=(flying,))
    assert result.lifts == []  # (and "earlier" is not lifted twice)
    assert reasons(result) == {("p",): "waiting at the card-quota gate: queue team has 1 of 4 NVIDIA-A100 free; "
                                        "0 pods ahead"}


# ---------------------------------------------------------------------------------------------- hierarchy


def test_a_parents_quota_holds_for_its_children_together() -> None:
    queues = [queue("org", {A100: 4}), queue("team-a", {A100: 4}, parent="org"), queue("team", {A100: 4}, parent="org")]
    holder = pod("run", namespace="ml", card=A100, gpus=4, queue="team-a", node_name="a100-1")
    result = decide(*queues, holder, gated("p"))
    assert reasons(result) == {("p",): "waiting at the card-quota gate: queue team (parent org) has 0 of 4 NVIDIA-A100 "
                                        "free; 0 pods ahead"}
    assert lifted(decide(*queues, gated("p", gpus=4))) == [("p", A100)]


def test_siblings_share_the_parent_in_priority_then_creation_order() -> None:
    queues = [queue("org", {A100: 4}), queue("team-a", {A100: 4}, parent="org"), queue("team", {A100: 4}, parent="org")]
    result = decide(*queues, gated("late", gpus=3, queue_name="team-a", created=at(5)),
                    gated("early", gpus=3, created=at(1)), gated("urgent", gpus=1, created=at(9), priority=100))
    assert lifted(result) == [("urgent", A100), ("early", A100)]
    assert set(reasons(result)) == {("late",)}


def test_an_ancestor_without_card_quota_limits_nothing_and_a_missing_type_there_is_zero() -> None:
    free = decide(queue("org"), queue("team", {A100: 4}, parent="org"), gated("p", gpus=4))
    assert lifted(free) == [("p", A100)]
    zero = decide(queue("org", {H100: 4}), queue("team", {A100: 4}, parent="org"), gated("p"))
    assert "queue team (parent org) has 0 of 0 NVIDIA-A100 free" in reasons(zero)[("p",)]


def test_a_cycle_of_parents_ends() -> None:
    ledger = Ledger.build([queue("a", {A100: 1}, parent="b"), queue("b", {A100: 1}, parent="a")])
    assert ledger.snapshot.ancestry("a") == ["a", "b"]


# ---------------------------------------------------------------------------------------------------- gangs


def gang(name: str, size: int, min_member: int, *, gpus: int = 1, through: int = 0) -> list[dict[str, Any]]:
    members = [podgroup(name, namespace="ml", queue="team", min_member=min_member)]
    for index in range(size):
        member = gated(f"{name}-{index}", gpus=gpus, group=name, created=at(index))
        if index < through:
            del member["spec"]["schedulingGates"]
        members.append(member)
    return members


def test_a_gang_goes_through_together_or_not_at_all() -> None:
    assert len(decide(queue("team", {A100: 4}), *gang("job", 4, 4)).lifts) == 4
    short = decide(queue("team", {A100: 3}), *gang("job", 4, 4))
    assert short.lifts == []
    assert reasons(short) == {tuple(f"job-{i}" for i in range(4)):
                              "waiting at the card-quota gate: queue team has 0 of 3 NVIDIA-A100 free; 0 pods ahead"}


def test_a_gang_whose_pods_do_not_all_exist_waits_for_them() -> None:
    result = decide(queue("team", {A100: 8}), *gang("job", 3, 4))
    assert result.lifts == []
    assert "3 of the 4 pods of its gang (podgroup ml/job's minMember) exist" in reasons(result)[("job-0", "job-1",
                                                                                                  "job-2")]


def test_a_gang_found_half_through_is_completed() -> None:
    result = decide(queue("team", {A100: 4}), *gang("job", 4, 4, through=2))
    assert sorted(lifted(result)) == [("job-2", A100), ("job-3", A100)]


def test_elastic_pods_beyond_the_gang_go_one_at_a_time_never_before_it() -> None:
    result = decide(queue("team", {A100: 5}), *gang("job", 6, 4))
    assert sorted(name for name, _ in lifted(result)) == ["job-0", "job-1", "job-2", "job-3", "job-4"]
    assert set(reasons(result)) == {("job-5",)}
    blocked = decide(queue("team", {A100: 3}), *gang("job", 6, 4))
    assert blocked.lifts == []
    assert set(reasons(blocked)) == {("job-0", "job-1", "job-2", "job-3")}  # the elastic pods wait with the gang


@pytest.mark.parametrize(("head_of_line", "expected"), [
    (HeadOfLine.BEST_EFFORT_FIFO, [("small", A100)]),
    (HeadOfLine.STRICT_FIFO, []),
])
def test_head_of_line_policy(head_of_line: HeadOfLine, expected: list[tuple[str, str]]) -> None:
    result = decide(queue("team", {A100: 3}), *gang("big", 4, 4), gated("small", created=at(30)),
                    head_of_line=head_of_line)
    assert lifted(result) == expected
    if head_of_line is HeadOfLine.STRICT_FIFO:
        assert reasons(result)[("small",)] == ("waiting at the card-quota gate behind podgroup ml/big (StrictFIFO)")
    else:
        assert "4 pods ahead" not in reasons(result)[tuple(f"big-{i}" for i in range(4))]


def test_pods_ahead_are_counted_in_the_queues_order() -> None:
    result = decide(queue("team", {A100: 1}), gated("a", created=at(1)), gated("b", created=at(2)),
                    gated("c", created=at(3)))
    assert lifted(result) == [("a", A100)]
    assert reasons(result)[("c",)].endswith("; 2 pods ahead")


# ---------------------------------------------------------------------------------------------- alternatives


def test_alternatives_take_the_first_with_room_and_the_lift_narrows_the_card_name() -> None:
    holder = pod("run", namespace="ml", card=A100, gpus=4, queue="team", node_name="a100-1")
    result = decide(queue("team", {A100: 4, H100: 4}), holder, gated("p", card=f"{A100}|{H100}", gpus=2))
    assert lifted(result) == [("p", H100)]
    [lift] = result.lifts
    patched = jsonpatch.apply_patch(gated("p", card=f"{A100}|{H100}", gpus=2),
                                    list(lift.operations()))
    assert patched["metadata"]["annotations"][keys.CARD_NAME] == H100
    assert patched["metadata"]["annotations"][keys.CARD_NAME_REQUESTED] == f"{A100}|{H100}"


def test_alternatives_prefer_one_with_free_cards_on_the_nodes() -> None:
    filler = pod("other", namespace="x", card=A100, gpus=8, queue="other", node_name="a100-1")
    result = decide(queue("other", {A100: 8}), queue("team", {A100: 4, H100: 4}), filler,
                    gated("p", card=f"{A100}|{H100}", gpus=2))
    assert lifted(result) == [("p", H100)]


def test_an_alternatives_pod_past_the_gate_unnarrowed_counts_against_every_alternative() -> None:
    old = pod("old", namespace="ml", card=f"{A100}|{H100}", gpus=4, queue="team")  # created before the gate
    result = decide(queue("team", {A100: 4, H100: 4}), old, gated("p", card=H100))
    assert result.lifts == []


def test_narrowing_the_affinity_adds_a_requirement_to_every_term() -> None:
    manifest = gated("p", card=f"{A100}|{H100}")
    terms = [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100, H100]}]},
             {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
    manifest["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}
    catalog = Ledger.build(NODES).snapshot.catalog()
    operations = narrowed_affinity_operations(manifest, H100, catalog)
    patched = jsonpatch.apply_patch(manifest, list(operations))
    narrowed = {"key": "nvidia.com/gpu.product", "operator": "In", "values": [H100]}
    for term in patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]:
        assert term["matchExpressions"][-1] == narrowed
    assert narrowed_affinity_operations(patched, H100, catalog) == []
    bare = jsonpatch.apply_patch(gated("q"), list(narrowed_affinity_operations(
        gated("q"), H100, catalog)))
    assert bare["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [narrowed]}]}


# ------------------------------------------------------------------------------------------- at creation


def test_the_gate_is_added_once() -> None:
    manifest = pod("p", card=A100, gpus=1)
    patched = jsonpatch.apply_patch(manifest, list(gate_operations(manifest)))
    assert patched["spec"]["schedulingGates"] == [{"name": keys.CARD_GATE}]
    assert gate_operations(patched) == []
    other = pod("p", card=A100, gpus=1)
    other["spec"]["schedulingGates"] = [{"name": "example.com/x"}]
    patched = jsonpatch.apply_patch(other, list(gate_operations(other)))
    assert patched["spec"]["schedulingGates"] == [{"name": "example.com/x"}, {"name": keys.CARD_GATE}]


@pytest.mark.parametrize(("manifest", "expected"), [
    (pod("p", card=A100, gpus=1), True),
    (pod("p", gpus=1), False),  # no card.name: not a card pod
    (pod("p", card=A100, gpus=1, node_name="a100-1"), False),  # created bound: no scheduler, and gates refused
    (pod("p", card=A100, containers=[{"name": "c", "image": "x"}]), False),  # asks for no cards
])
def test_which_pods_are_gated(manifest: dict[str, Any], expected: bool) -> None:
    ledger = Ledger.build(NODES)
    assert needs_gate(Pod.from_manifest(manifest), ledger.snapshot) is expected


def test_the_pod_webhook_gates_a_card_pod_at_creation_only_when_the_gate_is_on() -> None:
    from cardquota.cli.check import apply_patch
    from cardquota.core.policies import pod as pod_policy
    from cardquota.core.policies.config import PolicyConfig

    snapshot = Ledger.build([*NODES, queue("team", {A100: 4})]).snapshot
    snapshot.complete = True
    manifest = pod("p", namespace="ml", card=A100, gpus=1, queue="team")
    on = pod_policy.admit(manifest, None, snapshot, PolicyConfig(card_gate=True))
    assert on.allowed
    assert apply_patch(manifest, on.patch)["spec"]["schedulingGates"] == [{"name": keys.CARD_GATE}]
    off = pod_policy.admit(manifest, None, snapshot, PolicyConfig())
    assert "schedulingGates" not in apply_patch(manifest, off.patch)["spec"]
    updated = pod_policy.admit(manifest, manifest, snapshot, PolicyConfig(card_gate=True))
    assert not updated.patch  # an update is never gated: gates can only be removed once a pod exists


def test_each_waiting_pod_and_the_podgroup_of_a_waiting_gang_are_told_why() -> None:
    waits = [Wait((("ml", "w-0"), ("ml", "w-1")), ("ml", "job"), "team", "waiting at the card-quota gate: x"),
             Wait((("ml", "solo"),), None, "team", "waiting at the card-quota gate: y")]
    assert GateRound([], waits).sentences() == {
        ("Pod", "ml", "w-0"): "waiting at the card-quota gate: x",
        ("Pod", "ml", "w-1"): "waiting at the card-quota gate: x",
        ("PodGroup", "ml", "job"): "waiting at the card-quota gate: x",
        ("Pod", "ml", "solo"): "waiting at the card-quota gate: y"}


# ----------------------------------------------------------------------------------------------- DRA quotas

H100_CLASS = "nvidia-h100"


def dra_queue(name: str, count: int | None = None, *, parent: str | None = None,
              capacity: dict[str, str] | None = None) -> dict[str, Any]:
    """A queue bounding the DRA DeviceClass ``nvidia-h100`` (``count`` devices, ``capacity`` dimensions)."""
    made = queue(name, parent=parent)
    entry: dict[str, Any] = {}
    if count is not None:
        entry["count"] = count
    if capacity:
        entry["capacity"] = capacity
    made["spec"]["dra"] = {"capability": {H100_CLASS: entry}}
    return made


def template(name: str, count: int = 1, memory: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": H100_CLASS, "count": count}
    if memory is not None:
        exactly["capacity"] = {"requests": {"memory": memory}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


def claiming(name: str, claim: str = "two", *, queue_name: str = "team", is_template: bool = True,
             gated_: bool = True, created: str = T0, node_name: str | None = None, **fields: Any) -> dict[str, Any]:
    """A pod without card.name naming one DRA claim (a template by default)."""
    made = pod(name, namespace="ml", queue=queue_name, gated=gated_, created=created, uid=f"uid-{name}",
               node_name=node_name, **fields)
    made["spec"]["resourceClaims"] = [{"name": "gpu", ("resourceClaimTemplateName" if is_template
                                                        else "resourceClaimName"): claim}]
    return made


def test_a_pod_naming_claims_goes_through_while_its_devices_fit_its_queues_dra_capability() -> None:
    """team may use 4 nvidia-h100 devices; each pod's template asks 2: two pods go through, the third waits with
    the gate's sentence."""
    result = decide(dra_queue("team", 4), template("two", 2), claiming("a", created=at(1)),
                    claiming("b", created=at(2)), claiming("c", created=at(3)))
    assert [lift.pod[1] for lift in result.lifts] == ["a", "b"]
    assert [lift.card_type for lift in result.lifts] == ["", ""]  # (no card: nothing narrowed)
    assert not result.lifts[0].narrows
    assert reasons(result) == {("c",): "waiting at the card-quota gate: queue team has 0 of 4 nvidia-h100 devices "
                                       "free; 2 pods ahead"}


def test_bound_pods_pods_past_the_gate_and_lifts_in_flight_hold_their_devices() -> None:
    bound = claiming("bound", gated_=False, node_name="h100-1")
    past = claiming("past", gated_=False)
    assert reasons(decide(dra_queue("team", 4), template("two", 2), bound, past, claiming("c"))) == {
        ("c",): "waiting at the card-quota gate: queue team has 0 of 4 nvidia-h100 devices free; 0 pods ahead"}
    [first] = decide(dra_queue("team", 4), template("two", 2), bound, claiming("c")).lifts
    assert reasons(decide(dra_queue("team", 4), template("two", 2), bound, claiming("c"), claiming("d", created=at(5)),
                          in_flight=(first,))) == {
        ("d",): "waiting at the card-quota gate: queue team has 0 of 4 nvidia-h100 devices free; 0 pods ahead"}
    done = claiming("done", gated_=False, node_name="h100-1")
    done["status"] = {"phase": "Succeeded"}
    assert [lift.pod[1] for lift in decide(dra_queue("team", 4), template("two", 2), done, past,
                                           claiming("c")).lifts] == ["c"]


def test_a_parents_dra_capability_holds_across_its_children_and_capacity_dimensions_count() -> None:
    org = dra_queue("org", 3)
    children = [dra_queue("team-a", 2, parent="org"), dra_queue("team-b", 2, parent="org")]
    result = decide(org, *children, template("one", 1), claiming("a1", "one", queue_name="team-a", created=at(1)),
                    claiming("a2", "one", queue_name="team-a", created=at(2)),
                    claiming("b1", "one", queue_name="team-b", created=at(3)),
                    claiming("b2", "one", queue_name="team-b", created=at(4)))
    assert [lift.pod[1] for lift in result.lifts] == ["a1", "a2", "b1"]
    assert reasons(result) == {("b2",): "waiting at the card-quota gate: queue team-b (parent org) has 0 of 3 "
                                        "nvidia-h100 devices free; 1 pod ahead"}
    memory = decide(dra_queue("team", capacity={"memory": "80Gi"}), template("big", 1, memory="48Gi"),
                    claiming("m1", "big", created=at(1)), claiming("m2", "big", created=at(2)))
    assert [lift.pod[1] for lift in memory.lifts] == ["m1"]
    assert reasons(memory) == {("m2",): "waiting at the card-quota gate: queue team has too little nvidia-h100 "
                                        "memory quota: total would be 103079215104, but capability is 80Gi; 1 pod "
                                        "ahead"}


def test_a_card_gang_with_claims_goes_through_only_when_cards_and_devices_both_fit() -> None:
    group = podgroup("g", namespace="ml", queue="team")
    group["spec"]["minMember"] = 2
    members = [gated(f"g-{index}", group="g", created=at(index)) for index in range(2)]
    for member in members:
        member["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "two"}]
    team = dra_queue("team", 3)
    team["metadata"]["annotations"] = {keys.CARD_QUOTA: '{"NVIDIA-A100": 4}'}
    result = decide(team, template("two", 2), group, *members)
    assert result.lifts == []
    assert set(reasons(result).values()) == {
        "waiting at the card-quota gate: queue team has 1 of 3 nvidia-h100 devices free; 0 pods ahead"}
    team["spec"]["dra"]["capability"][H100_CLASS]["count"] = 4
    assert [(lift.pod[1], lift.card_type) for lift in decide(team, template("two", 2), group, *members).lifts] == [
        ("g-0", A100), ("g-1", A100)]


def test_a_pod_gated_under_a_dra_quota_since_removed_goes_through() -> None:
    assert [lift.pod[1] for lift in decide(queue("team"), template("two", 2), claiming("a")).lifts] == ["a"]


def test_pods_naming_claims_wait_until_the_claims_are_read() -> None:
    ledger = Ledger.build([*NODES, dra_queue("team", 4), template("two", 2), claiming("a")])
    result = gate_round(ledger, dra_readable=False)
    assert result.lifts == []
    assert reasons(result) == {("a",): "waiting at the card-quota gate: the DRA ResourceClaims are not read yet; "
                                       "0 pods ahead"}
    assert [lift.pod[1] for lift in gate_round(ledger).lifts] == ["a"]


@pytest.mark.parametrize(("manifests", "expected"), [
    ([dra_queue("team", 4), claiming("p", gated_=False)], True),
    ([dra_queue("org", 4), queue("team", parent="org"), claiming("p", gated_=False)], True),  # an ancestor's bound
    ([queue("team"), claiming("p", gated_=False)], False),  # no DRA capability over the queue
    ([dra_queue("team", 4), claiming("p", gated_=False, node_name="h100-1")], False),  # created bound
    ([dra_queue("team", 4), pod("p", namespace="ml", queue="team")], False),  # names no claim
])
def test_which_pods_naming_claims_are_gated(manifests: list[dict[str, Any]], expected: bool) -> None:
    ledger = Ledger.build([*NODES, *manifests])
    [manifest] = [m for m in manifests if m["kind"] == "Pod"]
    assert needs_gate(Pod.from_manifest(manifest), ledger.snapshot) is expected


def test_claims_follow_their_objects_through_updates_and_deletes() -> None:
    """A claim the watch has not brought yet: the pod waits (it would otherwise count as asking nothing)."""
    ledger = Ledger.build([*NODES, dra_queue("team", 4), claiming("a", "solo", is_template=False)])
    assert reasons(gate_round(ledger)) == {("a",): "waiting at the card-quota gate: its ResourceClaim solo is not "
                                                   "known yet; 0 pods ahead"}
    claim = template("solo", 6)
    claim["kind"] = "ResourceClaim"
    claim["spec"] = claim["spec"]["spec"]
    ledger.upsert(claim)
    assert reasons(gate_round(ledger)) == {("a",): "waiting at the card-quota gate: queue team has 4 of 4 nvidia-h100 "
                                                   "devices free; 0 pods ahead"}
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    ledger.upsert(claim)
    assert [lift.pod[1] for lift in gate_round(ledger).lifts] == ["a"]
    ledger.delete(claim)
    assert gate_round(ledger).lifts == []


def named_claim(name: str, count: int) -> dict[str, Any]:
    made = template(name, count)
    made["kind"] = "ResourceClaim"
    made["spec"] = made["spec"]["spec"]
    return made


def test_a_template_deleted_while_a_pod_made_from_it_runs_still_counts_that_pods_devices() -> None:
    """(Review finding: the running pod counted zero after the delete, and a pod asking 4 went past a capability of
    4 beside its 2.)"""
    made_from = template("two", 2)
    ledger = Ledger.build([*NODES, dra_queue("team", 4), made_from, claiming("bound", gated_=False, node_name="h100-1"),
                           named_claim("four", 4), claiming("new", "four", is_template=False, created=at(5))])
    assert gate_round(ledger).lifts == []
    ledger.delete(made_from)
    assert gate_round(ledger).lifts == []
    assert reasons(gate_round(ledger)) == {
        ("new",): "waiting at the card-quota gate: queue team has 2 of 4 nvidia-h100 devices free; 0 pods ahead"}


def test_a_request_listing_alternatives_counts_every_one() -> None:
    """``firstAvailable`` (resource.k8s.io/v1): the allocator may take any alternative, so each is counted (review
    finding: they counted nothing, and two pods went past a capability of 1)."""
    from cardquota.core.dra_claims import asked

    prioritized = named_claim("prio", 1)
    prioritized["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": H100_CLASS, "count": 4},
        {"name": "small", "deviceClassName": H100_CLASS, "count": 2}]}]
    assert asked(prioritized)[H100_CLASS].count == 6
    assert decide(dra_queue("team", 6), prioritized, claiming("a", "prio", is_template=False, created=at(1)),
                  claiming("b", "prio", is_template=False, created=at(2))).lifts[0].pod[1] == "a"
    assert decide(dra_queue("team", 1), prioritized, claiming("a", "prio", is_template=False)).lifts == []


def test_a_lift_in_flight_counts_its_devices_even_where_no_dra_quota_bounded_it() -> None:
    """(Review finding: a pod let through where no capability applied had no devices on its lift; a capability set
    before the watch brought it back then let another pod past it.)"""
    ledger = Ledger.build([*NODES, queue("team"), template("two", 2), claiming("a", created=at(1))])
    [lift] = gate_round(ledger).lifts
    assert lift.devices[H100_CLASS].count == 2
    ledger.upsert(dra_queue("team", 2))
    ledger.upsert(claiming("b", created=at(2)))
    assert gate_round(ledger, [lift]).lifts == []


def test_pods_under_a_quota_wait_while_a_pod_past_the_gate_there_names_an_unknown_claim() -> None:
    """(Review finding: a pod created without the gate whose claim the watch had not brought yet counted zero.)"""
    ledger = Ledger.build([*NODES, dra_queue("team", 2), template("two", 2),
                           claiming("past", "solo", is_template=False, gated_=False), claiming("w", created=at(3))])
    assert reasons(gate_round(ledger)) == {("w",): "waiting at the card-quota gate: a pod past the gate under queue "
                                                   "team names a ResourceClaim not known yet (what it holds cannot "
                                                   "be told); 0 pods ahead"}
    ledger.upsert(named_claim("solo", 2))
    assert reasons(gate_round(ledger)) == {
        ("w",): "waiting at the card-quota gate: queue team has 0 of 2 nvidia-h100 devices free; 0 pods ahead"}


def test_a_pod_naming_claims_is_gated_whatever_its_queue_while_some_queue_sets_a_dra_capability() -> None:
    """Its PodGroup may not be known yet when it is created (review finding: read as queue default, it was not
    gated); one whose queue turns out unbounded goes through in the next round."""
    manifest = claiming("p", gated_=False, queue_name=None, group="g")
    without_group = Ledger.build([*NODES, dra_queue("team", 2)])
    assert needs_gate(Pod.from_manifest(manifest), without_group.snapshot)
    assert not needs_gate(Pod.from_manifest(manifest), Ledger.build([*NODES, queue("team")]).snapshot)
    assert [lift.pod[1] for lift in decide(dra_queue("team", 2), queue("default"), template("two", 2),
                                           claiming("x", queue_name="default")).lifts] == ["x"]


def test_a_shared_resource_claim_counts_once_in_its_queue() -> None:
    """The devices of a ResourceClaim are allocated once, whichever pods share it (review finding: counted once per
    pod, a pod sharing a running pod's claim waited for ever; one naming it twice was said to fit and still
    waited)."""
    sharing = decide(dra_queue("team", 2), named_claim("shared", 2),
                     claiming("a", "shared", is_template=False, gated_=False, node_name="h100-1"),
                     claiming("b", "shared", is_template=False, created=at(2)))
    assert [lift.pod[1] for lift in sharing.lifts] == ["b"]
    assert sharing.lifts[0].devices == {}  # (nothing more held once it is through)
    twice = claiming("c", "shared", is_template=False, created=at(3))
    twice["spec"]["resourceClaims"].append({"name": "again", "resourceClaimName": "shared"})
    assert [lift.pod[1] for lift in decide(dra_queue("team", 2), named_claim("shared", 2), twice).lifts] == ["c"]
    assert decide(dra_queue("team", 1), named_claim("shared", 2), twice).lifts == []
