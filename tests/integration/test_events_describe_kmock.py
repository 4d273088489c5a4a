"""The real operator's events are the ones ``kubectl describe`` lists (against kmock): for a Pod, a PodGroup, a Queue
and the Queue CRD, the object is read back from the API as kubectl reads it, and the events of every namespace are
filtered with the field selector kubectl builds for it (tests/kubectl_events.py; kmock applies no field selector,
so the selector's semantics are applied here). Before the events carried the uid, each found none. The operator
calls as its account, held to its shipped RBAC."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from builders import pod, podgroup, queue
from kubectl_events import described_events
from operator_runs import operator_running
from polling import eventually
from volcano_crds import upstream_crd

from cardquota.core.crd_additions import QUEUE_CRD
from cardquota.kube import Connection, api_client
from cardquota.operator.crd_drift import REASON, CrdDriftCheck
from cardquota.runtime.cache import ClusterCache

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

A100 = "NVIDIA-A100"
VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"


class Kubectl:
    """What ``kubectl describe`` does over HTTP: get the object, list events."""

    def __init__(self, kmock: Any, session: aiohttp.ClientSession) -> None:
        self.base = str(kmock.url).rstrip("/")
        self.session = session

    async def call(self, method: str, path: str, body: object = None) -> Any:
        async with self.session.request(method, self.base + path, json=body) as response:
            assert response.status < 300, await response.text()
            return await response.json()

    async def describe_events(self, path: str) -> list[str]:
        """The reasons of the events ``kubectl describe`` lists for the object at ``path``."""
        obj = await self.call("GET", path)
        events = (await self.call("GET", "/api/v1/events")).get("items", [])
        return sorted(event["reason"] for event in described_events(events, obj))


@pytest.fixture
async def kubectl(volcano_kmock: Any) -> AsyncIterator[Kubectl]:
    async with aiohttp.ClientSession() as session:
        yield Kubectl(volcano_kmock, session)


def with_uid(manifest: dict[str, Any], uid: str) -> dict[str, Any]:
    """The object as created by the API server (kmock keeps the uid it is given, and sets none itself)."""
    manifest["metadata"]["uid"] = uid
    return manifest


async def test_describe_lists_the_events_of_a_pod_a_podgroup_and_a_queue(volcano_kmock: Any, kubectl: Kubectl,
                                                                         tmp_path: Path) -> None:
    async with operator_running(volcano_kmock, tmp_path, publish_window=0.25, rbac=True):
        await kubectl.call("POST", f"{VOLCANO}/queues", with_uid(queue("team-a", {A100: 4}), "q-team-a"))
        await kubectl.call("POST", f"{VOLCANO}/queues", with_uid(queue("broken", "{not json"), "q-broken"))
        await kubectl.call("POST", f"{VOLCANO}/namespaces/ml/podgroups", with_uid(
            podgroup("big", namespace="ml", queue="team-a", phase="Pending", request={A100: 6}), "pg-big"))
        await kubectl.call("POST", "/api/v1/namespaces/ml/pods", with_uid(
            pod("stuck", namespace="ml", card=A100, gpus=5, queue="team-a"), "pod-stuck"))

        async def all_evented() -> bool:
            events = (await kubectl.call("GET", "/api/v1/events")).get("items", [])
            return {"InvalidCardQuota", "InsufficientScalarQuota"} <= {event.get("reason") for event in events} \
                and len(events) >= 3

        await eventually(all_evented)
        assert await kubectl.describe_events("/api/v1/namespaces/ml/pods/stuck") == ["InsufficientScalarQuota"]
        assert await kubectl.describe_events(f"{VOLCANO}/namespaces/ml/podgroups/big") == ["InsufficientScalarQuota"]
        assert await kubectl.describe_events(f"{VOLCANO}/queues/broken") == ["InvalidCardQuota"]
        assert await kubectl.describe_events(f"{VOLCANO}/queues/team-a") == []  # (nothing to say about it)


async def test_describe_crd_lists_the_drift_event(volcano_kmock: Any, kubectl: Kubectl,
                                                   operator_connection: Connection) -> None:
    crd = with_uid(upstream_crd(QUEUE_CRD, "v1.15.1"), "crd-queues")
    crd["metadata"].pop("resourceVersion", None)
    volcano_kmock.objects["apiextensions.k8s.io/v1/customresourcedefinitions", None, QUEUE_CRD] = crd
    cache = ClusterCache()
    cache.load([])
    drift = CrdDriftCheck(api_client(operator_connection), cache, is_leader=lambda: True)
    await drift.check()
    assert await kubectl.describe_events(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{QUEUE_CRD}") \
        == [REASON]
