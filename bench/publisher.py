"""The publisher's window (operator/controller.py, Publisher.flush) on the event loop the admission webhooks share.

    python bench/publisher.py [--sizes 10000,50000,100000] [--runs 5]

Synthetic clusters (bench/synthetic.py: nodes = pods/20, 20 queues, a PodGroup per 8 pods, a third of them Pending,
a fifth of the pods unbound). The API calls are no-ops (on threads, as served); the event interval runs on a fake
clock. Per size and case, min-max over the runs of:

* flush   the wall time of one flush;
* stretch the longest synchronous stretch the event loop ran during it (the longest single callback: what an
          admission arriving then could wait for). Target: <= 5 ms. It includes any pass of the cyclic garbage
          collector that ran inside it (a process-wide pause any allocation may trigger: the longest is shown).

Cases: idle (nothing changed since the last flush); one pod (a new pending pod: its queue's pending cards move, its
own event is sent); one bind (a pending pod bound: its queue's allocated cards move, so every waiting PodGroup and pod
of that queue has a new message, ~1/20 of the cluster's, all sent); held back (a bind in every queue a second ago,
every new message held back by the 60 s interval, nothing changed since); reconcile (the first window as leader:
everything, every event sent). Sending an event is a thread hop (~0.1 ms here), the bulk of "one bind" and
"reconcile" for both publishers.

The baseline, measured in the same run with the same GC settings: the publisher as of afb8388 (before issue 20),
reproduced below as LegacyPublisher, on the same cache. Its idle window walked every PodGroup; a window with a
touched or held-back queue walked every PodGroup and every pending pod of it, in one synchronous stretch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import cluster, pod

import cardquota.operator.controller as controller
from cardquota.core.events import CardEvent, pod_event, podgroup_event, queue_event
from cardquota.core.publish import queue_annotations
from cardquota.kube import node_path, queue_path
from cardquota.operator.controller import Publisher
from cardquota.runtime.cache import ClusterCache

controller.patch_annotations = lambda *args: True  # type: ignore[assignment]
controller.create_event = lambda *args: None  # type: ignore[assignment]


class LegacyPublisher(Publisher):
    """The publisher as of afb8388: the touched queues' and nodes' annotations, then, for every touched or
    held-back queue, the events of all PodGroups (walking every PodGroup of the cluster) and all pending pods of
    the queue, computed in one synchronous stretch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held_queues: set[str] = set()

    async def flush(self) -> None:
        ledger = self.cache.ledger
        if not self.cache.ready or not self.is_leader():
            self._was_leader = False
            return
        changes = ledger.changes.drain()
        if not self._was_leader:
            changes.queues.update(ledger.queue_names())
            changes.nodes.update(ledger.snapshot.nodes)
            self._events.clear()
            self._was_leader = True
        for name in sorted(changes.queues):
            record = ledger.snapshot.queues.get(name)
            if record is not None:
                await self._publish("Queue", name, queue_path(name), record.queue.meta.annotations,
                                    queue_annotations(ledger.usage(name)))
        for name in sorted(changes.nodes):
            node = ledger.snapshot.nodes.get(name)
            if node is not None:
                await self._publish("Node", name, node_path(name), node.node.meta.annotations,
                                    controller.node_annotations(node.cards))
        await self._legacy_events(changes.queues)

    async def _legacy_events(self, queues: set[str]) -> None:
        ledger = self.cache.ledger
        snapshot = ledger.snapshot
        candidates = queues | self._held_queues
        self._held_queues = set()
        by_queue: dict[str, list[CardEvent]] = {queue: [] for queue in candidates}
        for queue in candidates:
            record = snapshot.queues.get(queue)
            if record is not None and (event := queue_event(record)) is not None:
                by_queue[queue].append(event)
        for group in snapshot.podgroups.values():
            if group.queue in by_queue and (event := podgroup_event(group, ledger)) is not None:
                by_queue[group.queue].append(event)
        for queue in candidates:
            for key in ledger.pending_pods(queue):
                found = snapshot.pods.get(key)
                if found is not None and (event := pod_event(found, ledger)) is not None:
                    by_queue[queue].append(event)
        now = self.clock()
        for queue, events in by_queue.items():
            for event in events:
                identity = (event.kind, event.namespace, event.name)
                last = self._events.get(identity)
                if last is not None and last[:2] == (event.reason, event.message):
                    continue
                if last is not None and now - last[2] < self.event_interval:
                    self._held_queues.add(queue)
                    continue
                self._events[identity] = (event.reason, event.message, now)
                await asyncio.to_thread(controller.create_event, self.api, event.namespace or "default",
                                        controller.kubernetes_event(event, self.component))


@contextlib.contextmanager
def callbacks_timed() -> Iterator[list[float]]:
    """Time every callback the event loop runs (asyncio's Handle._run); the list holds the longest so far."""
    original = asyncio.events.Handle._run
    longest = [0.0]

    def timed_run(handle: asyncio.Handle) -> None:
        start = time.perf_counter()
        try:
            original(handle)
        finally:
            longest[0] = max(longest[0], time.perf_counter() - start)

    asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]
    try:
        yield longest
    finally:
        asyncio.events.Handle._run = original  # type: ignore[method-assign]


@contextlib.contextmanager
def collections_timed() -> Iterator[list[float]]:
    """Time every pass of the cyclic garbage collector; the list holds the longest so far."""
    longest = [0.0]
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            longest[0] = max(longest[0], time.perf_counter() - started[0])

    gc.callbacks.append(timed)
    try:
        yield longest
    finally:
        gc.callbacks.remove(timed)


