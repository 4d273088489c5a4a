""""Why is my job pending?" — plain sentences about a pod, a PodGroup or a Volcano Job on a cluster snapshot (pure).

Each explanation states what the object asks for and where it is accounted, then what blocks it now, each blocker
with what would unblock it:

* the pod's scheduler does not enforce card quotas;
* its card request cannot be read;
* its queue has no quota for any of its card types;
* the quota is spent — with who holds it (the queue's top PodGroups by use of that type);
* no node offers the card type, or its resource;
* no node can take it now (resources, affinity, taints, crossquota, mGPU: the scheduler-style summary);
* for a PodGroup not yet Inqueue, the scheduler's enqueue check: its ``minResources`` cpu/memory against the queue's
  ``spec.capability`` (how much over, who holds it, and whether releasing or raising the capability unblocks it),
  then its card request in job mode;
* at the card-quota gate, the gate keeper's sentence (:func:`~cardquota.core.gate.gate_round`), and for a unit that
  preempts, the evictions planned for it (each victim with its priority, cards and pods). A running unit the gate
  would evict for a preemptor says so as a fact (by whom, at what priority, to free what).

The quota sentences are the ones the controller's events and the scheduler rules use (one engine,
:mod:`cardquota.core.scheduling`), so ``explain`` and ``kubectl describe`` say the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from cardquota.core import keys
from cardquota.core.errors import InputError
from cardquota.core.evictions import Eviction, evictions
from cardquota.core.gate import gate_round
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.ledger import PODGROUP, Ledger
from cardquota.core.objects import CPU_MEMORY, Manifest, ObjectKey, Pod, PodGroup, namespaced_key
from cardquota.core.policies import admit as admit_object
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.preemption import PreemptionPolicy, policy_fact, queue_policy
from cardquota.core.quota import card_alternatives, card_request
from cardquota.core.scheduling import capacity_card
from cardquota.core.scheduling.session import NODES_AVAILABLE, SchedulerConfig, Session
from cardquota.core.scheduling.simulate import Simulation, expand_volcano_jobs, expand_workloads, simulate
from cardquota.core.snapshot import Kind, kind_of, namespaces_snapshot, podgroup_as_created
from cardquota.core.usage import cards_on_node, pending_cards
from cardquota.core.workload_kinds import ADAPTERS, NOT_CHECKED, gang_of, not_checked_reason

DEFAULT_SCHEDULER = "default-scheduler"
JOB_NAME = "volcano.sh/job-name"
"""Label and annotation the Volcano job controller puts on a job's pods."""
TOP_HOLDERS = 3
NOT_ENQUEUED = ("", "Pending")
"""PodGroup phases before the scheduler's enqueue check lets it in."""


@dataclass
class Explanation:
    subject: str
    """``Pod ml/train-0``."""
    facts: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    """Each a sentence saying what blocks the object and what would unblock it; empty when nothing does."""

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    def as_json(self) -> dict[str, object]:
        return {"subject": self.subject, "blocked": self.blocked, "facts": self.facts, "blockers": self.blockers}

    def lines(self) -> list[str]:
        verdict = ["Nothing in cardquota's rules blocks it."] if not self.blockers else ["What blocks it:"]
        return [f"{self.subject}:", *(f"  {fact}" for fact in self.facts), *verdict,
                *(f"  - {blocker}" for blocker in self.blockers)]


def explain(cluster: Sequence[Manifest], target: Manifest, config: SchedulerConfig | None = None,
            card_aware_schedulers: frozenset[str] = frozenset({"volcano"})) -> Explanation:
    """Explain ``target`` (a Pod, PodGroup or Volcano Job) against the objects of ``cluster``."""
    if target.get("kind") == "Job" and str(target.get("apiVersion", "")).startswith("batch.volcano.sh/"):
        return _explain_job(cluster, target, config, card_aware_schedulers)
    if explains(target):
        return _explain_workload(cluster, target, config, card_aware_schedulers)
    kind = kind_of(target)
    others = [m for m in cluster if not _same_object(m, target)]
    if kind is Kind.POD:
        if _bound(target):
            session = Session([*others, target], config)
            key = Pod.from_manifest(target).key
        else:
            session = Session(others, config)
            key = session.add_pending(target)
        return _explain_pod(session, key, card_aware_schedulers)
    if kind is Kind.PODGROUP:
        session = Session([*others, target], config)
        return _explain_podgroup(session, PodGroup.from_manifest(target), card_aware_schedulers)
    raise InputError(f"explain needs a Pod, a PodGroup, a Volcano Job or a workload of a registered kind "
                     f"(PyTorchJob, RayJob, JobSet, LeaderWorkerSet, TrainJob, …), not {target.get('kind')}")


# ------------------------------------------------------------------------------------------- submitted workloads


