"""The controller: publishes node card types and queue card usage as annotations, and why work waits as events.

Watch events only record what they touched (the ledger's :class:`~cardquota.core.changes.ChangeLog`); every window
(1 s by default) the leader drains that log and writes what changed — at most one patch per queue per window however
many pod events arrived, never a patch that changes nothing. A window's work is proportional to what changed: queue
annotations for the queues touched, node annotations for the nodes touched, and events for the PodGroups and pods
touched plus, for a queue whose event inputs (:class:`~cardquota.core.events.QueueInputs`) changed, its waiting
PodGroups and pods; a window in which nothing changed costs O(1). The publisher shares the event loop with the
admission webhooks, so that work is done in slices of at most ``slicing.SLICE`` seconds with the loop given back
between them. On start, and whenever leadership is gained, everything is reconciled once (in slices too), which
corrects annotations left stale by a previous run.
"""

from __future__ import annotations

import asyncio
import datetime
import heapq
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from kubernetes import client

from cardquota.core.changes import Changes
from cardquota.core.events import (
    CardEvent,
    QueueInputs,
    gate_event,
    pod_event,
    podgroup_event,
    queue_event,
    queue_inputs,
    waiting_pod,
)
from cardquota.core.keys import CARD_ALLOCATED
from cardquota.core.objects import ObjectKey
from cardquota.core.publish import (
    ANNOTATIONS_LIMIT,
    QueuePublication,
    annotation_changes,
    annotations_too_long,
    bounded_queue_annotations,
    node_annotations,
    queue_budget,
)
from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.kube import (
    Invalid,
    KubeError,
    create_event,
    node_path,
    patch_annotations,
    queue_path,
    read_object,
)
from cardquota.operator.slicing import SLICE, Slicer, every
from cardquota.runtime.cache import ClusterCache

log = logging.getLogger("cardquota.controller")
DEFAULT_WINDOW = 1.0
EVENT_INTERVAL = 60.0
"""At most one event per object per interval, even when its message keeps changing (usage moves)."""
EVENTS_PER_SECOND = 10.0
EVENTS_BURST = 50
"""Events sent in all: at most ``EVENTS_BURST`` at once, then ``EVENTS_PER_SECOND`` (a token bucket, as client-go
rate-limits what a controller sends). Beyond, an event waits for its turn at that rate: a storm of pods
that cannot move on (thousands a second) costs the API server and the admission loop a bounded rate of writes, and
each waiting event is looked at again about once, in turn."""
EVENT_NAMESPACE = "default"
"""Where events about cluster-scoped objects (Queues) go, as Kubernetes does for them."""
EventKey = tuple[str, str, str]
"""(kind, namespace, name) of the object an event is about."""


@dataclass
class PublisherStats:
    """What the publisher did, for /metrics and tests: patches per object, failed patches, events sent, and the work
    behind them (objects whose event was computed, times a window's work gave the event loop back)."""

    patches: dict[tuple[str, str], int] = field(default_factory=dict)
    patch_errors: int = 0
    events: int = 0
    events_deferred: int = 0
    """Events that waited for the budget (:data:`EVENTS_PER_SECOND`)."""
    examined: int = 0
    yields: int = 0
    refused_too_large: int = 0
    """Queue patches the API server refused as too large (``metadata.annotations: Too long``), each then replaced
    by one that fits."""
    summarised: int = 0
    """Queue usage publications (one per window in which the queue changed) summarised as ``(N more)``, or removed,
    to fit beside the Queue's other annotations."""


