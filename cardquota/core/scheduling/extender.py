"""The Volcano ``extender`` plugin's verbs over a :class:`Session` (pure: JSON in, JSON out).

Request and response shapes follow the wire protocol (Volcano v1.10+ predicate shape): top-level keys in lower
camelCase, the objects inside (TaskInfo, NodeInfo, JobInfo, QueueInfo) with Go field names, each carrying the full
Kubernetes object (``Pod``, ``Node``, ``PodGroup``, ``Queue``). Unknown keys are ignored and keys are matched
without regard to case. Every answer is a JSON object; when cardquota cannot decide (no session yet, an object it
cannot read) it abstains the way that never blocks the scheduler: predicate passes, no scores, enqueue abstains,
queue not overused, job ready, allocation accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Manifest, ObjectKey, Pod, PodGroup, namespaced_key
from cardquota.core.scheduling import capacity_card
from cardquota.core.scheduling.session import SchedulerConfig, Session
from cardquota.core.snapshot import ClusterSnapshot, Kind, kind_of

CODE_PASS = 0
CODE_ERROR = 1
CODE_UNSCHEDULABLE = 2
CODE_UNRESOLVABLE = 3
ENQUEUE_REJECT, ENQUEUE_ABSTAIN, ENQUEUE_PERMIT = -1, 0, 1
BOUND_STATUSES = 2 | 8 | 16 | 32 | 64
"""TaskInfo.Status bits that mean the task holds its node: Allocated, Binding, Bound, Running, Releasing."""
ASSUMED_SECONDS = 30.0
"""How long a decision made in a cycle (a task allocated to a node, a job enqueued) stands before the watch shows it
(the pod bound, the PodGroup Inqueue): Volcano binds and writes the PodGroup's phase after the session closes, and
until the watch brings that, the next cycle must still see those cards taken — as the scheduler's own cache
"assumes" a binding. Undone when it expires unseen (the bind failed)."""


def field(obj: object, name: str) -> Any:
    """``obj[name]`` matched without regard to case (Go's JSON decoding), None when absent."""
    if not isinstance(obj, MAPPING_TYPES):
        return None
    if name in obj:
        return obj[name]
    lowered = name.lower()
    return next((value for key, value in obj.items() if isinstance(key, str) and key.lower() == lowered), None)


def task_pod(task: object) -> Manifest | None:
    """The full v1.Pod a TaskInfo carries, with its node when the task holds one."""
    pod = field(task, "Pod")
    if not isinstance(pod, MAPPING_TYPES) or not isinstance(pod.get("metadata"), MAPPING_TYPES):
        return None
    manifest: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", **pod}
    node = field(task, "NodeName")
    status = field(task, "Status")
    spec = dict(manifest.get("spec") or {})
    if isinstance(node, str) and node and isinstance(status, int) and status & BOUND_STATUSES:
        spec["nodeName"] = node
    manifest["spec"] = spec
    return manifest


def node_manifest(node_info: object) -> Manifest | None:
    node = field(node_info, "Node")
    if not isinstance(node, MAPPING_TYPES) or not isinstance(node.get("metadata"), MAPPING_TYPES):
        return None
    return {"apiVersion": "v1", "kind": "Node", **node}


def podgroup_manifest(job: object) -> Manifest | None:
    group = field(job, "PodGroup")
    if not isinstance(group, MAPPING_TYPES) or not isinstance(group.get("metadata"), MAPPING_TYPES):
        return None
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            **{key: group[key] for key in ("metadata", "spec", "status") if key in group}}


def queue_manifest(queue_info: object) -> Manifest | None:
    queue = field(queue_info, "Queue")
    if not isinstance(queue, MAPPING_TYPES) or not isinstance(queue.get("metadata"), MAPPING_TYPES):
        return None
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            **{key: queue[key] for key in ("metadata", "spec", "status") if key in queue}}


