"""Kopf watch handlers that keep the cluster cache current (``<kind>_event``, one per cached kind)."""

from __future__ import annotations

from typing import Any

import kopf

from cardquota.operator.cache import ClusterCache
from cardquota.operator.metrics import EVENTS_PROCESSED


def register(registry: kopf.OperatorRegistry, cache: ClusterCache) -> None:
    """Handlers for nodes, queues, podgroups and the scalable workloads; each feeds its events to ``cache``. Pods
    are not Kopf's: operator/reflector.py lists and watches them at O(event) cost."""

    def feed(kind: str, api_version: str) -> Any:
        # async, so Kopf runs it on the event loop (a plain function would run on Kopf's executor threads): the cache
        # changes only there, where the admission policies read it, and never under a policy half-way through.
        async def handler(event: dict[str, Any], **_: Any) -> None:
            manifest = event.get("object")
            if isinstance(manifest, dict):
                cache.apply(event.get("type"), {"apiVersion": api_version, "kind": kind, **manifest})
                EVENTS_PROCESSED.labels(kind=kind).inc()
        handler.__name__ = f"{kind.lower()}_event"
        return handler

    kopf.on.event("v1", "nodes", registry=registry, id="node_event")(feed("Node", "v1"))
    kopf.on.event("scheduling.volcano.sh", "v1beta1", "queues", registry=registry,
                  id="queue_event")(feed("Queue", "scheduling.volcano.sh/v1beta1"))
    kopf.on.event("scheduling.volcano.sh", "v1beta1", "podgroups", registry=registry,
                  id="podgroup_event")(feed("PodGroup", "scheduling.volcano.sh/v1beta1"))
    for plural, kind in (("deployments", "Deployment"), ("statefulsets", "StatefulSet"),
                         ("replicasets", "ReplicaSet")):
        kopf.on.event("apps", "v1", plural, registry=registry,
                      id=f"{kind.lower()}_event")(feed(kind, "apps/v1"))
