"""Timing helpers shared by the benchmarks: the one harness every figure goes through.

Fair baselines: a figure divides a subject by a baseline measured in the same run, on the same input, with the same
garbage-collector treatment — both with Python's cyclic collector on (as in production) or both with it off
(:func:`collector`), and, in the servers, the same ``gc.freeze`` after start-up (:func:`frozen_heap`). Note that
``Ledger.build`` and ``ClusterCache.load`` pause the collector themselves while they run (their views hold no
cycles): "on" is as they run in production, "off" also takes the collections out of the baseline.
"""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
import time
from collections.abc import Callable, Iterator

import aiohttp
from aiohttp import web
from synthetic import PodMaker, pod

from cardquota.core.ledger import Ledger


@contextlib.contextmanager
def collector(enabled: bool) -> Iterator[None]:
    """The block runs after a full collection, with the cyclic collector on or off; as it was afterwards."""
    was_enabled = gc.isenabled()
    gc.collect()
    if enabled:
        gc.enable()
    else:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        else:
            gc.disable()


def frozen_heap() -> None:
    """What the operator does once its long-lived state is loaded (``ClusterCache.load``, the extender's session):
    collect, then move every object alive out of the collector's way (``gc.freeze``). A server benchmark applies it
    to its baseline and to its subject alike."""
    gc.collect()
    gc.freeze()


def timed(action: Callable[[], object], repeats: int, *, collect: bool = True) -> list[float]:
    """Seconds of each of ``repeats`` runs, each after a full collection, with the cyclic collector on
    (``collect``, as in production) or off during the run."""
    samples = []
    for _ in range(repeats):
        with collector(collect):
            start = time.perf_counter()
            action()
            samples.append(time.perf_counter() - start)
    return samples


def best_of(repeats: int, action: Callable[[], object], *, collect: bool = True) -> float:
    """The fastest of several runs (see :func:`timed`): the least disturbed by the rest of the machine."""
    return min(timed(action, repeats, collect=collect))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def pod_event_seconds(ledger: Ledger, nodes: int, groups: int, events: int, make_pod: PodMaker = pod) -> float:
    """Median cost of one pod update (re-binding an existing pod, or adding one), over ``events`` events, as the
    operator applies them: each manifest parsed from its JSON just before (untimed), as a watch event arrives fresh
    from the stream, collector on, the ledger frozen out of its way (:func:`frozen_heap`) beforehand. (Parsed all
    up front instead, 2,000 realistic manifests are ~14 MB and each is read cold, while the 100 of a small ledger's
    run stay in the CPU's caches: the ratio would then measure the input's temperature, not the ledger's size.)"""
    texts = [json.dumps(make_pod(index, (index * 7) % nodes, groups)) for index in range(events)]
    samples = []
    frozen_heap()
    try:
        with collector(True):
            for text in texts:
                manifest = json.loads(text)
                start = time.perf_counter()
                ledger.upsert(manifest)
                samples.append(time.perf_counter() - start)
    finally:
        gc.unfreeze()
    return statistics.median(samples)


async def timed_post(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    """Seconds one POST of a JSON body takes, its answer read (it must be HTTP 200)."""
    start = time.perf_counter()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
        await response.read()
        assert response.status == 200
    return time.perf_counter() - start


async def cpu_seconds(_: web.Request) -> web.Response:
    """A bench server's ``/cpu-seconds`` route: its process's CPU time so far (every thread), which the driver reads
    around a measured round (:func:`server_cpu_seconds`)."""
    return web.Response(text=repr(time.process_time()))


async def server_cpu_seconds(session: aiohttp.ClientSession, base_url: str) -> float:
    """The CPU a bench server's process has spent so far, every thread (its ``/cpu-seconds`` route)."""
    async with session.get(f"{base_url}/cpu-seconds") as response:
        return float(await response.text())
