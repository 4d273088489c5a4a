"""The real operator against kmock: queue and node annotations converge to the ledger, a burst of pod events costs
at most one patch per queue per window, a restart corrects stale annotations, and events carry the seed's
reasons. The operator calls as its account, held to the RBAC the chart renders for it (operator_runs)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from builders import pod, podgroup, queue
from operator_runs import operator_running
from polling import eventually

from cardquota.kube import Connection, api_client, list_all_async
from cardquota.operator.controller import Publisher
from cardquota.runtime.cache import ClusterCache

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

WINDOW = 0.25
A100 = "NVIDIA-A100"


class Api:
    def __init__(self, kmock: Any, session: aiohttp.ClientSession) -> None:
        self.kmock = kmock
        self.session = session
        self.base = str(kmock.url).rstrip("/")

    async def call(self, method: str, path: str, body: object = None, *, merge: bool = False) -> Any:
        headers = {"Content-Type": "application/merge-patch+json"} if merge else {}
        async with self.session.request(method, self.base + path, json=body, headers=headers) as response:
            assert response.status < 300, await response.text()
            return await response.json()

    async def queue_annotations(self, name: str) -> dict[str, str]:
        body = await self.call("GET", f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}")
        return dict(body.get("metadata", {}).get("annotations") or {})

    def patches_of(self, path_end: str) -> int:
        return sum(1 for request in self.kmock
                   if str(request.method).lower().endswith("patch") and request.url.path.endswith(path_end))


@pytest.fixture
async def api(volcano_kmock: Any) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(volcano_kmock, session)


@contextlib.asynccontextmanager
async def operator(api: Api, tmp_path: Path) -> AsyncIterator[None]:
    """The operator (all-in-one), its calls held to its account's shipped RBAC."""
    async with operator_running(api.kmock, tmp_path, publish_window=WINDOW, rbac=True):
        yield


async def create_team_a(api: Api) -> None:
    await api.call("POST", "/apis/scheduling.volcano.sh/v1beta1/queues", queue("team-a", {A100: 4}))


async def test_annotations_converge_to_the_ledger(api: Api, tmp_path: Path) -> None:
    async with operator(api, tmp_path):
        await create_team_a(api)
        await api.call("POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups",
                       podgroup("pg", namespace="ml", queue="team-a", phase="Inqueue", request={A100: 3}))
        for name, node_name in (("w0", "a100-1"), ("w1", None)):
            await api.call("POST", "/api/v1/namespaces/ml/pods",
                           pod(name, namespace="ml", card=A100, gpus=1, group="pg", node_name=node_name))

        expected = {"volcano.sh/card.allocated": '{"NVIDIA-A100":1}', "volcano.sh/card.inqueue": '{"NVIDIA-A100":2}',
                    "volcano.sh/card.pending": '{"NVIDIA-A100":1}', "volcano.sh/card.usage": "NVIDIA-A100 1/4"}

        async def converged() -> bool:
            annotations = await api.queue_annotations("team-a")
            return all(annotations.get(k) == v for k, v in expected.items())

        await eventually(converged)
        async def node_annotated() -> bool:
            node = await api.call("GET", "/api/v1/nodes/a100-1")
            return "volcano.sh/card.types" in (node["metadata"].get("annotations") or {})

        await eventually(node_annotated)
        node = await api.call("GET", "/api/v1/nodes/a100-1")
        assert json.loads(node["metadata"]["annotations"]["volcano.sh/card.types"]) == {
            A100: {"count": 8, "kind": "whole", "resource": "nvidia.com/gpu"}}


