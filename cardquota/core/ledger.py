"""The queue ledger: per queue, the cards it may use (quota), holds (allocated), has reserved (inqueue) and
waits for (pending).

Rules (capacity-card-design.md):

* **quota** — the Queue's ``volcano.sh/card.quota``.
* a pod's **queue** — its PodGroup's ``spec.queue`` (PodGroup named by ``scheduling.k8s.io/group-name`` in the
  pod's namespace) once that exists, as Volcano's scheduler charges a task to its job's queue; else annotation
  ``scheduling.volcano.sh/queue-name`` (what Volcano's controller gives the pod's PodGroup); else ``default`` — which
  is the namespace's queue when Volcano maps namespaces to queues
  (:meth:`~cardquota.core.snapshot.ClusterSnapshot.queue_of`,
  :meth:`~cardquota.core.snapshot.ClusterSnapshot.volcano_queue`).
* **allocated**, **inqueue**, **pending** — what each pod and PodGroup charges its queue in cards, as
  :mod:`cardquota.core.usage` defines it (bound pods: the card types their nodes offer; Inqueue PodGroups: their
  card.request minus what their pods hold; unbound pods: their card resources, keyed by card.name as written).
* **cpu/memory** (the capacity-card plugin's CPU/memory quota, ``spec.capability``) — per PodGroup, as Volcano
  counts a job: *allocated* is what its bound pods request, *inqueue* (phase ``Inqueue`` only, like the cards) is
  its ``spec.minResources`` minus that, *elastic* is what it holds beyond ``minResources``; the enqueue check uses
  ``allocated + inqueue - elastic``. Kept twice, as the plugin counts with ``cardUnlimitedCpuMemory`` off and on
  (on: a card pod's cpu/memory is not counted, and a card job reserves none). Bound pods without a PodGroup are
  not counted here: Volcano gives every pod it schedules a PodGroup, so such pods are not the scheduler's.

The ledger is built from a full list or fed one watch event at a time: each event updates the totals by
subtracting the object's previous contribution and adding its new one. Only objects whose contribution really
depends on the changed one are recomputed (pods on a node that changed its card types, pods of a PodGroup that
changed queue, the PodGroup of a pod whose holdings changed). Each object recomputed, and each queue whose totals
or quota changed, is recorded in :attr:`Ledger.changes` (a :class:`~cardquota.core.changes.ChangeLog`), which the
publisher drains once a window.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, NamedTuple, TypeVar

from cardquota.core.changes import ChangeLog
from cardquota.core.dra_claims import DeviceAmounts, asked, is_claim, pod_request, unknown_ref
from cardquota.core.dra_claims import add as dra_add
from cardquota.core.keys import CARD_ALLOCATED, CARD_INQUEUE, CARD_PENDING, CARD_REQUEST, VOLCANO_SCHEDULERS
from cardquota.core.objects import (
    CPU_MEMORY,
    TERMINAL_POD_PHASES,
    Manifest,
    ObjectKey,
    Pod,
    PodGroup,
    PriorityClass,
    forget_shared,
    read_meta,
    share,
)
from cardquota.core.quantity import format_quantity
from cardquota.core.quota import canonical_key, card_request
from cardquota.core.snapshot import (
    DEFAULT_CARD_POLICY,
    CardPolicy,
    ClusterSnapshot,
    Kind,
    NodeRecord,
    QueueRecord,
    kind_of,
    namespace_queue,
    node_record,
    object_key,
    queue_record,
)
from cardquota.core.usage import (
    INQUEUE_PHASE,
    RUNNING_PHASE,
    SHARED_CARDS,
    SHARED_CHARGES,
    Bucket,
    Charge,
    group_charge,
    job_card_request,
    pod_charge,
    without_gated,
)
from cardquota.core.workload_kinds import runtime_key
from cardquota.core.workloads import template_only, workload_key

WAITING_PHASES = frozenset({"", "Pending"})
"""PodGroup phases before the scheduler's enqueue decision (the PodGroups whose events say why they wait)."""
BUILD_ORDER = (Kind.NAMESPACE, Kind.NODE, Kind.QUEUE, Kind.PODGROUP, Kind.POD)
IndexKey = TypeVar("IndexKey", str, ObjectKey)
AmountKey = TypeVar("AmountKey", str, Bucket, ObjectKey)
PODGROUP = "PodGroup"
POD = "Pod"
HeldUnit = tuple[str, str, str]
"""A unit holding cards, as (kind, namespace, name): a PodGroup, or a pod naming none."""
KeySet = dict[ObjectKey, None]
"""A set of object keys kept as a dict's keys: per member about half a set's memory at the sizes of a job's pods
and a node's (8 keys: 352 bytes vs 728; 20: 632 vs 2,264), the same O(1) add, remove and membership."""


class _DraHold(NamedTuple):
    """What one pod holds of DRA devices, as counted in its queue."""

    queue: str
    own: DeviceAmounts
    """What the templates it names ask (a claim made from a template is the pod's own)."""
    named: tuple[ObjectKey, ...]
    """The ResourceClaims it names: counted once per queue, however many of its pods share one."""
    complete: bool
    """Every claim and template the pod names was known when this was read."""


ZERO = Fraction(0)
CARD_UNLIMITED_CASES = (False, True)
"""The two ways the capacity-card plugin counts cpu/memory: ``cardUnlimitedCpuMemory`` off, on."""


@dataclass(frozen=True)
class CpuMemoryUse:
    """A queue's cpu (cores) and memory (bytes) as the capacity-card plugin counts them at enqueue."""

    allocated: Mapping[str, Fraction]
    inqueue: Mapping[str, Fraction]
    elastic: Mapping[str, Fraction]

    def used(self, resource: str) -> Fraction:
        """``allocated + inqueue - elastic`` (the seed's "total to be used" without the job itself)."""
        return (self.allocated.get(resource, ZERO) + self.inqueue.get(resource, ZERO)
                - self.elastic.get(resource, ZERO))


@dataclass(frozen=True)
class CpuMemoryUsage:
    """The cpu/memory lines of a queue with a ``spec.capability``: the quota, and what counts against it."""

    capability: Mapping[str, Fraction]
    use: CpuMemoryUse

    def as_json(self) -> dict[str, dict[str, str]]:
        def quantities(amounts: Mapping[str, Fraction]) -> dict[str, str]:
            return {resource: format_quantity(amounts.get(resource, ZERO), binary=resource == "memory")
                    for resource in CPU_MEMORY}

        return {"capability": quantities(self.capability), "allocated": quantities(self.use.allocated),
                "inqueue": quantities(self.use.inqueue), "elastic": quantities(self.use.elastic)}


@dataclass(frozen=True)
class SubtreeUsage:
    """A parent queue's cards together with every queue below it (``spec.parent``): what its ``card.quota`` holds
    them to (the card-quota gate checks every ancestor)."""

    allocated: Mapping[str, int]
    inqueue: Mapping[str, int]
    pending: Mapping[str, int]
    waiting: Mapping[str, int]
    queues: tuple[str, ...]
    """The queues counted: the parent and its descendants, in name order."""

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"queues": list(self.queues), "allocated": dict(self.allocated),
                                    "inqueue": dict(self.inqueue), "pending": dict(self.pending)}
        if self.waiting:
            document["waiting"] = dict(self.waiting)
        return document


