"""``cardquota simulate``: a workload replayed through enqueue and allocate on a cluster snapshot (pure).

Gang semantics as Volcano's: each PodGroup (a Volcano Job becomes one, with its tasks' pods) is enqueued first
(capacity-card job mode); an Inqueue group then places its pods in order — a pod goes to the feasible node with
the highest score (ties: the node name) — and keeps the placements only when at least ``minMember`` pods were
placed; otherwise they are undone and the group stays Inqueue. A pod without a PodGroup is its own group of one.
Everything runs in document order, so the result is deterministic for a given input.

With the card-quota gate (``card_gate``, as the manifests ship), a card pod is created gated (the rule the pod
webhook applies: :func:`~cardquota.core.gate.needs_gate`) and Volcano skips it until the gate is lifted; before a
group's pods are placed, the gate judges them (:func:`~cardquota.core.gate.gate_round`, this group only: its queue
and every ancestor, the gang together, an ``A|B`` request narrowed to the alternative chosen). Pods it lets through
are placed as above and hold their cards from then on, placed or not; the others keep the gate's sentence
(``waiting at the card-quota gate: …``) and count as waiting in the queues' usage.

**Preemption**: when the gate plans a preemption for the group (its queue's ``cardquota.io/preemption`` policy lets
it displace admitted units of the queue, :mod:`cardquota.core.preemption`), the evictions are listed
(:class:`~cardquota.core.evictions.Eviction`) and made: the victims' pods leave the simulated cluster, as the
Eviction API deletes them (their cards and node resources are released at once), a victim PodGroup left with fewer
than ``minMember`` pods scheduled goes back to Pending (``getPodGroupPhase`` in
pkg/scheduler/framework/session.go, Volcano v1.15.1), and the group is judged again: let through (marked admitted
by preemption), it is placed as above. What the victims' controllers do next (a Volcano Job's policies may restart
it) is not simulated. Under ``Never`` (the default) nothing of this happens.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from cardquota.core import keys
from cardquota.core.errors import InputError
from cardquota.core.evictions import Eviction, evictions
from cardquota.core.gate import HeadOfLine, gate_round, needs_gate
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.ledger import PODGROUP, QueueUsage
from cardquota.core.objects import Manifest, ObjectKey, Pod, PodGroup, effective_requests
from cardquota.core.quantity import format_quantity
from cardquota.core.scheduling.session import SchedulerConfig, Session
from cardquota.core.snapshot import ClusterSnapshot, Kind, kind_of, namespaces_snapshot, podgroup_as_created
from cardquota.core.workload_kinds import (
    NOT_CHECKED,
    RUNTIME_KINDS,
    TRAINER_GROUP,
    Gang,
    gang_of,
    not_checked_reason,
    pod_template_path,
)
from cardquota.core.workloads import TEMPLATE_PATHS, as_defaulted, count_of, gang_pod_counts, job_min_available

VOLCANO_JOB_API = "batch.volcano.sh/"
PODGROUP_API = "scheduling.volcano.sh/v1beta1"


@dataclass
class PodOutcome:
    node: str | None = None
    card_type: str | None = None
    gpu_indexes: dict[str, list[str]] = field(default_factory=dict)
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        result: dict[str, Any] = {"node": self.node, "cardType": self.card_type}
        if self.gpu_indexes:
            result["gpuIndexes"] = self.gpu_indexes
        if self.reason is not None:
            result["reason"] = self.reason
        return result


@dataclass
class GroupOutcome:
    phase: str
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"phase": self.phase} | ({"reason": self.reason} if self.reason else {})


@dataclass
class Simulation:
    placements: dict[str, PodOutcome]
    podgroups: dict[str, GroupOutcome]
    queues: dict[str, dict[str, Any]]
    """Each queue's usage after the run, as ``cardquota usage`` writes it (:meth:`QueueUsage.as_json`)."""
    usage: dict[str, QueueUsage] = field(default_factory=dict)
    not_simulated: list[str] = field(default_factory=list)
    """The workloads of the input whose pods the simulation cannot know, each named with the reason."""
    evictions: list[Eviction] = field(default_factory=list)
    """The evictions the card-quota gate's preemptions made, in order (none under the default policy, Never)."""

    def as_json(self) -> dict[str, Any]:
        return {"placements": {name: outcome.as_json() for name, outcome in self.placements.items()},
                "podgroups": {name: outcome.as_json() for name, outcome in self.podgroups.items()},
                "queues": self.queues} | ({"notSimulated": self.not_simulated} if self.not_simulated else {}) | (
            {"evictions": [eviction.as_json() for eviction in self.evictions]} if self.evictions else {})


