"""Admission by scheduling gate: card pods are created gated, and the gate is lifted when their cards fit.

The pod webhook adds :data:`~cardquota.core.keys.CARD_GATE` to every card pod it admits (:func:`gate_operations`).
Volcano skips a task that carries any gate in allocate, backfill, preempt and reclaim (``calSchedulingGated`` in
pkg/scheduler/api/job_info.go, and the ``task.SchGated`` checks in actions/allocate/allocate.go,
actions/backfill/backfill.go, actions/preempt/preempt.go and actions/reclaim/reclaim.go, Volcano v1.14.1), and
a gated pod is never marked Unschedulable, so autoscalers add no nodes for it. The controller's leader decides here,
once per round over the ledger (:func:`gate_round`), which gated pods to let through:

* **What a queue holds** is read from the watch alone: its bound card pods and its unbound card pods past the gate
  (:meth:`~cardquota.core.ledger.Ledger.held_cards`), plus the lifts this leader has written and not yet seen come
  back (``in_flight``). An unbound pod named ``A|B`` that is past the gate without having been narrowed (created
  before the gate existed) is counted against every alternative: a count that can only delay, never over-admit.
* **Fit**: the pod's cards fit its queue (a type missing from the queue's card.quota is 0) and every ancestor
  (``spec.parent``) that has a card.quota (a type missing there is 0; an ancestor without card.quota limits
  nothing), as :mod:`cardquota.core.policies.queue` reads a hierarchy.
* **Gangs**: the pods of a PodGroup are let through together until ``minMember`` of them are past the gate (a gang
  found half through after a restart is completed the same way); later pods of the group (elastic) one at a time,
  never before the gang. A gang whose pods do not all exist yet waits for them.
* **Alternatives**: a pod named ``A|B`` is given the first alternative, in the order written, that fits; among
  those, one with free cards on the nodes is preferred. The lift narrows ``volcano.sh/card.name`` to it (the
  alternatives are kept in :data:`~cardquota.core.keys.CARD_NAME_REQUESTED`) and the node affinity with it
  (:func:`cardquota.core.policies.pod.narrowed_affinity_operations`), so the pod can only land on, and is only
  charged for, that type.
* **DRA quotas**: a pod naming DRA claims in a queue under a ``spec.dra.capability`` (its own or an ancestor's) is
  gated too, and let through when what its claims ask (:func:`cardquota.core.dra_claims.pod_request`) fits that
  capability of its queue and every ancestor, beside what the bound pods and those past the gate ask
  (:func:`cardquota.core.dra_claims.shortage`, the rule the scheduling session applies). Until the claims have been
  read (``dra_readable``) such a pod waits.
* **Order**: priority (highest first), then creation time, across all queues (siblings share their parent's
  quota in that order). :class:`HeadOfLine` says whether a unit that does not fit holds back the later ones of its
  queue (``StrictFIFO``) or not (``BestEffortFIFO``, the default: the next smaller gang may fit).

The round is a pure function of the ledger: the controller writes its lifts (one JSON patch per pod, guarded by
the pod's uid and its gates) and reads them back from the watch. A restart, a failed write or a lagging watch
delays admission and never over-admits.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from cardquota.core import keys
from cardquota.core.card_room import CardRoom, named
from cardquota.core.dra_claims import (
    DeviceAmounts,
    DraShortage,
    bounded,
    capability,
    number,
    shortage,
    take,
    unknown_ref,
)
from cardquota.core.dra_claims import (
    ancestry as dra_ancestry,
)
from cardquota.core.dra_quota import Quotas
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.ledger import HeldUnit, Ledger
from cardquota.core.objects import Manifest, ObjectKey, Pod
from cardquota.core.preemption import CardAsk, Preemption, Preemptor, RoundPreemption
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.usage import Bucket, pod_charge
from cardquota.core.verdict import PatchOperation, pointer


class HeadOfLine(StrEnum):
    """What a unit (a gang or a pod) that does not fit does to the later ones of its queue."""

    BEST_EFFORT_FIFO = "BestEffortFIFO"
    """Later units that fit go first (a small job is not held behind a big one)."""
    STRICT_FIFO = "StrictFIFO"
    """Later units wait until it has gone through (no starvation of big jobs)."""


@dataclass(frozen=True)
class Lift:
    """One pod to let through the gate."""

    pod: ObjectKey
    uid: str
    queue: str
    card_type: str
    """The card type it is let through for (one alternative of its card.name)."""
    cards: int
    card_name: str
    """Its ``volcano.sh/card.name`` as written."""
    gates: tuple[str, ...]
    """Its gates now (the patch tests them: a pod changed meanwhile is judged again, not patched)."""
    devices: DeviceAmounts = field(default_factory=dict, compare=False)
    """What its DRA claims ask, per DeviceClass (empty for a pod without claims): counted while in flight."""
    by_preemption: bool = False
    """Its unit preempted others to go through: the lift marks it (:data:`~cardquota.core.keys.ADMITTED_BY_PREEMPTION`)
    so no unit of equal priority displaces it."""

    @property
    def narrows(self) -> bool:
        """Whether the pod named alternatives: the lift then narrows its card.name and node affinity."""
        return self.card_type != self.card_name

    def operations(self) -> list[PatchOperation]:
        """The JSON patch (RFC 6902) that lifts the gate: guarded by the pod's uid and gates; for alternatives, the
        card.name narrowed (the node affinity is narrowed with
        :func:`cardquota.core.policies.pod.narrowed_affinity_operations`, which needs the pod's spec)."""
        gates = [{"name": name} for name in self.gates]
        operations = [
            PatchOperation(op="test", path=pointer("metadata", "uid"), value=self.uid),
            PatchOperation(op="test", path=pointer("spec", "schedulingGates"), value=gates),
            PatchOperation(op="replace", path=pointer("spec", "schedulingGates"),
                           value=[gate for gate in gates if gate["name"] != keys.CARD_GATE]),
        ]
        if self.narrows:
            operations += [
                PatchOperation(op="test", path=pointer("metadata", "annotations", keys.CARD_NAME),
                               value=self.card_name),
                PatchOperation(op="replace", path=pointer("metadata", "annotations", keys.CARD_NAME),
                               value=self.card_type),
                PatchOperation(op="add", path=pointer("metadata", "annotations", keys.CARD_NAME_REQUESTED),
                               value=self.card_name),
            ]
        if self.by_preemption:  # (a card pod: its annotations hold its card.name)
            operations.append(PatchOperation(op="add", path=pointer("metadata", "annotations",
                                                                    keys.ADMITTED_BY_PREEMPTION), value="true"))
        return operations


@dataclass(frozen=True)
class Wait:
    """A unit left at the gate this round, with why (the sentence events and ``explain`` give)."""

    pods: tuple[ObjectKey, ...]
    group: ObjectKey | None
    queue: str
    reason: str


@dataclass(frozen=True)
class GateRound:
    lifts: list[Lift] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    """The units left at the gate that displace admitted ones (their victims to evict now), in the gate's order."""

    def sentences(self) -> dict[tuple[str, str, str], str]:
        """Why each object waits, by (kind, namespace, name): every pod of a unit left at the gate, and the PodGroup
        of a gang (what ``kubectl describe`` of either shows as an event)."""
        said: dict[tuple[str, str, str], str] = {}
        for wait in self.waits:
            for namespace, name in wait.pods:
                said["Pod", namespace, name] = wait.reason
            if wait.group is not None:
                said["PodGroup", wait.group[0], wait.group[1]] = wait.reason
        return said


@dataclass
class _Unit:
    queue: str
    pods: list[Pod]
    group: ObjectKey | None
    priority: int
    created: str
    after_gang: bool = False
    """An elastic pod of a group whose gang is judged in the same round: not before the gang."""
    incomplete: tuple[int, int] | None = None
    """For a gang not all of whose pods exist: (pods that do, its minMember)."""
    cards: dict[ObjectKey, int] = field(default_factory=dict)
    """Per pod, the cards it waits for (its charge in the ledger)."""
    elastic: bool = False
    """A pod of a group beyond its gang (its minMember): it goes through when there is room, and displaces nothing."""


def gate_operations(manifest: Manifest) -> list[PatchOperation]:
    """The patch that adds cardquota's gate to a pod being created (none when it has it already)."""
    spec = manifest.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, MAPPING_TYPES) else None
    if not gates:
        return [PatchOperation(op="add", path=pointer("spec", "schedulingGates"), value=[{"name": keys.CARD_GATE}])]
    if any(isinstance(gate, MAPPING_TYPES) and gate.get("name") == keys.CARD_GATE for gate in gates):
        return []
    return [PatchOperation(op="add", path="/spec/schedulingGates/-", value={"name": keys.CARD_GATE})]


