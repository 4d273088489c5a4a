"""Two replicas against kmock: exactly one holds the Lease (and writes), the other takes over once it expires; and
the metrics endpoint exposes the seed's queue card gauges."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import aiohttp
import pytest
from builders import gpu_node, pod, queue

from cardquota.core.ledger import Ledger
from cardquota.kube import Connection, api_client
from cardquota.operator.leader import LEASE_SECONDS, LeaderElection
from cardquota.operator.metrics import metrics_app
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.metrics import serve_http

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]


async def acquire(election: LeaderElection, moment: datetime.datetime) -> bool:
    """One election round (a blocking API call: off the event loop, which also serves kmock)."""
    return await asyncio.to_thread(election.try_acquire, moment)


async def test_exactly_one_replica_leads_and_the_other_takes_over_after_expiry(volcano_kmock: Any) -> None:
    api = api_client(Connection(host=str(volcano_kmock.url).rstrip("/"), insecure=True))
    first = LeaderElection(api, "cardquota-system", identity="replica-a")
    second = LeaderElection(api, "cardquota-system", identity="replica-b")
    now = datetime.datetime.now(datetime.UTC)
    assert await acquire(first, now) is True
    assert await acquire(second, now) is False
    assert await acquire(first, now + datetime.timedelta(seconds=5)) is True  # renewal
    assert await acquire(second, now + datetime.timedelta(seconds=10)) is False
    later = now + datetime.timedelta(seconds=5 + LEASE_SECONDS + 1)  # the first replica stopped renewing
    assert await acquire(second, later) is True
    assert await acquire(first, later) is False
    assert (first.leading, second.leading) == (False, True)


async def scrape(cache: ClusterCache, *, queues: bool = True) -> str:
    runner = await serve_http(metrics_app(cache, queues=queues), "127.0.0.1", 0)
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                assert response.status == 200
                text = await response.text()
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                assert response.status == 200
    finally:
        await runner.cleanup()
    return text


CLUSTER = [gpu_node("a", "NVIDIA-A100", 8), queue("team-a", {"NVIDIA-A100": 10}),
           pod("p", node_name="a", gpus=3, queue="team-a"), pod("w", gpus=2, card="NVIDIA-A100", queue="team-a")]


async def test_metrics_expose_queue_card_gauges() -> None:
    cache = ClusterCache()
    cache.load(CLUSTER)
    text = await scrape(cache)
    labels = 'card_name="NVIDIA-A100",queue_name="team-a"'
    assert f"volcano_queue_card_allocated{{{labels}}} 3.0" in text
    assert f"volcano_queue_card_capacity{{{labels}}} 10.0" in text
    assert f"volcano_queue_card_deserved{{{labels}}} 10.0" in text
    assert f"volcano_queue_card_request{{{labels}}} 5.0" in text
    assert f"cardquota_queue_card_pending{{{labels}}} 2.0" in text
    assert "cardquota_queue_card_inqueue{" not in text  # no Inqueue PodGroup: no sample
    assert "cardquota_webhook_duration_seconds" in text


async def test_a_webhook_process_exports_no_queue_gauge() -> None:
    """``--role webhook`` counts no pod: the queues' gauges are the controller's to export."""
    cache = ClusterCache(ledger=Ledger(published_usage=True))
    cache.load(CLUSTER)
    text = await scrape(cache, queues=False)
    assert "volcano_queue_card" not in text
    assert "cardquota_queue_" not in text
    assert "cardquota_webhook_duration_seconds" in text
