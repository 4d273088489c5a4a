"""What an object charges its queue in cards: the one definition the ledger, the admission policies, the
scheduling session and explain use (capacity-card-design.md).

* A pod being deleted (``metadata.deletionTimestamp``) while Pending or Running charges nothing: Volcano counts it
  ``Releasing``, neither allocated nor pending (:attr:`~cardquota.core.objects.Pod.releasing`).
* A **bound** pod (``spec.nodeName`` set) that is not Succeeded/Failed holds, per requested resource, the card type
  its node offers for that resource (an ``A|B`` pod is charged to the type it landed on): *allocated*.
* A pod that is **not bound** — or bound where the node is unknown or offers no card type for what it requests —
  with a ``volcano.sh/card.name`` takes :func:`pending_cards` of it, keyed by the name as written: *pending*; an
  unbound pod still at cardquota's scheduling gate is marked :attr:`Charge.gated` (it holds no quota yet).
* A **pod template** (a Volcano Job's task, a workload's) takes :func:`pending_cards` per replica: what each of its
  pods will be charged while it waits.
* A PodGroup in phase ``Inqueue`` reserves its ``volcano.sh/card.request`` minus what its pods already hold, keyed
  as in the request (``"A|B"`` stays one key; a key's alternatives are one set): *inqueue* (:func:`group_charge`);
  without a card.request, what its pods wait for. A ``Running`` PodGroup with ``spec.minResources`` reserves what its
  pods still wait for (an elastic job), as Volcano does.

Which requested resources are cards is :func:`cardquota.core.resources.card_requests`: the ones nodes offer as card
types, else (no node offers any of them yet) every resource that can be a card.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from enum import StrEnum
from fractions import Fraction
from typing import NamedTuple

from cardquota.core.hashable import HashableCards
from cardquota.core.objects import ObjectKey, Pod, PodGroup, share
from cardquota.core.quantity import whole_units
from cardquota.core.quota import canonical_key, card_alternatives
from cardquota.core.resources import card_requests
from cardquota.core.snapshot import NodeRecord


class Bucket(StrEnum):
    ALLOCATED = "allocated"
    INQUEUE = "inqueue"
    PENDING = "pending"


class Charge(NamedTuple):
    """What one object adds to one queue's bucket (a named tuple: the ledger makes one per pod event)."""

    queue: str
    bucket: Bucket
    cards: Mapping[str, int]
    uses_cluster_resources: bool = False
    """True when the amounts depended on which resources the cluster's nodes offer as cards."""
    group: ObjectKey | None = None
    """For a pod: its PodGroup, whose inqueue reservation its allocated cards count against."""
    card_name: str | None = None
    """For a pod: its ``volcano.sh/card.name`` as written (decides which card.request key it holds)."""
    gated: bool = False
    """For a pending pod: it waits at cardquota's scheduling gate (:mod:`cardquota.core.gate`), so it holds no
    quota yet; a pending pod past the gate (or created without it) holds its cards from then on."""


INQUEUE_PHASE = "Inqueue"


SHARED_CHARGES: dict[Charge, Charge] = {}
"""Pod charges of one card type, each its own key: equal charges are one tuple (a bounded table, see
:func:`~cardquota.core.objects.share`; charges are values, never changed in place)."""
SHARED_CARDS: dict[tuple[str, int], HashableCards] = {}
"""The one-card-type amounts of :data:`SHARED_CHARGES` (``{"NVIDIA-A100": 8}``), one map per (card type, amount):
the charges of different jobs (PodGroup, queue) hold equal amounts."""


def pending_cards(requests: Mapping[str, Fraction], offered: Container[str]) -> int:
    """Whole cards a pod (or each pod of a template) naming a card type takes while it waits: its requests of the
    resources it takes cards through (:func:`~cardquota.core.resources.card_requests` over ``offered``, the
    resources the cluster's nodes offer as cards), summed."""
    amounts = list(card_requests(requests, offered).values())
    return whole_units(amounts[0] if len(amounts) == 1 else sum(amounts, Fraction(0)))


def cards_on_node(requests: Mapping[str, Fraction], node: NodeRecord | None) -> dict[str, int]:
    """A bound pod's requests charged to the card types its node offers for them."""
    cards: dict[str, int] = {}
    if node is None:
        return cards
    for resource, card in node.cards.by_resource.items():  # a node offers few card resources
        amount = requests.get(resource)
        if amount is not None and amount.numerator > 0:  # a Fraction's sign is its numerator's
            cards[card.name] = cards.get(card.name, 0) + whole_units(amount)
    return cards


def pod_charge(pod: Pod, queue: str, node: NodeRecord | None, offered: Container[str]) -> Charge | None:
    """What ``pod`` charges ``queue`` (its node's record, when bound; ``offered`` as in :func:`pending_cards`), or
    None when it charges nothing. Equal charges of one card type are one shared tuple."""
    if pod.terminated or pod.releasing:  # a pod being deleted is Releasing to Volcano: not allocated, not pending
        return None
    cards: dict[str, int] = {}
    uses_cluster = False
    if pod.bound:
        cards = cards_on_node(pod.requests, node)
    if not cards and pod.card_name is not None:
        # Unbound (pending), or bound where the node offers no card type for what the pod requests.
        amount = pending_cards(pod.requests, offered)
        uses_cluster = True
        if amount > 0:
            cards = {pod.card_name: amount}
    if not cards:
        return None
    bucket = Bucket.ALLOCATED if pod.bound else Bucket.PENDING
    gated = pod.gate is not None and not pod.bound
    if len(cards) == 1:  # the common pod: one card type, shared with the pods of its job
        [(card, amount)] = cards.items()
        amounts = SHARED_CARDS.get((card, amount)) or share(SHARED_CARDS, (card, amount), HashableCards(cards))
        charge = Charge(queue, bucket, amounts, uses_cluster, pod.group_key, pod.card_name, gated)
        return SHARED_CHARGES.get(charge) or share(SHARED_CHARGES, charge, charge)
    return Charge(queue, bucket, cards, uses_cluster, pod.group_key, pod.card_name, gated)


