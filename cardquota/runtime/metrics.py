"""The process-wide metrics registry and what every process serves with it: the webhook latency histogram, the
count of watch events applied, the serving certificate's failed reloads, the Prometheus text answer, and a
plain-HTTP server for metrics, health and the extender."""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from cardquota.runtime.latency import ADMISSION_LATENCIES, Latencies
from cardquota.runtime.serving import SITES, STATS, ServerLimits, start_server

REGISTRY = CollectorRegistry()


class LatencyHistogram(Collector):
    """A Prometheus histogram by (kind, verdict) over :class:`~cardquota.runtime.latency.Latencies`, observed on
    the admission server's event loop, the one thread that observes: an observation is a bisect and two additions
    (~0.1 µs compiled), where prometheus_client's Histogram locks and walks its buckets (~2 µs, in the admission
    answer's path: ``bench/webhook.py``). Exposed the same way (``_bucket`` with ``le``, ``_count``, ``_sum``); read
    from another thread, a scrape may see an observation in the count and not yet in the sum."""

    def __init__(self, name: str, documentation: str, latencies: Latencies) -> None:
        self.name = name
        self.documentation = documentation
        self.latencies = latencies

    @property
    def bounds(self) -> tuple[float, ...]:
        return self.latencies.bounds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=["kind", "verdict"])
        for (kind, verdict), counts, total in self.latencies.series():
            cumulative, buckets = 0.0, []
            for bound, count in zip((*map(floatToGoString, self.bounds), "+Inf"), counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric([kind, verdict], buckets, total)
        yield family


WEBHOOK_SECONDS = LatencyHistogram("cardquota_webhook_duration_seconds", "Admission review latency in the server",
                                   ADMISSION_LATENCIES)
REGISTRY.register(WEBHOOK_SECONDS)


class ServingCollector(Collector):
    """What each port refused and closed, by reason, and who holds its connections
    (:mod:`cardquota.runtime.serving`): the figures that tell an attack (one source holding most connections, bodies
    refused as too slow) from load (many sources, waits for room)."""

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        refused = CounterMetricFamily("cardquota_http_refused", "Requests and connections refused by a port, by why",
                                      labels=["port", "reason"])
        evicted = CounterMetricFamily("cardquota_http_evicted", "Connections closed to make room for a new one, by "
                                      "how far they had got", labels=["port", "state"])
        for (what, port, reason), count in sorted(STATS.items()):
            (refused if what == "refused" else evicted).add_metric([port, reason], count)
        connections = GaugeMetricFamily("cardquota_http_connections", "Connections open on a port",
                                        labels=["port"])
        largest = GaugeMetricFamily("cardquota_http_largest_source_connections", "Connections held by the source "
                                    "address holding the most, on a port", labels=["port"])
        sources = GaugeMetricFamily("cardquota_http_sources", "Source addresses with a connection open on a port",
                                    labels=["port"])
        for site in list(SITES):
            connections.add_metric([site.port_label], site.open_connections())
            largest.add_metric([site.port_label], max(site.per_peer.values(), default=0))
            sources.add_metric([site.port_label], len(site.per_peer))
        yield from (refused, evicted, connections, largest, sources)


REGISTRY.register(ServingCollector())
EVENTS_PROCESSED = Counter("cardquota_watch_events_total", "Watch events applied to the cache", ["kind"],
                           registry=REGISTRY)
CERTIFICATE_RELOAD_FAILURES = Counter(
    "cardquota_certificate_reload_failures_total",
    "Checks of the serving certificate that kept the one served: reason unreadable (mounted files not read), "
    "rejected (a pair that cannot be served), secret (the TLS Secret not checked), error (a check failed "
    "unexpectedly), restarted (the loop itself stopped and was started again); and ca: a CA in the TLS Secret that "
    "could not sign (unreadable in part or whole, its key another certificate's, expired), replaced",
    ["reason"], registry=REGISTRY)


PREEMPTIONS = Counter("cardquota_preemptions_total",
                      "Admitted units (a PodGroup, or a pod without one) evicted at the card-quota gate to make room "
                      "for a waiting unit of higher priority in their queue", ["queue"], registry=REGISTRY)
PREEMPTION_EVICTIONS = Counter(
    "cardquota_preemption_evictions_total",
    "Evictions of preemption victims, per victim unit, by outcome: evicted; refused (a PodDisruptionBudget: another "
    "set is chosen or the preemptor waits); gone (already deleted); conflict (a pod recreated under the name); "
    "unanswered (no answer: planned again from the watch); failed (another API error); not leading",
    ["queue", "outcome"], registry=REGISTRY)


def metrics_response(*registries: CollectorRegistry) -> web.Response:
    """The given registries and the process-wide one, in the Prometheus text format."""
    body = b"".join(generate_latest(registry) for registry in (*registries, REGISTRY))
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def serve_http(app: web.Application, host: str, port: int,
                     limits: ServerLimits | None = None) -> web.AppRunner:
    """Serve a plain-HTTP app (metrics and health, the extender) within ``limits``; the caller stops it with
    ``runner.cleanup()``."""
    return await start_server(app, host, port, limits or ServerLimits())
