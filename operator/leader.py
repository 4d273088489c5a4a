"""Leader election with a coordination.k8s.io Lease: one replica writes annotations and events, every replica
serves webhooks. (Kopf's peering would pause all handlers on the standby, including those feeding the webhook
cache, so it does not fit.)"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import urllib3
from kubernetes import client

from cardquota.kube import Conflict, KubeError, create_lease, read_lease, update_lease

log = logging.getLogger("cardquota.leader")
LEASE_SECONDS = 15
RENEW_SECONDS = 5.0
RENEW_DEADLINE_SECONDS = 10.0
"""A replica leads only this long after the start of its last successful renewal (client-go's renewDeadline): a
renewal that hangs or fails ends the writes before the Lease, stamped at that start, expires in the others' eyes."""
RETRY_SECONDS = 1.0
"""After a round that failed while holding the Lease, the next one comes this soon (from the failed one's start)."""
LEASE_REQUEST_TIMEOUT = (1.0, 4.0)
"""(connect, read) seconds for each Lease request: a round never outlasts the renewal interval by much."""
WRITE_DEADLINE_SECONDS = 4.5
"""The longest a leader's quota-holding write may take from the moment it checked it leads (see
:data:`WRITE_TIMEOUT`): :data:`RENEW_DEADLINE_SECONDS` plus this stays under :data:`LEASE_SECONDS`, so every write
of a former leader has ended before another replica can take the Lease over."""
WRITE_TIMEOUT = (0.5, 2.5)
"""(connect, read) seconds for such a write: the connection pool tries a refused connection three more times (a
request not yet sent), so 4 × 0.5 + 2.5 = :data:`WRITE_DEADLINE_SECONDS` at most. The API server is told to give
up too (:data:`SERVER_TIMEOUT_SECONDS`)."""
SERVER_TIMEOUT_SECONDS = 2
"""The ``timeout`` a write asks of the API server (it ends the request there, within the read timeout above): a
write the client gave up on is not still being applied long after."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: object) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    for pattern in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.datetime.strptime(text, pattern).replace(tzinfo=datetime.UTC)
        except ValueError:
            continue
    return None


class LeaderElection:
    """Which replica writes (annotations, Events, the TLS Secret): the holder of a coordination.k8s.io Lease, renewed
    every RENEW_SECONDS and taken over when LEASE_SECONDS pass without renewal. Every replica serves admissions;
    :attr:`leading` only gates the writes. A write that conflicts (another replica renewed first) means not leading
    this round; an unreachable API stops the writes until it is back. :attr:`leading` also ends by itself
    :data:`RENEW_DEADLINE_SECONDS` after the start of the last successful renewal, however long the next round
    takes (an API server that hangs does not leave a former leader writing)."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str = "cardquota-controller",
                 identity: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity or f"{os.environ.get('HOSTNAME', 'cardquota')}-{uuid.uuid4().hex[:8]}"
        self.clock = clock
        self.predecessor_done: float | None = None
        """On :attr:`clock`, when the writes of the replica that held the Lease before this one had ended: the
        Lease's expiry as its renewTime says when it took it over; the round's start when that is not known (it
        created the Lease, or found itself holding it without knowing); None while it does not hold it."""
        self._held = False
        self._renewed_at = float("-inf")
        """The clock when the last successful round started (its renewTime is stamped then)."""

    @property
    def leading(self) -> bool:
        """Whether this replica may write now: its last round won the Lease, and that round started less than
        :data:`RENEW_DEADLINE_SECONDS` ago."""
        return self._held and self.clock() - self._renewed_at < RENEW_DEADLINE_SECONDS

    def try_acquire(self, now: datetime.datetime | None = None) -> bool:
        """One round: create, renew or take over an expired Lease. True while this replica holds it."""
        moment = now or _now()
        started = self.clock()
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _stamp(moment)}
        try:
            lease = read_lease(self.api, self.namespace, self.name, timeout=LEASE_REQUEST_TIMEOUT)
            if lease is None:
                create_lease(self.api, self.namespace, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {**spec, "acquireTime": _stamp(moment)}}, timeout=LEASE_REQUEST_TIMEOUT)
                self.predecessor_done = started  # (a Lease deleted by hand may have had a holder still writing)
                return self._became(True, started)
            current: dict[str, Any] = dict(lease.get("spec") or {})
            holder = current.get("holderIdentity")
            renewed = _parse(current.get("renewTime"))
            duration = current.get("leaseDurationSeconds") or LEASE_SECONDS
            expired = renewed is None or renewed + datetime.timedelta(seconds=duration) < moment
            if holder != self.identity and not expired:
                return self._became(False)
            if holder != self.identity:
                spec["acquireTime"] = _stamp(moment)
            elif not self._held:  # ours, though this replica did not know it held it (a takeover's answer lost)
                self.predecessor_done = started
            update_lease(self.api, self.namespace, self.name, spec,
                         (lease.get("metadata") or {}).get("resourceVersion"), timeout=LEASE_REQUEST_TIMEOUT)
            if holder != self.identity:  # taken over: its holder stopped writing before it expired
                expired_for = (moment - (renewed + datetime.timedelta(seconds=duration))).total_seconds() \
                    if renewed is not None else 0.0
                self.predecessor_done = started - max(0.0, expired_for)
            return self._became(True, started)
        except Conflict:  # another replica wrote the Lease since it was read: not leading this round
            return self._became(False)
        except KubeError as error:  # still leading until the deadline passes (then :attr:`leading` ends by itself)
            log.warning("leader election round failed: %s", error)
            return self.leading
        except (OSError, urllib3.exceptions.HTTPError) as error:  # API unreachable: the same
            log.warning("leader election round failed, API unreachable: %s", error)
            return self.leading

    def _became(self, leading: bool, started: float | None = None) -> bool:
        if leading != self._held:
            log.info("%s leadership of Lease %s/%s", "acquired" if leading else "lost", self.namespace, self.name)
        if not leading:
            self.predecessor_done = None
        elif not self.leading:
            log.warning("renewed Lease %s/%s after more than %.0f s: writes were paused meanwhile", self.namespace,
                        self.name, RENEW_DEADLINE_SECONDS)
        self._held = leading
        if started is not None:
            self._renewed_at = started
        return leading

    async def run(self, interval: float = RENEW_SECONDS) -> None:
        """A round every ``interval`` from the start of the last (a slow round does not push the next one back),
        and after a round that failed while holding the Lease, again within :data:`RETRY_SECONDS` — so a slow or
        briefly failing API server does not end leadership before :data:`RENEW_DEADLINE_SECONDS`. The rounds run
        on a thread of their own: no other work of the process queues before a renewal."""
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(1, thread_name_prefix="cardquota-lease") as thread:
            while True:
                started = self.clock()
                renewed_before = self._renewed_at
                await loop.run_in_executor(thread, self.try_acquire)
                failed = self._held and self._renewed_at == renewed_before
                wait = min(interval, RETRY_SECONDS) if failed else interval
                await asyncio.sleep(max(0.0, started + wait - self.clock()))