REPLICATED = {("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet"), ("batch", "Job")}
"""Built-in workloads whose pods the simulation creates as their controllers would: ``replicas`` pods (a batch Job:
``parallelism``, at most ``completions``), ``<name>-<index>``, with no PodGroup — vc-controller makes theirs later
(one per controller, ``podgroup-<owner UID>``, minMember 1: ``buildPodGroupFromPod``,
pkg/controllers/podgroup/pg_controller_handler.go, v1.15.1), so each pod is placed on its own, as a group of one."""


@dataclass
class Expansion:
    """A workload as the controllers create it: its manifests (PodGroups and pods in place of the workloads), the
    PodGroups whose pods are created only once they are enqueued, and the workloads that could not be expanded."""

    manifests: list[Manifest]
    gangs: set[ObjectKey]
    not_simulated: list[str]


def expand_volcano_jobs(workload: Iterable[Manifest]) -> list[Manifest]:
    """The workload with every Volcano Job replaced by its PodGroup and its tasks' pods (as the job controller
    would create them: ``<job>-<task>-<index>``, named in the group's ``scheduling.k8s.io/group-name``)."""
    return expand_workloads(list(workload)).manifests


def _prioritised(pod: Manifest, snapshot: ClusterSnapshot) -> Manifest:
    """A pod as the API server stores it on creation: without ``spec.priority``, given its ``priorityClassName``'s
    value, else the global default class's (the Priority admission plugin,
    plugin/pkg/admission/priority/admission.go, kubernetes/kubernetes v1.33; a class not in the input leaves it
    unset, read as 0 — the API server would refuse the pod)."""
    spec = pod.get("spec")
    if not isinstance(spec, MAPPING_TYPES) or "priority" in spec:
        return pod
    name = spec.get("priorityClassName")
    value = snapshot.priority_classes.get(name) if isinstance(name, str) and name else (
        snapshot.default_priority if not name else None)
    return pod if value is None or (not name and not value) else {**pod, "spec": {**spec, "priority": value}}


