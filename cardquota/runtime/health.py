"""``/healthz`` and ``/readyz`` (ready once the cluster snapshot has loaded), for every server the operator runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web


def add_health_routes(app: web.Application, is_ready: Callable[[], bool],
                      degraded: Callable[[], list[str]] | None = None) -> None:
    """``degraded``: what the server cannot do although ready (listed in ``/readyz``'s body, which stays 200)."""
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        ready = is_ready()
        body: dict[str, Any] = {"ready": ready}
        if degraded is not None:
            body["degraded"] = degraded()
        return web.json_response(body, status=200 if ready else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