class Publisher:
    """Writes, once a window and only as leader, the annotations and events that follow from what the watch events
    of that window changed (see the module docstring)."""

    def __init__(self, cache: ClusterCache, api: client.ApiClient, *, window: float = DEFAULT_WINDOW,
                 is_leader: Callable[[], bool] = lambda: True, component: str = "cardquota",
                 event_interval: float = EVENT_INTERVAL, events_per_second: float = EVENTS_PER_SECOND,
                 events_burst: int = EVENTS_BURST, clock: Callable[[], float] = time.monotonic,
                 slice_budget: float = SLICE, slice_clock: Callable[[], float] = time.perf_counter,
                 capacity_card: CapacityCardConfig | None = None,
                 gate_sentence: Callable[[EventKey], str | None] = lambda _: None) -> None:
        self.cache = cache
        self.gate_sentence = gate_sentence
        """Why an object waits at the card-quota gate (the gate keeper's last round), None when it does not."""
        self.capacity_card = capacity_card
        """The capacity-card plugin's arguments the events apply (:func:`plugin_arguments`); None: unknown."""
        self.api = api
        self.window = window
        self.is_leader = is_leader
        self.component = component
        self.stats = PublisherStats()
        self._written: dict[tuple[str, str], dict[str, str | None]] = {}
        self._events: dict[EventKey, tuple[str, str, float]] = {}
        """Per object, the last event sent: reason, message and when."""
        self.event_interval = event_interval
        self.clock = clock
        self.events_per_second = events_per_second
        self.events_burst = events_burst
        self._event_tokens = float(events_burst)
        self._tokens_at = clock()
        self._deferred_until = self._tokens_at
        """When the last event waiting for the budget is due to be looked at again (they are spread at its rate)."""
        self._slicer = Slicer(slice_budget, slice_clock)
        self._inputs: dict[str, QueueInputs] = {}
        """Per queue, the inputs every one of its waiting PodGroups' and pods' events was last computed with (a queue
        is left out once one was computed with others: its next change then recomputes them all)."""
        self._inputs_now: dict[str, tuple[int, QueueInputs]] = {}
        """Per queue, its inputs at a version of the ledger's change log (computed once per version)."""
        self._held: dict[EventKey, float] = {}
        """Objects with something new to say, said something too recently: when that was (in :attr:`_events`)."""
        self._held_order: list[tuple[float, EventKey]] = []
        """:attr:`_held` as a heap, oldest first (entries whose object was looked at again since are skipped)."""
        self._was_leader = False
        self._said_summarised: dict[str, tuple[str, float]] = {}
        """Per queue whose usage is published summarised, the reason last said about it and when."""

    async def run(self) -> None:
        await every(self.window, self.flush, log, "publishing failed; retrying next window")

    async def flush(self) -> None:
        ledger = self.cache.ledger
        if not self.cache.ready or not self.is_leader():
            ledger.changes.drain()  # gaining leadership reconciles everything: what changed meanwhile is not kept
            self._was_leader = False
            return
        self._slicer.restart()
        said: dict[EventKey, tuple[str, str, float]] = {}
        if not self._was_leader:  # just started or just elected: reconcile everything once
            ledger.changes.drain()
            work = Changes(queues=set(ledger.queue_names()), nodes=set(ledger.snapshot.nodes))
            said, self._events = self._events, {}  # every event is sent again; the old record let go in slices
            self._inputs.clear()
            self._held.clear()
            self._held_order.clear()
            self._said_summarised.clear()
            self._was_leader = True
        else:
            work = ledger.changes.drain()
        self._add_held_due(work)
        try:
            await self._let_go(said)
            await self._publish_all(work)
        except BaseException:
            # Looked at again next window (what was done already is found unchanged and not written twice).
            ledger.changes.record(work)
            for name in work.queues:
                self._inputs.pop(name, None)
            raise

    async def _publish_all(self, work: Changes) -> None:
        ledger = self.cache.ledger
        for name in sorted(work.queues):
            await self._tick()
            record = ledger.snapshot.queues.get(name)
            if record is not None:
                await self._publish_queue(name, record.queue.meta.annotations)
            else:
                self._said_summarised.pop(name, None)
        for name in work.nodes:  # not sorted: all 5,000 of them on a reconcile
            await self._tick()
            node = ledger.snapshot.nodes.get(name)
            if node is not None and await self._publish("Node", name, node_path(name), node.node.meta.annotations,
                                                        node_annotations(node.cards)):
                self.stats.patch_errors += 1  # (card types are as long as discovery makes them: others' annotations)
                log.warning("the API server refused Node %s's card types as too large", name)
        await self._emit_events(work)

    async def _let_go(self, said: dict[EventKey, tuple[str, str, float]]) -> None:
        """Empty a large dict in slices (freeing 25,000 entries at once takes milliseconds)."""
        while said:
            await self._tick()
            for _ in range(min(len(said), 512)):
                said.popitem()

    async def _tick(self) -> None:
        yields = self._slicer.yields
        await self._slicer.tick()
        self.stats.yields += self._slicer.yields - yields

    async def _off_loop(self, call: Callable[..., Any], *args: Any) -> Any:
        """A blocking API call on a thread; the loop ran other work meanwhile, so a new slice starts after it."""
        try:
            return await asyncio.to_thread(call, *args)
        finally:
            self._slicer.restart()

    def _queue_publication(self, name: str, current: Mapping[str, str]) -> QueuePublication:
        ledger = self.cache.ledger
        return bounded_queue_annotations(ledger.usage(name), queue_budget(current), ledger.snapshot.catalog().entries)

    async def _publish_queue(self, name: str, current: Mapping[str, str]) -> None:
        """A Queue's usage, sized to fit beside its other annotations as the cache shows them. When the API server
        still refuses it as too large (others' annotations grew since), the Queue is read again and what fits beside
        what it now carries is sent instead (or, refused again, our annotations are removed): never left stale."""
        path = queue_path(name)
        publication = self._queue_publication(name, current)
        if not await self._publish("Queue", name, path, current, publication.annotations):
            await self._summarised(name, publication, refused=False)
            return
        self.stats.refused_too_large += 1
        log.warning("the API server refused Queue %s's card usage as too large; publishing what fits", name)
        try:
            fresh = await self._off_loop(read_object, self.api, path)
        except KubeError as error:
            log.warning("reading Queue %s failed: %s", name, error)
            fresh = None
        if fresh is None:
            self.stats.patch_errors += 1
            return
        annotations = (fresh.get("metadata") or {}).get("annotations") or {}
        self._written.pop(("Queue", name), None)
        publication = self._queue_publication(name, annotations)
        if await self._publish("Queue", name, path, annotations, publication.annotations):
            publication = QueuePublication(dict.fromkeys(publication.annotations), publication.grouped, removed=True)
            if await self._publish("Queue", name, path, annotations, publication.annotations):
                self.stats.patch_errors += 1
                return
        await self._summarised(name, publication, refused=True)

    async def _summarised(self, name: str, publication: QueuePublication, *, refused: bool) -> None:
        """Count a publication that is not exact, and say so on the Queue: an event when it becomes summarised (or
        changes how), at most one per ``event_interval``."""
        if publication.exact and not refused:
            self._said_summarised.pop(name, None)
            return
        self.stats.summarised += 0 if publication.exact else 1
        if publication.removed:
            reason = "CardUsageRemoved"
            what = "are removed: not even their smallest summary fits beside the Queue's other annotations"
        else:
            reason = "CardUsageSummarised"
            entries = f"{publication.grouped} entr{'y' if publication.grouped == 1 else 'ies'}"
            what = (f"are summarised to fit beside the Queue's other annotations: {entries} (names no node offers "
                    "first, then the longest) added up as \"(N more)\"")
        if refused:
            reason = "CardUsageTooLarge"
            what = f"were refused by the API server as too large, and {what}" if not publication.exact else (
                "were refused by the API server as too large; the Queue was read again and they are published in full")
        now = self.clock()
        last = self._said_summarised.get(name)
        if last is not None and (last[0] == reason or now - last[1] < self.event_interval):
            return
        if not self._event_budget(now):
            return  # said when it is next published this way, budget allowing
        self._said_summarised[name] = (reason, now)
        message = (f"{CARD_ALLOCATED}, .inqueue, .pending and .usage {what} (an object's annotations may take "
                   f"{ANNOTATIONS_LIMIT // 1024} KiB in all); kubectl cardquota usage shows the full figures")
        record = self.cache.ledger.snapshot.queues.get(name)
        event = (CardEvent.about(record.queue.meta, reason, message) if record is not None
                 else CardEvent("Queue", "", name, reason, message))
        try:
            await self._off_loop(create_event, self.api, EVENT_NAMESPACE, kubernetes_event(event, self.component))
            self.stats.events += 1
        except KubeError as error:
            log.warning("event for Queue %s failed: %s", name, error)

    async def _publish(self, kind: str, name: str, path: str, current: Mapping[str, str],
                       desired: Mapping[str, str | None]) -> bool:
        """Write what differs from ``desired``; True when the API server refused it as too large (a 422 on
        ``metadata.annotations``), which the caller turns into a smaller patch (other failures are logged and
        counted: the next change or reconcile writes again)."""
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
            return False
        try:
            if await self._off_loop(patch_annotations, self.api, path, changes):
                self._written.setdefault(key, {}).update(changes)
                self.stats.patches[key] = self.stats.patches.get(key, 0) + 1
        except KubeError as error:
            if isinstance(error, Invalid) and annotations_too_long(str(error)):
                return True
            self.stats.patch_errors += 1
            log.warning("annotating %s %s failed: %s", kind, name, error)
        return False

    async def _emit_events(self, work: Changes) -> None:
        """Events for the touched queues, PodGroups and pods, for the waiting PodGroups and pods of each touched
        queue whose :class:`QueueInputs` changed, and for the objects held back whose interval has now passed: once
        per distinct message, and at most one per object per ``event_interval``."""
        ledger = self.cache.ledger
        snapshot = ledger.snapshot
        now = self.clock()
        groups: list[Iterable[ObjectKey]] = [work.podgroups]
        pods: list[Iterable[ObjectKey]] = [work.pods]
        for queue in sorted(work.queues):
            await self._tick()
            record = snapshot.queues.get(queue)
            if record is not None:
                self.stats.examined += 1
                await self._consider(("Queue", "", queue), queue_event(record), now)
            inputs = self._current_inputs(queue)
            if self._inputs.get(queue) != inputs:  # every waiting object's event may have changed
                self._inputs[queue] = inputs
                groups.append(ledger.waiting_podgroups(queue))
                pods.append(ledger.pending_pods(queue))
        seen: set[ObjectKey] = set()
        for key in chain.from_iterable(groups):
            if key in seen:
                continue
            seen.add(key)
            await self._tick()
            identity = ("PodGroup", key[0], key[1])
            group = snapshot.podgroups.get(key)
            if group is None:
                self._forget(identity)
                continue
            self.stats.examined += 1
            self._computing_with(group.queue)
            event = podgroup_event(group, ledger, self.capacity_card)
            if event is None and (sentence := self.gate_sentence(identity)) is not None:
                event = gate_event(group.meta, sentence)  # (enqueued, its gang waiting at the gate)
            await self._consider(identity, event, now)
        seen.clear()
        for key in chain.from_iterable(pods):
            if key in seen:
                continue
            seen.add(key)
            await self._tick()
            identity = ("Pod", key[0], key[1])
            pod = waiting_pod(ledger, key)
            if pod is None:
                if key in snapshot.pods:
                    self._held.pop(identity, None)  # bound or done: nothing to say about it any more
                else:
                    self._forget(identity)
                continue
            self.stats.examined += 1
            self._computing_with(ledger.queue_of(pod))
            sentence = self.gate_sentence(identity) if pod.gate is not None else None
            await self._consider(identity, gate_event(pod.meta, sentence) if sentence is not None
                                 else pod_event(pod, ledger), now)

    def _current_inputs(self, queue: str) -> QueueInputs:
        version = self.cache.ledger.changes.versions.get(queue, 0)
        known = self._inputs_now.get(queue)
        if known is None or known[0] != version:
            known = self._inputs_now[queue] = (version, queue_inputs(self.cache.ledger, queue))
        return known[1]

    def _computing_with(self, queue: str) -> None:
        """An event of ``queue`` is computed now: if its inputs are no longer those :attr:`_inputs` holds (they
        changed since the window started, perhaps to change back before the next), the queue is left out of it.
        O(1) unless the queue changed since the last look."""
        stored = self._inputs.get(queue)
        if stored is not None:
            current = self._current_inputs(queue)
            if current is not stored and current != stored:
                del self._inputs[queue]

    async def _consider(self, identity: EventKey, event: CardEvent | None, now: float) -> None:
        """Send ``event`` (the object's event now, None when it has nothing to say) unless it says nothing new, or
        the object said something within ``event_interval``: then it is held, and looked at again once the interval
        has passed."""
        was_held = self._held.pop(identity, None)
        if event is None:
            return
        last = self._events.get(identity)
        if last is not None and last[:2] == (event.reason, event.message):
            return  # nothing new to say
        if last is not None and now - last[2] < self.event_interval:
            self._held[identity] = last[2]  # something new, but said something too recently: later
            if was_held != last[2]:  # else its entry is in the heap already
                heapq.heappush(self._held_order, (last[2], identity))
            return
        if not self._event_budget(now):  # later, in turn: looked at again when the budget has room for it
            self.stats.events_deferred += 1
            self._deferred_until = max(self._deferred_until, now) + 1.0 / self.events_per_second
            due = self._deferred_until - self.event_interval  # (held objects are due an interval after this)
            self._held[identity] = due
            heapq.heappush(self._held_order, (due, identity))
            return
        self._events[identity] = (event.reason, event.message, now)
        try:
            await self._off_loop(create_event, self.api, event.namespace or EVENT_NAMESPACE,
                                 kubernetes_event(event, self.component))
            self.stats.events += 1
        except KubeError as error:
            log.warning("event for %s %s/%s failed: %s", event.kind, event.namespace, event.name, error)
        except BaseException:  # not sent, and the window's work is done again: so is this event
            if last is None:
                del self._events[identity]
            else:
                self._events[identity] = last
            raise

    def _event_budget(self, now: float) -> bool:
        """Take one event from the budget (:data:`EVENTS_PER_SECOND`, :data:`EVENTS_BURST`); False when it is spent."""
        self._event_tokens = min(float(self.events_burst),
                                 self._event_tokens + (now - self._tokens_at) * self.events_per_second)
        self._tokens_at = now
        if self._event_tokens < 1.0:
            return False
        self._event_tokens -= 1.0
        return True

    def _add_held_due(self, work: Changes) -> None:
        """Add to ``work`` the held objects whose interval has passed (O(1) when there is none)."""
        now = self.clock()
        order = self._held_order
        while order and now - order[0][0] >= self.event_interval:
            said, identity = heapq.heappop(order)
            if self._held.get(identity) != said:
                continue  # looked at again since it was held
            del self._held[identity]
            kind, namespace, name = identity
            if kind == "Queue":
                work.queues.add(name)
            elif kind == "PodGroup":
                work.podgroups.add((namespace, name))
            else:
                work.pods.add((namespace, name))

    def _forget(self, identity: EventKey) -> None:
        """An object deleted: what it said is forgotten (a new object of that name starts afresh)."""
        self._held.pop(identity, None)
        self._events.pop(identity, None)


