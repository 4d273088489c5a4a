"""The card-quota gate's keeper: as the controllers' leader, lifts cardquota's scheduling gate from the pods whose
cards fit (the decision is :func:`cardquota.core.gate.gate_round`; this module only writes it and follows it).

A lift is a JSON patch of the pod guarded by its uid and gates. Until the watch shows the pod past the gate (or
gone), the lift is *in flight* and its cards count against its queue and every ancestor in the next rounds, so a
lagging watch delays later admissions and never lets them through twice. A write whose answer is not a success
(refused, timed out, reset) is settled by reading the pod back from the API server: still gated, the lift is
dropped and judged again after a pause that doubles with each refusal in a row (:data:`RETRY_SECONDS`); past the
gate, it stays in flight until the watch brings it. Nothing that holds cards
lives only here: a restart or a new leader starts from what the API server and the watch say.

Rounds do not wait for their writes: a round decides and puts its lifts under way (at most :data:`WRITERS` sending
at once, on threads of the keeper's own), and the next round, :data:`DEFAULT_INTERVAL` later, decides the pods
created meanwhile while those writes go on.

**Preemption.** A round may name victims for a unit left at the gate (:attr:`GateRound.preemptions
<cardquota.core.gate.GateRound.preemptions>`, the queue's ``cardquota.io/preemption`` policy allowing it). Each
victim unit (a PodGroup's pods, or a pod) is evicted through the Eviction API, so PodDisruptionBudgets hold: its
pods are read back (their uid becomes the eviction's precondition: a pod recreated under the name is left alone),
the budgets of their namespace are read (one allowing fewer disruptions than it selects of the victim's pods would
refuse part-way: the victim is then refused whole, :func:`~cardquota.core.preemption.budget_refusal`), every
eviction is tried as a dry run and made only when none is refused (a gang is not broken by a budget that refuses
one of its pods), then made one pod at a time. Until the watch shows its pods released (being deleted
or gone), a victim is *being evicted*: the rounds do not choose it again, and its cards are kept for the preemptors
(:class:`cardquota.core.preemption.RoundPreemption`). A victim whose eviction a budget refuses is left alone for
:data:`REFUSED_SECONDS` (doubling to :data:`MAX_RETRY_SECONDS`) while the rounds choose another set or say why the
preemptor waits; nothing is ever deleted outright. A Warning event goes to each victim, a Normal one to the
preemptor. What the keeper remembers of a preemption (victims being evicted, budgets' refusals, which pods
preempted) only spares work: a new leader plans again from the API server, where an evicted pod is being deleted
and so neither holds cards nor is chosen again.

A leader writes only while it leads (:attr:`LeaderElection.leading` ends by itself
:data:`~cardquota.operator.leader.RENEW_DEADLINE_SECONDS` after its last renewal, checked just before each write, and
each write is cut off after :data:`~cardquota.operator.leader.WRITE_DEADLINE_SECONDS`), so its last write has ended
before another replica can take the Lease over; a write that got no answer is counted until the deadline the API
server was given has passed, then read back. A new leader waits one lease duration more (a margin for the replicas'
clocks) after its predecessor's Lease expired and until its own earlier writes have ended, then for pods and
PodGroups listed from the API server from that moment on — the start-up list when it began later, else a list
anew (:attr:`Gatekeeper.listed_since`, :meth:`~cardquota.operator.reflector.Reflector.listed_since`) — before its
first lift: its watch may lag any time behind the lifts written before, a list cannot.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubernetes import client

from cardquota.core.events import CardEvent
from cardquota.core.gate import GateRound, HeadOfLine, Lift, gate_round
from cardquota.core.ledger import PODGROUP, HeldUnit
from cardquota.core.objects import ObjectKey, gate_state
from cardquota.core.policies.pod import narrowed_affinity_operations
from cardquota.core.preemption import Admitted, Preemption, budget_refusal
from cardquota.kube import (
    EvictionOutcome,
    KubeError,
    Unreachable,
    budgets_path,
    create_event,
    evict_pod,
    list_objects,
    patch_pod,
    pod_path,
    read_object,
)
from cardquota.operator.controller import EVENT_NAMESPACE, kubernetes_event
from cardquota.operator.leader import LEASE_SECONDS, SERVER_TIMEOUT_SECONDS, WRITE_DEADLINE_SECONDS, WRITE_TIMEOUT
from cardquota.operator.slicing import every
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.metrics import PREEMPTION_EVICTIONS, PREEMPTIONS

log = logging.getLogger("cardquota.gate")
T = TypeVar("T")
K = TypeVar("K")
DEFAULT_INTERVAL = 0.2
"""Seconds between rounds (a round with no gated pod costs O(queues))."""
WRITERS = 16
"""Lifts written at once (each a PATCH on a thread)."""
RETRY_SECONDS = 1.0
"""After a refused lift, the pod is not lifted again for this long, doubled at each refusal in a row up to
:data:`MAX_RETRY_SECONDS`: a write the API server keeps refusing (a missing permission, another webhook denying it)
costs it one PATCH and one GET per pod every few seconds, not every round."""
MAX_RETRY_SECONDS = 60.0
REFUSED_SECONDS = 10.0
"""After a PodDisruptionBudget refused a victim's eviction, it is not chosen again for this long (or what the API
server's ``Retry-After`` said), doubled at each refusal in a row up to :data:`MAX_RETRY_SECONDS`."""
PREEMPTED = "Preempted"
PREEMPTING = "Preempting"
"""The reasons of the events on a victim (Warning) and on its preemptor (Normal)."""
LISTED_KINDS = ("Pod", "PodGroup")
"""What a new leader lists anew before its first lift: a lift is a pod's, and a pod's queue is its PodGroup's."""