def explain_submitted(cluster: Sequence[Manifest], workload: Sequence[Manifest], targets: Sequence[Manifest],
                      config: SchedulerConfig | None = None, *, card_gate: bool = True,
                      card_aware_schedulers: frozenset[str] = frozenset({"volcano"})) -> list[Explanation]:
    """``explain -f``: each of ``targets`` (objects of ``workload``) explained as if ``workload`` were submitted now
    to ``cluster`` — the rules' sentences (:func:`explain`), the cards it would request, and what ``simulate``'s
    enqueue and placement (:func:`~cardquota.core.scheduling.simulate.simulate`, called once for the whole
    workload, with the card-quota gate as the manifests ship it) make of its pods: where each goes, or why not and,
    when nodes lack the cards, which pods hold them there (whatever their scheduler)."""
    simulation = simulate(cluster, workload, config, card_gate=card_gate)
    ledger = Ledger.build(cluster)
    everything = [*cluster, *workload]
    explanations = []
    for target in targets:
        explanation = explain(everything, target, config, card_aware_schedulers)
        pods = _target_pods(target, workload)
        _add_placement(explanation, pods, simulation, ledger)
        explanations.append(explanation)
    return explanations


def _target_pods(target: Manifest, workload: Sequence[Manifest]) -> list[Manifest]:
    """The pods ``target`` stands for: a pod itself, a PodGroup's pods in the workload, a Volcano Job's as its job
    controller would create them."""
    kind = kind_of(target)
    if kind is Kind.POD:
        return [target]
    if kind is Kind.PODGROUP:
        namespace, name = namespaced_key(target)
        return [m for m in workload if kind_of(m) is Kind.POD and namespaced_key(m)[0] == namespace
                and _marks(m).get(keys.GROUP_NAME) == name]
    return [m for m in expand_workloads([target], workload).manifests if kind_of(m) is Kind.POD]


def _add_placement(explanation: Explanation, pods: Sequence[Manifest], simulation: Simulation,
                   ledger: Ledger) -> None:
    wanted: dict[str, int] = {}
    for manifest in pods:
        pod = Pod.from_manifest(manifest)
        if pod.card_name is not None:
            amount = pending_cards(pod.requests, ledger.card_resources)
            wanted[pod.card_name] = wanted.get(pod.card_name, 0) + amount
    if wanted:
        asked = ", ".join(_cards(amount, card) for card, amount in sorted(wanted.items()))
        explanation.facts.append(f"Its {len(pods)} pod{'s' if len(pods) != 1 else ''} would request {asked}.")
    elif pods:
        explanation.facts.append(f"Its {len(pods)} pod{'s' if len(pods) != 1 else ''} would request no card.")
    outcomes = [(manifest, simulation.placements.get("/".join(namespaced_key(manifest)))) for manifest in pods]
    missing = [manifest for manifest, outcome in outcomes if outcome is None]
    if not pods:
        explanation.facts.append("Not checked: where its pods would go (the input holds none of them to place).")
    elif missing:
        explanation.facts.append(f"Not checked: where {len(missing)} of its pods would go (simulate does not place "
                                 "them).")
    units = {name for manifest in pods for name in ("/".join(namespaced_key(manifest)), _group_of(manifest))}
    evicted = [eviction.summary() for eviction in simulation.evictions if eviction.preemptor in units]
    if evicted:
        explanation.facts.append(f"simulate evicts for it, by preemption: {'; '.join(evicted)}.")
    unplaced = [(manifest, outcome) for manifest, outcome in outcomes if outcome is not None and outcome.node is None]
    placed = [(manifest, outcome) for manifest, outcome in outcomes if outcome is not None and outcome.node is not None]
    if placed and not unplaced:
        where = [f"{'/'.join(namespaced_key(manifest))} on {outcome.node}"
                 + (f" ({outcome.card_type})" if outcome.card_type else "") for manifest, outcome in placed]
        more = f" and {len(where) - TOP_HOLDERS} more" if len(where) > TOP_HOLDERS else ""
        explanation.facts.append(f"simulate places {'them' if len(placed) > 1 else 'it'}: "
                                 f"{', '.join(where[:TOP_HOLDERS])}{more}.")
        return
    if not unplaced or explanation.blockers:  # (what the rules said first already says why)
        return
    running = [outcome for outcome in (simulation.podgroups.get(_group_of(manifest)) for manifest, _ in unplaced)
               if outcome is not None and outcome.phase == "Running"]
    if running:  # its gang runs; the pods beyond it wait (an elastic job): not a blocker
        explanation.facts.append(f"simulate runs it: {len(placed)} of its {len(outcomes)} pods placed; the other "
                                 f"{len(unplaced)} wait ({unplaced[0][1].reason}).")
        return
    # the pod no node could take first (a gang's other pods say only that the gang fell short), card pods first
    manifest, outcome = min(unplaced, key=lambda item: (NODES_AVAILABLE not in str(item[1].reason),
                                                        Pod.from_manifest(item[0]).card_name is None))
    key = "/".join(namespaced_key(manifest))
    more = f" (and {len(unplaced) - 1} more of its pods)" if len(unplaced) > 1 else ""
    explanation.blockers.append(f"simulate cannot place pod {key}{more}: {outcome.reason}.")
    if NODES_AVAILABLE in str(outcome.reason):  # no node could take it: who holds the cards there
        explanation.blockers.extend(_node_holders(Pod.from_manifest(manifest), ledger))


def _group_of(manifest: Manifest) -> str:
    """``namespace/name`` of the PodGroup a pod names (as simulate keys its groups)."""
    return f"{namespaced_key(manifest)[0]}/{_marks(manifest).get(keys.GROUP_NAME)}"