async def test_a_burst_of_1000_pod_events_costs_at_most_one_patch_per_window(api: Api,
                                                                             operator_connection: Connection) -> None:
    """The real publisher against kmock, fed 1000 pod watch events as fast as the watch handler would apply them
    (going through kmock and Kopf one request at a time would make the burst last minutes, not a burst)."""
    await create_team_a(api)
    connection = operator_connection
    cache = ClusterCache()
    cache.load(await list_all_async(api_client(connection)))
    publisher = Publisher(cache, api_client(connection), window=WINDOW)
    task = asyncio.create_task(publisher.run())
    try:
        async def annotated() -> bool:
            return (await api.queue_annotations("team-a")).get("volcano.sh/card.usage") == "NVIDIA-A100 0/4"

        await eventually(annotated)
        before = api.patches_of("/queues/team-a")
        started = time.monotonic()
        for step in range(4):  # 250 pods x 4 events: pending, bound, relabelled, bound to a second card
            for index in range(250):
                manifest = pod(f"burst-{index}", namespace="ml", card=A100, gpus=1 + (step == 3), queue="team-a",
                               node_name=None if step == 0 else "a100-1")
                cache.apply("ADDED" if step == 0 else "MODIFIED", manifest)
                if index % 50 == 0:
                    await asyncio.sleep(0.01)

        async def settled() -> bool:
            return (await api.queue_annotations("team-a")).get("volcano.sh/card.usage") == "NVIDIA-A100 500/4"

        await eventually(settled)
        elapsed = time.monotonic() - started
        patches = api.patches_of("/queues/team-a") - before
        windows = math.ceil(elapsed / WINDOW) + 1
        assert 1 <= patches <= windows, (patches, windows, elapsed)

        def counted() -> bool:  # the publisher counts a patch once its thread has the answer, after kmock applied it
            return publisher.stats.patches.get(("Queue", "team-a")) == patches + 1  # +1: the initial reconcile

        await eventually(counted)
        assert api.patches_of("/queues/team-a") - before == patches  # and nothing more was written meanwhile
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_restart_corrects_stale_annotations(api: Api, tmp_path: Path) -> None:
    await create_team_a(api)
    await api.call("PATCH", "/apis/scheduling.volcano.sh/v1beta1/queues/team-a", {"metadata": {"annotations": {
        "volcano.sh/card.allocated": '{"NVIDIA-A100":99}', "volcano.sh/card.usage": "stale"}}}, merge=True)
    async with operator(api, tmp_path):
        async def corrected() -> bool:
            annotations = await api.queue_annotations("team-a")
            return (annotations.get("volcano.sh/card.allocated") == '{"NVIDIA-A100":0}'
                    and annotations.get("volcano.sh/card.usage") == "NVIDIA-A100 0/4")

        await eventually(corrected)


async def test_events_carry_the_seed_reasons(api: Api, tmp_path: Path) -> None:
    async with operator(api, tmp_path):
        await create_team_a(api)
        await api.call("POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups",
                       podgroup("big", namespace="ml", queue="team-a", phase="Pending", request={A100: 6}))

        async def evented() -> bool:
            listing = await api.call("GET", "/api/v1/namespaces/ml/events")
            return any(item.get("reason") == "InsufficientScalarQuota" for item in listing.get("items", []))

        await eventually(evented)
        listing = await api.call("GET", "/api/v1/namespaces/ml/events")
        [event] = [item for item in listing["items"] if item.get("involvedObject", {}).get("name") == "big"]
        assert event["type"] == "Warning"
        assert event["message"] == ("Queue team-a has insufficient NVIDIA-A100 quota: requested 6, total would be 6, "
                                    "but capability is 4")
        await asyncio.sleep(3 * WINDOW)
        again = await api.call("GET", "/api/v1/namespaces/ml/events")
        assert len([i for i in again["items"] if i.get("involvedObject", {}).get("name") == "big"]) == 1


async def test_events_apply_the_arguments_of_the_extenders_conf(api: Api, tmp_path: Path) -> None:
    """The controller reads cardUnlimitedCpuMemory where the extender and ``kubectl cardquota explain`` do (ConfigMap
    cardquota-extender-conf): written false there, a card job whose minResources exceed its queue's cpu capability
    gets the InsufficientCPUQuota event the scheduler's enqueue gives it (before, the controller never read it and
    took it as on: no event)."""
    conf = "tiers:\n- plugins:\n  - name: capacity-card\n    arguments:\n      cardUnlimitedCpuMemory: false\n"
    await api.call("POST", "/api/v1/namespaces/cardquota-system/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cardquota-extender-conf", "namespace": "cardquota-system"},
        "data": {"volcano-scheduler.conf": conf}})
    capped = queue("team-c", {A100: 4})
    capped["spec"]["capability"] = {"cpu": "2"}
    group = podgroup("cpu-heavy", namespace="ml", queue="team-c", phase="Pending", request={A100: 1})
    group["spec"]["minResources"] = {"cpu": "8"}
    async with operator(api, tmp_path):
        await api.call("POST", "/apis/scheduling.volcano.sh/v1beta1/queues", capped)
        await api.call("POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups", group)

        async def evented() -> bool:
            listing = await api.call("GET", "/api/v1/namespaces/ml/events")
            return any(item.get("reason") == "InsufficientCPUQuota" for item in listing.get("items", []))

        await eventually(evented)
