"""The served extender keeping its session by watches (issue 20), against kmock: it decides from what it watched
alone — pods created, bound and deleted in the API — with no onSessionOpen body, and until the cluster is listed it
reports itself degraded (readiness 503, a metric, a log line) instead of passing everything silently."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest
from builders import gpu_node, pod, queue
from polling import eventually
from volcano_payloads import RUNNING, node_info, task_info

from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import Extender
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.kube import Connection, api_client
from cardquota.operator.extender import ABSTENTIONS, build_extender_app, run_extender

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

A100 = "NVIDIA-A100"
CONFIG = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True))


def card_pod(name: str, *, node_name: str | None = None) -> dict[str, Any]:
    return pod(name, namespace="ml", card=A100, gpus=1, queue="team-a", node_name=node_name,
               phase="Running" if node_name else "Pending")


async def test_degraded_until_listed_never_silently(aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    listed = [False]
    client = await aiohttp_client(build_extender_app(Extender(), None, lambda: listed[0]))
    before = ABSTENTIONS.labels("predicate", "not-synced")._value.get()
    response = await client.post("/predicate", json={"task": task_info(card_pod("p"))})
    # Not an abstaining 200, which Volcano takes as an answer: a transport error, so the stanza's ignorable decides.
    assert response.status == 503
    assert (await response.json())["error"].startswith("cardquota's extender is not synced")
    assert ABSTENTIONS.labels("predicate", "not-synced")._value.get() == before + 1
    assert (await client.get("/readyz")).status == 503
    assert "extender degraded: the cluster is not listed yet, or its watch" in caplog.text
    listed[0] = True
    assert (await client.get("/readyz")).status == 200
    caplog.clear()
    caplog.set_level(logging.WARNING)
    # Watched: onSessionOpen's body is never read (garbage would otherwise be logged as an unreadable body).
    response = await client.post("/onSessionOpen", data=b"{not json at all")
    assert await response.json() == {}
    assert "unreadable body" not in caplog.text


async def test_decisions_follow_the_watched_cluster(volcano_kmock: Any, extender_connection: Connection) -> None:
    base = str(volcano_kmock.url).rstrip("/")
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team-a"] = queue("team-a", {A100: 1})
    stop = asyncio.Event()
    ports: list[int] = []
    task = asyncio.create_task(run_extender(Extender(CONFIG), "127.0.0.1", 0, None, stop,
                                            api=api_client(extender_connection), on_listening=ports.append))
    await eventually(lambda: bool(ports))
    extender_url = f"http://127.0.0.1:{ports[0]}"
    node = gpu_node("a100-1", A100, 8)  # (as the volcano_kmock fixture has it)
    try:
        await decide(extender_url, base, node)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def decide(extender_url: str, base: str, node: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as session:
        async def ready() -> bool:
            async with session.get(f"{extender_url}/readyz") as response:
                return response.status == 200

        async def refused() -> bool:
            async with session.post(f"{extender_url}/predicate", json={
                    "task": task_info(card_pod("new")), "node": node_info(node)}) as response:
                return bool((await response.json())["code"])

        await eventually(ready)
        assert not await refused()
        async with session.post(f"{base}/api/v1/namespaces/ml/pods", json=card_pod("held", node_name="a100-1")):
            pass
        await eventually(refused)  # the one card of team-a's quota is held: seen through the watch alone
        # A caller that is not the scheduler cannot free it: the watch shows it bound.
        async with session.post(f"{extender_url}/deallocateFunc", json={
                "task": task_info(card_pod("held", node_name="a100-1"), status=RUNNING)}) as response:
            assert await response.json() == {"errorMessage": ""}
        assert await refused()
        async with session.delete(f"{base}/api/v1/namespaces/ml/pods/held"):
            pass
        await eventually(lambda: _not(refused))


async def _not(check: Any) -> bool:
    return not await check()