def _node_holders(pod: Pod, ledger: Ledger) -> list[str]:
    """Who holds the cards ``pod`` lacks on the nodes offering its card types: ``2 NVIDIA-H100 on h100-03 are held
    by pod ml/notebook-0 of scheduler default-scheduler`` — every bound pod, whatever its scheduler or queue."""
    if pod.card_name is None:
        return []
    types = set(card_alternatives(pod.card_name))
    held: list[tuple[int, str, str, ObjectKey, str]] = []
    for key, other in ledger.snapshot.pods.items():
        if not other.bound or other.terminated:
            continue
        node = ledger.snapshot.nodes.get(other.node_name)
        for card, amount in cards_on_node(other.requests, node).items():
            if card in types:
                held.append((-amount, card, other.node_name, key, other.scheduler or DEFAULT_SCHEDULER))
    holders = [f"{-amount} {card} on {node_name} {'is' if amount == -1 else 'are'} held by pod {key[0]}/{key[1]} of "
               f"scheduler {scheduler}." for amount, card, node_name, key, scheduler in sorted(held)]
    if len(holders) > TOP_HOLDERS:
        holders = [*holders[:TOP_HOLDERS], f"… and {len(holders) - TOP_HOLDERS} more holders of "
                                            f"{' or '.join(sorted(types))}."]
    return holders


# --------------------------------------------------------------------------------------------------------- pods


