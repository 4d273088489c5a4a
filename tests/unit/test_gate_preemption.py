"""Preemption at the card-quota gate: a unit left at the gate for lack of card quota in its queue displaces the
queue's admitted units of lower priority, per the Queue's policy (cardquota.core.gate.gate_round with
cardquota.core.preemption.RoundPreemption). The victims' cards stay counted until the watch shows them released,
and meanwhile they are kept for the preemptor."""

from __future__ import annotations

from typing import Any

import jsonpatch
from builders import gpu_node, pod, podgroup, queue
from hypothesis import given, settings
from hypothesis import strategies as st

from cardquota.core import keys
from cardquota.core.gate import GateRound, gate_round
from cardquota.core.ledger import Ledger
from cardquota.core.preemption import PreemptionPolicy

H100 = "NVIDIA-H100"
A100 = "NVIDIA-A100"
NODES = [gpu_node(f"h100-{index}", H100, 8) for index in range(4)] + [gpu_node("a100-1", A100, 8)]
LOW, HIGH = 10, 1000


def at(minute: int) -> str:
    return f"2026-12-07T10:{minute:02d}:00Z"


def team(quota: dict[str, int], policy: PreemptionPolicy | str | None = PreemptionPolicy.LOWER_PRIORITY,
         name: str = "research", parent: str | None = None) -> dict[str, Any]:
    annotations = {keys.PREEMPTION: str(policy)} if policy is not None else None
    return queue(name, quota, annotations=annotations, parent=parent)


def running(name: str, size: int, *, gpus: int = 4, priority: int = LOW, bound_at: int = 0, card: str = H100,
            queue_name: str = "research", created: int | None = None, annotations: dict[str, str] | None = None,
            deleting: bool = False) -> list[dict[str, Any]]:
    """A gang of ``size`` pods bound (at minute ``bound_at``), each with ``gpus`` cards."""
    members = [podgroup(name, namespace="ml", queue=queue_name, min_member=size,
                        created=at(created if created is not None else bound_at))]
    for index in range(size):
        member = pod(f"{name}-{index}", namespace="ml", card=card, gpus=gpus, group=name, node_name=f"h100-{index}",
                     priority=priority, scheduled_at=at(bound_at), annotations=annotations)
        if deleting:
            member["metadata"]["deletionTimestamp"] = at(59)
        members.append(member)
    return members


def waiting(name: str, size: int, *, gpus: int = 4, priority: int = HIGH, created: int = 30, card: str = H100,
            queue_name: str = "research") -> list[dict[str, Any]]:
    """A gang of ``size`` pods at the gate."""
    members = [podgroup(name, namespace="ml", queue=queue_name, min_member=size, phase="Pending",
                        created=at(created))]
    members += [pod(f"{name}-{index}", namespace="ml", card=card, gpus=gpus, group=name, queue=queue_name,
                    gated=True, priority=priority, created=at(created), uid=f"uid-{name}-{index}")
                for index in range(size)]
    return members


def decide(*manifests: dict[str, Any], **options: Any) -> GateRound:
    return gate_round(Ledger.build([*NODES, *manifests]), **options)


def victims(result: GateRound) -> list[list[str]]:
    return [[victim.key[1] for victim in preemption.victims] for preemption in result.preemptions]


def reason_of(result: GateRound, first_pod: str) -> str:
    return next(wait.reason for wait in result.waits if wait.pods[0][1] == first_pod)


# ------------------------------------------------------------------------------------------------ the policy


def test_with_never_the_default_nothing_is_preempted_and_the_wait_says_what_it_said_before() -> None:
    for policy in (None, PreemptionPolicy.NEVER, "lowerpriority"):  # (unset, Never, a value that is no policy)
        result = decide(team({H100: 8}, policy), *running("sweep", 2), *waiting("llama", 2))
        assert result.preemptions == []
        assert reason_of(result, "llama-0") == ("waiting at the card-quota gate: queue research has 0 of 8 "
                                                "NVIDIA-H100 free; 0 pods ahead")


