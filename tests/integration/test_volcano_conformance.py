"""Conformance with a stock Volcano scheduler (v1.15.1): the served extender, its session kept by watches of kmock as
in production, driven by a replay of Volcano's actions (tests/volcano_replay.py, which cites the upstream source of
every behaviour it models), with the configuration we ship. One scenario per way quotas could leak or block."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from builders import gpu_labels, gpu_node, node, pod, podgroup, queue
from polling import eventually
from volcano_replay import EXTENDER, Placement, VolcanoReplay, Voter

from cardquota.core.scheduling.extender import Extender
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.kube import Connection, api_client
from cardquota.operator.extender import api_pod_patcher, run_extender

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONF = ROOT / "manifests/components/extender/volcano-scheduler.conf"
A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
NS = "ml"


def shipped_extender_arguments() -> dict[str, Any]:
    """The ``extender`` plugin's arguments in the scheduler configuration we ship for users to apply (the fragment
    under manifests/components/extender, else the example ConfigMap under crds/examples)."""
    candidates = [*sorted((ROOT / "manifests/components/extender").glob("*.yaml")),
                  *sorted((ROOT / "crds/examples").glob("volcano-scheduler*.yaml"))]
    for path in candidates:
        for document in yaml.safe_load_all(path.read_text()):
            found = _extender_arguments(document)
            if found is not None:
                return found
    raise AssertionError("no extender plugin stanza in the shipped scheduler configuration")


def _extender_arguments(document: Any) -> dict[str, Any] | None:
    if isinstance(document, dict):
        if document.get("name") == "extender" and isinstance(document.get("arguments"), dict):
            return dict(document["arguments"])
        values: list[Any] = list(document.values())
    elif isinstance(document, list):
        values = document
    elif isinstance(document, str) and "\n" in document and "extender." in document:
        try:
            return _extender_arguments(yaml.safe_load(document))
        except yaml.YAMLError:
            return None
    else:
        return None
    for value in values:
        found = _extender_arguments(value)
        if found is not None:
            return found
    return None


class Clock:
    """The extender's monotonic clock, moved by the scenario (a session of Volcano's is about a second)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Cluster:
    replay: VolcanoReplay
    extender: Extender
    clock: Clock
    kmock: Any

    async def add(self, *manifests: dict[str, Any]) -> None:
        for manifest in manifests:
            await self.replay.create(manifest)

    async def phase(self, group: str) -> str:
        found = await self.replay.api("GET", f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NS}/podgroups/{group}")
        return str((found.get("status") or {}).get("phase", "Pending"))

    async def pod(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = await self.replay.api("GET", f"/api/v1/namespaces/{NS}/pods/{name}")
        return found


@asynccontextmanager
async def start(kmock: Any, *, managed: list[str] | None = None, tiers: Any = ((EXTENDER,),),
                patch_pods: bool = False) -> AsyncIterator[Cluster]:
    base = str(kmock.url).rstrip("/")
    clock = Clock()
    extender = Extender(SchedulerConfig.from_conf(SHIPPED_CONF.read_text()), clock=clock)
    api = api_client(Connection(host=base, insecure=True))
    stop = asyncio.Event()
    ports: list[int] = []
    task = asyncio.create_task(run_extender(extender, "127.0.0.1", 0, api_pod_patcher(api) if patch_pods else None,
                                            stop, api=api, on_listening=ports.append))
    try:
        await eventually(lambda: bool(ports))
        url = f"http://127.0.0.1:{ports[0]}"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            async def ready() -> bool:
                async with http.get(f"{url}/readyz") as response:
                    return response.status == 200

            await eventually(ready)
            managed_resources = (shipped_extender_arguments().get("extender.managedResources") or []
                                 if managed is None else managed)
            replay = VolcanoReplay(base, url, extender, http, managed_resources=managed_resources, tiers=tiers)
            yield Cluster(replay, extender, clock, kmock)
    finally:
        stop.set()
        # The watches' reflectors and kmock's handlers of their (long, kept-alive) requests would keep Kopf's shutdown
        # waiting 5 s for "hung" tasks: they are ended here, as run_extender ends them once Kopf has stopped.
        for running in asyncio.all_tasks():
            name = getattr(running.get_coro(), "__qualname__", "")
            if name in ("Reflector.run", "RequestHandler._handle_request", "RequestHandler.start"):
                running.cancel()
        await asyncio.wait_for(task, 30)


@pytest.fixture
def cluster_kmock(kmock: Any) -> Any:
    """kmock serving core kinds and Volcano's queues and podgroups, empty."""
    kmock.resources.load_bundled()
    for plural, kind in (("queues", "Queue"), ("podgroups", "PodGroup")):
        kmock.resources[f"scheduling.volcano.sh/v1beta1/{plural}"] = {
            "namespaced": plural == "podgroups", "kind": kind, "singular": kind.lower(),
            "verbs": ["list", "watch", "get", "patch", "create", "delete"], "subresources": ["status"]}
    return kmock


def job(name: str, *, queue_name: str = "team-a", pods: int = 1, card: str | None = A100, gpus: int = 1,
        resource: str = "nvidia.com/gpu", request: dict[str, int] | str | None = None, min_member: int | None = None,
        min_resources: dict[str, str] | None = None, cpu: str = "1",
        phase: str = "Pending") -> list[dict[str, Any]]:
    """A PodGroup (``minResources`` set, as Volcano's job controller writes it) and its pods."""
    group = podgroup(name, namespace=NS, queue=queue_name, phase=phase, request=request)
    group["spec"]["minMember"] = min_member if min_member is not None else pods
    group["spec"]["minResources"] = min_resources if min_resources is not None else (
        {"cpu": str(int(cpu) * pods), resource: str(gpus * pods)} if gpus else {"cpu": str(int(cpu) * pods)})
    members = []
    for index in range(pods):
        containers = [{"name": "main", "image": "example/app:1", "resources": {
            "requests": {"cpu": cpu}, **({"limits": {resource: str(gpus)}} if gpus else {})}}]
        members.append(pod(f"{name}-{index}", namespace=NS, card=card, group=name, queue=queue_name,
                           containers=containers))
    return [group, *members]


def on(placements: list[Placement], prefix: str) -> int:
    return sum(p.node.startswith(prefix) for p in placements)


# ------------------------------------------------------------------------------------------------ the baseline


async def test_seed_an_a_or_b_job_fills_a_then_b(cluster_kmock: Any) -> None:
    """The seed's scenario: an ``A|B`` job of 8 pods, quota A=5, B=3 → 5 on A, 3 on B, committed and bound."""
    async with start(cluster_kmock) as cluster:
        await seed(cluster)


async def seed(cluster: Cluster) -> None:
    await cluster.add(gpu_node("a100-1", A100, 8), gpu_node("h100-1", H100, 8),
                      queue("team-a", {A100: 5, H100: 3}),
                      *job("train", pods=8, card=f"{A100}|{H100}", request={f"{A100}|{H100}": 8}))
    placements = await cluster.replay.cycle()
    assert sorted(p.how for p in placements) == ["allocated"] * 8
    assert (on(placements, "a100"), on(placements, "h100")) == (5, 3)
    assert await cluster.phase("train") == "Running"
    # The next session sees the binds through the watch: nothing left to place, nothing more admitted.
    await cluster.add(*job("more", pods=1, card=A100, request={A100: 1}))
    assert await cluster.replay.cycle() == []
    assert await cluster.phase("more") == "Pending"