EVENT_API_VERSIONS = {"PodGroup": "scheduling.volcano.sh/v1beta1", "Queue": "scheduling.volcano.sh/v1beta1",
                      "CustomResourceDefinition": "apiextensions.k8s.io/v1"}


def kubernetes_event(event: CardEvent, component: str, now: datetime.datetime | None = None) -> dict[str, Any]:
    """The core/v1 Event for ``event``. Its ``involvedObject`` names the object as ``kubectl describe`` looks for
    it: kubectl (``searchEvents`` in staging/src/k8s.io/kubectl/pkg/describe/describe.go, v1.32) takes the
    described object's reference (``GetReference``, client-go tools/reference/ref.go: kind, namespace, name, uid,
    resourceVersion) and lists events with the field selector ``GetFieldSelector`` builds from it (client-go
    kubernetes/typed/core/v1/event_expansion.go): involvedObject.kind, .name, .namespace and, the object having
    one, .uid; an event without the uid is never listed. The resourceVersion is the one the event was computed from,
    as client-go's recorder writes it."""
    moment = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    api_version = EVENT_API_VERSIONS.get(event.kind, "v1")
    involved = {"apiVersion": api_version, "kind": event.kind, "name": event.name}
    if event.namespace:
        involved["namespace"] = event.namespace
    if event.uid:
        involved["uid"] = event.uid
    if event.resource_version:
        involved["resourceVersion"] = event.resource_version
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{event.name}.{uuid.uuid4().hex[:16]}", "namespace": event.namespace or EVENT_NAMESPACE},
        "involvedObject": involved,
        "reason": event.reason, "message": event.message, "type": event.type,
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": moment, "lastTimestamp": moment, "count": 1,
    }


