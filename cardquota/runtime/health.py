"""``/healthz`` and ``/readyz`` (ready once the cluster snapshot has loaded), for every server the operator runs."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web


def add_health_routes(app: web.Application, is_ready: Callable[[], bool]) -> None:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        ready = is_ready()
        return web.json_response({"ready": ready}, status=200 if ready else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
