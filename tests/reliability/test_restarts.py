"""The operator stopped, or killed, and started again at random points while the cluster keeps changing: after the
last start, every queue's and node's annotations equal what a full rebuild of the final objects says."""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from builders import gpu_node, pod, queue
from polling import eventually

from cardquota.core.ledger import Ledger
from cardquota.core.publish import node_annotations, queue_annotations
from cardquota.kube import Connection
from cardquota.operator.settings import Settings
from cardquota.processes import run

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]
A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
RESTARTS, CHANGES = 4, 12


async def test_annotations_converge_after_restarts_at_random_points(volcano_kmock: Any, tmp_path: Path) -> None:
    rng = random.Random(5)
    base = str(volcano_kmock.url).rstrip("/")
    live: dict[tuple[str, str], dict[str, Any]] = {}
    nodes = [gpu_node("a100-1", A100, 8), gpu_node("h100-1", H100, 8)]
    volcano_kmock.objects["v1/nodes", None, "h100-1"] = nodes[1]
    queues = [queue("team-a", {A100: 4, H100: 2}), queue("team-b", {A100: 2})]
    for item in queues:
        volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, item["metadata"]["name"]] = item

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        async def send(method: str, path: str, body: object = None) -> Any:
            async with session.request(method, f"{base}{path}", json=body) as response:
                assert response.status < 300, await response.text()
                return await response.json()

        async def change() -> None:
            name = f"p{rng.randrange(8)}"
            if ("ml", name) in live and rng.random() < 0.3:
                await send("DELETE", f"/api/v1/namespaces/ml/pods/{name}")
                del live[("ml", name)]
                return
            manifest = pod(name, namespace="ml", card=rng.choice([A100, H100]), gpus=1,
                           queue=rng.choice(["team-a", "team-b"]), node_name=rng.choice([None, "a100-1", "h100-1"]))
            if ("ml", name) in live:
                await send("DELETE", f"/api/v1/namespaces/ml/pods/{name}")
            await send("POST", "/api/v1/namespaces/ml/pods", manifest)
            live[("ml", name)] = manifest

        for round_ in range(RESTARTS):
            settings = Settings(host="127.0.0.1", port=0, metrics_port=0, dev=True, cert_dir=str(tmp_path),
                                publish_window=0.05)
            stop, started = asyncio.Event(), asyncio.Event()
            task = asyncio.create_task(run(settings, connection=Connection(host=base, insecure=True), stop=stop,
                                           started=started))
            await asyncio.wait_for(started.wait(), timeout=15)
            for _ in range(rng.randrange(1, CHANGES)):
                await change()
                await asyncio.sleep(rng.choice([0, 0, 0.01, 0.05]))
            if round_ < RESTARTS - 1:
                if round_ % 2:  # killed: cancelled wherever it is, writes half done
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.wait_for(task, timeout=15)
                else:  # stopped at a random point
                    stop.set()
                    await asyncio.wait_for(task, timeout=15)
                for _ in range(rng.randrange(0, 4)):  # the cluster moves on while nobody watches
                    await change()
        try:
            expected = Ledger.build([*nodes, *queues, *live.values()])

            async def converged() -> bool:
                for item in queues:
                    name = item["metadata"]["name"]
                    current = (await send("GET", f"{QUEUES}/{name}"))["metadata"].get("annotations", {})
                    wanted = queue_annotations(expected.usage(name))
                    if any(current.get(key) != value for key, value in wanted.items()):
                        return False
                for name, record in expected.snapshot.nodes.items():
                    current = (await send("GET", f"/api/v1/nodes/{name}"))["metadata"].get("annotations", {})
                    if current.get("volcano.sh/card.types") != node_annotations(record.cards)["volcano.sh/card.types"]:
                        return False
                return True

            await eventually(converged, timeout=20)
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=15)
