"""A replay of the stock Volcano scheduler's actions against the served extender, for conformance scenarios.

The cluster lives in kmock (the API server); the extender runs as production runs it (HTTP, its session kept by
watches of that API server); this class plays the scheduler between them: each session lists the cluster as
Volcano's cache would, runs ``enqueue``, ``allocate`` and ``backfill`` calling the extender's verbs with bodies shaped
as Go marshals Volcano's structs (tests/volcano_payloads.py), and at ``close_session`` writes back what Volcano's
cache would (binds, PodGroup phases), then waits until the extender's watch shows it.

Every behaviour modelled is Volcano v1.15.1's (``git show v1.15.1:<path>`` in volcano-sh/volcano):

* Verbs and filtering — ``pkg/scheduler/plugins/extender/extender.go``, ``OnSessionOpen``: the task verbs
  (``predicate``, ``prioritize``; ``allocateFunc``/``deallocateFunc`` through ``addEventHandler``) are sent only when
  ``IsInterested(task)``: ``managedResources`` empty, or some container or init container names one of them in its
  requests or limits (``hasManagedResources``). ``jobEnqueueable``, ``queueOverused`` and ``jobReady`` are not
  filtered. With ``ignorable`` false a transport error rejects the job, filters the node, reports the queue
  overused, or rolls the allocation back; the body keys are those of ``argument.go`` (``task``, ``node``, ``nodes``,
  ``job``, ``queue``; answers ``status``/``code``, ``nodeScore``, ``overused``, ``errorMessage``).
* Enqueue — ``pkg/scheduler/actions/enqueue/enqueue.go``, ``Execute``: pending jobs queue by queue; a job without
  ``spec.minResources`` is enqueued unasked; otherwise ``Session.JobEnqueueable``
  (``pkg/scheduler/framework/session_plugins.go``): tiers in order, plugins in order, the first reject (< 0) ends it
  with false, a tier where some plugin permitted (> 0) ends it with true, all abstaining is true.
* Allocate — ``pkg/scheduler/actions/allocate/allocate.go``: ``buildAllocateContext`` skips Pending jobs when the
  enqueue action runs; ``allocateResources`` pops a queue, skips it for the rest of the action when
  ``ssn.Overused(queue)`` (any ``overusedFn`` true: ``Session.Overused``), pops one job, and commits its statement
  only when ``ssn.JobReady(job)`` (gang ``IsReady`` — ``pkg/scheduler/plugins/gang/gang.go`` — and the extender's
  ``jobReady``), putting the job back while tasks are left; ``allocateResourcesForTasks`` per task: Volcano's own
  fit (``predicate``: ``InitResreq`` within the node's ``FutureIdle``) then the plugins' predicates, no node → the
  job stops (gang cannot be met); ``prioritizeNodes`` splits the nodes into Idle and FutureIdle gradients and asks
  the batch node order only when a gradient holds more than one node; ``allocateResourcesForTask``:
  ``Statement.Allocate`` when the task fits Idle, else ``Statement.Pipeline`` when it fits FutureIdle; after the
  tasks, ``SubJobReady`` → the statement, ``SubJobPipelined`` → the statement kept uncommitted (no callback either
  way), else ``Statement.Discard``.
* Statement — ``pkg/scheduler/framework/statement.go``: ``Allocate`` sets ``Pod.Spec.NodeName``, status Allocated,
  calls ``AllocateFunc``; an error rolls back through ``unallocate`` (status Pending, ``NodeName`` still set while
  ``DeallocateFunc`` runs). ``Pipeline`` sets status Pipelined and ``NodeName`` only (not the pod's).
  ``Discard`` undoes in reverse order (``DeallocateFunc``); ``Commit`` binds the allocated tasks.
* Next session — ``pkg/scheduler/cache/cache.go`` ``Bind`` (the pod gets its node; the kubelet then runs it): the
  ``DefaultBinder`` posts a Binding (``Pods(ns).Bind``), on which the API server also sets the pod's
  ``PodScheduled`` condition ``True``, stamped with the time of the bind (``BindingREST``'s ``setPodNodeAndMetadata``
  in kubernetes/kubernetes pkg/registry/core/pod/storage/storage.go); the time here is the replay's session clock
  (:meth:`VolcanoReplay.bind_time`: one second a session, so a later session's binds are later). And
  ``pkg/scheduler/framework/session.go`` ``closeSession``/``jobStatus`` (a PodGroup enqueued this session is
  written Inqueue, one with ``minMember`` tasks allocated is Running). A pipelined task that was not committed is
  Pending again next session.
* Backfill — ``pkg/scheduler/actions/backfill/backfill.go``: only BestEffort tasks (no requests) of non-pending
  jobs, placed on the first node the predicates pass through ``Session.Allocate`` (pkg/scheduler/framework/
  session.go), not a statement: ``AllocateFunc`` is called but its error is not read (nothing is rolled back),
  and the task is dispatched at once.
* Scheduling gates — a task whose pod carries any scheduling gate is ``SchGated`` (``calSchedulingGated``,
  pkg/scheduler/api/job_info.go) and is skipped by allocate and backfill (the ``task.SchGated`` checks in
  actions/allocate/allocate.go and actions/backfill/backfill.go; the same in v1.14.1): it is never placed until
  the gate is lifted. Not modelled: the enqueue plugins (capacity, proportion, overcommit) deducting gated pods'
  requests (``DeductSchGatedResources``), which only a callable voter here would see.
* Verbs not configured — a verb the ``extender`` arguments do not name is never sent: the plugin registers no
  function for it (``OnSessionOpen`` adds each ``Add*Fn`` only when its verb is set), so the task passes, the
  queue is not overused, the job's readiness is the gang's (``verbs``).
* BestEffort — allocate skips a task whose ``Resreq`` is empty ("is BestEffort task, skip it",
  actions/allocate/allocate.go ``buildAllocateContext``): only backfill places it. Requests are CPU, memory and
  extended resources (``api.NewResource``; a limit alone is the request, as the API server defaults it).
* Preempt — ``pkg/scheduler/actions/preempt/preempt.go`` ``Execute``: jobs not Pending and starving (gang's
  ``IsStarving``: ready + pipelined tasks below ``minAvailable``; priority's: below the task count), their Pending
  tasks but the ``SchGated`` ones; ``normalPreempt`` per node in name order (resources are not a predicate there:
  ``PredicateForPreemptAction``): victims are Running, preemptable (``api.GetPodPreemptable``: the
  ``volcano.sh/preemptable`` annotation, then label, default true) tasks of another job of the same queue whose
  job's priority is lower (plugins/priority ``preemptableFn``), evicted lowest priority first until the preemptor
  fits the node's ``FutureIdle``, then ``Statement.Pipeline``; the job's statement is committed only when the job
  is pipelined (``JobPipelined``), else discarded. The "between tasks within a job" pass is not modelled.
* Reclaim — ``pkg/scheduler/actions/reclaim/reclaim.go``: the same starving jobs and non-gated tasks, in a queue
  not overused; victims are Running preemptable tasks of other queues whose ``spec.reclaimable`` is not false and
  that the plugins' ``ReclaimableFn`` offers (proportion/capacity: a queue above its deserved share — not
  modelled: ``reclaimable`` says which tasks they would offer), evicted until the task fits ``FutureIdle``.
* Evictions — ``Statement.Evict`` (framework/statement.go) marks the victim Releasing and calls
  ``DeallocateFunc``; at commit the cache deletes the pod (``cache.Evict``).
* Watch lag — ``settle`` False: a session does not wait for the extender's watch to show the last session's
  binds and phases (the bind→watch window of a real cluster), nor for the gate's lifts.
* Timeouts — ``http_timeout``: Volcano's ``extender.httpTimeout`` (the shipped 500ms); a slower answer is a
  transport error.

Simplifications (each documented where it applies): queues are taken in creation order, jobs by priority then in
creation order (the tie order of ``QueueOrderFn``/``JobOrderFn`` once priorities are equal), the best-scored node is
the first in name order among equal scores (``SelectBestNodeAndScore`` picks at random among them), priorities are
the pods' ``spec.priority`` and the PodGroups' ``priorityClassName`` looked up in ``priority_classes`` (Volcano's
cache reads PriorityClasses), the value each JobInfo sent to the extender carries as ``Priority``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from polling import eventually
from volcano_payloads import (
    ALLOCATED,
    PENDING,
    PIPELINED,
    RELEASING,
    RUNNING,
    job_info,
    node_info,
    queue_info,
    session_open,
    task_info,
)

from cardquota.core.quantity import parse_quantity
from cardquota.core.scheduling.extender import Extender

Manifest = dict[str, Any]
Voter = Callable[[Manifest], int]
"""A fake ``jobEnqueueable`` plugin next to the extender: the PodGroup → −1 reject, 0 abstain, 1 permit."""
EXTENDER = "extender"

GENEROUS_TIMEOUT = 10.0
"""Far above Volcano's ``extender.httpTimeout`` (the shipped 500ms), for scenarios about verdicts, not time: on a
loaded test machine an answer can take longer than 500 ms, and under ``ignorable: false`` that reads as a refusal."""
SHIPPED_TIMEOUT = 0.5
"""``extender.httpTimeout: 500ms`` of the shipped entry (manifests/components/extender/extender-plugin.conf)."""
PREEMPTABLE = "volcano.sh/preemptable"
BIND_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
PODGROUPS = "/apis/scheduling.volcano.sh/v1beta1/podgroups"


UNCONFIGURED: dict[str, Manifest] = {
    "predicate": {"status": "", "code": 0}, "prioritize": {"nodeScore": {}, "errorMessage": ""},
    "jobEnqueueable": {"status": 0}, "queueOverused": {"overused": False}, "jobReady": {"status": True},
    "allocateFunc": {"errorMessage": ""}}
"""What the scheduler makes of a verb the stanza does not name: no predicate (the node passes), no scores, no vote
(abstain), never overused, ready as the gang says, no allocation hook."""


def milli(quantity: object) -> int:
    """A Kubernetes quantity in thousandths (CPU ``500m`` → 500, ``2`` → 2000; cards 1 → 1000, as Volcano's
    ``Resource`` keeps scalars; memory ``1Gi`` → 1073741824000)."""
    return int(parse_quantity(quantity) * 1000)


def requests(pod: Manifest) -> dict[str, int]:
    """CPU, memory and extended resources the pod asks, milli (a limit alone is the request, as Kubernetes defaults
    it)."""
    total: dict[str, int] = {}
    for container in pod["spec"].get("containers", []):
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in asked.items():
            if name in ("cpu", "memory") or "/" in name:
                total[name] = total.get(name, 0) + milli(value)
    return total


def preemptable(pod: Manifest) -> bool:
    """``api.GetPodPreemptable`` (pkg/scheduler/api/pod_info.go, v1.15.1): the annotation, then the label, default
    true; a value that is not a Go bool is false."""
    for where in ("annotations", "labels"):
        value = (pod["metadata"].get(where) or {}).get(PREEMPTABLE)
        if value is not None:
            return str(value) in ("1", "t", "T", "TRUE", "true", "True")
    return True


def fits(asked: dict[str, int], free: dict[str, int]) -> bool:
    return all(amount <= free.get(name, 0) for name, amount in asked.items())


@dataclass
class Task:
    pod: Manifest
    job: str
    status: int = PENDING
    node: str = ""

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def key(self) -> str:
        return f"{self.pod['metadata']['namespace']}/{self.name}"

    @property
    def gated(self) -> bool:
        """``SchGated``: the pod carries a scheduling gate (Volcano's own is not modelled)."""
        return bool(self.pod["spec"].get("schedulingGates"))

    @property
    def priority(self) -> int:
        return int(self.pod["spec"].get("priority") or 0)

    @property
    def best_effort(self) -> bool:
        return not requests(self.pod)

    def info(self) -> Manifest:
        body = task_info(self.pod, status=self.status, node=self.node)
        asked = requests(self.pod)
        body["Resreq"] = body["InitResreq"] = {
            "MilliCPU": float(asked.get("cpu", 0)), "Memory": asked.get("memory", 0) / 1000,
            "ScalarResources": {name: float(value) for name, value in asked.items() if name not in ("cpu", "memory")}}
        body["BestEffort"] = self.best_effort
        body["Priority"] = self.priority
        body["Preemptable"] = preemptable(self.pod)
        return body


@dataclass
class Job:
    podgroup: Manifest
    tasks: list[Task] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.podgroup['metadata']['namespace']}/{self.podgroup['metadata']['name']}"

    @property
    def phase(self) -> str:
        return str((self.podgroup.get("status") or {}).get("phase", "Pending"))

    @property
    def min_available(self) -> int:
        return int(self.podgroup["spec"].get("minMember", 1))

    def ready(self) -> bool:
        """gang's ``IsReady``: tasks in an allocated status (``api.AllocatedStatus``) reach ``MinAvailable``."""
        return sum(task.status != PENDING and task.status != PIPELINED for task in self.tasks) >= self.min_available

    def starving(self) -> bool:
        """``Session.JobStarving`` with the shipped tier (gang's ``IsStarving`` and priority's): ready and pipelined
        tasks below ``minAvailable`` and below the task count."""
        placed = sum(task.status != PENDING for task in self.tasks)
        return placed < self.min_available and placed < len(self.tasks)

    def pipelined(self) -> bool:
        """gang's ``IsPipelined``: allocated and pipelined (waiting) tasks reach ``MinAvailable``."""
        return sum(task.status != PENDING for task in self.tasks) >= self.min_available

    def info(self, priority: int = 0) -> Manifest:
        """The JobInfo of the job whose priority is ``priority`` (``JobInfo.Priority``: Volcano's cache sets it
        from the PodGroup's PriorityClass, ``cloneJob`` in pkg/scheduler/cache/cache.go, v1.15.1)."""
        body = job_info(self.podgroup, [])
        body["Priority"] = priority
        body["Tasks"] = {f"uid-{task.name}": task.info() for task in self.tasks}
        return body


