"""The process-wide metrics registry and what every process serves with it: the webhook latency histogram (with
its :class:`Timer`), the count of watch events applied, the Prometheus text answer, and a plain-HTTP server for
metrics, health and the extender."""

from __future__ import annotations

import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

REGISTRY = CollectorRegistry()
WEBHOOK_SECONDS = Histogram("cardquota_webhook_duration_seconds", "Admission review latency in the server",
                            ["kind", "verdict"], registry=REGISTRY,
                            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0))
EVENTS_PROCESSED = Counter("cardquota_watch_events_total", "Watch events applied to the cache", ["kind"],
                           registry=REGISTRY)


def metrics_response(*registries: CollectorRegistry) -> web.Response:
    """The given registries and the process-wide one, in the Prometheus text format."""
    body = b"".join(generate_latest(registry) for registry in (*registries, REGISTRY))
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def serve_http(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Serve a plain-HTTP app (metrics and health, the extender); the caller stops it with ``runner.cleanup()``."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


_WEBHOOK_CHILDREN: dict[tuple[str, str], Histogram] = {}
"""The histogram's child per (kind, verdict), looked up once: ``labels()`` validates and locks on every call, a
third of what an observation costs."""


class Timer:
    """Measure one admission for the latency histogram."""

    __slots__ = ("start",)

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def observe(self, kind: str, verdict: str) -> None:
        elapsed = time.perf_counter() - self.start
        child = _WEBHOOK_CHILDREN.get((kind, verdict))
        if child is None:
            child = _WEBHOOK_CHILDREN[kind, verdict] = WEBHOOK_SECONDS.labels(kind=kind, verdict=verdict)
        child.observe(elapsed)
