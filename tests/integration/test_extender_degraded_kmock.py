"""The served extender reports DRA claims it cannot read — no resource.k8s.io version served (a 1.34 API server
serves v1 only; an older one may serve none) — as degraded: a reason in ``/readyz``'s body (still 200: card
quotas are enforced) and one Warning event, beside the ``cardquota_dra_claims_unreadable`` gauge."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from polling import eventually

from cardquota.core.scheduling.extender import Extender
from cardquota.kube import Connection, api_client
from cardquota.operator import extender as served_extender
from cardquota.operator.extender import DEGRADED_EVENT_REASON, run_extender

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]


async def test_unreadable_dra_claims_are_a_readiness_reason_and_one_event(
        volcano_kmock: Any, extender_connection: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(served_extender, "DEGRADED_CHECK_SECONDS", 0.05)  # looked at often: the event stays one
    stop, ports = asyncio.Event(), []
    api = api_client(extender_connection)
    served = asyncio.create_task(run_extender(Extender(), "127.0.0.1", 0, None, stop, api=api,
                                              on_listening=ports.append))

    def events() -> list[Any]:
        return [request for request in volcano_kmock
                if request.method == "POST" and request.resource is not None and request.resource.plural == "events"]

    try:
        await eventually(lambda: bool(ports))
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{ports[0]}") as client:
            async def degraded() -> list[str]:
                async with client.get("/readyz") as response:
                    body = await response.json()
                    return list(body.get("degraded") or []) if response.status == 200 else []

            async def reported() -> bool:
                return bool(await degraded()) and bool(events())

            await eventually(reported, timeout=20)
            assert await degraded() == [served_extender.DRA_UNREADABLE_REASON]
            assert served_extender.DRA_UNREADABLE_REASON.startswith(
                "DRA claims cannot be read: resource.k8s.io not served")
            for _ in range(5):  # several more looks: still one event
                await asyncio.sleep(served_extender.DEGRADED_CHECK_SECONDS)
    finally:
        stop.set()
        await asyncio.wait_for(served, 30)
    (event,) = [request.data for request in events()]
    assert event["reason"] == DEGRADED_EVENT_REASON
    assert event["type"] == "Warning"
    assert event["involvedObject"] == {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                                       "name": "queues.scheduling.volcano.sh"}
    assert "resource.k8s.io not served" in event["message"]
