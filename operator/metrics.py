"""The operator's metrics app on a plain-HTTP port: the seed's queue card gauges, read from the ledger at scrape
time, the publisher's counters, and the process-wide registry (cardquota.runtime.metrics: webhook latency, watch
events); with /healthz and /readyz for the kubelet."""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cardquota.core.ledger import Ledger
from cardquota.core.objects import CPU_MEMORY
from cardquota.core.publish import known_card, metric_series
from cardquota.operator.controller import Publisher
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.health import add_health_routes
from cardquota.runtime.metrics import metrics_response
from cardquota.runtime.serving import body_guard

REQUEST_BYTES = 4096
"""The largest request body the metrics port reads: its routes are GETs, with no body."""


class QueueCardCollector(Collector):
    def __init__(self, cache: ClusterCache, publisher: Publisher | None) -> None:
        self.cache = cache
        self.publisher = publisher

    def collect(self) -> Iterator[Metric]:
        labels = ["queue_name", "card_name"]
        deserved = GaugeMetricFamily("volcano_queue_card_deserved", "Deserved cards per queue (its quota)",
                                     labels=labels)
        capacity = GaugeMetricFamily("volcano_queue_card_capacity", "Card capacity per queue (its quota)",
                                     labels=labels)
        allocated = GaugeMetricFamily("volcano_queue_card_allocated", "Cards held by bound pods", labels=labels)
        requested = GaugeMetricFamily("volcano_queue_card_request",
                                      "Cards requested: allocated + inqueue + pending", labels=labels)
        inqueue = GaugeMetricFamily("cardquota_queue_card_inqueue",
                                    "Cards reserved by Inqueue PodGroups and not yet held by their pods", labels=labels)
        pending = GaugeMetricFamily("cardquota_queue_card_pending", "Cards wanted by unbound pods", labels=labels)
        ledger = self.cache.ledger
        rows: dict[str, list[tuple[str, str, float]]] = {name: [] for name in ("quota", "allocated", "inqueue",
                                                                               "pending", "requested")}
        quotas: dict[str, frozenset[str]] = {}
        for queue in ledger.queue_names():
            usage = ledger.usage(queue)
            quotas[queue] = frozenset(usage.quota)
            rows["quota"] += [(queue, card, amount) for card, amount in usage.quota.items()]
            for name, bucket in (("allocated", usage.allocated), ("inqueue", usage.inqueue),
                                 ("pending", usage.pending)):
                rows[name] += [(queue, card, amount) for card, amount in bucket.items()]
                rows["requested"] += [(queue, card, amount) for card, amount in bucket.items()]
        offered = ledger.snapshot.catalog().entries

        def known(queue: str, card: str) -> bool:
            return known_card(card, offered, quotas.get(queue, frozenset()))

        for families, name in (((deserved, capacity), "quota"), ((allocated,), "allocated"), ((inqueue,), "inqueue"),
                               ((pending,), "pending"), ((requested,), "requested")):
            for (queue, card), value in metric_series(rows[name], known).items():
                for family in families:
                    family.add_metric([queue, card], value)
        yield from (deserved, capacity, allocated, requested, inqueue, pending)
        yield from cpu_memory_families(self.cache.ledger)
        if self.publisher is not None:
            patches = CounterMetricFamily("cardquota_annotation_patches", "Annotation patches written",
                                          labels=["kind"])
            for kind in ("Queue", "Node"):
                patches.add_metric([kind], sum(n for (k, _), n in self.publisher.stats.patches.items() if k == kind))
            yield patches
            yield CounterMetricFamily("cardquota_patch_errors", "Annotation patches that failed after retries",
                                      value=self.publisher.stats.patch_errors)
            yield CounterMetricFamily("cardquota_queue_usage_refused_too_large",
                                      "Queue usage patches the API server refused as too large (over 256 KiB of "
                                      "annotations), each replaced by one that fits",
                                      value=self.publisher.stats.refused_too_large)
            yield CounterMetricFamily("cardquota_queue_usage_summarised",
                                      "Queue usage publications summarised as (N more), or removed, to fit beside "
                                      "the Queue's other annotations", value=self.publisher.stats.summarised)
            yield CounterMetricFamily("cardquota_events_emitted", "Kubernetes events emitted",
                                      value=self.publisher.stats.events)
            yield CounterMetricFamily("cardquota_events_deferred",
                                      "Kubernetes events that waited for the events budget (10 a second)",
                                      value=self.publisher.stats.events_deferred)


def cpu_memory_families(ledger: Ledger) -> list[GaugeMetricFamily]:
    """The capacity-card plugin's cpu/memory quota of each queue with a ``spec.capability`` (cores, bytes): the
    capability, and what its PodGroups have allocated and reserved (inqueue). The controller does not read the
    scheduler's arguments, so the two latter come as the plugin counts them either way, labelled
    ``card_unlimited_cpu_memory`` "false" / "true": pick the one your ``cardUnlimitedCpuMemory`` matches."""
    labels = ["queue_name", "resource"]
    capability = GaugeMetricFamily("cardquota_queue_cpu_memory_capability",
                                   "The queue's spec.capability cpu (cores) and memory (bytes): its cpu/memory quota",
                                   labels=labels)
    counted = [*labels, "card_unlimited_cpu_memory"]
    allocated = GaugeMetricFamily("cardquota_queue_cpu_memory_allocated",
                                  "cpu (cores) and memory (bytes) the queue's PodGroups' bound pods request, as "
                                  "capacity-card counts them", labels=counted)
    inqueue = GaugeMetricFamily("cardquota_queue_cpu_memory_inqueue",
                                "cpu (cores) and memory (bytes) reserved by the queue's Inqueue PodGroups "
                                "(minResources not yet held by their pods)", labels=counted)
    for queue, record in sorted(ledger.snapshot.queues.items()):
        if record.queue.capability is None:
            continue
        for resource in CPU_MEMORY:
            capability.add_metric([queue, resource], float(record.queue.capability.get(resource, 0)))
        for unlimited in (False, True):
            use = ledger.cpu_memory(queue, unlimited)
            flag = "true" if unlimited else "false"
            for resource in CPU_MEMORY:
                allocated.add_metric([queue, resource, flag], float(use.allocated.get(resource, 0)))
                inqueue.add_metric([queue, resource, flag], float(use.inqueue.get(resource, 0)))
    return [capability, allocated, inqueue]


def metrics_app(cache: ClusterCache, publisher: Publisher | None = None, *, queues: bool = True) -> web.Application:
    """/metrics, /healthz and /readyz; the queues' gauges only with ``queues`` (a process that follows pods: one
    without them would export usage it does not count)."""
    registry = CollectorRegistry()
    if queues:
        registry.register(QueueCardCollector(cache, publisher))

    async def metrics(_: web.Request) -> web.Response:
        return metrics_response(registry)

    app = web.Application(client_max_size=REQUEST_BYTES, middlewares=[body_guard(lambda _: REQUEST_BYTES)])
    app.router.add_get("/metrics", metrics)
    add_health_routes(app, lambda: cache.ready)
    return app