def needs_gate(pod: Pod, snapshot: ClusterSnapshot) -> bool:
    """Whether a pod being created waits at the gate: an unbound card pod that its queue's card quota will charge
    (the same charge the ledger counts: :func:`~cardquota.core.usage.pod_charge`), or an unbound pod naming DRA
    claims while some queue sets a DRA capability — whichever its queue turns out to be (its PodGroup may not be
    known yet when it is created): the round lets one whose queue no DRA capability bounds through at once, and
    reads what the claims ask when it judges the others. A pod created with ``spec.nodeName`` skips every
    scheduler, and the API server refuses gates on it."""
    if pod.bound or not snapshot.charges_a_queue(pod):
        return False
    queue = snapshot.queue_of(pod)
    if pod.card_name is not None:
        charge = pod_charge(pod, queue, None, snapshot.catalog().resources)
        if charge is not None and charge.bucket is Bucket.PENDING:
            return True
    return bool(pod.claims) and snapshot.sets_dra_capability()


class _DraRoom:
    """DRA devices held per queue (each queue: itself and the queues below it), and the capabilities over them."""

    def __init__(self, ledger: Ledger, readable: bool) -> None:
        self.ledger = ledger
        self.snapshot = ledger.snapshot
        self.readable = readable
        self.unread_queues: set[str] | None = None
        self.held: dict[str, DeviceAmounts] = {}
        self._parents: dict[str, str] | None = None
        self._capabilities: dict[str, Quotas] = {}
        self._bounded: dict[str, bool] = {}

    @property
    def parents(self) -> dict[str, str]:
        """Each queue's parent (read once per round, and only in a round that judges a pod naming claims)."""
        if self._parents is None:
            self._parents = self.snapshot.queue_parents()
        return self._parents

    def capability_of(self, queue: str) -> Quotas:
        """The queue's DRA capability, read once per round."""
        found = self._capabilities.get(queue)
        if found is None:
            found = self._capabilities[queue] = capability(self.snapshot.queue_dra(queue))
        return found

    def take(self, queue: str, request: DeviceAmounts, sign: int = 1) -> None:
        if request:
            take(self.held, queue, request, self.parents, sign)

    def short(self, queue: str, request: DeviceAmounts) -> DraShortage | None:
        return shortage(queue, request, self.held, self.capability_of, self.parents) if request else None

    def bounded(self, queue: str) -> bool:
        found = self._bounded.get(queue)
        if found is None:
            found = self._bounded[queue] = bounded(queue, self.capability_of, self.parents)
        return found

    def unread(self, pod: Pod, queue: str) -> str:
        """Why the pod's claims cannot be judged yet ("" when they can): the claims are not read, one it names is not
        known (created after the pod, and the watch has not brought it yet), or a pod past the gate under the same
        DRA quota names one not known (what it holds cannot be told)."""
        if not self.readable:
            return "the DRA ResourceClaims are not read yet"
        snapshot = self.snapshot
        missing = unknown_ref(pod.key[0], pod.claims, snapshot.claims, snapshot.claim_templates)
        if missing is not None:
            return f"its {'ResourceClaimTemplate' if missing[0] else 'ResourceClaim'} {missing[1]} is not known yet"
        if self.unread_queues is None:
            self.unread_queues = {member for other in self.ledger.dra_unread_queues()
                                  for member in dra_ancestry(other, self.parents)}
        shared = next((member for member in dra_ancestry(queue, self.parents)
                       if member in self.unread_queues and self.capability_of(member)), None)
        if shared is not None:
            return (f"a pod past the gate under queue {shared} names a ResourceClaim not known yet (what it holds "
                    "cannot be told)")
        return ""


