"""Admission latencies by (kind, verdict), counted in histogram buckets: what the webhook latency histogram
(``runtime.metrics.WEBHOOK_SECONDS``) exposes.

Apart from the metrics module (which imports prometheus_client and aiohttp) so that it can be compiled with the
core (``setup.py``'s ``COMPILED_EDGES``): every admission observes one latency, and an observation made from
compiled code into a compiled class runs no Python frame (~0.1 µs, against 1 to 5 µs for the interpreted timer and
histogram it replaces, the more as the server's other work leaves the CPU's caches cold: ``bench/webhook.py``).
"""

from __future__ import annotations

import bisect

ADMISSION_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
"""The buckets' upper bounds, in seconds."""


class Latencies:
    """Observations per (kind, verdict) in buckets, without a lock: observed on one thread (the admission server's
    event loop); read from another, a scrape may see an observation in a bucket and not yet in the sum."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._series: dict[tuple[str, str], list[float]] = {}
        """Per (kind, verdict): the observations in each bucket (not cumulative; the last past every bound), then
        their sum."""

    def observe(self, kind: str, verdict: str, seconds: float) -> None:
        key = (kind, verdict)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = [0.0] * (len(self.bounds) + 2)
        series[bisect.bisect_left(self.bounds, seconds)] += 1
        series[-1] += seconds

    def series(self) -> list[tuple[tuple[str, str], list[float], float]]:
        """Each (kind, verdict) in order, with its per-bucket counts (the last past every bound) and its sum: a copy,
        taken at once."""
        return [(key, values[:-1], values[-1]) for key, values in sorted(self._series.items())]


ADMISSION_LATENCIES = Latencies(ADMISSION_BOUNDS)
"""The admission server's latencies (observed by ``webhooks.admission.Admission.answer``)."""