@dataclass
class GateStats:
    lifted: int = 0
    """Lifts the API server accepted."""
    refused: int = 0
    """Lifts not applied (the pod changed, went, or the write failed and the pod was found still gated)."""
    held_back: int = 0
    """Lifts decided and not written: their pod's last lift was refused a moment ago (:data:`RETRY_SECONDS`)."""
    rounds: int = 0
    waiting: int = 0
    """Units left at the gate by the last round."""
    evicted: int = 0
    """Victim units whose pods the Eviction API evicted."""
    eviction_refused: int = 0
    """Victim units whose eviction a PodDisruptionBudget refused."""


@dataclass
class Eviction:
    """A victim unit being evicted for a preemptor, until the watch shows its pods released."""

    victim: Admitted
    preemption: Preemption
    read_after: float | None = None
    """Set when its outcome is unknown (no answer): dropped then, and planned again from the watch."""


@dataclass
class Flight:
    lift: Lift
    written: bool = False
    """The API server accepted it: only the watch (or the pod's end) settles it now."""
    unsettled: bool = False
    """Its outcome is unknown (no answer, or the pod could not be read back): read back in a later round."""
    read_after: float = 0.0
    """Not read back before this clock reading: a write that got no answer may still be applied by the API server
    until the deadline it was given (:data:`~cardquota.operator.leader.SERVER_TIMEOUT_SECONDS`)."""