def _dra_state(ledger: Ledger, flying: Mapping[ObjectKey, Lift], readable: bool
               ) -> tuple[_DraRoom, dict[str, set[ObjectKey]]]:
    """The pods naming DRA claims that wait at the gate (one whose queue no DRA capability bounds any more goes
    through), and what the others hold (bound or past the gate, as the ledger keeps it, and the lifts in flight)
    over each queue's subtree — O(waiting pods + queues), nothing when none waits."""
    snapshot = ledger.snapshot
    room = _DraRoom(ledger, readable)
    waiting: dict[str, set[ObjectKey]] = {}
    for key in ledger.gated_claiming_pods():
        pod = snapshot.pods[key]
        if pod.terminated or pod.releasing or key in flying or not snapshot.charges_a_queue(pod):
            continue
        waiting.setdefault(snapshot.queue_of(pod), set()).add(key)
    if not waiting:
        return room, waiting  # (nothing to judge: what the others hold is not read)
    for queue, held in ledger.dra_held().items():
        room.take(queue, held)
    for lift in flying.values():
        room.take(lift.queue, lift.devices)
    return room, waiting


def gate_round(ledger: Ledger, in_flight: Iterable[Lift] = (),
               head_of_line: HeadOfLine = HeadOfLine.BEST_EFFORT_FIFO,
               only: Collection[ObjectKey] | None = None, *, dra_readable: bool = True,
               evicting: Collection[HeldUnit] = (), refused: Collection[HeldUnit] = (),
               preempting: Collection[ObjectKey] = ()) -> GateRound:
    """Which gated pods to let through now, which admitted units to evict for them, and why the others wait (see
    the module rules). ``ledger``: a :class:`~cardquota.core.ledger.Ledger`; ``in_flight``: lifts written and not
    yet seen back from the watch; ``only``: judge only the units with a pod among these (the others neither go
    through nor count as ahead: a simulation judging one workload at a time, in its own order); ``dra_readable``:
    the DRA claims have been read (else a pod that needs them waits); ``evicting``: units whose eviction is under
    way and that the watch still shows holding cards; ``refused``: units whose eviction a PodDisruptionBudget
    refused a moment ago; ``preempting``: pods of units that preempted others (their lifts mark them)."""
    snapshot = ledger.snapshot
    flying = {lift.pod: lift for lift in in_flight}
    gated: Mapping[str, set[ObjectKey]] = ledger.gated_pods()
    dra, dra_gated = _dra_state(ledger, flying, dra_readable)
    if dra_gated:
        gated = {queue: gated.get(queue, set()) | dra_gated.get(queue, set()) for queue in set(gated) | set(dra_gated)}
    held = {queue: ledger.held_cards(queue) for queue in set(gated) | set(ledger.queue_names())}
    room = CardRoom(snapshot, held)
    for lift in flying.values():
        if lift.cards:
            room.take(lift.queue, lift.card_type, lift.cards)
    free = _free_cards(snapshot, held, flying.values())
    units = _units(ledger, snapshot, gated, flying)
    preemption = RoundPreemption(ledger, room, evicting, refused)
    result = GateRound()
    blocked: dict[str, str] = {}
    failed_groups: set[ObjectKey] = set()
    ahead: dict[str, int] = {}
    for unit in units:
        if only is not None and not any(pod.key in only for pod in unit.pods):
            continue
        queue = unit.queue
        before = ahead.get(queue, 0)
        ahead[queue] = before + len(unit.pods)
        keys_ = tuple(pod.key for pod in unit.pods)
        if unit.after_gang and unit.group in failed_groups:
            continue  # (said with its gang)
        if queue in blocked:
            result.waits.append(Wait(keys_, unit.group, queue, blocked[queue]))
            continue
        lifts, short, card_short = _fit(unit, room, free, dra, preempting)
        if lifts is None:
            reason = f"waiting at the card-quota gate: {short}; {_pods(before)} ahead"
            if card_short and not unit.elastic:
                outcome = preemption.consider(_preemptor(unit, snapshot), keys_, unit.group)
                if isinstance(outcome, Preemption):
                    result.preemptions.append(outcome)
                    reason += f"; {outcome.sentence()}"
                elif outcome is not None:
                    reason += f"; not preempting: {outcome.message}"
            result.waits.append(Wait(keys_, unit.group, queue, reason))
            if unit.group is not None:
                failed_groups.add(unit.group)
            if head_of_line is HeadOfLine.STRICT_FIFO:
                blocked[queue] = f"waiting at the card-quota gate behind {_unit_name(unit)} (StrictFIFO)"
            continue
        result.lifts.extend(lifts)
    return result


