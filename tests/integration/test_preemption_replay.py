"""Priority inside a card quota, replayed end to end (the issue on priority inside a card quota, "Done when"): kmock is
the API server (serving the Eviction API as the API server does: tests/evictions.py), the extender is served with
the shipped entry as production serves it, the real :class:`~cardquota.operator.gatekeeper.Gatekeeper` keeps the
card-quota gate, and the replay of Volcano v1.15.1's actions (tests/volcano_replay.py) places and binds the pods.

Queue ``research`` has 16 H100 and two nodes of 8. Three low-priority gangs go through the gate one after the other
and are bound: ``sweep-a`` (2 pods x 4 cards), then ``sweep-b`` and ``sweep-c`` (2 x 2 each), filling the quota.
Then ``late`` (low priority, 2 x 2) and ``urgent`` (priority 1000, 2 x 4 cards) are created gated. Gate rounds and
Volcano sessions alternate:

* with ``cardquota.io/preemption: LowerPriority`` the keeper evicts exactly ``sweep-c`` and ``sweep-b`` — the most
  recently admitted of the lowest priority, and no more than the 8 cards needed (``sweep-a`` alone would free as much,
  but it was admitted first: Kueue's order loses the least work) — then lifts ``urgent``'s gate once the watch shows
  them gone, and Volcano binds it; ``late`` is never given the freed cards;
* with the policy ``Never`` (the annotation absent, or written) nothing is evicted and ``urgent`` stays at the gate
  with the sentence it had before preemption existed.

At every step, from what kmock holds, ``research``'s cards (bound pods and pods past the gate, not being deleted)
never exceed 16.

Volcano's own ``preempt`` action runs in every session and evicts nothing: ``Execute`` in
pkg/scheduler/actions/preempt/preempt.go (volcano-sh/volcano v1.15.1) skips a Pending job (``job.IsPending()``) — as
``urgent``'s PodGroup stays while its queue is full (the extender's ``jobEnqueueable`` refuses it) — and, for a job
already Inqueue (enqueued earlier, say on a transport error, which the shipped ``ignorable: true`` reads as a permit),
skips its tasks that carry a scheduling gate when it gathers the preemptor tasks (``if task.SchGated { continue }``;
the replay's ``VolcanoReplay.evict_for`` does the same). The sweeps, bound, are not starving. So priority inside a
card quota is the gate's alone to act on, and under ``Never`` nothing acts on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from builders import gpu_node
from evictions import EvictionServed
from integration.test_volcano_conformance import (
    NS,
    PRIORITY_CLASSES,
    Cluster,
    bound,
    cluster_kmock,
    gated,
    held_by,
    job,
    of_class,
    team,
    with_the_gate,
)
from polling import eventually
from rbac import RbacEnforced

from cardquota.core import keys
from cardquota.operator.gatekeeper import PREEMPTED, Gatekeeper

__all__ = ["cluster_kmock"]  # (the fixture, served here as in the conformance scenarios)


class EvictingKmock(RbacEnforced, EvictionServed):
    """kmock as configured for the suite (tests/rbac.py), answering the Eviction API as the API server does."""


pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=EvictingKmock)]

H100 = "NVIDIA-H100"
QUOTA = 16
ACTIONS = ("enqueue", "allocate", "preempt", "backfill")
"""Volcano's sessions with ``preempt`` configured (as clusters that use priority configure it)."""
SWEEPS = {"sweep-a": 4, "sweep-b": 2, "sweep-c": 2}
"""The low-priority gangs, in the order they are admitted: cards per pod (2 pods each)."""
URGENT = "urgent"
LATE = "late"
"""A low-priority gang (2 x 2) created gated after the sweeps, before ``urgent``: it waits throughout."""
STEPS = 6
"""Gate rounds and sessions a gang is given (with LowerPriority the urgent one needs 3: evict; see the victims gone
and lift; place and bind)."""


def gang(name: str, cards: int, priority_class: str, phase: str = "Pending") -> list[dict[str, Any]]:
    """A Volcano Job's PodGroup (in ``phase``) and its 2 pods of ``cards`` H100 each, created gated (as the pod
    webhook admits them with the gate), of a priority class."""
    return of_class(gated(job(name, queue_name="research", pods=2, card=H100, gpus=cards)), priority_class,
                    phase=phase)


def research(policy: str | None) -> dict[str, Any]:
    made = team("research", {H100: QUOTA})
    if policy is not None:
        made["metadata"]["annotations"][keys.PREEMPTION] = policy
    return made


def held(pods: list[dict[str, Any]]) -> int:
    """Cards ``research`` holds as the gate's invariant counts them: bound or past the gate, not being deleted."""
    return held_by([found for found in pods if not found["metadata"].get("deletionTimestamp")], "research")


