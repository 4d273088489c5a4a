"""Why card work cannot move on now: the scheduler's enqueue and allocate checks, as Kubernetes events (pure).

* a PodGroup not yet Inqueue (capacity-card-design.md, "Job Enqueueable Check"), the scheduler's own enqueue
  decision (:func:`~cardquota.core.scheduling.capacity_card.podgroup_enqueue_refusal`): its ``minResources`` cpu and
  memory within the queue's ``spec.capability`` (``InsufficientCPUQuota``, ``InsufficientMemoryQuota``;
  ``EmptyQueueCapability`` when the queue sets none), then per key of its ``volcano.sh/card.request``, allocated +
  inqueue + request within the queue's quota, an ``A|B`` key against the alternatives' quotas together;
* an unbound card pod, task mode ("Task Allocatable Check"): allocated + request must fit the quota of at least
  one of its alternatives;
* a queue whose ``status.state`` is set and not Open: ``QueueNotOpen`` (for PodGroups and pods alike);
* a queue with no card quota at all: ``EmptyQueueCapability``; a pod whose card request cannot be read:
  ``GetTaskRequestResourceFailed``.

An event depends on its object and on its queue's :class:`QueueInputs`: the publisher recomputes the event of an
object that changed, and of every waiting object of a queue whose inputs changed — no other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from cardquota.core import keys
from cardquota.core.ledger import WAITING_PHASES, CpuMemoryUse, Ledger
from cardquota.core.objects import ObjectKey, ObjectMeta, Pod, PodGroup
from cardquota.core.scheduling.capacity_card import (
    CapacityCardConfig,
    card_request_problem,
    podgroup_enqueue_refusal,
    queue_state_refusal,
    request_failed,
    task_allocate_refusal,
)
from cardquota.core.scheduling.refusal import Refusal
from cardquota.core.snapshot import QueueRecord
from cardquota.core.usage import Bucket

INVALID_QUOTA = "InvalidCardQuota"
WAITING_AT_GATE = "WaitingAtCardQuotaGate"
"""The reason of the event about a pod (or the PodGroup of a gang) left at the card-quota gate: a Normal event (it
waits its turn; nothing is wrong with it), its message the gate's sentence (:class:`cardquota.core.gate.Wait`)."""
NOT_YET_INQUEUE = WAITING_PHASES


@dataclass(frozen=True)
class CardEvent:
    """An event about one object, named as ``kubectl describe`` finds it: kind, namespace, name and, when known,
    uid (and the resourceVersion the event was computed from). Build one about a view with :meth:`about`."""

    kind: str
    namespace: str
    name: str
    reason: str
    message: str
    type: str = "Warning"
    uid: str = ""
    """The object's ``metadata.uid``; "" only for an object whose uid the sender does not read (see the callers)."""
    resource_version: str = ""

    @classmethod
    def about(cls, meta: ObjectMeta, reason: str, message: str, type: str = "Warning") -> CardEvent:
        """An event (a Warning unless said) about the object ``meta`` identifies (its uid and resourceVersion
        carried)."""
        return cls(meta.kind, meta.namespace, meta.name, reason, message, type, uid=meta.uid,
                   resource_version=meta.resource_version)


def podgroup_event(group: PodGroup, ledger: Ledger, config: CapacityCardConfig | None = None) -> CardEvent | None:
    """Why a PodGroup cannot be enqueued now, or None when it can (or is past that). ``config``: the capacity-card
    plugin's arguments, None when unknown (then ``cardUnlimitedCpuMemory`` is read as on: never an event for a job
    the scheduler may enqueue). A PodGroup whose queue the cache does not hold gets none: the queue may be on its
    way (created just before, its watch behind the PodGroups'), and a guess said now would be held back, right or
    wrong, for the event interval."""
    if group.phase not in NOT_YET_INQUEUE or group.queue not in ledger.snapshot.queues:
        return None
    return _event(group.meta, podgroup_enqueue_refusal(group, ledger, config))


