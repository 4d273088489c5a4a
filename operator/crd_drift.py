"""The drift check: does the installed Volcano Queue CRD still carry cardquota's additions?

A Volcano upgrade re-applies Volcano's own Queue CRD, which drops the ``spec.dra`` schema and the card columns that
``kubectl cardquota crd install`` patched in; from then on the API server prunes ``spec.dra`` from every queue
written. At start and every :data:`CHECK_SECONDS` the operator reads that one CRD (``get``, RBAC restricted to its
name) and, when additions are missing: logs a warning with the command that restores them, sets the
``cardquota_crd_additions_missing`` gauge, records a ``CRDAdditionsMissing`` Event (the leader, once per change),
and tells the Queue policy (the snapshot's ``queue_crd_missing``) so every Queue write is warned. It keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Gauge

from cardquota.core import crd_additions
from cardquota.core.crd_additions import QUEUE_CRD
from cardquota.core.events import CardEvent
from cardquota.kube import Forbidden, KubeError, create_event, read_crd
from cardquota.operator.controller import EVENT_NAMESPACE, kubernetes_event
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.metrics import REGISTRY

log = logging.getLogger("cardquota.crd")
CHECK_SECONDS = 300.0
REASON = "CRDAdditionsMissing"
MISSING = Gauge("cardquota_crd_additions_missing",
                "cardquota's additions (spec.dra schema, card columns) missing from the installed CRD; -1: unknown",
                ["crd"], registry=REGISTRY)


class CrdDriftCheck:
    """Reads the Queue CRD and publishes what it lacks; :meth:`check` once, :meth:`run` forever."""

    def __init__(self, api: Any, cache: ClusterCache, *, is_leader: Callable[[], bool],
                 interval: float = CHECK_SECONDS) -> None:
        self.api = api
        self.cache = cache
        self.is_leader = is_leader
        self.interval = interval
        self.missing: tuple[str, ...] | None = None
        """The labels found missing at the last readable check; None before one succeeded."""
        self._reported: tuple[str, ...] = ()

    async def run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.interval)

    async def check(self) -> None:
        try:
            crd = await asyncio.to_thread(read_crd, self.api, QUEUE_CRD)
        except KubeError as error:
            MISSING.labels(crd=QUEUE_CRD).set(-1)
            hint = " (the ClusterRole grants get on this one CRD)" if isinstance(error, Forbidden) else ""
            log.warning("cannot read the %s CRD to check cardquota's additions%s: %s", QUEUE_CRD, hint, error)
            return
        if crd is None:
            missing = tuple(addition.label for addition in crd_additions.ADDITIONS[QUEUE_CRD])
            log.warning("the %s CRD is not installed (is Volcano installed?): queues cannot be served", QUEUE_CRD)
        else:
            missing = tuple(state.label for state in crd_additions.missing(crd))
        self.missing = missing
        self.cache.ledger.snapshot.queue_crd_missing = missing
        MISSING.labels(crd=QUEUE_CRD).set(len(missing))
        if missing and crd is not None:
            log.warning("the installed %s CRD lacks cardquota's %s (a Volcano upgrade re-applied it?): spec.dra is "
                        "pruned from queues written meanwhile; restore with: %s", QUEUE_CRD, ", ".join(missing),
                        crd_additions.restore_command())
        elif not missing and self._reported:
            log.info("cardquota's additions to the %s CRD are back", QUEUE_CRD)
            self._reported = ()
        if missing and crd is not None and missing != self._reported and self.is_leader():
            await self._event(crd, missing)

    async def _event(self, crd: Mapping[str, Any], missing: tuple[str, ...]) -> None:
        """The event on the CRD read (its uid carried: ``kubectl describe crd`` lists it)."""
        metadata = crd.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        event = CardEvent("CustomResourceDefinition", "", QUEUE_CRD, REASON,
                          f"cardquota's {', '.join(missing)} missing from the installed CRD (spec.dra is pruned from "
                          f"queues written meanwhile); restore with: {crd_additions.restore_command()}",
                          uid=str(metadata.get("uid") or ""),
                          resource_version=str(metadata.get("resourceVersion") or ""))
        try:
            await asyncio.to_thread(create_event, self.api, EVENT_NAMESPACE, kubernetes_event(event, "cardquota"))
        except KubeError as error:
            log.warning("could not record the %s event: %s", REASON, error)
            return
        self._reported = missing
