"""Faults against kmock: the API server answers patches and event posts with 409/500/503 for a while, an object is
deleted between its event and the patch. The annotations still converge to the ledger of the final objects, with
bounded retries, and nothing fails for good."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from builders import pod, podgroup, queue
from operator_runs import operator_running
from polling import eventually

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]
A100 = "NVIDIA-A100"
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"


async def call(kmock: Any, method: str, path: str, body: object = None) -> Any:
    async with aiohttp.ClientSession() as session, \
            session.request(method, f"{str(kmock.url).rstrip('/')}{path}", json=body) as response:
        assert response.status < 300, await response.text()
        return await response.json()


async def test_annotations_converge_through_conflicts_and_server_errors(volcano_kmock: Any, tmp_path: Path) -> None:
    volcano_kmock["patch"][:3] << 409  # the first three patches conflict,
    volcano_kmock["patch"][3:5] << 500  # the next two fail on the server,
    volcano_kmock["post", "/api/v1/namespaces/ml/events"][:2] << 503  # and the first event posts are refused
    async with operator_running(volcano_kmock, tmp_path, publish_window=0.05):
        await call(volcano_kmock, "POST", QUEUES, queue("team-a", {A100: 1}))
        await call(volcano_kmock, "POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups",
                   podgroup("pg", namespace="ml", queue="team-a", phase="Running"))
        for name, node_name in (("w0", "a100-1"), ("w1", None)):
            await call(volcano_kmock, "POST", "/api/v1/namespaces/ml/pods",
                       pod(name, namespace="ml", card=A100, gpus=1, group="pg", node_name=node_name))
        expected = {"volcano.sh/card.allocated": '{"NVIDIA-A100":1}', "volcano.sh/card.pending": '{"NVIDIA-A100":1}',
                    "volcano.sh/card.usage": "NVIDIA-A100 1/1"}

        async def converged() -> bool:
            annotations = (await call(volcano_kmock, "GET", f"{QUEUES}/team-a"))["metadata"].get("annotations", {})
            return all(annotations.get(key) == value for key, value in expected.items())

        async def event_posted() -> bool:
            events = await call(volcano_kmock, "GET", "/api/v1/namespaces/ml/events")
            return any(e.get("reason") == "InsufficientScalarQuota" for e in events.get("items") or [])

        await eventually(converged, timeout=15)
        await eventually(event_posted, timeout=15)
    patches = [request for request in volcano_kmock if str(request.method.value).upper() == "PATCH"]
    assert len(patches) > 5  # the faulty answers were served, and retried
    events = await call(volcano_kmock, "GET", "/api/v1/namespaces/ml/events")
    reasons = [(e["involvedObject"]["name"], e["reason"]) for e in events["items"]]
    assert len(reasons) == len(set(reasons))  # no duplicate events


async def test_an_object_deleted_before_its_patch_is_not_an_error(volcano_kmock: Any, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    volcano_kmock["patch", f"{QUEUES}/gone"] << 404  # deleted between the watch event and the write
    async with operator_running(volcano_kmock, tmp_path, publish_window=0.05):
        await call(volcano_kmock, "POST", QUEUES, queue("gone", {A100: 2}))
        await call(volcano_kmock, "POST", QUEUES, queue("stays", {A100: 2}))

        async def stays_annotated() -> bool:
            annotations = (await call(volcano_kmock, "GET", f"{QUEUES}/stays"))["metadata"].get("annotations", {})
            return annotations.get("volcano.sh/card.usage") == "NVIDIA-A100 0/2"

        await eventually(stays_annotated, timeout=15)
    assert "Traceback" not in caplog.text


async def test_the_first_full_list_is_retried_when_the_api_server_errs(volcano_kmock: Any, tmp_path: Path) -> None:
    volcano_kmock["get", "/api/v1/pods"][:2] << 500
    volcano_kmock["get", "/api/v1/nodes"][:1] << 429
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team-a"] = queue("team-a", {A100: 2})
    async with operator_running(volcano_kmock, tmp_path, publish_window=0.05):

        async def annotated() -> bool:
            annotations = (await call(volcano_kmock, "GET", f"{QUEUES}/team-a"))["metadata"].get("annotations", {})
            return annotations.get("volcano.sh/card.usage") == "NVIDIA-A100 0/2"

        await eventually(annotated, timeout=15)
