"""The publisher's work follows what changed, not the cluster's size (issue 20): an idle window visits no object, a
window after one pod event visits the same few objects at 10 or 10,000 pods, a held-back message is looked at again
only when its interval has passed, a large window gives the event loop back between slices, and what is published
is what a full recomputation of every object each window would publish."""

from __future__ import annotations

import asyncio
import itertools
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from builders import gpu_node, pod, podgroup, queue
from measuring import counting

import cardquota.operator.controller as controller
from cardquota.core.changes import Changes
from cardquota.core.events import CardEvent, pod_event, podgroup_event, queue_event, waiting_pod
from cardquota.core.ledger import Ledger
from cardquota.core.publish import node_annotations, queue_annotations
from cardquota.kube import node_path, queue_path
from cardquota.operator.controller import Publisher
from cardquota.runtime.cache import ClusterCache

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
Sent = tuple[str, str, str, str, str]
"""(kind, namespace, name, reason, message) of an event sent."""


class CountingDict(dict[Any, Any]):
    """A dict that counts the entries read from it (by key, membership or iteration)."""

    reads = 0

    def get(self, key: Any, default: Any = None) -> Any:
        CountingDict.reads += 1
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        CountingDict.reads += 1
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        CountingDict.reads += 1
        return super().__contains__(key)

    def _counted(self, items: Iterator[Any]) -> Iterator[Any]:
        for item in items:
            CountingDict.reads += 1
            yield item

    def __iter__(self) -> Iterator[Any]:
        return self._counted(super().__iter__())

    def values(self) -> Any:
        return self._counted(iter(super().values()))

    def items(self) -> Any:
        return self._counted(iter(super().items()))


class FakeApi:
    """The API server's side: annotations as patched, events as created."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.annotations: dict[str, dict[str, str]] = {}
        self.events: list[Sent] = []
        monkeypatch.setattr(controller, "patch_annotations", self.patch)
        monkeypatch.setattr(controller, "create_event", self.create)

    def patch(self, api: object, path: str, changes: dict[str, str | None]) -> bool:
        annotations = self.annotations.setdefault(path, {})
        for name, value in changes.items():
            if value is None:
                annotations.pop(name, None)
            else:
                annotations[name] = value
        return True

    def create(self, api: object, namespace: str, event: dict[str, Any]) -> None:
        involved = event["involvedObject"]
        self.events.append((involved["kind"], involved.get("namespace", ""), involved["name"], event["reason"],
                            event["message"]))

    def taken(self) -> list[Sent]:
        sent, self.events = self.events, []
        return sent


def cluster(pods: int) -> list[dict[str, Any]]:
    """``pods`` pods in two queues, one in 47 of them pending, and a PodGroup per 8 pods (one in 3 Pending)."""
    objects = [gpu_node("a", A100, 8), gpu_node("h", H100, 8), queue("team-a", {A100: 4, H100: 2}),
               queue("team-b", {A100: 2})]
    groups = max(1, pods // 8)
    for index in range(groups):
        objects.append(podgroup(f"g{index}", queue="team-a" if index % 2 else "team-b",
                                phase="Pending" if index % 3 == 0 else "Running", request={A100: 2}))
    for index in range(pods):
        objects.append(pod(f"p{index}", gpus=1, card=A100, group=f"g{index % groups}",
                           node_name=None if index % 47 == 0 else "a"))
    return objects


UNLIMITED = 10**9
"""An events budget these tests never spend (they count the work behind every event; the budget has its own test in
test_publisher_events.py)."""


async def loaded(monkeypatch: pytest.MonkeyPatch, pods: int, **options: Any) -> tuple[ClusterCache, Publisher, FakeApi]:
    """A cache of ``cluster(pods)``, its publisher after the first (reconciling) window, and the fake API."""
    api = FakeApi(monkeypatch)
    cache = ClusterCache()
    cache.load(cluster(pods))
    publisher = Publisher(cache, api=None, **{"events_burst": UNLIMITED, **options})  # type: ignore[arg-type]
    await publisher.flush()
    api.taken()
    return cache, publisher, api


def count_reads(cache: ClusterCache) -> None:
    snapshot = cache.ledger.snapshot
    snapshot.podgroups = CountingDict(snapshot.podgroups)
    snapshot.pods = CountingDict(snapshot.pods)
    CountingDict.reads = 0


def count_events(monkeypatch: pytest.MonkeyPatch) -> dict[str, Callable[[], int]]:
    """Count the publisher's calls of the pure event functions (as imported by the controller)."""
    counts: dict[str, Callable[[], int]] = {}
    for name, function in (("pod_event", pod_event), ("podgroup_event", podgroup_event),
                           ("queue_event", queue_event)):
        calls = [0]

        def counted(*args: Any, _function: Any = function, _calls: list[int] = calls) -> Any:
            _calls[0] += 1
            return _function(*args)

        monkeypatch.setattr(controller, name, counted)
        counts[name] = lambda _calls=calls: _calls[0]  # type: ignore[misc]
    return counts