def _explain_pod(session: Session, key: ObjectKey, schedulers: frozenset[str]) -> Explanation:
    """What blocks the pod; a waiting card pod of a Volcano scheduler also says its queue's preemption policy."""
    explanation = _pod_rules(session, key, schedulers)
    manifest = session.pods[key]
    volcano = str((manifest.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER) in schedulers
    pod = session.view(key)
    if explanation.blockers and volcano and pod.card_name is not None:
        explanation.facts.extend(_preemption_fact(session, session.queue_of(key)))
    if volcano and pod.card_name is not None and pod.gate is None:
        explanation.facts.extend(_victim_facts(session, session.queue_of(key),
                                               lambda eviction: key in eviction.pods))
    return explanation


def _pod_rules(session: Session, key: ObjectKey, schedulers: frozenset[str]) -> Explanation:
    pod = session.view(key)
    manifest = session.pods[key]
    queue = session.queue_of(key)
    explanation = Explanation(f"Pod {key[0]}/{key[1]}")
    scheduler = str((manifest.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER)
    volcano = scheduler in schedulers
    if volcano:
        explanation.facts.append(f"It is in queue {queue} ({_queue_source(pod, session)}).")
    else:
        explanation.facts.append(f"It uses scheduler {scheduler}, not {' or '.join(sorted(schedulers))}: no Volcano "
                                 "queue or card quota applies to it.")
        if session.cards_wanted(key) > 0:  # (it names a PodGroup: Volcano counts it in that job's queue)
            explanation.facts.append(f"cardquota's usage counts its cards under queue {queue} "
                                     f"({_queue_source(pod, session)}).")
    if pod.card_name is not None:
        wanted = session.cards_wanted(key)
        alternatives = card_alternatives(pod.card_name)
        order = " (in this order of preference)" if len(alternatives) > 1 else ""
        explanation.facts.append(f"It asks for {_cards(wanted, pod.card_name)}{order}.")
    if pod.bound:
        where = session.node_card_type(key, pod.node_name)
        explanation.facts.append(f"It is bound to node {pod.node_name}" + (f" ({where})." if where else "."))
        return explanation
    group = session.ledger.snapshot.podgroups.get(pod.group_key) if pod.group_key is not None else None
    if volcano and pod.group_key is not None and group is None:
        explanation.blockers.append(
            f"Its PodGroup {pod.group_key[0]}/{pod.group_key[1]} ({keys.GROUP_NAME}) does not exist: Volcano schedules "
            "a pod only with its PodGroup; create it, or fix the annotation.")
    if pod.card_name is not None and not volcano:
        explanation.blockers.append(
            f"It uses scheduler {scheduler}, which does not enforce card quotas: set spec.schedulerName to "
            f"{' or '.join(sorted(schedulers))}.")
        return explanation
    if volcano and group is not None:
        explanation.facts.append(_group_phase_fact(session, group))
        if group.phase in NOT_ENQUEUED:
            enqueue = session.enqueue_refusal(group)
            if group.queue not in session.ledger.snapshot.queues and enqueue is not None:
                explanation.blockers.append(f"Its PodGroup {_name(group)}: {_missing_queue(group.queue)}")
                return explanation
            if enqueue is not None:
                explanation.blockers.append(f"Its PodGroup {_name(group)} cannot be enqueued: {enqueue.message} "
                                            f"({enqueue.reason}).")
                explanation.blockers.extend(_enqueue_unblockers(session, group, enqueue))
                return explanation  # its pods are not allocated before their PodGroup is enqueued
    if volcano and pod.gate is not None:
        return _at_the_gate(session, key, explanation)
    explanation.blockers.extend(_card_blockers(session, key, queue))
    if explanation.blockers:
        return explanation
    refusal = session.task_refusal(key)
    if refusal is not None:
        explanation.blockers.append(f"{refusal.message} ({refusal.reason}).")
        return explanation
    node, reason = session.best_node(key)
    if node is not None:
        where = session.node_card_type(key, node)
        explanation.facts.append(f"Node {node} can take it now" + (f" ({where})." if where else "."))
    else:
        explanation.blockers.append(f"No node can take it now: {reason}.")
    return explanation


def _at_the_gate(session: Session, key: ObjectKey, explanation: Explanation) -> Explanation:
    """A pod carrying the card-quota gate: the gate keeper's decision over the same cluster (nothing in flight, the
    default order) says whether it waits and why, or goes through in the controller's next round."""
    decided = gate_round(session.ledger)
    sentence = decided.sentences().get(("Pod", key[0], key[1]))
    planned = evictions(preemption for preemption in decided.preemptions if key in preemption.pods)
    if sentence is not None and planned:
        them = "them" if len(planned) > 1 else "it"
        explanation.blockers.append(f"{sentence[0].upper()}{sentence[1:]} (cardquota's controller evicts {them} "
                                    "through the Eviction API, so PodDisruptionBudgets hold, and lets this pod "
                                    "through once the cards are released).")
        explanation.facts.append(f"Planned evictions for it: {'; '.join(e.summary() for e in planned)}.")
    elif sentence is not None:
        explanation.blockers.append(f"{sentence[0].upper()}{sentence[1:]} (cardquota's controller lets it through "
                                    "when what it asks fits its queue and every ancestor).")
    elif any(lift.pod == key for lift in decided.lifts):
        explanation.facts.append(f"It carries the card-quota gate ({keys.CARD_GATE}) and its cards fit: cardquota's "
                                 "controller lets it through in its next round (if it stays gated, see kubectl "
                                 "cardquota doctor: the controllers need a leader).")
    else:
        explanation.facts.append(f"It carries the card-quota gate ({keys.CARD_GATE}) and no card quota charges it: "
                                 "cardquota's controller does not hold it (remove the gate if it stays).")
    return explanation


def _card_blockers(session: Session, key: ObjectKey, queue: str) -> list[str]:
    """The card reasons, in the order a user would fix them: unreadable, no quota, no node, quota spent."""
    pod = session.view(key)
    if pod.card_name is None:
        return []
    wanted = session.cards_wanted(key)
    problem = capacity_card.card_request_problem(pod.card_name, wanted)
    if problem is not None:
        return [f"Its {keys.CARD_NAME} {pod.card_name!r} cannot be used: {problem} "
                f"({capacity_card.REQUEST_FAILED})."]
    alternatives = card_alternatives(pod.card_name)
    if queue not in session.ledger.snapshot.queues:
        return [_missing_queue(queue)]
    quota = session.quota(queue)
    with_quota = [card for card in alternatives if quota.get(card, 0) > 0]
    if not with_quota:
        types = " or ".join(alternatives)
        return [f"Queue {queue} has no quota for {types} ({keys.CARD_QUOTA}): a quota for "
                f"{'one of them' if len(alternatives) > 1 else 'it'} must be added to the queue."]
    catalog = session.ledger.snapshot.catalog()
    offered = [card for card in with_quota if catalog.get(card) is not None]
    if not offered:
        return [f"No node offers {' or '.join(with_quota)}: nodes need the product label and the card resource "
                f"(see cardquota discover); the quota for {'them' if len(with_quota) > 1 else 'it'} cannot be used "
                "until then."]
    allocated = session.ledger.usage(queue).allocated
    if capacity_card.fitting_alternatives(pod.card_name, wanted, quota, allocated):
        return []
    refusal = capacity_card.task_allocate_refusal(queue, pod.card_name, wanted, quota, allocated)
    assert refusal is not None
    blockers = [f"{refusal.message} ({refusal.reason})."]
    for card in with_quota:
        short = allocated.get(card, 0) + wanted - quota.get(card, 0)
        holders = _holders(session, queue, card)
        held = f" Held by {holders}." if holders else ""
        blockers.append(f"{card}: {allocated.get(card, 0)} of {quota[card]} in use.{held} It can start when "
                        f"{short} {card} {'is' if short == 1 else 'are'} released, or when the quota is raised to "
                        f"{quota[card] + short}.")
    return blockers


def _holders(session: Session, queue: str, card: str) -> str:
    """The queue's top holders of ``card``: PodGroups (or lone pods) by cards held, most first."""
    held: dict[str, int] = {}
    ledger = session.ledger
    for pod_key, pod in ledger.snapshot.pods.items():
        charge = ledger.pod_charge(pod_key)
        if charge is None or charge.queue != queue or not pod.bound or card not in charge.cards:
            continue
        owner = (f"PodGroup {pod.group_key[0]}/{pod.group_key[1]}" if pod.group_key is not None
                 else f"pod {pod_key[0]}/{pod_key[1]}")
        held[owner] = held.get(owner, 0) + charge.cards[card]
    top = sorted(held.items(), key=lambda item: (-item[1], item[0]))[:TOP_HOLDERS]
    more = len(held) - len(top)
    text = ", ".join(f"{owner} ({amount})" for owner, amount in top)
    return text + (f" and {more} more" if more > 0 else "")


# ---------------------------------------------------------------------------------------------------- podgroups


def _explain_podgroup(session: Session, group: PodGroup, schedulers: frozenset[str]) -> Explanation:
    name = f"{group.meta.namespace}/{group.meta.name}"
    explanation = Explanation(f"PodGroup {name}")
    request = card_request(group.meta.annotations)
    explanation.facts.append(f"It is in queue {group.queue}, phase {group.phase or 'Pending'}.")
    if request.values:
        asked = ", ".join(_cards(amount, card) for card, amount in request.values.items())
        explanation.facts.append(f"Its {keys.CARD_REQUEST} asks for {asked}.")
    for violation in request.violations:
        explanation.blockers.append(f"Its {keys.CARD_REQUEST} cannot be read: {violation.message} "
                                    f"({capacity_card.REQUEST_FAILED}).")
    minimum = [f"{resource} {capacity_card.amount_text(resource, group.min_resources[resource])}"
               for resource in CPU_MEMORY if group.min_resources.get(resource, 0) > 0]
    if minimum:
        explanation.facts.append(f"Its spec.minResources ask for {' and '.join(minimum)}.")
    condition = _last_condition(session.podgroup_conditions.get(group.key))
    if condition is not None and group.phase in NOT_ENQUEUED:
        explanation.facts.append(condition)
    if group.phase in NOT_ENQUEUED and (request.values or not request.violations):  # as the scheduler reads it
        refusal = session.enqueue_refusal(group)
        if refusal is not None and group.queue not in session.ledger.snapshot.queues:
            explanation.blockers.append(_missing_queue(group.queue))
        elif refusal is not None:
            explanation.blockers.append(f"{refusal.message} ({refusal.reason}).")
            explanation.blockers.extend(_enqueue_unblockers(session, group, refusal))
    members = [key for key, pod in session.ledger.snapshot.pods.items() if pod.group_key == group.key]
    waiting = [key for key in members if not session.view(key).bound]
    if members:
        explanation.facts.append(f"{len(members) - len(waiting)} of its {len(members)} pods are bound.")
    if waiting and not explanation.blockers:
        first = _explain_pod(session, waiting[0], schedulers)
        for blocker in first.blockers:
            explanation.blockers.append(f"Pod {waiting[0][0]}/{waiting[0][1]}: {blocker}")
    if explanation.blockers and (request.values or any(session.view(key).card_name for key in members)):
        explanation.facts.extend(_preemption_fact(session, group.queue))
    if any(session.view(key).card_name for key in members if key not in waiting):
        explanation.facts.extend(_victim_facts(session, group.queue,
                                               lambda eviction: eviction.identity == (PODGROUP, *group.key)))
    return explanation


def _enqueue_unblockers(session: Session, group: PodGroup, refusal: capacity_card.EnqueueRefusal) -> list[str]:
    """What would let ``group`` be enqueued (only what would: releasing cannot help a request above the quota on
    its own), and who holds what it waits for."""
    if refusal.reason == capacity_card.QUEUE_NOT_OPEN:
        return [f"It can be enqueued when queue {group.queue} is Open again (vcctl queue operate -n {group.queue} "
                "-a open)."]
    short = refusal.shortfall
    if isinstance(short, capacity_card.CpuMemoryShortfall):
        return _cpu_memory_unblockers(session, group, short)
    blockers: list[str] = []
    queue = group.queue
    if short is not None:
        types = card_alternatives(short.key)
        what = short.key if len(types) == 1 else f"{' and '.join(types)} together"
        if short.wanted > short.capability:
            blockers.append(
                f"Releasing cannot help: it asks for {short.wanted} {short.key} on its own, above queue {queue}'s "
                f"quota of {short.capability} {what}; it can be enqueued when the quota is raised to {short.total} "
                f"(by {short.missing}).")
        else:
            blockers.append(
                f"It can be enqueued when {short.missing} {short.key} {'is' if short.missing == 1 else 'are'} "
                f"released (held or reserved in queue {queue}), or when the quota is raised by {short.missing}.")
    request = card_request(group.meta.annotations)
    for card in sorted({card for key in request.values for card in card_alternatives(key)}):
        holders = _holders(session, queue, card)
        if holders:
            blockers.append(f"{card} in queue {queue} is held by {holders}.")
    return blockers


def _preemption_fact(session: Session, queue: str) -> list[str]:
    """The waiting unit's queue's preemption policy (nothing for a queue without a Queue object: its blocker says
    so)."""
    record = session.ledger.snapshot.queues.get(queue)
    return [policy_fact(queue, record.queue.meta.annotations)] if record is not None else []


def _victim_facts(session: Session, queue: str, chosen: Callable[[Eviction], bool]) -> list[str]:
    """Whether the gate's next round (:func:`~cardquota.core.gate.gate_round` over the same cluster) evicts the
    explained unit (``chosen``: its eviction) for a preemptor of its queue (nothing to weigh under ``Never``)."""
    if queue_policy(session.ledger.snapshot, queue) is PreemptionPolicy.NEVER:
        return []
    return [f"It would be {eviction.clause}: cardquota's controller evicts "
            f"{eviction.name} (priority {eviction.priority}) through the Eviction API in its next round."
            for eviction in evictions(gate_round(session.ledger).preemptions) if chosen(eviction)]


def _missing_queue(queue: str) -> str:
    return (f"Queue {queue} does not exist: Volcano schedules nothing of a queue that does not exist; create it "
            f"(with a {keys.CARD_QUOTA} for the cards it needs), or name an existing queue.")


def _group_phase_fact(session: Session, group: PodGroup) -> str:
    """``Its PodGroup ml/train is in phase Pending.``, with the scheduler's last word on it when it left one."""
    fact = f"Its PodGroup {_name(group)} is in phase {group.phase or 'Pending'}."
    condition = _last_condition(session.podgroup_conditions.get(group.key))
    return f"{fact} {condition}" if condition and group.phase in NOT_ENQUEUED else fact


def _last_condition(conditions: object) -> str | None:
    """The scheduler's last ``Unschedulable`` condition on a PodGroup (its reason and message) as a sentence; None
    when there is none."""
    if not isinstance(conditions, list):
        return None
    for condition in reversed(conditions):
        if isinstance(condition, MAPPING_TYPES) and str(condition.get("status")) == "True" \
                and condition.get("type") == "Unschedulable":
            reason = str(condition.get("reason") or "").strip()
            message = " ".join(str(condition.get("message") or "").split())
            said = ": ".join(part for part in (reason, message) if part)
            return f"The scheduler's last word on it: Unschedulable ({said})." if said else None
    return None


def _name(group: PodGroup) -> str:
    return f"{group.meta.namespace}/{group.meta.name}"


def _cpu_memory_unblockers(session: Session, group: PodGroup, short: capacity_card.CpuMemoryShortfall) -> list[str]:
    """What would let the job's cpu/memory in: resources released in its queue, or the queue's capability raised
    (or set, when it has none) — and, for a card job, the plugin's ``cardUnlimitedCpuMemory``."""
    resource, queue = short.resource, group.queue

    def amount(value: Fraction) -> str:
        return capacity_card.amount_text(resource, value)

    what = f"{amount(short.missing)} {resource}" if resource == "cpu" else f"{amount(short.missing)} of memory"
    if not short.capability_set:
        sentence = (f"Queue {queue} sets no spec.capability, so its cpu and memory quotas are 0: it can be enqueued "
                    f"when the queue's spec.capability sets {resource} to at least {amount(short.total)}")
    elif short.wanted > short.capability:
        sentence = (f"It is {what} over, and releasing cannot help: it asks for {amount(short.wanted)} on its own, "
                    f"above the capability of {amount(short.capability)}; it can be enqueued when queue {queue}'s "
                    f"spec.capability {resource} is raised to {amount(short.total)} (by {amount(short.missing)})")
    else:
        verb = "is" if resource == "memory" or short.missing == 1 else "are"
        sentence = (f"It is {what} over: it can be enqueued when {what} {verb} released (allocated or reserved in "
                    f"queue {queue}), or when queue {queue}'s spec.capability {resource} is raised to "
                    f"{amount(short.total)} (by {amount(short.missing)})")
    unlimited = session.config.capacity_card.card_unlimited_cpu_memory
    if not unlimited and session.ledger.group_uses_cards(group):
        sentence += ", or when the scheduler's capacity-card argument cardUnlimitedCpuMemory is true (it uses cards)"
    blockers = [sentence + "."]
    holders = session.ledger.cpu_memory_holders(queue, resource, unlimited)
    if holders:
        top = ", ".join(f"PodGroup {key[0]}/{key[1]} ({amount(held)})" for key, held in holders[:TOP_HOLDERS])
        more = len(holders) - TOP_HOLDERS
        blockers.append(f"{resource} in queue {queue} is allocated or reserved by {top}"
                        + (f" and {more} more." if more > 0 else "."))
    return blockers


def _explain_job(cluster: Sequence[Manifest], job: Manifest, config: SchedulerConfig | None,
                 schedulers: frozenset[str]) -> Explanation:
    """A Volcano Job: its PodGroup and pods as the job controller made them (the PodGroup owned by the job, or named
    after it; the pods labelled ``volcano.sh/job-name``), else as it will make them, from its task templates."""
    metadata = job.get("metadata") if isinstance(job.get("metadata"), MAPPING_TYPES) else {}
    namespace, name = str((metadata or {}).get("namespace") or "default"), str((metadata or {}).get("name", ""))
    existing_group = next(iter(job_podgroups(cluster, namespace, name)), None) or next(
        (m for m in cluster if kind_of(m) is Kind.PODGROUP and namespaced_key(m) == (namespace, name)), None)
    group_name = namespaced_key(existing_group)[1] if existing_group is not None else name
    existing_pods = [m for m in cluster if kind_of(m) is Kind.POD and namespaced_key(m)[0] == namespace
                     and (_marks(m).get(keys.GROUP_NAME) == group_name or _marks(m).get(JOB_NAME) == name)]
    expanded = expand_volcano_jobs([job])
    mapping = config is not None and config.map_namespace_queues
    group = existing_group or podgroup_as_created(next(m for m in expanded if kind_of(m) is Kind.PODGROUP),
                                                  namespaces_snapshot(cluster, map_namespace_queues=mapping))
    pods = existing_pods or [m for m in expanded if kind_of(m) is Kind.POD]
    explanation = _explain_group(cluster, group, pods, bool(existing_pods), config, schedulers, "task templates")
    explanation.subject = f"Job {namespace}/{name}"
    return explanation


def _explain_group(cluster: Sequence[Manifest], group: Manifest, pods: Sequence[Manifest], pods_exist: bool,
                   config: SchedulerConfig | None, schedulers: frozenset[str], read_from: str) -> Explanation:
    """A PodGroup a controller makes and its pods (``pods_exist``: created already; else as it will create them,
    from its ``read_from``), in place of their namesakes in ``cluster``."""
    own = {(m.get("kind"), namespaced_key(m)) for m in (group, *pods)}
    others = [m for m in cluster if (m.get("kind"), namespaced_key(m)) not in own]
    session = Session([*others, group, *[p for p in pods if _bound(p)]], config)
    podgroup = PodGroup.from_manifest(group)
    not_yet = f"Its pods do not exist yet: they were read from its {read_from}."
    if not pods_exist and podgroup.phase in NOT_ENQUEUED:
        # The job controller creates the pods once the PodGroup is enqueued (``syncJob`` in
        # pkg/controllers/job/job_controller_actions.go, v1.15.1): they take no part in the enqueue decision.
        explanation = _explain_podgroup(session, podgroup, schedulers)
        if not explanation.blocked:
            session.set_phase(group, "Inqueue")
            for manifest in pods:
                session.add_pending(manifest)
            enqueued = _explain_podgroup(session, PodGroup.from_manifest(session_group(group)), schedulers)
            explanation.facts.extend(fact for fact in enqueued.facts if fact not in explanation.facts
                                     and not fact.startswith("It is in queue"))
            explanation.blockers.extend(enqueued.blockers)
        explanation.facts.append(not_yet)
        return explanation
    for manifest in pods:
        if not _bound(manifest):
            session.add_pending(manifest)
    explanation = _explain_podgroup(session, podgroup, schedulers)
    if not pods_exist:
        explanation.facts.append(not_yet)
    return explanation


MAX_EXPLAINED_GROUPS = 3
"""PodGroups of one workload explained one by one (a LeaderWorkerSet's groups are alike); the rest are counted."""


def explains(target: Manifest) -> bool:
    """Whether :func:`explain` reads ``target``'s kind as a workload of another operator: a registered kind
    (:mod:`cardquota.core.workload_kinds`), or one it knows it cannot check."""
    group = str(target.get("apiVersion", "")).rpartition("/")[0]
    key = (group, str(target.get("kind", "")))
    return key in ADAPTERS or key in NOT_CHECKED


def _add_admission(explanation: Explanation, cluster: Sequence[Manifest], target: Manifest,
                   config: SchedulerConfig | None) -> None:
    """The admission rules' verdict on ``target`` (the one ``kubectl apply`` gets: a gang its queue can never hold is
    refused), its violations as blockers and its warnings as facts."""
    settings = config or SchedulerConfig()
    others = [m for m in cluster if not _same_object(m, target)]
    ledger = Ledger.build(others, map_namespace_queues=settings.map_namespace_queues,
                          volcano_schedulers=settings.scheduler_names, card_policy=settings.card_policy)
    ledger.snapshot.complete = True  # (the whole input: nothing of it is still to come)
    policy = PolicyConfig(map_namespace_queues=settings.map_namespace_queues)
    verdict = admit_object(target, None, ledger.snapshot, policy)
    explanation.facts.extend(f"Admission warns: {warning}" for warning in verdict.warnings)
    explanation.blockers.extend(f"Admission refuses it: {violation.path}: {violation.message}"
                                for violation in verdict.violations)


def _explain_workload(cluster: Sequence[Manifest], target: Manifest, config: SchedulerConfig | None,
                      schedulers: frozenset[str]) -> Explanation:
    """A workload of a registered kind (a PyTorchJob, a RayJob, a JobSet, a TrainJob with its runtime, …): the
    PodGroups and pods its operator creates (:func:`~cardquota.core.scheduling.simulate.expand_workloads`), each
    PodGroup explained as a Volcano Job's is — the one in ``cluster`` of that name and its pods when the operator
    made them already — or, when cardquota cannot read it, what it did not check."""
    namespace, name = namespaced_key(target)
    subject = f"{target.get('kind')} {namespace}/{name}"
    gang = gang_of(target, cluster)
    if gang is None:
        reason = not_checked_reason(target, cluster) or "cardquota does not know how its operator creates pods"
        return Explanation(subject, [f"Not checked: {reason}."])
    expanded = expand_workloads([target], cluster).manifests
    pods = [m for m in expanded if kind_of(m) is Kind.POD]
    groups = [m for m in expanded if kind_of(m) is Kind.PODGROUP]
    named = ", ".join(f"{namespace}/{n}" for n in [namespaced_key(m)[1] for m in groups][:MAX_EXPLAINED_GROUPS])
    more = f" and {len(groups) - MAX_EXPLAINED_GROUPS} more" if len(groups) > MAX_EXPLAINED_GROUPS else ""
    made = f"PodGroup{'s' if len(groups) != 1 else ''} {named}{more} and " if groups else ""
    facts = [f"Its operator ({gang.what}) creates {made}{len(pods)} pod{'s' if len(pods) != 1 else ''}."]
    if not gang.volcano:
        facts.append("It does not run on Volcano (no scheduling policy, queue label or pod template naming "
                     "schedulerName volcano, where its operator reads them): no Volcano queue or card quota "
                     "applies to its pods as a gang.")
        return Explanation(subject, facts)
    explanation = Explanation(subject, facts)
    if (str(target.get("apiVersion", "")).rpartition("/")[0], str(target.get("kind"))) in ADAPTERS:
        _add_admission(explanation, cluster, target, config)
    mapping = config is not None and config.map_namespace_queues
    namespaces = namespaces_snapshot(cluster, map_namespace_queues=mapping)
    for manifest in groups[:MAX_EXPLAINED_GROUPS]:
        group_name = namespaced_key(manifest)[1]
        existing_group = next((m for m in cluster if kind_of(m) is Kind.PODGROUP
                               and namespaced_key(m) == (namespace, group_name)), None)
        existing_pods = [m for m in cluster if kind_of(m) is Kind.POD and namespaced_key(m)[0] == namespace
                         and _marks(m).get(keys.GROUP_NAME) == group_name]
        members = [m for m in pods if _marks(m).get(keys.GROUP_NAME) == group_name]
        said = _explain_group(cluster, existing_group or podgroup_as_created(manifest, namespaces),
                              existing_pods or members, bool(existing_pods), config, schedulers, "pod templates")
        prefix = f"PodGroup {namespace}/{group_name}: " if len(groups) > 1 else ""
        explanation.facts.extend(f"{prefix}{fact}" for fact in said.facts if f"{prefix}{fact}" not in facts)
        explanation.blockers.extend(f"{prefix}{blocker}" for blocker in said.blockers)
    return explanation


def session_group(group: Manifest) -> Manifest:
    """``group`` as the session holds it once enqueued (phase Inqueue)."""
    return {**group, "status": {**(group.get("status") or {}), "phase": "Inqueue"}}


def job_podgroups(cluster: Sequence[Manifest], namespace: str | None, job: str) -> list[Manifest]:
    """The PodGroups Volcano's job controller made for the Volcano Job ``job`` in ``namespace`` (None: any), read
    without the Job: those it owns, else the one its pods name.

    The controller creates a Job's PodGroup named ``<job>-<job uid>`` with the Job as its controller ownerReference
    (``createOrUpdatePodGroup``; v1.4 named it ``<job>``, with the same owner, and ``getPodGroupByJob`` still reads
    that name), and annotates each pod it creates with ``volcano.sh/job-name`` and ``scheduling.k8s.io/group-name``
    naming that PodGroup (``createJobPod``): pkg/controllers/job/job_controller_actions.go and
    job_controller_util.go, Volcano v1.15.1 (v1.4.0 for the older name). The owner must be a ``batch.volcano.sh``
    Job: Volcano's podgroup controller gives the PodGroup it makes for other pods their own owners
    (``newPGOwnerReferences``), a Kubernetes ``batch/v1`` Job among them."""
    groups = [m for m in cluster if kind_of(m) is Kind.PODGROUP
              and (namespace is None or namespaced_key(m)[0] == namespace)]
    owned = [m for m in groups if _owned_by_job(m, job)]
    if owned:
        return owned
    named = {(namespaced_key(m)[0], str(_marks(m).get(keys.GROUP_NAME))) for m in cluster
             if kind_of(m) is Kind.POD and _marks(m).get(JOB_NAME) == job
             and (namespace is None or namespaced_key(m)[0] == namespace)}
    return [m for m in groups if namespaced_key(m) in named]


def _owned_by_job(manifest: Manifest, job: str) -> bool:
    metadata = manifest.get("metadata") if isinstance(manifest.get("metadata"), MAPPING_TYPES) else {}
    owners = (metadata or {}).get("ownerReferences")
    if not isinstance(owners, list):
        return False
    return any(isinstance(owner, MAPPING_TYPES) and owner.get("kind") == "Job" and owner.get("name") == job
               and str(owner.get("apiVersion", "")).startswith("batch.volcano.sh/") for owner in owners)


def _marks(manifest: Manifest) -> dict[str, object]:
    """A pod's labels and annotations together (Volcano puts the job name in both)."""
    metadata = manifest.get("metadata") if isinstance(manifest.get("metadata"), MAPPING_TYPES) else {}
    marks: dict[str, object] = {}
    for part in ("labels", "annotations"):
        values = (metadata or {}).get(part)
        if isinstance(values, MAPPING_TYPES):
            marks.update(values)
    return marks


# ------------------------------------------------------------------------------------------------------ helpers


def _queue_source(pod: Pod, session: Session) -> str:
    """Where the pod's queue comes from (the order of :meth:`~cardquota.core.snapshot.ClusterSnapshot.queue_of`)."""
    where = f"its PodGroup {pod.group_key[0]}/{pod.group_key[1]}" if pod.group_key is not None else None
    if where is not None and pod.group_key in session.ledger.snapshot.podgroups:
        return f"from {where}"
    until = f", until {where} exists" if where is not None else ""
    if session.ledger.snapshot.pod_queue_from_namespace(pod):
        return f"its namespace {pod.key[0]}'s annotation {keys.QUEUE_NAME}{until}"
    if pod.queue_annotation:
        return f"its annotation {keys.QUEUE_NAME}{until}"
    if where is not None:
        return f"the default queue, until {where} exists"
    return "the default queue: it names none"


def _cards(amount: int, card: str) -> str:
    return f"{amount} card{'s' if amount != 1 else ''} of {card}"


def _same_object(a: Manifest, b: Manifest) -> bool:
    return a.get("kind") == b.get("kind") and namespaced_key(a) == namespaced_key(b)


def _bound(manifest: Manifest) -> bool:
    return bool((manifest.get("spec") or {}).get("nodeName"))
