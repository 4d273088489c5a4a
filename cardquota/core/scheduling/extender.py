"""The Volcano ``extender`` plugin's verbs over a :class:`Session` (pure: JSON in, JSON out).

Request and response shapes follow the wire protocol (Volcano v1.10+ predicate shape): top-level keys in lower
camelCase, the objects inside (TaskInfo, NodeInfo, JobInfo, QueueInfo) with Go field names, each carrying the full
Kubernetes object (``Pod``, ``Node``, ``PodGroup``, ``Queue``). Unknown keys are ignored and keys are matched
without regard to case. Every answer is a JSON object; when cardquota cannot decide (no session yet, an object it
cannot read) it abstains the way that never blocks the scheduler: predicate passes, no scores, enqueue abstains,
queue not overused, job ready, allocation accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.ledger import WAITING_PHASES, Ledger
from cardquota.core.objects import Manifest, ObjectKey, Pod, PodGroup, namespaced_key
from cardquota.core.scheduling.session import SchedulerConfig, Session, watched_pod
from cardquota.core.snapshot import ClusterSnapshot, Kind, kind_of

CODE_PASS = 0
CODE_ERROR = 1
CODE_UNSCHEDULABLE = 2
CODE_UNRESOLVABLE = 3
ENQUEUE_REJECT, ENQUEUE_ABSTAIN, ENQUEUE_PERMIT = -1, 0, 1
PIPELINED = 4
"""TaskInfo.Status bit of a task placed to wait for resources being released (Volcano pkg/scheduler/api/types.go,
``TaskStatus``: Pending 1, Allocated 2, Pipelined 4, Binding 8, ...). ``Statement.Pipeline`` sets it before calling
``allocateFunc`` (pkg/scheduler/framework/statement.go, v1.15.1); such a task is never bound in that session."""
BOUND_STATUSES = 2 | 8 | 16 | 32 | 64
"""TaskInfo.Status bits that mean the task holds its node: Allocated, Binding, Bound, Running, Releasing."""
ASSUMED_SECONDS = 30.0
"""How long a decision made in a cycle (a task allocated to a node, a job enqueued) stands before the watch shows it
(the pod bound, the PodGroup Inqueue): Volcano binds and writes the PodGroup's phase after the session closes, and
until the watch brings that, the next cycle must still see those cards taken — as the scheduler's own cache
"assumes" a binding. Undone when it expires unseen (the bind failed)."""
CYCLE_SECONDS = 10.0
"""When the scheduler calls neither ``onSessionOpen`` nor ``onSessionClose``, a cycle is taken to end this long after
the last one ended (Volcano's default schedule period is 1 s): what lives for a cycle only does not outlive it."""
SESSION_SECONDS = 300.0
"""Once the scheduler is seen calling ``onSessionOpen`` or ``onSessionClose``, a cycle ends there, not
:data:`CYCLE_SECONDS` after it began: a session of a large cluster can last longer than that (a cycle cut in the
middle of a session forgets what that session allocated before it commits). A cycle still ends this long after it
began, so a caller that sent one session verb cannot make a cycle's decisions outlive it."""
STRANGERS_PER_CYCLE = 512
"""At most this many pods the watch does not know are kept (pending) in a cycle. The scheduler names such a pod only
in the moment before the extender's watch brings it (both follow the same API server); a caller naming more is not
the scheduler. Beyond the cap a pod is still judged from the request, then forgotten."""


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
    """A task allocated in a cycle and not yet seen bound through the watch: until when the allocation stands (None:
    until the cycle ends), the pod as last watched (put back when it ends), and the names of the mGPU result
    annotations handed out to be written onto it (cleared when the scheduler deallocates it)."""

    until: float | None
    watched: Manifest
    written: tuple[str, ...] = ()
    pipelined: bool = False


@dataclass(frozen=True)
class _Reserved:
    """A PodGroup enqueued in a cycle and not yet seen Inqueue through the watch: until when (None: until the cycle
    ends), and its phase as last watched (put back when it ends)."""

    until: float | None
    phase: str


Ignored = Callable[[str, str, ObjectKey | None], None]
"""Told of every request whose pod, node or job the extender will not act on: (the verb in lower case, as the
server's metrics name it; why; the object's key)."""


class Extender:
    """The verbs, over a :class:`Session` — kept by watches (the served extender: :meth:`upsert`/:meth:`delete`
    fed by the operator's cluster cache, so ``onSessionOpen`` needs no body), or opened from each ``onSessionOpen``
    snapshot when nothing feeds it (:attr:`watch_fed` False) — and the decisions of the cycle on top.

    What a caller names is trusted only as far as the watch (or, fed by bodies, the session's snapshot) confirms
    it — anyone who reaches the port can call a verb:

    * ``deallocateFunc`` undoes only an allocation ``allocateFunc`` made in the current cycle and the watch has not
      shown bound; any other is answered and ignored (a pod the watch shows bound is never unbound — Volcano's
      preemption, whose ``Statement.Evict`` deallocates its running victims, frees their cards here only when the
      watch shows them gone);
    * ``allocateFunc`` places only pods the watch shows pending on nodes it knows (another pod is refused, and the
      scheduler retries it in a later cycle; a pod the watch shows bound is accepted unchanged), patches mGPU
      results only onto pods of the schedulers the configuration names, and counts the same task once;
    * a pod the watch does not know (the scheduler's informer was faster) is judged by ``predicate``/``prioritize``
      from the request and kept pending in the session until the cycle ends, at most
      :data:`STRANGERS_PER_CYCLE` of them (beyond, judged and forgotten at once); unknown nodes are never added;
    * ``jobEnqueueable`` judges the PodGroup as watched (an unknown one is refused) and reserves it until the cycle
      ends — a voter after it may reject the job — unless Volcano is seen to enqueue it (``jobEnqueued``, or a task
      verb naming one of its pods): then for :data:`ASSUMED_SECONDS`, never extended by a repeated call (a scheduler
      seen calling ``jobEnqueued`` that does not follow a permit with it overruled the permit: the reservation goes
      at once); after a
      reservation lapsed unconfirmed (or was refused on a repeated call) a new one lasts only until the cycle ends
      — so does a new allocation of a pod whose allocation lapsed, any pipelined allocation, and, once the scheduler
      is seen asking ``jobReady``, an allocation of a job it does not name there in the cycle (not committed);
    * a task is judged without its own earlier allocation (a task never competes with itself).

    A cycle ends at ``onSessionOpen`` and ``onSessionClose``, or :data:`CYCLE_SECONDS` after the last end for a
    scheduler configured without those verbs (:data:`SESSION_SECONDS` once either verb was seen)."""

    def __init__(self, config: SchedulerConfig | None = None, *,
                 clock: Callable[[], float] | None = None, on_ignored: Ignored | None = None) -> None:
        self.config = config or SchedulerConfig()
        self.session: Session | None = None
        self.watch_fed = False
        """True once a watch feeds the session: the ``onSessionOpen`` body is then never read."""
        self.clock = clock or _stopped_clock
        """Seconds, monotonic (the served extender passes time.monotonic); without one, a decision of a cycle stands
        until the watch shows it or the scheduler deallocates it."""
        self.on_ignored: Ignored = on_ignored or _not_told
        self._allocated: dict[ObjectKey, _Assumed] = {}
        self._enqueued: dict[ObjectKey, _Reserved] = {}
        self._next_expiry = float("inf")
        self._cycle_began = self.clock()
        self._strangers: set[ObjectKey] = set()
        """Pods the session holds pending because a verb named them before the watch showed them (this cycle)."""
        self._cycle_allocations: set[ObjectKey] = set()
        """Pods ``allocateFunc`` placed in this cycle and not undone since: what ``deallocateFunc`` may undo."""
        self._cycle_untils: dict[tuple[Kind, ObjectKey], float | None] = {}
        """The lifetime each decision of this cycle got first (undone and taken again, it keeps it)."""
        self._lapsed: set[tuple[Kind, ObjectKey]] = set()
        """Pods and PodGroups whose decision lapsed unconfirmed (until the watch shows them placed or gone)."""
        self._job_ready_asked = False
        """Whether the scheduler asks ``jobReady`` (it is configured): then it tells which jobs it commits."""
        self._ready_jobs: set[ObjectKey] = set()
        """PodGroups ``jobReady`` named in this cycle: their tasks' allocations are committed (bound after it)."""
        self._job_enqueued_asked = False
        """Whether the scheduler calls ``jobEnqueued`` (its ``jobEnqueuedVerb`` is configured): then it tells which
        permitted jobs it enqueued, right after each vote."""
        self._awaiting_enqueued: ObjectKey | None = None
        """The PodGroup this extender's last vote permitted and ``jobEnqueued`` has not named yet."""
        self._cycle_limit = CYCLE_SECONDS
        """How long a cycle lasts at most: :data:`SESSION_SECONDS` once the scheduler is seen calling a session
        verb (its sessions end cycles), else :data:`CYCLE_SECONDS`."""

    # ------------------------------------------------------------------------------------------------- session

    def on_session_open(self, request: Mapping[str, Any]) -> dict[str, Any]:
        self._cycle_limit = SESSION_SECONDS
        if self.watch_fed:
            self._end_cycle()
            self._expire()
        else:
            self._forget()
            self.session = Session(_readable(session_manifests(request)), self.config)
        return {}

    def on_session_close(self, request: Mapping[str, Any]) -> dict[str, Any]:
        del request
        self._cycle_limit = SESSION_SECONDS
        if self.watch_fed:
            self._end_cycle()
            self._expire()
        else:
            self._forget()
            self.session = None
        return {}

    # ------------------------------------------------------------------------------------ watch events (a sink)

    @property
    def snapshot(self) -> ClusterSnapshot:
        """The watched cluster (what the operator's cluster cache reads back of its sink)."""
        return self._watched().ledger.snapshot

    def upsert(self, manifest: Mapping[str, Any]) -> None:
        """A watched object added or changed. A pod allocated in a cycle and not yet shown bound keeps its node (and
        a PodGroup enqueued in a cycle, its Inqueue phase) until the watch shows it or its time passes."""
        session = self._watched()
        kind = kind_of(manifest)
        if kind is Kind.POD:
            view = Pod.from_manifest(manifest)
            self._strangers.discard(view.key)  # the watch knows it now
            placed = view.bound or view.terminated
            if placed:
                self._cycle_allocations.discard(view.key)
                self._lapsed.discard((Kind.POD, view.key))
            assumed = self._allocated.get(view.key)
            if assumed is not None:
                if placed:
                    del self._allocated[view.key]
                else:
                    self._allocated[view.key] = replace(assumed, watched=manifest)
                    manifest = _placed_as(manifest, session.pods.get(view.key))
        elif kind is Kind.PODGROUP:
            group = PodGroup.from_manifest(manifest)
            waiting = group.phase in WAITING_PHASES
            if not waiting:
                self._lapsed.discard((Kind.PODGROUP, group.key))
            reserved = self._enqueued.get(group.key)
            if reserved is not None:
                if not waiting:
                    del self._enqueued[group.key]
                else:
                    self._enqueued[group.key] = _Reserved(reserved.until, group.phase)
                    manifest = {**manifest, "status": {**(manifest.get("status") or {}), "phase": "Inqueue"}}
        session.upsert(manifest)

    def delete(self, manifest: Mapping[str, Any]) -> None:
        session = self._watched()
        key = namespaced_key(manifest)
        kind = kind_of(manifest)
        if kind is Kind.POD:
            self._allocated.pop(key, None)
            self._strangers.discard(key)
            self._cycle_allocations.discard(key)
        elif kind is Kind.PODGROUP:
            self._enqueued.pop(key, None)
        if kind is not None:
            self._lapsed.discard((kind, key))
        session.delete(manifest)

    def _watched(self) -> Session:
        if not self.watch_fed or self.session is None:
            self.session = Session([], self.config)
            self.watch_fed = True
            self._forget()
        return self.session

    # ------------------------------------------------------------------------------------------ decisions' life

    def _current(self, *, vote_settled: bool = True) -> Session | None:
        """The session, with the decisions whose time has passed undone (None when there is none). Any call but
        ``jobEnqueued`` settles the last vote: a permitted job Volcano did not follow with ``jobEnqueued`` (when it
        calls that verb) was rejected by another voter, and its reservation goes."""
        if self.session is None:
            return None
        self._expire()
        if vote_settled:
            self._settle_vote(self.session)
        return self.session

    def _settle_vote(self, session: Session) -> None:
        """Volcano's enqueue action calls ``JobEnqueued`` right after ``JobEnqueueable`` permits a job, before it
        asks about the next one (pkg/scheduler/actions/enqueue/enqueue.go, ``Execute``, master ed72c7c8): once the
        scheduler is seen calling ``jobEnqueued``, a permit it did not follow by it was overruled (a voter after
        this one in its tier rejected the job, ``JobEnqueueable`` in framework/session_plugins.go)."""
        key, self._awaiting_enqueued = self._awaiting_enqueued, None
        if key is None or not self._job_enqueued_asked:
            return
        reserved = self._enqueued.get(key)
        if reserved is not None and reserved.until is None:
            self._undo_reservation(session, key, lapsed=False)

    def _expire(self) -> None:
        """Decisions of past cycles the watch never confirmed are undone: the objects as last watched. Checked at
        every session open and close and every verb (a scheduler configured without the session verbs), at the
        cost of a clock read when none is due."""
        now = self.clock()
        if now - self._cycle_began >= self._cycle_limit:
            self._end_cycle()
        if now < self._next_expiry or self.session is None:
            return
        session = self.session
        soonest = float("inf")
        for key, assumed in list(self._allocated.items()):
            if assumed.until is not None and assumed.until <= now:
                self._undo_allocation(session, key, lapsed=True)
            elif assumed.until is not None:
                soonest = min(soonest, assumed.until)
        for key, reserved in list(self._enqueued.items()):
            if reserved.until is not None and reserved.until <= now:
                self._undo_reservation(session, key, lapsed=True)
            elif reserved.until is not None:
                soonest = min(soonest, reserved.until)
        self._next_expiry = soonest

    def _end_cycle(self) -> None:
        """What lives for the cycle only goes: pods the watch does not know, decisions taken for the cycle only,
        and what ``deallocateFunc`` may undo."""
        self._cycle_began = self.clock()
        self._awaiting_enqueued = None
        session = self.session
        if session is not None:
            for key in self._strangers:
                session.remove(key)
            for key in [key for key, assumed in self._allocated.items() if assumed.until is None]:
                self._undo_allocation(session, key, lapsed=False)
            for key in [key for key, reserved in self._enqueued.items() if reserved.until is None]:
                self._undo_reservation(session, key, lapsed=False)
        self._strangers.clear()
        self._cycle_allocations.clear()
        self._cycle_untils.clear()
        self._ready_jobs.clear()

    def _forget(self) -> None:
        """Everything kept about decisions (a session opened from a body, or a watch starting to feed one)."""
        self._allocated.clear()
        self._enqueued.clear()
        self._lapsed.clear()
        self._next_expiry = float("inf")
        self._end_cycle()

    def _until(self, kind: Kind, key: ObjectKey) -> float | None:
        """The lifetime of a new decision about ``key``: the one it had earlier in this cycle, else until the cycle
        ends when its last one lapsed, else :data:`ASSUMED_SECONDS`."""
        if (kind, key) in self._cycle_untils:
            return self._cycle_untils[(kind, key)]
        until = None if (kind, key) in self._lapsed else self.clock() + ASSUMED_SECONDS
        self._cycle_untils[(kind, key)] = until
        if until is not None:
            self._next_expiry = min(self._next_expiry, until)
        return until

    def _undo_allocation(self, session: Session, key: ObjectKey, *, lapsed: bool) -> None:
        assumed = self._allocated.pop(key)
        self._cycle_allocations.discard(key)
        session.upsert(assumed.watched)
        if lapsed:
            self._lapsed.add((Kind.POD, key))

    def _undo_reservation(self, session: Session, key: ObjectKey, *, lapsed: bool) -> None:
        reserved = self._enqueued.pop(key)
        session.set_group_phase(key, reserved.phase)
        if lapsed:
            self._lapsed.add((Kind.PODGROUP, key))

    # --------------------------------------------------------------------------------------------------- verbs

    def predicate(self, request: Mapping[str, Any]) -> dict[str, Any]:
        session = self._current()
        manifest, key = _pod_of(field(request, "task"))
        node = node_manifest(field(request, "node"))
        if session is None or manifest is None or key is None or node is None:
            return {"status": "", "code": CODE_PASS}
        name = str(node["metadata"].get("name", ""))
        with self._judging(session, manifest, key, "predicate") as judged:
            if not judged:
                return {"status": "", "code": CODE_PASS}
            self._confirm_group_of(session, key)
            with self._unplaced(session, key):
                refusal = session.task_refusal(key)
                if refusal is None and name in session.nodes:  # (a node the watch does not know: allocateFunc
                    refusal = session.node_refusal(key, name)  # refuses)
        if refusal is None:
            return {"status": "", "code": CODE_PASS}
        return {"status": f"{refusal.reason}: {refusal.message}", "code": CODE_UNSCHEDULABLE}

    def prioritize(self, request: Mapping[str, Any]) -> dict[str, Any]:
        session = self._current()
        manifest, key = _pod_of(field(request, "task"))
        nodes = [str(node["metadata"].get("name", "")) for info in field(request, "nodes") or []
                 if (node := node_manifest(info)) is not None]
        scores = dict.fromkeys(nodes, 0.0)
        if session is None or manifest is None or key is None:
            return {"nodeScore": scores, "errorMessage": ""}
        with self._judging(session, manifest, key, "prioritize") as judged:
            if judged:
                self._confirm_group_of(session, key)
                with self._unplaced(session, key):
                    scores.update({name: session.score(key, name) for name in nodes if name in session.nodes})
        return {"nodeScore": scores, "errorMessage": ""}

    def job_enqueueable(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The PodGroup as watched (not as the request says) is judged, and reserved once."""
        session = self._current()
        key = _job_key(request)
        if session is None or key is None:
            return {"status": ENQUEUE_ABSTAIN}
        if key not in session.ledger.snapshot.podgroups:  # refused, not let through unchecked: the scheduler asks
            self.on_ignored("jobenqueueable", "unknown-job", key)  # again next cycle, when the watch has brought it
            return {"status": ENQUEUE_REJECT}
        reserved = self._enqueued.get(key)
        if reserved is not None:  # asked again: judged without its own reservation, which keeps its lifetime
            self._undo_reservation(session, key, lapsed=False)
        group = session.ledger.snapshot.podgroups[key]
        if group.phase not in WAITING_PHASES:
            self.on_ignored("jobenqueueable", "not-pending", key)
            return {"status": ENQUEUE_ABSTAIN}
        if not session.enqueue_is_judged(group):
            return {"status": ENQUEUE_ABSTAIN}  # no cards, no cpu/memory its queue limits: not capacity-card's say
        if session.enqueue_refusal(group) is not None:
            if reserved is not None:  # the reservation was not taken up: a new one lasts the cycle only
                self._lapsed.add((Kind.PODGROUP, key))
            return {"status": ENQUEUE_REJECT}
        # Reserved: the next job in this cycle sees its cards and its minResources cpu/memory as inqueue.
        # Until the cycle ends unless Volcano is seen to have enqueued it (_confirm_reservation): a voter after
        # this one may still reject it (pkg/scheduler/framework/session_plugins.go, JobEnqueueable: the first
        # reject in a tier wins).
        until = reserved.until if reserved is not None else None
        self._enqueued[key] = _Reserved(until, group.phase)
        session.set_group_phase(key, "Inqueue")
        self._awaiting_enqueued = key
        return {"status": ENQUEUE_PERMIT}

    def job_enqueued(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Volcano enqueued the job (its ``jobEnqueuedVerb``, on Volcano's master branch: called by the enqueue
        action after the vote, pkg/scheduler/actions/enqueue/enqueue.go): its reservation stands until the watch
        shows it Inqueue or :data:`ASSUMED_SECONDS` pass. Once seen, a permit it does not follow is undone
        (:meth:`_settle_vote`)."""
        self._job_enqueued_asked = True
        session = self._current(vote_settled=False)
        key = _job_key(request)
        if session is None or key is None:
            return {}
        if self._awaiting_enqueued == key:
            self._awaiting_enqueued = None
        if key in self._enqueued:
            self._confirm_reservation(key)
        else:
            self.on_ignored("jobenqueued", "not-reserved", key)
        return {}

    def queue_overused(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Never overused. Volcano's allocate action skips a queue it is told is overused — every job of it, every
        resource (``if ssn.Overused(queue) { continue }`` in pkg/scheduler/actions/allocate/allocate.go,
        ``allocateResources``, v1.15.1) — while card quotas are per card type and checked task by task
        (``predicate``, ``allocateFunc``): a queue over its A100 quota still gets H100 and CPU work. Served for
        configurations that name the verb; best left out of them."""
        del request
        return {"overused": False}

    def job_ready(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Card quotas were checked task by task on allocation: nothing more to hold the commit back for.

        Volcano asks it only when the plugins before it found the job ready, and then commits the job's statement
        (pkg/scheduler/framework/session_plugins.go ``JobReady``: the first false wins; actions/allocate/allocate.go
        ``allocateResources``: ``if stmt != nil && ssn.JobReady(job) { stmt.Commit() }``). A job it is not asked
        about is not committed in this cycle — neither is it discarded when it is pipelined — so, once the scheduler
        is seen asking, its allocations last the cycle only, and the job's named here last until bound."""
        key = _job_key(request)
        session = self._current()
        if session is not None and key is not None:
            self._job_ready_asked = True
            self._ready_jobs.add(key)
            self._confirm_reservation(key)  # (enqueued, then: allocate visits enqueued jobs only)
            for pod in [pod for pod in self._cycle_allocations if pod in self._allocated]:
                assumed = self._allocated[pod]
                if assumed.until is None and not assumed.pipelined and session.view(pod).group_key == key:
                    self._allocated[pod] = replace(assumed, until=self._until(Kind.POD, pod))
        return {"status": True}

    def allocate_func(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], Manifest | None, dict[str, str]]:
        """(response, the pod, the annotations to patch onto it). An allocation that breaks the card quota (two
        tasks raced for the last card) is refused, and the scheduler rolls it back; so is one of a pod or onto a
        node the watch does not know (retried in a later cycle). The task is judged without its own earlier
        allocation. A pipelined task's (``Status`` :data:`PIPELINED`) lasts until the cycle ends: Volcano's allocate
        action neither commits nor discards a job that is pipelined only (pkg/scheduler/actions/allocate/
        allocate.go, ``allocateForJob``: ``JobReady`` false, ``JobPipelined`` true), so no ``deallocateFunc``
        comes, and the next session sees the task Pending again; no mGPU result is written for it."""
        session = self._current()
        task = field(request, "task")
        _, key = _pod_of(task)
        node = field(task, "NodeName")
        if session is None or key is None or not isinstance(node, str) or not node:
            return {"errorMessage": ""}, None, {}
        refusal = self._placeable(session, key, node)
        if refusal is not None:
            return refusal, None, {}
        watched = self._allocated[key].watched if key in self._allocated else session.pods[key]
        view = Pod.from_manifest(watched)
        if view.bound or view.terminated:
            self.on_ignored("allocatefunc", "bound", key)  # charged where the watch shows it: nothing to do
            return {"errorMessage": ""}, None, {}
        session.deallocate(key)  # placed earlier (an assumption, or this cycle): accounted once, from pending
        problem = session.task_refusal(key) or session.node_refusal(key, node)
        if problem is not None:
            if key in self._allocated:  # (the earlier placement is undone: the scheduler now sees it pending)
                self._undo_allocation(session, key, lapsed=False)
            return {"errorMessage": f"{problem.reason}: {problem.message}"}, None, {}
        self._confirm_group_of(session, key)
        status = field(task, "Status")
        pipelined = isinstance(status, int) and bool(status & PIPELINED)
        earlier = self._allocated.get(key)
        if pipelined:
            until = None  # never bound in this session: next session the task is Pending again, or placed anew
        elif earlier is not None and earlier.until is not None:
            until = earlier.until
        elif self._job_ready_asked and session.view(key).group_key not in self._ready_jobs:
            until = None  # committed only if jobReady names its job in this cycle (job_ready)
        else:
            until = self._until(Kind.POD, key)
        self._cycle_allocations.add(key)
        placement = session.allocate(key, node)
        written = {} if pipelined else dict(placement.annotations)  # (a pipelined pod is not bound this session)
        self._allocated[key] = _Assumed(until, watched, tuple(written), pipelined)
        return {"errorMessage": ""}, (session.pods[key] if written else None), written

    def withdraw(self, key: ObjectKey) -> None:
        """Undo an allocation of this cycle whose mGPU result could not be written onto the pod (the scheduler is
        told the allocation failed, and rolls it back)."""
        session = self._current()
        if session is not None and key in self._cycle_allocations and key in self._allocated:
            self._undo_allocation(session, key, lapsed=False)

    def deallocate_func(self, request: Mapping[str, Any]
                        ) -> tuple[dict[str, Any], Manifest | None, dict[str, str | None]]:
        """(response, the pod, the annotations to remove from it: the mGPU result written at its allocation, each
        None as a JSON merge patch removes it). Undoes an allocation of this cycle that the watch has not shown
        bound; ignores any other."""
        session = self._current()
        _, key = _pod_of(field(request, "task"))
        if session is None or key is None:
            return {"errorMessage": ""}, None, {}
        if key in self._cycle_allocations and key in self._allocated:
            assumed = self._allocated[key]
            self._undo_allocation(session, key, lapsed=False)
            if assumed.written:
                return {"errorMessage": ""}, assumed.watched, dict.fromkeys(assumed.written)
        elif key not in session.pods or key in self._strangers:
            self.on_ignored("deallocatefunc", "unknown-pod", key)
        else:
            self.on_ignored("deallocatefunc", "not-allocated-this-cycle", key)
        return {"errorMessage": ""}, None, {}

    # ------------------------------------------------------------------------------------------------ internals

    def _placeable(self, session: Session, key: ObjectKey, node: str) -> dict[str, Any] | None:
        """The refusal of an allocation cardquota cannot vouch for: a pod or node the watch does not know, an mGPU
        pod of a scheduler the configuration does not name (its result annotations are not written for it)."""
        if key not in session.pods or key in self._strangers:
            self.on_ignored("allocatefunc", "unknown-pod", key)
            return {"errorMessage": f"cardquota does not know pod {key[0]}/{key[1]} yet: its allocation waits for "
                                    "a later cycle"}
        if node not in session.nodes:
            self.on_ignored("allocatefunc", "unknown-node", key)
            return {"errorMessage": f"cardquota does not know node {node} yet: allocations onto it wait for a later "
                                    "cycle"}
        scheduler = (session.pods[key].get("spec") or {}).get("schedulerName")
        if scheduler not in self.config.scheduler_names and session.wants_mgpu(key):
            self.on_ignored("allocatefunc", "other-scheduler", key)
            return {"errorMessage": f"pod {key[0]}/{key[1]} asks for mGPU but its schedulerName {scheduler!r} is "
                                    f"not one cardquota serves ({', '.join(sorted(self.config.scheduler_names))})"}
        return None

    def _confirm_reservation(self, key: ObjectKey) -> None:
        """Volcano enqueued the PodGroup: its reservation outlives the cycle (until the watch shows it Inqueue)."""
        reserved = self._enqueued.get(key)
        if reserved is not None and reserved.until is None:
            self._enqueued[key] = _Reserved(self._until(Kind.PODGROUP, key), reserved.phase)

    def _confirm_group_of(self, session: Session, key: ObjectKey) -> None:
        """A task verb names a pod of a PodGroup reserved in this cycle: Volcano enqueued that job (its allocate
        action skips pending jobs, pkg/scheduler/actions/allocate/allocate.go, ``buildAllocateContext``)."""
        if self._enqueued:
            group = session.view(key).group_key
            if group is not None:
                self._confirm_reservation(group)

    @contextmanager
    def _unplaced(self, session: Session, key: ObjectKey) -> Iterator[None]:
        """The task judged without its own earlier allocation (one the watch has not shown bound: Volcano sees the
        task Pending again after a pipelined session or a failed bind), which is put back afterwards."""
        if key not in self._allocated:
            yield
            return
        placed = session.pods[key]
        session.deallocate(key)
        try:
            yield
        finally:
            session.upsert(placed)

    @contextmanager
    def _judging(self, session: Session, manifest: Manifest, key: ObjectKey, verb: str) -> Iterator[bool]:
        """The pod in the session while a verb judges it (True), added pending when the watch does not know it:
        kept until the cycle ends, or — beyond :data:`STRANGERS_PER_CYCLE` — removed at once. False when it
        cannot be read."""
        if key in session.pods:
            yield True
            return
        try:
            session.add_pending(watched_pod(manifest))
        except InputError:
            yield False
            return
        if len(self._strangers) < STRANGERS_PER_CYCLE:
            self._strangers.add(key)
            yield True
            return
        self.on_ignored(verb, "unknown-pods-over-cap", key)
        try:
            yield True
        finally:
            session.remove(key)


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


def _job_key(request: Mapping[str, Any]) -> ObjectKey | None:
    """The key of the PodGroup a request's JobInfo carries (None when it cannot be read)."""
    manifest = podgroup_manifest(field(request, "job"))
    if manifest is None:
        return None
    try:
        return PodGroup.from_manifest(manifest).key
    except InputError:
        return None


def _pod_of(task: object) -> tuple[Manifest | None, ObjectKey | None]:
    """The pod a TaskInfo carries and its key (None, None when it cannot be read)."""
    manifest = task_pod(task)
    if manifest is None:
        return None, None
    try:
        return manifest, Pod.from_manifest(manifest).key
    except InputError:
        return None, None


def _not_told(verb: str, reason: str, key: ObjectKey | None) -> None:
    """No one to tell of an ignored request."""
    del verb, reason, key


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
