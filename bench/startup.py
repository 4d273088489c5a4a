"""Operator start-up for pods against kmock: the pod reflector (paginated list through kube.py, each page into the
cache) against the baseline of one unpaginated list then ``ClusterCache.load`` — the same pods, the same process,
the same GC settings (on), kmock's serving included in both (it runs on the same loop: the ratio is what counts).

    python bench/startup.py [--pods 10000] [--repeats 3] [--pod-bytes 5000]

Pods are padded to ``--pod-bytes`` of JSON (real pods carry env, volumes and managedFields: 4 to 8 KB). Printed per
size: seconds to a synced cache by each path, their ratio, and the peak of Python memory (tracemalloc) while
loading. kmock answers a list in one page whatever its ``limit``, so against it the reflector's memory is the
baseline's; against an API server it holds one page of 500 at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kmock import KubernetesEmulator, Server
from synthetic import pod

from cardquota.kube import Connection, api_client, list_objects
from cardquota.operator.reflector import pod_reflector
from cardquota.runtime.cache import ClusterCache


def padded_pod(index: int, nodes: int, pod_bytes: int) -> dict[str, Any]:
    manifest = pod(index, index % nodes if index % 5 else None, max(1, index // 8))
    manifest["metadata"]["namespace"] = "ml"
    manifest["spec"]["containers"][0]["env"] = [{"name": f"VARIABLE_{n}", "value": "x" * 40}
                                                for n in range(max(0, (pod_bytes - 600) // 70))]
    return manifest


async def reflector_start(api: Any) -> float:
    cache = ClusterCache()
    reflector = pod_reflector(cache, api)
    started = time.perf_counter()
    task = asyncio.create_task(reflector.run())
    await reflector.synced.wait()
    elapsed = time.perf_counter() - started
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return elapsed


async def list_then_load(api: Any) -> float:
    cache = ClusterCache()
    started = time.perf_counter()
    items = await asyncio.to_thread(list_objects, api, "/api/v1/pods", "v1", "Pod")
    cache.load(items)
    return time.perf_counter() - started


async def peak_mib(action: Any) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        await action
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


async def measure(pods: int, repeats: int, pod_bytes: int) -> None:
    async with KubernetesEmulator() as emulator, Server(emulator):
        emulator.resources.load_bundled()
        nodes = max(1, pods // 20)
        for index in range(pods):
            manifest = padded_pod(index, nodes, pod_bytes)
            emulator.objects["v1/pods", "ml", manifest["metadata"]["name"]] = manifest
        api = api_client(Connection(host=str(emulator.url).rstrip("/"), insecure=True))
        reflected, baseline = [], []
        for _ in range(repeats):
            gc.collect()
            baseline.append(await list_then_load(api))
            gc.collect()
            reflected.append(await reflector_start(api))
        ratios = [r / b for r, b in zip(reflected, baseline, strict=True)]
        print(f"{pods:>7} pods of ~{pod_bytes} B  reflector {statistics.median(reflected):6.2f} s  list+load "
              f"{statistics.median(baseline):6.2f} s  ratio {min(ratios):.2f} to {max(ratios):.2f}x", flush=True)
        if pods <= 20_000:
            print(f"{'':>7} peak Python memory while loading: reflector {await peak_mib(reflector_start(api)):.0f} MiB,"
                  f" list+load {await peak_mib(list_then_load(api)):.0f} MiB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, action="append")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pod-bytes", type=int, default=5000)
    options = parser.parse_args()
    for pods in options.pods or [2_000, 10_000]:
        asyncio.run(measure(pods, options.repeats, options.pod_bytes))


if __name__ == "__main__":
    main()