def expand_workloads(workload: Sequence[Manifest], known: Sequence[Manifest] = ()) -> Expansion:
    """Every workload replaced by what its controller creates: a Volcano Job by its PodGroup and its tasks' pods; a
    registered kind (:mod:`cardquota.core.workload_kinds`) on Volcano by the PodGroups and pods its operator
    creates; a Deployment, StatefulSet, ReplicaSet or batch Job by its pods (:data:`REPLICATED`). Any other
    workload with pods (a DaemonSet, a CronJob, a TrainJob whose runtime is in neither ``workload`` nor ``known``)
    is named, not simulated. A Trainer runtime creates nothing itself: it is read for the TrainJobs naming it."""
    expanded: list[Manifest] = []
    gangs: set[ObjectKey] = set()
    skipped: list[str] = []
    objects = (*workload, *known)  # (where a TrainJob's runtime is looked for)
    for manifest in workload:
        group = str(manifest.get("apiVersion", "")).rpartition("/")[0]
        kind = str(manifest.get("kind", ""))
        metadata = _map(manifest.get("metadata"))
        name, namespace = str(metadata.get("name", "")), str(metadata.get("namespace") or "default")
        volcano_job = kind == "Job" and str(manifest.get("apiVersion", "")).startswith(VOLCANO_JOB_API)
        gang = None if volcano_job or (group, kind) in REPLICATED else gang_of(manifest, objects)
        pods = _volcano_job_pods(manifest) if volcano_job else _replicas(manifest, kind) \
            if (group, kind) in REPLICATED else _gang_pods(gang) if gang is not None else 0
        if pods > MAX_EXPANDED_PODS:
            skipped.append(f"{kind} {namespace}/{name} ({pods:,} pods: simulate expands at most "
                           f"{MAX_EXPANDED_PODS:,} per workload)")
        elif volcano_job:
            expanded.extend(_volcano_job(manifest))
            gangs.add((namespace, name))
        elif (group, kind) in REPLICATED:
            expanded.extend(_replicated(manifest, kind, name, namespace))
        elif group == TRAINER_GROUP and kind in RUNTIME_KINDS:
            continue
        elif gang is not None:
            expanded.extend(_operator_gang(gang, name, namespace, gangs))
        elif (group, kind) in TEMPLATE_PATHS or (group, kind) in NOT_CHECKED or \
                (kind not in ("Pod", "PodGroup") and pod_template_path(manifest) is not None):
            reason = "one pod per node" if kind == "DaemonSet" else \
                "its pods come on schedule" if kind == "CronJob" else \
                not_checked_reason(manifest) or "cardquota does not know how its controller creates pods"
            skipped.append(f"{kind} {namespace}/{name} ({reason})")
        else:
            expanded.append(manifest)
    return Expansion(expanded, gangs, skipped)


def _volcano_job(manifest: Manifest) -> list[Manifest]:
    """A Volcano Job's PodGroup and its tasks' pods, as its job controller creates them."""
    expanded: list[Manifest] = []
    metadata = _map(manifest.get("metadata"))
    spec = _map(manifest.get("spec"))
    name, namespace = metadata.get("name", ""), metadata.get("namespace") or "default"
    raw_tasks = spec.get("tasks")
    tasks = [task for task in raw_tasks if isinstance(task, MAPPING_TYPES)] if isinstance(raw_tasks, list) else []
    group_annotations = {k: v for k, v in _map(metadata.get("annotations")).items() if k == keys.CARD_REQUEST}
    min_member = job_min_available(spec, tasks)
    group_spec: dict[str, Any] = {"queue": spec.get("queue") or keys.DEFAULT_QUEUE, "minMember": min_member}
    minimum = min_resources(tasks, min_member)
    if minimum:
        group_spec["minResources"] = minimum
    expanded.append({"apiVersion": PODGROUP_API, "kind": "PodGroup",
                     "metadata": {"name": name, "namespace": namespace, "annotations": group_annotations},
                     "spec": group_spec, "status": {"phase": "Pending"}})
    for task_index, task in enumerate(tasks):
        template = copy.deepcopy(_map(task.get("template")))
        pod_metadata = _map(template.get("metadata"))
        pod_spec = dict(_map(template.get("spec")))
        pod_spec.setdefault("schedulerName", spec.get("schedulerName") or "volcano")
        # unnamed: Volcano's Job mutation names it "default<index>" (mutate_job.go mutateSpec, v1.15.1)
        task_name = task.get("name") or f"default{task_index}"
        for index in range(_count(task.get("replicas"), 0)):
            annotations = {**_map(pod_metadata.get("annotations")), keys.GROUP_NAME: name}
            expanded.append({"apiVersion": "v1", "kind": "Pod",
                             "metadata": {**pod_metadata, "name": f"{name}-{task_name}-{index}",
                                          "namespace": namespace, "annotations": annotations},
                             "spec": copy.deepcopy(pod_spec)})
    return expanded


