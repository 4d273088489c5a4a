"""Leader election with a coordination.k8s.io Lease: one replica writes annotations and events, every replica
serves webhooks. (Kopf's peering would pause all handlers on the standby, including those feeding the webhook
cache, so it does not fit.)"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import uuid
from typing import Any

import urllib3
from kubernetes import client

from cardquota.kube import Conflict, KubeError, create_lease, read_lease, update_lease

log = logging.getLogger("cardquota.leader")
LEASE_SECONDS = 15
RENEW_SECONDS = 5.0


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
    this round; an unreachable API stops the writes until it is back."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str = "cardquota-controller",
                 identity: str | None = None) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity or f"{os.environ.get('HOSTNAME', 'cardquota')}-{uuid.uuid4().hex[:8]}"
        self.leading = False

    def try_acquire(self, now: datetime.datetime | None = None) -> bool:
        """One round: create, renew or take over an expired Lease. True while this replica holds it."""
        moment = now or _now()
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _stamp(moment)}
        try:
            lease = read_lease(self.api, self.namespace, self.name)
            if lease is None:
                create_lease(self.api, self.namespace, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {**spec, "acquireTime": _stamp(moment)}})
                return self._became(True)
            current: dict[str, Any] = dict(lease.get("spec") or {})
            holder = current.get("holderIdentity")
            renewed = _parse(current.get("renewTime"))
            duration = current.get("leaseDurationSeconds") or LEASE_SECONDS
            expired = renewed is None or renewed + datetime.timedelta(seconds=duration) < moment
            if holder != self.identity and not expired:
                return self._became(False)
            if holder != self.identity:
                spec["acquireTime"] = _stamp(moment)
            update_lease(self.api, self.namespace, self.name, spec,
                         (lease.get("metadata") or {}).get("resourceVersion"))
            return self._became(True)
        except Conflict:  # another replica wrote the Lease since it was read: not leading this round
            return self._became(False)
        except KubeError as error:
            log.warning("leader election round failed: %s", error)
            return self._became(False)
        except (OSError, urllib3.exceptions.HTTPError) as error:  # API unreachable: stop writing until it is back
            log.warning("leader election round failed, API unreachable: %s", error)
            return self._became(False)

    def _became(self, leading: bool) -> bool:
        if leading != self.leading:
            log.info("%s leadership of Lease %s/%s", "acquired" if leading else "lost", self.namespace, self.name)
        self.leading = leading
        return leading

    async def run(self, interval: float = RENEW_SECONDS) -> None:
        while True:
            await asyncio.to_thread(self.try_acquire)
            await asyncio.sleep(interval)