# ------------------------------------------------------------------------------------------- work per window


async def test_an_idle_window_visits_no_object(monkeypatch: pytest.MonkeyPatch) -> None:
    cache, publisher, api = await loaded(monkeypatch, 2000)
    count_reads(cache)
    calls = count_events(monkeypatch)
    usage = counting(monkeypatch, Ledger, "usage")
    await publisher.flush()
    assert CountingDict.reads == 0  # the publisher before issue 20 walked every PodGroup here
    assert (calls["pod_event"](), calls["podgroup_event"](), calls["queue_event"](), usage()) == (0, 0, 0, 0)
    assert api.taken() == []


@pytest.mark.parametrize("pods", [10, 10_000])
async def test_a_window_after_one_pod_event_visits_the_same_few_objects_at_any_size(
        monkeypatch: pytest.MonkeyPatch, pods: int) -> None:
    cache, publisher, api = await loaded(monkeypatch, pods)
    cache.apply("ADDED", pod("new", gpus=3, card=A100, queue="team-b"))  # the queue's pending cards move only
    count_reads(cache)
    calls = count_events(monkeypatch)
    await publisher.flush()
    assert (calls["pod_event"](), calls["podgroup_event"](), calls["queue_event"]()) == (1, 0, 1)
    assert CountingDict.reads <= 3  # the new pod, and its PodGroup looked up for its queue: whatever the size
    assert [(kind, name) for kind, _, name, *_ in api.taken()] == [("Pod", "new")]
    assert api.annotations[queue_path("team-b")]["volcano.sh/card.pending"] == (
        queue_annotations(cache.ledger.usage("team-b"))["volcano.sh/card.pending"])


async def test_a_move_of_a_queues_allocated_cards_recomputes_that_queues_waiting_objects_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    cache, publisher, api = await loaded(monkeypatch, 400, clock=lambda: now[0])
    now[0] += 3600  # every object may speak again
    ledger = cache.ledger
    waiting_a = len(ledger.pending_pods("team-a")) + len(ledger.waiting_podgroups("team-a"))
    assert waiting_a
    assert ledger.pending_pods("team-b")
    calls = count_events(monkeypatch)
    cache.apply("ADDED", pod("bound", gpus=1, card=A100, queue="team-a", node_name="a"))
    await publisher.flush()
    assert calls["pod_event"]() + calls["podgroup_event"]() == waiting_a
    sent = api.taken()
    assert sent
    assert {queue_of(cache, kind, namespace, name) for kind, namespace, name, *_ in sent} == {"team-a"}


def queue_of(cache: ClusterCache, kind: str, namespace: str, name: str) -> str:
    snapshot = cache.ledger.snapshot
    if kind == "Pod":
        return snapshot.queue_of(snapshot.pods[(namespace, name)])
    return snapshot.podgroups[(namespace, name)].queue


async def test_a_held_back_message_is_looked_at_again_only_when_its_interval_has_passed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    cache, publisher, api = await loaded(monkeypatch, 10, event_interval=60, clock=lambda: now[0])
    cache.apply("ADDED", pod("w", gpus=2, card=A100, queue="team-b"))
    await publisher.flush()
    assert [name for _, _, name, *_ in api.taken()] == ["w"]  # team-b's p0 and g0 spoke in the first window
    now[0] += 1
    cache.apply("ADDED", pod("busy", gpus=1, card=A100, queue="team-b", node_name="a"))  # new messages for all three
    await publisher.flush()
    assert api.taken() == []  # said 1 s ago: held back
    calls = count_events(monkeypatch)
    for _ in range(58):
        now[0] += 1
        await publisher.flush()
    assert calls["pod_event"]() + calls["podgroup_event"]() == 0  # before issue 20: the whole queue every window
    now[0] += 1  # 60 s since they spoke
    await publisher.flush()
    assert (calls["pod_event"](), calls["podgroup_event"]()) == (2, 1)
    sent = api.taken()
    assert sorted(name for _, _, name, *_ in sent) == ["g0", "p0", "w"]
    assert all("total would be" in message for *_, message in sent)