MAX_EXPANDED_PODS = 10_000
"""Pods one workload is expanded into at most: beyond, it is named, not simulated (its pods are built one by one,
and a Deployment of two billion replicas must not take the machine's memory)."""


def _replicas(manifest: Manifest, kind: str) -> int:
    """Pods a Deployment, StatefulSet or ReplicaSet runs (``replicas``, default 1), or a batch Job at once
    (``parallelism``, at most ``completions``)."""
    spec = _map(manifest.get("spec"))
    if kind == "Job":
        parallelism = _count(spec.get("parallelism"), 1)
        return min(parallelism, _count(spec.get("completions"), parallelism))
    return _count(spec.get("replicas"), 1)


def _volcano_job_pods(manifest: Manifest) -> int:
    tasks = _map(manifest.get("spec")).get("tasks")
    return sum(_count(task.get("replicas"), 0) for task in tasks if isinstance(task, MAPPING_TYPES)) \
        if isinstance(tasks, list) else 0


def _gang_pods(gang: Gang) -> int:
    return sum(shape.copies * sum(role.pods for role in shape.roles if role.in_gang) for shape in gang.groups)


def _replicated(manifest: Manifest, kind: str, name: str, namespace: str) -> list[Manifest]:
    template = _map(_map(manifest.get("spec")).get("template"))
    pod_metadata = _map(template.get("metadata"))
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {**copy.deepcopy(dict(pod_metadata)), "name": f"{name}-{index}", "namespace": namespace},
             "spec": as_defaulted(copy.deepcopy(dict(_map(template.get("spec")))))}
            for index in range(_replicas(manifest, kind))]


def _operator_gang(gang: Gang, name: str, namespace: str, gangs: set[ObjectKey]) -> list[Manifest]:
    """A registered kind's PodGroups and pods as its operator creates them on Volcano (each pod named in its
    group's ``scheduling.k8s.io/group-name``, with the operator's ``schedulerName`` where the template names none);
    off Volcano, its pods alone."""
    expanded: list[Manifest] = []
    for shape in gang.groups:
        members = [role for role in shape.roles if role.in_gang]
        tasks = [{"replicas": role.pods, "template": role.template} for role in members]
        for group_name in shape.names():
            if gang.volcano:
                group_spec: dict[str, Any] = {"queue": gang.queue or keys.DEFAULT_QUEUE,
                                              "minMember": shape.min_member}
                minimum = min_resources(tasks, shape.min_member)
                if minimum:
                    group_spec["minResources"] = minimum
                expanded.append({"apiVersion": PODGROUP_API, "kind": "PodGroup",
                                 "metadata": {"name": group_name, "namespace": namespace,
                                              "annotations": dict(gang.group_annotations)},
                                 "spec": group_spec, "status": {"phase": "Pending"}})
                gangs.add((namespace, group_name))
            for role in members:
                template = copy.deepcopy(dict(role.template))
                pod_metadata = _map(template.get("metadata"))
                pod_spec = dict(_map(template.get("spec")))
                annotations = dict(_map(pod_metadata.get("annotations")))
                if gang.volcano:
                    annotations[keys.GROUP_NAME] = group_name
                    if gang.scheduler is not None:
                        pod_spec.setdefault("schedulerName", gang.scheduler)
                pod_spec = as_defaulted(pod_spec)  # (the API server's default where nothing set it)
                for index in range(role.pods):
                    expanded.append({"apiVersion": "v1", "kind": "Pod",
                                     "metadata": {**pod_metadata, "name": f"{group_name}-{role.name.lower()}-{index}",
                                                  "namespace": namespace, "annotations": dict(annotations)},
                                     "spec": copy.deepcopy(pod_spec)})
    return expanded


