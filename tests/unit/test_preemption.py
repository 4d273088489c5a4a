"""Choosing preemption victims inside a card quota (cardquota.core.preemption): the policy annotation, Volcano's
preemptable reading, and which admitted units a waiting one displaces, per policy — and a property over random
queues."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest
from builders import admitted_unit, pod, queue, waiting_unit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cardquota.core import keys
from cardquota.core.card_room import CardRoom
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Pod
from cardquota.core.preemption import (
    Admitted,
    NoPlan,
    NoPreemption,
    PreemptionPlan,
    PreemptionPolicy,
    Preemptor,
    budget_refusal,
    choose_victims,
    may_displace,
    pod_preemptable,
    preemption_policy,
    unit_preemptable,
)
from cardquota.core.quota import card_alternatives

A100 = "NVIDIA-A100"
H100 = "NVIDIA-H100"
NEVER = PreemptionPolicy.NEVER
LOWER = PreemptionPolicy.LOWER_PRIORITY
NEWER_EQUAL = PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY


def at(minute: int) -> str:
    return f"2026-12-07T09:{minute:02d}:00Z"


def room_of(queues: Sequence[dict[str, Any]], admitted: Sequence[Admitted],
            others: dict[str, dict[str, int]] | None = None) -> CardRoom:
    """The gate's room over ``queues``: what the admitted units hold, plus ``others`` (queue → cards held)."""
    held: dict[str, dict[str, int]] = {name: dict(cards) for name, cards in (others or {}).items()}
    for unit in admitted:
        for name, amount in unit.cards.items():
            held.setdefault(unit.queue, {})[name] = held.setdefault(unit.queue, {}).get(name, 0) + amount
    return CardRoom(Ledger.build(list(queues)).snapshot, held)


def decide(preemptor: Preemptor, admitted: Sequence[Admitted], policy: PreemptionPolicy = LOWER,
           queues: Sequence[dict[str, Any]] | None = None,
           others: dict[str, dict[str, int]] | None = None) -> PreemptionPlan | NoPlan:
    room = room_of(queues if queues is not None else [queue("research", {H100: 8, A100: 8})], admitted, others)
    before = {member: dict(cards) for member, cards in room.subtree.items()}
    result = choose_victims(preemptor, admitted, room, policy)
    assert {member: {card: n for card, n in cards.items() if n} for member, cards in room.subtree.items()} == {
        member: {card: n for card, n in cards.items() if n} for member, cards in before.items()}  # (room as given)
    return result


def victims(result: PreemptionPlan | NoPlan) -> list[str] | NoPreemption:
    if isinstance(result, NoPlan):
        return result.why
    return [unit.key[1] for unit in result.victims]


# ------------------------------------------------------------------------------------------------ the policy


@pytest.mark.parametrize(("annotations", "policy", "error"), [
    ({}, NEVER, ""),
    ({keys.PREEMPTION: "Never"}, NEVER, ""),
    ({keys.PREEMPTION: "LowerPriority"}, LOWER, ""),
    ({keys.PREEMPTION: "LowerOrNewerEqualPriority"}, NEWER_EQUAL, ""),
    ({keys.PREEMPTION: "lowerPriority"}, NEVER, "cardquota.io/preemption 'lowerPriority' is not a preemption policy: "
                                                "write one of Never, LowerPriority, LowerOrNewerEqualPriority"),
    ({keys.PREEMPTION: ""}, NEVER, "cardquota.io/preemption '' is not a preemption policy: "
                                   "write one of Never, LowerPriority, LowerOrNewerEqualPriority"),
])
def test_the_queue_annotation_names_the_policy_never_by_default(annotations: dict[str, str],
                                                                policy: PreemptionPolicy, error: str) -> None:
    assert preemption_policy(annotations) == (policy, error)


def test_the_queue_builder_carries_the_annotation_the_policy_is_read_from() -> None:
    record = Ledger.build([queue("research", {H100: 8}, annotations={keys.PREEMPTION: "LowerPriority"})]
                          ).snapshot.queues["research"]
    assert preemption_policy(record.queue.meta.annotations) == (LOWER, "")


# ------------------------------------------------------------------------------------------------ preemptable