@dataclass
class Placement:
    pod: str
    node: str
    how: str
    """``allocated`` (committed: bound at close) or ``pipelined`` (not committed)."""


class VolcanoReplay:
    """Volcano's scheduler, one session at a time: ``open_session()``, ``enqueue()``, ``allocate()``, ``backfill()``,
    ``close_session()``. ``tiers`` lists the ``jobEnqueueable`` voters tier by tier (:data:`EXTENDER` for the
    served extender, or a :data:`Voter`); ``managed_resources`` is ``extender.managedResources`` (empty: every
    task)."""

    def __init__(self, api_url: str, extender_url: str, extender: Extender, http: aiohttp.ClientSession, *,
                 managed_resources: Iterable[str] = (), tiers: Sequence[Sequence[str | Voter]] = ((EXTENDER,),),
                 ignorable: bool = False, job_enqueued: bool = False, verbs: Iterable[str] | None = None,
                 http_timeout: float = GENEROUS_TIMEOUT, settle: bool = True,
                 on_verb: Callable[[str], None] | None = None, priority_classes: dict[str, int] | None = None,
                 reclaimable: Callable[[Task], bool] = lambda task: False) -> None:
        self.api_url = api_url.rstrip("/")
        self.extender_url = extender_url.rstrip("/")
        self.extender = extender
        self.http = http
        self.managed = set(managed_resources)
        self.tiers = tiers
        self.ignorable = ignorable
        self.job_enqueued = job_enqueued
        """Whether ``extender.jobEnqueuedVerb`` is configured (Volcano's master branch): the enqueue action then
        calls it for every job it enqueues, right after the vote (pkg/scheduler/actions/enqueue/enqueue.go
        ``Execute`` → ``ssn.JobEnqueued``; plugins/extender/extender.go registers it when the verb is set; master
        ed72c7c8 — v1.15.1 has neither)."""
        self.verbs = None if verbs is None else frozenset(verbs)
        """The verbs the ``extender`` arguments name (None: every one); the others are never sent."""
        self.http_timeout = aiohttp.ClientTimeout(total=http_timeout)
        self.settles = settle
        """Whether a session waits for the extender's watch to show the API server (False: the watch may lag)."""
        self.on_verb = on_verb
        """Called with each verb before it is sent (a scenario moves the extender's clock: a long session)."""
        self.priority_classes = dict(priority_classes or {})
        self.reclaimable = reclaimable
        """The tasks of other queues the plugins' ``ReclaimableFn`` would offer (proportion, capacity)."""
        self.evicted: list[str] = []
        """Every task evicted by preempt or reclaim (namespace/name), in order."""
        self.calls: list[tuple[str, Manifest, Manifest]] = []
        """Every verb sent: (verb, body, answer)."""
        self.jobs: dict[str, Job] = {}
        self.nodes: dict[str, Manifest] = {}
        self.queues: dict[str, Manifest] = {}
        self.node_tasks: dict[str, list[Task]] = {}
        self.enqueued: set[str] = set()
        self.committed: list[Task] = []
        self.sessions = 0
        """Sessions opened so far (the clock of :meth:`bind_time`)."""

    def bind_time(self) -> str:
        """When this session's binds happen, as the API server stamps them (RFC 3339, seconds): a session is one
        second of the replay's own clock, from 2026-01-01T00:00:00Z."""
        return (BIND_EPOCH + timedelta(seconds=self.sessions)).strftime("%Y-%m-%dT%H:%M:%SZ")

    # ------------------------------------------------------------------------------------------ the API server

    async def api(self, method: str, path: str, body: object = None) -> Any:
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
        async with self.http.request(method, f"{self.api_url}{path}", json=body, headers=headers) as response:
            assert response.status < 300, f"{method} {path}: {response.status} {await response.text()}"
            return await response.json()

    async def items(self, path: str) -> list[Manifest]:
        return list((await self.api("GET", path)).get("items") or [])

    async def create(self, manifest: Manifest) -> None:
        """Creates an object in the API server (the extender sees it through its watch before the next session)."""
        kind, namespace = manifest["kind"], manifest["metadata"].get("namespace")
        path = {"Pod": f"/api/v1/namespaces/{namespace}/pods", "Node": NODES, "Queue": QUEUES,
                "PodGroup": f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups"}[kind]
        await self.api("POST", path, manifest)

    async def delete_pod(self, namespace: str, name: str) -> None:
        """Deletes the pod (its finalizers dropped first: a terminating pod is kept in kmock by one) and waits until
        the extender's watch no longer shows it."""
        await self.remove_pod(namespace, name)

        def gone() -> bool:
            return self.extender.session is not None and (namespace, name) not in self.extender.session.pods

        await eventually(gone)

    async def remove_pod(self, namespace: str, name: str) -> None:
        """Deletes the pod at once (its finalizers dropped first: kmock keeps a terminating pod with one)."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        await self.api("PATCH", path, {"metadata": {"finalizers": None}})
        async with self.http.delete(f"{self.api_url}{path}"):
            pass

    # ----------------------------------------------------------------------------------------------- verbs

    async def send(self, verb: str, body: Manifest) -> Manifest:
        """POSTs a verb; a transport error (refused, reset, no answer in time, not 200) is answered as Volcano's
        plugin treats it under ``extender.ignorable`` (``OnSessionOpen``'s closures and ``addEventHandler``). A verb
        not configured is not sent: answered as the plugin's absence is (:data:`UNCONFIGURED`)."""
        if self.verbs is not None and verb not in self.verbs:
            return dict(UNCONFIGURED.get(verb, {}))
        if self.on_verb is not None:
            self.on_verb(verb)
        try:
            async with self.http.post(f"{self.extender_url}/{verb}", data=json.dumps(body), timeout=self.http_timeout,
                                      headers={"Content-Type": "application/json"}) as response:
                if response.status != 200:
                    raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
                answer: Manifest = await response.json()
        except (aiohttp.ClientError, TimeoutError) as error:
            answer = self.transport_error(verb, error)
        self.calls.append((verb, body, answer))
        return answer

    def transport_error(self, verb: str, error: BaseException) -> Manifest:
        """What the verb's caller in the plugin makes of a transport error: ignorable → the node passes, no scores,
        permit, not overused, not ready, the allocation stands; else the node is filtered, scoring fails, reject,
        overused, ready (as upstream has it), the allocation is rolled back."""
        ignorable, failure = self.ignorable, f"transport error: {error!r}"
        return {
            "predicate": {"status": "" if ignorable else failure, "code": 0 if ignorable else 1},
            "prioritize": {"nodeScore": {}, "errorMessage": ""} if ignorable else {"errorMessage": failure},
            "jobEnqueueable": {"status": 1 if ignorable else -1},
            "queueOverused": {"overused": not ignorable},
            "jobReady": {"status": not ignorable},
            "allocateFunc": {"errorMessage": "" if ignorable else failure},
        }.get(verb, {})

    def interested(self, task: Task) -> bool:
        """``IsInterested``: no managedResources, or a container or init container naming one (requests/limits)."""
        if not self.managed:
            return True
        spec = task.pod["spec"]
        for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            resources = container.get("resources") or {}
            if self.managed & {*(resources.get("requests") or {}), *(resources.get("limits") or {})}:
                return True
        return False

    # --------------------------------------------------------------------------------------------- session

    async def open_session(self) -> None:
        """The snapshot Volcano's cache gives a session: nodes, queues, jobs (PodGroups) with their pods as tasks.
        ``onSessionOpen`` is sent when configured (the shipped entry does not: the extender watches the cluster)."""
        if self.settles:
            await self.settle()
        self.nodes = {n["metadata"]["name"]: n for n in await self.items(NODES)}
        self.queues = {q["metadata"]["name"]: q for q in await self.items(QUEUES)}
        self.jobs = {}
        for group in await self.items(PODGROUPS):
            job = Job(group)
            self.jobs[job.key] = job
        self.node_tasks = {name: [] for name in self.nodes}
        for pod in await self.items(PODS):
            namespace = pod["metadata"]["namespace"]
            group = (pod["metadata"].get("annotations") or {}).get("scheduling.k8s.io/group-name", "")
            task = Task(pod, f"{namespace}/{group}", node=pod["spec"].get("nodeName", ""))
            if task.node:
                task.status = RUNNING
                self.node_tasks.setdefault(task.node, []).append(task)
            if task.job in self.jobs:
                self.jobs[task.job].tasks.append(task)
        self.sessions += 1
        self.enqueued = set()
        self.committed = []
        self.evicting: list[Task] = []
        await self.send("onSessionOpen", session_open(
            list(self.nodes.values()), list(self.queues.values()), [job.podgroup for job in self.jobs.values()],
            {name: [task.pod for task in tasks] for name, tasks in self.node_tasks.items()},
            {job.podgroup["metadata"]["name"]: [task.pod for task in job.tasks] for job in self.jobs.values()}))

    def idle(self, node: str) -> dict[str, int]:
        """``NodeInfo.Idle``: allocatable less every task on the node but pipelined ones (``NodeInfo.AddTask``)."""
        free = requests({"spec": {"containers": [{"resources": {
            "requests": self.nodes[node]["status"].get("allocatable", {})}}]}})
        for task in self.node_tasks.get(node, []):
            if task.status != PIPELINED:
                for name, amount in requests(task.pod).items():
                    free[name] = free.get(name, 0) - amount
        return free

    def future_idle(self, node: str) -> dict[str, int]:
        """``NodeInfo.FutureIdle``: Idle plus Releasing (tasks of pods being deleted) less Pipelined."""
        free = self.idle(node)
        for task in self.node_tasks.get(node, []):
            releasing = task.status == RELEASING or task.pod["metadata"].get("deletionTimestamp")
            sign = +1 if releasing else -1 if task.status == PIPELINED else 0
            for name, amount in requests(task.pod).items():
                free[name] = free.get(name, 0) + sign * amount
        return free

    async def enqueue(self) -> dict[str, bool]:
        """The enqueue action: each Pending job → enqueued or not (in :meth:`ordered_jobs` order)."""
        decided: dict[str, bool] = {}
        for job in self.ordered_jobs():
            if job.phase != "Pending" or job.podgroup["spec"].get("queue") not in self.queues:
                continue
            permitted = job.podgroup["spec"].get("minResources") is None or await self.job_enqueueable(job)
            decided[job.key] = permitted
            if permitted:
                if self.job_enqueued:
                    await self.send("jobEnqueued", {"job": job.info(self.job_priority(job))})
                job.podgroup.setdefault("status", {})["phase"] = "Inqueue"
                self.enqueued.add(job.key)
        return decided

    async def job_enqueueable(self, job: Job) -> bool:
        for tier in self.tiers:
            permitted = False
            for voter in tier:
                if voter == EXTENDER:
                    body = {"job": job.info(self.job_priority(job))}
                    vote = int((await self.send("jobEnqueueable", body)).get("status", 0))
                else:
                    assert callable(voter)
                    vote = voter(job.podgroup)
                if vote < 0:
                    return False
                permitted = permitted or vote > 0
            if permitted:
                return True
        return True

    async def overused(self, queue: str) -> bool:
        answer = await self.send("queueOverused", {"queue": queue_info(self.queues[queue])})
        return bool(answer.get("overused", False))

    async def allocate(self) -> list[Placement]:
        """The allocate action; returns the placements it made (committed or pipelined)."""
        placements: list[Placement] = []
        pending = {name: [job for job in self.ordered_jobs() if job.podgroup["spec"].get("queue") == name
                          and job.phase != "Pending" and any(self.allocatable(t) for t in job.tasks)]
                   for name in self.queues}
        queues = [name for name in self.queues if pending[name]]
        worksheet = {job.key: [t for t in job.tasks if self.allocatable(t)]
                     for jobs in pending.values() for job in jobs}
        """The tasks each job has left to try in this action (``tasksNoHardTopology``): each is tried once."""
        while queues:
            queue = queues.pop(0)
            if await self.overused(queue):
                continue
            if not pending[queue]:
                continue
            job = pending[queue].pop(0)
            statement = await self.allocate_tasks(job, worksheet[job.key])
            if statement is not None and job.ready() and await self.job_ready(job):
                for task in statement:
                    if task.status == ALLOCATED:
                        self.committed.append(task)
                if worksheet[job.key]:  # tasks left when minAvailable < replicas: the job is put back
                    pending[queue].append(job)
            placements += [Placement(t.name, t.node, "allocated" if t.status == ALLOCATED else "pipelined")
                           for t in statement or []]
            queues.append(queue)
        return placements

    @staticmethod
    def allocatable(task: Task) -> bool:
        """A task allocate tries: Pending, not placed, not ``SchGated``, not BestEffort."""
        return task.status == PENDING and not task.node and not task.gated and not task.best_effort

    async def job_ready(self, job: Job) -> bool:
        return bool((await self.send("jobReady", {"job": job.info(self.job_priority(job))})).get("status", False))

    async def allocate_tasks(self, job: Job, tasks: list[Task]) -> list[Task] | None:
        """``allocateResourcesForTasks``: the statement's tasks, or None when it was discarded; ``tasks`` are
        popped as they are tried."""
        statement: list[Task] = []
        while tasks:
            task = tasks.pop(0)
            candidates = [name for name in sorted(self.nodes)
                          if fits(requests(task.pod), self.future_idle(name)) and await self.predicate(task, name)]
            if not candidates:
                break  # gang cannot be met by the tasks left (NeedContinueAllocating is false for a plain job)
            node = await self.best_node(task, candidates)
            if node is None:
                continue
            status = ALLOCATED if fits(requests(task.pod), self.idle(node)) else PIPELINED
            if await self.statement_allocate(task, node, status):
                statement.append(task)
            if job.ready():
                break
        if job.ready() or job.pipelined():
            return statement
        for task in reversed(statement):  # Statement.Discard
            await self.unallocate(task)
        return None

    async def predicate(self, task: Task, node: str) -> bool:
        if not self.interested(task):
            return True
        answer = await self.send("predicate", {"task": task.info(), "node": self.node_info(node)})
        return not answer.get("status")

    def node_info(self, node: str) -> Manifest:
        body = node_info(self.nodes[node], [])
        body["Tasks"] = {task.key: task.info() for task in self.node_tasks.get(node, [])}
        return body

    async def best_node(self, task: Task, candidates: list[str]) -> str | None:
        idle = [name for name in candidates if fits(requests(task.pod), self.idle(name))]
        for gradient in (idle, [name for name in candidates if name not in idle]):
            if len(gradient) == 1:
                return gradient[0]
            if len(gradient) > 1:
                if not self.interested(task):
                    return gradient[0]
                answer = await self.send("prioritize", {"task": task.info(),
                                                        "nodes": [self.node_info(name) for name in gradient]})
                scores = answer.get("nodeScore")
                if answer.get("errorMessage") or scores is None:
                    return None
                return max(gradient, key=lambda name: (scores.get(name, 0.0), -gradient.index(name)))
        return None

    async def statement_allocate(self, task: Task, node: str, status: int, *, rollback: bool = True) -> bool:
        """``Statement.Allocate``/``Pipeline``: the task on the node, ``AllocateFunc``; an error rolls it back
        (``rollback`` False: ``Session.Allocate``, which does not read the error)."""
        task.status, task.node = status, node
        if status == ALLOCATED:
            task.pod = copy.deepcopy(task.pod)
            task.pod["spec"]["nodeName"] = node
        self.node_tasks[node].append(task)
        if not self.interested(task):
            return True
        answer = await self.send("allocateFunc", {"task": task.info()})
        if answer.get("errorMessage") and rollback:
            await self.unallocate(task)
            return False
        return True

    async def unallocate(self, task: Task) -> None:
        """``unallocate``/``unPipeline``: status Pending, ``DeallocateFunc`` with the node still named."""
        task.status = PENDING
        self.node_tasks[task.node].remove(task)
        if self.interested(task):
            await self.send("deallocateFunc", {"task": task.info()})
        task.node = ""
        task.pod["spec"].pop("nodeName", None)

    async def backfill(self) -> list[Placement]:
        """The backfill action: BestEffort tasks (no requests) of non-pending jobs, first node passing."""
        placements: list[Placement] = []
        for job in self.jobs.values():
            if job.phase == "Pending":
                continue
            for task in [t for t in job.tasks if t.status == PENDING and not requests(t.pod) and not t.gated]:
                for node in sorted(self.nodes):
                    if await self.predicate(task, node) and await self.statement_allocate(task, node, ALLOCATED,
                                                                                           rollback=False):
                        self.committed.append(task)
                        placements.append(Placement(task.name, node, "allocated"))
                        break
        return placements

    # ------------------------------------------------------------------------------------ preempt and reclaim

    def job_priority(self, job: Job) -> int:
        """The job's priority: its PodGroup's ``priorityClassName`` as Volcano's cache resolves it (0 unknown)."""
        return self.priority_classes.get(str(job.podgroup["spec"].get("priorityClassName") or ""), 0)

    def ordered_jobs(self) -> list[Job]:
        """The jobs as ``ssn.JobOrderFn`` orders them in enqueue, allocate and preempt (the priority queues of
        actions/enqueue/enqueue.go ``Execute`` and the others): highest priority first (the priority plugin's
        ``jobOrderFn``, first in the default tiers), then creation order."""
        return sorted(self.jobs.values(), key=lambda job: -self.job_priority(job))

    def starving_jobs(self, queue: str) -> list[Job]:
        """Jobs of the queue that preempt and reclaim act for: not Pending, starving (``JobStarving``), in
        :meth:`ordered_jobs` order."""
        return [job for job in self.ordered_jobs() if job.podgroup["spec"].get("queue") == queue
                and job.phase != "Pending" and job.starving()]

    async def preempt(self) -> list[Placement]:
        """The preempt action, between jobs within a queue (see the module's notes)."""
        placements: list[Placement] = []
        for queue in self.queues:
            for job in self.starving_jobs(queue):
                def lower_in_queue(victim: Task, victim_job: Job, preemptor_job: Job = job, queue: str = queue) -> bool:
                    return (victim_job.podgroup["spec"].get("queue") == queue and victim_job is not preemptor_job
                            and self.job_priority(victim_job) < self.job_priority(preemptor_job))

                placements += await self.evict_for(job, lower_in_queue, preempt=True)
        return placements

    async def reclaim(self) -> list[Placement]:
        """The reclaim action (see the module's notes)."""
        placements: list[Placement] = []
        for queue in self.queues:
            if await self.overused(queue):
                continue
            def offered(victim: Task, victim_job: Job, queue: str = queue) -> bool:
                other = str(victim_job.podgroup["spec"].get("queue"))
                return (other != queue and self.queues[other]["spec"].get("reclaimable") is not False
                        and self.reclaimable(victim))

            for job in self.starving_jobs(queue):
                placements += await self.evict_for(job, offered, preempt=False)
        return placements

    async def evict_for(self, job: Job, eligible: Callable[[Task, Job], bool], *, preempt: bool) -> list[Placement]:
        """For each of the job's Pending tasks but the gated ones (highest priority first), victims on the first
        node (name order) where evicting them, lowest priority first, makes the task fit ``FutureIdle``; the task
        pipelined there. The job's statement is committed when it is pipelined, else discarded."""
        owner = {task.key: other for other in self.jobs.values() for task in other.tasks}
        statement: list[tuple[Task, list[Task]]] = []
        for task in sorted([t for t in job.tasks if t.status == PENDING and not t.node and not t.gated],
                           key=lambda t: -t.priority):
            if not job.starving():
                break
            if preempt and task.best_effort:
                continue  # (a BestEffort preemptor may evict BestEffort tasks only: none here)
            for node in sorted(self.nodes):
                if not await self.predicate(task, node):
                    continue
                victims = sorted([victim for victim in self.node_tasks.get(node, [])
                                  if victim.status == RUNNING and preemptable(victim.pod)
                                  and victim.key in owner and eligible(victim, owner[victim.key])],
                                 key=lambda victim: victim.priority)
                chosen: list[Task] = []
                while victims and not fits(requests(task.pod), self.future_idle(node)):
                    victim = victims.pop(0)
                    await self.evict(victim)
                    chosen.append(victim)
                if fits(requests(task.pod), self.future_idle(node)) and await self.statement_allocate(
                        task, node, PIPELINED):
                    statement.append((task, chosen))
                    break
                for victim in reversed(chosen):  # this node's statement discarded
                    await self.unevict(victim)
        if job.pipelined():
            for _, chosen in statement:
                self.evicting += chosen
            return [Placement(task.name, task.node, "pipelined") for task, _ in statement]
        for task, chosen in reversed(statement):  # Statement.Discard
            await self.unallocate(task)
            for victim in reversed(chosen):
                await self.unevict(victim)
        return []

    async def evict(self, victim: Task) -> None:
        """``Statement.Evict``: the victim Releasing (its resources in ``FutureIdle``), ``DeallocateFunc``."""
        victim.status = RELEASING
        if self.interested(victim):
            await self.send("deallocateFunc", {"task": victim.info()})

    async def unevict(self, victim: Task) -> None:
        """``Statement.unevict``: Running again, ``AllocateFunc``."""
        victim.status = RUNNING
        if self.interested(victim):
            await self.send("allocateFunc", {"task": victim.info()})

    async def close_session(self) -> None:
        """``onSessionClose``, then what Volcano's cache writes: committed tasks bound (and running), PodGroups
        enqueued → Inqueue, with ``minMember`` tasks bound → Running; the extender's watch is awaited. Tasks bound
        in this session are Binding when the phase is written, which ``ScheduledStatus`` does not count
        (pkg/scheduler/api/helpers.go; ``getPodGroupPhase`` in framework/session.go, v1.15.1): their job turns
        Running in the next session."""
        await self.send("onSessionClose", {})
        for victim in self.evicting:  # cache.Evict: the pod deleted
            await self.remove_pod(victim.pod["metadata"]["namespace"], victim.name)
            self.evicted.append(victim.key)
        for task in self.committed:  # cache.Bind: a Binding; the API server sets the node and PodScheduled
            namespace = task.pod["metadata"]["namespace"]
            conditions = [condition for condition in (task.pod.get("status") or {}).get("conditions") or []
                          if condition.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": self.bind_time()})
            await self.api("PATCH", f"/api/v1/namespaces/{namespace}/pods/{task.name}",
                           {"spec": {"nodeName": task.node}, "status": {"phase": "Running",
                                                                       "conditions": conditions}})
        for job in self.jobs.values():
            bound = sum(t.status == RUNNING for t in job.tasks)
            phase = "Running" if bound >= job.min_available and job.tasks else job.phase
            if phase == "Running" or job.key in self.enqueued:
                namespace, name = job.key.split("/", 1)
                await self.api("PATCH", f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups/"
                               f"{name}", {"status": {"phase": phase}})
        if self.settles:
            await self.settle()

    async def settle(self) -> None:
        """Until the extender's watch shows the API server's pods (and their nodes), PodGroups (phases),
        queues and nodes."""
        pods = await self.items(PODS)
        groups = await self.items(PODGROUPS)
        queues = await self.items(QUEUES)
        nodes = await self.items(NODES)

        def shown() -> bool:
            session = self.extender.session
            if session is None:
                return False
            for pod in pods:
                key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                watched = session.pods.get(key)
                if watched is None:
                    return False
                if pod["spec"].get("nodeName") and watched["spec"].get("nodeName") != pod["spec"]["nodeName"]:
                    return False
            podgroups = session.ledger.snapshot.podgroups
            for group in groups:
                key = (group["metadata"]["namespace"], group["metadata"]["name"])
                if key not in podgroups:
                    return False
                phase = (group.get("status") or {}).get("phase")
                if phase in ("Inqueue", "Running") and podgroups[key].phase != phase:
                    return False
            return all(q["metadata"]["name"] in session.queue_specs for q in queues) and all(
                n["metadata"]["name"] in session.nodes for n in nodes)

        await eventually(shown)

    async def cycle(self, actions: Sequence[str] = ("enqueue", "allocate", "backfill")) -> list[Placement]:
        """One whole session with the given actions (Volcano's default: ``enqueue, allocate, backfill``; a
        configuration may add ``preempt`` and ``reclaim``)."""
        await self.open_session()
        placements: list[Placement] = []
        for action in actions:
            if action == "enqueue":
                await self.enqueue()
            else:
                placements += await {"allocate": self.allocate, "backfill": self.backfill, "preempt": self.preempt,
                                     "reclaim": self.reclaim}[action]()
        await self.close_session()
        return placements

