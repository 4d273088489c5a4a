"""The pod reflector (operator/reflector.py) over a scripted API server: paginated list streamed into the cache,
watch from the list's resourceVersion, bookmarks, a stream that ends or breaks (watch again from the last
resourceVersion, with backoff), 410 Gone (list again, deleting what the new list no longer holds) — and after each,
a ledger equal to one rebuilt from the API server's truth.

The semantics are those of client-go's reflector (k8s.io/client-go/tools/cache/reflector.go: list, then watch from
the list's resourceVersion; ``IsExpiredError``/410 → relist) and of the watch API (a watch ends after
``timeoutSeconds``; an ERROR event with code 410 when the resourceVersion is too old)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from builders import gpu_node, pod, podgroup, queue
from polling import eventually

from cardquota.kube import (
    UNREACHABLE,
    Gone,
    KubeError,
    ListPage,
    ListProgress,
    NotFound,
    Unreachable,
    WatchEvent,
    api_error,
)
from cardquota.operator.reflector import Reflector
from cardquota.runtime.cache import ClusterCache

pytestmark = pytest.mark.asyncio


def versioned(manifest: Mapping[str, Any], version: int) -> dict[str, Any]:
    return {**manifest, "apiVersion": "v1", "kind": "Pod",
            "metadata": {**manifest["metadata"], "resourceVersion": str(version)}}


def card_pod(name: str, version: int, *, node_name: str | None = "a100-1") -> dict[str, Any]:
    return versioned(pod(name, namespace="ml", group="pg", gpus=1, node_name=node_name,
                         phase="Running" if node_name else "Pending"), version)


@dataclass
class ScriptedWatch:
    """One watch request: its events (or an error at the end), then — if ``hold`` — open until closed."""

    events_script: list[WatchEvent | KubeError]
    hold: bool = False
    meanwhile: Callable[[], None] | None = None
    """What changes in the cluster before this watch's events (and after the list before it)."""
    closed: threading.Event = field(default_factory=threading.Event)

    def events(self) -> Iterator[WatchEvent]:
        if self.meanwhile is not None:
            self.meanwhile()
        for item in self.events_script:
            if isinstance(item, KubeError):
                raise item
            yield item
        if self.hold:
            self.closed.wait(10)

    def close(self) -> None:
        self.closed.set()


@dataclass
class ScriptedServer:
    """Lists answered from ``pods`` in pages of two; watches from ``watches`` in order (the last one held)."""

    pods: dict[str, dict[str, Any]]
    list_version: str
    watches: list[ScriptedWatch]
    watched_from: list[str] = field(default_factory=list)
    page_requests: int = 0

    def lister(self, progress: ListProgress) -> Iterator[ListPage]:
        """Pages from where ``progress`` stands (its token: the offset of the next page)."""
        items = sorted(self.pods.values(), key=lambda item: item["metadata"]["name"])
        for start in range(int(progress.token or 0), max(len(items), 1), 2):
            self.page_requests += 1
            yield ListPage(items[start:start + 2], self.list_version, start + 2 >= len(items), start == 0)
            progress.token = str(start + 2)
        progress.token = ""

    def watcher(self, version: str) -> ScriptedWatch:
        self.watched_from.append(version)
        return self.watches.pop(0) if self.watches else ScriptedWatch([], hold=True)


def reflector_over(server: ScriptedServer, cache: ClusterCache, sleeps: list[float]) -> Reflector:
    async def sleep(delay: float) -> None:
        sleeps.append(delay)

    return Reflector(cache, "v1", "Pod", lister=server.lister, watcher=server.watcher, sleep=sleep)


def base_cache() -> ClusterCache:
    cache = ClusterCache()
    cache.load([gpu_node("a100-1", "NVIDIA-A100", 8), queue("team-a", quota={"NVIDIA-A100": 8}),
                podgroup("pg", namespace="ml", queue="team-a", request={"NVIDIA-A100": 4})], complete=False)
    return cache


def rebuilt(pods: Mapping[str, Mapping[str, Any]]) -> ClusterCache:
    cache = base_cache()
    cache.load(pods.values())
    return cache


