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

from cardquota.core.gate import GateRound, HeadOfLine, Lift, gate_round
from cardquota.core.objects import ObjectKey, gate_state
from cardquota.core.policies.pod import narrowed_affinity_operations
from cardquota.kube import KubeError, Unreachable, patch_pod, pod_path, read_object
from cardquota.operator.leader import LEASE_SECONDS, SERVER_TIMEOUT_SECONDS, WRITE_DEADLINE_SECONDS, WRITE_TIMEOUT
from cardquota.operator.slicing import every
from cardquota.runtime.cache import ClusterCache

log = logging.getLogger("cardquota.gate")
T = TypeVar("T")
DEFAULT_INTERVAL = 0.2
"""Seconds between rounds (a round with no gated pod costs O(queues))."""
WRITERS = 16
"""Lifts written at once (each a PATCH on a thread)."""
RETRY_SECONDS = 1.0
"""After a refused lift, the pod is not lifted again for this long, doubled at each refusal in a row up to
:data:`MAX_RETRY_SECONDS`: a write the API server keeps refusing (a missing permission, another webhook denying it)
costs it one PATCH and one GET per pod every few seconds, not every round."""
MAX_RETRY_SECONDS = 60.0
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
    _leading_since: float | None = None
    _barrier: float | None = None
    """Since it leads: the moment from which a list of pods and PodGroups must have started before it lifts."""
    _writes_end: float = float("-inf")
    """By when every write this replica has sent has ended (sent at the latest, or given up by the API server):
    raised on the writing thread just before each send."""
    _epoch: int = 0
    """Leadership periods seen: a write decided in an earlier one is never sent (it may still wait for a thread)."""
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
        decided = gate_round(self.cache.ledger, [flight.lift for flight in self.in_flight.values()],
                             self.head_of_line, dra_readable=self.dra_readable())
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

    def _patch_while_leading(self, namespace: str, name: str, operations: list[Any], epoch: int) -> bool:
        """The lift's PATCH, sent only while leading in the period that decided it (checked on the writing thread,
        just before sending) and cut off after :data:`WRITE_TIMEOUT`; :attr:`_writes_end` covers it. False when
        not sent."""
        with self._writes_lock:
            if not self.is_leader() or epoch != self._epoch:
                return False
            self._writes_end = max(self._writes_end, self.clock() + WRITE_DEADLINE_SECONDS)
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
            refusals = self.retry.get((lift.pod, lift.uid), (0.0, 0))[1] + 1
            delay = min(RETRY_SECONDS * 2 ** (refusals - 1), MAX_RETRY_SECONDS)
            self.retry[lift.pod, lift.uid] = (self.clock() + delay, refusals)
            log.info("gate of pod %s/%s not lifted (%s); judged again in %.0f s", *lift.pod, error, delay)
        else:  # past the gate after all (the answer was lost): the watch brings it, nothing to read again
            flight.written, flight.unsettled = True, False


def _still_gated(manifest: Mapping[str, Any], uid: str) -> bool:
    metadata = manifest.get("metadata") or {}
    if metadata.get("uid") != uid:
        return True  # another pod of that name: this lift never applied to it
    spec = manifest.get("spec") or {}
    return bool(spec.get("schedulingGates")) and gate_state(spec, metadata) is not None
