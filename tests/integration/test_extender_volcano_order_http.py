"""The served extender (watch-fed, over HTTP on 127.0.0.1) driven in the order Volcano v1.15.1's actions call it,
with Go-shaped bodies (tests/volcano_payloads.py): allocate pipelines a task of a job that is not ready
(pkg/scheduler/framework/statement.go ``Pipeline``: Status Pipelined, then the AllocateFunc handlers) and neither
commits nor discards it (pkg/scheduler/actions/allocate/allocate.go); the next session asks about the same task
again, Pending. ``queueOverused`` never makes allocate skip the queue (allocate.go ``allocateResources``)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import gpu_labels, node, pod, podgroup, queue
from volcano_payloads import job_info, node_info, queue_info, task_info

from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import PIPELINED, Extender
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.operator.extender import build_extender_app
from cardquota.runtime.cache import ClusterCache

A100 = "NVIDIA-A100"
NODE = node("a1", labels=gpu_labels(A100, count=4), allocatable={"nvidia.com/gpu": "4"})


def card_pod(name: str, *, node_name: str | None = None, group: str | None = None) -> dict[str, Any]:
    return pod(name, namespace="ml", card=A100, gpus=1, queue="team-a", node_name=node_name, group=group)


@pytest.fixture
async def served(aiohttp_client: Any) -> Any:
    """team-a may use 2 A100s; one is held by a running pod."""
    extender = Extender(SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True)))
    ClusterCache(sink=extender).load([NODE, queue("team-a", {A100: 2}), card_pod("held", node_name="a1"),
                                      card_pod("p", group="job"), card_pod("other"),
                                      podgroup("job", namespace="ml", queue="team-a", phase="Pending",
                                               request={A100: 1})])
    return await aiohttp_client(build_extender_app(extender, None, synced=lambda: True))


async def post(client: Any, verb: str, body: object) -> Any:
    response = await client.post(f"/{verb}", json=body)
    assert response.status == 200
    return await response.json()


async def test_a_pipelined_task_is_placeable_again_in_the_next_session(served: Any) -> None:
    assert await post(served, "onSessionOpen", {}) == {}
    assert await post(served, "queueOverused", {"queue": queue_info(queue("team-a", {A100: 2}))}) == {
        "overused": False}
    assert await post(served, "predicate", {"task": task_info(card_pod("p", group="job")), "node": node_info(NODE)}
                      ) == {"status": "", "code": 0}
    assert await post(served, "allocateFunc", {"task": task_info(card_pod("p", group="job"), status=PIPELINED,
                                                                 node="a1")}) == {"errorMessage": ""}
    # job not ready, pipelined: no commit, no discard, no deallocateFunc
    assert await post(served, "onSessionClose", {}) == {}
    assert await post(served, "onSessionOpen", {}) == {}
    for name in ("p", "other"):  # neither p itself nor any other task finds p's card taken
        assert await post(served, "predicate", {"task": task_info(card_pod(name, group="job" if name == "p" else None)),
                                                "node": node_info(NODE)}) == {"status": "", "code": 0}


async def test_job_enqueued_is_served(served: Any) -> None:
    group = podgroup("job", namespace="ml", queue="team-a", phase="Pending", request={A100: 1})
    assert await post(served, "jobEnqueueable", {"job": job_info(group)}) == {"status": 1}
    assert await post(served, "jobEnqueued", {"job": job_info(group)}) == {}
