"""A bounded soak (``--slow`` only; 5 minutes, ``CARDQUOTA_SOAK_SECONDS`` to change it): admissions from 20 clients
and a stream of pod events on loopback, with the process's resident memory sampled every few seconds. After the
first minute's warm-up the memory stays flat: the last samples are within 10 % (and 20 MB) of the first."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any

import aiohttp
import pytest
from admission_reviews import CLUSTER, review
from builders import pod

from cardquota.core.policies.config import PolicyConfig
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.metrics import serve_http
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.server import build_app

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


async def test_memory_stays_flat_under_a_bounded_soak(request: pytest.FixtureRequest) -> None:
    if not request.config.getoption("--slow"):
        pytest.skip("the soak runs with --slow (5 minutes of load)")
    if not os.path.exists("/proc/self/statm"):
        pytest.skip("resident memory is read from /proc (Linux only)")
    duration = float(os.environ.get("CARDQUOTA_SOAK_SECONDS", "300"))
    warm_up = min(60.0, duration / 5)
    cache = ClusterCache()
    cache.load(CLUSTER)
    runner = await serve_http(build_app(Admission(cache, PolicyConfig())), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    deadline = time.monotonic() + duration
    rng = random.Random(3)
    samples: list[tuple[float, int]] = []
    served = 0

    async def events() -> None:
        version = 0
        while time.monotonic() < deadline:
            version += 1
            manifest = pod(f"w-{rng.randrange(500)}", namespace="ml", card="NVIDIA-A100", gpus=1, queue="team-a",
                           node_name=rng.choice([None, "a100-1"]))
            manifest["metadata"]["resourceVersion"] = str(version)
            cache.apply(rng.choice(["MODIFIED", "MODIFIED", "DELETED"]), manifest)
            await asyncio.sleep(0.001)

    async def client(session: aiohttp.ClientSession, worker: int) -> None:
        nonlocal served
        index = 0
        while time.monotonic() < deadline:
            index += 1
            body: dict[str, Any] = review(pod(f"c{worker}-{index}", namespace="ml", card="NVIDIA-A100", gpus=1,
                                              queue="team-a"))
            async with session.post(f"{url}/{'mutate' if index % 2 else 'validate'}", data=json.dumps(body)) as r:
                assert r.status == 200
                await r.read()
            served += 1

    async def sample() -> None:
        start = time.monotonic()
        while time.monotonic() < deadline:
            await asyncio.sleep(5)
            if time.monotonic() - start > warm_up:
                samples.append((time.monotonic() - start, resident_bytes()))

    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=20)) as session:
            await asyncio.gather(events(), sample(), *(client(session, worker) for worker in range(20)))
    finally:
        await runner.cleanup()
    first, last = samples[0][1], samples[-1][1]
    print(f"soak: {served} admissions in {duration:.0f} s; resident memory {first / 2**20:.1f} MiB after warm-up, "
          f"{last / 2**20:.1f} MiB at the end, peak {max(s[1] for s in samples) / 2**20:.1f} MiB")
    assert last - first < max(0.10 * first, 20 * 2**20)