@dataclass
class Replayed:
    cluster: Cluster
    keeper: Gatekeeper
    kmock: Any
    victims: list[str] = field(default_factory=list)
    """The victims the gate rounds named, in the order they named them."""

    async def check(self) -> None:
        assert held(await self.cluster.replay.items("/api/v1/pods")) <= QUOTA

    async def step(self) -> None:
        """A gate round (its lifts and evictions written), the watch catching up with its lifts, a Volcano session;
        the quota checked from kmock after each."""
        decided = await self.keeper.round()
        assert decided is not None
        self.victims += [victim.key[1] for preemption in decided.preemptions for victim in preemption.victims]
        await self.check()
        await eventually(lambda: not self.keeper.in_flight or all(
            (pod := self.keeper.cache.ledger.snapshot.pods.get(key)) is not None and pod.gate is None
            for key in self.keeper.in_flight))
        await self.cluster.replay.cycle(ACTIONS)
        await self.check()

    async def admit(self, name: str) -> None:
        """Steps until the gang's two pods are bound."""
        for _ in range(STEPS):
            await self.step()
            if {f"{name}-0", f"{name}-1"} <= set(await bound(self.cluster)):
                return
        raise AssertionError(f"{name} was not bound in {STEPS} steps")

    def evicted(self) -> list[str]:
        """Pods the Eviction API evicted (not the dry runs), in order (two victims' pods may interleave: each
        victim is evicted by a write of its own)."""
        return [request.url.path.split("/")[-2] for request in self.kmock
                if request.url.path.endswith("/eviction") and "All" not in (
                    ((request.data or {}).get("deleteOptions") or {}).get("dryRun") or [])]

    async def preempted_events(self) -> list[tuple[str, str, str]]:
        return [(event["involvedObject"]["kind"], event["involvedObject"]["name"], event["message"])
                for event in await self.cluster.replay.items(f"/api/v1/namespaces/{NS}/events")
                if event["reason"] == PREEMPTED]


@dataclass(frozen=True)
class Case:
    name: str
    policy: str | None
    evicted: tuple[str, ...]
    """The gangs evicted, in the order the gate named them."""
    urgent_bound: bool
    enqueued: bool = False
    """``urgent``'s PodGroup is created Inqueue (enqueued earlier): Volcano's ``preempt`` weighs it as starving."""

    def __str__(self) -> str:
        return self.name


CASES = (
    Case("LowerPriority: the most recent low gangs evicted, no more than needed", "LowerPriority",
         ("sweep-c", "sweep-b"), urgent_bound=True),
    Case("LowerPriority, the urgent gang Inqueue: the same", "LowerPriority", ("sweep-c", "sweep-b"),
         urgent_bound=True, enqueued=True),
    Case("no policy (Never by default): nothing evicted, the urgent gang waits", None, (), urgent_bound=False),
    Case("Never written, the urgent gang Inqueue: Volcano's preempt skips its gated tasks", "Never", (),
         urgent_bound=False, enqueued=True),
)


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_an_urgent_gang_in_a_full_queue_through_the_gate_and_volcanos_placement(
        cluster_kmock: Any, tmp_path: Path, case: Case) -> None:
    async with with_the_gate(cluster_kmock, tmp_path, priority_classes=PRIORITY_CLASSES) as (cluster, keeper):
        replayed = Replayed(cluster, keeper, cluster_kmock)
        await cluster.add(gpu_node("h100-1", H100, 8), gpu_node("h100-2", H100, 8), research(case.policy))
        for name, cards in SWEEPS.items():  # admitted one after the other: each in later sessions than the last
            await cluster.add(*gang(name, cards, "low"))
            await replayed.admit(name)
        sweeps = sorted(f"{name}-{index}" for name in SWEEPS for index in range(2))
        assert await bound(cluster) == sweeps
        assert held(await cluster.replay.items("/api/v1/pods")) == QUOTA

        await cluster.add(*gang(LATE, 2, "low"))  # (waits: the quota is full; it displaces nothing of its priority)
        await replayed.step()
        await cluster.add(*gang(URGENT, 4, "high", "Inqueue" if case.enqueued else "Pending"))
        for _ in range(STEPS):
            await replayed.step()
            if URGENT + "-0" in await bound(cluster):
                break

        assert replayed.victims == list(case.evicted)  # named once: the rounds after wait for their release
        expected = sorted(f"{name}-{index}" for name in case.evicted for index in range(2))
        assert sorted(replayed.evicted()) == expected
        assert cluster.replay.evicted == []  # Volcano's preempt evicted nothing (see the module docstring)
        left = [name for name in sweeps if name not in expected]
        urgent = [f"{URGENT}-0", f"{URGENT}-1"]
        late = [f"{LATE}-0", f"{LATE}-1"]
        assert await bound(cluster) == sorted(left + (urgent if case.urgent_bound else []))
        pods = {found["metadata"]["name"]: found for found in await cluster.replay.items("/api/v1/pods")}
        assert set(pods) == set(left + urgent + late)  # (the victims' pods deleted by the eviction, none other)
        assert [bool(pods[name]["spec"].get("schedulingGates")) for name in urgent] == [not case.urgent_bound] * 2
        assert [bool(pods[name]["spec"].get("schedulingGates")) for name in late] == [True] * 2  # (never given the
        # victims' cards: they are the urgent gang's from the round that chose them)
        if case.urgent_bound:
            assert keeper.stats.evicted == len(case.evicted)
            assert held(list(pods.values())) == QUOTA  # sweep-a's 8 and urgent's 8
            assert sorted(await replayed.preempted_events()) == sorted(
                ("PodGroup", name, f"Preempted by {NS}/{URGENT} (priority 1000) to free 8 {H100} in queue research")
                for name in case.evicted)
            assert [wait.group for wait in keeper.last_round.waits] == [(NS, LATE)]
        else:
            assert keeper.stats.evicted == 0
            assert await replayed.preempted_events() == []
            assert keeper.last_round.preemptions == []
            assert [wait.reason for wait in keeper.last_round.waits] == [
                f"waiting at the card-quota gate: queue research has 0 of {QUOTA} {H100} free; {ahead} pods ahead"
                for ahead in (0, 2)]  # (urgent, then late: the sentences of the gate without preemption)
            # Enqueued either way: its pods all wait at the gate, so it reserves nothing and asks nothing at enqueue
            # (as Volcano's capacity plugin deducts scheduling-gated pods; cardquota.core.usage.group_charge). So
            # preempt weighs it, starving, and skips its tasks for their gate alone (late's likewise):
            assert await cluster.phase(URGENT) == "Inqueue"
            assert [job.key for job in cluster.replay.starving_jobs("research")] == [f"{NS}/{URGENT}", f"{NS}/{LATE}"]
            await volcano_would_preempt_for_it_ungated(cluster)


