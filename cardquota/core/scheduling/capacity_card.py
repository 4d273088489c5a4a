"""capacity-card (capacity-card-design.md, "Main Workflows" and "Implementation Details").

* **Job enqueue** ("Job Enqueueable Check"), one function for every caller (:func:`podgroup_enqueue_refusal`: the
  scheduling session, so ``simulate`` and the extender's ``jobEnqueueable``; the controller's events; ``explain``):
  first the job's ``minResources`` cpu and memory — ``allocated + inqueue - elastic + minResources`` within the
  queue's ``spec.capability`` (unset: 0), skipped for a card job when ``cardUnlimitedCpuMemory`` is on — then, in
  job mode, per key of the job's card request, ``allocated + inqueue - elastic + request`` must fit the queue's
  card capability; an ``A|B`` key adds up the alternatives on both sides (different tasks of one job may use
  different types).
* **Task allocation, task mode**: ``allocated + request`` must fit the capability of at least one alternative
  (one task uses one type).
* **CPU/memory**: ``allocated + request`` within the queue's ``spec.capability`` cpu and memory (a queue without
  them has none), skipped for card tasks when ``cardUnlimitedCpuMemory`` is on.
* **Node order**: for a multi-card task, ``100 * 0.5^index * nodeOrderWeight`` for the first alternative the node
  offers (index in the task's list); 0 for single-type tasks and nodes offering none.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cardquota.core import keys
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.ledger import CpuMemoryUse, Ledger
from cardquota.core.objects import CPU_MEMORY, PodGroup, cpu_memory_of, readable_amounts
from cardquota.core.preemption import PreemptionPlan, enqueue_plan
from cardquota.core.quantity import format_quantity
from cardquota.core.quota import (
    alternative_set,
    card_alternatives,
    card_name_problem,
    quota_allows,
    reserved_on,
)
from cardquota.core.resources import is_card_resource
from cardquota.core.schedconf.reader import read_bool, read_number
from cardquota.core.scheduling.refusal import Refusal

PLUGIN = "capacity-card"
CARD_UNLIMITED_CPU_MEMORY = "cardUnlimitedCpuMemory"
"""The plugin's argument under which a card job's cpu/memory are not its queue's business."""
INSUFFICIENT_SCALAR = "InsufficientScalarQuota"
INSUFFICIENT_CPU = "InsufficientCPUQuota"
INSUFFICIENT_MEMORY = "InsufficientMemoryQuota"
EMPTY_CAPABILITY = "EmptyQueueCapability"
REQUEST_FAILED = "GetTaskRequestResourceFailed"
BASE_SCORE = 100.0


@dataclass(frozen=True)
class CapacityCardConfig:
    card_unlimited_cpu_memory: bool = False
    node_order_weight: float = 1.0

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> CapacityCardConfig:
        """The plugin's arguments as the scheduler ConfigMap writes them (validated there; bad values → defaults)."""
        unlimited = read_bool(arguments.get(CARD_UNLIMITED_CPU_MEMORY))
        weight = read_number(arguments.get("nodeOrderWeight"))
        try:
            node_order_weight = float(weight) if weight is not None and weight > 0 else 1.0
        except OverflowError:  # beyond a float: the default, as for any value that cannot be used
            node_order_weight = 1.0
        return cls(card_unlimited_cpu_memory=bool(unlimited), node_order_weight=node_order_weight)


def insufficient(queue: str, card: str, requested: int, total: int, capability: int) -> str:
    """The seed's wording: ``Queue team-a has insufficient NVIDIA-A100 quota: requested 4, total would be 12, but
    capability is 10``."""
    return (f"Queue {queue} has insufficient {card} quota: requested {requested}, total would be {total}, but "
            f"capability is {capability}")


def card_request_problem(card_name: str, wanted: int) -> str | None:
    """Why a task's card request cannot be read (its ``volcano.sh/card.name`` does not parse, or the task requests
    no card resource for it), or None."""
    return card_name_problem(card_name) or (None if wanted > 0 else "it requests no card resource for that card type")