async def measured(publisher: Publisher) -> tuple[float, float, float]:
    """(seconds, longest callback, longest garbage collection) of one flush, after a collection."""
    gc.collect()
    with callbacks_timed() as longest, collections_timed() as collection:
        task = asyncio.ensure_future(publisher.flush())  # run as a task, so that its steps are loop callbacks
        start = time.perf_counter()
        await task
        return time.perf_counter() - start, longest[0], collection[0]


class Scenario:
    """One cluster and the events the cases apply to it (each run binds or relabels a different pending pod)."""

    def __init__(self, pods: int) -> None:
        self.pods = pods
        self.nodes = max(3, pods // 20)
        self.groups = max(1, pods // 8)
        self.cache = ClusterCache()
        self.cache.load(cluster(self.nodes, pods))
        self.now = [1000.0]
        self.added = 0

    def pending(self, queue: str | None = None) -> tuple[str, str]:
        """A pending pod (of ``queue``, else of any queue)."""
        ledger = self.cache.ledger
        for name in [queue] if queue else ledger.queue_names():
            waiting = ledger.pending_pods(name)
            if waiting:
                return min(waiting)
        raise LookupError("no pending pod left")

    def bind(self, key: tuple[str, str]) -> None:
        """Bind a pending pod to an A100 node (synthetic: node-k offers A100 when k % 3 == 0), so that its queue's
        A100 allocation moves and with it every A100|H100 message of the queue."""
        index = int(key[1].removeprefix("pod-"))
        self.cache.apply("MODIFIED", pod(index, 3 * (index % (self.nodes // 3)), self.groups))

    def add_pending(self) -> None:
        """A new unbound pod (its queue's pending cards move: no other object's message changes)."""
        self.cache.apply("ADDED", pod(self.pods + self.added, None, self.groups))
        self.added += 1

    def bind_one(self) -> None:
        self.bind(self.pending())

    def bind_in_every_queue(self) -> None:
        for queue in self.cache.ledger.queue_names():
            if self.cache.ledger.pending_pods(queue):
                self.bind(self.pending(queue))


Samples = tuple[list[float], list[float], list[float]]
"""Seconds of each flush, the longest callback during each, and the longest garbage collection (part of a callback)."""


async def case_runs(publisher: Publisher, runs: int, before: Callable[[], Awaitable[None]]) -> Samples:
    seconds, stretches, collections = [], [], []
    for _ in range(runs):
        await before()
        taken, stretch, collection = await measured(publisher)
        seconds.append(taken)
        stretches.append(stretch)
        collections.append(collection)
    return seconds, stretches, collections


async def measure_size(scenario: Scenario, kind: type[Publisher], runs: int) -> dict[str, Samples]:
    publisher = kind(scenario.cache, api=None, clock=lambda: scenario.now[0])  # type: ignore[arg-type]
    await publisher.flush()  # the first reconcile (sends every event once)
    results: dict[str, Samples] = {}

    async def settle() -> None:
        scenario.now[0] += 3600  # past every interval: nothing held back
        await publisher.flush()
        await publisher.flush()

    async def idle() -> None:
        await settle()

    async def one_pod() -> None:
        await settle()
        scenario.add_pending()

    async def one_bind() -> None:
        await settle()
        scenario.bind_one()

    async def held_back() -> None:
        await settle()
        for _ in range(2):  # the first round's messages are sent, the second's held back (said 1 s ago)
            scenario.bind_in_every_queue()
            scenario.now[0] += 1
            await publisher.flush()
        scenario.now[0] += 1

    async def reconcile() -> None:
        await settle()
        publisher._was_leader = False

    for name, before in (("idle", idle), ("one pod", one_pod), ("one bind", one_bind), ("held back", held_back),
                         ("reconcile", reconcile)):
        results[name] = await case_runs(publisher, runs if name != "reconcile" else max(2, runs // 2), before)
    return results


def span(values: list[float]) -> str:
    """min-max (median) in milliseconds."""
    low, middle, high = min(values) * 1e3, statistics.median(values) * 1e3, max(values) * 1e3
    return f"{low:7.2f}-{high:7.2f} ({middle:7.2f}) ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,50000,100000", help="pods per cluster, comma-separated")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"publisher flush: min-max (median) over {args.runs} runs (reconcile: {max(2, args.runs // 2)}); "
          "stretch = longest synchronous callback on the loop (target <= 5 ms); legacy = the publisher before "
          "issue 20, same run")
    for size in (int(text) for text in args.sizes.split(",")):
        scenario = Scenario(size)
        print(f"{size} pods, {scenario.nodes} nodes, {len(scenario.cache.ledger.snapshot.podgroups)} PodGroups",
              flush=True)
        ours = asyncio.run(measure_size(scenario, Publisher, args.runs))
        del scenario
        gc.collect()
        legacy = asyncio.run(measure_size(Scenario(size), LegacyPublisher, args.runs))  # the same events again
        for case, (seconds, stretches, collections) in ours.items():
            old_seconds, old_stretches, _ = legacy[case]
            ratio = min(old_seconds) / min(seconds)
            print(f"  {case:9} flush   {span(seconds)}, legacy {span(old_seconds)}: {ratio:6.1f}x faster\n"
                  f"  {'':9} stretch {span(stretches)}, legacy {span(old_stretches)}; longest GC pass in it "
                  f"{max(collections) * 1e3:.2f} ms", flush=True)
        gc.collect()


if __name__ == "__main__":
    main()
