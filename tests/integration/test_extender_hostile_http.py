"""The served extender (watch-fed, over HTTP on 127.0.0.1) against a caller that is not the scheduler: whatever it
posts, card quotas hold — a running pod is never freed by ``deallocateFunc``, pods the watch does not know stay
bounded and go with the cycle, a reservation is never extended by asking again, and no mGPU result is written onto a
pod the watch does not show pending for the Volcano scheduler. Every answer is still 200 with the verb's JSON."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from builders import gpu_labels, node, pod, podgroup, queue
from volcano_payloads import ALLOCATED, RUNNING, job_info, node_info, task_info

from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import ASSUMED_SECONDS, STRANGERS_PER_CYCLE, Extender
from cardquota.core.scheduling.mgpu import MGPUConfig
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.operator.extender import IGNORED, build_extender_app
from cardquota.runtime.cache import ClusterCache

A100 = "NVIDIA-A100"
CONFIG = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True),
                         mgpu=MGPUConfig(enabled=True))
GPU_NODE = node("a1", labels=gpu_labels(A100, count=4), allocatable={"nvidia.com/gpu": "4"})
MGPU_NODE = node("m1", allocatable={"vke.volcengine.com/mgpu-core": "400", "vke.volcengine.com/mgpu-memory": "98304"})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def card_pod(name: str, *, node_name: str | None = None) -> dict[str, Any]:
    return pod(name, namespace="ml", card=A100, gpus=1, queue="team-a", node_name=node_name)


def mgpu_pod(name: str, *, node_name: str | None = None, scheduler: str = "volcano") -> dict[str, Any]:
    manifest = pod(name, namespace="ml", node_name=node_name, containers=[{"name": "c", "resources": {"requests": {
        "vke.volcengine.com/mgpu-core": "30", "vke.volcengine.com/mgpu-memory": "4096"}}}])
    manifest["spec"]["schedulerName"] = scheduler
    return manifest


def group(name: str, cards: int, queue_name: str = "team-a") -> dict[str, Any]:
    return podgroup(name, namespace="ml", queue=queue_name, phase="Pending", request={A100: cards})


@pytest.fixture
async def served(aiohttp_client: Any) -> Any:
    """The extender as served with its session kept by the watch (here: the cache loaded with a cluster whose
    queue team-a has a quota of 1 A100, all held by a running pod; team-b's 1 A100 is free), and the pod patches it
    asked for."""
    clock = Clock()
    extender = Extender(CONFIG, clock=clock)
    ClusterCache(sink=extender).load([
        GPU_NODE, MGPU_NODE, queue("team-a", {A100: 1}), queue("team-b", {A100: 1}), card_pod("held", node_name="a1"),
        card_pod("waiting"), group("next", 1), group("big", 1, "team-b"), group("probe", 1, "team-b"),
        mgpu_pod("mine"), mgpu_pod("theirs", scheduler="default-scheduler"), mgpu_pod("busy", node_name="m1")])
    patched: list[tuple[str, dict[str, str]]] = []

    async def patch(manifest: dict[str, Any], annotations: dict[str, str]) -> None:
        patched.append((manifest["metadata"]["name"], annotations))

    client = await aiohttp_client(build_extender_app(extender, patch, synced=lambda: True))
    client.extender, client.clock, client.patched = extender, clock, patched
    return client


async def post(client: Any, verb: str, body: object) -> Any:
    response = await client.post(f"/{verb}", data=json.dumps(body), headers={"Content-Type": "application/json"})
    assert response.status == 200
    return await response.json()


async def test_deallocating_a_running_pod_frees_nothing(served: Any) -> None:
    before = IGNORED.labels("deallocatefunc", "not-allocated-this-cycle")._value.get()
    hostile = {"task": task_info(card_pod("held", node_name="a1"), status=RUNNING)}
    assert await post(served, "deallocateFunc", hostile) == {"errorMessage": ""}
    refused = await post(served, "predicate", {"task": task_info(card_pod("waiting")), "node": node_info(GPU_NODE)})
    assert refused["code"] == 2
    assert refused["status"].startswith("InsufficientScalarQuota")
    assert await post(served, "jobEnqueueable", {"job": job_info(group("next", 1))}) == {"status": -1}
    assert IGNORED.labels("deallocatefunc", "not-allocated-this-cycle")._value.get() == before + 1


async def test_two_thousand_unknown_pods_stay_bounded_and_go_with_the_cycle(served: Any) -> None:
    session = served.extender.session
    watched = set(session.pods)
    semaphore = asyncio.Semaphore(16)  # as the scheduler calls predicate: 16 at a time

    async def predicate(index: int) -> int:
        async with semaphore:
            answer = await post(served, "predicate", {"task": task_info(card_pod(f"ghost-{index}")),
                                                      "node": node_info(GPU_NODE)})
            return int(answer["code"])

    codes = await asyncio.gather(*(predicate(index) for index in range(2_000)))
    assert set(codes) == {2}  # each judged (team-a is full), recorded or not
    assert len(session.pods) - len(watched) == STRANGERS_PER_CYCLE
    assert await post(served, "onSessionClose", {}) == {}
    assert set(session.pods) == watched


async def test_asking_again_never_renews_a_reservation(served: Any) -> None:
    big, probe = {"job": job_info(group("big", 1, "team-b"))}, {"job": job_info(group("probe", 1, "team-b"))}
    assert await post(served, "jobEnqueueable", big) == {"status": 1}
    served.clock.now += ASSUMED_SECONDS - 1
    assert await post(served, "jobEnqueueable", big) == {"status": 1}  # counted once: not its own rival
    assert await post(served, "jobEnqueueable", probe) == {"status": -1}  # team-b's card is reserved for big
    served.clock.now += 2  # past the first reservation's 30 s: the repeated call did not extend it
    assert await post(served, "onSessionOpen", {}) == {}
    assert served.extender.session.ledger.usage("team-b").inqueue == {}
    # Asked again after it lapsed: reserved for this cycle only, not another 30 s.
    assert await post(served, "jobEnqueueable", big) == {"status": 1}
    assert await post(served, "onSessionClose", {}) == {}
    assert await post(served, "jobEnqueueable", probe) == {"status": 1}


async def test_mgpu_results_go_only_onto_pending_pods_of_the_volcano_scheduler(served: Any) -> None:
    for manifest in (mgpu_pod("busy", node_name="m1"), mgpu_pod("theirs"), mgpu_pod("ghost")):
        await post(served, "allocateFunc", {"task": task_info(manifest, status=ALLOCATED, node="m1")})
    assert await post(served, "allocateFunc", {"task": task_info(mgpu_pod("mine"), status=ALLOCATED,
                                                                 node="m1")}) == {"errorMessage": ""}
    assert [name for name, _ in served.patched] == ["mine"]  # written before allocateFunc answered