def assert_same_ledger(cache: ClusterCache, truth: Mapping[str, Mapping[str, Any]]) -> None:
    expected = rebuilt(truth)
    assert set(cache.ledger.snapshot.pods) == set(expected.ledger.snapshot.pods)
    assert cache.ledger.usage("team-a") == expected.ledger.usage("team-a")


async def running(reflector: Reflector) -> asyncio.Task[None]:
    task = asyncio.create_task(reflector.run())
    await asyncio.wait_for(reflector.synced.wait(), 5)
    return task


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_list_is_paged_into_the_cache_and_the_watch_starts_from_its_version() -> None:
    truth = {f"p{index}": card_pod(f"p{index}", 10 + index) for index in range(5)}
    server = ScriptedServer(dict(truth), "100", [])
    cache = base_cache()
    task = await running(reflector_over(server, cache, []))
    await eventually(lambda: server.watched_from == ["100"])
    assert server.page_requests == 3  # 5 pods, 2 a page
    assert_same_ledger(cache, truth)
    await stopped(task)


async def test_watch_events_bookmarks_and_a_stream_that_ends() -> None:
    server = ScriptedServer({"p0": card_pod("p0", 10)}, "100", [
        ScriptedWatch([WatchEvent("ADDED", card_pod("p1", 101)),
                       WatchEvent("MODIFIED", card_pod("p0", 102, node_name=None)),
                       WatchEvent("BOOKMARK", {"kind": "Pod", "apiVersion": "v1",
                                               "metadata": {"resourceVersion": "150"}})]),
        ScriptedWatch([WatchEvent("DELETED", card_pod("p1", 151))]),
    ])
    cache = base_cache()
    reflector = reflector_over(server, cache, sleeps := [])
    task = await running(reflector)
    await eventually(lambda: len(server.watched_from) == 3)
    assert server.watched_from == ["100", "150", "151"]  # each watch from the last version seen (a bookmark's too)
    assert sleeps == []  # a watch that ends normally is not a failure
    assert_same_ledger(cache, {"p0": card_pod("p0", 102, node_name=None)})
    await stopped(task)


async def test_a_broken_stream_is_watched_again_from_the_last_version_with_backoff() -> None:
    server = ScriptedServer({"p0": card_pod("p0", 10)}, "100", [
        ScriptedWatch([WatchEvent("ADDED", card_pod("p1", 101)), Unreachable("the stream broke", UNREACHABLE)]),
        ScriptedWatch([Unreachable("no Kubernetes API reachable", UNREACHABLE)]),
        ScriptedWatch([WatchEvent("ADDED", card_pod("p2", 102))]),
    ])
    cache = base_cache()
    reflector = reflector_over(server, cache, sleeps := [])
    task = await running(reflector)
    await eventually(lambda: len(server.watched_from) == 4)
    assert server.watched_from == ["100", "101", "101", "102"]
    assert sleeps == [0.5, 1.0]  # backoff grows with consecutive failures
    assert reflector.lists == 1  # no relist for a broken stream
    assert_same_ledger(cache, {name: card_pod(name, 100 + index) for index, name in enumerate(["p0", "p1", "p2"])}
                       | {"p0": card_pod("p0", 10)})
    await stopped(task)


async def test_410_gone_lists_again_and_deletes_what_went_meanwhile() -> None:
    # Meanwhile (the watch's history lost): p1 deleted, p2 changed, p3 created.
    truth = {"p0": card_pod("p0", 10), "p2": card_pod("p2", 5001, node_name=None), "p3": card_pod("p3", 5002)}

    def meanwhile() -> None:
        server.pods, server.list_version = dict(truth), "5002"

    server = ScriptedServer({name: card_pod(name, 10 + index) for index, name in enumerate(["p0", "p1", "p2"])},
                            "100", [ScriptedWatch([Gone("too old resource version: 100 (5000)", 410)],
                                                  meanwhile=meanwhile)])
    cache = base_cache()
    reflector = reflector_over(server, cache, sleeps := [])
    task = await running(reflector)
    await eventually(lambda: server.watched_from[-1:] == ["5002"])
    assert reflector.lists == 2
    assert sleeps == []
    assert_same_ledger(cache, truth)
    await stopped(task)


