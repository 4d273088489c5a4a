"""The pod reflector through the real kube module against kmock: the paginated list (``limit``/``continue``: kmock
answers in one page, as a server that ignores ``limit`` may), then the watch stream carrying creations and
deletions into the cache, and a stop that closes the stream; the reflector calls as the operator's account, held to
its shipped RBAC."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from builders import pod
from polling import eventually

from cardquota.kube import Connection, api_client, list_pages
from cardquota.operator.reflector import pod_reflector
from cardquota.runtime.cache import ClusterCache

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]


async def call(kmock: Any, method: str, path: str, body: object = None) -> None:
    async with aiohttp.ClientSession() as session, session.request(
            method, f"{str(kmock.url).rstrip('/')}{path}", json=body) as response:
        assert response.status < 300, await response.text()


async def test_pods_are_listed_then_followed_by_the_watch(volcano_kmock: Any, operator_connection: Connection) -> None:
    for name in ("p0", "p1"):
        volcano_kmock.objects["v1/pods", "ml", name] = pod(name, namespace="ml", gpus=1, node_name="a100-1",
                                                           phase="Running")
    api = api_client(operator_connection)
    pages = await asyncio.to_thread(lambda: list(list_pages(api, "/api/v1/pods", "v1", "Pod", limit=1)))
    assert sorted(item["metadata"]["name"] for page in pages for item in page.items) == ["p0", "p1"]
    assert pages[-1].last
    assert all(item["kind"] == "Pod" and item["apiVersion"] == "v1" for page in pages for item in page.items)

    cache = ClusterCache()
    reflector = pod_reflector(cache, api)
    task = asyncio.create_task(reflector.run())
    await asyncio.wait_for(reflector.synced.wait(), 10)
    assert set(cache.ledger.snapshot.pods) == {("ml", "p0"), ("ml", "p1")}

    await call(volcano_kmock, "POST", "/api/v1/namespaces/ml/pods", pod("p2", namespace="ml", gpus=2))
    await eventually(lambda: ("ml", "p2") in cache.ledger.snapshot.pods)
    await call(volcano_kmock, "DELETE", "/api/v1/namespaces/ml/pods/p0")
    await eventually(lambda: ("ml", "p0") not in cache.ledger.snapshot.pods)
    assert reflector.lists == 1

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
