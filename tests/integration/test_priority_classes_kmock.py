"""PriorityClasses followed by the operator's cache against kmock (which serves ``scheduling.k8s.io/v1``
natively, as every API server since Kubernetes 1.14): created, changed and deleted in the API, seen in the cache
as a PodGroup's priority; and under RBAC that predates them (a 403 on their list), the cache still syncs, with
none, every job of priority 0."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import aiohttp
import pytest
from builders import podgroup, priority_class
from kubeconfigs import write_kubeconfig
from operator_runs import _following, following_through_a_kubeconfig, shipped_grants, token_of
from polling import eventually
from rbac import Request, enforcing, refusals

from cardquota.core.objects import PodGroup
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.operator.reflector import Reflector
from cardquota.operator.settings import Settings

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

PRIORITY_CLASSES = "apis/scheduling.k8s.io/v1/priorityclasses"
URGENT = PodGroup.from_manifest(podgroup("llama", namespace="ml", priority_class="urgent"))


def priority(snapshot: ClusterSnapshot) -> int:
    return snapshot.job_priority(URGENT)


async def test_the_cache_follows_priority_classes_created_changed_and_deleted(volcano_kmock: Any,
                                                                              tmp_path: Any) -> None:
    volcano_kmock.objects["scheduling.k8s.io/v1/priorityclasses", None, "base"] = priority_class(
        "base", 5, global_default=True)
    url = f"{str(volcano_kmock.url).rstrip('/')}/{PRIORITY_CLASSES}"
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path) as cache, aiohttp.ClientSession() as session:
        snapshot = cache.ledger.snapshot
        assert priority(snapshot) == 5  # listed at start: the global default's, "urgent" not existing yet
        async with session.post(url, json=priority_class("urgent", 1000)) as response:
            assert response.status < 300, await response.text()
        await eventually(lambda: priority(snapshot) == 1000)
        async with session.patch(f"{url}/urgent", json={"value": 2000},
                                 headers={"Content-Type": "application/merge-patch+json"}) as response:
            assert response.status < 300, await response.text()
        await eventually(lambda: priority(snapshot) == 2000)
        async with session.delete(f"{url}/urgent") as response:
            assert response.status < 300, await response.text()
        await eventually(lambda: priority(snapshot) == 5)


async def test_rbac_without_priority_classes_syncs_with_none(volcano_kmock: Any, tmp_path: Any) -> None:
    """An install upgraded without its ClusterRole: the 403 is not an error that keeps the cache from syncing or
    reports it lagging; the classes read as none (every job of priority 0)."""
    volcano_kmock.objects["scheduling.k8s.io/v1/priorityclasses", None, "urgent"] = priority_class("urgent", 1000)
    shipped = shipped_grants(Settings())
    old = replace(shipped, rules=tuple(rule for rule in shipped.rules if "priorityclasses" not in rule.resources))
    assert not old.allows(Request("list", "scheduling.k8s.io", "priorityclasses"))
    enforcing(volcano_kmock, token_of(old), old)
    reflectors: list[Reflector] = []
    kubeconfig = write_kubeconfig(tmp_path, str(volcano_kmock.url), insecure=True, token=token_of(old))
    async with _following(volcano_kmock, kubeconfig, reflectors, None) as cache:
        assert cache.ready
        assert cache.ledger.snapshot.priority_classes == {}
        assert priority(cache.ledger.snapshot) == 0
        classes = next(reflector for reflector in reflectors if reflector.kind == "PriorityClass")
        assert not classes.served
        assert not classes.behind()
    assert {str(request) for _, request in refusals(volcano_kmock)} == {"list priorityclasses.scheduling.k8s.io"}