def _preemptor(unit: _Unit, snapshot: ClusterSnapshot) -> Preemptor:
    """A unit left at the gate as preemption weighs it: queued when its PodGroup was created (as the units it may
    displace are), else when its first pod was."""
    group = snapshot.podgroups.get(unit.group) if unit.group is not None else None
    asks = tuple(CardAsk(pod.card_name or "", unit.cards[pod.key]) for pod in unit.pods)
    created = (group.created if group is not None else "") or unit.created
    return Preemptor(_unit_key(unit), unit.queue, unit.priority, created, asks)


def _pods(count: int) -> str:
    return f"{count} pod{'' if count == 1 else 's'}"


def _unit_key(unit: _Unit) -> str:
    """``namespace/name`` of the unit's PodGroup, else of its one pod."""
    namespace, name = unit.group if unit.group is not None else unit.pods[0].key
    return f"{namespace}/{name}"


def _unit_name(unit: _Unit) -> str:
    return f"{'podgroup' if unit.group is not None else 'pod'} {_unit_key(unit)}"


def _free_cards(snapshot: ClusterSnapshot, held: Mapping[str, Mapping[str, int]],
                flying: Iterable[Lift]) -> dict[str, int]:
    """Per card type, the cards the nodes offer that no pod holds or has been let through for (an estimate, to
    prefer an alternative that can be placed now)."""
    free = {name: entry.total for name, entry in snapshot.catalog().entries.items()}
    for cards in held.values():
        for name, amount in cards.items():
            if name in free:
                free[name] -= amount
    for lift in flying:
        if lift.card_type in free:
            free[lift.card_type] -= lift.cards
    return free