def min_resources(tasks: Sequence[Mapping[str, Any]], min_available: int) -> dict[str, str]:
    """A Volcano Job's PodGroup ``spec.minResources`` as its job controller computes it (``calcPGMinResources``):
    the requests of the gang's pods (:func:`gang_pod_counts`, which the Job policy's derived card.request uses too).
    Empty when a template cannot be read (the Job policy refuses it)."""
    shapes: list[dict[str, Fraction]] = []
    for task in tasks:
        try:
            shapes.append(effective_requests(_map(_map(task.get("template")).get("spec")), "spec"))
        except InputError:
            return {}
    counts = gang_pod_counts(tasks, min_available)
    total: dict[str, Fraction] = {}
    for requests, count in zip(shapes, counts, strict=True):
        for resource, amount in requests.items():
            total[resource] = total.get(resource, Fraction(0)) + amount * count
    return {resource: format_quantity(amount, binary=resource == "memory" or resource.startswith("hugepages-"))
            for resource, amount in total.items() if amount > 0}


def simulate(cluster: Sequence[Manifest], workload: Sequence[Manifest], config: SchedulerConfig | None = None,
             *, card_gate: bool = False, gate_order: HeadOfLine = HeadOfLine.BEST_EFFORT_FIFO) -> Simulation:
    # A Volcano Job's pods are created once its PodGroup is no longer Pending (the job controller's ``syncJob``,
    # pkg/controllers/job/job_controller_actions.go, v1.15.1): they take no part in its enqueue decision.
    # So are a registered kind's on Volcano (the training operator's ``DelayPodCreationDueToPodGroup``,
    # pkg/controller.v1/control/podgroup_control.go, v1.9.0), and here every operator's.
    expansion = expand_workloads(workload, cluster)
    jobs = expansion.gangs
    workload = expansion.manifests
    mapping = config is not None and config.map_namespace_queues
    namespaces = namespaces_snapshot([*cluster, *workload], map_namespace_queues=mapping)
    # created now: stored as Volcano's PodGroup mutation stores them
    groups = [podgroup_as_created(m, namespaces) for m in workload if kind_of(m) is Kind.PODGROUP]
    session = Session([*cluster, *(m for m in workload if kind_of(m) is Kind.NAMESPACE), *groups], config)
    gate = _Gate(session, gate_order) if card_gate else None
    workload = [_prioritised(m, session.ledger.snapshot) if kind_of(m) is Kind.POD else m for m in workload]

    def created_now(manifest: Manifest) -> ObjectKey:
        return gate.create(manifest) if gate is not None else session.add_pending(manifest)

    later = [m for m in workload if kind_of(m) is Kind.POD and _job_pod(m, jobs)]
    pods: list[ObjectKey] = [created_now(m) for m in workload if kind_of(m) is Kind.POD and not _job_pod(m, jobs)]
    for manifest in later:
        metadata = _map(manifest.get("metadata"))
        pods.append((str(metadata.get("namespace") or "default"), str(metadata.get("name", ""))))
    created: dict[ObjectKey, Manifest] = dict(zip(pods[len(pods) - len(later):], later, strict=True))
    placements: dict[str, PodOutcome] = {}
    podgroups: dict[str, GroupOutcome] = {}
    memo = RefusalMemo()
    members: dict[ObjectKey, list[ObjectKey]] = {}
    for key in pods:
        group_key = (key[0], str(_map(_map(created[key].get("metadata")).get("annotations")).get(keys.GROUP_NAME)))\
            if key in created else session.view(key).group_key
        members.setdefault(group_key if group_key is not None and group_key in session.ledger.snapshot.podgroups
                           else key, []).append(key)
    for manifest in groups:
        group = PodGroup.from_manifest(manifest)
        name = _name(group.key)
        refusal = session.enqueue_refusal(group) if group.phase in ("", "Pending") else None  # Inqueue: reserved
        if refusal is not None:
            podgroups[name] = GroupOutcome("Pending", refusal.message)
            for key in members.pop(group.key, []):
                placements[_name(key)] = PodOutcome(reason=f"PodGroup {name} is not enqueued: {refusal.message}")
            continue
        session.set_phase(manifest, "Inqueue")
        for key in members.get(group.key, []):
            if key in created:
                created_now(created[key])  # the job controller creates its pods now
        minimum = max(1, _count((manifest.get("spec") or {}).get("minMember"), 1))
        waiting = gate.judge(members.get(group.key, []), placements, podgroups) if gate is not None else None
        outcome = _place_gang(session, [key for key in members.pop(group.key, []) if not _gated(gate, key)],
                              minimum, placements, memo, waiting)
        podgroups[name] = outcome
        session.set_phase(manifest, outcome.phase)
    for keys_of_unit in members.values():  # pods without a PodGroup in the snapshot: groups of one
        if gate is not None:
            gate.judge(keys_of_unit, placements, podgroups)
        _place_gang(session, [key for key in keys_of_unit if not _gated(gate, key)], 1, placements, memo)
    usage = session.ledger.all_usage(card_unlimited_cpu_memory=session.config.capacity_card.card_unlimited_cpu_memory)
    return Simulation(placements, podgroups, {queue: entry.as_json() for queue, entry in usage.items()}, usage,
                      expansion.not_simulated, gate.evictions if gate is not None else [])