async def test_a_relist_after_an_etcd_restore_replaces_the_cache_and_the_watch_after_it_applies() -> None:
    """etcd restored from a backup without a revision bump: the API server's resourceVersions went back (the cache
    held p0 and p1 at ~9000, the new list has them at ~50). A resourceVersion is opaque and compared only for
    equality ("API concepts", Resource versions): the list replaces what the cache held whatever the versions, what
    it no longer has goes, and the watch's events after it — lower than what the cache once held — apply."""
    restored = {"p0": card_pod("p0", 40, node_name=None), "p2": card_pod("p2", 41)}

    def meanwhile() -> None:
        server.pods, server.list_version = dict(restored), "50"

    server = ScriptedServer({"p0": card_pod("p0", 9000), "p1": card_pod("p1", 9001)}, "9001", [
        ScriptedWatch([Gone("too old resource version: 9001 (50)", 410)], meanwhile=meanwhile),
        ScriptedWatch([WatchEvent("MODIFIED", card_pod("p2", 51, node_name=None)),
                       WatchEvent("ADDED", card_pod("p3", 52))], hold=True)])
    cache = base_cache()
    reflector = reflector_over(server, cache, [])
    task = await running(reflector)
    await eventually(lambda: server.watched_from == ["9001", "50"])
    await eventually(lambda: ("ml", "p3") in cache.ledger.snapshot.pods)
    assert_same_ledger(cache, {"p0": card_pod("p0", 40, node_name=None), "p2": card_pod("p2", 51, node_name=None),
                               "p3": card_pod("p3", 52)})
    await stopped(task)


@pytest.mark.parametrize("versions", [("9000", "12"), ("10", "9")])
async def test_the_cache_applies_events_in_the_order_they_arrive(versions: tuple[str, str]) -> None:
    """The later event wins, though its resourceVersion reads as a smaller number (they are not numbers)."""
    first, then = versions
    cache = base_cache()
    running_pod, pending_pod = card_pod("p0", 0), card_pod("p0", 0, node_name=None)
    running_pod["metadata"]["resourceVersion"], pending_pod["metadata"]["resourceVersion"] = first, then
    assert cache.apply("ADDED", running_pod)
    assert cache.apply("MODIFIED", pending_pod)
    assert_same_ledger(cache, {"p0": pending_pod})
    assert cache.apply("DELETED", running_pod)
    assert ("ml", "p0") not in cache.ledger.snapshot.pods
    assert cache.held == {("Node", "", "a100-1"), ("Queue", "", "team-a"), ("PodGroup", "ml", "pg")}


async def test_a_list_failing_part_way_resumes_at_the_failing_page_after_the_wait_asked_for() -> None:
    """Page 2 throttled past kube's retries (429, Retry-After: 20): the reflector waits the longer of its backoff
    and the server's 20 s, then asks for page 2 again, not page 1; the list counts once."""
    truth = {f"p{index}": card_pod(f"p{index}", 10 + index) for index in range(5)}
    server = ScriptedServer(dict(truth), "100", [])
    pages = server.lister
    requested: list[str] = []

    def lister(progress: ListProgress) -> Iterator[ListPage]:
        requested.append(progress.token)
        if len(requested) == 1:
            iterator = pages(progress)
            yield next(iterator)
            progress.token = "2"
            raise api_error("throttled", 429, retry_after=20)
        yield from pages(progress)

    server.lister = lister  # type: ignore[method-assign]
    cache = base_cache()
    reflector = reflector_over(server, cache, sleeps := [])
    task = await running(reflector)
    await eventually(lambda: server.watched_from == ["100"])
    assert requested == ["", "2"]
    assert sleeps == [20.0]
    assert reflector.lists == 1
    assert reflector.listing is None
    assert_same_ledger(cache, truth)
    await stopped(task)


async def test_a_cancelled_reflector_closes_its_watch() -> None:
    held = ScriptedWatch([], hold=True)
    server = ScriptedServer({}, "7", [held])
    task = await running(reflector_over(server, base_cache(), []))
    await eventually(lambda: server.watched_from == ["7"])
    await stopped(task)
    assert held.closed.wait(5)