@pytest.mark.parametrize(("annotations", "labels", "preemptable"), [
    ({}, {}, True),  # (GetPodPreemptable: neither set → true)
    ({keys.PREEMPTABLE: "false"}, {}, False),
    ({keys.PREEMPTABLE: "true"}, {keys.PREEMPTABLE: "false"}, True),  # (the annotation first)
    ({}, {keys.PREEMPTABLE: "False"}, False),
    ({}, {keys.PREEMPTABLE: "1"}, True),
    ({keys.PREEMPTABLE: "0"}, {}, False),
    ({keys.PREEMPTABLE: "yes"}, {}, False),  # (strconv.ParseBool refuses it: not preemptable)
    ({keys.PREEMPTABLE: "TRUE"}, {}, True),
])
def test_a_pod_is_preemptable_as_volcano_reads_it(annotations: dict[str, str], labels: dict[str, str],
                                                  preemptable: bool) -> None:
    manifest = pod("p", namespace="ml", card=H100, gpus=1, annotations=annotations, labels=labels)
    assert pod_preemptable(Pod.from_manifest(manifest)) is preemptable


def test_a_podgroup_is_a_candidate_only_when_every_pod_of_it_is_preemptable() -> None:
    def member(name: str, **annotations: str) -> Pod:
        return Pod.from_manifest(pod(name, namespace="ml", card=H100, gpus=1, group="gang", annotations=annotations))

    assert unit_preemptable([member("a"), member("b")])
    assert not unit_preemptable([member("a"), member("b", **{keys.PREEMPTABLE: "false"})])


# ------------------------------------------------------------------------------------------------ the choice

URGENT = waiting_unit("llama-70b", H100, 4, priority=1000)

CASES: list[tuple[str, PreemptionPolicy, Preemptor, list[Admitted], list[str] | NoPreemption]] = [
    ("never, the default, displaces nothing", NEVER, URGENT,
     [admitted_unit("sweep", {H100: 8}, priority=0)], NoPreemption.POLICY_NEVER),
    ("fits already: no victim", LOWER, URGENT,
     [admitted_unit("sweep", {H100: 4}, priority=0)], []),
    ("the most recently admitted of the lowest priority goes first", LOWER, URGENT,
     [admitted_unit("old", {H100: 4}, admitted=at(1)), admitted_unit("new", {H100: 4}, admitted=at(2))], ["new"]),
    ("lowest priority first, then most recent; only as many as needed", LOWER, waiting_unit("u", H100, 4),
     [admitted_unit("a", {H100: 2}, priority=10, admitted=at(1)),
      admitted_unit("b", {H100: 2}, priority=50, admitted=at(3)),
      admitted_unit("c", {H100: 2}, priority=10, admitted=at(2)),
      admitted_unit("d", {H100: 2}, priority=1000, admitted=at(4))], ["c", "a"]),
    ("a victim of the preemptor's priority or higher is never taken", LOWER, URGENT,
     [admitted_unit("peer", {H100: 4}, priority=1000, admitted=at(5)),
      admitted_unit("boss", {H100: 4}, priority=2000, admitted=at(6))], NoPreemption.NO_LOWER_PRIORITY),
    ("a gang goes whole: 8 cards for an 8-card gang of 2 pods", LOWER, waiting_unit("g", H100, 4, pods=2),
     [admitted_unit("gang", {H100: 6}, admitted=at(1)), admitted_unit("solo", {H100: 2}, kind="Pod", admitted=at(2))],
     ["solo", "gang"]),
    ("a small ask evicts the newer small pod, not the gang", LOWER, waiting_unit("p", H100, 1, pods=2),
     [admitted_unit("gang", {H100: 6}, admitted=at(1)), admitted_unit("solo", {H100: 2}, kind="Pod", admitted=at(2))],
     ["solo"]),
    ("minimal: one taken on the way and not needed is put back", LOWER, URGENT,
     [admitted_unit("small", {H100: 1}, admitted=at(9)), admitted_unit("big", {H100: 4}, admitted=at(1)),
      admitted_unit("rest", {H100: 3}, priority=2000)], ["big"]),
    ("a unit holding no card type the preemptor can use is not evicted", LOWER, URGENT,
     [admitted_unit("a100s", {A100: 8}, admitted=at(9)), admitted_unit("h100s", {H100: 8}, admitted=at(1))],
     ["h100s"]),
    ("a PodDisruptionBudget refusing the only fitting victim: nothing", LOWER, URGENT,
     [admitted_unit("guarded", {H100: 8}, eviction_refused=True)], NoPreemption.EVICTION_REFUSED),
    ("a PodDisruptionBudget refusing one: another is chosen", LOWER, URGENT,
     [admitted_unit("guarded", {H100: 4}, eviction_refused=True, admitted=at(9)),
      admitted_unit("free", {H100: 4}, admitted=at(1))], ["free"]),
    ("not preemptable: nothing", LOWER, URGENT,
     [admitted_unit("keep", {H100: 8}, preemptable=False)], NoPreemption.NOT_PREEMPTABLE),
    ("not preemptable one skipped for a preemptable one", LOWER, URGENT,
     [admitted_unit("keep", {H100: 4}, preemptable=False, admitted=at(9)),
      admitted_unit("take", {H100: 4}, admitted=at(1))], ["take"]),
    ("all or nothing: 4 preemptable cards cannot make room for 8", LOWER, waiting_unit("big", H100, 8),
     [admitted_unit("low", {H100: 4}), admitted_unit("high", {H100: 4}, priority=2000)], NoPreemption.NO_SET_FITS),
    ("equal priority is not lower", LOWER, URGENT,
     [admitted_unit("peer", {H100: 8}, priority=1000, admitted=at(1))], NoPreemption.NO_LOWER_PRIORITY),
    ("equal priority queued after the preemptor goes under LowerOrNewerEqualPriority", NEWER_EQUAL, URGENT,
     [admitted_unit("peer", {H100: 8}, priority=1000, created="2026-12-07T10:00:01Z", admitted=at(1))], ["peer"]),
    ("equal priority queued before it stays", NEWER_EQUAL, URGENT,
     [admitted_unit("peer", {H100: 8}, priority=1000, created=at(0))], NoPreemption.NO_LOWER_PRIORITY),
    ("no thrash: one admitted by preemption is not displaced at equal priority", NEWER_EQUAL, URGENT,
     [admitted_unit("peer", {H100: 8}, priority=1000, created="2026-12-07T10:00:01Z",
                    admitted_by_preemption=True)], NoPreemption.NO_LOWER_PRIORITY),
    ("...but still at lower priority", NEWER_EQUAL, URGENT,
     [admitted_unit("peer", {H100: 8}, priority=10, admitted_by_preemption=True)], ["peer"]),
    ("never outside the queue", LOWER, URGENT,
     [admitted_unit("elsewhere", {H100: 8}, queue="other"), admitted_unit("high", {H100: 8}, priority=2000)],
     NoPreemption.NO_LOWER_PRIORITY),
]