def request_failed(card_name: str, problem: str) -> Refusal:
    return Refusal(REQUEST_FAILED, f"Failed to read the card request of {keys.CARD_NAME} {card_name!r}: {problem}")


def empty_capability(queue: str, what: str) -> Refusal:
    return Refusal(EMPTY_CAPABILITY, f"Queue {queue} has no card capability ({keys.CARD_QUOTA}), so {what}")


@dataclass(frozen=True)
class Shortfall:
    """The first key of a job's card request that does not fit its queue (job mode)."""

    key: str
    wanted: int
    total: int
    """What the queue would use with the job: allocated + inqueue - elastic + request, over the key's types."""
    capability: int

    @property
    def missing(self) -> int:
        return self.total - self.capability


def job_enqueue_shortfall(request: Mapping[str, int], capability: Mapping[str, int], allocated: Mapping[str, int],
                          inqueue: Mapping[str, int], elastic: Mapping[str, int] | None = None) -> Shortfall | None:
    """Job mode: None when the job's cards fit its queue, else the set of card types they do not fit in.

    The seed checks each key of the request alone: ``allocated + inqueue - elastic + request`` of its types within
    their capability, an ``A|B`` key adding its alternatives up on both sides. Taken key by key, that lets
    reservations kept under other keys through (an Inqueue ``{"A|B": 8}`` in a queue allowing ``A=5, B=3``, then a
    ``{"A": 1}`` or a ``{"B|A": 1}``: 10 cards promised against 8). So every holding and reservation is one demand
    on the set of types it may land on (a type held: that type; an ``A|B`` key: ``{A, B}``, whatever its order or
    spacing), and the job fits when all the demands, its own included, can be placed within the capability of each
    type at once (:func:`_place`). For a single key and nothing else that is the seed's sum exactly. When they
    cannot, the shortfall names the types the job's cards could not be placed in — the key itself, or ``A|B``-style
    the set its reservations connect it to — with what they would hold together against their capability."""
    elastic = elastic or {}
    if all(_fits_apart(key, wanted, request, capability, allocated, inqueue, elastic)
           for key, wanted in request.items()):
        return None  # room on the key's own types whatever the others take (the common case, no placement needed)
    demands: dict[frozenset[str], int] = {}
    for card, amount in allocated.items():
        held = amount - elastic.get(card, 0)
        if held > 0:
            types = alternative_set(card)
            demands[types] = demands.get(types, 0) + held
    for key, amount in inqueue.items():
        types = alternative_set(key)
        demands[types] = demands.get(types, 0) + amount
    job: dict[frozenset[str], int] = {}
    for key, amount in request.items():
        types = alternative_set(key)
        job[types] = job.get(types, 0) + amount
    stuck = _place(demands, job, capability)
    if stuck is None:
        return None

    def within(types: frozenset[str]) -> int:
        return sum(amount for demand in (demands, job) for kind, amount in demand.items() if kind <= types)

    def asked(types: frozenset[str]) -> int:
        return sum(amount for name, amount in request.items() if alternative_set(name) <= types)

    for key in request:  # a key that does not fit its own types says so in the seed's terms
        types = alternative_set(key)
        limit = sum(capability.get(card, 0) for card in types)
        if within(types) > limit:
            return Shortfall(key, asked(types), within(types), limit)
    types, wanted = stuck
    order = [card for key in (*request, *inqueue, *allocated) for card in card_alternatives(key) if card in types]
    label = keys.CARD_ALTERNATIVE_SEPARATOR.join(dict.fromkeys(order))
    limit = sum(capability.get(card, 0) for card in types)
    return Shortfall(label, asked(types), max(within(types), limit + wanted), limit)