def created_at(second: int) -> str:
    """The creationTimestamp of the workload's ``second``-th pod: in the year 9000 (after anything the cluster holds),
    one second apart, in order (RFC 3339, as the gate compares them; the core reads no clock)."""
    days, rest = divmod(second, 86_400)
    return f"9000-01-{days + 1:02d}T{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}Z"


class _Gate:
    """The card-quota gate in a simulation: which pods carry it, and lifting it as the controller would."""

    def __init__(self, session: Session, order: HeadOfLine) -> None:
        self.session = session
        self.order = order
        self.gated: set[ObjectKey] = set()
        self.created = 0
        self.evictions: list[Eviction] = []

    def create(self, manifest: Manifest) -> ObjectKey:
        """The pod as the pod webhook admits it: gated when its queue's card quota will charge it, and created now
        (a creationTimestamp after every other pod's, in the workload's order: the gate's order within a
        priority)."""
        if needs_gate(Pod.from_manifest(manifest), self.session.ledger.snapshot):
            spec = dict(_map(manifest.get("spec")))
            gates = spec.get("schedulingGates")
            spec["schedulingGates"] = [*(gates if isinstance(gates, list) else []), {"name": keys.CARD_GATE}]
            metadata = dict(_map(manifest.get("metadata")))
            self.created += 1
            metadata["creationTimestamp"] = created_at(self.created)
            key = self.session.add_pending({**manifest, "metadata": metadata, "spec": spec})
            self.gated.add(key)
            return key
        return self.session.add_pending(manifest)

    def judge(self, pod_keys: Sequence[ObjectKey], placements: dict[str, PodOutcome],
              podgroups: dict[str, GroupOutcome]) -> str | None:
        """Lift the gate of those of ``pod_keys`` whose cards fit now (their card.name narrowed to the alternative
        chosen); the others get the gate's sentence. A preemption the gate plans for them is made first
        (:meth:`evict`) and they are judged again. Returns the first sentence (None when all went through)."""
        waiting = frozenset(key for key in pod_keys if key in self.gated)
        if not waiting:
            return None
        preempting: set[ObjectKey] = set()
        while True:  # (each pass evicts at least one victim, of a finite cluster)
            judged = waiting
            if self.order is HeadOfLine.STRICT_FIFO:  # the units still waiting in these queues hold them back
                queues = {self.session.queue_of(key) for key in waiting}
                judged = waiting | {key for key in self.gated if self.session.queue_of(key) in queues}
            decided = gate_round(self.session.ledger, head_of_line=self.order, only=judged, preempting=preempting)
            planned = [preemption for preemption in decided.preemptions
                       if waiting.intersection(preemption.pods) and preemption.victims]
            if not planned:
                break
            for preemption in planned:
                self.evict(evictions([preemption]), placements, podgroups)
                preempting.update(preemption.pods)
        for lift in decided.lifts:
            if lift.pod not in waiting:
                continue  # (a unit judged before: nothing was released since, it was only looked at for its place)
            manifest = self.session.pods[lift.pod]
            spec = dict(_map(manifest.get("spec")))
            spec["schedulingGates"] = [gate for gate in spec.get("schedulingGates") or []
                                       if not (isinstance(gate, MAPPING_TYPES) and gate.get("name") == keys.CARD_GATE)]
            metadata = dict(_map(manifest.get("metadata")))
            if lift.narrows:
                metadata["annotations"] = {**_map(metadata.get("annotations")), keys.CARD_NAME: lift.card_type,
                                           keys.CARD_NAME_REQUESTED: lift.card_name}
            if lift.by_preemption:  # (as the lift's patch marks it: not displaced by a unit of equal priority)
                metadata["annotations"] = {**_map(metadata.get("annotations")), keys.ADMITTED_BY_PREEMPTION: "true"}
            self.session.add_pending({**manifest, "metadata": metadata, "spec": spec})
            self.gated.discard(lift.pod)
        reasons = [wait.reason for wait in decided.waits if waiting.intersection(wait.pods)]
        for wait in decided.waits:
            for key in wait.pods:  # (in the unit's order: a set's would change with the hash seed)
                if key in waiting:
                    placements[_name(key)] = PodOutcome(reason=wait.reason)
        return reasons[0] if reasons else None

    def evict(self, victims: Sequence[Eviction], placements: dict[str, PodOutcome],
              podgroups: dict[str, GroupOutcome]) -> None:
        """The victims' pods deleted, as the Eviction API does (what they held is released at once: a pod being
        deleted counts as releasing at the gate); a victim PodGroup left with fewer than ``minMember`` pods
        scheduled goes back to Pending, as Volcano's ``getPodGroupPhase`` (pkg/scheduler/framework/session.go,
        v1.15.1) sets a group that is not Inqueue. Pods and PodGroups of the workload say why."""
        ledger = self.session.ledger
        for eviction in victims:
            self.evictions.append(eviction)
            said = f"evicted: {eviction.clause}"
            for key in eviction.pods:
                self.session.remove(key)
                if _name(key) in placements:
                    placements[_name(key)] = PodOutcome(reason=said)
            group = ledger.snapshot.podgroups.get(eviction.victim) if eviction.kind == PODGROUP else None
            if group is None:
                continue
            scheduled = sum(1 for key in ledger.group_pods(group.key)
                            if (pod := ledger.snapshot.pods.get(key)) is not None and pod.bound)
            if scheduled < group.min_member and group.phase != "Inqueue":
                self.session.set_group_phase(group.key, "Pending")
                if _name(group.key) in podgroups:
                    podgroups[_name(group.key)] = GroupOutcome("Pending", said)


