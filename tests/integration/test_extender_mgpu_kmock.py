"""mGPU results written before the bind can happen, against kmock and the served, watch-fed extender.

Volcano binds a task only after its ``allocateFunc`` answered (``Statement.Allocate`` calls the AllocateFunc event
handlers, ``Commit`` then binds: pkg/scheduler/framework/statement.go, v1.15.1), and it waits for that answer at most
``extender.httpTimeout`` (1 s by default: pkg/scheduler/plugins/extender/extender.go, ``parseExtenderConfig``). So
the result annotations are on the pod when ``allocateFunc`` answers, or the allocation is refused (Volcano rolls it
back); ``Statement.Discard`` calls ``deallocateFunc``, which removes them (a JSON merge patch with null)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest
from builders import node, pod
from polling import eventually
from volcano_payloads import ALLOCATED, task_info

from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import Extender
from cardquota.core.scheduling.mgpu import ASSUMED, GPU_INDEX_PREFIX, MGPUConfig
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.kube import Connection, api_client
from cardquota.operator.extender import api_pod_patcher, build_extender_app, run_extender
from cardquota.runtime.cache import ClusterCache

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

CONFIG = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True),
                         mgpu=MGPUConfig(enabled=True))
MGPU_NODE = node("m1", allocatable={"vke.volcengine.com/mgpu-core": "400", "vke.volcengine.com/mgpu-memory": "98304"})
RESULT = f"{GPU_INDEX_PREFIX}c"


def mgpu_pod(name: str) -> dict[str, Any]:
    return pod(name, namespace="ml", containers=[{"name": "c", "resources": {"requests": {
        "vke.volcengine.com/mgpu-core": "100", "vke.volcengine.com/mgpu-memory": "24576"}}}])


def allocation(name: str) -> dict[str, Any]:
    return {"task": task_info(mgpu_pod(name), status=ALLOCATED, node="m1")}


async def test_the_result_is_on_the_pod_when_allocate_answers_and_goes_on_deallocate(
        volcano_kmock: Any, extender_connection: Connection) -> None:
    volcano_kmock.objects["v1/nodes", None, "m1"] = MGPU_NODE
    for name in ("mine", "gone"):
        volcano_kmock.objects["v1/pods", "ml", name] = mgpu_pod(name)
    volcano_kmock["patch", "/api/v1/namespaces/ml/pods/gone"] << 404  # deleted between the watch and the write
    api = api_client(extender_connection)
    extender = Extender(CONFIG)
    stop = asyncio.Event()
    ports: list[int] = []
    task = asyncio.create_task(run_extender(extender, "127.0.0.1", 0, api_pod_patcher(api), stop, api=api,
                                            on_listening=ports.append))
    try:
        await eventually(lambda: bool(ports))
        url = f"http://127.0.0.1:{ports[0]}"
        async with aiohttp.ClientSession() as client:
            async def ready() -> bool:
                async with client.get(f"{url}/readyz") as response:
                    return response.status == 200

            async def verb(name: str, body: object) -> Any:
                async with client.post(f"{url}/{name}", json=body) as response:
                    assert response.status == 200
                    return await response.json()

            def annotations(name: str) -> Mapping[str, Any]:
                stored = volcano_kmock.objects[volcano_kmock.resource("v1/pods"), "ml", name]
                return {key: value for key, value in (stored["metadata"].get("annotations") or {}).items()
                        if value is not None}

            await eventually(ready)
            await eventually(lambda: extender.session is not None and ("ml", "gone") in extender.session.pods)
            assert await verb("allocateFunc", allocation("mine")) == {"errorMessage": ""}
            assert annotations("mine")[ASSUMED] == "true"  # written before the answer: before any bind
            assert RESULT in annotations("mine")
            assert await verb("deallocateFunc", allocation("mine")) == {"errorMessage": ""}
            assert ASSUMED not in annotations("mine")  # Discard: removed before the answer
            assert RESULT not in annotations("mine")

            refused = await verb("allocateFunc", allocation("gone"))
            assert refused["errorMessage"].startswith("cardquota could not write the mGPU result onto pod ml/gone")
            assert extender.session is not None
            assert not extender.session.view(("ml", "gone")).bound  # not held: the scheduler rolls it back
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_a_write_that_outlives_its_wait_refuses_the_allocation_and_is_undone_after_it_lands(
        aiohttp_client: Any) -> None:
    extender = Extender(CONFIG)
    ClusterCache(sink=extender).load([MGPU_NODE, mgpu_pod("slow")])
    release = asyncio.Event()
    stored: dict[str, str] = {}
    writes: list[dict[str, str | None]] = []

    async def patch(manifest: dict[str, Any], changes: Mapping[str, str | None]) -> None:
        if not writes:  # the first write hangs (an API server that does not answer) until released
            writes.append(dict(changes))
            await release.wait()
        else:
            writes.append(dict(changes))
        for key, value in changes.items():
            if value is None:
                stored.pop(key, None)
            else:
                stored[key] = value

    # (the first write never ends before it is released: how long the extender waits cannot change the outcome)
    client = await aiohttp_client(build_extender_app(extender, patch, lambda: True, patch_seconds=0.05))
    answer = await (await client.post("/allocateFunc", json=allocation("slow"))).json()
    assert answer["errorMessage"].startswith("cardquota could not write the mGPU result onto pod ml/slow: the API")
    assert extender.session is not None
    assert not extender.session.view(("ml", "slow")).bound
    release.set()
    await eventually(lambda: len(writes) == 2)
    await eventually(lambda: not stored)  # the late result landed, then was removed: never left behind
    assert writes[1] == dict.fromkeys(writes[0])