def _fits_apart(key: str, wanted: int, request: Mapping[str, int], capability: Mapping[str, int],
                allocated: Mapping[str, int], inqueue: Mapping[str, int], elastic: Mapping[str, int]) -> bool:
    """Whether ``key`` fits even if every other holding and reservation that may land on its types does: then a
    placement of them all exists whenever one of the others exists (they leave at least ``wanted`` free there)."""
    types = alternative_set(key)
    used = sum(max(allocated.get(card, 0) - elastic.get(card, 0), 0) for card in types)
    used += reserved_on(types, inqueue)
    used += reserved_on(types, {other: amount for other, amount in request.items() if other != key})
    return used + wanted <= quota_allows(key, capability)


def _place(demands: Mapping[frozenset[str], int], job: Mapping[frozenset[str], int],
           capability: Mapping[str, int]) -> tuple[frozenset[str], int] | None:
    """Place the queue's ``demands`` (cards per set of types they may land on) within ``capability`` as far as they
    go, then the ``job``'s, moving earlier ones between their alternatives where that makes room (augmenting paths
    of a maximum flow: demand sets → types → capability). None when all of the job's cards are placed; else the
    types reachable from the job's unplaced cards (all full: the set whose capability they exceed) and how many of
    the job's cards are left over."""
    room = {card: capability.get(card, 0) for kind in (*demands, *job) for card in kind}
    flow: dict[tuple[int, str], int] = {}
    """Cards of demand node ``i`` placed on a type."""
    nodes: list[tuple[frozenset[str], int]] = [*demands.items(), *job.items()]
    left = [amount for _, amount in nodes]
    used = dict.fromkeys(room, 0)
    holders: dict[str, set[int]] = {card: set() for card in room}
    """Per type, the demand nodes with cards placed on it."""

    def augment(start: int) -> tuple[bool, set[str]]:
        """One augmenting path from demand node ``start`` to a type with room (breadth first); the types reached."""
        parents: dict[str, tuple[int, str | None]] = {}
        queue: list[tuple[int, str | None]] = [(start, None)]
        seen_nodes = {start}
        while queue:
            node, via = queue.pop(0)
            for card in nodes[node][0]:
                if card in parents:
                    continue
                parents[card] = (node, via)
                if used[card] < room[card]:
                    amount = left[start]
                    path: list[tuple[int, str]] = []
                    step: str | None = card
                    while step is not None:
                        owner, previous = parents[step]
                        path.append((owner, step))
                        if previous is not None:
                            amount = min(amount, flow.get((owner, previous), 0))
                        step = previous
                    amount = min(amount, room[card] - used[card])
                    for owner, step_card in path:
                        flow[(owner, step_card)] = flow.get((owner, step_card), 0) + amount
                        holders[step_card].add(owner)
                    for owner, step_card in path[:-1]:
                        _, previous = parents[step_card]
                        assert previous is not None
                        flow[(owner, previous)] -= amount
                        if not flow[(owner, previous)]:
                            holders[previous].discard(owner)
                    used[card] += amount
                    left[start] -= amount
                    return True, set(parents)
                for other in sorted(holders[card]):  # move another demand's cards off this type
                    if other not in seen_nodes:
                        seen_nodes.add(other)
                        queue.append((other, card))
        return False, set(parents)

    for index in range(len(nodes)):
        while left[index] > 0 and augment(index)[0]:
            pass
    reached: set[str] = set()
    unplaced = 0
    for index in range(len(demands), len(nodes)):
        if left[index] > 0:
            unplaced += left[index]
            reached |= augment(index)[1]
    return (frozenset(reached), unplaced) if unplaced else None


@dataclass(frozen=True)
class CpuMemoryShortfall:
    """The job's ``minResources`` cpu or memory that does not fit its queue's ``spec.capability``."""

    resource: str
    """``cpu`` (cores) or ``memory`` (bytes)."""
    wanted: Fraction
    total: Fraction
    """What the queue would use with the job: allocated + inqueue - elastic + minResources."""
    capability: Fraction
    capability_set: bool
    """False when the queue sets no cpu/memory capability at all (every quota is 0)."""

    @property
    def missing(self) -> Fraction:
        return self.total - self.capability


