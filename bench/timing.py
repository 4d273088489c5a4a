"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

from synthetic import pod

from cardquota.core.ledger import Ledger


def timed(action: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` runs, each after a collection."""
    samples = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return samples


def best_of(repeats: int, action: Callable[[], object]) -> float:
    """The fastest of several runs (after a collection): the least disturbed by the rest of the machine."""
    return min(timed(action, repeats))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def pod_event_seconds(ledger: Ledger, nodes: int, groups: int, events: int) -> float:
    """Median cost of one pod update (re-binding an existing pod, or adding one), over ``events`` events."""
    samples = []
    for index in range(events):
        manifest = pod(index, (index * 7) % nodes, groups)
        start = time.perf_counter()
        ledger.upsert(manifest)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