async def test_a_watch_failing_for_a_minute_is_behind_and_recovers() -> None:
    now = [0.0]
    server = ScriptedServer({"p0": card_pod("p0", 10)}, "100", [
        ScriptedWatch([Unreachable("no Kubernetes API reachable", UNREACHABLE)]),
        ScriptedWatch([Unreachable("no Kubernetes API reachable", UNREACHABLE)]),
        ScriptedWatch([WatchEvent("BOOKMARK", {"kind": "Pod", "apiVersion": "v1",
                                               "metadata": {"resourceVersion": "200"}})], hold=True),
    ])
    reflector = reflector_over(server, base_cache(), [])
    reflector.clock = lambda: now[0]
    reflector.sleep = lambda _: now.__setitem__(0, now[0] + 30) or asyncio.sleep(0)  # each backoff: 30 s
    failing: list[float | None] = []
    working = reflector._working

    def recovered() -> None:
        failing.append(reflector.failing_since)
        working()

    reflector._working = recovered  # type: ignore[method-assign]
    task = await running(reflector)
    await eventually(lambda: len(server.watched_from) == 3 and reflector.failing_since is None)
    assert now[0] == 60.0  # two failed watches, 30 s of backoff each
    assert failing[-1] == 0.0  # the third watch delivered (a bookmark): working again after failing since t=0
    assert not reflector.behind()
    reflector.failing_since = 0.0  # failing since t=0: behind once a minute has passed
    now[0] = 59.0
    assert not reflector.behind()
    now[0] = 60.0
    assert reflector.behind()
    await stopped(task)


async def test_a_relist_deletes_from_a_sink_too() -> None:
    """The extender's session (a cache sink) loses the pods a relist no longer has, as the ledger does."""
    from cardquota.core.scheduling.extender import Extender
    from cardquota.operator.reflector import pod_reflector

    def meanwhile() -> None:
        server.pods, server.list_version = {"p0": card_pod("p0", 10)}, "5000"

    server = ScriptedServer({"p0": card_pod("p0", 10), "p1": card_pod("p1", 11)}, "100",
                            [ScriptedWatch([Gone("too old resource version", 410)], meanwhile=meanwhile)])
    extender = Extender()
    reflector = pod_reflector(ClusterCache(sink=extender), api=None)  # type: ignore[arg-type]
    reflector.lister, reflector.watcher = server.lister, server.watcher
    task = await running(reflector)
    await eventually(lambda: server.watched_from[-1:] == ["5000"])
    assert set(extender.snapshot.pods) == {("ml", "p0")}
    await stopped(task)


@dataclass
class OnePageServer(ScriptedServer):
    """The whole list in one page (a page of 500 realistic pods takes ~30 ms to apply)."""

    def lister(self, progress: ListProgress) -> Iterator[ListPage]:
        self.page_requests += 1
        yield ListPage(list(self.pods.values()), self.list_version, True, True)


async def _sizes_seen_while(work: Callable[[], Any], cache: ClusterCache) -> set[int]:
    """The cache's pod counts another task saw each time it got the event loop while ``work()`` ran."""
    seen: set[int] = set()
    done = False

    async def other() -> None:
        while not done:
            seen.add(len(cache.ledger.snapshot.pods))
            await asyncio.sleep(0)

    ticking = asyncio.create_task(other())
    try:
        await work()
    finally:
        done = True
        await ticking
    return seen


@pytest.mark.parametrize(("slice_seconds", "interleaved"), [(0.0, True), (60.0, False)])
async def test_a_large_page_is_applied_in_slices_between_which_admissions_run(
        monkeypatch: pytest.MonkeyPatch, slice_seconds: float, interleaved: bool) -> None:
    """A page is applied a slice of time at a time (reflector.SLICE_SECONDS): other tasks — the webhooks'
    answers — run between slices and see the cache part-way. With slices longer than the page they run only before
    and after it (the test can fail)."""
    from cardquota.operator import reflector as module
    monkeypatch.setattr(module, "SLICE_SECONDS", slice_seconds)
    truth = {f"p{index}": card_pod(f"p{index}", 10 + index) for index in range(50)}
    cache = base_cache()
    reflector = reflector_over(OnePageServer(dict(truth), "100", []), cache, [])
    seen = await _sizes_seen_while(reflector.relist, cache)
    assert (len(seen - {0, 50}) >= 40) is interleaved, sorted(seen)
    assert_same_ledger(cache, truth)