@dataclass(frozen=True)
class CpuMemoryDemand:
    """What the enqueue check weighs for a job's cpu and memory."""

    minimum: Mapping[str, Fraction]
    """The job's ``minResources`` cpu and memory."""
    capability: Mapping[str, Fraction] | None
    """The queue's ``spec.capability`` cpu and memory; None when it sets neither (both quotas 0)."""
    use: CpuMemoryUse
    """The queue's allocated, inqueue and elastic cpu/memory, counted as the plugin's arguments say."""
    judged: bool = True
    """False for a card job under ``cardUnlimitedCpuMemory``: its cpu/memory are not the queue's business."""


@dataclass(frozen=True)
class EnqueueRefusal(Refusal):
    """Why a job cannot be enqueued now, with the numbers behind the sentence (for ``explain``)."""

    shortfall: Shortfall | CpuMemoryShortfall | None = None


def cpu_memory_enqueue_shortfall(demand: CpuMemoryDemand) -> CpuMemoryShortfall | None:
    """The seed's step 3: cpu, then memory, of ``allocated + inqueue - elastic + minResources`` within the queue's
    capability (unset: 0). Only a resource the job asks for is checked, as Volcano's ``LessEqualWithDimension``."""
    if not demand.judged:
        return None
    capability = demand.capability or {}
    for resource in CPU_MEMORY:
        wanted = demand.minimum.get(resource, Fraction(0))
        if wanted <= 0:
            continue
        limit = capability.get(resource, Fraction(0))
        total = demand.use.used(resource) + wanted
        if total > limit:
            return CpuMemoryShortfall(resource, wanted, total, limit, demand.capability is not None)
    return None


def job_enqueue_refusal(queue: str, request: Mapping[str, int], capability: Mapping[str, int],
                        allocated: Mapping[str, int], inqueue: Mapping[str, int],
                        elastic: Mapping[str, int] | None = None, *,
                        cpu_memory: CpuMemoryDemand | None = None) -> EnqueueRefusal | None:
    """The enqueue check: None when the job fits, else why not — its cpu/memory first (step 3), then each key of
    its card ``request`` in job mode (step 4)."""
    if cpu_memory is not None:
        over = cpu_memory_enqueue_shortfall(cpu_memory)
        if over is not None:
            return cpu_memory_enqueue_refusal(queue, over)
    if not request:
        return None
    if not capability:
        empty = empty_capability(queue, "card requests in it cannot be enqueued")
        return EnqueueRefusal(empty.reason, empty.message)
    short = job_enqueue_shortfall(request, capability, allocated, inqueue, elastic)
    if short is None:
        return None
    return EnqueueRefusal(INSUFFICIENT_SCALAR, insufficient(queue, short.key, short.wanted, short.total,
                                                            short.capability), short)


def cpu_memory_enqueue_refusal(queue: str, over: CpuMemoryShortfall) -> EnqueueRefusal:
    """``InsufficientCPUQuota`` / ``InsufficientMemoryQuota`` with the seed's numbers; ``EmptyQueueCapability`` when
    the queue sets no cpu/memory capability at all."""
    numbers = (f"requested {_amount(over.resource, over.wanted)}, total would be {_amount(over.resource, over.total)}, "
               f"but capability is {_amount(over.resource, over.capability)}")
    if not over.capability_set:
        return EnqueueRefusal(EMPTY_CAPABILITY, f"Queue {queue} has no cpu/memory capability (spec.capability), so "
                                                f"its {over.resource} quota is 0: {numbers}", over)
    reason = INSUFFICIENT_CPU if over.resource == "cpu" else INSUFFICIENT_MEMORY
    return EnqueueRefusal(reason, f"Queue {queue} has insufficient {over.resource} quota: {numbers}", over)


QUEUE_NOT_OPEN = "QueueNotOpen"
OPEN = "Open"