def test_lower_priority_evicts_exactly_the_gangs_needed_the_most_recently_admitted_first() -> None:
    admitted = [*running("old", 1, bound_at=1), *running("new", 1, bound_at=5)]
    result = decide(team({H100: 8}), *admitted, *waiting("llama", 1))
    assert victims(result) == [["new"]]
    [preemption] = result.preemptions
    assert preemption.victims[0].pods == (("ml", "new-0"),)
    assert preemption.victim_message() == ("Preempted by ml/llama (priority 1000) to free 4 NVIDIA-H100 in queue "
                                           "research")
    assert preemption.preemptor_message() == ("Preempting 1 workload of queue research to free 4 NVIDIA-H100: "
                                              "ml/new (priority 10)")
    assert reason_of(result, "llama-0").endswith("; preempting 1 workload of queue research to free 4 NVIDIA-H100: "
                                                 "ml/new")
    assert result.lifts == []  # (the victims' cards count until the watch shows them released)
    both = decide(team({H100: 8}), *admitted, *waiting("llama", 2))
    assert victims(both) == [["new", "old"]]


def test_lowest_priority_goes_first_and_equal_or_higher_priority_never() -> None:
    admitted = [*running("mid", 1, priority=500, bound_at=9), *running("low", 1, priority=LOW, bound_at=1),
                *running("peer", 1, priority=HIGH, bound_at=10)]
    result = decide(team({H100: 12}), *admitted, *waiting("llama", 1))
    assert victims(result) == [["low"]]
    result = decide(team({H100: 12}), *admitted, *waiting("llama", 3))
    assert result.preemptions == []
    assert "not preempting: queue research has 0 of 12 NVIDIA-H100 free even with every lower-priority workload" \
        in reason_of(result, "llama-0")


def test_lower_or_newer_equal_priority_displaces_newer_equals_but_not_one_admitted_by_preemption() -> None:
    newer = running("newer", 1, priority=HIGH, created=40)
    policy = PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
    assert victims(decide(team({H100: 4}, policy), *newer, *waiting("llama", 1, created=30))) == [["newer"]]
    assert victims(decide(team({H100: 4}), *newer, *waiting("llama", 1, created=30))) == []
    older = running("older", 1, priority=HIGH, created=20)
    assert victims(decide(team({H100: 4}, policy), *older, *waiting("llama", 1, created=30))) == []
    marked = running("marked", 1, priority=HIGH, created=40, annotations={keys.ADMITTED_BY_PREEMPTION: "true"})
    result = decide(team({H100: 4}, policy), *marked, *waiting("llama", 1, created=30))
    assert result.preemptions == []
    assert "not preempting: no workload admitted in queue research with lower priority" in reason_of(result,
                                                                                                       "llama-0")


def test_workloads_volcano_would_not_preempt_are_never_victims() -> None:
    for where in ("annotations", "labels"):
        admitted = running("sweep", 1)
        admitted[1]["metadata"].setdefault(where, {})[keys.PREEMPTABLE] = "false"
        result = decide(team({H100: 4}), *admitted, *waiting("llama", 1))
        assert result.preemptions == []
        assert 'marked volcano.sh/preemptable: "false"' in reason_of(result, "llama-0")


def test_a_refused_eviction_chooses_another_victim_or_waits() -> None:
    admitted = [*running("old", 1, bound_at=1), *running("new", 1, bound_at=5)]
    result = decide(team({H100: 8}), *admitted, *waiting("llama", 1), refused={("PodGroup", "ml", "new")})
    assert victims(result) == [["old"]]
    result = decide(team({H100: 4}), *running("new", 1), *waiting("llama", 1), refused={("PodGroup", "ml", "new")})
    assert result.preemptions == []
    assert "refused by a PodDisruptionBudget now" in reason_of(result, "llama-0")


def test_never_outside_the_queue_and_a_parents_binding_type_must_be_freed() -> None:
    queues = [queue("org", {H100: 8}), team({H100: 8}, parent="org"), team({H100: 8}, name="other", parent="org")]
    result = decide(*queues, *running("theirs", 2, queue_name="other"), *waiting("llama", 1))
    assert result.preemptions == []
    assert "not preempting: no workload admitted in queue research with lower priority" in reason_of(result,
                                                                                                       "llama-0")
    result = decide(*queues, *running("ours", 1), *running("theirs", 1, queue_name="other"), *waiting("llama", 2))
    assert result.preemptions == []
    assert "NVIDIA-H100 free even with every lower-priority workload of queue research evicted: preemption acts " \
           "within queue research only" in reason_of(result, "llama-0")
    result = decide(*queues, *running("ours", 1), *running("theirs", 1, queue_name="other"), *waiting("llama", 1))
    assert victims(result) == [["ours"]]  # (freeing ours frees the parent's H100 too)


