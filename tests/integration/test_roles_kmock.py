"""``cardquota operator --role webhook`` and ``--role controller`` (two Deployments, docs/scale.md)
against kmock: the webhook process lists and watches no pod and writes nothing, the controller serves no admission,
and together they answer as one ``--role all`` process does — the controller counts the pods and publishes each
queue's usage, the webhook warns from what was published. Each process calls as its own account and kmock holds it to
the RBAC the chart renders for that account (operator_runs.operator_running ``rbac``)."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
from admission_reviews import review
from builders import gpu_node, pod, queue
from operator_runs import operator_running
from polling import eventually

from cardquota.core import keys
from cardquota.operator.settings import Role

A100 = "NVIDIA-A100"
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"


def requests_for(kmock: Any, path_end: str) -> list[str]:
    return [f"{request.method} {request.url.path}" for request in kmock if request.url.path.endswith(path_end)]


def writes(kmock: Any) -> list[str]:
    return [f"{request.method} {request.url.path}" for request in kmock
            if str(request.method).upper() not in {"GET", "METHOD.GET"}]


async def delete_warnings(port: int, tmp_path: Path, name: str) -> list[str]:
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    body = review(None, operation="DELETE", old=queue(name), name=name)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session, \
            session.post(f"https://localhost:{port}/validate", data=json.dumps(body)) as response:
        assert response.status == 200
        answer = (await response.json())["response"]
    assert answer["allowed"] is True
    return list(answer.get("warnings") or [])


def cluster(kmock: Any) -> None:
    """Queue team-a (quota 8 A100) with two of its pods bound to A100 cards, and nothing published yet."""
    kmock.objects["v1/nodes", None, "a100-2"] = gpu_node("a100-2", A100, 8)
    kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team-a"] = queue("team-a", {A100: 8})
    for index in range(2):
        kmock.objects["v1/pods", "ml", f"w-{index}"] = pod(f"w-{index}", namespace="ml", card=A100, gpus=1,
                                                           queue="team-a", node_name="a100-1")


async def test_a_webhook_process_follows_no_pod_writes_nothing_and_warns_from_the_published_usage(
        volcano_kmock: Any, tmp_path: Path) -> None:
    cluster(volcano_kmock)
    published = queue("team-a", {A100: 8})
    published["metadata"]["annotations"][keys.CARD_ALLOCATED] = json.dumps({A100: 3})
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team-a"] = published
    async with operator_running(volcano_kmock, tmp_path, role=Role.WEBHOOK, rbac=True) as ports:
        # the published 3, not the 2 bound pods the process never saw
        assert await delete_warnings(ports[0], tmp_path, "team-a") == [
            "queue team-a still has card work (allocated NVIDIA-A100 3); deleting it leaves that work without a queue"]
    assert requests_for(volcano_kmock, "/pods") == []
    assert writes(volcano_kmock) == []


async def test_a_controller_process_serves_no_admission_and_a_webhook_process_warns_from_what_it_published(
        volcano_kmock: Any, tmp_path: Path) -> None:
    cluster(volcano_kmock)
    async with operator_running(volcano_kmock, tmp_path / "controller", role=Role.CONTROLLER,
                                publish_window=0.1, rbac=True) as controller_ports:
        assert controller_ports == []

        def published() -> bool:
            annotations = volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team-a"]
            return (annotations.get("metadata", {}).get("annotations", {}).get(keys.CARD_ALLOCATED)
                    == json.dumps({A100: 2}, separators=(",", ":")))

        await eventually(published)
        assert requests_for(volcano_kmock, "/pods") != []  # (the helpers see what the webhook test says is absent)
        assert any("PATCH" in write.upper() for write in writes(volcano_kmock))
        async with operator_running(volcano_kmock, tmp_path / "webhook", role=Role.WEBHOOK,
                                    rbac=True) as webhook_ports:
            assert await delete_warnings(webhook_ports[0], tmp_path / "webhook", "team-a") == [
                "queue team-a still has card work (allocated NVIDIA-A100 2); deleting it leaves that work without "
                "a queue"]
