"""The watch-fed extender trusts only what the watch shows: whatever reaches its verbs — the scheduler, or anyone
else on the network — can change only the current cycle's own decisions, and once the cycle has ended and its
assumptions have lapsed, the session is again exactly the watched cluster.

Volcano facts relied on (volcano-sh/volcano v1.15.1 and master ed72c7c, pkg/scheduler/framework/statement.go):
``Statement.Allocate``/``Pipeline`` call the plugins' AllocateFunc, ``unallocate``/``unPipeline`` and ``Evict``
(preemption, on a running victim) call DeallocateFunc, all within one session."""

from __future__ import annotations

import copy
from typing import Any

from builders import gpu_labels, node, pod, podgroup, queue
from hypothesis import given, settings
from hypothesis import strategies as st
from session_state import state
from volcano_payloads import ALLOCATED, RUNNING, job_info, node_info, task_info

from cardquota.core.objects import ObjectKey
from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import (
    ASSUMED_SECONDS,
    CYCLE_SECONDS,
    SESSION_SECONDS,
    STRANGERS_PER_CYCLE,
    Extender,
)
from cardquota.core.scheduling.mgpu import MGPUConfig
from cardquota.core.scheduling.session import SchedulerConfig, Session
from cardquota.runtime.cache import ClusterCache

A100 = "NVIDIA-A100"
CONFIG = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True),
                         mgpu=MGPUConfig(enabled=True))