def session_manifests(snapshot: Mapping[str, Any]) -> list[Manifest]:
    """Every object an ``onSessionOpen`` snapshot carries: nodes, queues, PodGroups and the pods of both jobs and
    nodes (a pod listed twice is kept once)."""
    manifests: list[Manifest] = []
    pods: dict[ObjectKey, Manifest] = {}
    for section, convert in (("Nodes", node_manifest), ("Queues", queue_manifest), ("Jobs", podgroup_manifest)):
        for info in _values(field(snapshot, section)):
            manifest = convert(info)
            if manifest is not None:
                manifests.append(manifest)
            for task in _values(field(info, "Tasks")):  # NodeInfo and JobInfo carry their tasks' pods
                _keep_pod(pods, task_pod(task))
    return [*manifests, *pods.values()]


@dataclass(frozen=True)
class _Assumed:
    """A decision of a cycle not yet seen through the watch: until when it stands, and the object as last watched
    (put back if it expires)."""

    until: float
    watched: Manifest


class Extender:
    """The verbs, over a :class:`Session` — kept by watches (the served extender: :meth:`upsert`/:meth:`delete`
    fed by the operator's cluster cache, so ``onSessionOpen`` needs no body), or opened from each ``onSessionOpen``
    snapshot when nothing feeds it (:attr:`watch_fed` False) — and the decisions of the cycle on top."""

    def __init__(self, config: SchedulerConfig | None = None, *,
                 clock: Callable[[], float] | None = None) -> None:
        self.config = config or SchedulerConfig()
        self.session: Session | None = None
        self.watch_fed = False
        """True once a watch feeds the session: the ``onSessionOpen`` body is then never read."""
        self.clock = clock or _stopped_clock
        """Seconds, monotonic (the served extender passes time.monotonic); without one, a decision of a cycle stands
        until the watch shows it or the scheduler deallocates it."""
        self._allocated: dict[ObjectKey, _Assumed] = {}
        self._enqueued: dict[ObjectKey, _Assumed] = {}
        self._next_expiry = float("inf")

    # ------------------------------------------------------------------------------------------------- session

    def on_session_open(self, request: Mapping[str, Any]) -> dict[str, Any]:
        if self.watch_fed:
            self._expire()
        else:
            self.session = Session(_readable(session_manifests(request)), self.config)
        return {}

    def on_session_close(self, request: Mapping[str, Any]) -> dict[str, Any]:
        del request
        if self.watch_fed:
            self._expire()
        else:
            self.session = None
        return {}

    # ------------------------------------------------------------------------------------ watch events (a sink)

    @property
    def snapshot(self) -> ClusterSnapshot:
        """The watched cluster (what the operator's cluster cache reads back of its sink)."""
        return self._watched().ledger.snapshot

    def upsert(self, manifest: Mapping[str, Any]) -> None:
        """A watched object added or changed. A pod allocated in a cycle and not yet shown bound keeps its node (and
        a PodGroup enqueued in a cycle, its Inqueue phase) until the watch shows it or :data:`ASSUMED_SECONDS`
        pass."""
        session = self._watched()
        kind = kind_of(manifest)
        if kind is Kind.POD:
            key = Pod.from_manifest(manifest).key
            assumed = self._allocated.get(key)
            if assumed is not None:
                view = Pod.from_manifest(manifest)
                if view.bound or view.terminated:
                    del self._allocated[key]
                else:
                    self._allocated[key] = _Assumed(assumed.until, manifest)
                    manifest = _placed_as(manifest, session.pods.get(key))
        elif kind is Kind.PODGROUP:
            group = PodGroup.from_manifest(manifest)
            enqueued = self._enqueued.get(group.key)
            if enqueued is not None:
                if group.phase not in ("", "Pending"):
                    del self._enqueued[group.key]
                else:
                    self._enqueued[group.key] = _Assumed(enqueued.until, manifest)
                    manifest = {**manifest, "status": {**(manifest.get("status") or {}), "phase": "Inqueue"}}
        session.upsert(manifest)

    def delete(self, manifest: Mapping[str, Any]) -> None:
        session = self._watched()
        key = namespaced_key(manifest)
        kind = kind_of(manifest)
        if kind is Kind.POD:
            self._allocated.pop(key, None)
        elif kind is Kind.PODGROUP:
            self._enqueued.pop(key, None)
        session.delete(manifest)

    def _watched(self) -> Session:
        if not self.watch_fed or self.session is None:
            self.session = Session([], self.config)
            self.watch_fed = True
        return self.session

    def _expire(self) -> None:
        """Decisions of past cycles the watch never confirmed are undone: the objects as last watched. Checked at
        every session open and close and every task verb (a scheduler configured without the session verbs), at
        the cost of a clock read when none is due."""
        now = self.clock()
        if now < self._next_expiry:
            return
        session = self._watched()
        soonest = float("inf")
        for decisions in (self._allocated, self._enqueued):
            for key, assumed in list(decisions.items()):
                if assumed.until <= now:
                    del decisions[key]
                    session.upsert(assumed.watched)
                else:
                    soonest = min(soonest, assumed.until)
        self._next_expiry = soonest

    def _assume(self, decisions: dict[ObjectKey, _Assumed], key: ObjectKey, watched: Manifest) -> None:
        if key not in decisions:
            until = self.clock() + ASSUMED_SECONDS
            decisions[key] = _Assumed(until, watched)
            self._next_expiry = min(self._next_expiry, until)

    # --------------------------------------------------------------------------------------------------- verbs

    def predicate(self, request: Mapping[str, Any]) -> dict[str, Any]:
        session, key = self._task(field(request, "task"))
        node = node_manifest(field(request, "node"))
        if session is None or key is None or node is None:
            return {"status": "", "code": CODE_PASS}
        name = str(node["metadata"].get("name", ""))
        if not _known(session, node):
            return {"status": "", "code": CODE_PASS}
        refusal = session.task_refusal(key) or session.node_refusal(key, name)
        if refusal is None:
            return {"status": "", "code": CODE_PASS}
        return {"status": f"{refusal.reason}: {refusal.message}", "code": CODE_UNSCHEDULABLE}

    def prioritize(self, request: Mapping[str, Any]) -> dict[str, Any]:
        session, key = self._task(field(request, "task"))
        nodes = [node_manifest(info) for info in field(request, "nodes") or []]
        scores: dict[str, float] = {}
        for node in nodes:
            if node is None:
                continue
            name = str(node["metadata"].get("name", ""))
            if session is None or key is None:
                scores[name] = 0.0
                continue
            scores[name] = session.score(key, name) if _known(session, node) else 0.0
        return {"nodeScore": scores, "errorMessage": ""}

    def job_enqueueable(self, request: Mapping[str, Any]) -> dict[str, Any]:
        manifest = podgroup_manifest(field(request, "job"))
        if self.session is None or manifest is None:
            return {"status": ENQUEUE_ABSTAIN}
        if self.watch_fed:
            self._expire()
        try:
            group = PodGroup.from_manifest(manifest)
        except InputError:
            return {"status": ENQUEUE_ABSTAIN}
        if not self.session.enqueue_is_judged(group):
            return {"status": ENQUEUE_ABSTAIN}  # no cards, no cpu/memory its queue limits: not capacity-card's say
        refusal = self.session.enqueue_refusal(group)
        if refusal is not None:
            return {"status": ENQUEUE_REJECT}
        # Reserved: the next job in this cycle sees its cards and its minResources cpu/memory as inqueue.
        if self.watch_fed:  # (the PodGroup as the scheduler read it: phase Pending)
            self._assume(self._enqueued, group.key, manifest)
        self.session.set_phase(manifest, "Inqueue")
        return {"status": ENQUEUE_PERMIT}

    def queue_overused(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Over its card quota: some card type holds more than the queue's quota (share above 1)."""
        queue = field(field(request, "queue"), "Name")
        if self.session is None or not isinstance(queue, str):
            return {"overused": False}
        quota = self.session.quota(queue)
        allocated = self.session.ledger.usage(queue).allocated
        share = capacity_card.queue_share({card: float(allocated.get(card, 0)) for card in quota},
                                          {card: float(amount) for card, amount in quota.items()})
        return {"overused": share > 1}

    def job_ready(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Card quotas were checked task by task on allocation: nothing more to hold the commit back for."""
        del request
        return {"status": True}

    def allocate_func(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], Manifest | None, dict[str, str]]:
        """(response, the pod, the annotations to patch onto it). An allocation that breaks the card quota (two
        tasks raced for the last card) is refused, and the scheduler rolls it back."""
        task = field(request, "task")
        session, key = self._task(task)
        node = field(task, "NodeName")
        if session is None or key is None or not isinstance(node, str) or node not in session.nodes:
            return {"errorMessage": ""}, None, {}
        session.deallocate(key)  # the task arrives with its node set: account it once, from the pending state
        refusal = session.task_refusal(key) or session.node_refusal(key, node)
        if refusal is not None:
            return {"errorMessage": f"{refusal.reason}: {refusal.message}"}, None, {}
        if self.watch_fed:
            self._assume(self._allocated, key, session.pods[key])
        placement = session.allocate(key, node)
        return {"errorMessage": ""}, session.pods[key], dict(placement.annotations)

    def deallocate_func(self, request: Mapping[str, Any]) -> dict[str, Any]:
        session, key = self._task(field(request, "task"))
        if session is not None and key is not None:
            assumed = self._allocated.pop(key, None)
            if assumed is not None:
                session.upsert(assumed.watched)
            else:
                session.deallocate(key)
        return {"errorMessage": ""}

    # ------------------------------------------------------------------------------------------------ internals

    def _task(self, task: object) -> tuple[Session | None, ObjectKey | None]:
        """The session and the task's pod in it (added as pending when the session has not seen it)."""
        if self.session is None:
            return None, None
        if self.watch_fed:
            self._expire()
        manifest = task_pod(task)
        if manifest is None:
            return self.session, None
        try:
            key = Pod.from_manifest(manifest).key
            if key not in self.session.pods:
                key = self.session.add_pending(manifest)
        except InputError:
            return self.session, None
        return self.session, key


def _stopped_clock() -> float:
    """Time that does not pass: decisions never expire."""
    return 0.0


def _placed_as(manifest: Mapping[str, Any], placed: Manifest | None) -> Manifest:
    """A watched pod that is not bound yet, with the node and result annotations the cycle gave it."""
    if placed is None:
        return manifest
    node = (placed.get("spec") or {}).get("nodeName")
    annotations = {**((manifest.get("metadata") or {}).get("annotations") or {}),
                   **((placed.get("metadata") or {}).get("annotations") or {})}
    return {**manifest, "metadata": {**(manifest.get("metadata") or {}), "annotations": annotations},
            "spec": {**(manifest.get("spec") or {}), "nodeName": node}, "status": {"phase": "Running"}}


def _known(session: Session, node: Manifest) -> bool:
    """Whether the session holds the node, adding it when it can be read (a node the snapshot lacked)."""
    name = str(node["metadata"].get("name", ""))
    if name not in session.nodes:
        try:
            session.add_node(node)
        except InputError:
            return False
    return True


def _values(value: object) -> list[Any]:
    if isinstance(value, MAPPING_TYPES):
        return list(value.values())
    return list(value) if isinstance(value, list) else []


def _keep_pod(pods: dict[ObjectKey, Manifest], manifest: Manifest | None) -> None:
    if manifest is None:
        return
    pods[namespaced_key(manifest)] = manifest


def _readable(manifests: list[Manifest]) -> list[Manifest]:
    """The objects a ledger can read (a malformed one is left out, not the whole snapshot)."""
    readable = []
    for manifest in manifests:
        try:
            Ledger().upsert(manifest)
        except InputError:
            continue
        readable.append(manifest)
    return readable