def plugin_arguments(api: client.ApiClient, namespace: str) -> CapacityCardConfig | None:
    """The capacity-card arguments the events apply, read where the extender reads them (the extender's conf,
    ConfigMap ``cardquota-extender-conf`` in cardquota's namespace, through the same
    :meth:`SchedulerConfig.from_manifests` as ``kubectl cardquota usage``/``explain``); None — unknown: no event for
    a job the scheduler may enqueue — when it cannot be read or is not installed (a scheduler built with the
    capacity-card plugin reads its own ConfigMap, which the controller does not read). Read once at start: restart
    the controller after changing it, as the extender, which reads it at start too."""
    from cardquota.core.errors import InputError
    from cardquota.core.policies.config import DEFAULT_SCHEDULER_CONFIGMAP
    from cardquota.core.schedconf.source import EXTENDER_CONFIGMAP
    from cardquota.core.scheduling.session import SchedulerConfig
    from cardquota.kube import read_namespaced

    try:
        configmap = read_namespaced(api, "configmap", namespace, EXTENDER_CONFIGMAP)
    except KubeError as error:
        log.warning("ConfigMap %s/%s not read (%s): the events take cardUnlimitedCpuMemory as on", namespace,
                    EXTENDER_CONFIGMAP, error)
        return None
    if configmap is None:
        return None
    try:
        return SchedulerConfig.from_manifests([configmap], DEFAULT_SCHEDULER_CONFIGMAP).capacity_card
    except InputError as error:
        log.warning("ConfigMap %s/%s cannot be read (%s): the events take cardUnlimitedCpuMemory as on", namespace,
                    EXTENDER_CONFIGMAP, error)
        return None