def queue_state_refusal(queue: str, state: str, what: str) -> Refusal | None:
    """A queue whose ``status.state`` is set and not ``Open`` (``Closed``, ``Closing``) takes nothing new: no job is
    enqueued and no task allocated in it (Volcano's ``proportion`` and ``capacity`` plugins, v1.15.1
    pkg/scheduler/plugins/proportion/proportion.go ``queueAllocatable`` and the ``JobEnqueueableFn``; the seed's
    plugin at 61a5f00, capacity_card_fn_job_enqueueable.go). An unset state (a queue the queue controller has not
    reconciled yet) is taken as Open: Volcano's controller sets it on creation."""
    if not state or state == OPEN:
        return None
    return Refusal(QUEUE_NOT_OPEN, f"Queue {queue} is {state}, not Open: {what}")


def podgroup_enqueue_refusal(group: PodGroup, ledger: Ledger,
                             config: CapacityCardConfig | None) -> EnqueueRefusal | None:
    """Whether the scheduler would enqueue ``group`` now, on ``ledger``'s counts — the one decision the scheduling
    session (``simulate``, the extender's ``jobEnqueueable``), the controller's events and ``explain`` share.

    ``config`` None means the plugin's arguments are not known (the controller does not read the scheduler's
    ConfigMap): ``cardUnlimitedCpuMemory`` is then taken as on, the reading that blocks least, so that no job is
    said to be blocked that the scheduler may enqueue (a CPU-only job is judged either way).

    A job short of card quota in a queue whose preemption policy lets it displace lower-priority work
    (:func:`~cardquota.core.preemption.enqueue_plan` finds victims) is enqueued: its pods then wait at the card-quota
    gate while the victims are evicted, and its reservation keeps other jobs of the queue out meanwhile. One short
    only of what other enqueued jobs reserve (no victim needed) waits its turn, as before."""
    record = ledger.snapshot.queues.get(group.queue)
    closed = queue_state_refusal(group.queue, record.queue.state, "it enqueues no new job") if record else None
    if closed is not None:
        return EnqueueRefusal(closed.reason, closed.message)
    request = ledger.group_card_request(group)
    usage = ledger.usage(group.queue)
    refusal = job_enqueue_refusal(group.queue, request, usage.quota, usage.allocated, usage.inqueue,
                                  cpu_memory=cpu_memory_demand(group, ledger, config))
    if refusal is not None and refusal.reason == INSUFFICIENT_SCALAR:
        plan = enqueue_plan(group, request, ledger)
        if isinstance(plan, PreemptionPlan) and plan.victims:
            return None  # enqueued to preempt: its pods displace lower-priority work of the queue at the gate
    return refusal


def cpu_memory_demand(group: PodGroup, ledger: Ledger, config: CapacityCardConfig | None) -> CpuMemoryDemand | None:
    """What the enqueue check weighs for ``group``'s cpu/memory; None when there is nothing to weigh (its queue
    does not exist, or its minResources ask for no cpu or memory)."""
    record = ledger.snapshot.queues.get(group.queue)
    minimum = {resource: amount for resource in CPU_MEMORY
               if (amount := group.min_resources.get(resource, Fraction(0))) > 0}
    if record is None or not minimum:
        return None
    unlimited = config.card_unlimited_cpu_memory if config is not None else True
    judged = not (unlimited and ledger.group_uses_cards(group))
    return CpuMemoryDemand(minimum, record.queue.capability, ledger.cpu_memory(group.queue, unlimited), judged)


def enqueue_is_judged(group: PodGroup, ledger: Ledger, config: CapacityCardConfig | None) -> bool:
    """Whether capacity-card has anything to say about enqueueing ``group``: it asks for cards, or for cpu/memory
    its queue's capability limits (otherwise the extender abstains)."""
    if ledger.group_card_request(group):
        return True
    record = ledger.snapshot.queues.get(group.queue)
    if record is not None and queue_state_refusal(group.queue, record.queue.state, "") is not None:
        return True
    demand = cpu_memory_demand(group, ledger, config)
    return demand is not None and demand.judged