def test_elastic_pods_beyond_a_gang_displace_nothing() -> None:
    through = waiting("llama", 2)
    through[0]["spec"]["minMember"] = 1
    del through[1]["spec"]["schedulingGates"]  # (its gang of 1 is through; llama-1 is elastic)
    result = decide(team({H100: 8}), *running("sweep", 1), *through)
    assert result.preemptions == []


# ----------------------------------------------------------------------------------------- across rounds


def test_victims_being_evicted_are_not_chosen_again_and_their_cards_are_kept_for_the_preemptor() -> None:
    admitted = [*running("a", 1, bound_at=1), *running("b", 1, bound_at=2)]
    later = waiting("small", 1, priority=LOW, created=50)
    evicting = {("PodGroup", "ml", "b")}
    result = decide(team({H100: 8}), *admitted, *waiting("llama", 1), *later, evicting=evicting)
    [preemption] = result.preemptions
    assert preemption.victims == ()  # (b, being evicted, frees enough)
    assert reason_of(result, "llama-0").endswith("; the workloads preempted for it are releasing their cards")
    assert result.lifts == []
    # b released: its cards are free in the room, and the preemptor is judged before the lower-priority pod.
    released = [*running("a", 1, bound_at=1), *running("b", 1, bound_at=2, deleting=True)]
    result = decide(team({H100: 8}), *released, *waiting("llama", 1), *later, preempting={("ml", "llama-0")})
    assert [lift.pod[1] for lift in result.lifts] == ["llama-0"]
    assert result.preemptions == []
    [lift] = result.lifts
    patched = jsonpatch.apply_patch(waiting("llama", 1)[1], [dict(operation) for operation in lift.operations()])
    assert patched["metadata"]["annotations"][keys.ADMITTED_BY_PREEMPTION] == "true"


def test_the_room_a_plan_takes_from_free_cards_is_not_given_to_later_units_of_the_round() -> None:
    # 12 of quota: 8 held by two low gangs, 4 free; the urgent gang of 8 takes the 4 free and evicts one gang.
    admitted = [*running("a", 1, bound_at=1), *running("b", 1, bound_at=2)]
    result = decide(team({H100: 12}), *admitted, *waiting("llama", 2), *waiting("small", 1, priority=LOW,
                                                                                 created=50))
    assert victims(result) == [["b"]]
    assert result.lifts == []  # (small would fit the 4 free cards: they are the preemptor's now)


def test_two_preemptors_are_given_different_victims() -> None:
    admitted = [*running("a", 1, bound_at=1), *running("b", 1, bound_at=2)]
    result = decide(team({H100: 8}), *admitted, *waiting("first", 1, created=30),
                    *waiting("second", 1, created=31))
    assert victims(result) == [["b"], ["a"]]


# ------------------------------------------------------------------------------------------------ property

ADMITTED = st.lists(st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(0, 3)), min_size=1, max_size=5)
"""Admitted gangs: (pods, priority level, minute bound)."""
PREEMPTORS = st.lists(st.tuples(st.integers(1, 2), st.integers(1, 4)), min_size=1, max_size=3)
"""Gangs at the gate: (pods, priority level)."""