def _units(ledger: Ledger, snapshot: ClusterSnapshot, gated: Mapping[str, set[ObjectKey]],
           flying: Mapping[ObjectKey, Lift]) -> list[_Unit]:
    """The gated pods as units to judge, in order: gangs together, other pods alone."""
    by_group: dict[ObjectKey, list[Pod]] = {}
    units: list[_Unit] = []
    for queue, members in gated.items():
        for key in members:
            pod = snapshot.pods.get(key)
            if pod is None or pod.gate is None or key in flying:
                continue
            if pod.group_key is not None and pod.group_key in snapshot.podgroups:
                by_group.setdefault(pod.group_key, []).append(pod)
            else:
                units.append(_unit(queue, [pod], None))
    for group_key, pods in by_group.items():
        pods.sort(key=_pod_order)
        queue = snapshot.queue_of(pods[0])
        group = snapshot.podgroups[group_key]
        through = 0
        for key in ledger.group_pods(group_key):
            member = snapshot.pods.get(key)
            if member is not None and not (member.terminated or member.releasing) and (
                    member.gate is None or key in flying):
                through += 1
        need = max(0, group.min_member - through)
        if need > len(pods):
            units.append(_unit(queue, pods, group_key, incomplete=(through + len(pods), group.min_member)))
            continue
        if need:
            units.append(_unit(queue, pods[:need], group_key))
        units.extend(_unit(queue, [pod], group_key, after_gang=need > 0, elastic=True) for pod in pods[need:])
    for unit in units:
        for pod in unit.pods:  # (every gated pod the ledger indexes has a pending charge)
            charge = ledger.pod_charge(pod.key)
            unit.cards[pod.key] = sum(charge.cards.values()) if charge is not None else 0
    units.sort(key=lambda unit: (-unit.priority, unit.created, unit.queue, unit.pods[0].key))
    return units