RUNNING_PHASE = "Running"


def job_card_request(request: Mapping[str, int], holdings: Mapping[tuple[str | None, str], int],
                     pending: Mapping[str, int]) -> Mapping[str, int]:
    """The cards a job asks for at enqueue: its ``volcano.sh/card.request`` (``request``, parsed); without one, its
    pods' — what its bound pods hold (by card type, ``holdings``) and what its other pods wait for (by card name,
    ``pending``). Volcano's controller gives a plain pod, and the pods of a ReplicaSet, StatefulSet, DaemonSet or
    batch Job, one PodGroup per controlling owner (``podgroup-<owner uid>``: ``GeneratePodgroupName``), with a
    card.request only when the owner carries one (its ``volcano.sh/`` annotations are inherited,
    ``buildPodGroupFromPod`` in pkg/controllers/podgroup, v1.15.1), and the seed defers to the pods' requests
    ("If Pods have already been created, ``volcano.sh/card.request`` will not take effect"). Where both exist the
    seed's plugin (``NewJobInfo`` at 61a5f00) takes the pods' even while the job controller is still creating them,
    so a job of 8 with 2 pods created reserves 2; the card.request is kept here until its pods hold it."""
    if request or (not holdings and not pending):
        return request
    cards: dict[str, int] = dict(pending)
    for (_, card), amount in holdings.items():
        cards[card] = cards.get(card, 0) + amount
    return cards


def group_charge(group: PodGroup, request: Mapping[str, int], holdings: Mapping[tuple[str | None, str], int],
                 pending: Mapping[str, int] | None = None, gated: Mapping[str, int] | None = None) -> Charge | None:
    """What a PodGroup reserves (*inqueue*), or None:

    * phase ``Inqueue``: its card.request (``request``, parsed) minus what its pods hold (``holdings``: cards by
      (the pod's card.name, the card type held)); without a card.request, what its pods wait for (``pending``:
      cards by the pods' card names) — :func:`job_card_request`, the same cards the enqueue check weighed;
    * phase ``Running`` with ``spec.minResources`` (an elastic job, running with some pods still waiting): what its
      pods wait for, as Volcano keeps a running job's ``minResources`` beyond its allocation reserved (the seed's
      ``buildQueueAttrByJob`` and ``GetInqueueResource``, whose minimum is its pods' requests once they exist);

    in both, less what its pods waiting at cardquota's gate ask (``gated``, by card name): the gate holds those to
    the quota itself, as Volcano's ``capacity`` and ``overcommit`` plugins count a job's reservation less its
    scheduling-gated pods' requests (``JobInfo.DeductSchGatedResources``, pkg/scheduler/api/job_info.go, used in
    pkg/scheduler/plugins/capacity/capacity.go, v1.15.1). Else a job enqueued while its pods wait at the gate would
    keep the cards the gate gives another (of higher priority) out of reach of that one's enqueue check, and neither
    would run.
    """
    pending = pending or {}
    if group.phase == RUNNING_PHASE:
        if not pending or not group.min_resources:
            return None
        return _inqueue(group.queue, without_gated(dict(pending), gated))
    if group.phase != INQUEUE_PHASE:
        return None
    if not request:
        return _inqueue(group.queue, without_gated(dict(pending), gated)) if pending else None
    held = dict.fromkeys(request, 0)
    for (card_name, card), amount in holdings.items():
        request_key = request_key_for(card, card_name, request)
        if request_key is not None:
            held[request_key] += amount
    remaining = {name: wanted - held[name] for name, wanted in request.items() if wanted > held[name]}
    return _inqueue(group.queue, without_gated(remaining, gated))


def _inqueue(queue: str, cards: Mapping[str, int]) -> Charge | None:
    return Charge(queue, Bucket.INQUEUE, dict(cards)) if cards else None


def without_gated(cards: Mapping[str, int], gated: Mapping[str, int] | None) -> dict[str, int]:
    """``cards`` (by card.request key or card name) less what pods waiting at cardquota's gate ask (``gated``, by
    card name; each counted against the key it would be held under), none below 0 (Volcano's
    ``DeductSchGatedResources`` floors at 0: a job may have more gated pods than its minimum)."""
    left = dict(cards)
    for name, amount in (gated or {}).items():
        key = name if name in left else request_key_for(card_alternatives(name)[0], name, left)
        if key is not None and key in left:
            left[key] = max(0, left[key] - amount)
    return {name: amount for name, amount in left.items() if amount > 0}


def request_key_for(card: str, card_name: str | None, request: Mapping[str, int]) -> str | None:
    """Which key of a card.request a held card counts against: the pod's own card.name when the request uses
    it (as the same set of types), else the first key (in the order written) whose alternatives include the card
    type."""
    if card_name is not None:
        own = canonical_key(card_name)
        if own in request and card in card_alternatives(own):
            return own
    for name in request:
        if card in card_alternatives(name):
            return name
    return None

