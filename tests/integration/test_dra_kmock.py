"""DRA claims read through the ``resource.k8s.io`` version the API server serves (the served extender, watching
kmock): a Kubernetes 1.34 API server serves ``resource.k8s.io/v1`` by default and v1beta1/v1beta2 only when enabled,
so claims read through a fixed v1beta1 were never seen and no DRA quota was enforced.

Shapes as Kubernetes defines them (kubernetes/kubernetes, tag v1.34.0): ``staging/src/k8s.io/api/resource/v1/types.go``
and ``.../v1beta2/types.go``, ``DeviceRequest.Exactly`` (an ``ExactDeviceRequest`` holding ``deviceClassName`` and
``count``); ``.../v1beta1/types.go``, ``DeviceRequest.DeviceClassName`` and ``Count`` directly on the request."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from builders import gpu_node, pod, podgroup, queue
from operator_runs import serve_dra
from polling import eventually
from volcano_payloads import node_info, task_info

from cardquota.core.scheduling.dra import INSUFFICIENT_DRA
from cardquota.core.scheduling.extender import Extender
from cardquota.kube import Connection, api_client
from cardquota.operator.extender import run_extender
from cardquota.operator.reflector import DRA_UNREADABLE

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

DEVICE_CLASS = "gpu.example.com"


def v1_claim(name: str, count: int) -> dict[str, Any]:
    """A ResourceClaim as resource.k8s.io/v1 writes it (the request under ``exactly``)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS,
                                                                         "count": count}}]}}}


def claiming_pod(name: str, claim: str, *, node_name: str | None = None) -> dict[str, Any]:
    manifest = pod(name, namespace="ml", queue="team-a", node_name=node_name, group=name,
                   phase="Running" if node_name else "Pending")
    manifest["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    return manifest


async def test_claims_served_only_as_v1_count_against_the_queues_dra_quota(volcano_kmock: Any,
                                                                          extender_connection: Connection) -> None:
    serve_dra(volcano_kmock, "v1")
    team = queue("team-a")
    team["spec"]["capability"] = {"cpu": "64", "memory": "256Gi"}
    team["spec"]["dra"] = {"capability": {DEVICE_CLASS: {"count": 2}}}
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team-a"] = team
    volcano_kmock.objects["resource.k8s.io/v1/resourceclaims", "ml", "held"] = v1_claim("held", 2)
    volcano_kmock.objects["resource.k8s.io/v1/resourceclaims", "ml", "wanted"] = v1_claim("wanted", 1)
    volcano_kmock.objects["v1/pods", "ml", "running"] = claiming_pod("running", "held", node_name="a100-1")
    volcano_kmock.objects["v1/pods", "ml", "new"] = claiming_pod("new", "wanted")
    for name, phase in (("running", "Running"), ("new", "Inqueue")):  # each pod in its job, as Volcano makes them
        volcano_kmock.objects["scheduling.volcano.sh/v1beta1/podgroups", "ml", name] = podgroup(
            name, namespace="ml", queue="team-a", phase=phase)
    stop, ports = asyncio.Event(), []
    api = api_client(extender_connection)
    served = asyncio.create_task(run_extender(Extender(), "127.0.0.1", 0, None, stop, api=api,
                                              on_listening=ports.append))
    try:
        await eventually(lambda: bool(ports))
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{ports[0]}") as session:
            async def refusal() -> str:
                async with session.post("/predicate", json={
                        "task": task_info(claiming_pod("new", "wanted")),
                        "node": node_info(gpu_node("a100-1", "NVIDIA-A100", 8))}) as response:
                    answer = await response.json()
                    return str(answer.get("reason") or answer.get("status") or "") if answer.get("code") else ""

            # The 2 devices held plus the 1 wanted exceed the queue's count of 2: refused once the v1 claims are in.
            await eventually(lambda: _contains(refusal, INSUFFICIENT_DRA), timeout=20)
        assert DRA_UNREADABLE.labels("ResourceClaim")._value.get() == 0
    finally:
        stop.set()
        await asyncio.wait_for(served, 30)


async def _contains(check: Any, text: str) -> bool:
    return text in await check()


async def test_no_served_dra_version_is_reported_not_silent(extender_connection: Connection,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    stop, ports = asyncio.Event(), []
    api = api_client(extender_connection)
    served = asyncio.create_task(run_extender(Extender(), "127.0.0.1", 0, None, stop, api=api,
                                              on_listening=ports.append))
    try:
        await eventually(lambda: DRA_UNREADABLE.labels("ResourceClaim")._value.get() == 1, timeout=20)
        await eventually(lambda: "DRA quotas (spec.dra of queues) are not enforced" in caplog.text)
    finally:
        stop.set()
        await asyncio.wait_for(served, 30)