def minimum_beyond_capability(podgroup: Mapping[str, Any], queue: str,
                              capability: Mapping[str, Fraction] | None) -> str | None:
    """The PodGroup admission warning: a job without cards whose ``spec.minResources`` cpu or memory exceed its
    queue's capability on their own can never be enqueued. (A job with a card request, or a card resource among its
    minResources, may be, under ``cardUnlimitedCpuMemory``, which admission does not know: it is not judged.)"""
    spec = podgroup.get("spec")
    minimum = readable_amounts(spec.get("minResources") if isinstance(spec, MAPPING_TYPES) else None)
    if any(amount > 0 and is_card_resource(resource) for resource, amount in minimum.items()):
        return None
    for resource in CPU_MEMORY:
        wanted = minimum.get(resource, Fraction(0))
        limit = (capability or {}).get(resource, Fraction(0))
        if wanted > 0 and wanted > limit:
            reason = EMPTY_CAPABILITY if capability is None else INSUFFICIENT_CPU if resource == "cpu" \
                else INSUFFICIENT_MEMORY
            where = ("sets no spec.capability, so its cpu/memory quota is 0" if capability is None
                     else f"has a {resource} capability of {_amount(resource, limit)}")
            return (f"spec.minResources {resource} {_amount(resource, wanted)} can never fit queue {queue}, which "
                    f"{where}: the PodGroup stays Pending ({reason}) until the queue's spec.capability allows it")
    return None


def task_allocate_refusal(queue: str, card_name: str, wanted: int, capability: Mapping[str, int],
                          allocated: Mapping[str, int]) -> Refusal | None:
    """Task mode: None when one alternative of ``card_name`` fits ``wanted`` more cards, else why not."""
    if not capability:
        return empty_capability(queue, "card pods in it cannot be allocated")
    alternatives = card_alternatives(card_name)
    if any(allocated.get(card, 0) + wanted <= capability.get(card, 0) for card in alternatives):
        return None
    if len(alternatives) == 1:
        card = alternatives[0]
        return Refusal(INSUFFICIENT_SCALAR,
                       insufficient(queue, card, wanted, allocated.get(card, 0) + wanted, capability.get(card, 0)))
    return Refusal(INSUFFICIENT_SCALAR, insufficient_alternatives(queue, card_name, wanted, capability, allocated))


def charged_cards_refusal(queue: str, charged: Mapping[str, int], capability: Mapping[str, int],
                          allocated: Mapping[str, int], *, unquoted_hold_zero: bool) -> Refusal | None:
    """Task mode for a pod that names no ``volcano.sh/card.name`` but requests a card resource: on a node it is
    charged the card type the node offers for that resource (``charged``:
    :func:`~cardquota.core.usage.cards_on_node`, what the ledger will count once it is bound), so that is what is
    checked — never charged unchecked. A queue without any card quota holds 0 such cards when
    ``unquoted_hold_zero`` (``--unquoted-queues=zero``, the seed's "card types without quotas default to 0"), and is
    not card-limited for them otherwise (the ledger still shows what they hold)."""
    if not capability:
        return empty_capability(queue, "card pods in it cannot be allocated (a queue without one holds 0 cards: "
                                       "--unquoted-queues=zero)") if unquoted_hold_zero and charged else None
    for card, wanted in charged.items():
        total = allocated.get(card, 0) + wanted
        if total > capability.get(card, 0):
            return Refusal(INSUFFICIENT_SCALAR,
                           insufficient(queue, card, wanted, total, capability.get(card, 0))
                           + f" (the pod names no {keys.CARD_NAME}: it is charged the node's card type)")
    return None