async def test_watch_events_are_applied_in_slices_between_which_admissions_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from cardquota.operator import reflector as module
    monkeypatch.setattr(module, "SLICE_SECONDS", 0.0)
    events = [WatchEvent("ADDED", card_pod(f"w{index}", 200 + index)) for index in range(50)]
    cache = base_cache()
    reflector = reflector_over(ScriptedServer({}, "100", [ScriptedWatch(list(events))]), cache, [])
    reflector.resource_version = "100"
    seen = await _sizes_seen_while(reflector.watch_once, cache)
    assert len(seen - {0, 50}) >= 40, sorted(seen)
    assert len(cache.ledger.snapshot.pods) == 50


async def test_each_listed_page_is_frozen_out_of_the_collectors_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache grows page by page during a list; each page applied is frozen (gc.freeze), so the collector's
    full passes never walk the whole cluster while admissions wait."""
    import gc
    frozen: list[int] = []
    cache = base_cache()
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(len(cache.ledger.snapshot.pods)))
    truth = {f"p{index}": card_pod(f"p{index}", 10 + index) for index in range(5)}
    reflector = reflector_over(ScriptedServer(dict(truth), "100", []), cache, [])
    await reflector.relist()
    assert frozen == [2, 4, 5]  # after each page of two


@dataclass
class NodesServer:
    """Nodes (cluster-scoped) listed in one page; 404 while ``served`` is False, as for a CRD not installed."""

    nodes: dict[str, dict[str, Any]]
    served: bool = True
    lists: int = 0

    def lister(self, progress: ListProgress) -> Iterator[ListPage]:
        self.lists += 1
        if not self.served:
            raise NotFound("the server could not find the requested resource", 404)
        yield ListPage([{**node, "metadata": {**node["metadata"], "resourceVersion": "5"}}
                        for node in self.nodes.values()], "100", True)

    def watcher(self, version: str) -> ScriptedWatch:
        return ScriptedWatch([], hold=True)


def node_reflector(server: NodesServer, cache: ClusterCache, sleeps: list[float]) -> Reflector:
    async def sleep(delay: float) -> None:
        sleeps.append(delay)
        await asyncio.sleep(0)

    return Reflector(cache, "v1", "Node", lister=server.lister, watcher=server.watcher, sleep=sleep)


async def test_a_relist_deletes_a_cluster_scoped_object_that_went() -> None:
    """Nodes have no namespace: what a relist no longer has is found by the cache's identity of the kind."""
    server = NodesServer({"a": gpu_node("a", "NVIDIA-A100", 8), "b": gpu_node("b", "NVIDIA-H100", 8)})
    cache = ClusterCache()
    reflector = node_reflector(server, cache, [])
    await reflector.relist()
    assert set(cache.ledger.snapshot.nodes) == {"a", "b"}
    del server.nodes["b"]
    await reflector.relist()
    assert set(cache.ledger.snapshot.nodes) == {"a"}


async def test_a_kind_not_served_is_synced_empty_and_listed_again_until_it_is() -> None:
    """Volcano's CRDs not installed yet (404): the kind is held as empty so start-up completes, and it is listed
    again every NOT_SERVED_RETRY_SECONDS; once served, its objects arrive and it is watched."""
    from cardquota.operator.reflector import NOT_SERVED_RETRY_SECONDS
    server = NodesServer({"a": gpu_node("a", "NVIDIA-A100", 8)}, served=False)
    cache = ClusterCache()
    reflector = node_reflector(server, cache, sleeps := [])
    task = asyncio.create_task(reflector.run())
    await asyncio.wait_for(reflector.synced.wait(), 5)
    assert not reflector.served
    assert cache.ledger.snapshot.nodes == {}
    await eventually(lambda: server.lists >= 3)
    assert set(sleeps) == {NOT_SERVED_RETRY_SECONDS}
    assert reflector.failing_since is None  # not served is not failing
    server.served = True
    await eventually(lambda: "a" in cache.ledger.snapshot.nodes)
    assert reflector.served
    await stopped(task)
