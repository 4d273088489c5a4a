"""List-then-watch of the high-cardinality kinds (pods, PodGroups, nodes, ReplicaSets) into the cluster cache, at
O(event) cost.

What Kubernetes' client-go reflector does, in one asyncio task per kind: a paginated list (``kube.LIST_PAGE_SIZE``
objects a page, each page applied to the cache as it arrives, so the cluster is never held whole), then a watch
from the list's resourceVersion with bookmarks; when a watch request ends (the API server closes it after
``timeoutSeconds``) or its stream breaks, watch again from the last resourceVersion seen, with backoff on failures
(the longer of it and a ``Retry-After`` the API server sent); when the API server says that resourceVersion is too
old (410 Gone), list again: the list replaces what the cache holds of the kind whole (what it no longer has is
deleted). A list page that keeps failing (throttled past its retries) is asked for again after the backoff, not the
list from its first page; a continue token that expired mid-list falls back to one unpaginated list
(``kube.list_pages``), and the watch starts from that list's resourceVersion. A kind the API server does not
serve (404: Volcano's CRDs not installed yet) lists as empty and is listed again every
:data:`NOT_SERVED_RETRY_SECONDS`; so does an optional kind this process may not list (403: PriorityClasses under an
install whose RBAC predates them). DRA claims are read through the ``resource.k8s.io`` version the
API server serves, discovered before each full list (:class:`DraVersion`).

Kopf handles a kind by listing it again after our own start-up list and running one worker task per object (~1 ms
of CPU per event; 16k tasks at 50k pods): for the kinds with one object per pod, per job or per node that costs more
than the rules do (bench/scale.py: ~19 s of CPU and 300 ms event-loop stalls after start-up at 100k pods with
12,500 PodGroups and 5,000 nodes), so they come here; Kopf keeps the low-cardinality kinds (queues, Deployments,
StatefulSets).

The HTTP reads run on a daemon thread (kube.WatchStream, blocking); events are handed to the event loop, where the
cache changes (the admission policies read it there, never half-way through a change).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client
from prometheus_client import Gauge

from cardquota.core.errors import InputError
from cardquota.kube import (
    CACHED_RESOURCES,
    DRA_GROUP,
    DRA_VERSIONS,
    PRIORITY_CLASS_RESOURCES,
    Forbidden,
    Gone,
    KubeError,
    ListPage,
    ListProgress,
    NotFound,
    WatchEvent,
    WatchStream,
    list_pages,
    retry_wait,
    served_dra_version,
)
from cardquota.operator.slicing import SLICE, Slicer
from cardquota.runtime.cache import DELETED, ClusterCache, Identity
from cardquota.runtime.metrics import EVENTS_PROCESSED, REGISTRY

log = logging.getLogger(__name__)

BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
"""Waits after consecutive failed list or watch requests (the last repeats)."""
SLICE_SECONDS = SLICE
"""The reflector applies events for at most about this long before it lets the event loop run other tasks
(admissions) again: a page of 100 realistic pods takes ~6 ms to apply, a burst of watch events as long as it lasts."""
GONE_CHECKS_PER_SLICE = 10_000
"""Cached identities a relist checks against the list between two turns of the event loop (~1.5 ms)."""
NOT_SERVED_RETRY_SECONDS = 30.0
"""How often a kind the API server does not serve (404) is listed again."""
BEHIND_AFTER_SECONDS = 60.0
"""A list or watch failing this long means the cache may be behind the cluster: who reads it reports degraded."""
WATCH_FAILING = Gauge("cardquota_watch_failing", "1 while the list or watch of a kind fails (the cache may lag)",
                      ["kind"], registry=REGISTRY)


def backoff(failures: int, error: BaseException) -> float:
    """The wait after ``failures`` failures in a row so far, the last ``error``: the next step of
    :data:`BACKOFF_SECONDS` (its last once past the end), or the ``Retry-After`` the API server sent when longer
    (``kube.retry_wait``)."""
    return retry_wait(BACKOFF_SECONDS[min(failures, len(BACKOFF_SECONDS) - 1)], error)


class Watch(Protocol):
    """A started watch (kube.WatchStream): its events, read on a thread, and close() from any thread."""

    def events(self) -> Iterator[WatchEvent]: ...

    def close(self) -> None: ...


Lister = Callable[[ListProgress], Iterator[ListPage]]
"""Pages through the kind from where a :class:`ListProgress` stands (``kube.list_pages``)."""
Watcher = Callable[[str], Watch]
"""Starts a watch from a resourceVersion."""
Resource = tuple[str, str, str, str]
"""(API path prefix, plural, kind, apiVersion), as in ``kube.CACHED_RESOURCES``."""


@dataclass
class Listing:
    """A relist under way: where its pages stand, and the identities they listed so far."""

    progress: ListProgress = field(default_factory=ListProgress)
    listed: set[Identity] = field(default_factory=set)


@dataclass
class Reflector:
    """Keeps one kind of the cache current: ``lister`` pages through the kind, ``watcher(resource_version)`` starts a
    watch. What a relist no longer has is deleted: the cache's objects of the kind, by their identity
    (:meth:`ClusterCache.identity`, :attr:`ClusterCache.held`)."""

    cache: ClusterCache
    api_version: str
    kind: str
    lister: Lister
    watcher: Watcher
    sleep: Callable[[float], Any] = asyncio.sleep
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the first full list is in the cache."""
    lists: int = 0
    """Full lists taken (the first, then one after each 410 Gone)."""
    resource_version: str = ""
    """The last resourceVersion seen: where the next watch starts."""
    clock: Callable[[], float] = time.monotonic
    failing_since: float | None = None
    """Since when the list or watch has been failing (None while it works)."""
    served: bool = True
    """False when the last list found the kind not served (404), or, for an :attr:`optional` kind, not allowed."""
    optional: bool = False
    """A 403 is read as a 404: the kind is held empty and listed again every :data:`NOT_SERVED_RETRY_SECONDS`
    (the RBAC may be granted later) rather than failing and lagging."""
    listing: Listing | None = None
    """A list under way: where it stands, resumed by the next :meth:`relist` after a failure."""
    list_started: float | None = None
    """The clock when the list under way started (None between lists)."""
    listed_from: float | None = None
    """The clock when the last complete list started: the cache holds the kind at least as new as then."""
    relist_wanted: bool = False
    """Someone asked for a list anew (:meth:`listed_since`): the watch stops and the kind is listed again."""
    _stream: Watch | None = None

    def behind(self) -> bool:
        """Failing for :data:`BEHIND_AFTER_SECONDS`: what the cache holds of this kind may be that old."""
        return self.failing_since is not None and self.clock() - self.failing_since >= BEHIND_AFTER_SECONDS

    def listed_since(self, moment: float) -> bool:
        """Whether what the cache holds of the kind is at least as new as the API server was at ``moment`` (this
        reflector's clock): a complete list started at or after it. If not, one is asked for (the watch stops and
        the kind is listed anew), and a later call says when it is done. A watch can lag any time behind the API
        server; a list (without a resourceVersion) is read from it as it is now — the card-quota gate's new leader
        waits for one before it judges, so it counts every lift its predecessor wrote."""
        if self.listed_from is not None and self.listed_from >= moment:
            return True
        if self.list_started is None or self.list_started < moment:
            self.relist_wanted = True
            if self._stream is not None:
                self._stream.close()
        return False

    def _working(self) -> None:
        if self.failing_since is not None:
            log.info("%s list and watch work again", self.kind)
        self.failing_since = None
        WATCH_FAILING.labels(self.kind).set(0)

    async def run(self) -> None:
        failures = 0
        listed = False
        while True:
            try:
                if self.relist_wanted and self.listing is None:
                    listed = False
                if not listed:
                    self.relist_wanted = False
                    self.resource_version = await self.relist()
                    self.synced.set()
                    self._working()
                    if not self.served:
                        await self.sleep(NOT_SERVED_RETRY_SECONDS)
                        continue
                    listed = True
                await self.watch_once()
                failures = 0
                self._working()
            except KubeError as error:
                if isinstance(error, Gone | NotFound) or (self.optional and isinstance(error, Forbidden)):
                    log.info("%s watch from resourceVersion %s: %s: listing again", self.kind,
                             self.resource_version, error)
                    listed = False
                    self.listing = None
                    continue
                delay = backoff(failures, error)
                failures += 1
                if self.failing_since is None:
                    self.failing_since = self.clock()
                WATCH_FAILING.labels(self.kind).set(1)
                log.warning("%s %s failed (%s): again in %.1f s", self.kind, "watch" if listed else "list", error,
                            delay)
                await self.sleep(delay)

    async def relist(self) -> str:
        """A full paginated list into the cache, replacing what it holds of the kind: each listed object as listed
        (whatever resourceVersion the cache held), and what the list does not have deleted. A list that failed
        part-way (:attr:`listing`) resumes at the page that failed; a page starting the list anew
        (:attr:`ListPage.restart`: an expired continue token's unpaginated fallback) makes what earlier pages listed
        count no more. Returns the list's resourceVersion ("" when the kind is not served: then nothing of it is
        held)."""
        if self.listing is None:
            self.listing = Listing()
            self.list_started = self.clock()
        listing = self.listing
        pages = self.lister(listing.progress)
        listed = listing.listed
        resource_version = ""
        not_served: KubeError | None = None

        def next_page() -> ListPage | None:
            """The next page; a kind the API server does not serve (or, :attr:`optional`, forbids) is an empty
            list."""
            nonlocal not_served
            try:
                return next(pages, None)
            except (NotFound, Forbidden) as error:
                if isinstance(error, Forbidden) and not self.optional:
                    raise
                not_served = error
                return None

        slicer = Slicer(SLICE_SECONDS)
        while (page := await asyncio.to_thread(next_page)) is not None:
            slicer.restart()
            if page.restart:
                listed.clear()
            for manifest in page.items:
                self.cache.apply("ADDED", manifest)
                EVENTS_PROCESSED.labels(kind=self.kind).inc()
                if (identity := self._identity(manifest)) is not None:
                    listed.add(identity)
                await slicer.tick()
            resource_version = page.resource_version
            page = None  # (the page's manifests go now, by reference counting)
            # What the cache keeps of the page holds no reference cycles: out of the cyclic collector's way, so
            # that its full passes do not walk a cache growing to the whole cluster during the list (at 100k pods
            # they took up to ~200 ms each, stalling admissions). The cache is collected and frozen again once
            # complete (ClusterCache.mark_complete).
            gc.freeze()
        held = self._identity({"apiVersion": self.api_version, "kind": self.kind,
                               "metadata": {"name": "-", "namespace": "-"}})
        gone: list[Identity] = []
        if held is not None:
            cached = list(self.cache.held)  # (every kind's: 100k+ entries, looked at a slice of time at a time)
            for start in range(0, len(cached), GONE_CHECKS_PER_SLICE):
                gone.extend(identity for identity in cached[start:start + GONE_CHECKS_PER_SLICE]
                            if identity[0] == held[0] and identity not in listed)
                await asyncio.sleep(0)
        for _, namespace, name in gone:
            self.cache.apply(DELETED, {"apiVersion": self.api_version, "kind": self.kind,
                                       "metadata": {"namespace": namespace, "name": name}})
        if not_served is not None and self.served:
            log.warning("%s %s (%s): none held; listed again every %.0f s", self.kind,
                        "may not be listed" if isinstance(not_served, Forbidden) else "is not served by the API server",
                        not_served, NOT_SERVED_RETRY_SECONDS)
        self.served = not_served is None
        self.lists += 1
        self.listing = None
        self.listed_from, self.list_started = self.list_started, None
        log.info("%s listed: %d (%d deleted meanwhile), resourceVersion %s", self.kind, len(listed), len(gone),
                 resource_version)
        return resource_version

    def _identity(self, manifest: Mapping[str, Any]) -> Identity | None:
        try:
            return self.cache.identity(manifest)
        except InputError:
            return None

    async def watch_once(self) -> None:
        """One watch request from :attr:`resource_version`, its events applied until the stream ends; raises
        KubeError when it fails (410: the resourceVersion is too old)."""
        stream = self._stream = self.watcher(self.resource_version)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[WatchEvent | BaseException | None] = asyncio.Queue()

        def hand_over(item: WatchEvent | BaseException | None) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop closed: the operator is stopping
                stream.close()

        def read() -> None:
            try:
                for event in stream.events():
                    hand_over(event)
            except BaseException as error:  # (handed to the loop, raised there)
                hand_over(error)
            else:
                hand_over(None)

        threading.Thread(target=read, name=f"cardquota-watch-{self.kind.lower()}", daemon=True).start()
        applied = 0
        slicer = Slicer(SLICE_SECONDS)
        slicer.restart()
        try:
            while (item := await queue.get()) is not None and not self.relist_wanted:
                if isinstance(item, BaseException):
                    raise item
                if applied == 0:
                    self._working()
                if item.type != "BOOKMARK":
                    self.cache.apply(item.type, item.object)
                    EVENTS_PROCESSED.labels(kind=self.kind).inc()
                if item.resource_version:
                    self.resource_version = item.resource_version
                applied += 1
                await slicer.tick()
        finally:
            self._stream = None
            stream.close()


