"""The extender over HTTP, as Volcano's extender plugin calls it: every verb answered 200 with a JSON object,
realistic payloads decided, malformed ones abstained on, mGPU results handed to the pod patcher."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from builders import gpu_labels, node, pod, podgroup, queue
from volcano_payloads import ALLOCATED, job_info, node_info, queue_info, session_open, task_info

from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import Extender
from cardquota.core.scheduling.mgpu import MGPUConfig
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.operator.extender import build_extender_app

A100 = "NVIDIA-A100"
CONFIG = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True),
                         mgpu=MGPUConfig(enabled=True))
GPU_NODE = node("a1", labels=gpu_labels(A100, count=4), allocatable={"nvidia.com/gpu": "4"})
MGPU_NODE = node("m1", allocatable={"vke.volcengine.com/mgpu-core": "400", "vke.volcengine.com/mgpu-memory": "98304"})
QUEUE = queue("team-a", {A100: 2})


@pytest.fixture
async def client(aiohttp_client: Any) -> Any:
    patched: list[tuple[dict[str, Any], dict[str, str]]] = []

    async def patch(pod_manifest: dict[str, Any], annotations: dict[str, str]) -> None:
        patched.append((pod_manifest, annotations))

    test_client = await aiohttp_client(build_extender_app(Extender(CONFIG), patch))
    test_client.patched = patched
    return test_client


async def post(client: Any, verb: str, body: object) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body)
    response = await client.post(f"/{verb}", data=data, headers={"Content-Type": "application/json"})
    assert response.status == 200
    return await response.json()


async def test_a_scheduling_cycle_end_to_end(client: Any) -> None:
    group = podgroup("train", namespace="ml", queue="team-a", phase="Pending", request={A100: 2})
    worker = pod("w0", namespace="ml", card=A100, gpus=1, queue="team-a", group="train")
    assert await post(client, "onSessionOpen", session_open([GPU_NODE, MGPU_NODE], [QUEUE], [group],
                                                            pods_by_job={"train": [worker]})) == {}
    assert await post(client, "jobEnqueueable", {"job": job_info(group)}) == {"status": 1}
    task = task_info(worker)
    assert await post(client, "predicate", {"task": task, "node": node_info(GPU_NODE)}) == {"status": "", "code": 0}
    assert (await post(client, "predicate", {"task": task, "node": node_info(MGPU_NODE)}))["code"] == 2
    scores = await post(client, "prioritize", {"task": task, "nodes": [node_info(GPU_NODE)]})
    assert scores == {"nodeScore": {"a1": 0.0}, "errorMessage": ""}
    allocated = task_info(task["Pod"], status=ALLOCATED, node="a1")
    assert await post(client, "allocateFunc", {"task": allocated}) == {"errorMessage": ""}
    assert await post(client, "queueOverused", {"queue": queue_info(QUEUE)}) == {"overused": False}
    assert await post(client, "jobReady", {"job": job_info(group)}) == {"status": True}
    assert await post(client, "deallocateFunc", {"task": allocated}) == {"errorMessage": ""}
    assert await post(client, "onSessionClose", {}) == {}


async def test_mgpu_results_are_handed_to_the_pod_patcher(client: Any) -> None:
    mgpu_pod = pod("infer", namespace="ml", containers=[{"name": "c", "resources": {"requests": {
        "vke.volcengine.com/mgpu-core": "30", "vke.volcengine.com/mgpu-memory": "4096"}}}])
    await post(client, "onSessionOpen", session_open([MGPU_NODE], [queue("default", {})],
                                                     [podgroup("infer", namespace="ml", phase="Inqueue")],
                                                     pods_by_job={"infer": [mgpu_pod]}))
    task = task_info(mgpu_pod, status=ALLOCATED, node="m1")
    assert await post(client, "allocateFunc", {"task": task}) == {"errorMessage": ""}
    for _ in range(50):
        if client.patched:
            break
        await asyncio.sleep(0.01)
    ((patched_pod, annotations),) = client.patched
    assert patched_pod["metadata"]["name"] == "infer"
    assert annotations == {"vke.volcengine.com/gpu-index-container-c": "0", "vke.volcengine.com/assumed": "true"}


@pytest.mark.parametrize(("verb", "body", "answer"), [
    ("predicate", b"{not json", {"status": "", "code": 0}),
    ("prioritize", b"[1, 2]", {"nodeScore": {}, "errorMessage": ""}),
    ("jobEnqueueable", b"[" * 10_000, {"status": 0}),
    ("queueOverused", b"", {"overused": False}),
    ("jobReady", b"null", {"status": True}),
    ("allocateFunc", {"task": {"Pod": "not a pod"}}, {"errorMessage": ""}),
    ("predicate", {"task": {"Pod": {"metadata": {"name": 5}}}, "node": {"Node": {"metadata": {}}}},
     {"status": "", "code": 0}),
    ("noSuchVerb", {}, {"errorMessage": "cardquota serves no verb 'noSuchVerb'"}),
])
async def test_unreadable_requests_get_200_and_the_abstaining_answer(client: Any, verb: str, body: Any,
                                                                     answer: dict[str, Any]) -> None:
    await post(client, "onSessionOpen", session_open([GPU_NODE], [QUEUE], []))
    assert await post(client, verb, body) == answer


async def test_health_and_metrics(client: Any) -> None:
    await post(client, "predicate", {})
    assert (await client.get("/healthz")).status == 200
    text = await (await client.get("/metrics")).text()
    assert 'cardquota_extender_duration_seconds_count{verb="predicate"}' in text
