"""Extender figures, each against a baseline measured in the same run.

    python bench/extender.py [--nodes 1000] [--calls 60] [--sim-pods 10000] [--sim-nodes 1000]

1. predicate + prioritize latency: the extender as served (watch-fed: its session filled by the cache from a
   1,000-node cluster with 4 bound card pods per node, as the operator's watches fill it; no onSessionOpen body),
   16 concurrent clients (the scheduler's parallelism) each sending predicate (one task, one node) and prioritize
   (one task, 20 candidate nodes, each NodeInfo carrying its pods as the scheduler sends them) calls over HTTP on
   loopback; the same bodies sent to a no-op aiohttp endpoint that parses the JSON and answers a constant. Both
   servers get the same GC treatment: collector on, their start-up heap frozen (``gc.freeze``, as the cache does
   once loaded). Reports the p99 ratio (target <= 1.5), the p50 ratio, and each server's CPU per call over the
   measured round (the latency at 16 clients is mostly queueing behind that CPU, so the CPU ratio is the steadier
   figure).
2. simulate: 10,000 pods on 1,000 nodes (two thirds of them GPU nodes of 8 cards), in seconds and pods/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from synthetic import PRODUCTS, cluster, pod
from timing import cpu_seconds, frozen_heap, percentile, server_cpu_seconds, timed_post
from volcano_payloads import node_info, task_info

from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import Extender
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.core.scheduling.simulate import simulate
from cardquota.operator.extender import build_extender_app
from cardquota.runtime.cache import ClusterCache

CONFIG = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True))
CONCURRENCY = 16


def generous_queues(count: int = 20) -> list[dict[str, Any]]:
    quota = json.dumps(dict.fromkeys(PRODUCTS, 100_000))
    return [{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
             "metadata": {"name": f"q{index}", "annotations": {"volcano.sh/card.quota": quota}}, "spec": {}}
            for index in range(count)]


def card_pod(index: int, node: int | None = None) -> dict[str, Any]:
    manifest = pod(index, node, 1)
    manifest["metadata"]["annotations"] = {"volcano.sh/card.name": "NVIDIA-A100|NVIDIA-H100",
                                           "scheduling.volcano.sh/queue-name": f"q{index % 20}"}
    return manifest


def workload(nodes: int) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The cluster the extender watches (nodes, queues, 4 bound card pods per node) and 64 verb bodies."""
    objects = cluster(nodes, 0)
    node_manifests = [o for o in objects if o["kind"] == "Node"]
    bound = {n["metadata"]["name"]: [card_pod(i * 8 + k, i) for k in range(4)] for i, n in enumerate(node_manifests)}
    watched = [*node_manifests, *generous_queues(), *(pod for pods in bound.values() for pod in pods)]
    rng = random.Random(3)
    bodies = []
    for index in range(64):
        task = task_info(card_pod(10**6 + index))
        if index % 2:
            candidates = rng.sample(node_manifests, 20)
            bodies.append(json.dumps({"task": task, "nodes": [node_info(n, bound[n["metadata"]["name"]])
                                                                for n in candidates]}).encode())
        else:
            target = rng.choice(node_manifests)
            bodies.append(json.dumps({"task": task, "node": node_info(target, bound[target["metadata"]["name"]])
                                      }).encode())
    return watched, bodies


def serve(kind: str, nodes: int, ports: Any) -> None:
    async def main() -> None:
        if kind == "ours":  # as served: the session filled by the cache from the watched cluster
            extender = Extender(CONFIG)
            watched, _ = workload(nodes)
            ClusterCache(sink=extender).load(json.loads(json.dumps(watched)))
            app = build_extender_app(extender, synced=lambda: True)
        else:
            async def answer(request: web.Request) -> web.Response:
                json.loads(await request.read())
                return web.json_response({"status": "", "code": 0})

            app = web.Application(client_max_size=64 * 2**20)
            app.router.add_post("/{verb}", answer)
        app.router.add_get("/cpu-seconds", cpu_seconds)
        frozen_heap()  # both servers alike: the subject's cache froze its heap once loaded
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ports.put(runner.addresses[0][1])
        await asyncio.Event().wait()

    asyncio.run(main())


async def drive(port: int, bodies: list[bytes], calls: int) -> tuple[list[float], float]:
    """Latencies (s) of the measured round, and the server's CPU seconds per call over it."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:
        base = f"http://127.0.0.1:{port}"

        async def client(offset: int) -> None:
            for i in range(calls):
                index = (offset + i) % len(bodies)
                verb = "prioritize" if index % 2 else "predicate"
                latencies.append(await timed_post(session, f"{base}/{verb}", bodies[index]))

        await asyncio.gather(*(client(c) for c in range(CONCURRENCY)))  # warm-up round
        latencies.clear()
        before = await server_cpu_seconds(session, base)
        await asyncio.gather(*(client(c) for c in range(CONCURRENCY)))
        spent = await server_cpu_seconds(session, base) - before
    return latencies, spent / len(latencies)


def simulate_figure(pods: int, nodes: int) -> tuple[float, int]:
    objects = cluster(nodes, 0)
    cluster_objects = [o for o in objects if o["kind"] == "Node"] + generous_queues()
    pending = [card_pod(index) for index in range(pods)]
    start = time.perf_counter()
    result = simulate(cluster_objects, pending, CONFIG)
    elapsed = time.perf_counter() - start
    return elapsed, sum(1 for outcome in result.placements.values() if outcome.node is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=60, help="calls per client (after a warm-up round)")
    parser.add_argument("--sim-pods", type=int, default=10_000)
    parser.add_argument("--sim-nodes", type=int, default=1000)
    args = parser.parse_args()
    _, bodies = workload(args.nodes)
    results: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    context = multiprocessing.get_context("spawn")
    for kind in ("noop", "ours"):
        ports = context.Queue()
        process = context.Process(target=serve, args=(kind, args.nodes, ports), daemon=True)
        process.start()
        try:
            port = ports.get(timeout=300)
            results[kind], cpu[kind] = asyncio.run(drive(port, bodies, args.calls))
        finally:
            process.terminate()
            process.join()
    size = sum(map(len, bodies)) / len(bodies) / 1e3
    print(f"1. predicate + prioritize: {args.nodes}-node session, {CONCURRENCY} concurrent clients, "
          f"{CONCURRENCY * args.calls} calls each server, bodies {size:.0f} kB on average")
    for kind, label in (("noop", "no-op aiohttp endpoint"), ("ours", "cardquota extender")):
        values = results[kind]
        p50, p99 = percentile(values, 0.5) * 1e3, percentile(values, 0.99) * 1e3
        print(f"   {label:24} p50 {p50:7.2f} ms   p99 {p99:7.2f} ms   server CPU {cpu[kind] * 1e6:5.0f} µs/call")
    ratio = percentile(results["ours"], 0.99) / percentile(results["noop"], 0.99)
    p50_ratio = percentile(results["ours"], 0.5) / percentile(results["noop"], 0.5)
    print(f"   p99 ratio {ratio:.2f} (target <= 1.5)   p50 ratio {p50_ratio:.2f}   server CPU "
          f"{cpu['ours'] / cpu['noop']:.2f}x the no-op's")
    elapsed, placed = simulate_figure(args.sim_pods, args.sim_nodes)
    print(f"2. simulate: {args.sim_pods} pods on {args.sim_nodes} nodes in {elapsed:.2f} s "
          f"({args.sim_pods / elapsed:,.0f} pods/s; {placed} placed, the rest beyond the cards there are)")


if __name__ == "__main__":
    main()
