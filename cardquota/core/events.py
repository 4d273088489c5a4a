"""Why card work cannot move on now: the scheduler's enqueue and allocate checks, as Kubernetes events (pure).

* a PodGroup not yet Inqueue, job mode (capacity-card-design.md, "Job Enqueueable Check"): per key of its
  ``volcano.sh/card.request``, allocated + inqueue + request must fit the queue's quota, an ``A|B`` key against
  the alternatives' quotas together;
* an unbound card pod, task mode ("Task Allocatable Check"): allocated + request must fit the quota of at least
  one of its alternatives;
* a queue with no card quota at all: ``EmptyQueueCapability``; a pod whose card request cannot be read:
  ``GetTaskRequestResourceFailed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cardquota.core import keys
from cardquota.core.ledger import Bucket, Ledger
from cardquota.core.objects import Pod, PodGroup
from cardquota.core.quota import card_alternatives, card_name_problem, card_request

INSUFFICIENT_QUOTA = "InsufficientScalarQuota"
EMPTY_CAPABILITY = "EmptyQueueCapability"
REQUEST_FAILED = "GetTaskRequestResourceFailed"
NOT_YET_INQUEUE = frozenset({"", "Pending"})


@dataclass(frozen=True)
class CardEvent:
    kind: str
    namespace: str
    name: str
    reason: str
    message: str
    type: str = "Warning"


def podgroup_event(group: PodGroup, ledger: Ledger) -> CardEvent | None:
    """Why a PodGroup with a card.request cannot be enqueued now, or None when it can (or is past that)."""
    if group.phase not in NOT_YET_INQUEUE:
        return None
    request = card_request(group.meta.annotations).values
    if not request:
        return None
    quota = _quota(ledger, group.queue)
    if not quota:
        return _event("PodGroup", group.meta.namespace, group.meta.name, EMPTY_CAPABILITY,
                      f"Queue {group.queue} has no card capability ({keys.CARD_QUOTA}), so card requests in it "
                      "cannot be enqueued")
    usage = ledger.usage(group.queue)
    for key, wanted in request.items():
        alternatives = card_alternatives(key)
        used = sum(usage.allocated.get(card, 0) + usage.inqueue.get(card, 0) for card in alternatives)
        if len(alternatives) > 1:
            used += usage.inqueue.get(key, 0)
        capability = sum(quota.get(card, 0) for card in alternatives)
        if used + wanted > capability:
            return _event("PodGroup", group.meta.namespace, group.meta.name, INSUFFICIENT_QUOTA,
                          insufficient(group.queue, key, wanted, used + wanted, capability))
    return None


def pod_event(pod: Pod, ledger: Ledger) -> CardEvent | None:
    """Why an unbound card pod cannot be allocated now, or None when one of its alternatives fits."""
    if pod.bound or pod.terminated or pod.card_name is None:
        return None
    problem = card_name_problem(pod.card_name)
    charge = ledger.pod_charge(pod.key)
    if problem is not None or charge is None or charge.bucket is not Bucket.PENDING:
        reason = problem or "it requests no card resource for that card type"
        return _event("Pod", pod.meta.namespace, pod.meta.name, REQUEST_FAILED,
                      f"Failed to read the card request of {keys.CARD_NAME} {pod.card_name!r}: {reason}")
    queue = ledger.queue_of(pod)
    quota = _quota(ledger, queue)
    if not quota:
        return _event("Pod", pod.meta.namespace, pod.meta.name, EMPTY_CAPABILITY,
                      f"Queue {queue} has no card capability ({keys.CARD_QUOTA}), so card pods in it cannot be "
                      "allocated")
    wanted = charge.cards.get(pod.card_name, 0)
    allocated = ledger.usage(queue).allocated
    alternatives = card_alternatives(pod.card_name)
    if any(allocated.get(card, 0) + wanted <= quota.get(card, 0) for card in alternatives):
        return None
    first = alternatives[0]
    return _event("Pod", pod.meta.namespace, pod.meta.name, INSUFFICIENT_QUOTA,
                  insufficient(queue, pod.card_name, wanted, allocated.get(first, 0) + wanted, quota.get(first, 0)))


def insufficient(queue: str, card: str, requested: int, total: int, capability: int) -> str:
    """The seed's wording: ``Queue team-a has insufficient NVIDIA-A100 quota: requested 4, total would be 12, but
    capability is 10``."""
    return (f"Queue {queue} has insufficient {card} quota: requested {requested}, total would be {total}, but "
            f"capability is {capability}")


def _quota(ledger: Ledger, queue: str) -> Mapping[str, int]:
    record = ledger.snapshot.queues.get(queue)
    return record.quota.values if record is not None else {}


def _event(kind: str, namespace: str, name: str, reason: str, message: str) -> CardEvent:
    return CardEvent(kind, namespace, name, reason, message)