def listed_anew(reflectors: Sequence[Reflector], kinds: Collection[str], moment: float) -> bool:
    """Whether every reflector of ``kinds`` (at least one) has listed its kind anew since ``moment``
    (:meth:`Reflector.listed_since`; each one not yet is asked to)."""
    answers = [reflector.listed_since(moment) for reflector in reflectors if reflector.kind in kinds]
    return bool(answers) and all(answers)


def resource_reflector(cache: ClusterCache, api: client.ApiClient, resource: Resource) -> Reflector:
    """A reflector of one kind of ``kube.CACHED_RESOURCES`` (or any (path prefix, plural, kind, apiVersion)) in
    every namespace (:attr:`Reflector.optional` for PriorityClasses: ``kube.PRIORITY_CLASS_RESOURCES``)."""
    prefix, plural, kind, api_version = resource
    path = f"{prefix}/{plural}"
    return Reflector(cache, api_version, kind,
                     lister=functools.partial(list_pages, api, path, api_version, kind),
                     watcher=functools.partial(_watch, api, path, api_version, kind),
                     optional=resource in PRIORITY_CLASS_RESOURCES)


def pod_reflector(cache: ClusterCache, api: client.ApiClient) -> Reflector:
    """Pods of every namespace."""
    return resource_reflector(cache, api, next(resource for resource in CACHED_RESOURCES if resource[2] == "Pod"))