def pod_event(pod: Pod, ledger: Ledger) -> CardEvent | None:
    """Why an unbound card pod cannot be allocated now, or None when one of its alternatives fits."""
    if pod.bound or pod.terminated or pod.releasing or pod.card_name is None:
        return None
    charge = ledger.pod_charge(pod.key)
    wanted = charge.cards.get(pod.card_name, 0) if charge is not None and charge.bucket is Bucket.PENDING else 0
    problem = card_request_problem(pod.card_name, wanted)
    if problem is not None:
        return _event(pod.meta, request_failed(pod.card_name, problem))
    queue = ledger.queue_of(pod)
    record = ledger.snapshot.queues.get(queue)
    if record is None:
        return None  # (as for a PodGroup: its queue not seen yet)
    closed = queue_state_refusal(queue, record.queue.state, "it allocates no new task")
    if closed is not None:
        return _event(pod.meta, closed)
    refusal = task_allocate_refusal(queue, pod.card_name, wanted, _quota(ledger, queue), ledger.usage(queue).allocated)
    return _event(pod.meta, refusal)


def gate_event(meta: ObjectMeta, sentence: str) -> CardEvent:
    """The event about an object left at the card-quota gate, saying why (the gate keeper's sentence)."""
    return CardEvent.about(meta, WAITING_AT_GATE, sentence, "Normal")


def queue_event(record: QueueRecord) -> CardEvent | None:
    """A Queue whose ``volcano.sh/card.quota`` cannot be read (edited by hand past the webhook, or written before
    it was installed): it counts as having no card quota until fixed, and says so."""
    if not record.quota.violations:
        return None
    problem = record.quota.violations[0].message
    return CardEvent.about(record.queue.meta, INVALID_QUOTA,
                           f"{keys.CARD_QUOTA} cannot be read ({problem}), so queue {record.queue.name} counts as "
                           "having no card quota until it is fixed")


@dataclass(frozen=True)
class QueueInputs:
    """What the events of a queue's PodGroups and pods read from the queue (not from the object itself): two equal
    values give every unchanged object the same event. Its pending cards are not among them: no event reads them."""

    exists: bool
    quota: Mapping[str, int]
    capability: Mapping[str, Fraction] | None
    allocated: Mapping[str, int]
    inqueue: Mapping[str, int]
    cpu_memory: tuple[CpuMemoryUse, CpuMemoryUse]
    """As the capacity-card plugin counts them with ``cardUnlimitedCpuMemory`` off, then on."""
    state: str = ""
    """The queue's ``status.state`` (a queue not Open takes nothing new)."""


def queue_inputs(ledger: Ledger, queue: str) -> QueueInputs:
    """The queue's side of :func:`podgroup_event` and :func:`pod_event` (a few card types: O(1) in the cluster)."""
    record = ledger.snapshot.queues.get(queue)
    usage = ledger.usage(queue)
    return QueueInputs(record is not None, usage.quota, record.queue.capability if record is not None else None,
                       usage.allocated, usage.inqueue,
                       (ledger.cpu_memory(queue, False), ledger.cpu_memory(queue, True)),
                       record.queue.state if record is not None else "")


def waiting_pod(ledger: Ledger, key: ObjectKey) -> Pod | None:
    """The pod, when it is an unbound card pod charged to its queue's pending cards (the pods events are about)."""
    charge = ledger.pod_charge(key)
    if charge is None or charge.bucket is not Bucket.PENDING:
        return None
    return ledger.snapshot.pods.get(key)


def _quota(ledger: Ledger, queue: str) -> Mapping[str, int]:
    record = ledger.snapshot.queues.get(queue)
    return record.quota.values if record is not None else {}


def _event(meta: ObjectMeta, refusal: Refusal | None) -> CardEvent | None:
    return None if refusal is None else CardEvent.about(meta, refusal.reason, refusal.message)