async def volcano_would_preempt_for_it_ungated(cluster: Cluster) -> None:
    """The control: the same session with the gate taken off ``urgent``'s tasks in the replay's memory only (nothing
    is written: the session is not closed) — Volcano's ``preempt`` then pipelines it over evicted sweeps, whatever
    the queue's policy."""
    replay = cluster.replay
    await replay.open_session()
    for task in replay.jobs[f"{NS}/{URGENT}"].tasks:
        task.pod["spec"].pop("schedulingGates")
    placements = await replay.preempt()
    assert [(placement.pod, placement.how) for placement in placements] == [
        (f"{URGENT}-0", "pipelined"), (f"{URGENT}-1", "pipelined")]
    assert replay.evicting
    assert {task.job for task in replay.evicting} <= {f"{NS}/{name}" for name in SWEEPS}


async def test_a_gang_enqueued_while_at_the_gate_does_not_strand_the_preemptor_lifted_past_it(
        cluster_kmock: Any, tmp_path: Path) -> None:
    """The same queue (LowerPriority), ``late`` waiting at the gate. ``sweep-c``'s job ends (its pods deleted) and a
    Volcano session runs before the next gate round, ``urgent`` just created: enqueue (priority first) refuses
    ``urgent`` (4 free of the 8 it asks) and enqueues ``late`` (4 fit), which stays gated. The gate round then gives
    the 4 free cards to ``urgent`` and evicts ``sweep-b`` for the rest; once it is gone ``urgent`` is lifted. But the
    extender's ``jobEnqueueable`` counts ``late``'s Inqueue reservation (4) beside ``sweep-a``'s 8 and refuses
    ``urgent``'s 8 ("total would be 20, but capability is 16") in every session, while the gate never lifts ``late``
    (``sweep-a`` and ``urgent`` hold the 16): ``urgent`` is never placed."""
    async with with_the_gate(cluster_kmock, tmp_path, priority_classes=PRIORITY_CLASSES) as (cluster, keeper):
        replayed = Replayed(cluster, keeper, cluster_kmock)
        await cluster.add(gpu_node("h100-1", H100, 8), gpu_node("h100-2", H100, 8), research("LowerPriority"))
        for name, cards in SWEEPS.items():
            await cluster.add(*gang(name, cards, "low"))
            await replayed.admit(name)
        await cluster.add(*gang(LATE, 2, "low"))
        await replayed.step()
        for index in range(2):  # sweep-c's job ends
            await cluster.replay.delete_pod(NS, f"sweep-c-{index}")
        await cluster.add(*gang(URGENT, 4, "high"))
        await cluster.replay.cycle(ACTIONS)  # (a session before the next gate round)
        assert await cluster.phase(LATE) == "Inqueue"
        for _ in range(STEPS):
            await replayed.step()
            if f"{URGENT}-0" in await bound(cluster):
                break
        assert replayed.victims == ["sweep-b"]
        urgent = [found for found in await cluster.replay.items("/api/v1/pods")
                  if found["metadata"]["name"].startswith(URGENT)]
        assert [bool(found["spec"].get("schedulingGates")) for found in urgent] == [False, False]  # (lifted)
        assert await bound(cluster) == ["sweep-a-0", "sweep-a-1", f"{URGENT}-0", f"{URGENT}-1"]
