"""The card-quota gate keeper's CPU for letting pods through, a ratio against sending the same number of bare PATCH
requests from the same client, measured in the same run.

    python bench/gate_writes.py [--pods 100000] [--nodes 5000] [--gangs 125] [--runs 5]

The controller's side runs here: its cache holds a synthetic cluster of ``--nodes`` nodes and ``--pods`` other pods
(bench/synthetic.py) and ``--gangs`` gangs of 8 gated one-card pods with room for all of them (bench/gate.py). One
round of the real :class:`~cardquota.operator.gatekeeper.Gatekeeper` decides and writes every lift (a JSON patch
guarded by the pod's uid and gates, 16 at a time on threads, through the kubernetes client). The baseline sends one
bare JSON patch per pod (a single ``test`` of its uid) through the same client, 16 threads of its own (as the
keeper has) and the same event loop. Both are answered by a stand-in API server in a process of its own (its CPU is
not counted): 200 with the pod as the API server returns it after a patch (~2 KB). What is compared is this
process's CPU (every thread: ``time.process_time``) from the start of the round to the last answer; the target is at
most 2x — the decision and the bookkeeping around each write cost less than the write itself.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synthetic
from gate import QUEUES, gated_gangs

from cardquota.kube import Connection, api_client, patch_pod
from cardquota.operator.gatekeeper import WRITERS, Gatekeeper
from cardquota.operator.leader import WRITE_TIMEOUT
from cardquota.runtime.cache import ClusterCache

SERVER = """
import json, sys
from aiohttp import web
body = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "uid": "u",
    "resourceVersion": "1", "labels": {"app": "x" * 40}, "annotations": {"volcano.sh/card.name": "NVIDIA-A100"}},
    "spec": {"containers": [{"name": "main", "image": "registry.example/train:1.0", "args": ["--x"] * 40,
    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}, "status": {"phase": "Pending"}}).encode()
async def answer(request):
    await request.read()
    return web.Response(body=body, content_type="application/json")
app = web.Application()
app.router.add_route("*", "/{tail:.*}", answer)
async def main():
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print("ready", site._server.sockets[0].getsockname()[1], flush=True)
    import asyncio
    await asyncio.Event().wait()
import asyncio
asyncio.run(main())
"""


async def gate_round_cpu(cache: ClusterCache, api: Any) -> tuple[float, int]:
    keeper = Gatekeeper(cache, api, takeover_wait=0)
    started = time.process_time()
    decided = await keeper.round()
    spent = time.process_time() - started
    assert decided is not None
    assert keeper.stats.lifted == len(decided.lifts), keeper.stats
    return spent, keeper.stats.lifted


async def bare_patches_cpu(api: Any, names: list[tuple[str, str]]) -> float:
    """The same client, the same 16 threads of their own (as the keeper's), one bare JSON patch per pod."""
    semaphore = asyncio.Semaphore(WRITERS)
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(WRITERS) as threads:

        async def write(namespace: str, name: str) -> None:
            async with semaphore:
                await loop.run_in_executor(threads, functools.partial(
                    patch_pod, api, namespace, name, [{"op": "test", "path": "/metadata/uid", "value": "u"}],
                    WRITE_TIMEOUT))

        started = time.process_time()
        await asyncio.gather(*(write(namespace, name) for namespace, name in names))
        return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--gangs", type=int, default=125)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        api = api_client(Connection(host=f"http://127.0.0.1:{port}", insecure=True))
        gated = gated_gangs(args.gangs)
        cache = ClusterCache()
        cache.load([*synthetic.cluster(args.nodes, args.pods, QUEUES), *gated])
        names = [(pod["metadata"]["namespace"], pod["metadata"]["name"]) for pod in gated if pod["kind"] == "Pod"]
        gate_cpu, bare_cpu = [], []

        async def runs() -> None:
            await bare_patches_cpu(api, names[:50])  # (warm: connections, threads)
            for _ in range(args.runs):  # alternated, so drift in the machine touches both alike
                spent, lifted = await gate_round_cpu(cache, api)
                assert lifted == len(names), (lifted, len(names))
                gate_cpu.append(spent)
                bare_cpu.append(await bare_patches_cpu(api, names))

        asyncio.run(runs())
    finally:
        server.terminate()
        server.wait()
    ratios = [gate / bare for gate, bare in zip(gate_cpu, bare_cpu, strict=True)]
    print(json.dumps({"pods_let_through": len(names), "cluster_pods": args.pods, "nodes": args.nodes}))
    print(f"gate round (decide + {len(names)} lifts): CPU {min(gate_cpu):.3f}-{max(gate_cpu):.3f} s "
          f"(median {statistics.median(gate_cpu):.3f})")
    print(f"bare PATCHes ({len(names)}):             CPU {min(bare_cpu):.3f}-{max(bare_cpu):.3f} s "
          f"(median {statistics.median(bare_cpu):.3f})")
    print(f"ratio per run {min(ratios):.2f}-{max(ratios):.2f} (median {statistics.median(ratios):.2f}; target <= 2)")


if __name__ == "__main__":
    main()