CLAIM_KINDS = (("resourceclaims", "ResourceClaim"), ("resourceclaimtemplates", "ResourceClaimTemplate"))
DRA_UNREADABLE = Gauge("cardquota_dra_claims_unreadable",
                       "1 while no resource.k8s.io version the extender reads is served: DRA quotas are not enforced",
                       ["kind"], registry=REGISTRY)


@dataclass
class DraVersion:
    """The ``resource.k8s.io`` version one claim reflector reads through: discovered again before every full list
    (at start, after a 404, after a 410), as a cluster upgrade can stop serving the version in use."""

    api: client.ApiClient
    kind: str
    version: str | None = None

    def discover(self) -> str | None:
        found = served_dra_version(self.api)
        if found != self.version and found is not None:
            log.info("%s read through %s/%s", self.kind, DRA_GROUP, found)
        self.version = found
        DRA_UNREADABLE.labels(self.kind).set(0 if found else 1)
        return found

    def pages(self, plural: str, progress: ListProgress) -> Iterator[ListPage]:
        """The kind's list pages through the version discovered now (from the first page again when a list under
        way was through another version); NotFound (as for a kind not served) when no version of
        :data:`DRA_VERSIONS` is."""
        before = self.version
        version = self.discover()
        if version != before:
            progress.token = ""
        if version is None:
            raise NotFound(f"no version of {DRA_GROUP} ({', '.join(DRA_VERSIONS)}) is served: {self.kind}s cannot "
                           "be read, DRA quotas (spec.dra of queues) are not enforced", 404)
        api_version = f"{DRA_GROUP}/{version}"
        yield from list_pages(self.api, f"/apis/{api_version}/{plural}", api_version, self.kind, progress)

    def watch(self, plural: str, resource_version: str) -> WatchStream:
        api_version = f"{DRA_GROUP}/{self.version or DRA_VERSIONS[0]}"
        return _watch(self.api, f"/apis/{api_version}/{plural}", api_version, self.kind, resource_version)


def claim_reflectors(cache: ClusterCache, api: client.ApiClient) -> list[Reflector]:
    """DRA ResourceClaims and ResourceClaimTemplates of every namespace (for a sink that reads them), through the
    ``resource.k8s.io`` version the API server serves (:func:`kube.served_dra_version`)."""
    reflectors = []
    for plural, kind in CLAIM_KINDS:
        dra = DraVersion(api, kind)
        reflectors.append(Reflector(cache, f"{DRA_GROUP}/{DRA_VERSIONS[0]}", kind,
                                    lister=functools.partial(dra.pages, plural),
                                    watcher=functools.partial(dra.watch, plural)))
    return reflectors


def _watch(api: client.ApiClient, path: str, api_version: str, kind: str, version: str) -> WatchStream:
    return WatchStream(api, path, api_version, kind, version)
