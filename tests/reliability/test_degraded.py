"""Degraded modes: the operator keeps serving what it can — Volcano's CRDs not installed yet, absurd nodes, a queue
annotation edited by hand to garbage."""

from __future__ import annotations

import json
import ssl
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from builders import gpu_node, node, pod, queue
from operator_runs import operator_running
from polling import eventually

from cardquota.core.ledger import Ledger
from cardquota.core.publish import queue_annotations

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]


def review(kind: dict[str, str], obj: dict[str, Any], namespace: str = "") -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "operation": "CREATE", "namespace": namespace,
        "name": obj["metadata"]["name"], "kind": kind, "object": obj}}).encode()


async def test_without_the_volcano_crds_the_operator_still_serves(kmock: Any, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    kmock.resources.load_bundled()  # no scheduling.volcano.sh resources at all
    kmock.objects["v1/nodes", None, "a1"] = gpu_node("a1", "NVIDIA-A100", 8)
    async with operator_running(kmock, tmp_path) as ports:
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            card_pod = pod("p", namespace="ml", card="NVIDIA-A100", gpus=1)
            async with session.post(f"https://localhost:{ports[0]}/validate",
                                    data=review({"group": "", "version": "v1", "kind": "Pod"}, card_pod, "ml")
                                    ) as response:
                assert response.status == 200
                answer = (await response.json())["response"]
            assert answer["allowed"] is False  # decided (no queue has quota), not failed open
            assert "queue default does not exist" in answer["status"]["message"]
            async with session.get(f"https://localhost:{ports[0]}/readyz") as response:
                assert response.status == 200
    assert "are not served by the API server (are the Volcano CRDs installed?)" in caplog.text


def test_absurd_nodes_are_read_without_failing_the_rest() -> None:
    absurd = [
        node("huge", labels={"nvidia.com/gpu.product": "X" * 300, "nvidia.com/gpu.count": "-5",
                             "nvidia.com/gpu.memory": "1e999"}, allocatable={"nvidia.com/gpu": "99999999999999999"}),
        node("weird", labels={"nvidia.com/gpu.product": "NVIDIA-A100", "nvidia.com/gpu.replicas": "0"},
             allocatable={"nvidia.com/gpu.shared": "3.5", "nvidia.com/mig-": "1"}),
    ]
    ledger = Ledger.build([*absurd, gpu_node("a1", "NVIDIA-A100", 8), queue("q", {"NVIDIA-A100": 4}),
                           pod("p", card="NVIDIA-A100", gpus=1, queue="q", node_name="a1")])
    assert ledger.usage("q").allocated == {"NVIDIA-A100": 1}
    assert set(ledger.snapshot.nodes) == {"huge", "weird", "a1"}


def test_a_quota_edited_by_hand_to_garbage_counts_as_none_and_usage_still_publishes() -> None:
    broken = queue("q", "{this is not json")
    ledger = Ledger.build([gpu_node("a1", "NVIDIA-A100", 8), broken,
                           pod("p", card="NVIDIA-A100", gpus=1, queue="q", node_name="a1")])
    record = ledger.snapshot.queues["q"]
    assert record.quota.violations  # what the controller logs
    assert queue_annotations(ledger.usage("q"))["volcano.sh/card.usage"] == "NVIDIA-A100 1/0"


async def test_a_garbage_quota_gets_an_event_and_the_other_queues_keep_being_served(volcano_kmock: Any,
                                                                                    tmp_path: Path) -> None:
    queues = "/apis/scheduling.volcano.sh/v1beta1/queues"
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "broken"] = queue("broken", "{oops")
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "fine"] = queue("fine", {"NVIDIA-A100": 2})
    base = str(volcano_kmock.url).rstrip("/")
    async with operator_running(volcano_kmock, tmp_path, publish_window=0.05), aiohttp.ClientSession() as session:
        async def fetch(path: str) -> Any:
            async with session.get(f"{base}{path}") as response:
                return await response.json()

        async def served() -> bool:
            fine = (await fetch(f"{queues}/fine"))["metadata"].get("annotations", {})
            events = (await fetch("/api/v1/namespaces/default/events")).get("items") or []
            return fine.get("volcano.sh/card.usage") == "NVIDIA-A100 0/2" and any(
                e["reason"] == "InvalidCardQuota" and e["involvedObject"]["name"] == "broken" for e in events)

        await eventually(served, timeout=15)
        events = (await fetch("/api/v1/namespaces/default/events"))["items"]
    (event,) = [e for e in events if e["reason"] == "InvalidCardQuota"]
    assert event["involvedObject"] == {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                       "name": "broken"}
    assert event["message"].startswith("volcano.sh/card.quota cannot be read (is not valid JSON")


async def test_a_lift_to_an_api_server_that_never_answers_gives_up_within_its_deadline() -> None:
    """The gate keeper's write against an API server that takes the request and never answers: cut off by its
    timeout (here the read part of WRITE_TIMEOUT), not left hanging past the former leader's lease."""
    import asyncio
    import time

    from kubernetes import client

    from cardquota.kube import Unreachable, _client, patch_pod
    from cardquota.operator.leader import WRITE_DEADLINE_SECONDS, WRITE_TIMEOUT

    accepted: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await reader.read(65536)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    api = _client(configuration)
    started = time.monotonic()
    with pytest.raises(Unreachable):
        await asyncio.to_thread(patch_pod, api, "ml", "p", [{"op": "test", "path": "/metadata/uid", "value": "u"}],
                                WRITE_TIMEOUT)
    took = time.monotonic() - started
    server.close()
    for writer in accepted:
        writer.close()
    assert accepted, "the request reached the server"
    assert WRITE_TIMEOUT[1] <= took < WRITE_DEADLINE_SECONDS + 5.0  # (a margin for a loaded machine)