def _gated(gate: _Gate | None, key: ObjectKey) -> bool:
    return gate is not None and key in gate.gated


def _place_gang(session: Session, pod_keys: list[ObjectKey], minimum: int,
                placements: dict[str, PodOutcome], memo: RefusalMemo, waiting: str | None = None) -> GroupOutcome:
    """Place the pods (past the gate, if any); ``waiting``: why the group's other pods wait at the gate (the group's
    reason when it cannot start)."""
    placed: list[ObjectKey] = []
    first_failure: str | None = None
    for key in pod_keys:
        outcome = place(session, key, memo)
        placements[_name(key)] = outcome
        if outcome.node is not None:
            placed.append(key)
        elif first_failure is None:
            first_failure = f"pod {_name(key)}: {outcome.reason}"
    if len(placed) >= minimum:
        return GroupOutcome("Running")
    for key in placed:  # the gang cannot start: nothing it took is kept
        session.deallocate(key)
        placements[_name(key)] = PodOutcome(reason=f"gang of {minimum} not satisfied ({len(placed)} placed)")
    reason = waiting or f"{len(placed)}/{minimum} pods could be placed; {first_failure or 'no pods'}"
    return GroupOutcome("Inqueue", reason)


class RefusalMemo:
    """What earlier pods of the same shape (spec, annotations, queue) found, reused only where it is exact:

    * the nodes that refused the shape, skipped while nothing has been released (allocations only ever fill nodes
      and queues, so such a node still refuses);
    * the reason nothing fits, reused while the session has not changed at all since.
    """

    def __init__(self) -> None:
        self._refused: dict[str, tuple[int, set[str]]] = {}
        self._reasons: dict[str, tuple[int, str]] = {}

    @staticmethod
    def shape(session: Session, key: ObjectKey) -> str:
        manifest = session.pods[key]
        spec = {name: value for name, value in (manifest.get("spec") or {}).items() if name != "nodeName"}
        return json.dumps([spec, (manifest.get("metadata") or {}).get("annotations"), session.queue_of(key)],
                          sort_keys=True, default=str)

    def refused(self, session: Session, shape: str) -> set[str]:
        releases, nodes = self._refused.get(shape, (-1, set()))
        if releases != session.releases:
            nodes = set()
            self._refused[shape] = (session.releases, nodes)
        return nodes

    def reason(self, session: Session, shape: str) -> str | None:
        version, reason = self._reasons.get(shape, (-1, ""))
        return reason if version == session.version else None

    def remember_reason(self, session: Session, shape: str, reason: str) -> None:
        self._reasons[shape] = (session.version, reason)


