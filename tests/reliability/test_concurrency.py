"""1,000 concurrent admissions while 10,000 pod events are applied on the same event loop (as the watch handlers
do): every admission is answered, and afterwards the incrementally kept ledger equals a rebuild of the final
objects."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import aiohttp
from admission_reviews import CLUSTER, review
from builders import pod

from cardquota.core.ledger import Ledger
from cardquota.core.policies.config import PolicyConfig
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.metrics import serve_http
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.server import build_app

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
ADMISSIONS, EVENTS, CONCURRENCY = 1000, 10_000, 50


def _state(ledger: Ledger) -> dict[str, Any]:
    return {name: usage.as_json() for name, usage in ledger.all_usage().items()}


async def test_admissions_and_watch_events_interleaved() -> None:
    cache = ClusterCache()
    cache.load(CLUSTER)
    runner = await serve_http(build_app(Admission(cache, PolicyConfig())), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    rng = random.Random(11)
    live: dict[tuple[str, str], dict[str, Any]] = {}
    statuses: list[int] = []

    async def events() -> None:
        for index in range(EVENTS):
            name = f"w-{rng.randrange(300)}"
            if rng.random() < 0.15 and ("ml", name) in live:
                cache.apply("DELETED", live.pop(("ml", name)))
            else:
                manifest = pod(name, namespace="ml", card=rng.choice([A100, H100, f"{A100}|{H100}"]),
                               gpus=rng.randint(1, 2), queue="team-a",
                               node_name=rng.choice([None, "a100-1", "h100-1"]))
                manifest["metadata"]["resourceVersion"] = str(index + 1)
                cache.apply("MODIFIED", manifest)
                live[("ml", name)] = manifest
            if index % 20 == 0:
                await asyncio.sleep(0)  # let the admission handlers run in between, as with real watch streams

    async def admissions(session: aiohttp.ClientSession, worker: int) -> None:
        for index in range(worker, ADMISSIONS, CONCURRENCY):
            candidate = pod(f"new-{index}", namespace="ml", card=A100, gpus=1, queue="team-a")
            path = "/mutate" if index % 2 else "/validate"
            async with session.post(f"{url}{path}", data=json.dumps(review(candidate))) as response:
                statuses.append(response.status)
                document = await response.json()
                assert isinstance(document["response"]["allowed"], bool)

    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as session:
            await asyncio.gather(events(), *(admissions(session, worker) for worker in range(CONCURRENCY)))
    finally:
        await runner.cleanup()
    assert statuses == [200] * ADMISSIONS
    rebuilt = Ledger.build([*CLUSTER, *live.values()])
    assert _state(cache.ledger) == _state(rebuilt)
    assert cache.ledger._pod_charges == rebuilt._pod_charges