@dataclass(frozen=True)
class QueueUsage:
    quota: Mapping[str, int]
    allocated: Mapping[str, int]
    inqueue: Mapping[str, int]
    pending: Mapping[str, int]
    cpu_memory: CpuMemoryUsage | None = None
    """Only for a queue with a cpu/memory ``spec.capability`` (see :meth:`Ledger.usage`)."""
    waiting: Mapping[str, int] = field(default_factory=dict)
    """Of :attr:`pending`, the cards of the pods waiting at the card-quota gate (the rest is past it: admitted,
    held against the quota, not placed yet)."""
    subtree: SubtreeUsage | None = None
    """For a queue with queues below it (:meth:`Ledger.all_usage` only): the totals of its whole subtree."""

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "quota": dict(self.quota),
            "allocated": dict(self.allocated),
            "inqueue": dict(self.inqueue),
            "pending": dict(self.pending),
        }
        if self.waiting:  # (only where pods wait at the card-quota gate)
            document["waiting"] = dict(self.waiting)
        if self.subtree is not None:
            document["subtree"] = self.subtree.as_json()
        if self.cpu_memory is not None:
            document["cpuMemory"] = self.cpu_memory.as_json()
        return document


class PodCpuMemory(NamedTuple):
    """What one pod of a PodGroup adds to the group's cpu/memory: its requests when bound (millicores, bytes: whole
    numbers, so that a pod event costs integer additions), and whether it uses cards (a card pod's cpu/memory is not
    counted under ``cardUnlimitedCpuMemory``)."""

    group: ObjectKey
    cards: bool
    milli_cpu: int
    memory: int


@dataclass
class GroupHeld:
    """The cpu/memory a PodGroup's bound pods request, card pods apart, and how many of its pods use cards."""

    plain_cpu: int = 0
    plain_memory: int = 0
    card_cpu: int = 0
    card_memory: int = 0
    card_pods: int = 0

    def add(self, pod: PodCpuMemory, sign: int) -> None:
        if pod.cards:
            self.card_cpu += sign * pod.milli_cpu
            self.card_memory += sign * pod.memory
            self.card_pods += sign
        else:
            self.plain_cpu += sign * pod.milli_cpu
            self.plain_memory += sign * pod.memory

    @property
    def empty(self) -> bool:
        return not (self.card_pods or self.plain_cpu or self.plain_memory or self.card_cpu or self.card_memory)


_POD_CPU_MEMORY: dict[PodCpuMemory, PodCpuMemory] = {}
"""Equal :class:`PodCpuMemory` values (the pods of a job) as one tuple (bounded, as
:data:`~cardquota.core.usage.SHARED_CHARGES`)."""

_HOLDING_SLOTS: dict[tuple[str | None, str], tuple[str | None, str]] = {}
"""The (pod card.name, card type) keys of the PodGroups' holdings, one tuple each (few distinct ones, held by
every PodGroup with bound pods)."""

Amounts = tuple[int, ...]
"""Per case of :data:`CARD_UNLIMITED_CASES`: allocated cpu, allocated memory, inqueue cpu, inqueue memory, elastic
cpu, elastic memory (millicores, bytes) — twelve whole numbers."""
GroupContribution = tuple[str, Amounts]
"""(the PodGroup's queue, what it adds there)."""
NOTHING: Amounts = (0,) * 6 * len(CARD_UNLIMITED_CASES)