def place(session: Session, key: ObjectKey, memo: RefusalMemo | None = None) -> PodOutcome:
    """The best node for one pod now, allocated in the session; or why there is none."""
    refusal = session.task_refusal(key)
    if refusal is not None:
        return PodOutcome(reason=refusal.message)
    memo = memo or RefusalMemo()
    shape = memo.shape(session, key)
    known_reason = memo.reason(session, shape)
    if known_reason is not None:
        return PodOutcome(reason=known_reason)
    refused = memo.refused(session, shape)
    for group in session.preference_groups(key) or []:
        # Scores fall from one group to the next and are equal within one: the first node that fits wins, as a
        # full scan would choose it (highest score, then the node name).
        for candidate in group:
            if candidate in refused:
                continue
            if session.fit_refusal(key, candidate) is None and session.node_refusal(key, candidate) is None:
                return _placed(session, key, candidate)
            refused.add(candidate)
    best, reason = session.best_node(key)
    if best is None:
        memo.remember_reason(session, shape, reason)
        return PodOutcome(reason=reason)
    return _placed(session, key, best)


def _placed(session: Session, key: ObjectKey, node: str) -> PodOutcome:
    placement = session.allocate(key, node)
    indexes = {name.removeprefix(keys.GPU_INDEX_PREFIX): value.split(",")
               for name, value in placement.annotations.items() if name.startswith(keys.GPU_INDEX_PREFIX)}
    return PodOutcome(node=placement.node, card_type=placement.card_type, gpu_indexes=indexes)


def _map(value: object) -> Mapping[str, Any]:
    """A part of a manifest that should be a map, or an empty one (the Job policy refuses such jobs)."""
    return value if isinstance(value, MAPPING_TYPES) else {}


_count = count_of


def _name(key: ObjectKey) -> str:
    return f"{key[0]}/{key[1]}"


def _job_pod(manifest: Manifest, jobs: set[ObjectKey]) -> bool:
    """Whether ``manifest`` is a pod :func:`expand_volcano_jobs` made for one of ``jobs``."""
    metadata = _map(manifest.get("metadata"))
    group = _map(metadata.get("annotations")).get(keys.GROUP_NAME)
    return isinstance(group, str) and (str(metadata.get("namespace") or "default"), group) in jobs