@settings(max_examples=60, deadline=None)
@given(ADMITTED, PREEMPTORS, st.integers(8, 16), st.lists(st.booleans(), min_size=12, max_size=12))
def test_rounds_never_exceed_the_quota_never_evict_upward_and_admit_the_preemptor_once_its_victims_go(
        admitted: list[tuple[int, int, int]], preemptors: list[tuple[int, int]], quota: int,
        watch_lags: list[bool]) -> None:
    """Rounds run as the keeper runs them: lifts seen back at once, evictions seen back (pods being deleted) only
    when the watch does not lag; at every instant the cards held (bound, or past the gate) fit the quota, no victim
    has a priority at or above its preemptor's, and no unit is evicted twice."""
    manifests = [team({H100: quota})]
    priorities: dict[str, int] = {}
    for index, (size, level, minute) in enumerate(admitted):
        name = f"run{index}"
        priorities[name] = level * 100
        manifests += running(name, size, gpus=2, priority=level * 100, bound_at=minute)
    for index, (size, level) in enumerate(preemptors):
        name = f"wait{index}"
        priorities[name] = level * 100
        manifests += waiting(name, size, gpus=2, priority=level * 100, created=30 + index)
    held_at_start = sum(2 * size for size, _, _ in admitted)
    if held_at_start > quota:
        return  # (a quota already exceeded at the start is not one preemption produced)
    evicting: dict[tuple[str, str, str], None] = {}
    preempting: set[tuple[str, str]] = set()
    evicted: set[tuple[str, str, str]] = set()
    for lag in watch_lags:
        ledger = Ledger.build([*NODES, *manifests])
        assert sum(ledger.held_cards("research").values()) <= quota
        result = gate_round(ledger, evicting=list(evicting), preempting=preempting)
        for preemption in result.preemptions:
            preempting.update(preemption.pods)
            for victim in preemption.victims:
                assert victim.priority < preemption.preemptor.priority
                assert victim.identity not in evicted, "evicted twice"
                evicted.add(victim.identity)
                evicting[victim.identity] = None
        lifted = {lift.pod for lift in result.lifts}
        for manifest in manifests:
            metadata = manifest["metadata"]
            if manifest["kind"] == "Pod" and (metadata["namespace"], metadata["name"]) in lifted:
                del manifest["spec"]["schedulingGates"]
        if not lag:  # the watch brings the evictions: the victims' pods are being deleted
            for manifest in manifests:
                group = manifest["metadata"].get("annotations", {}).get(keys.GROUP_NAME)
                if manifest["kind"] == "Pod" and ("PodGroup", "ml", group) in evicting:
                    manifest["metadata"]["deletionTimestamp"] = at(59)
            evicting.clear()
    final = Ledger.build([*NODES, *manifests])
    assert sum(final.held_cards("research").values()) <= quota


def test_the_admitted_units_kept_with_the_ledger_follow_every_change_a_rebuild_would_see() -> None:
    """The memo of admitted units (read again when the queue's held version changes) equals a fresh read after each
    change: a pod marked not preemptable, a pod bound, one being deleted, a PodGroup deleted, a node's cards gone."""
    from cardquota.core.preemption import admitted_memo, admitted_units

    manifests = [team({H100: 16}), *running("a", 2, bound_at=1), *running("b", 1, bound_at=2), *waiting("w", 1)]
    ledger = Ledger.build([*NODES, *manifests])

    def same() -> None:
        assert admitted_memo(ledger).admitted("research") == admitted_units(ledger, "research")
        fresh = Ledger.build([*NODES, *manifests])
        assert sorted(admitted_units(ledger, "research"), key=lambda unit: unit.key) == sorted(
            admitted_units(fresh, "research"), key=lambda unit: unit.key)

    same()
    changes: list[tuple[str, dict[str, Any]]] = []
    marked = dict(manifests[2], metadata={**manifests[2]["metadata"],
                                          "annotations": {**manifests[2]["metadata"]["annotations"],
                                                          keys.PREEMPTABLE: "false"}})
    changes.append(("upsert", marked))
    bound = dict(manifests[-1], spec={**manifests[-1]["spec"], "nodeName": "h100-3"})
    del bound["spec"]["schedulingGates"]
    changes.append(("upsert", bound))
    deleting = dict(manifests[4], metadata={**manifests[4]["metadata"], "deletionTimestamp": at(59)})
    changes.append(("upsert", deleting))
    changes.append(("delete", manifests[1]))
    changes.append(("delete", NODES[0]))
    for action, manifest in changes:
        if action == "upsert":
            ledger.upsert(manifest)
            manifests = [manifest if (m["kind"], m["metadata"]["name"]) == (manifest["kind"], manifest["metadata"][
                "name"]) else m for m in manifests]
        else:
            ledger.delete(manifest)
            manifests = [m for m in manifests if m is not manifest]
        if manifest is NODES[0]:
            fresh = Ledger.build([*NODES[1:], *manifests])
            assert admitted_memo(ledger).admitted("research") == admitted_units(ledger, "research")
            assert len(admitted_units(fresh, "research")) == len(admitted_units(ledger, "research"))
        else:
            same()