def milli(amount: Fraction) -> int:
    """Millicores, rounded up (Kubernetes' resolution for cpu)."""
    return -(-(amount.numerator * 1000) // amount.denominator)


def _whole(amount: Fraction) -> int:
    return -(-amount.numerator // amount.denominator)


def published_amounts(annotations: Mapping[str, str], name: str) -> dict[str, int]:
    """Cards per card type as the controller published them in the annotation ``name`` (canonical JSON, see
    core/publish.py), sorted; empty when the annotation is absent or not such an object (written by hand, or by an
    older release): a published figure only ever adds warnings, so an unreadable one adds none. Entries the
    controller grouped to fit the Queue's annotations (``"(N more)": cards``, core/publish.py) are read as one more
    name, which matches no card type."""
    try:
        amounts = json.loads(annotations.get(name) or "{}")
    except (ValueError, RecursionError):
        return {}
    if not isinstance(amounts, dict) or not all(
            isinstance(amount, int) and not isinstance(amount, bool) and amount >= 0 for amount in amounts.values()):
        return {}
    return _sorted(amounts)


@dataclass
class Ledger:
    """Per-queue card accounting over a :class:`ClusterSnapshot`, kept current one event at a time."""

    snapshot: ClusterSnapshot = field(default_factory=ClusterSnapshot)
    _pod_charges: dict[ObjectKey, Charge] = field(default_factory=dict)
    _group_charges: dict[ObjectKey, Charge] = field(default_factory=dict)
    _totals: dict[str, dict[Bucket, dict[str, int]]] = field(default_factory=dict)
    _pods_by_node: dict[str, KeySet] = field(default_factory=dict)
    _pods_by_group: dict[ObjectKey, KeySet] = field(default_factory=dict)
    _group_holdings: dict[ObjectKey, dict[tuple[str | None, str], int]] = field(default_factory=dict)
    """Per PodGroup: cards its bound pods hold, by (pod card.name, card type) — small, whatever the group size."""
    _group_pending: dict[ObjectKey, dict[str, int]] = field(default_factory=dict)
    _group_gated: dict[ObjectKey, dict[str, int]] = field(default_factory=dict)
    """Per PodGroup: cards its pods waiting at cardquota's gate ask, by card name (read as :func:`canonical_key`):
    left out of its reservation (:func:`~cardquota.core.usage.group_charge`)."""
    """Per PodGroup: cards its unbound pods wait for, by card name (read as :func:`canonical_key`)."""
    _cluster_resource_dependents: KeySet = field(default_factory=dict)
    _card_resource_refs: dict[str, int] = field(default_factory=dict)
    _pending_by_queue: dict[str, set[ObjectKey]] = field(default_factory=dict)
    _pod_cpu_memory: dict[ObjectKey, PodCpuMemory] = field(default_factory=dict)
    _group_held: dict[ObjectKey, GroupHeld] = field(default_factory=dict)
    _group_cpu_memory: dict[ObjectKey, GroupContribution] = field(default_factory=dict)
    _cpu_memory_totals: dict[str, Amounts] = field(default_factory=dict)
    """Per queue, its PodGroups' :data:`Amounts` added up."""
    _groups_with_extended_minimum: set[ObjectKey] = field(default_factory=set)
    """PodGroups whose minResources name a resource other than cpu/memory: card jobs when nodes offer it as cards."""
    _waiting_by_queue: dict[str, set[ObjectKey]] = field(default_factory=dict)
    """Per queue, its PodGroups in a :data:`WAITING_PHASES` phase."""
    _admitted: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per queue, the cards of its unbound card pods past cardquota's gate (or created without it), by card name
    as written: with the allocated bucket, what the queue holds for the gate (:meth:`held_cards`)."""
    _gated_by_queue: dict[str, set[ObjectKey]] = field(default_factory=dict)
    """Per queue, its card pods waiting at cardquota's gate."""
    _held_units: dict[str, dict[HeldUnit, int]] = field(default_factory=dict)
    """Per queue, the units holding its cards (a PodGroup, or a pod naming none), each with how many of its pods do
    (bound, or past the gate): what preemption chooses victims among (:meth:`held_units`). Per PodGroup, not per
    pod: a job's pods cost one entry."""
    _held_versions: dict[str, int] = field(default_factory=dict)
    """Per queue, a count that changes whenever a pod holding its cards (or a PodGroup of its) is added, changed or
    removed (:meth:`held_version`)."""
    memos: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """What rules derive from this ledger and keep between calls, by rule (e.g. the admitted units preemption weighs,
    :func:`cardquota.core.preemption.admitted_memo`): each checks the versions it read before reusing what it keeps."""
    _claiming_gated: KeySet = field(default_factory=dict)
    """The unbound pods naming DRA claims that carry cardquota's gate (what a round judges for the DRA quotas)."""
    _pods_by_claim: dict[ObjectKey, KeySet] = field(default_factory=dict)
    """The pods naming each claim or template: (namespace, kind, name) → pods."""
    _dra_holds: dict[ObjectKey, _DraHold] = field(default_factory=dict)
    """Per pod holding DRA devices (bound or past the gate, not ended, charged to a queue): its queue and what its
    claims ask, as added to :attr:`_dra_held` (taken back exactly)."""
    _claim_counts: dict[ObjectKey, dict[str, list[Any]]] = field(default_factory=dict)
    """Per ResourceClaim, per queue whose pods hold it: [how many of them, the amounts counted for it there]."""
    _dra_unread: dict[ObjectKey, str] = field(default_factory=dict)
    """Pods holding DRA devices that name a claim or template not known (the watch has not brought it, or it is
    gone) and whose full request was never read: their queue. The gate holds back pods sharing a quota with them."""
    _dra_held: dict[str, DeviceAmounts] = field(default_factory=dict)
    """Per queue, the DRA devices its own pods hold (kept as pods and claims change: a round does not add them up)."""
    changes: ChangeLog = field(default_factory=ChangeLog, repr=False)
    """The queues, nodes, PodGroups and pods touched since the publisher last drained it."""
    published_usage: bool = False
    """Answer :meth:`usage` and :meth:`queue_use` from what the controller last published on each Queue
    (``volcano.sh/card.allocated`` / ``.inqueue`` / ``.pending``), not from pods: for a process that follows no
    pods (``cardquota operator --role webhook``). The figures are then as of the controller's last publish window,
    and a queue's cpu/memory use (not published) is absent."""
    _deferred_groups: set[ObjectKey] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.snapshot.queue_use = self.queue_use

    def queue_use(self, queue: str) -> dict[str, int]:
        """Cards the queue holds or has reserved now: allocated + inqueue, per card type."""
        if self.published_usage:
            usage = self.usage(queue)
            allocated, inqueue = usage.allocated, usage.inqueue
        else:
            totals = self._totals.get(queue, {})
            allocated, inqueue = totals.get(Bucket.ALLOCATED, {}), totals.get(Bucket.INQUEUE, {})
        use = dict(allocated)
        for card, amount in inqueue.items():
            use[card] = use.get(card, 0) + amount
        return use

    # ----------------------------------------------------------------------------------------------- building

    @classmethod
    def build(cls, manifests: Iterable[Manifest], *, map_namespace_queues: bool = False,
              volcano_schedulers: frozenset[str] = VOLCANO_SCHEDULERS,
              card_policy: CardPolicy = DEFAULT_CARD_POLICY) -> Ledger:
        """A ledger over a full list of objects (kinds other than Namespace, Node, Queue, PodGroup, Pod and
        PriorityClass, and the workloads the HPA rule reads, are ignored).

        The same result as upserting them one by one, faster: nodes, queues and podgroups go first (so no pod is
        charged twice), and each PodGroup's reservation is computed once at the end, not after each of its pods.
        Its :attr:`changes` start empty. ``map_namespace_queues``, ``volcano_schedulers`` and ``card_policy``: see
        :class:`ClusterSnapshot`.
        """
        ledger = cls(ClusterSnapshot(map_namespace_queues=map_namespace_queues, volcano_schedulers=volcano_schedulers,
                                     card_policy=card_policy))
        forget_shared(SHARED_CHARGES, SHARED_CARDS, _POD_CPU_MEMORY, _HOLDING_SLOTS)
        with _cyclic_collector_paused():
            by_kind: dict[Kind, list[Manifest]] = {kind: [] for kind in BUILD_ORDER}
            for manifest in manifests:
                kind = kind_of(manifest)
                if kind is Kind.PRIORITY_CLASS:
                    ledger.upsert(manifest)  # (in the order listed: when several are globalDefault, the last wins)
                elif kind is not None:
                    by_kind[kind].append(manifest)
                elif workload_key(manifest) is not None or runtime_key(manifest) is not None:
                    ledger.upsert(manifest)  # a workload (the HPA rule), a Trainer runtime (TrainJobs), as upsert
                elif is_claim(manifest):
                    ledger.upsert_claim(manifest)  # what the card-quota gate reads for the DRA quotas
            ledger._deferred_groups = set()
            try:
                for manifest in by_kind[Kind.NAMESPACE]:
                    ledger.upsert_namespace(*namespace_queue(manifest))
                for manifest in by_kind[Kind.NODE]:
                    ledger.upsert_node(node_record(manifest))
                for manifest in by_kind[Kind.QUEUE]:
                    ledger.upsert_queue(queue_record(manifest))
                for manifest in by_kind[Kind.PODGROUP]:
                    ledger.upsert_podgroup(PodGroup.from_manifest(manifest))
                pods = ledger.snapshot.pods
                for pod in [Pod.from_manifest(manifest, cached=True) for manifest in by_kind[Kind.POD]]:
                    if pod.key in pods:  # listed twice: the later one replaces the earlier, as an update would
                        ledger._upsert_pod(pod)
                    else:
                        ledger._add_pod(pod)
            finally:
                deferred, ledger._deferred_groups = ledger._deferred_groups, None
            for group_key in deferred:
                ledger._recharge_group(group_key)
        ledger.changes.drain()  # a full list: whoever publishes from it starts by reconciling everything
        return ledger

    def upsert(self, manifest: Manifest) -> None:
        """Apply an ADDED or MODIFIED object. Raises InputError (with a field path) for a malformed object."""
        kind = kind_of(manifest)
        if kind is None and is_claim(manifest):
            self.upsert_claim(manifest)
            return
        if kind is None and (workload := workload_key(manifest)) is not None:
            self.snapshot.workloads[workload] = template_only(manifest)  # only the HPA rule reads it
            return
        if kind is None and (runtime := runtime_key(manifest)) is not None:
            self.snapshot.trainer_runtimes[runtime] = manifest  # what a TrainJob's pods are built from
            return
        if kind is Kind.NODE:
            self.upsert_node(node_record(manifest))
        elif kind is Kind.QUEUE:
            self.upsert_queue(queue_record(manifest))
        elif kind is Kind.PODGROUP:
            self.upsert_podgroup(PodGroup.from_manifest(manifest))
        elif kind is Kind.POD:
            self._upsert_pod(Pod.from_manifest(manifest, cached=True))
        elif kind is Kind.NAMESPACE:
            self.upsert_namespace(*namespace_queue(manifest))
        elif kind is Kind.PRIORITY_CLASS:
            self.snapshot.put_priority_class(PriorityClass.from_manifest(manifest))

    def delete(self, manifest: Manifest) -> None:
        """Apply a DELETED object (only its kind and identity are read)."""
        kind = kind_of(manifest)
        if kind is None:
            if is_claim(manifest):
                self.delete_claim(manifest)
            elif (workload := workload_key(manifest)) is not None:
                self.snapshot.workloads.pop(workload, None)
            elif (runtime := runtime_key(manifest)) is not None:
                self.snapshot.trainer_runtimes.pop(runtime, None)
            return
        key = object_key(kind, manifest)
        if kind is Kind.NODE:
            self.delete_node(key[1])
        elif kind is Kind.QUEUE:
            self.delete_queue(key[1])
        elif kind is Kind.PODGROUP:
            self.delete_podgroup(key)
        elif kind is Kind.NAMESPACE:
            self.upsert_namespace(key[1], None)
        elif kind is Kind.PRIORITY_CLASS:
            self.snapshot.drop_priority_class(key[1])
        else:
            self.delete_pod(key)

    # ------------------------------------------------------------------------------------------------ events

    def upsert_claim(self, manifest: Manifest) -> None:
        """A DRA ResourceClaim or ResourceClaimTemplate: what it asks (its status, the allocation, is not read)."""
        self._put_claim(manifest, asked(manifest))

    def delete_claim(self, manifest: Manifest) -> None:
        self._put_claim(manifest, None)

    def _put_claim(self, manifest: Manifest, amounts: DeviceAmounts | None) -> None:
        key = read_meta(manifest, namespaced=True).key
        template = manifest.get("kind") == "ResourceClaimTemplate"
        table = self.snapshot.claim_templates if template else self.snapshot.claims
        if table.get(key) == amounts:
            return  # (a status write: the allocation, not what it asks)
        if amounts is None:
            table.pop(key, None)  # (a claim its pods still hold stays counted: what they hold does not change)
        else:
            table[key] = amounts
            for queue, counted in (self._claim_counts.get(key, {}) if not template else {}).items():
                dra_add(self._dra_held, queue, counted[1], -1)
                counted[1] = amounts
                dra_add(self._dra_held, queue, amounts)
        for pod_key in list(self._pods_by_claim.get((key[0], _claim_kind(template), key[1]), ())):
            self._redo_dra(pod_key)

    def dra_held(self) -> Mapping[str, DeviceAmounts]:
        """Per queue, the DRA devices its own pods hold (bound or past the gate; the ledger's own: read, not kept)."""
        return self._dra_held

    def dra_unread_queues(self) -> Iterable[str]:
        """The queues of the pods holding DRA devices whose request cannot be read in full (see
        :attr:`_dra_unread`)."""
        return self._dra_unread.values()

    def dra_asked(self, pod: Pod, queue: str) -> DeviceAmounts:
        """What letting the pod through in ``queue`` adds there: what its templates ask, and its ResourceClaims that
        no pod of the queue holds yet (a shared claim's devices are allocated once)."""
        snapshot = self.snapshot
        namespace = pod.key[0]
        refs = [(template, name) for template, name in pod.claims
                if template or queue not in self._claim_counts.get((namespace, name), {})]
        return pod_request(namespace, refs, snapshot.claims, snapshot.claim_templates)

    def _redo_dra(self, key: ObjectKey) -> None:
        """Count what the pod holds of DRA devices now, in place of what it held. A pod that names a claim or
        template no longer (or not yet) known keeps what it was last read to hold in full: a template may be deleted
        while the pods made from it run, and what they hold does not change."""
        previous = self._dra_holds.get(key)
        self._dra_unread.pop(key, None)
        hold = self._dra_hold(key, previous)
        if hold == previous:
            return
        if previous is not None:
            del self._dra_holds[key]
            self._apply_dra_hold(previous, -1)
        if hold is not None:
            self._dra_holds[key] = hold
            self._apply_dra_hold(hold, +1)

    def _dra_hold(self, key: ObjectKey, previous: _DraHold | None) -> _DraHold | None:
        pod = self.snapshot.pods.get(key)
        if (pod is None or not pod.claims or pod.terminated or pod.releasing or (pod.gate is not None and not pod.bound)
                or not self.snapshot.charges_a_queue(pod)):
            return None
        snapshot = self.snapshot
        queue = snapshot.queue_of(pod)
        complete = unknown_ref(key[0], pod.claims, snapshot.claims, snapshot.claim_templates) is None
        if not complete and previous is not None and previous.complete and previous.queue == queue:
            return previous
        if not complete:
            self._dra_unread[key] = queue
        own = pod_request(key[0], [ref for ref in pod.claims if ref[0]], snapshot.claims, snapshot.claim_templates)
        return _DraHold(queue, own, tuple((key[0], name) for template, name in pod.claims if not template), complete)

    def _apply_dra_hold(self, hold: _DraHold, sign: int) -> None:
        """Add (+1) or take back (-1) a pod's hold: its own devices, and its claims counted once per queue."""
        dra_add(self._dra_held, hold.queue, hold.own, sign)
        for claim in hold.named:
            per_queue = self._claim_counts.setdefault(claim, {})
            counted = per_queue.get(hold.queue)
            if sign > 0:
                if counted is None:
                    amounts = self.snapshot.claims.get(claim, {})
                    per_queue[hold.queue] = [1, amounts]
                    dra_add(self._dra_held, hold.queue, amounts)
                else:
                    counted[0] += 1
            elif counted is not None:
                counted[0] -= 1
                if not counted[0]:
                    dra_add(self._dra_held, hold.queue, counted[1], -1)
                    del per_queue[hold.queue]
            if not per_queue:
                del self._claim_counts[claim]

    def upsert_node(self, record: NodeRecord) -> None:
        name = record.node.name
        previous = self.snapshot.nodes.get(name)
        self.snapshot.put_node(record)
        self.changes.node(name)
        if previous is not None and previous.cards.types == record.cards.types:
            return
        before = set(self._card_resource_refs)
        self._count_card_resources(previous, -1)
        self._count_card_resources(record, +1)
        self._after_node_change(name, set(self._card_resource_refs) != before)

    def delete_node(self, name: str) -> None:
        previous = self.snapshot.remove_node(name)
        if previous is None:
            return
        before = set(self._card_resource_refs)
        self._count_card_resources(previous, -1)
        self._after_node_change(name, set(self._card_resource_refs) != before)

    def upsert_queue(self, record: QueueRecord) -> None:
        self.snapshot.queues[record.queue.name] = record
        self.changes.queue(record.queue.name)

    def delete_queue(self, name: str) -> None:
        self.snapshot.queues.pop(name, None)
        self.changes.forget_queue(name)

    def upsert_namespace(self, name: str, queue: str | None) -> None:
        """A Namespace's queue-name annotation (None: unset, or the namespace deleted). The pods of the namespace
        without a PodGroup yet are charged again (their PodGroup-to-be's queue may follow the namespace's:
        :meth:`~cardquota.core.snapshot.ClusterSnapshot.volcano_queue`); namespaces change rarely, so those pods are
        found by a scan rather than an index."""
        if not self.snapshot.set_namespace_queue(name, queue):
            return
        podgroups = self.snapshot.podgroups
        self._recharge_pods([key for key, pod in self.snapshot.pods.items()
                             if key[0] == name and (pod.group_key is None or pod.group_key not in podgroups)])

    def upsert_podgroup(self, group: PodGroup) -> None:
        previous = self.snapshot.podgroups.get(group.key)
        self.snapshot.podgroups[group.key] = group
        self._touch_held(group.queue)
        if previous is not None:
            self._touch_held(previous.queue)
        self._index_waiting(previous, group)
        if previous is None or previous.queue != group.queue:
            self._recharge_pods(self._pods_by_group.get(group.key, ()))
        self._recharge_group(group.key)

    def delete_podgroup(self, key: ObjectKey) -> None:
        previous = self.snapshot.podgroups.pop(key, None)
        if previous is None:
            return
        self._touch_held(previous.queue)
        self._index_waiting(previous, None)
        self._recharge_pods(self._pods_by_group.get(key, ()))
        self._recharge_group(key)

    def upsert_pod(self, pod: Pod) -> None:
        """Apply a pod's view; the ledger keeps it as :meth:`Pod.cached` (only what its rules read)."""
        self._upsert_pod(pod.cached())

    def _upsert_pod(self, pod: Pod) -> None:
        previous = self.snapshot.pods.get(pod.key)
        if previous is not None:
            self._unindex_pod(previous)
        self.snapshot.pods[pod.key] = pod
        self._index_pod(pod)
        self._recharge_pods([pod.key])

    def delete_pod(self, key: ObjectKey) -> None:
        previous = self.snapshot.pods.pop(key, None)
        if previous is None:
            return
        self._unindex_pod(previous)
        self._recharge_pods([key])

    # ------------------------------------------------------------------------------------------------ queries

    def queue_of(self, pod: Pod) -> str:
        """The queue a pod is accounted to (see the module rules)."""
        return self.snapshot.queue_of(pod)

    def queue_names(self) -> list[str]:
        """Every Queue object, plus any queue that objects are charged to without a Queue object (with
        :attr:`published_usage`: the Queue objects only)."""
        if self.published_usage:
            return sorted(self.snapshot.queues)
        return sorted(set(self.snapshot.queues) | set(self._totals))

    def usage(self, queue: str, *, card_unlimited_cpu_memory: bool = False) -> QueueUsage:
        """The queue's cards; and, when it has a cpu/memory ``spec.capability``, its cpu/memory as the plugin counts
        them with ``cardUnlimitedCpuMemory`` as given."""
        record = self.snapshot.queues.get(queue)
        quota = dict(record.quota.values) if record is not None else {}
        if self.published_usage:
            annotations = record.queue.meta.annotations if record is not None else {}
            return QueueUsage(quota=quota, allocated=published_amounts(annotations, CARD_ALLOCATED),
                              inqueue=published_amounts(annotations, CARD_INQUEUE),
                              pending=published_amounts(annotations, CARD_PENDING))
        totals = self._totals.get(queue, {})
        allocated = dict.fromkeys(quota, 0)
        allocated.update(totals.get(Bucket.ALLOCATED, {}))
        capability = record.queue.capability if record is not None else None
        waiting: dict[str, int] = {}
        for key in self._gated_by_queue.get(queue, ()):  # (O(pods waiting in this queue))
            charge = self._pod_charges.get(key)
            if charge is not None:
                for name, amount in charge.cards.items():
                    waiting[name] = waiting.get(name, 0) + amount
        return QueueUsage(
            quota=quota,
            allocated=_sorted(allocated),
            inqueue=_sorted(totals.get(Bucket.INQUEUE, {})),
            pending=_sorted(totals.get(Bucket.PENDING, {})),
            cpu_memory=(CpuMemoryUsage(capability, self.cpu_memory(queue, card_unlimited_cpu_memory))
                        if capability is not None else None),
            waiting=_sorted(waiting),
        )

    def unquoted_holdings(self) -> dict[str, int]:
        """Cards held (allocated, inqueue or pending) per Queue that has no card quota, whichever
        :class:`~cardquota.core.snapshot.UnquotedQueues` the cluster runs with: what ``--unquoted-queues=zero``
        refuses more of (``usage`` and ``doctor`` say so)."""
        held: dict[str, int] = {}
        for queue, record in self.snapshot.queues.items():
            if record.quota.violations:  # (a quota that cannot be read is said apart, as is a queue with no object)
                continue
            usage = self.usage(queue)
            if not usage.quota:
                total = sum(usage.allocated.values()) + sum(usage.inqueue.values()) + sum(usage.pending.values())
                if total:
                    held[queue] = total
        return held

    def all_usage(self, *, card_unlimited_cpu_memory: bool = False) -> dict[str, QueueUsage]:
        """Every queue's usage; a queue with queues below it also gets its subtree's totals."""
        usage = {queue: self.usage(queue, card_unlimited_cpu_memory=card_unlimited_cpu_memory)
                 for queue in self.queue_names()}
        children: dict[str, list[str]] = {}
        for name, record in self.snapshot.queues.items():
            if record.queue.parent and record.queue.parent != name:
                children.setdefault(record.queue.parent, []).append(name)
        for parent in children:
            if parent not in usage:
                continue
            members, todo = {parent}, list(children[parent])
            while todo:  # (a cycle ends where it meets a queue already counted)
                queue = todo.pop()
                if queue not in members:
                    members.add(queue)
                    todo.extend(children.get(queue, ()))
            totals: dict[str, dict[str, int]] = {"allocated": {}, "inqueue": {}, "pending": {}, "waiting": {}}
            for member in members:  # (every Queue object is among queue_names: each has its usage)
                entry = usage[member]
                for bucket, amounts in (("allocated", entry.allocated), ("inqueue", entry.inqueue),
                                        ("pending", entry.pending), ("waiting", entry.waiting)):
                    for card, amount in amounts.items():
                        totals[bucket][card] = totals[bucket].get(card, 0) + amount
            usage[parent] = replace(usage[parent], subtree=SubtreeUsage(
                _sorted(totals["allocated"]), _sorted(totals["inqueue"]), _sorted(totals["pending"]),
                _sorted({card: n for card, n in totals["waiting"].items() if n}), tuple(sorted(members))))
        return usage

    def cpu_memory(self, queue: str, card_unlimited_cpu_memory: bool) -> CpuMemoryUse:
        """The queue's cpu/memory allocated, inqueue and elastic, counted as the capacity-card plugin counts them
        with ``cardUnlimitedCpuMemory`` off or on."""
        totals = self._cpu_memory_totals.get(queue, NOTHING)
        return _use(totals, CARD_UNLIMITED_CASES.index(card_unlimited_cpu_memory))

    def cpu_memory_holders(self, queue: str, resource: str, card_unlimited_cpu_memory: bool
                           ) -> list[tuple[ObjectKey, Fraction]]:
        """The queue's PodGroups by the ``resource`` they count for at enqueue (allocated + inqueue - elastic), most
        first, then by name; those counting nothing are left out."""
        case = CARD_UNLIMITED_CASES.index(card_unlimited_cpu_memory)
        holders = []
        for key, (group_queue, amounts) in self._group_cpu_memory.items():
            if group_queue == queue and (amount := _use(amounts, case).used(resource)) > 0:
                holders.append((key, amount))
        return sorted(holders, key=lambda item: (-item[1], item[0]))

    @property
    def card_resources(self) -> Mapping[str, int]:
        """The resources nodes offer as cards (each with how many node card types offer it)."""
        return self._card_resource_refs

    def group_uses_cards(self, group: PodGroup) -> bool:
        """Whether a PodGroup is a card job for the plugin: its ``volcano.sh/card.request`` asks for cards, one of its
        pods uses cards, or its ``minResources`` name a resource nodes offer as cards."""
        held = self._group_held.get(group.key)
        if held is not None and held.card_pods > 0:
            return True
        if any(amount > 0 and resource in self._card_resource_refs
               for resource, amount in group.min_resources.items()):
            return True
        return bool(group.meta.annotations.get(CARD_REQUEST)) and bool(card_request(group.meta.annotations).values)

    def node_card_usage(self) -> dict[str, dict[str, int]]:
        """Per node, the cards its bound pods hold, by card type (pods charged to a type their node offers)."""
        usage: dict[str, dict[str, int]] = {}
        for key, charge in self._pod_charges.items():
            pod = self.snapshot.pods.get(key)
            if pod is None or charge.bucket is not Bucket.ALLOCATED:
                continue
            offered = self.snapshot.nodes.get(pod.node_name)
            held = usage.setdefault(pod.node_name, {})
            for card, amount in charge.cards.items():
                if offered is not None and card in offered.cards.types:
                    held[card] = held.get(card, 0) + amount
        return usage

    def pod_charge(self, key: ObjectKey) -> Charge | None:
        return self._pod_charges.get(key)

    def pending_pods(self, queue: str) -> set[ObjectKey]:
        """The unbound card pods charged to ``queue`` (the pods its events are about)."""
        return set(self._pending_by_queue.get(queue, ()))

    def waiting_podgroups(self, queue: str) -> set[ObjectKey]:
        """The PodGroups of ``queue`` not yet enqueued (phase in :data:`WAITING_PHASES`): those its events are
        about."""
        return set(self._waiting_by_queue.get(queue, ()))

    def _index_waiting(self, previous: PodGroup | None, group: PodGroup | None) -> None:
        if previous is not None and previous.phase in WAITING_PHASES:
            _discard(self._waiting_by_queue, previous.queue, previous.key)
        if group is not None and group.phase in WAITING_PHASES:
            self._waiting_by_queue.setdefault(group.queue, set()).add(group.key)

    def _index_pending(self, queue: str, key: ObjectKey, sign: int) -> None:
        _index_member(self._pending_by_queue, queue, key, sign)

    def group_charge(self, key: ObjectKey) -> Charge | None:
        return self._group_charges.get(key)

    def held_cards(self, queue: str) -> dict[str, int]:
        """What ``queue`` holds for cardquota's gate: the cards of its bound pods (by card type) and of its unbound
        card pods past the gate (by card name as written, ``A|B`` included), from the watch alone. PodGroup
        reservations (inqueue) are not counted: the gate admits pods, and a job's pods are what it holds."""
        held = dict(self._totals.get(queue, {}).get(Bucket.ALLOCATED, {}))
        for name, amount in self._admitted.get(queue, {}).items():
            held[name] = held.get(name, 0) + amount
        return held

    def held_units(self, queue: str) -> dict[HeldUnit, list[Pod]]:
        """The units holding ``queue``'s cards (a PodGroup, or a pod naming none) and their pods that do (bound, or
        past the gate; not ended, not being deleted), from the watch alone: what preemption may evict
        (:mod:`cardquota.core.preemption`). O(held pods of the queue)."""
        units: dict[HeldUnit, list[Pod]] = {}
        pods = self.snapshot.pods
        for unit in self._held_units.get(queue, {}):
            kind, namespace, name = unit
            members = self._pods_by_group.get((namespace, name), {}) if kind == PODGROUP else ((namespace, name),)
            held = []
            for key in members:
                charge = self._pod_charges.get(key)
                pod = pods.get(key)
                if charge is not None and pod is not None and charge.queue == queue and _holds(charge):
                    held.append(pod)
            if held:
                units[unit] = held
        return units

    def held_version(self, queue: str) -> int:
        """A number that changes whenever what :meth:`held_units` answers for ``queue`` may have (a memo of it is
        current while this is the same)."""
        return self._held_versions.get(queue, 0)

    def _touch_held(self, queue: str) -> None:
        self._held_versions[queue] = self._held_versions.get(queue, 0) + 1

    def gated_pods(self) -> dict[str, set[ObjectKey]]:
        """Per queue, its card pods waiting at cardquota's gate (the sets are the ledger's own: read, not kept)."""
        return self._gated_by_queue

    def gated_claiming_pods(self) -> Iterable[ObjectKey]:
        """The unbound pods naming DRA claims that carry cardquota's gate (the ledger's own index)."""
        return self._claiming_gated.keys()

    def group_pods(self, key: ObjectKey) -> Iterable[ObjectKey]:
        """The pods naming PodGroup ``key``."""
        return self._pods_by_group.get(key, ())

    # ----------------------------------------------------------------------------------------- recomputation

    def _after_node_change(self, name: str, resources_changed: bool) -> None:
        affected = set(self._pods_by_node.get(name, ()))
        if resources_changed:
            affected.update(self._cluster_resource_dependents)
        self._recharge_pods(affected)
        if resources_changed:
            self._after_pod_charges(list(self._groups_with_extended_minimum))

    def _add_pod(self, pod: Pod) -> None:
        """Add a pod the ledger has never seen (the full build's path: no previous charge to take back)."""
        key = pod.key
        self.snapshot.pods[key] = pod
        self.changes.pod(key)
        self._index_pod(pod)
        if pod.claims:
            self._redo_dra(key)
        charge = self._charge_pod(pod)
        if charge is not None:
            self._pod_charges[key] = charge
            self._apply_pod_charge(key, charge, +1)
            if _holds(charge):
                self._touch_held(charge.queue)
            if charge.group is not None:
                self._after_pod_charges((charge.group,))
        group = self._recount_pod_cpu_memory(key, pod, charge)
        if group is not None and (charge is None or charge.group != group):
            self._after_pod_charges((group,))

    def _recharge_pods(self, pod_keys: Iterable[ObjectKey]) -> None:
        groups_to_recharge: set[ObjectKey] = set()
        touched = self.changes.pod
        for key in list(pod_keys):
            touched(key)
            pod = self.snapshot.pods.get(key)
            if (pod is not None and pod.claims) or key in self._dra_holds:
                self._redo_dra(key)
            old = self._pod_charges.pop(key, None)
            new = self._charge_pod(pod) if pod is not None else None
            if new is not None:
                self._pod_charges[key] = new
            for charge in (old, new):  # (a held pod changed, even with its charge the same: its annotations, time)
                if charge is not None and _holds(charge):
                    self._touch_held(charge.queue)
            group = self._recount_pod_cpu_memory(key, pod, new)
            if group is not None:
                groups_to_recharge.add(group)
            if old == new:
                continue
            self._cluster_resource_dependents.pop(key, None)
            for charge, sign in ((old, -1), (new, +1)):
                if charge is not None:
                    self._apply_pod_charge(key, charge, sign)
                    if charge.group is not None:
                        groups_to_recharge.add(charge.group)
        self._after_pod_charges(groups_to_recharge)

    def _apply_pod_charge(self, key: ObjectKey, charge: Charge, sign: int) -> None:
        """Add (+1) or take back (-1) a pod's charge, with the indexes that follow from it."""
        self._add_to_totals(charge, sign)
        if charge.bucket is Bucket.PENDING:
            self._index_pending(charge.queue, key, sign)
            if charge.gated:
                _index_member(self._gated_by_queue, charge.queue, key, sign)
            else:
                _add_amounts(self._admitted, charge.queue, charge.cards, sign)
            if charge.group is not None:
                self._add_pending(charge, sign)
        elif charge.group is not None:
            self._add_holdings(charge, sign)
        if _holds(charge):
            unit: HeldUnit = (PODGROUP, charge.group[0], charge.group[1]) if charge.group is not None else (
                POD, key[0], key[1])
            counts = self._held_units.setdefault(charge.queue, {})
            count = counts.get(unit, 0) + sign
            if count > 0:
                counts[unit] = count
            else:
                counts.pop(unit, None)
                if not counts:
                    del self._held_units[charge.queue]
        if sign > 0 and charge.uses_cluster_resources:
            self._cluster_resource_dependents[key] = None

    def _after_pod_charges(self, groups: Iterable[ObjectKey]) -> None:
        """Recompute the reservations of the PodGroups whose pods' charges changed (once per group, at the end
        of a full build)."""
        if self._deferred_groups is not None:
            self._deferred_groups.update(groups)
            return
        for group_key in groups:
            self._recharge_group(group_key)

    def _recharge_group(self, key: ObjectKey | None) -> None:
        if key is None:
            return
        self.changes.podgroup(key)
        old = self._group_charges.pop(key, None)
        if old is not None:
            self._add_to_totals(old, -1)
        group = self.snapshot.podgroups.get(key)
        new = self._charge_group(group) if group is not None else None
        if new is not None:
            self._group_charges[key] = new
            self._add_to_totals(new, +1)
        self._recharge_group_cpu_memory(key, group)

    # --------------------------------------------------------------------------------------------- cpu/memory

    def _recount_pod_cpu_memory(self, key: ObjectKey, pod: Pod | None, charge: Charge | None) -> ObjectKey | None:
        """Bring the pod's share of its PodGroup's cpu/memory up to date; the PodGroup whose share changed (the new
        one; the old one, when the pod moved, is recharged here), or None. (On every pod event: kept lean.)"""
        new = None
        if pod is not None and pod.group_key is not None and pod.phase not in TERMINAL_POD_PHASES \
                and not pod.releasing:
            cpu = memory = 0
            if pod.node_name:
                requests = pod.requests
                amount = requests.get("cpu")
                if amount:
                    cpu = -(-(amount.numerator * 1000) // amount.denominator)  # millicores, rounded up
                amount = requests.get("memory")
                if amount:
                    memory = -(-amount.numerator // amount.denominator)
            if charge is not None or cpu or memory:
                new = PodCpuMemory(pod.group_key, charge is not None, cpu, memory)
                new = _POD_CPU_MEMORY.get(new) or share(_POD_CPU_MEMORY, new, new)  # a job's pods: one tuple
        old = self._pod_cpu_memory.get(key)
        if old == new:
            return None
        if old is not None:
            self._hold(old, -1)
            del self._pod_cpu_memory[key]
        if new is not None:
            self._hold(new, +1)
            self._pod_cpu_memory[key] = new
            if old is not None and old.group != new.group:
                self._after_pod_charges((old.group,))
            return new.group
        return old.group if old is not None else None

    def _hold(self, pod: PodCpuMemory, sign: int) -> None:
        held = self._group_held.get(pod.group)
        if held is None:
            held = self._group_held[pod.group] = GroupHeld()
        held.add(pod, sign)
        if sign < 0 and held.empty:
            del self._group_held[pod.group]

    def _recharge_group_cpu_memory(self, key: ObjectKey, group: PodGroup | None) -> None:
        """A PodGroup's cpu/memory as Volcano counts the job: allocated = what its bound pods request; inqueue (phase
        Inqueue) = minResources - allocated; elastic = allocated - minResources (each where positive); with
        ``cardUnlimitedCpuMemory``, a card pod's requests and a card job's minResources count 0. (On every pod event
        of a PodGroup: kept lean.)"""
        new: GroupContribution | None = None
        min_cpu = min_memory = 0
        if group is not None and (minimum := group.min_resources):
            if any(resource not in CPU_MEMORY for resource in minimum):
                self._groups_with_extended_minimum.add(key)
            else:
                self._groups_with_extended_minimum.discard(key)
            amount = minimum.get("cpu")
            if amount is not None and amount > 0:
                min_cpu = -(-(amount.numerator * 1000) // amount.denominator)
            amount = minimum.get("memory")
            if amount is not None and amount > 0:
                min_memory = -(-amount.numerator // amount.denominator)
        elif key in self._groups_with_extended_minimum:
            self._groups_with_extended_minimum.discard(key)
        held = self._group_held.get(key)
        if group is not None and (min_cpu or min_memory or held is not None):
            held = held or GroupHeld()
            inqueue = group.phase == INQUEUE_PHASE
            # cardUnlimitedCpuMemory off: every pod's requests, the whole minimum
            cpu, memory = held.plain_cpu + held.card_cpu, held.plain_memory + held.card_memory
            off = (cpu, memory,
                   max(min_cpu - cpu, 0) if inqueue else 0, max(min_memory - memory, 0) if inqueue else 0,
                   max(cpu - min_cpu, 0), max(memory - min_memory, 0))
            # on: card pods' requests not counted, and a card job reserves nothing
            if (min_cpu or min_memory) and self.group_uses_cards(group):
                min_cpu = min_memory = 0
            cpu, memory = held.plain_cpu, held.plain_memory
            on = (cpu, memory,
                  max(min_cpu - cpu, 0) if inqueue else 0, max(min_memory - memory, 0) if inqueue else 0,
                  max(cpu - min_cpu, 0), max(memory - min_memory, 0))
            amounts = off + on
            if any(amounts):
                new = (group.queue, amounts)
        old = self._group_cpu_memory.get(key)
        if old == new:
            return
        if old is not None:
            self._add_cpu_memory(old, -1)
            del self._group_cpu_memory[key]
        if new is not None:
            self._group_cpu_memory[key] = new
            self._add_cpu_memory(new, +1)

    def _add_cpu_memory(self, contribution: GroupContribution, sign: int) -> None:
        queue, amounts = contribution
        self.changes.queue(queue)
        totals = self._cpu_memory_totals.get(queue, NOTHING)
        updated = tuple(total + sign * amount for total, amount in zip(totals, amounts, strict=True))
        if any(updated):
            self._cpu_memory_totals[queue] = updated
        else:
            self._cpu_memory_totals.pop(queue, None)

    def _charge_pod(self, pod: Pod) -> Charge | None:
        if not self.snapshot.charges_a_queue(pod):
            return None
        node = self.snapshot.nodes.get(pod.node_name) if pod.bound else None
        return pod_charge(pod, self.snapshot.queue_of(pod), node, self._card_resource_refs)

    def _charge_group(self, group: PodGroup) -> Charge | None:
        if group.phase != INQUEUE_PHASE and (group.phase != RUNNING_PHASE or group.key not in self._group_pending):
            return None  # (most PodGroups: their card.request is not even read)
        return group_charge(group, card_request(group.meta.annotations).values,
                            self._group_holdings.get(group.key, {}), self._group_pending.get(group.key, {}),
                            self._group_gated.get(group.key))

    def group_card_request(self, group: PodGroup) -> Mapping[str, int]:
        """The cards ``group`` asks for at enqueue (:func:`~cardquota.core.usage.job_card_request`): its pods'
        once they ask for any, else its ``volcano.sh/card.request``."""
        return without_gated(job_card_request(card_request(group.meta.annotations).values,
                                              self._group_holdings.get(group.key, {}),
                                              self._group_pending.get(group.key, {})),
                             self._group_gated.get(group.key))

    # ------------------------------------------------------------------------------------------ bookkeeping

    def _add_to_totals(self, charge: Charge, sign: int) -> None:
        self.changes.queue(charge.queue)
        buckets = self._totals.setdefault(charge.queue, {})
        _add_amounts(buckets, charge.bucket, charge.cards, sign)
        if not buckets:
            del self._totals[charge.queue]

    def _add_holdings(self, charge: Charge, sign: int) -> None:
        assert charge.group is not None
        holdings = self._group_holdings.setdefault(charge.group, {})
        for card, amount in charge.cards.items():
            slot = (charge.card_name, card)
            value = holdings.get(slot, 0) + sign * amount
            if value:
                holdings[_HOLDING_SLOTS.get(slot) or share(_HOLDING_SLOTS, slot, slot)] = value
            else:
                holdings.pop(slot, None)
        if not holdings:
            del self._group_holdings[charge.group]

    def _add_pending(self, charge: Charge, sign: int) -> None:
        assert charge.group is not None
        cards: dict[str, int] = {}
        for card, amount in charge.cards.items():  # (by canonical name: two spellings of one A|B are one key)
            name = canonical_key(card)
            cards[name] = cards.get(name, 0) + amount
        _add_amounts(self._group_pending, charge.group, cards, sign)
        if charge.gated:
            _add_amounts(self._group_gated, charge.group, cards, sign)

    def _count_card_resources(self, record: NodeRecord | None, sign: int) -> None:
        """Reference-count the resources nodes offer as cards (a pod's "card resources" depend on that set)."""
        if record is None:
            return
        for card in record.cards.types.values():
            count = self._card_resource_refs.get(card.resource, 0) + sign
            if count > 0:
                self._card_resource_refs[card.resource] = count
            else:
                self._card_resource_refs.pop(card.resource, None)

    def _index_pod(self, pod: Pod) -> None:
        if pod.node_name:
            _index(self._pods_by_node, pod.node_name, pod.key)
        if group_key := pod.group_key:
            _index(self._pods_by_group, group_key, pod.key)
        if pod.claims:
            if pod.gate is not None and not pod.node_name:
                self._claiming_gated[pod.key] = None
            for template, name in pod.claims:
                _index(self._pods_by_claim, (pod.key[0], _claim_kind(template), name), pod.key)

    def _unindex_pod(self, pod: Pod) -> None:
        if pod.node_name:
            _unindex(self._pods_by_node, pod.node_name, pod.key)
        if group_key := pod.group_key:
            _unindex(self._pods_by_group, group_key, pod.key)
        if pod.claims:
            self._claiming_gated.pop(pod.key, None)
            for template, name in pod.claims:
                _unindex(self._pods_by_claim, (pod.key[0], _claim_kind(template), name), pod.key)


@contextlib.contextmanager
def _cyclic_collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a full build allocates its views.

    Views hold no reference cycles, so each automatic collection during a build would walk the whole growing heap
    (the manifests and the views so far) and free nothing. The collector resumes as it was afterwards (callers that
    keep the ledger for long, such as the operator, then move it out of the collector's way with ``gc.freeze``).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _claim_kind(template: bool) -> str:
    return "ResourceClaimTemplate" if template else "ResourceClaim"


def _index(index: dict[IndexKey, KeySet], key: IndexKey, item: ObjectKey) -> None:
    members = index.get(key)
    if members is None:
        index[key] = {item: None}
    else:
        members[item] = None


def _unindex(index: dict[IndexKey, KeySet], key: IndexKey, item: ObjectKey) -> None:
    members = index.get(key)
    if members is not None:
        members.pop(item, None)
        if not members:
            del index[key]


def _holds(charge: Charge) -> bool:
    """Whether a pod's charge holds cards for the gate: bound, or unbound past the gate (:meth:`Ledger.held_cards`)."""
    return charge.bucket is Bucket.ALLOCATED or (charge.bucket is Bucket.PENDING and not charge.gated)


def _index_member(index: dict[str, set[ObjectKey]], key: str, item: ObjectKey, sign: int) -> None:
    """Add (``sign`` > 0) or remove ``item`` from the set under ``key``, dropping an emptied set."""
    if sign > 0:
        index.setdefault(key, set()).add(item)
    else:
        _discard(index, key, item)


def _add_amounts(amounts: dict[AmountKey, dict[str, int]], key: AmountKey, cards: Mapping[str, int],
                 sign: int) -> None:
    """Add (``sign`` 1) or take back (-1) ``cards`` under ``key``, dropping what reaches 0."""
    totals = amounts.setdefault(key, {})
    for card, amount in cards.items():
        value = totals.get(card, 0) + sign * amount
        if value:
            totals[card] = value
        else:
            totals.pop(card, None)
    if not totals:
        del amounts[key]


def _discard(index: dict[IndexKey, set[ObjectKey]], key: IndexKey, item: ObjectKey) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(item)
        if not members:
            del index[key]


def _use(amounts: Amounts, case: int) -> CpuMemoryUse:
    """One case of :data:`Amounts` as cores and bytes (resources at 0 left out)."""
    cpu, memory, inqueue_cpu, inqueue_memory, elastic_cpu, elastic_memory = amounts[6 * case:6 * case + 6]

    def pair(milli_cpu: int, amount: int) -> dict[str, Fraction]:
        values = {"cpu": Fraction(milli_cpu, 1000), "memory": Fraction(amount)}
        return {resource: value for resource, value in values.items() if value}

    return CpuMemoryUse(pair(cpu, memory), pair(inqueue_cpu, inqueue_memory), pair(elastic_cpu, elastic_memory))


def _sorted(amounts: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted(amounts.items()))
