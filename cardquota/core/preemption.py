"""Choosing preemption victims inside a card quota: the pure decision the card-quota gate acts on.

A queue's policy (:data:`~cardquota.core.keys.PREEMPTION` on the Queue, :class:`PreemptionPolicy`, ``Never`` by
default) says whether a unit waiting at the gate for lack of card quota in its queue Q may displace workloads
admitted in Q. :func:`choose_victims` decides which, from inputs alone (no I/O, no clock: times are inputs):

* **Candidates**: the units (a whole PodGroup: evicting part of a gang breaks it; or a pod without one) admitted in
  Q only, never outside it, of lower priority than the preemptor's P (``LowerPriority``), or also of equal priority
  and queued after it (``LowerOrNewerEqualPriority``, as Kueue's ``withinClusterQueue``; one admitted by
  preemption is never displaced at equal priority, so two equal workloads do not evict each other in turn), that
  Volcano would preempt (:func:`pod_preemptable`) and whose eviction no PodDisruptionBudget would refuse now (an
  input), and that hold a card type the preemptor can use.
* **Order**: as Kueue orders candidates within a ClusterQueue (``CandidatesOrdering`` in
  pkg/scheduler/preemption/common/ordering.go, kubernetes-sigs/kueue v0.19.2): lowest priority first, then the
  most recently admitted first, so the least work is lost.
* **Set**: candidates are taken in that order until the preemptor fits, then each is put back, last to first, if
  the preemptor still fits without it (Kueue's ``classicalPreemptions`` and ``fillBackWorkloads`` in
  pkg/scheduler/preemption/preemption.go, v0.19.2): the set is minimal (dropping any victim leaves the preemptor
  unplaceable). All or nothing: when no set fits, no victim is named, with why.
* **Fit** is the gate's own rule (:class:`~cardquota.core.card_room.CardRoom`): the preemptor's pods, one card ask each
  (``A|B`` alternatives in order), fit Q and every ancestor with a card quota, beside what the room already counts
  (held cards and lifts in flight). A victim's release lowers Q's subtree and so its ancestors too: a wait bound by
  a parent's quota is solved only if the victims free the parent's binding type.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from cardquota.core import keys
from cardquota.core.card_room import CardRoom, Shortage
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.ledger import PODGROUP, HeldUnit, Ledger
from cardquota.core.objects import ObjectKey, Pod, PodGroup
from cardquota.core.quota import card_alternatives
from cardquota.core.selectors import label_selector_matches
from cardquota.core.snapshot import ClusterSnapshot


class PreemptionPolicy(StrEnum):
    """What a queue's waiting units may displace among the queue's admitted ones (Kueue's
    ``ClusterQueuePreemption.withinClusterQueue`` values)."""

    NEVER = "Never"
    """Nothing (the default): first come, first served within the quota."""
    LOWER_PRIORITY = "LowerPriority"
    """Units of lower priority."""
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
    """Units of lower priority, and of equal priority queued after the preemptor."""


def preemption_policy(annotations: Mapping[str, str]) -> tuple[PreemptionPolicy, str]:
    """A Queue's preemption policy from its annotations, and "" — or ``Never`` and a one-line error when the
    annotation names no policy (values are case-sensitive, as Kueue's enum)."""
    value = annotations.get(keys.PREEMPTION)
    if value is None:
        return PreemptionPolicy.NEVER, ""
    try:
        return PreemptionPolicy(value), ""
    except ValueError:
        return PreemptionPolicy.NEVER, (f"{keys.PREEMPTION} {value!r} is not a preemption policy: write one of "
                                        f"{', '.join(policy.value for policy in PreemptionPolicy)}")


def queue_policy(snapshot: ClusterSnapshot, queue: str) -> PreemptionPolicy:
    """The preemption policy of ``queue`` as the snapshot holds it (``Never`` for a queue it does not hold)."""
    record = snapshot.queues.get(queue)
    return preemption_policy(record.queue.meta.annotations)[0] if record is not None else PreemptionPolicy.NEVER


def policy_fact(queue: str, annotations: Mapping[str, str]) -> str:
    """What ``explain`` says of a waiting unit's queue: its policy (:func:`preemption_policy` of the Queue's
    ``annotations``) and what it lets card work waiting at the gate displace."""
    policy, error = preemption_policy(annotations)
    if error:
        return f"Queue {queue}'s {error}; it is read as {policy.value}: nothing is preempted."
    if policy is PreemptionPolicy.NEVER:
        source = keys.PREEMPTION if keys.PREEMPTION in annotations else f"the default: no {keys.PREEMPTION}"
        return f"Queue {queue}'s preemption policy is {policy.value} ({source}): it displaces no admitted workload."
    which = "lower priority" if policy is PreemptionPolicy.LOWER_PRIORITY else (
        "lower priority, or of equal priority and queued after it")
    return (f"Queue {queue}'s preemption policy is {policy.value} ({keys.PREEMPTION}): card work waiting at its gate "
            f"displaces admitted workloads of the queue of {which}.")


_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
"""The spellings Go's ``strconv.ParseBool`` accepts."""


def pod_preemptable(pod: Pod) -> bool:
    """Whether Volcano's ``preempt`` action may evict the pod, as ``api.GetPodPreemptable`` reads it
    (pkg/scheduler/api/pod_info.go, volcano-sh/volcano v1.15.1): the :data:`~cardquota.core.keys.PREEMPTABLE`
    annotation, else the label of that name, parsed as ``strconv.ParseBool`` (an unparsable value: not
    preemptable); neither: preemptable. A PodGroup is a candidate when every pod of it is (``preempt`` checks
    ``task.Preemptable`` per pod; evicting a gang evicts them all)."""
    for source in (pod.annotations, pod.labels):
        value = source.get(keys.PREEMPTABLE)
        if value is not None:
            return value in _TRUE
    return True


def unit_preemptable(pods: Iterable[Pod]) -> bool:
    """Whether a unit (a PodGroup's pods, or one pod) may be a victim: every pod of it :func:`pod_preemptable`."""
    return all(pod_preemptable(pod) for pod in pods)


def unit_admitted(pods: Iterable[Pod], now: str) -> str:
    """When a unit (a PodGroup's pods, or one pod) was admitted, for :attr:`Admitted.admitted`: the latest binding
    time of its pods (:attr:`~cardquota.core.objects.Pod.admitted`), or ``now`` (RFC 3339, an input: the core reads
    no clock) when one of them is past the gate and not bound yet: being placed, it is the most recently admitted
    there is (the ledger keeps no time of lifts)."""
    latest = ""
    for pod in pods:
        if not pod.admitted:
            return now
        latest = max(latest, pod.admitted)
    return latest


@dataclass(frozen=True)
class CardAsk:
    """One pod's ask, as the gate judges it: its ``volcano.sh/card.name`` (``A|B``: alternatives in order) and the
    cards it waits for."""

    card_name: str
    cards: int


@dataclass(frozen=True)
class Preemptor:
    """A unit waiting at the gate: its pods' asks in the gate's order, its priority (a PodGroup's: the value of the
    PriorityClass its ``spec.priorityClassName`` names, as Volcano's cache sets ``JobInfo.Priority`` in
    pkg/scheduler/cache/cache.go v1.15.1; a lone pod's: its ``spec.priority``) and when it was queued (RFC 3339,
    its creation)."""

    name: str
    """``namespace/name`` of its PodGroup or pod, for messages."""
    queue: str
    priority: int
    created: str
    asks: tuple[CardAsk, ...]


@dataclass(frozen=True)
class Admitted:
    """A unit admitted in a queue (a whole PodGroup, or a pod without one): what evicting it would free."""

    key: ObjectKey
    kind: str
    """``PodGroup`` or ``Pod``."""
    queue: str
    priority: int
    created: str
    """When it was queued (RFC 3339): compared with the preemptor's under ``LowerOrNewerEqualPriority``."""
    admitted: str
    """When it went through the gate (RFC 3339): the most recent is evicted first. From held pods:
    :func:`unit_admitted`."""
    cards: Mapping[str, int]
    """Cards held per card name as the ledger holds them (an unnarrowed ``A|B`` counts against each)."""
    preemptable: bool = True
    """:func:`unit_preemptable` of its pods."""
    eviction_refused: bool = False
    """A PodDisruptionBudget would refuse its eviction now."""
    admitted_by_preemption: bool = False
    """It went through by preempting others: not displaced by a unit of equal priority."""
    pods: tuple[ObjectKey, ...] = field(default=(), compare=False)
    """Its pods that hold cards (what evicting it evicts)."""

    @property
    def identity(self) -> HeldUnit:
        """(kind, namespace, name), as the ledger names a unit holding cards."""
        return (self.kind, self.key[0], self.key[1])

    @property
    def name(self) -> str:
        return f"{self.kind.lower()} {self.key[0]}/{self.key[1]}"


@dataclass(frozen=True)
class PreemptionPlan:
    """The victims to evict, in eviction order; none when the preemptor fits already."""

    victims: tuple[Admitted, ...]

    def frees(self) -> dict[str, int]:
        """Cards the victims free, per card name as held."""
        freed: dict[str, int] = {}
        for victim in self.victims:
            for name, amount in victim.cards.items():
                freed[name] = freed.get(name, 0) + amount
        return freed


class NoPreemption(StrEnum):
    """Why a waiting unit preempts nothing."""

    POLICY_NEVER = "PolicyNever"
    NO_LOWER_PRIORITY = "NoLowerPriority"
    """No admitted unit of Q that the policy lets it displace holds a card type it can use."""
    NOT_PREEMPTABLE = "NotPreemptable"
    """Enough would be freed only by evicting units marked not preemptable."""
    EVICTION_REFUSED = "EvictionRefused"
    """Enough would be freed only by evicting units a PodDisruptionBudget protects now."""
    PARENT_BOUND = "ParentBound"
    """An ancestor's quota binds even with every candidate of Q evicted."""
    NO_SET_FITS = "NoSetFits"


@dataclass(frozen=True)
class NoPlan:
    why: NoPreemption
    message: str
    """One line: why, and what happens or what to do."""


@dataclass
class _Trial:
    """The preemptor judged on the gate's room with some units released (undone by :meth:`restore`)."""

    room: CardRoom
    preemptor: Preemptor
    released: list[Admitted] = field(default_factory=list)

    def release(self, unit: Admitted) -> None:
        for name, amount in unit.cards.items():
            self.room.hold(unit.queue, name, -amount)
        self.released.append(unit)

    def put_back(self, unit: Admitted) -> None:
        for name, amount in unit.cards.items():
            self.room.hold(unit.queue, name, amount)
        self.released.remove(unit)

    def restore(self) -> None:
        for unit in self.released:
            for name, amount in unit.cards.items():
                self.room.hold(unit.queue, name, amount)
        self.released.clear()

    def shortage(self) -> Shortage | None:
        """Why the preemptor's pods do not all fit the room now (the gate's choice per pod, all taken together and
        given back), None when they do."""
        taken, short = _take_asks(self.room, self.preemptor)
        for card, amount in taken.items():
            self.room.take(self.preemptor.queue, card, -amount)
        return short


def may_displace(policy: PreemptionPolicy, preemptor: Preemptor, unit: Admitted) -> bool:
    """Whether the policy lets ``preemptor`` displace ``unit`` (same queue, by priority and queue time; Kueue's
    ``SatisfiesPreemptionPolicy`` in pkg/scheduler/preemption/common/preemption_policy.go, v0.19.2)."""
    if policy is PreemptionPolicy.NEVER or unit.queue != preemptor.queue:
        return False
    if unit.priority < preemptor.priority:
        return True
    return (policy is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY and unit.priority == preemptor.priority
            and unit.created > preemptor.created and not unit.admitted_by_preemption)


def eviction_order(units: Iterable[Admitted]) -> list[Admitted]:
    """Lowest priority first, then most recently admitted first (then by key, for one order)."""
    ordered = sorted(units, key=lambda unit: unit.key)
    ordered.sort(key=lambda unit: unit.admitted, reverse=True)  # (stable: equal times keep the key order)
    ordered.sort(key=lambda unit: unit.priority)
    return ordered


def choose_victims(preemptor: Preemptor, admitted: Iterable[Admitted], room: CardRoom,
                   policy: PreemptionPolicy) -> PreemptionPlan | NoPlan:
    """The victims whose eviction lets ``preemptor`` through the gate, or why there are none (see the module rules).
    ``admitted``: the units admitted in the preemptor's queue (others are ignored); ``room``: the gate's
    :class:`~cardquota.core.card_room.CardRoom` for this round, without the preemptor (it is left as it was given)."""
    queue = preemptor.queue
    if policy is PreemptionPolicy.NEVER:
        return NoPlan(NoPreemption.POLICY_NEVER,
                      f"queue {queue}'s preemption policy is Never: {preemptor.name} waits for cards to be released "
                      f"(set {keys.PREEMPTION}: {PreemptionPolicy.LOWER_PRIORITY} on the Queue to let it displace "
                      "lower-priority work)")
    trial = _Trial(room, preemptor)
    if trial.shortage() is None:
        return PreemptionPlan(())
    usable = {card for ask in preemptor.asks if ask.cards for card in card_alternatives(ask.card_name)}
    allowed = [unit for unit in admitted if may_displace(policy, preemptor, unit)
               and any(amount > 0 and usable.intersection(card_alternatives(name))
                       for name, amount in unit.cards.items())]
    evictable = eviction_order(unit for unit in allowed if unit.preemptable and not unit.eviction_refused)
    for unit in evictable:  # (all at once first: when even that does not fit, the answer is nothing, in O(n))
        trial.release(unit)
    fits = trial.shortage() is None
    trial.restore()
    if not fits:
        return _no_plan(trial, allowed)
    victims: list[Admitted] = []
    for unit in evictable:
        trial.release(unit)
        victims.append(unit)
        if trial.shortage() is None:
            break
    for unit in reversed(victims[:]):  # (put back each one the preemptor fits without, last to first)
        trial.put_back(unit)
        if trial.shortage() is None:
            victims.remove(unit)
        else:
            trial.release(unit)
    trial.restore()
    return PreemptionPlan(tuple(victims))


def _no_plan(trial: _Trial, allowed: list[Admitted]) -> NoPlan:
    """Why no set of evictable candidates fits: the first of the units held back (PDB, not preemptable) that would
    make it fit, else what binds with every candidate released."""
    preemptor = trial.preemptor
    queue = preemptor.queue
    if not allowed:
        return NoPlan(NoPreemption.NO_LOWER_PRIORITY,
                      f"no workload admitted in queue {queue} with lower priority than {preemptor.name} "
                      f"({preemptor.priority}) holds the cards it asks: it waits for cards to be released")
    try:
        for unit in allowed:
            if unit.preemptable:
                trial.release(unit)
        if trial.shortage() is None:
            return NoPlan(NoPreemption.EVICTION_REFUSED,
                          f"evicting the lower-priority workloads of queue {queue} that would make room for "
                          f"{preemptor.name} is refused by a PodDisruptionBudget now: it waits and is judged again")
        for unit in allowed:
            if not unit.preemptable:
                trial.release(unit)
        short = trial.shortage()
        if short is None:
            return NoPlan(NoPreemption.NOT_PREEMPTABLE,
                          f"only evicting workloads of queue {queue} marked {keys.PREEMPTABLE}: \"false\" would make "
                          f"room for {preemptor.name}: it waits for cards to be released")
    finally:
        trial.restore()
    assert short is not None
    if short.parent_bound:
        return NoPlan(NoPreemption.PARENT_BOUND,
                      f"{short.sentence()} even with every lower-priority workload of queue {queue} evicted: "
                      f"preemption acts within queue {queue} only, so {preemptor.name} waits")
    return NoPlan(NoPreemption.NO_SET_FITS,
                  f"{short.sentence()} even with every lower-priority workload of queue {queue} evicted: nothing is "
                  f"evicted and {preemptor.name} waits")


BEING_PLACED = "9999-12-31T23:59:59Z"
"""The admission time of a unit with a pod past the gate and not bound yet: later than any RFC 3339 time there is
(:func:`unit_admitted`'s ``now`` in a gate round, which reads no clock)."""


@dataclass
class AdmittedMemo:
    """The admitted units of each queue as last read (:func:`admitted_units`), kept with the ledger
    (:func:`admitted_memo`) and read again only when its :meth:`~cardquota.core.ledger.Ledger.held_version` of the
    queue has changed: a preemptor waiting rounds on end for its victims' release, or for a budget, and the
    scheduler asking again each session whether a job may be enqueued, cost O(the queue's units) once, not each
    time."""

    ledger: Ledger
    units: dict[str, tuple[int, list[Admitted]]] = field(default_factory=dict)

    def admitted(self, queue: str, refused: Collection[HeldUnit] = ()) -> list[Admitted]:
        version = self.ledger.held_version(queue)
        found = self.units.get(queue)
        if found is None or found[0] != version:
            found = self.units[queue] = (version, admitted_units(self.ledger, queue))
        units = found[1]
        if refused:
            units = [replace(unit, eviction_refused=True) if unit.identity in refused else unit for unit in units]
        return units


def admitted_memo(ledger: Ledger) -> AdmittedMemo:
    """The ledger's :class:`AdmittedMemo` (made on first use)."""
    memo = ledger.memos.get("admitted-units")
    if not isinstance(memo, AdmittedMemo):
        memo = ledger.memos["admitted-units"] = AdmittedMemo(ledger)
    return memo


def admitted_units(ledger: Ledger, queue: str) -> list[Admitted]:
    """The units holding ``queue``'s cards (:meth:`~cardquota.core.ledger.Ledger.held_units`), as preemption weighs
    them: a PodGroup's priority is the highest of its pods' (Volcano's job controller gives every pod of a job the
    job's priorityClassName) and its queue time the PodGroup's creation; a pod without a PodGroup has no queue time
    read (the ledger keeps none for it): it is never displaced at equal priority. Whether a budget refused a unit's
    eviction a moment ago is the round's to say (:meth:`AdmittedMemo.admitted`)."""
    snapshot = ledger.snapshot
    units = []
    for identity, pods in ledger.held_units(queue).items():
        kind, namespace, name = identity
        group = snapshot.podgroups.get((namespace, name)) if kind == PODGROUP else None
        cards: dict[str, int] = {}
        for pod in pods:
            charge = ledger.pod_charge(pod.key)
            if charge is not None:
                for card, amount in charge.cards.items():
                    cards[card] = cards.get(card, 0) + amount
        units.append(Admitted(
            key=(namespace, name), kind=kind, queue=queue, priority=max(pod.priority for pod in pods),
            created=group.created if group is not None else "", admitted=unit_admitted(pods, BEING_PLACED),
            cards=cards, preemptable=unit_preemptable(pods),
            admitted_by_preemption=any(keys.ADMITTED_BY_PREEMPTION in pod.annotations for pod in pods),
            pods=tuple(pod.key for pod in pods)))
    return units


@dataclass(frozen=True)
class Preemption:
    """A unit waiting at the gate that displaces admitted ones: the victims to evict now (none when those already
    being evicted free enough), and the cards it waits for them to release."""

    preemptor: Preemptor
    pods: tuple[ObjectKey, ...]
    """The preemptor's pods waiting at the gate."""
    group: ObjectKey | None
    victims: tuple[Admitted, ...]
    frees: Mapping[str, int]
    """Cards the new victims free, per card name as held."""

    def sentence(self) -> str:
        """Why the preemptor waits (the gate's sentence for it)."""
        if not self.victims:
            return "the workloads preempted for it are releasing their cards"
        names = ", ".join(f"{victim.key[0]}/{victim.key[1]}" for victim in self.victims)
        return (f"preempting {_count(len(self.victims), 'workload')} of queue {self.preemptor.queue} to free "
                f"{cards_text(self.frees)}: {names}")

    def victim_message(self) -> str:
        """The Warning event on each victim (PodGroup, or pod without one)."""
        return (f"Preempted by {self.preemptor.name} (priority {self.preemptor.priority}) to free "
                f"{cards_text(self.frees)} in queue {self.preemptor.queue}")

    def preemptor_message(self) -> str:
        """The Normal event on the preemptor."""
        names = ", ".join(f"{victim.key[0]}/{victim.key[1]} (priority {victim.priority})" for victim in self.victims)
        return (f"Preempting {_count(len(self.victims), 'workload')} of queue {self.preemptor.queue} to free "
                f"{cards_text(self.frees)}: {names}")


def _count(amount: int, noun: str) -> str:
    return f"{amount} {noun}{'' if amount == 1 else 's'}"


def cards_text(amounts: Mapping[str, int]) -> str:
    """``2 NVIDIA-A100, 4 NVIDIA-H100`` (by card name)."""
    return ", ".join(f"{amount} {name}" for name, amount in sorted(amounts.items()))


@dataclass
class _QueueState:
    policy: PreemptionPolicy
    candidates: dict[HeldUnit, Admitted]
    """Units of the queue that may still be chosen this round (not being evicted, not chosen already)."""
    pool: dict[str, int]
    """Per card type, cards of units being evicted (or chosen this round) that no preemptor has taken yet: still
    counted in the room (they are held until the watch shows them released), released for preemptors only."""


@dataclass
class RoundPreemption:
    """Preemption across one gate round, preemptors taken in the gate's order. A preemptor's plan is taken in the
    room at once (:meth:`consider`): the cards it asks are counted for it, on top of what the victims still hold but
    for what their release covers, so no later unit of the round gets them, and no second preemptor is given the
    same victims' cards. Nothing here is remembered between rounds: the victims' eviction is (``evicting``, from
    the keeper until the watch shows them released), and the next round plans again from the watch."""

    ledger: Ledger
    room: CardRoom
    evicting: Collection[HeldUnit] = ()
    """Units whose eviction is under way (written or being written) and that the watch still shows holding cards."""
    refused: Collection[HeldUnit] = ()
    """Units whose eviction a PodDisruptionBudget refused a moment ago."""
    _queues: dict[str, _QueueState] = field(default_factory=dict)

    def _state(self, queue: str) -> _QueueState:
        state = self._queues.get(queue)
        if state is None:
            policy = queue_policy(self.ledger.snapshot, queue)
            units = admitted_memo(self.ledger).admitted(queue, self.refused) \
                if policy is not PreemptionPolicy.NEVER else []
            pool: dict[str, int] = {}
            candidates = {}
            for unit in units:
                if unit.identity in self.evicting:
                    _add_released(pool, unit)
                else:
                    candidates[unit.identity] = unit
            state = self._queues[queue] = _QueueState(policy, candidates, pool)
        return state

    def consider(self, preemptor: Preemptor, pods: tuple[ObjectKey, ...], group: ObjectKey | None
                 ) -> Preemption | NoPlan | None:
        """What ``preemptor`` (which does not fit the room) does under its queue's policy: a :class:`Preemption`
        (taken in the room), why it preempts nothing (:class:`NoPlan`), or None under ``Never`` (nothing is said:
        the gate's behaviour is the one without preemption)."""
        queue = preemptor.queue
        state = self._state(queue)
        if state.policy is PreemptionPolicy.NEVER:
            return None
        room = self.room
        for card, amount in state.pool.items():
            room.take(queue, card, -amount)
        outcome = choose_victims(preemptor, state.candidates.values(), room, state.policy)
        if isinstance(outcome, NoPlan):
            for card, amount in state.pool.items():
                room.take(queue, card, amount)
            return outcome
        for victim in outcome.victims:
            del state.candidates[victim.identity]
            for card, amount in _add_released(state.pool, victim).items():
                room.take(queue, card, -amount)
        taken, short = _take_asks(room, preemptor)
        assert short is None, "the plan's victims make the preemptor fit"
        for card in list(state.pool):
            remaining = max(0, state.pool[card] - taken.get(card, 0))
            room.take(queue, card, remaining)  # (what the release covers beyond the preemptor: still held)
            if remaining:
                state.pool[card] = remaining
            else:
                del state.pool[card]
        return Preemption(preemptor, pods, group, outcome.victims, outcome.frees())


def _add_released(pool: dict[str, int], unit: Admitted) -> dict[str, int]:
    """Add what ``unit`` releases to ``pool``, per card type (an unnarrowed ``A|B`` releases each); return it."""
    released: dict[str, int] = {}
    for name, amount in unit.cards.items():
        for card in card_alternatives(name):
            released[card] = released.get(card, 0) + amount
    for card, amount in released.items():
        pool[card] = pool.get(card, 0) + amount
    return released


def _take_asks(room: CardRoom, preemptor: Preemptor) -> tuple[dict[str, int], Shortage | None]:
    """Take the preemptor's asks in the room, each pod's first alternative that fits (the gate's choice); the cards
    taken per card type and None, or — when they do not all fit — nothing taken and the first shortage."""
    taken: dict[str, int] = {}
    queue = preemptor.queue
    for ask in preemptor.asks:
        if not ask.cards:
            continue
        chosen, short = room.choose(queue, ask.card_name, ask.cards, {})
        if chosen is None:
            for card, amount in taken.items():
                room.take(queue, card, -amount)
            return {}, short
        room.take(queue, chosen, ask.cards)
        taken[chosen] = taken.get(chosen, 0) + ask.cards
    return taken, None


def enqueue_plan(group: PodGroup, request: Mapping[str, int], ledger: Ledger) -> PreemptionPlan | NoPlan | None:
    """Whether a PodGroup its queue's card quota keeps from being enqueued would fit once lower-priority units of the
    queue are evicted: the victims its pods will displace at the gate, why none would do (:class:`NoPlan`), or None
    under ``Never``. Volcano's job controller creates a Volcano Job's pods only once its PodGroup is Inqueue
    (``syncJob`` in pkg/controllers/job/job_controller_actions.go, volcano-sh/volcano v1.15.1), so a gang that must
    preempt is let into the queue on this, and its pods then preempt at the gate as any waiting unit does.

    The PodGroup's priority is its job's (:meth:`~cardquota.core.snapshot.ClusterSnapshot.job_priority`), its asks
    are its card ``request`` per card name, and the room is the gate's (what the queue's pods hold, bound or past the
    gate); its own pods are not candidates."""
    snapshot = ledger.snapshot
    policy = queue_policy(snapshot, group.queue)
    if policy is PreemptionPolicy.NEVER:
        return None
    namespace, name = group.key
    preemptor = Preemptor(f"{namespace}/{name}", group.queue, snapshot.job_priority(group), group.created,
                          tuple(CardAsk(card, amount) for card, amount in sorted(request.items()) if amount > 0))
    units = [unit for unit in admitted_memo(ledger).admitted(group.queue)
             if unit.identity != (PODGROUP, namespace, name)]
    if not any(may_displace(policy, preemptor, unit) for unit in units):  # (the common case: O(units), no room)
        return NoPlan(NoPreemption.NO_LOWER_PRIORITY, f"no workload admitted in queue {group.queue} with lower "
                                                      f"priority than {preemptor.name} ({preemptor.priority})")
    room = CardRoom(snapshot, {queue: ledger.held_cards(queue) for queue in ledger.queue_names()})
    return choose_victims(preemptor, units, room, policy)


BUDGET_IGNORED_PHASES = frozenset({"Pending", "Succeeded", "Failed"})
"""Pods the Eviction API deletes without asking a PodDisruptionBudget: not running, or already being deleted
(``canIgnorePDB`` in pkg/registry/core/pod/storage/eviction.go, kubernetes/kubernetes v1.33)."""


def budget_refusal(unit: str, pods: Iterable[Mapping[str, Any]], budgets: Iterable[Mapping[str, Any]]) -> str | None:
    """Why evicting all ``pods`` of one victim ``unit`` (``podgroup ml/sweep``; its pods as read from the API
    server, one namespace) would be refused part-way by a PodDisruptionBudget of theirs (``budgets``: those of that
    namespace), or None. A dry run cannot tell: the API server judges each eviction against the budget as it stands
    and takes one disruption from it only for a real one (``EvictionREST.Create``, ``checkAndDecrement`` in
    pkg/registry/core/pod/storage/eviction.go, v1.33), so a budget allowing one disruption passes the dry run of
    each of a gang's two pods, then refuses the second. So: a budget whose controller has not caught up with its
    spec (``status.observedGeneration`` below ``metadata.generation``) refuses; one selecting more of the pods it
    would be asked about than its ``status.disruptionsAllowed`` refuses."""
    asked = [pod for pod in pods if _budget_applies(pod)]
    for budget in budgets:
        spec = budget.get("spec")
        selector = spec.get("selector") if isinstance(spec, MAPPING_TYPES) else None
        selected = sum(1 for pod in asked if label_selector_matches(selector, _labels(pod)))
        if not selected:
            continue
        metadata, status = _part(budget, "metadata"), _part(budget, "status")
        name = f"PodDisruptionBudget {metadata.get('namespace', '')}/{metadata.get('name', '')}"
        if _integer(status.get("observedGeneration")) < _integer(metadata.get("generation")):
            return f"{name} is still being processed by its controller"
        allowed = _integer(status.get("disruptionsAllowed"))
        if selected > allowed:
            return (f"{name} allows {max(allowed, 0)} disruption{'' if allowed == 1 else 's'} now, and evicting "
                    f"{unit} takes {selected}")
    return None


def _budget_applies(pod: Mapping[str, Any]) -> bool:
    metadata, status = _part(pod, "metadata"), _part(pod, "status")
    return not metadata.get("deletionTimestamp") and (status.get("phase") or "Pending") not in BUDGET_IGNORED_PHASES


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    labels = _part(pod, "metadata").get("labels")
    return labels if isinstance(labels, MAPPING_TYPES) else {}


def _part(manifest: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    part = manifest.get(name)
    return part if isinstance(part, MAPPING_TYPES) else {}


def _integer(value: object) -> int:
    return value if type(value) is int else 0
