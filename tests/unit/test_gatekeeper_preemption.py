"""The gate keeper acts on a round's preemptions: each victim unit is read back, its evictions tried as a dry run
and then made through the Eviction API (never a delete), events say who displaced whom, and the preemptor is let
through once the watch shows the victims released — with the API replaced by a stand-in that records every call
and answers as the API server's eviction subresource would."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
from builders import gpu_node, pod, podgroup, queue

from cardquota.core import keys
from cardquota.kube import EvictionAnswer, EvictionOutcome
from cardquota.operator import gatekeeper as gatekeeper_module
from cardquota.operator.gatekeeper import MAX_RETRY_SECONDS, REFUSED_SECONDS, Gatekeeper
from cardquota.runtime.cache import ClusterCache

H100 = "NVIDIA-H100"
LOW, HIGH = 10, 1000
QUEUE = queue("research", {H100: 8}, annotations={keys.PREEMPTION: "LowerPriority"})


def at(minute: int) -> str:
    return f"2026-12-07T10:{minute:02d}:00Z"


def running(name: str, size: int, bound_at: int, priority: int = LOW) -> list[dict[str, Any]]:
    group = podgroup(name, namespace="ml", queue="research", min_member=size, created=at(bound_at))
    group["metadata"]["uid"] = f"uid-pg-{name}"
    return [group] + [pod(f"{name}-{index}", namespace="ml", card=H100, gpus=4, group=name, node_name=f"n{index}",
                          priority=priority, scheduled_at=at(bound_at), uid=f"uid-{name}-{index}")
                      for index in range(size)]


def waiting(name: str, size: int, priority: int = HIGH) -> list[dict[str, Any]]:
    group = podgroup(name, namespace="ml", queue="research", min_member=size, phase="Pending", created=at(30))
    group["metadata"]["uid"] = f"uid-pg-{name}"
    return [group] + [pod(f"{name}-{index}", namespace="ml", card=H100, gpus=4, group=name, queue="research",
                          gated=True, priority=priority, created=at(30), uid=f"uid-{name}-{index}")
                      for index in range(size)]


class EvictionApi:
    """The API server's side of the calls the keeper makes: pods by name, evictions (each pod's answer settable),
    the gate's PATCHes and the events created."""

    def __init__(self, manifests: list[dict[str, Any]]) -> None:
        self.pods = {(m["metadata"]["namespace"], m["metadata"]["name"]): copy.deepcopy(m)
                     for m in manifests if m["kind"] == "Pod"}
        self.others = [m for m in manifests if m["kind"] != "Pod"]
        self.answers: dict[str, EvictionOutcome] = {}
        self.evictions: list[tuple[str, str | None, bool]] = []
        self.patched: dict[str, list[Mapping[str, Any]]] = {}
        self.events: list[tuple[str, str, str, str, str]] = []
        self.budgets: list[dict[str, Any]] = []

    def keeper(self, monkeypatch: pytest.MonkeyPatch, **options: Any) -> Gatekeeper:
        """A keeper calling this stand-in, over a cache listed from what it holds (``options``: the keeper's)."""
        self.install(monkeypatch)
        cache = ClusterCache()
        cache.load([*self.others, *self.pods.values()])
        return Gatekeeper(cache, object(), takeover_wait=0, **options)  # type: ignore[arg-type]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(gatekeeper_module, "read_object", self.read)
        monkeypatch.setattr(gatekeeper_module, "evict_pod", self.evict)
        monkeypatch.setattr(gatekeeper_module, "patch_pod", self.patch)
        monkeypatch.setattr(gatekeeper_module, "create_event", self.event)
        monkeypatch.setattr(gatekeeper_module, "list_objects", self.list_budgets)

    def list_budgets(self, _api: object, path: str, *_: object, **__: object) -> list[dict[str, Any]]:
        assert path.endswith("/poddisruptionbudgets")
        namespace = path.split("/")[-2]
        return [budget for budget in self.budgets if budget["metadata"]["namespace"] == namespace]

    def read(self, _api: object, path: str) -> dict[str, Any] | None:
        _, _, _, namespace, _, name = path.strip("/").split("/")
        return self.pods.get((namespace, name))

    def evict(self, _api: object, namespace: str, name: str, uid: str | None, *, dry_run: bool = False,
              **_: object) -> EvictionAnswer:
        self.evictions.append((name, uid, dry_run))
        outcome = self.answers.get(name, EvictionOutcome.EVICTED)
        if outcome is EvictionOutcome.EVICTED and not dry_run:
            self.pods[namespace, name]["metadata"]["deletionTimestamp"] = at(59)
        message = "Cannot evict pod as it would violate the pod's disruption budget."
        return EvictionAnswer(outcome, message if outcome is EvictionOutcome.REFUSED_BY_BUDGET else "")

    def patch(self, _api: object, _namespace: str, name: str, operations: list[Mapping[str, Any]],
              **_: object) -> None:
        self.patched[name] = operations

    def event(self, _api: object, _namespace: str, event: Mapping[str, Any]) -> None:
        involved = event["involvedObject"]
        self.events.append((involved["kind"], involved["name"], involved.get("uid", ""), event["type"],
                            event["message"]))

    def watch(self, cache: ClusterCache) -> None:
        """The watch catching up with what the API server holds."""
        for manifest in self.pods.values():
            cache.apply("MODIFIED", manifest)


def real(api: EvictionApi) -> list[str]:
    return [name for name, _, dry_run in api.evictions if not dry_run]