@dataclass
class Gatekeeper:
    cache: ClusterCache
    api: client.ApiClient
    is_leader: Callable[[], bool] = lambda: True
    head_of_line: HeadOfLine = HeadOfLine.BEST_EFFORT_FIFO
    interval: float = DEFAULT_INTERVAL
    takeover_wait: float = float(LEASE_SECONDS)
    listed_since: Callable[[float], bool] = lambda _: True
    """Whether the cache's pods and PodGroups were listed anew at or after a moment of :attr:`clock` (asking for it
    if not): a new leader waits for that before its first lift."""
    predecessor_done: Callable[[float], float] = lambda since: since
    """Given when this replica began leading, when (on :attr:`clock`) the former holder's writes had ended: by
    default that same moment; the Lease's expiry when known (:attr:`LeaderElection.predecessor_done`), so a replica
    whose start-up list began after it needs no second list."""
    dra_readable: Callable[[], bool] = lambda: True
    """Whether the cache's DRA ResourceClaims and templates are read and current (their reflectors listed, served
    and not failing): until then a pod naming claims under a DRA quota waits."""
    clock: Callable[[], float] = time.monotonic
    stats: GateStats = field(default_factory=GateStats)
    in_flight: dict[ObjectKey, Flight] = field(default_factory=dict)
    last_round: GateRound = field(default_factory=GateRound)
    said: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """Why each object waits at the gate after the last round, by (kind, namespace, name) (:meth:`sentence`)."""
    retry: dict[tuple[ObjectKey, str], tuple[float, int]] = field(default_factory=dict)
    """Pods (by key and uid: a pod recreated under the name starts afresh) whose last lift was refused: (not before
    this clock reading, refusals in a row)."""
    evicting: dict[HeldUnit, Eviction] = field(default_factory=dict)
    """Victim units being evicted (until the watch shows their pods released)."""
    refused: dict[HeldUnit, tuple[float, int]] = field(default_factory=dict)
    """Victim units whose eviction a PodDisruptionBudget refused: (not chosen before this clock reading, refusals in
    a row)."""
    preempting: dict[ObjectKey, None] = field(default_factory=dict)
    """Pods of units that preempted others, until they are past the gate (their lift marks them)."""
    _leading_since: float | None = None
    _barrier: float | None = None
    """Since it leads: the moment from which a list of pods and PodGroups must have started before it lifts."""
    _writes_end: float = float("-inf")
    """By when every write this replica has sent has ended (sent at the latest, or given up by the API server):
    raised on the writing thread just before each send."""
    _epoch: int = 0
    """Leadership periods seen: a write decided in an earlier one is never sent (it may still wait for a thread)."""
    _budgets_unread: bool = False
    """PodDisruptionBudgets could not be read once (said once)."""
    _writes_lock: threading.Lock = field(default_factory=threading.Lock)
    _writing: set[asyncio.Task[None]] = field(default_factory=set)
    """The writes under way (at most :data:`WRITERS` sending at once, whatever round decided them)."""
    _writers: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(WRITERS))
    _threads: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(WRITERS, thread_name_prefix="cardquota-gate"))
    """The writes' own threads: the event loop's default pool has min(32, CPUs + 4) — 6 on two cores — shared with
    every other ``to_thread`` of the process, which held the keeper to 6 writes at once, not :data:`WRITERS`."""

    async def run(self) -> None:
        """A round every :attr:`interval`; a round does not wait for its writes (they go on, 16 at a time, while
        the next rounds decide: their pods are in flight meanwhile), so a burst of lifts never holds up the decision
        about a pod created meanwhile."""
        try:
            await every(self.interval, lambda: self.round(wait=False), log, "card-quota gate round failed; retrying")
        finally:
            self._stop_writing()
            self._threads.shutdown(wait=False, cancel_futures=True)

    async def round(self, *, wait: bool = True) -> GateRound | None:
        """One round: settle what the watch has brought back, decide, write the lifts (``wait``: return once they
        are written, as tests want; else once they are under way). None when not leading (or not yet allowed to
        lift)."""
        if not self.cache.ready or not self.is_leader():
            if self._leading_since is not None:
                self._epoch += 1  # (what the last period decided and has not sent stays unsent)
            self._leading_since = self._barrier = None
            self._stop_writing()  # (a former leader writes nothing: the next one waits for what it wrote)
            self.in_flight.clear()  # (another leader decides from the API server's state)
            self.evicting.clear()
            self.refused.clear()
            self.preempting.clear()
            self._say({})
            return None
        now = self.clock()
        if self._leading_since is None:
            self._leading_since = now
        if self._barrier is None:
            # The list must have started once every write that may still land had: the former leader's (it stopped
            # before the Lease could expire; the wait is a margin for the clocks) and this replica's own from before.
            ready = max(self.predecessor_done(self._leading_since) + self.takeover_wait, self._writes_end)
            if now < ready:
                return None
            self._barrier = ready
        if not self.listed_since(self._barrier):
            return None
        self._settle()
        for flight in [flight for flight in self.in_flight.values() if flight.unsettled and flight.read_after <= now]:
            await self._read_back(flight, "an earlier write's outcome unknown")
        refused = [unit for unit, (until, _) in self.refused.items() if until > now]
        decided = gate_round(self.cache.ledger, [flight.lift for flight in self.in_flight.values()],
                             self.head_of_line, dra_readable=self.dra_readable(), evicting=self.evicting.keys(),
                             refused=refused, preempting=self.preempting)
        self.stats.rounds += 1
        self.stats.waiting = len(decided.waits)
        self.last_round = decided
        self._say(decided.sentences())
        lifts = [lift for lift in decided.lifts if self.retry.get((lift.pod, lift.uid), (now, 0))[0] <= now]
        self.stats.held_back += len(decided.lifts) - len(lifts)  # (their room stays unused this round)
        flights = [Flight(lift) for lift in lifts]
        for flight in flights:
            self.in_flight[flight.lift.pod] = flight
        tasks = [asyncio.create_task(self._send(flight)) for flight in flights]
        for preemption in decided.preemptions:
            self.preempting.update(dict.fromkeys(preemption.pods))
            for victim in preemption.victims:
                eviction = self.evicting[victim.identity] = Eviction(victim, preemption)
                tasks.append(asyncio.create_task(self._evict(eviction)))
        self._writing.update(tasks)
        for task in tasks:
            task.add_done_callback(self._writing.discard)
        if wait:
            await asyncio.gather(*tasks)
        return decided

    async def _off_loop(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._threads, functools.partial(call, *args))

    async def _send(self, flight: Flight) -> None:
        async with self._writers:
            if self.in_flight.get(flight.lift.pod) is not flight:
                return  # (settled while it waited its turn: the pod went, or was recreated and judged again)
            try:
                await self._write(flight)
            except Exception:  # a bug: the lift stays counted, its outcome read back next round
                log.exception("lifting the gate of pod %s/%s failed", *flight.lift.pod)
                flight.unsettled = True

    def _stop_writing(self) -> None:
        for task in self._writing:
            task.cancel()
        self._writing.clear()

    def sentence(self, identity: tuple[str, str, str]) -> str | None:
        """Why the object (kind, namespace, name) waits at the gate after the last round; None when it does not
        (the publisher's events read it)."""
        return self.said.get(identity)

    def _say(self, said: dict[tuple[str, str, str], str]) -> None:
        """Keep this round's sentences, and tell the publisher (through the ledger's change log) which objects'
        sentence changed, appeared or went, so their events are looked at again."""
        changes = self.cache.ledger.changes
        for identity in said.keys() | self.said.keys():
            if said.get(identity) != self.said.get(identity):
                kind, namespace, name = identity
                (changes.pod if kind == "Pod" else changes.podgroup)((namespace, name))
        self.said = said

    def _settle(self) -> None:
        """Drop the lifts the watch has brought back: the pod is past the gate (the ledger counts it), recreated,
        or gone."""
        pods = self.cache.ledger.snapshot.pods
        for key, flight in list(self.in_flight.items()):
            pod = pods.get(key)
            if pod is None or pod.gate is None or pod.uid != flight.lift.uid or pod.terminated:
                del self.in_flight[key]
        for key, uid in [(key, uid) for key, uid in self.retry
                         if (pod := pods.get(key)) is None or pod.gate is None or pod.uid != uid]:
            del self.retry[key, uid]
        now = self.clock()
        for unit, eviction in list(self.evicting.items()):
            if (eviction.read_after is not None and eviction.read_after <= now) or all(
                    (pod := pods.get(key)) is None or pod.deleting or pod.terminated for key in eviction.victim.pods):
                del self.evicting[unit]  # (released, as the watch shows: or planned again from it)
        for unit in [unit for unit, (until, _) in self.refused.items() if until + MAX_RETRY_SECONDS < now]:
            del self.refused[unit]  # (a refusal in a row is one within a minute of the last)
        for key in [key for key in self.preempting if (pod := pods.get(key)) is None or pod.gate is None]:
            del self.preempting[key]

    async def _write(self, flight: Flight) -> None:
        lift = flight.lift
        namespace, name = lift.pod
        try:
            operations: list[Any] = list(lift.operations())
            if lift.narrows:
                operations += await self._off_loop(self._narrowing, lift)
            if not await self._off_loop(self._patch_while_leading, namespace, name, operations, self._epoch):
                if self.in_flight.get(lift.pod) is flight:  # not sent (no longer leading): judged again
                    del self.in_flight[lift.pod]
                return
        except Unreachable as error:  # no answer: the API server may still apply it until its deadline
            log.info("lifting the gate of pod %s/%s: %s; read back in %d s", *lift.pod, error,
                     SERVER_TIMEOUT_SECONDS + 1)
            flight.unsettled = True
            flight.read_after = self.clock() + SERVER_TIMEOUT_SECONDS + 1
            return
        except (KubeError, OSError) as error:
            await self._read_back(flight, error)
            return
        flight.written = True
        self.retry.pop((lift.pod, lift.uid), None)
        self.stats.lifted += 1

    async def _evict(self, eviction: Eviction) -> None:
        """Evict one victim unit (see the module docstring); its outcome settles :attr:`evicting`."""
        victim = eviction.victim
        async with self._writers:
            if self.evicting.get(victim.identity) is not eviction:
                return
            try:
                outcome, message, retry_after = await self._off_loop(self._evict_pods, eviction, self._epoch)
            except Unreachable as error:  # the API server may still evict until its deadline: then read from the watch
                log.info("evicting %s for %s: %s; judged again from the watch in %d s", victim.name,
                         eviction.preemption.preemptor.name, error, SERVER_TIMEOUT_SECONDS + 1)
                eviction.read_after = self.clock() + SERVER_TIMEOUT_SECONDS + 1
                PREEMPTION_EVICTIONS.labels(victim.queue, "unanswered").inc()
                return
            except Exception as error:  # (KubeError, OSError, a bug): dropped, and planned again from the watch
                log.warning("evicting %s for %s failed: %s", victim.name, eviction.preemption.preemptor.name, error)
                self._drop(eviction)
                PREEMPTION_EVICTIONS.labels(victim.queue, "failed").inc()
                return
        PREEMPTION_EVICTIONS.labels(victim.queue, outcome).inc()
        if outcome == "refused":
            self._drop(eviction)
            self.stats.eviction_refused += 1
            delay = self._back_off(self.refused, victim.identity, max(retry_after or 0.0, REFUSED_SECONDS))
            log.info("evicting %s for %s refused (%s); not chosen again for %.0f s", victim.name,
                     eviction.preemption.preemptor.name, message, delay)
        elif outcome in ("conflict", "not leading"):
            self._drop(eviction)  # (planned again from the watch)
        elif outcome == "evicted":
            self.stats.evicted += 1
            PREEMPTIONS.labels(victim.queue).inc()

    def _back_off(self, refusals: dict[K, tuple[float, int]], key: K, first: float) -> float:
        """Count one more refusal in a row of ``key`` in ``refusals`` (not before this clock reading, refusals in a
        row): the pause before it is tried again, ``first`` doubled at each refusal in a row up to
        :data:`MAX_RETRY_SECONDS` (a refused lift, a victim a budget protects)."""
        count = refusals.get(key, (0.0, 0))[1] + 1
        delay = min(first * 2.0 ** (count - 1), MAX_RETRY_SECONDS)
        refusals[key] = (self.clock() + delay, count)
        return delay

    def _drop(self, eviction: Eviction) -> None:
        if self.evicting.get(eviction.victim.identity) is eviction:
            del self.evicting[eviction.victim.identity]

    def _evict_pods(self, eviction: Eviction, epoch: int) -> tuple[str, str, float | None]:
        """On a writing thread: read the victim's pods back, try every eviction as a dry run, then evict them (while
        leading in the period that decided it) and say so in events. The outcome: ``evicted``, ``gone`` (nothing
        left to evict), ``refused`` (a PodDisruptionBudget; with its message and the suggested wait), ``conflict``
        (a pod recreated under the name) or ``not leading``."""
        victim = eviction.victim
        pods: list[tuple[ObjectKey, str]] = []
        manifests: list[Mapping[str, Any]] = []
        for key in victim.pods:
            manifest = read_object(self.api, pod_path(*key))
            metadata = (manifest or {}).get("metadata") or {}
            if manifest is not None and not metadata.get("deletionTimestamp"):
                pods.append((key, str(metadata.get("uid") or "")))
                manifests.append(manifest)
        if not pods:
            return "gone", "", None
        refusal = budget_refusal(victim.name, manifests, self._budgets(victim.key[0]))
        if refusal is not None:
            return "refused", refusal, None
        for dry_run in (True, False):
            for (namespace, name), uid in pods:
                if not dry_run and not self._leading_write(epoch):
                    return "not leading", "", None
                answer = evict_pod(self.api, namespace, name, uid or None, dry_run=dry_run, timeout=WRITE_TIMEOUT,
                                   server_timeout=SERVER_TIMEOUT_SECONDS)
                if answer.outcome is EvictionOutcome.REFUSED_BY_BUDGET:
                    return "refused", answer.message, answer.retry_after
                if answer.outcome is EvictionOutcome.CONFLICT:
                    return "conflict", answer.message, None
        self._say_preempted(eviction, dict(pods))
        return "evicted", "", None

    def _budgets(self, namespace: str) -> list[Mapping[str, Any]]:
        """The namespace's PodDisruptionBudgets (on a writing thread); none when they cannot be read (an install
        without ``list`` on them: each eviction's dry run still asks them, one pod at a time)."""
        try:
            return list_objects(self.api, budgets_path(namespace), "policy/v1", "PodDisruptionBudget")
        except (KubeError, OSError) as error:
            if not self._budgets_unread:
                log.warning("PodDisruptionBudgets not read (%s): a budget allowing fewer disruptions than a victim "
                            "gang has pods can leave it part-evicted", error)
            self._budgets_unread = True
            return []

    def _say_preempted(self, eviction: Eviction, uids: Mapping[ObjectKey, str]) -> None:
        """The Warning event on the victim (its PodGroup, else its pods) and the Normal one on the preemptor (its
        PodGroup, else its pods); a failure is logged (the eviction is done)."""
        preemption = eviction.preemption
        victim = eviction.victim
        snapshot = self.cache.ledger.snapshot
        events: list[CardEvent] = []
        group = snapshot.podgroups.get(victim.key) if victim.kind == PODGROUP else None
        if group is not None:
            events.append(CardEvent.about(group.meta, PREEMPTED, preemption.victim_message()))
        else:
            events += [CardEvent("Pod", key[0], key[1], PREEMPTED, preemption.victim_message(), uid=uid)
                       for key, uid in uids.items()]
        preemptor = snapshot.podgroups.get(preemption.group) if preemption.group is not None else None
        if preemptor is not None:
            events.append(CardEvent.about(preemptor.meta, PREEMPTING, preemption.preemptor_message(), "Normal"))
        else:
            events += [CardEvent.about(pod.meta, PREEMPTING, preemption.preemptor_message(), "Normal")
                       for key in preemption.pods if (pod := snapshot.pods.get(key)) is not None]
        for event in events:
            try:
                create_event(self.api, event.namespace or EVENT_NAMESPACE, kubernetes_event(event, "cardquota"))
            except (KubeError, OSError) as error:
                log.warning("event for %s %s/%s failed: %s", event.kind, event.namespace, event.name, error)

    def _leading_write(self, epoch: int) -> bool:
        """Whether a write decided in leadership period ``epoch`` may be sent now (checked on the writing thread just
        before sending): it then counts in :attr:`_writes_end`."""
        with self._writes_lock:
            if not self.is_leader() or epoch != self._epoch:
                return False
            self._writes_end = max(self._writes_end, self.clock() + WRITE_DEADLINE_SECONDS)
            return True

    def _patch_while_leading(self, namespace: str, name: str, operations: list[Any], epoch: int) -> bool:
        """The lift's PATCH, sent only while leading in the period that decided it (checked on the writing thread,
        just before sending) and cut off after :data:`WRITE_TIMEOUT`; :attr:`_writes_end` covers it. False when
        not sent."""
        if not self._leading_write(epoch):
            return False
        patch_pod(self.api, namespace, name, operations, timeout=WRITE_TIMEOUT, server_timeout=SERVER_TIMEOUT_SECONDS)
        return True

    def _narrowing(self, lift: Lift) -> list[Any]:
        manifest = read_object(self.api, pod_path(*lift.pod))
        if manifest is None:
            raise KubeError(f"pod {lift.pod[0]}/{lift.pod[1]} is gone", 404)
        return list(narrowed_affinity_operations(manifest, lift.card_type, self.cache.ledger.snapshot.catalog()))

    async def _read_back(self, flight: Flight, error: BaseException | str) -> None:
        """After a write that did not succeed: the pod as the API server has it decides whether the lift holds.
        Only this flight's own entry is touched: a pod recreated under the name and lifted since has another."""
        lift = flight.lift
        try:
            manifest = await self._off_loop(read_object, self.api, pod_path(*lift.pod))
        except (KubeError, OSError) as unread:
            log.warning("lifting the gate of pod %s/%s: %s; reading it back: %s (kept in flight)", *lift.pod, error,
                        unread)
            flight.unsettled = True  # its cards still count; read back again next round
            return
        if manifest is None or _still_gated(manifest, lift.uid):
            if self.in_flight.get(lift.pod) is flight:
                del self.in_flight[lift.pod]
            self.stats.refused += 1
            delay = self._back_off(self.retry, (lift.pod, lift.uid), RETRY_SECONDS)
            log.info("gate of pod %s/%s not lifted (%s); judged again in %.0f s", *lift.pod, error, delay)
        else:  # past the gate after all (the answer was lost): the watch brings it, nothing to read again
            flight.written, flight.unsettled = True, False


def _still_gated(manifest: Mapping[str, Any], uid: str) -> bool:
    metadata = manifest.get("metadata") or {}
    if metadata.get("uid") != uid:
        return True  # another pod of that name: this lift never applied to it
    spec = manifest.get("spec") or {}
    return bool(spec.get("schedulingGates")) and gate_state(spec, metadata) is not None