MGPU = {"vke.volcengine.com/mgpu-core": "30", "vke.volcengine.com/mgpu-memory": "4096"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gpu_node(name: str = "a1") -> dict[str, Any]:
    return node(name, labels=gpu_labels(A100, count=4), allocatable={"nvidia.com/gpu": "4"})


def mgpu_node(name: str = "m1") -> dict[str, Any]:
    return node(name, allocatable={"vke.volcengine.com/mgpu-core": "400", "vke.volcengine.com/mgpu-memory": "98304"})


def card_pod(name: str, *, node_name: str | None = None) -> dict[str, Any]:
    return pod(name, namespace="ml", card=A100, gpus=1, queue="team-a", node_name=node_name)


def mgpu_pod(name: str, *, node_name: str | None = None, scheduler: str = "volcano") -> dict[str, Any]:
    manifest = pod(name, namespace="ml", node_name=node_name,
                   containers=[{"name": "c", "resources": {"requests": dict(MGPU)}}])
    manifest["spec"]["schedulerName"] = scheduler
    return manifest


def group(name: str, cards: int, phase: str = "Pending") -> dict[str, Any]:
    return podgroup(name, namespace="ml", queue="team-a", phase=phase, request={A100: cards})


def watched(*objects: dict[str, Any], quota: int = 2) -> tuple[Extender, Clock, list[tuple[str, str]]]:
    """An extender fed by the watch with a node of 4 A100s, an mGPU node, queue team-a (``quota`` A100s) and
    ``objects``; the (verb, reason) pairs it reports ignored."""
    clock, told = Clock(), []

    def ignored(verb: str, reason: str, key: ObjectKey | None) -> None:
        told.append((verb, reason))

    extender = Extender(CONFIG, clock=clock, on_ignored=ignored)
    ClusterCache(sink=extender).load([gpu_node(), mgpu_node(), queue("team-a", {A100: quota}), *objects])
    return extender, clock, told


def allocated(extender: Extender) -> int:
    assert extender.session is not None
    return extender.session.ledger.usage("team-a").allocated.get(A100, 0)


def inqueue(extender: Extender) -> int:
    assert extender.session is not None
    return extender.session.ledger.usage("team-a").inqueue.get(A100, 0)


def allocate(extender: Extender, manifest: dict[str, Any], node_name: str = "a1") -> dict[str, Any]:
    return extender.allocate_func({"task": task_info(manifest, status=ALLOCATED, node=node_name)})[0]


def test_deallocate_never_frees_a_pod_the_watch_shows_bound() -> None:
    extender, _, told = watched(card_pod("held", node_name="a1"))
    assert extender.deallocate_func({"task": task_info(card_pod("held", node_name="a1"), status=RUNNING)})[0] == {
        "errorMessage": ""}
    assert allocated(extender) == 1
    assert told == [("deallocatefunc", "not-allocated-this-cycle")]


def test_deallocate_undoes_this_cycles_allocation_only() -> None:
    extender, _, told = watched(card_pod("p"), card_pod("q"))
    assert allocate(extender, card_pod("p")) == {"errorMessage": ""}
    assert extender.deallocate_func({"task": task_info(card_pod("p"), status=ALLOCATED, node="a1")})[0] == {
        "errorMessage": ""}
    assert allocated(extender) == 0  # the scheduler's rollback, within the cycle
    assert allocate(extender, card_pod("q")) == {"errorMessage": ""}
    extender.on_session_close({})
    extender.on_session_open({})
    extender.deallocate_func({"task": task_info(card_pod("q"), status=ALLOCATED, node="a1")})
    assert allocated(extender) == 1  # a past cycle's allocation stands until the watch shows it or it lapses
    assert told == [("deallocatefunc", "not-allocated-this-cycle")]


def test_deallocate_of_a_pod_the_watch_showed_bound_meanwhile_is_ignored() -> None:
    extender, _, told = watched(card_pod("p"))
    allocate(extender, card_pod("p"))
    extender.upsert(card_pod("p", node_name="a1"))  # bound (in the real world: after the session closed)
    extender.deallocate_func({"task": task_info(card_pod("p"), status=ALLOCATED, node="a1")})
    assert allocated(extender) == 1
    assert told == [("deallocatefunc", "not-allocated-this-cycle")]


def test_allocating_the_same_task_twice_counts_it_once_and_keeps_its_lifetime() -> None:
    extender, clock, _ = watched(card_pod("p"))
    allocate(extender, card_pod("p"))
    clock.now += ASSUMED_SECONDS - 1
    assert allocate(extender, card_pod("p")) == {"errorMessage": ""}
    assert allocated(extender) == 1
    clock.now += 2  # past the first allocation's lifetime: the second did not extend it
    extender.on_session_open({})
    assert allocated(extender) == 0


def test_a_lapsed_allocation_taken_again_lasts_only_until_the_cycle_ends() -> None:
    extender, clock, _ = watched(card_pod("p"))
    allocate(extender, card_pod("p"))
    clock.now += ASSUMED_SECONDS + 1
    extender.on_session_open({})
    assert allocated(extender) == 0  # lapsed: the bind never showed
    allocate(extender, card_pod("p"))
    assert allocated(extender) == 1  # (for the rest of this cycle)
    extender.on_session_close({})
    assert allocated(extender) == 0
    extender.upsert(card_pod("p", node_name="a1"))  # bound after all: charged by the watch
    assert allocated(extender) == 1


def test_allocate_refuses_pods_and_nodes_the_watch_does_not_know_and_leaves_bound_pods_alone() -> None:
    extender, _, told = watched(card_pod("held", node_name="a1"), card_pod("p"))
    ghost = allocate(extender, card_pod("ghost"))
    assert ghost["errorMessage"].startswith("cardquota does not know pod ml/ghost yet")
    nowhere = allocate(extender, card_pod("p"), node_name="n-unknown")
    assert nowhere["errorMessage"].startswith("cardquota does not know node n-unknown yet")
    # A bound pod named again (Volcano's unevict after a discarded preemption does so): nothing moves.
    answer, target, annotations = extender.allocate_func({"task": task_info(card_pod("held", node_name="a1"),
                                                                            status=ALLOCATED, node="a1")})
    assert (answer, target, annotations) == ({"errorMessage": ""}, None, {})
    assert allocated(extender) == 1
    assert extender.session is not None
    assert "ghost" not in {name for _, name in extender.session.pods}
    assert told == [("allocatefunc", "unknown-pod"), ("allocatefunc", "unknown-node"), ("allocatefunc", "bound")]


def test_mgpu_results_are_given_only_for_pending_pods_of_the_configured_schedulers() -> None:
    extender, _, told = watched(mgpu_pod("mine"), mgpu_pod("theirs", scheduler="default-scheduler"),
                                mgpu_pod("running", node_name="m1"))
    answer, target, annotations = extender.allocate_func({"task": task_info(mgpu_pod("mine"), status=ALLOCATED,
                                                                            node="m1")})
    assert answer == {"errorMessage": ""}
    assert target is not None
    assert annotations
    refused, target, annotations = extender.allocate_func({"task": task_info(mgpu_pod("theirs"), status=ALLOCATED,
                                                                             node="m1")})
    assert "schedulerName 'default-scheduler' is not one cardquota serves (volcano)" in refused["errorMessage"]
    assert (target, annotations) == (None, {})
    assert extender.allocate_func({"task": task_info(mgpu_pod("running", node_name="m1"), status=ALLOCATED,
                                                     node="m1")}) == ({"errorMessage": ""}, None, {})
    assert told == [("allocatefunc", "other-scheduler"), ("allocatefunc", "bound")]


def test_unknown_pods_are_judged_kept_at_most_the_cap_and_gone_when_the_cycle_ends() -> None:
    extender, _, told = watched(card_pod("x", node_name="a1"), card_pod("y", node_name="a1"))
    assert extender.session is not None
    before = set(extender.session.pods)
    answers = [extender.predicate({"task": task_info(card_pod(f"ghost-{index}")), "node": node_info(gpu_node())})
               for index in range(STRANGERS_PER_CYCLE + 10)]
    assert {answer["code"] for answer in answers} == {2}  # the queue is full: every one judged, recorded or not
    assert len(extender.session.pods) == len(before) + STRANGERS_PER_CYCLE
    assert told == [("predicate", "unknown-pods-over-cap")] * 10
    extender.on_session_close({})
    assert set(extender.session.pods) == before


def test_an_unknown_pod_the_watch_then_brings_stays() -> None:
    extender, _, _ = watched()
    extender.predicate({"task": task_info(card_pod("late")), "node": node_info(gpu_node())})
    extender.upsert(card_pod("late"))
    extender.on_session_close({})
    assert extender.session is not None
    assert ("ml", "late") in extender.session.pods
    assert allocate(extender, card_pod("late")) == {"errorMessage": ""}


def test_without_session_verbs_a_cycle_ends_after_cycle_seconds() -> None:
    extender, clock, _ = watched()
    extender.prioritize({"task": task_info(card_pod("ghost")), "nodes": [node_info(gpu_node())]})
    assert extender.session is not None
    assert ("ml", "ghost") in extender.session.pods
    clock.now += CYCLE_SECONDS
    extender.predicate({"task": task_info(card_pod("x")), "node": node_info(gpu_node())})
    assert ("ml", "ghost") not in extender.session.pods


def test_with_session_verbs_a_session_longer_than_cycle_seconds_keeps_its_cycle() -> None:
    """Scheduling review finding 2: a session of a large cluster lasting over 10 s was cut in the middle although
    the scheduler sends ``onSessionClose`` (what the session had decided so far was forgotten before it committed).
    Once a session verb is seen, the cycle ends at the next one, or at the latest after SESSION_SECONDS."""
    extender, clock, _ = watched()
    extender.on_session_open({})
    extender.prioritize({"task": task_info(card_pod("ghost")), "nodes": [node_info(gpu_node())]})
    clock.now += CYCLE_SECONDS + 5
    extender.predicate({"task": task_info(card_pod("x")), "node": node_info(gpu_node())})
    assert extender.session is not None
    assert ("ml", "ghost") in extender.session.pods  # the same session still
    extender.on_session_close({})
    assert ("ml", "ghost") not in extender.session.pods
    extender.prioritize({"task": task_info(card_pod("ghost")), "nodes": [node_info(gpu_node())]})
    clock.now += SESSION_SECONDS  # a caller that sent one session verb cannot make a cycle last for ever
    extender.predicate({"task": task_info(card_pod("x")), "node": node_info(gpu_node())})
    assert ("ml", "ghost") not in extender.session.pods


def test_job_enqueueable_judges_the_watched_podgroup_and_refuses_unknown_ones() -> None:
    """(An unknown job is refused rather than let through unchecked: the scheduler asks again next cycle.)"""
    extender, _, told = watched(group("real", 1))
    lying = group("real", 99)  # the request claims 99 cards; the watch says 1
    assert extender.job_enqueueable({"job": job_info(lying)}) == {"status": 1}
    assert inqueue(extender) == 1
    assert extender.job_enqueueable({"job": job_info(group("ghost", 1))}) == {"status": -1}
    assert extender.session is not None
    assert ("ml", "ghost") not in extender.session.ledger.snapshot.podgroups
    assert told == [("jobenqueueable", "unknown-job")]


def test_a_repeated_job_enqueueable_counts_once_and_never_extends_the_reservation() -> None:
    extender, clock, _ = watched(group("first", 2), group("probe", 1))
    assert extender.job_enqueueable({"job": job_info(group("first", 2))}) == {"status": 1}
    clock.now += ASSUMED_SECONDS - 10
    assert extender.job_enqueueable({"job": job_info(group("first", 2))}) == {"status": 1}  # not its own rival
    assert inqueue(extender) == 2
    clock.now += 11  # past the first call's lifetime
    extender.on_session_open({})
    assert inqueue(extender) == 0
    assert extender.job_enqueueable({"job": job_info(group("first", 2))}) == {"status": 1}  # lapsed: this cycle only
    extender.on_session_close({})
    assert extender.job_enqueueable({"job": job_info(group("probe", 1))}) == {"status": 1}


def test_a_reservation_refused_when_asked_again_is_dropped() -> None:
    extender, _, _ = watched(group("first", 2), group("other", 1), quota=2)
    assert extender.job_enqueueable({"job": job_info(group("first", 2))}) == {"status": 1}
    extender.upsert(group("other", 1, phase="Inqueue"))  # the watch: another job took a card meanwhile
    assert extender.job_enqueueable({"job": job_info(group("first", 2))}) == {"status": -1}
    assert inqueue(extender) == 1  # only the other job's


def test_removing_a_pod_drops_its_cached_mgpu_results() -> None:
    """(Unknown pods judged beyond the cap are removed at once: what was cached for them goes too.)"""
    session = Session([mgpu_node(), queue("default", {})], CONFIG)
    for index in range(100):
        key = session.add_pending(mgpu_pod(f"m{index}"))
        assert session.node_refusal(key, "m1") is None
        session.remove(key)
    assert len(session._mgpu_results) == 0


# --------------------------------------------------------------------------- whatever is called, state recovers

CLUSTER = [gpu_node(), mgpu_node(), queue("team-a", {A100: 2}), card_pod("held", node_name="a1"), card_pod("p"),
           card_pod("q"), mgpu_pod("m"), group("g", 1), group("h", 2, phase="Inqueue")]
NAMES = ["held", "p", "q", "m", "ghost-1", "ghost-2"]
CALL = st.tuples(st.sampled_from(["predicate", "prioritize", "allocate", "deallocate", "enqueue", "open", "close"]),
                 st.sampled_from(NAMES), st.sampled_from(["a1", "m1", "n-unknown"]), st.booleans())


def call(extender: Extender, verb: str, name: str, node_name: str, bound: bool) -> None:
    manifest = mgpu_pod(name) if name == "m" else card_pod(name)
    task = task_info(manifest, status=RUNNING if bound else ALLOCATED, node=node_name)
    nodes = {"a1": gpu_node(), "m1": mgpu_node(), "n-unknown": gpu_node("n-unknown")}
    if verb == "predicate":
        extender.predicate({"task": task, "node": node_info(nodes[node_name])})
    elif verb == "prioritize":
        extender.prioritize({"task": task, "nodes": [node_info(item) for item in nodes.values()]})
    elif verb == "allocate":
        extender.allocate_func({"task": task})
    elif verb == "deallocate":
        extender.deallocate_func({"task": task})
    elif verb == "enqueue":
        extender.job_enqueueable({"job": job_info(group({"p": "g", "q": "h"}.get(name, name), 9))})
    else:
        getattr(extender, f"on_session_{verb}")({})


@settings(max_examples=150, deadline=None)
@given(st.lists(CALL, max_size=25))
def test_after_the_cycle_ends_and_assumptions_lapse_the_session_is_the_watched_cluster(
        calls: list[tuple[str, str, str, bool]]) -> None:
    extender, clock, _ = watched(*CLUSTER[3:])
    for verb, name, node_name, bound in calls:
        call(extender, verb, name, node_name, bound)
    extender.on_session_close({})
    clock.now += ASSUMED_SECONDS + 1
    extender.on_session_open({})
    assert extender.session is not None
    assert state(extender.session) == state(Session(copy.deepcopy(CLUSTER), CONFIG))
    assert {key: view.phase for key, view in extender.session.ledger.snapshot.podgroups.items()} == {
        ("ml", "g"): "Pending", ("ml", "h"): "Inqueue"}
