"""Preemption at the card-quota gate end to end against kmock: the real gate keeper, calling as the operator's account
(kmock holds its calls to the RBAC the chart renders for it: tests/rbac.py), serving the Eviction API as the API
server does (tests/evictions.py, a bound pod deleted gracefully: it keeps a ``deletionTimestamp`` as its kubelet
would). From the urgent gang waiting at the gate, through the dry runs and the evictions of exactly the victims
needed (never a DELETE), the events on victim and preemptor, the watch showing the victims released, to the
preemptor let through and marked; a PodDisruptionBudget holding the only victim; and a restart in the middle of a
plan."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import aiohttp
import pytest
from builders import disruption_budget, gpu_node, pod, podgroup, queue
from evictions import EvictingGracefullyUnderRbac
from operator_runs import following_through_a_kubeconfig
from polling import eventually

from cardquota.core import keys
from cardquota.kube import api_client
from cardquota.operator.gatekeeper import REFUSED_SECONDS, Gatekeeper
from cardquota.operator.settings import Settings
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.metrics import REGISTRY

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(cls=EvictingGracefullyUnderRbac, client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

A100 = "NVIDIA-A100"
PODS = "v1/pods"
GROUPS = "scheduling.volcano.sh/v1beta1/podgroups"
QUEUES = "scheduling.volcano.sh/v1beta1/queues"
BUDGETS = "policy/v1/poddisruptionbudgets"
RESOURCES = {"Pod": PODS, "PodGroup": GROUPS, "Queue": QUEUES, "Node": "v1/nodes", "PodDisruptionBudget": BUDGETS}
LOW, HIGH = 10, 1000
GATE = Settings(card_gate=True)
"""The operator with the card gate on (its account has the card-gate ClusterRole: pods/eviction create)."""


def at(minute: int) -> str:
    return f"2026-12-07T10:{minute:02d}:00Z"


def research(cards: int) -> dict[str, Any]:
    """Queue ``research``: ``cards`` A100 of card quota, its waiting card work displacing lower priorities."""
    return queue("research", {A100: cards}, annotations={keys.PREEMPTION: "LowerPriority"})


def running(name: str, size: int, gpus: int, bound_at: int, node: str = "a100-1") -> list[dict[str, Any]]:
    """A low-priority gang of ``size`` pods of ``gpus`` A100 each, bound at minute ``bound_at`` (labelled
    ``app: NAME``, which a budget may select)."""
    group = podgroup(name, namespace="ml", queue="research", phase="Running", min_member=size, created=at(bound_at))
    group["metadata"]["uid"] = f"uid-pg-{name}"
    return [group] + [pod(f"{name}-{index}", namespace="ml", card=A100, gpus=gpus, group=name, node_name=node,
                          priority=LOW, scheduled_at=at(bound_at), uid=f"uid-{name}-{index}", labels={"app": name})
                      for index in range(size)]


def waiting(name: str, size: int, gpus: int) -> list[dict[str, Any]]:
    """An urgent gang of ``size`` pods of ``gpus`` A100 each, created at the card-quota gate."""
    group = podgroup(name, namespace="ml", queue="research", phase="Pending", min_member=size, created=at(30))
    group["metadata"]["uid"] = f"uid-pg-{name}"
    return [group] + [pod(f"{name}-{index}", namespace="ml", card=A100, gpus=gpus, group=name, queue="research",
                          gated=True, priority=HIGH, created=at(30), uid=f"uid-{name}-{index}")
                      for index in range(size)]


def put(kmock: Any, *manifests: dict[str, Any]) -> None:
    for manifest in manifests:
        metadata = manifest["metadata"]
        kmock.objects[RESOURCES[manifest["kind"]], metadata.get("namespace"), metadata["name"]] = manifest


def evictions(kmock: Any) -> list[tuple[str, str, bool]]:
    """Every eviction POSTed, in order: (pod, the uid precondition, a dry run)."""
    made = []
    for request in kmock:
        if request.url.path.endswith("/eviction"):
            assert str(request.method.value).upper() == "POST"
            options = (request.data or {}).get("deleteOptions") or {}
            made.append((request.url.path.split("/")[-2], (options.get("preconditions") or {}).get("uid", ""),
                         "All" in (options.get("dryRun") or [])))
    return made


def in_phases(kmock: Any) -> list[set[tuple[str, str, bool]]]:
    """The evictions POSTed as runs of dry runs and of real ones, each run a set (the keeper evicts a unit's pods in
    no particular order)."""
    runs: list[set[tuple[str, str, bool]]] = []
    last: bool | None = None
    for made in evictions(kmock):
        if made[2] is not last:
            runs.append(set())
            last = made[2]
        runs[-1].add(made)
    return runs


def real_evictions(kmock: Any) -> Counter[str]:
    """Per pod, the evictions made (not dry runs)."""
    return Counter(name for name, _, dry_run in evictions(kmock) if not dry_run)


def pod_deletes(kmock: Any) -> list[str]:
    return [request.url.path for request in kmock
            if str(request.method.value).upper() == "DELETE" and "/pods" in request.url.path]


def stored(kmock: Any, name: str) -> dict[str, Any]:
    return dict(kmock.objects[PODS, "ml", name])


def terminating(kmock: Any, name: str) -> bool:
    return bool(stored(kmock, name)["metadata"].get("deletionTimestamp"))


def released(cache: ClusterCache, *names: str) -> bool:
    """The watch has brought each pod ml/NAME being deleted (or gone)."""
    pods = cache.ledger.snapshot.pods
    return all((pod := pods.get(("ml", name))) is None or pod.deleting for name in names)


def gates(kmock: Any, name: str) -> list[Any]:
    return list(stored(kmock, name)["spec"].get("schedulingGates") or [])


def events(kmock: Any, reason: str) -> list[tuple[str, str, str, str, str]]:
    return sorted((event["involvedObject"]["kind"], event["involvedObject"]["name"],
                   event["involvedObject"].get("uid", ""), event["type"], event["message"])
                  for event in kmock.objects.values() if event.get("kind") == "Event" and event.get("reason") == reason)


def evictions_counted(outcome: str) -> float:
    return REGISTRY.get_sample_value("cardquota_preemption_evictions_total",
                                     {"queue": "research", "outcome": outcome}) or 0.0


def victims(decided: Any) -> list[str]:
    return [victim.key[1] for preemption in decided.preemptions for victim in preemption.victims]


async def test_an_urgent_gang_evicts_exactly_the_gang_it_needs_and_goes_through_once_the_watch_shows_it_released(
        volcano_kmock: Any, tmp_path: Any) -> None:
    """Queue research's 8 A100 are held by two low-priority gangs of 4; the urgent gang needs 4. The newer gang is
    evicted (Kueue's order: lowest priority, then most recently admitted), the older one is left alone."""
    put(volcano_kmock, gpu_node("a100-2", A100, 8), research(8), *running("sweep-a", 2, 2, bound_at=1),
        *running("sweep-b", 2, 2, bound_at=5), *waiting("llama", 1, 4))
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        keeper = Gatekeeper(cache, api, takeover_wait=0)
        evicted_before = evictions_counted("evicted")
        decided = await keeper.round()
        assert decided is not None
        assert decided.lifts == []
        assert victims(decided) == ["sweep-b"]
        # every pod of the gang tried as a dry run first, then evicted, each with its uid as the precondition
        assert in_phases(volcano_kmock) == [
            {("sweep-b-0", "uid-sweep-b-0", True), ("sweep-b-1", "uid-sweep-b-1", True)},
            {("sweep-b-0", "uid-sweep-b-0", False), ("sweep-b-1", "uid-sweep-b-1", False)}]
        assert len(evictions(volcano_kmock)) == 4
        assert pod_deletes(volcano_kmock) == []
        assert keeper.stats.evicted == 1
        assert evictions_counted("evicted") == evicted_before + 1
        assert events(volcano_kmock, "Preempted") == [
            ("PodGroup", "sweep-b", "uid-pg-sweep-b", "Warning",
             "Preempted by ml/llama (priority 1000) to free 4 NVIDIA-A100 in queue research")]
        assert events(volcano_kmock, "Preempting") == [
            ("PodGroup", "llama", "uid-pg-llama", "Normal",
             "Preempting 1 workload of queue research to free 4 NVIDIA-A100: ml/sweep-b (priority 10)")]
        assert [name for name in ("sweep-a-0", "sweep-a-1", "sweep-b-0", "sweep-b-1")
                if terminating(volcano_kmock, name)] == ["sweep-b-0", "sweep-b-1"]
        assert gates(volcano_kmock, "llama-0") == [{"name": keys.CARD_GATE}]

        await eventually(lambda: released(cache, "sweep-b-0", "sweep-b-1"))  # the watch brings the deletion
        through = await keeper.round()
        assert through is not None
        assert [lift.pod[1] for lift in through.lifts] == ["llama-0"]
        assert gates(volcano_kmock, "llama-0") == []
        assert stored(volcano_kmock, "llama-0")["metadata"]["annotations"][keys.ADMITTED_BY_PREEMPTION] == "true"
        assert real_evictions(volcano_kmock) == {"sweep-b-0": 1, "sweep-b-1": 1}  # nothing more evicted
        assert pod_deletes(volcano_kmock) == []
        await eventually(lambda: cache.ledger.snapshot.pods[("ml", "llama-0")].gate is None)
        assert await keeper.round() is not None
        assert keeper.evicting == {}
        assert real_evictions(volcano_kmock) == {"sweep-b-0": 1, "sweep-b-1": 1}


async def test_a_budget_protecting_the_only_victim_holds_the_preemptor_until_it_allows_the_eviction(
        volcano_kmock: Any, tmp_path: Any) -> None:
    """A PodDisruptionBudget allowing no disruption covers the only gang the urgent one could displace: read before
    any eviction is asked, it refuses the gang whole (no eviction request is sent), the preemptor stays at the gate
    saying why, and the refusal is counted. Once the budget allows it,
    and :data:`REFUSED_SECONDS` have passed, the gang is evicted and the preemptor let through."""
    put(volcano_kmock, research(8), *running("sweep", 2, 4, bound_at=5), *waiting("llama", 1, 4),
        disruption_budget("sweep", {"app": "sweep"}, allowed=0))
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        now = [0.0]
        keeper = Gatekeeper(cache, api, takeover_wait=0, clock=lambda: now[0])
        refused_before = evictions_counted("refused")
        first = await keeper.round()
        assert first is not None
        assert victims(first) == ["sweep"]
        assert evictions(volcano_kmock) == []  # the budget, read first, refuses: not even a dry run is asked
        assert evictions_counted("refused") == refused_before + 1
        assert keeper.stats.eviction_refused == 1

        for moment in (0.0, REFUSED_SECONDS - 1):
            now[0] = moment
            waits = await keeper.round()
            assert waits is not None
            assert waits.preemptions == []
            assert waits.lifts == []
            (wait,) = waits.waits
            assert "refused by a PodDisruptionBudget now: it waits and is judged again" in wait.reason
        assert evictions(volcano_kmock) == []
        assert gates(volcano_kmock, "llama-0") == [{"name": keys.CARD_GATE}]
        assert [name for name in ("sweep-0", "sweep-1") if terminating(volcano_kmock, name)] == []
        assert events(volcano_kmock, "Preempted") == []

        put(volcano_kmock, disruption_budget("sweep", {"app": "sweep"}, allowed=2))  # its controller relaxes it
        now[0] = REFUSED_SECONDS
        again = await keeper.round()
        assert again is not None
        assert victims(again) == ["sweep"]
        assert real_evictions(volcano_kmock) == {"sweep-0": 1, "sweep-1": 1}
        assert pod_deletes(volcano_kmock) == []
        assert evictions_counted("refused") == refused_before + 1
        await eventually(lambda: released(cache, "sweep-0", "sweep-1"))
        through = await keeper.round()
        assert through is not None
        assert [lift.pod[1] for lift in through.lifts] == ["llama-0"]
        assert stored(volcano_kmock, "llama-0")["metadata"]["annotations"][keys.ADMITTED_BY_PREEMPTION] == "true"


async def test_a_budget_allowing_fewer_disruptions_than_the_gang_has_pods_leaves_the_whole_gang(
        volcano_kmock: Any, tmp_path: Any) -> None:
    """The budget over the 2-pod victim gang allows 1 disruption. Each dry run is judged against the budget as it
    stands (the API server decrements it only for a real eviction), so both would pass and the second real eviction
    be refused — one pod of the gang evicted, the other left running. The keeper reads the namespace's budgets first
    (cardquota.core.preemption.budget_refusal, under the card gate's `list` on poddisruptionbudgets) and evicts no
    pod of the gang."""
    put(volcano_kmock, research(8), *running("sweep", 2, 4, bound_at=5), *waiting("llama", 1, 4),
        disruption_budget("sweep", {"app": "sweep"}, allowed=1))
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        keeper = Gatekeeper(cache, api, takeover_wait=0, clock=lambda: 0.0)
        decided = await keeper.round()
        assert decided is not None
        assert victims(decided) == ["sweep"]
        assert keeper.stats.eviction_refused == 1
        assert [name for name in ("sweep-0", "sweep-1") if terminating(volcano_kmock, name)] == []


class LeadingFor:
    """``is_leader`` answering yes ``times`` times (from any thread), then no: leadership lost mid-plan."""

    def __init__(self, times: int) -> None:
        self.left = times
        self._lock = threading.Lock()

    def __call__(self) -> bool:
        with self._lock:
            self.left -= 1
            return self.left >= 0


async def test_a_restart_between_two_evictions_of_a_plan_evicts_no_victim_twice(volcano_kmock: Any,
                                                                               tmp_path: Any) -> None:
    """The urgent gang needs the cards of both low-priority gangs. The first keeper evicts one of them and loses its
    leadership before the second eviction; a new keeper over a fresh cache (what a restarted or new leader has)
    plans again from the API server, where the evicted gang is being deleted: it evicts only the other one, and
    the urgent gang goes through."""
    put(volcano_kmock, research(8), *running("a", 1, 4, bound_at=1), *running("b", 1, 4, bound_at=5),
        *waiting("llama", 2, 4), gpu_node("a100-2", A100, 8))
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        first = Gatekeeper(cache, api, is_leader=LeadingFor(2), takeover_wait=0)  # (the round's check, one eviction)
        decided = await first.round()
        assert decided is not None
        assert sorted(victims(decided)) == ["a", "b"]
        assert sum(real_evictions(volcano_kmock).values()) == 1
        (evicted,) = real_evictions(volcano_kmock)
        assert terminating(volcano_kmock, evicted)
        assert await first.round() is None  # no longer leading: it forgets the plan
    other = "b-0" if evicted == "a-0" else "a-0"
    assert not terminating(volcano_kmock, other)

    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))
        keeper = Gatekeeper(cache, api, takeover_wait=0)
        again = await keeper.round()
        assert again is not None
        assert victims(again) == [other.removesuffix("-0")]
        assert real_evictions(volcano_kmock) == {"a-0": 1, "b-0": 1}
        await eventually(lambda: released(cache, "a-0", "b-0"))
        through = await keeper.round()
        assert through is not None
        assert sorted(lift.pod[1] for lift in through.lifts) == ["llama-0", "llama-1"]
        assert real_evictions(volcano_kmock) == {"a-0": 1, "b-0": 1}
        assert pod_deletes(volcano_kmock) == []