async def test_a_large_window_gives_the_event_loop_back_between_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = [0.0]

    def slice_clock() -> float:  # every look at the clock is one unit of work
        ticks[0] += 1
        return ticks[0]

    api = FakeApi(monkeypatch)
    cache = ClusterCache()
    cache.load(cluster(5000))
    publisher = Publisher(cache, api=None, slice_budget=10, slice_clock=slice_clock,  # type: ignore[arg-type]
                          events_burst=UNLIMITED)
    calls = count_events(monkeypatch)

    def work() -> int:
        return calls["pod_event"]() + calls["podgroup_event"]() + calls["queue_event"]()

    async def flush_beside_another_task() -> list[int]:
        """The work done between two turns of another task (where an admission would run)."""
        seen: list[int] = []

        async def other_task() -> None:
            while True:
                seen.append(work())
                await asyncio.sleep(0)

        observer = asyncio.ensure_future(other_task())
        await asyncio.sleep(0)
        await publisher.flush()
        observer.cancel()
        seen.append(work())
        return [after - before for before, after in itertools.pairwise(seen)]

    steps = await flush_beside_another_task()  # the reconcile: every waiting object, each sends its event
    assert sum(steps) > 250
    assert max(steps) <= 10
    waiting = [len(cache.ledger.pending_pods(name)) + len(cache.ledger.waiting_podgroups(name))
               for name in ("team-a", "team-b")]
    assert len(api.taken()) == sum(waiting)
    for name in ("team-a", "team-b"):  # every waiting object has a new message, held back (said just now)
        cache.apply("ADDED", pod(f"bound-{name}", gpus=1, card=A100, queue=name, node_name="a"))
    steps = await flush_beside_another_task()
    assert sum(steps) == sum(waiting) + 2  # and the two queues' own events
    assert max(steps) <= 10  # never more than a slice's worth of work without the other task running
    assert publisher.stats.yields >= sum(waiting) // 10
    assert api.taken() == []


async def test_work_that_failed_is_done_next_window(monkeypatch: pytest.MonkeyPatch) -> None:
    cache, publisher, api = await loaded(monkeypatch, 10)
    original = api.create

    def fail_once(*args: Any) -> None:
        monkeypatch.setattr(controller, "create_event", original)
        raise RuntimeError("unexpected")

    monkeypatch.setattr(controller, "create_event", fail_once)
    cache.apply("ADDED", pod("w", gpus=5, card=A100, queue="team-a"))
    with pytest.raises(RuntimeError):
        await publisher.flush()
    await publisher.flush()
    assert [(kind, name) for kind, _, name, *_ in api.taken()] == [("Pod", "w")]


async def test_a_new_object_of_a_deleted_ones_name_starts_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    cache, publisher, api = await loaded(monkeypatch, 10)
    manifest = pod("w", gpus=5, card=A100, queue="team-a")
    cache.apply("ADDED", manifest)
    await publisher.flush()
    cache.apply("DELETED", manifest)
    await publisher.flush()
    cache.apply("ADDED", manifest)
    await publisher.flush()
    assert [(kind, name) for kind, _, name, *_ in api.taken()] == [("Pod", "w"), ("Pod", "w")]
    assert ("Pod", "default", "w") in publisher._events  # what it said, until it is deleted again