def insufficient_alternatives(queue: str, card_name: str, wanted: int, capability: Mapping[str, int],
                              allocated: Mapping[str, int]) -> str:
    """Task mode for ``A|B``: one task uses one type, so each alternative is quoted with its own numbers (never
    their sum, which is what job mode weighs): ``Queue team-a has insufficient quota for every alternative of
    NVIDIA-A100|NVIDIA-H100 (a task uses one of them): requested 4; NVIDIA-A100 total would be 12, but capability
    is 10; NVIDIA-H100 total would be 6, but capability is 5``."""
    each = "; ".join(f"{card} total would be {allocated.get(card, 0) + wanted}, but capability is "
                     f"{capability.get(card, 0)}" for card in card_alternatives(card_name))
    return (f"Queue {queue} has insufficient quota for every alternative of {card_name} (a task uses one of them): "
            f"requested {wanted}; {each}")


def fitting_alternatives(card_name: str, wanted: int, capability: Mapping[str, int],
                         allocated: Mapping[str, int]) -> tuple[str, ...]:
    """The alternatives (in preference order) whose quota still has room for ``wanted`` cards."""
    return tuple(card for card in card_alternatives(card_name)
                 if allocated.get(card, 0) + wanted <= capability.get(card, 0))


def queue_capability(queue_spec: Mapping[str, Any]) -> dict[str, Fraction] | None:
    """``spec.capability`` cpu and memory (cores, bytes); None when the queue sets neither. Unreadable amounts are
    left out (the Queue policy refuses them at admission)."""
    return cpu_memory_of(queue_spec.get("capability") if isinstance(queue_spec, MAPPING_TYPES) else None) or None


def cpu_memory_refusal(queue: str, request: Mapping[str, Fraction], capability: Mapping[str, Fraction] | None,
                       allocated: Mapping[str, Fraction], *, uses_cards: bool,
                       config: CapacityCardConfig) -> Refusal | None:
    """The queue's CPU/memory quota (capability; unset means 0), skipped for card tasks when
    ``cardUnlimitedCpuMemory`` is on."""
    if uses_cards and config.card_unlimited_cpu_memory:
        return None
    wants = {resource: request.get(resource, Fraction(0)) for resource in CPU_MEMORY}
    if not any(wants.values()):
        return None
    if capability is None:
        return Refusal(EMPTY_CAPABILITY, f"Queue {queue} has no cpu/memory capability (spec.capability), so "
                                         "tasks requesting cpu or memory in it cannot be allocated")
    for resource, reason in (("cpu", INSUFFICIENT_CPU), ("memory", INSUFFICIENT_MEMORY)):
        limit = capability.get(resource, Fraction(0))
        total = allocated.get(resource, Fraction(0)) + wants[resource]
        if wants[resource] and total > limit:
            return Refusal(reason, f"Queue {queue} has insufficient {resource} quota: requested "
                                   f"{_amount(resource, wants[resource])}, total would be {_amount(resource, total)}, "
                                   f"but capability is {_amount(resource, limit)}")
    return None


def amount_text(resource: str, value: Fraction) -> str:
    """An amount of cpu (cores) or memory (Gi) as the sentences write it."""
    return _amount(resource, value)


def node_order_score(card_name: str | None, node_card_types: Collection[str], config: CapacityCardConfig) -> float:
    """``100 * 0.5^index * nodeOrderWeight`` for the first of the task's alternatives the node offers; 0 for a
    single-type task (no preference to express) and for a node offering none of them."""
    if not card_name or keys.CARD_ALTERNATIVE_SEPARATOR not in card_name:
        return 0.0
    for index, card in enumerate(card_alternatives(card_name)):
        if card in node_card_types:
            return BASE_SCORE * 0.5**index * config.node_order_weight
    return 0.0


def _amount(resource: str, value: Fraction) -> str:
    if resource == "memory":
        if value == 0 or value.denominator != 1:
            return f"{float(value / 2**30):g}Gi"
        return format_quantity(value, binary=True)  # 200Gi, 512Mi, 1536Mi: as a manifest would write it
    return f"{float(value):g}"
