"""The controller: publishes node card types and queue card usage as annotations, and why work waits as events.

Watch events only mark queues and nodes as touched (in the ledger); every window (1 s by default) the leader
writes what changed — at most one patch per queue per window however many pod events arrived, never a patch that
changes nothing. On start, and whenever leadership is gained, everything is reconciled once, which corrects
annotations left stale by a previous run.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from cardquota.core.events import CardEvent, pod_event, podgroup_event, queue_event
from cardquota.core.publish import annotation_changes, node_annotations, queue_annotations
from cardquota.kube import KubeError, create_event, node_path, patch_annotations, queue_path
from cardquota.operator.cache import ClusterCache

log = logging.getLogger("cardquota.controller")
DEFAULT_WINDOW = 1.0
EVENT_INTERVAL = 60.0
"""At most one event per object per interval, even when its message keeps changing (usage moves)."""
EVENT_NAMESPACE = "default"
"""Where events about cluster-scoped objects (Queues) go, as Kubernetes does for them."""


@dataclass
class PublisherStats:
    patches: dict[tuple[str, str], int] = field(default_factory=dict)
    patch_errors: int = 0
    events: int = 0


class Publisher:
    def __init__(self, cache: ClusterCache, api: client.ApiClient, *, window: float = DEFAULT_WINDOW,
                 is_leader: Callable[[], bool] = lambda: True, component: str = "cardquota",
                 event_interval: float = EVENT_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self.cache = cache
        self.api = api
        self.window = window
        self.is_leader = is_leader
        self.component = component
        self.stats = PublisherStats()
        self._written: dict[tuple[str, str], dict[str, str | None]] = {}
        self._events: dict[tuple[str, str, str], tuple[str, str, float]] = {}
        self.event_interval = event_interval
        self.clock = clock
        self._deferred: set[str] = set()
        self._was_leader = False

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.window)
            try:
                await self.flush()
            except Exception:  # a bad round must not stop the controller; the next one retries
                log.exception("publishing failed; retrying next window")

    async def flush(self) -> None:
        ledger = self.cache.ledger
        if not self.cache.ready or not self.is_leader():
            self._was_leader = False
            return
        if not self._was_leader:  # just started or just elected: reconcile everything once
            ledger.touched_queues.update(ledger.queue_names())
            ledger.touched_nodes.update(ledger.snapshot.nodes)
            self._events.clear()
            self._was_leader = True
        queues, ledger.touched_queues = ledger.touched_queues, set()
        nodes, ledger.touched_nodes = ledger.touched_nodes, set()
        for name in sorted(queues):
            record = ledger.snapshot.queues.get(name)
            if record is not None:
                await self._publish("Queue", name, queue_path(name), record.queue.meta.annotations,
                                    queue_annotations(ledger.usage(name)))
        for name in sorted(nodes):
            node = ledger.snapshot.nodes.get(name)
            if node is not None:
                await self._publish("Node", name, node_path(name), node.node.meta.annotations,
                                    node_annotations(node.cards))
        await self._emit_events(queues)

    async def _publish(self, kind: str, name: str, path: str, current: Mapping[str, str],
                       desired: Mapping[str, str | None]) -> None:
        key = (kind, name)
        # What we wrote but the watch has not shown yet: counted as done, so it is not written twice. Once the
        # cache shows it, it is forgotten, so a later edit by anyone else is seen and corrected.
        in_flight = {k: v for k, v in self._written.get(key, {}).items() if current.get(k) != v}
        self._written[key] = in_flight
        known = dict(current)
        for annotation, value in in_flight.items():
            if value is None:
                known.pop(annotation, None)
            else:
                known[annotation] = value
        changes = annotation_changes(known, desired)
        if not changes:
            return
        try:
            if await asyncio.to_thread(patch_annotations, self.api, path, changes):
                self._written.setdefault(key, {}).update(changes)
                self.stats.patches[key] = self.stats.patches.get(key, 0) + 1
        except KubeError as error:
            self.stats.patch_errors += 1
            log.warning("annotating %s %s failed: %s", kind, name, error)

    async def _emit_events(self, queues: set[str]) -> None:
        """Events for PodGroups and unbound card pods of the touched queues: once per distinct message, and at
        most one per object per ``event_interval``. A queue whose message was held back is looked at again on
        the next windows, so the message still goes out once the interval has passed."""
        ledger = self.cache.ledger
        snapshot = ledger.snapshot
        candidates = queues | self._deferred
        self._deferred = set()
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
                pod = snapshot.pods.get(key)
                if pod is not None and (event := pod_event(pod, ledger)) is not None:
                    by_queue[queue].append(event)
        now = self.clock()
        for queue, events in by_queue.items():
            for event in events:
                identity = (event.kind, event.namespace, event.name)
                last = self._events.get(identity)
                if last is not None and last[:2] == (event.reason, event.message):
                    continue  # nothing new to say
                if last is not None and now - last[2] < self.event_interval:
                    self._deferred.add(queue)  # something new, but said something too recently: later
                    continue
                self._events[identity] = (event.reason, event.message, now)
                try:
                    await asyncio.to_thread(create_event, self.api, event.namespace or EVENT_NAMESPACE,
                                            kubernetes_event(event, self.component))
                    self.stats.events += 1
                except KubeError as error:
                    log.warning("event for %s %s/%s failed: %s", event.kind, event.namespace, event.name, error)


EVENT_API_VERSIONS = {"PodGroup": "scheduling.volcano.sh/v1beta1", "Queue": "scheduling.volcano.sh/v1beta1",
                      "CustomResourceDefinition": "apiextensions.k8s.io/v1"}


def kubernetes_event(event: CardEvent, component: str, now: datetime.datetime | None = None) -> dict[str, Any]:
    moment = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    api_version = EVENT_API_VERSIONS.get(event.kind, "v1")
    involved = {"apiVersion": api_version, "kind": event.kind, "name": event.name}
    if event.namespace:
        involved["namespace"] = event.namespace
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{event.name}.{uuid.uuid4().hex[:16]}", "namespace": event.namespace or EVENT_NAMESPACE},
        "involvedObject": involved,
        "reason": event.reason, "message": event.message, "type": event.type,
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": moment, "lastTimestamp": moment, "count": 1,
    }