async def test_a_replica_that_does_not_lead_keeps_no_change_log(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi(monkeypatch)
    cache = ClusterCache()
    cache.load(cluster(10))
    publisher = Publisher(cache, api=None, is_leader=lambda: False)  # type: ignore[arg-type]
    for index in range(100):
        cache.apply("ADDED", pod(f"churn-{index}", gpus=1, card=A100, queue="team-a"))
        cache.apply("DELETED", pod(f"churn-{index}"))
    await publisher.flush()
    assert not cache.ledger.changes.pending
    assert api.taken() == []


# ------------------------------------------------------------------------------------------------ change log


def test_the_ledger_records_each_object_an_event_touches() -> None:
    ledger = Ledger.build(cluster(16))
    assert not ledger.changes.pending  # a full list: nothing has changed since
    ledger.upsert(pod("w", gpus=1, card=A100, queue="team-a"))
    assert ledger.changes.drain() == Changes(queues={"team-a"}, pods={("default", "w")})
    ledger.upsert(pod("p1", gpus=1, card=A100, group="g1", node_name="h"))  # moves to an H100 node: its group too
    assert ledger.changes.drain() == Changes(queues={"team-a"}, podgroups={("default", "g1")},
                                             pods={("default", "p1")})
    ledger.upsert(podgroup("g0", queue="team-b", phase="Inqueue", request={A100: 2}))  # its pods hold that already
    assert ledger.changes.drain() == Changes(podgroups={("default", "g0")})
    ledger.upsert(podgroup("g0", queue="team-b", phase="Inqueue", request={A100: 20}))
    assert ledger.changes.drain() == Changes(queues={"team-b"}, podgroups={("default", "g0")})
    ledger.upsert(gpu_node("a", A100, 16))
    assert ledger.changes.drain().nodes == {"a"}
    ledger.upsert(queue("team-c"))
    ledger.delete(queue("team-c"))
    assert not ledger.changes.drain()
    assert ledger.changes.versions["team-c"] == 2  # it changed, and changed back: readers can tell
    assert not ledger.changes.pending


def test_waiting_podgroups_follow_phase_and_queue() -> None:
    ledger = Ledger.build([queue("a"), queue("b"), podgroup("g", queue="a", phase="Pending")])
    assert ledger.waiting_podgroups("a") == {("default", "g")}
    ledger.upsert(podgroup("g", queue="b", phase=""))
    assert (ledger.waiting_podgroups("a"), ledger.waiting_podgroups("b")) == (set(), {("default", "g")})
    ledger.upsert(podgroup("g", queue="b", phase="Inqueue"))
    assert ledger.waiting_podgroups("b") == set()
    ledger.upsert(podgroup("g", queue="b", phase="Pending"))
    ledger.delete(podgroup("g", queue="b"))
    assert ledger.waiting_podgroups("b") == set()


# ------------------------------------------------------------------- the same as recomputing everything each window


def every_event(ledger: Ledger) -> list[CardEvent]:
    """Every object's event now (queues, PodGroups, waiting pods), computed afresh."""
    snapshot = ledger.snapshot
    events = [queue_event(record) for record in snapshot.queues.values()]
    events += [podgroup_event(group, ledger) for group in snapshot.podgroups.values()]
    events += [pod_event(found, ledger) for key in snapshot.pods if (found := waiting_pod(ledger, key)) is not None]
    return [event for event in events if event is not None]


class FullRecomputation:
    """What the publisher must send: every window, every object's event computed afresh, sent when it says
    something new and the object has not spoken within the interval (deleted objects forgotten)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.said: dict[tuple[str, str, str], tuple[str, str, float]] = {}

    def window(self, ledger: Ledger, now: float) -> list[Sent]:
        snapshot = ledger.snapshot
        events = every_event(ledger)
        for identity in list(self.said):
            kind, namespace, name = identity
            if (kind == "Pod" and (namespace, name) not in snapshot.pods) or (
                    kind == "PodGroup" and (namespace, name) not in snapshot.podgroups):
                del self.said[identity]
        sent = []
        for event in events:
            identity = (event.kind, event.namespace, event.name)
            last = self.said.get(identity)
            if last is not None and (last[:2] == (event.reason, event.message) or now - last[2] < self.interval):
                continue
            self.said[identity] = (event.reason, event.message, now)
            sent.append((event.kind, event.namespace, event.name, event.reason, event.message))
        return sent


def step(rng: random.Random, cache: ClusterCache, serial: list[int]) -> None:
    """One random watch event of a small cluster: pods come, bind, go; PodGroups move through their phases; quotas
    and nodes change."""
    snapshot = cache.ledger.snapshot
    choice = rng.randrange(8)
    serial[0] += 1
    queues = ["team-a", "team-b", "team-c"]
    card = rng.choice([A100, H100, f"{A100}|{H100}", "NVIDIA-L4"])
    if choice <= 1 or not snapshot.pods:
        group = rng.choice([None, *[name for _, name in snapshot.podgroups]])
        cache.apply("ADDED", pod(f"p{serial[0]}", gpus=rng.randrange(0, 4), card=card, group=group,
                                 queue=None if group else rng.choice(queues),
                                 node_name=rng.choice([None, None, "a", "h"])))
    elif choice == 2:
        namespace, name = rng.choice(sorted(snapshot.pods))
        manifest = pod(name, namespace=namespace)
        cache.apply("DELETED", manifest)
    elif choice == 3:
        key = rng.choice(sorted(snapshot.pods))
        found = snapshot.pods[key]
        annotations = dict(found.meta.annotations)
        cache.apply("MODIFIED", pod(key[1], gpus=rng.randrange(1, 4), node_name=rng.choice(["a", "h", None]),
                                    annotations=annotations))
    elif choice == 4:
        cache.apply("MODIFIED", podgroup(f"g{rng.randrange(4)}", queue=rng.choice(queues),
                                         phase=rng.choice(["Pending", "", "Inqueue", "Running"]),
                                         request={rng.choice([A100, H100]): rng.randrange(1, 6)}))
    elif choice == 5:
        name = rng.choice(queues)
        quota = rng.choice([{A100: rng.randrange(0, 6), H100: rng.randrange(0, 4)}, {A100: rng.randrange(3)}, None,
                            '{"broken"'])
        cache.apply("MODIFIED", queue(name, quota))
    elif choice == 6:
        cache.apply("MODIFIED", gpu_node(rng.choice(["a", "h"]), rng.choice([A100, H100]), rng.choice([4, 8])))
    else:
        cache.apply("DELETED", podgroup(f"g{rng.randrange(4)}"))


@pytest.mark.parametrize("seed", range(8))
async def test_what_is_published_is_what_recomputing_everything_would_publish(
        monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    api = FakeApi(monkeypatch)
    now = [1000.0]
    cache = ClusterCache()
    cache.load([gpu_node("a", A100, 8), gpu_node("h", H100, 8), queue("team-a", {A100: 4, H100: 2}),
                queue("team-b", {A100: 1}), queue("team-c"),
                *[podgroup(f"g{index}", queue="team-a", phase="Pending", request={A100: 3}) for index in range(4)]])
    publisher = Publisher(cache, api=None, event_interval=20, clock=lambda: now[0],  # type: ignore[arg-type]
                          slice_budget=0)  # a slice per object: the cache may change between any two
    reference = FullRecomputation(interval=20)
    serial = [0]
    for _ in range(40):
        for _ in range(rng.randrange(0, 6)):
            step(rng, cache, serial)
        now[0] += rng.choice([0, 1, 5, 15, 30])
        await publisher.flush()
        assert sorted(api.taken()) == sorted(reference.window(cache.ledger, now[0]))
        ledger = cache.ledger
        for name in ledger.snapshot.queues:
            desired = {k: v for k, v in queue_annotations(ledger.usage(name)).items() if v is not None}
            assert api.annotations.get(queue_path(name), {}) == desired
        for name, record in ledger.snapshot.nodes.items():
            desired = {k: v for k, v in node_annotations(record.cards).items() if v is not None}
            assert api.annotations.get(node_path(name), {}) == desired


@pytest.mark.parametrize("seed", range(4))
async def test_changes_made_while_a_window_is_worked_on_are_published_after_it(
        monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """The cache changes between the slices of a window (watch events run there): nothing is lost."""
    rng = random.Random(seed)
    api = FakeApi(monkeypatch)
    now = [1000.0]
    cache = ClusterCache()
    cache.load([*cluster(40), queue("team-c")])
    publisher = Publisher(cache, api=None, event_interval=20, clock=lambda: now[0],  # type: ignore[arg-type]
                          slice_budget=0)
    serial = [0]
    in_window = [False]
    during = [0]

    async def watch_events() -> None:
        for _ in range(150):
            step(rng, cache, serial)
            during[0] += in_window[0]
            for _ in range(rng.randrange(1, 30)):  # a while: a few slices of the window under way
                await asyncio.sleep(0)

    watch = asyncio.ensure_future(watch_events())
    while not watch.done():
        await asyncio.sleep(0)  # the window (an idle flush gives nothing back to the loop)
        now[0] += rng.choice([0, 1, 5, 30])
        in_window[0] = True
        await publisher.flush()
        in_window[0] = False
    assert during[0] > 20  # watch events applied half-way through a window
    now[0] += 3600
    await publisher.flush()
    ledger = cache.ledger
    expected = {(event.kind, event.namespace, event.name): (event.reason, event.message)
                for event in every_event(ledger)}
    assert expected
    assert {identity: publisher._events.get(identity, ("", ""))[:2] for identity in expected} == expected
    for name in ledger.snapshot.queues:
        desired = {k: v for k, v in queue_annotations(ledger.usage(name)).items() if v is not None}
        assert api.annotations.get(queue_path(name), {}) == desired


def test_the_publisher_bench_reports_every_case() -> None:
    """bench/publisher.py keeps working (its figures are for people: no timing is asserted)."""
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "bench/publisher.py", "--sizes", "200", "--runs", "1"], cwd=repo,
                            capture_output=True, text=True, check=True, timeout=120)
    lines = result.stdout.splitlines()
    assert lines[1].startswith("200 pods, 10 nodes, 25 PodGroups")
    assert [line.split()[0] for line in lines[2::2]] == ["idle", "one", "one", "held", "reconcile"]
    assert all(line.strip().startswith("stretch") for line in lines[3::2])