@pytest.mark.parametrize(("policy", "preemptor", "admitted", "expected"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_victims_per_policy(policy: PreemptionPolicy, preemptor: Preemptor, admitted: list[Admitted],
                            expected: list[str] | NoPreemption) -> None:
    queues = [queue("research", {H100: 8, A100: 8}), queue("other", {H100: 8})]
    assert victims(decide(preemptor, admitted, policy, queues)) == expected


def test_the_plan_frees_the_cards_of_each_victim() -> None:
    result = decide(waiting_unit("g", H100, 4, pods=2),
                    [admitted_unit("gang", {H100: 6}, admitted=at(1)),
                     admitted_unit("solo", {H100: 2}, admitted=at(2))])
    assert isinstance(result, PreemptionPlan)
    assert result.frees() == {H100: 8}


@pytest.mark.parametrize(("why", "words"), [
    (NoPreemption.POLICY_NEVER, "queue research's preemption policy is Never: ml/llama-70b waits for cards to be "
                                "released (set cardquota.io/preemption: LowerPriority on the Queue"),
    (NoPreemption.NO_SET_FITS, "queue research has 2 of 8 NVIDIA-H100 free even with every lower-priority workload "
                               "of queue research evicted: nothing is evicted and ml/llama-70b waits"),
])
def test_why_nothing_is_one_line_saying_why_and_what_happens(why: NoPreemption, words: str) -> None:
    admitted = [admitted_unit("low", {H100: 2}), admitted_unit("keep", {H100: 6}, priority=2000)]
    result = decide(URGENT, admitted, NEVER if why is NoPreemption.POLICY_NEVER else LOWER)
    assert isinstance(result, NoPlan)
    assert result.why is why
    assert words in result.message
    assert "\n" not in result.message


# ------------------------------------------------------------------------------------------------ alternatives

BOTH = f"{A100}|{H100}"


@pytest.mark.parametrize(("admitted", "expected"), [
    # the newest low unit holds H100: evicting it lets the A100|H100 pod through on H100
    ([admitted_unit("on-a100", {A100: 4}, admitted=at(1)), admitted_unit("on-h100", {H100: 4}, admitted=at(2))],
     ["on-h100"]),
    ([admitted_unit("on-a100", {A100: 4}, admitted=at(2)), admitted_unit("on-h100", {H100: 4}, admitted=at(1))],
     ["on-a100"]),
    # one past the gate unnarrowed counts against both: evicting it frees both
    ([admitted_unit("unnarrowed", {BOTH: 4}, admitted=at(1))], ["unnarrowed"]),
])
def test_alternatives_fit_by_the_gates_choice(admitted: list[Admitted], expected: list[str]) -> None:
    queues = [queue("research", {A100: 4, H100: 4})]
    assert victims(decide(waiting_unit("either", BOTH, 4), admitted, LOWER, queues)) == expected


# ------------------------------------------------------------------------------------------------ parent quota

PARENTED = [queue("org", {H100: 8}), queue("research", {H100: 8}, parent="org"),
            queue("other", {H100: 8}, parent="org")]


def test_a_wait_bound_by_the_parent_is_not_solved_by_evicting_what_does_not_free_it() -> None:
    result = decide(URGENT, [admitted_unit("low", {H100: 2})], LOWER, PARENTED, {"other": {H100: 6}})
    assert isinstance(result, NoPlan)
    assert result.why is NoPreemption.PARENT_BOUND
    assert result.message.startswith("queue research (parent org) has 2 of 8 NVIDIA-H100 free even with every")


def test_evicting_in_the_queue_frees_the_parents_binding_type_too() -> None:
    result = decide(URGENT, [admitted_unit("low", {H100: 4})], LOWER, PARENTED, {"other": {H100: 4}})
    assert victims(result) == ["low"]


# ------------------------------------------------------------------------------------------------ property

NAMES = ("A", "B", "A|B")
CLOCK = [f"2026-12-07T09:{minute:02d}:00Z" for minute in range(60)]


def _fits(room: CardRoom, preemptor: Preemptor, released: Sequence[Admitted]) -> bool:
    """Whether the preemptor fits the room with ``released`` evicted (the room left as it was)."""
    for unit in released:
        for name, amount in unit.cards.items():
            room.hold(unit.queue, name, -amount)
    taken: list[str] = []
    fits = True
    for ask in preemptor.asks:
        chosen, _ = room.choose(preemptor.queue, ask.card_name, ask.cards, {})
        if chosen is None:
            fits = False
            break
        room.take(preemptor.queue, chosen, ask.cards)
        taken.append(chosen)
    for card, ask in zip(taken, preemptor.asks, strict=False):
        room.take(preemptor.queue, card, -ask.cards)
    for unit in released:
        for name, amount in unit.cards.items():
            room.hold(unit.queue, name, amount)
    return fits


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[Admitted], dict[str, dict[str, int]], Preemptor,
                                        PreemptionPolicy]:
    quota = {card: draw(st.integers(1, 8)) for card in ("A", "B")}
    parent = draw(st.none() | st.fixed_dictionaries({card: st.integers(0, 12) for card in ("A", "B")}))
    queues = [queue("research", quota, parent="org" if parent is not None else None)]
    if parent is not None:
        queues += [queue("org", parent), queue("other", {"A": 8, "B": 8}, parent="org")]
    room = CardRoom(Ledger.build(queues).snapshot, {})
    others: dict[str, dict[str, int]] = {}
    if parent is not None:
        for card in ("A", "B"):
            amount = draw(st.integers(0, 4))
            if room.short("other", card, amount) is None:
                room.take("other", card, amount)
                others.setdefault("other", {})[card] = amount
    admitted: list[Admitted] = []
    times = draw(st.permutations(CLOCK))
    for index in range(draw(st.integers(0, 12))):
        name = draw(st.sampled_from(NAMES))
        amount = draw(st.integers(1, 3))
        if any(room.short("research", card, amount) for card in card_alternatives(name)):
            continue  # (what is admitted fits: the gate let it through)
        room.hold("research", name, amount)
        admitted.append(admitted_unit(f"u{index}", {name: amount}, priority=draw(st.integers(0, 3)),
                                      admitted=times[index], created=times[index + 10],
                                      preemptable=draw(st.integers(0, 4)) > 0,
                                      eviction_refused=draw(st.integers(0, 5)) == 0,
                                      admitted_by_preemption=draw(st.integers(0, 5)) == 0))
    preemptor = waiting_unit("p", draw(st.sampled_from(NAMES)), draw(st.integers(1, 3)), pods=draw(st.integers(1, 3)),
                             priority=draw(st.integers(1, 4)), created=times[30])
    return queues, admitted, others, preemptor, draw(st.sampled_from([NEVER, LOWER, LOWER, NEWER_EQUAL, NEWER_EQUAL]))


def _within_quota(room: CardRoom) -> bool:
    """Every queue's subtree within its card quota (own: a type missing is 0; an ancestor's, when it has one)."""
    for member, cards in room.subtree.items():
        record = room.snapshot.queues.get(member)
        for card, used in cards.items():
            if used and record is not None and record.quota.present and used > record.quota.values.get(card, 0):
                return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_property_quota_held_no_higher_victim_minimal_and_nothing_when_no_set_fits(
        scenario: tuple[list[dict[str, Any]], list[Admitted], dict[str, dict[str, int]], Preemptor,
                        PreemptionPolicy]) -> None:
    queues, admitted, others, preemptor, policy = scenario
    room = room_of(queues, admitted, others)
    result = choose_victims(preemptor, admitted, room, policy)
    evictable = [unit for unit in admitted if may_displace(policy, preemptor, unit)
                 and unit.preemptable and not unit.eviction_refused]
    if isinstance(result, NoPlan):
        assert (result.why is NoPreemption.POLICY_NEVER) is (policy is NEVER)
        if policy is not NEVER:
            assert not _fits(room, preemptor, [])
            # nothing when no set fits: no subset of the evictable units would do
            assert not any(_fits(room, preemptor, subset) for size in range(1, len(evictable) + 1)
                           for subset in itertools.combinations(evictable, size))
        return
    assert policy is not NEVER or not result.victims
    for victim in result.victims:  # never of priority >= P (equal only newer, per policy), never protected
        assert victim in evictable
        assert victim.priority < preemptor.priority or (
            policy is NEWER_EQUAL and victim.priority == preemptor.priority and victim.created > preemptor.created)
    assert _fits(room, preemptor, result.victims)
    for index in range(len(result.victims)):  # minimal: dropping any victim leaves it unplaceable
        assert not _fits(room, preemptor, result.victims[:index] + result.victims[index + 1:])
    # the quota never exceeded: the victims go first (release only lowers use), then the preemptor is taken
    for victim in result.victims:
        for name, amount in victim.cards.items():
            room.hold(victim.queue, name, -amount)
        assert _within_quota(room)
    for ask in preemptor.asks:
        chosen, _ = room.choose(preemptor.queue, ask.card_name, ask.cards, {})
        assert chosen is not None
        room.take(preemptor.queue, chosen, ask.cards)
    assert _within_quota(room)


# ------------------------------------------------------------------------------------ budgets read first


def _victim_pod(name: str, phase: str = "Running", labels: dict[str, str] | None = None,
                deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "labels": labels or {"app": "sweep"}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-07T10:00:00Z"
    return {"metadata": metadata, "status": {"phase": phase}}


def _budget(selector: object, allowed: int, generation: int = 1, observed: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": "pdb", "namespace": "ml", "generation": generation},
            "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "observedGeneration": observed}}


GANG = [_victim_pod("sweep-0"), _victim_pod("sweep-1")]


@pytest.mark.parametrize(("pods", "budgets", "said"), [
    (GANG, [], None),
    (GANG, [_budget({"matchLabels": {"app": "sweep"}}, 2)], None),
    (GANG, [_budget({"matchLabels": {"app": "sweep"}}, 1)],
     "PodDisruptionBudget ml/pdb allows 1 disruption now, and evicting podgroup ml/sweep takes 2"),
    (GANG, [_budget({"matchLabels": {"app": "other"}}, 0)], None),
    (GANG, [_budget(None, 0)], None),  # (a null selector selects nothing)
    (GANG, [_budget({}, 0)], "PodDisruptionBudget ml/pdb allows 0 disruptions now, and evicting podgroup ml/sweep "
                             "takes 2"),  # (an empty one everything)
    (GANG, [_budget({"matchExpressions": [{"key": "app", "operator": "In", "values": ["sweep"]}]}, 1)],
     "PodDisruptionBudget ml/pdb allows 1 disruption now, and evicting podgroup ml/sweep takes 2"),
    (GANG, [_budget({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, 0)], None),
    (GANG, [_budget({"matchLabels": {"app": "sweep"}}, 5, generation=2, observed=1)],
     "PodDisruptionBudget ml/pdb is still being processed by its controller"),
    ([_victim_pod("sweep-0"), _victim_pod("sweep-1", phase="Pending"), _victim_pod("sweep-2", deleting=True)],
     [_budget({"matchLabels": {"app": "sweep"}}, 1)], None),  # (the API server asks no budget for those two)
])
def test_a_budget_that_would_refuse_part_of_a_victims_evictions_refuses_it_whole(
        pods: list[dict[str, Any]], budgets: list[dict[str, Any]], said: str | None) -> None:
    """A dry run of each pod passes a budget allowing fewer disruptions than the gang has pods (the API server
    takes a disruption only for a real eviction): the budgets are read first instead."""
    assert budget_refusal("podgroup ml/sweep", pods, budgets) == said