@pytest.mark.asyncio
async def test_the_victims_are_evicted_once_said_so_and_the_preemptor_goes_through_when_the_watch_shows_them_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    manifests = [gpu_node("n0", H100, 8), gpu_node("n1", H100, 8), QUEUE, *running("old", 1, 1),
                 *running("new", 1, 5), *waiting("llama", 1)]
    api = EvictionApi(manifests)
    keeper = api.keeper(monkeypatch)
    decided = await keeper.round()
    assert decided is not None
    assert [victim.key[1] for preemption in decided.preemptions for victim in preemption.victims] == ["new"]
    assert api.evictions == [("new-0", "uid-new-0", True), ("new-0", "uid-new-0", False)]  # (dry run first)
    assert api.events == [
        ("PodGroup", "new", "uid-pg-new", "Warning",
         "Preempted by ml/llama (priority 1000) to free 4 NVIDIA-H100 in queue research"),
        ("PodGroup", "llama", "uid-pg-llama", "Normal",
         "Preempting 1 workload of queue research to free 4 NVIDIA-H100: ml/new (priority 10)")]
    assert keeper.stats.evicted == 1

    # The watch lags: the victim still holds its cards; it is not evicted again, and the preemptor waits for it.
    lagging = await keeper.round()
    assert lagging is not None
    assert lagging.lifts == []
    assert real(api) == ["new-0"]
    assert "the workloads preempted for it are releasing their cards" in lagging.waits[0].reason

    api.watch(keeper.cache)  # the victim is being deleted: its cards are released
    through = await keeper.round()
    assert through is not None
    assert [lift.pod[1] for lift in through.lifts] == ["llama-0"]
    assert {"op": "add", "path": "/metadata/annotations/cardquota.io~1admitted-by-preemption", "value": "true"} in [
        dict(operation) for operation in api.patched["llama-0"]]
    assert real(api) == ["new-0"]
    assert keeper.evicting == {}


@pytest.mark.asyncio
async def test_a_budget_that_refuses_one_pod_of_a_gang_leaves_the_whole_gang_and_another_victim_is_chosen(
        monkeypatch: pytest.MonkeyPatch) -> None:
    manifests = [gpu_node("n0", H100, 8), gpu_node("n1", H100, 8), QUEUE, *running("old", 1, 1),
                 *running("gang", 2, 5), *waiting("llama", 1)]
    quota = queue("research", {H100: 12}, annotations={keys.PREEMPTION: "LowerPriority"})
    manifests[2] = quota
    api = EvictionApi(manifests)
    api.answers["gang-1"] = EvictionOutcome.REFUSED_BY_BUDGET
    now = [0.0]
    keeper = api.keeper(monkeypatch, clock=lambda: now[0])
    await keeper.round()
    assert real(api) == []  # the dry run of gang-1 was refused: neither pod of the gang is evicted
    assert keeper.stats.eviction_refused == 1
    refused = await keeper.round()  # the gang is left alone a while: the older single-pod job is chosen instead
    assert refused is not None
    assert [victim.key[1] for preemption in refused.preemptions for victim in preemption.victims] == ["old"]
    assert real(api) == ["old-0"]


@pytest.mark.asyncio
async def test_when_only_a_refused_victim_would_do_the_preemptor_waits_and_it_is_tried_again_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    manifests = [gpu_node("n0", H100, 8), QUEUE, *running("sweep", 2, 5), *waiting("llama", 2)]
    api = EvictionApi(manifests)
    api.answers["sweep-0"] = EvictionOutcome.REFUSED_BY_BUDGET
    now = [0.0]
    keeper = api.keeper(monkeypatch, clock=lambda: now[0])
    await keeper.round()
    waits = await keeper.round()
    assert waits is not None
    assert waits.preemptions == []
    assert "refused by a PodDisruptionBudget now: it waits and is judged again" in waits.waits[0].reason
    assert len(api.evictions) == 1  # (the dry run of sweep-0, once)
    now[0] = REFUSED_SECONDS
    del api.answers["sweep-0"]  # the budget allows it now
    again = await keeper.round()
    assert again is not None
    assert real(api) == ["sweep-0", "sweep-1"]
    assert now[0] < MAX_RETRY_SECONDS


@pytest.mark.asyncio
async def test_a_new_leader_plans_again_from_the_api_and_evicts_no_victim_twice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader evicted one victim of a two-victim plan and stopped (its memory is lost). The next one sees that
    victim being deleted (released, not a candidate) and evicts only the other."""
    manifests = [gpu_node("n0", H100, 8), gpu_node("n1", H100, 8), QUEUE, *running("a", 1, 1), *running("b", 1, 5),
                 *waiting("llama", 2)]
    api = EvictionApi(manifests)
    api.pods["ml", "b-0"]["metadata"]["deletionTimestamp"] = at(59)  # (what the first leader did)
    keeper = api.keeper(monkeypatch)
    decided = await keeper.round()
    assert decided is not None
    assert [victim.key[1] for preemption in decided.preemptions for victim in preemption.victims] == ["a"]
    assert real(api) == ["a-0"]


@pytest.mark.asyncio
async def test_no_eviction_is_sent_once_leadership_has_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    manifests = [gpu_node("n0", H100, 8), QUEUE, *running("sweep", 1, 5), *waiting("llama", 1)]
    api = EvictionApi(manifests)
    answers = iter([True])  # the round's check; then no longer leading when the eviction would be sent
    keeper = api.keeper(monkeypatch, is_leader=lambda: next(answers, False))
    await keeper.round()
    assert real(api) == []
    assert keeper.evicting == {}