def _pod_order(pod: Pod) -> tuple[int, str, ObjectKey]:
    gate = pod.gate
    assert gate is not None
    return -gate.priority, gate.created, pod.key


def _unit(queue: str, pods: Sequence[Pod], group: ObjectKey | None, *, after_gang: bool = False,
          incomplete: tuple[int, int] | None = None, elastic: bool = False) -> _Unit:
    gates = [pod.gate for pod in pods if pod.gate is not None]
    return _Unit(queue, list(pods), group, max(gate.priority for gate in gates), min(gate.created for gate in gates),
                 after_gang, incomplete, elastic=elastic)


def _fit(unit: _Unit, room: CardRoom, free: dict[str, int], dra: _DraRoom, preempting: Collection[ObjectKey]
         ) -> tuple[list[Lift] | None, str, bool]:
    """The lifts of a unit whose pods all fit (the room, the free cards and the DRA room taken), else None, why not,
    and whether what it lacks is card quota (what preemption can free)."""
    if unit.incomplete is not None:
        exist, wanted = unit.incomplete
        return None, (f"{exist} of the {wanted} pods of its gang ({_unit_name(unit)}'s minMember) exist; "
                      "the gang goes through together"), False
    taken: list[tuple[str, int]] = []
    devices_taken: list[DeviceAmounts] = []
    lifts: list[Lift] = []

    def undo() -> None:  # all or nothing
        for card, cards in taken:
            room.take(unit.queue, card, -cards)
            free[card] = free.get(card, 0) + cards
        for request in devices_taken:
            dra.take(unit.queue, request, -1)

    for pod in unit.pods:
        card_name = pod.card_name or ""
        amount = unit.cards[pod.key]
        choice = ""
        if amount:
            chosen, short = room.choose(unit.queue, card_name, amount, free)
            if chosen is None:
                undo()
                return None, short.sentence() if short is not None else "", True
            choice = chosen
            room.take(unit.queue, choice, amount)
            free[choice] = free.get(choice, 0) - amount
            taken.append((choice, amount))
        judged = bool(pod.claims) and dra.bounded(unit.queue)
        if judged and (unread := dra.unread(pod, unit.queue)):
            undo()
            return None, unread, False
        request = dra.ledger.dra_asked(pod, unit.queue) if pod.claims else {}  # (counted in flight even unbounded)
        devices_short = dra.short(unit.queue, request) if judged else None
        if devices_short is not None:
            undo()
            return None, _dra_shortage(unit.queue, devices_short), False
        dra.take(unit.queue, request)
        devices_taken.append(request)
        assert pod.gate is not None
        lifts.append(Lift(pod.key, pod.uid, unit.queue, choice or card_name, amount, card_name, pod.gate.gates,
                          request, by_preemption=pod.key in preempting))
    return lifts, "", False


def _dra_shortage(queue: str, short: DraShortage) -> str:
    if short.what == "devices":
        free = max(0, int(short.limit) - int(short.held)) if short.limit.isdigit() else 0
        return f"{named(queue, short.queue)} has {free} of {short.limit} {short.device_class} devices free"
    return (f"{named(queue, short.queue)} has too little {short.device_class} {short.what} quota: total would be "
            f"{number(short.total)}, but capability is {short.limit}")
