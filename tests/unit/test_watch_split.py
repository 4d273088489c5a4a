"""Which kinds the reflectors follow and which Kopf does (operator/watch.py), decided by cardinality: one object per
pod, per job (PodGroup), per node or per Deployment revision (ReplicaSet) is the reflectors', and PriorityClasses
(few, but a 403 must read as none: reflector.Reflector.optional); Kopf keeps queues, Deployments and StatefulSets.
Every cached kind is followed exactly once."""

from __future__ import annotations

import kopf

from cardquota.kube import CACHED_RESOURCES
from cardquota.operator.watch import LISTED_AT_START, REFLECTED, register
from cardquota.runtime.cache import ClusterCache


def test_every_cached_kind_is_followed_once() -> None:
    reflected = [kind for _, _, kind, _ in REFLECTED]
    kopfs = [kind for _, _, kind, _ in LISTED_AT_START]
    assert sorted(reflected + kopfs) == sorted(kind for _, _, kind, _ in CACHED_RESOURCES)
    assert set(reflected) == {"PriorityClass", "Node", "PodGroup", "ReplicaSet", "Pod"}


def test_pods_are_listed_last_so_each_is_charged_once() -> None:
    """Nodes and PodGroups first: a pod listed before its node or PodGroup has its charge computed again when they
    arrive (the ledger recharges the pods of a node or PodGroup that changes)."""
    assert [kind for _, _, kind, _ in REFLECTED][-1] == "Pod"


def test_kopf_handles_exactly_the_other_kinds() -> None:
    registry = kopf.OperatorRegistry()
    register(registry, ClusterCache())
    handled = {handler.id for handler in registry._watching.get_all_handlers()}
    assert handled == {f"{kind.lower()}_event" for _, _, kind, _ in LISTED_AT_START}
    assert all("/" in api_version for _, _, _, api_version in LISTED_AT_START)  # (none in the core group)
