"""Ledger figures, each a ratio against a baseline measured in the same run.

    python bench/ledger.py [--pods 100000] [--nodes 5000] [--shape realistic|minimal] [--repeats 3]
                           [--memory-pods 10000] [--profile]

Pods are shaped as the API server returns them (``--shape realistic``, bench/synthetic.py: several containers, env,
volumes, managedFields; 6 to 8 KB of JSON each), or carry only what the ledger reads (``--shape minimal``, ~400
bytes: the hardest case for figure 1, since json.loads then has little to do per pod).

1. full build      Ledger.build  vs  json.loads of the same snapshot as JSON text (target <= 1.5). Both as the operator
                   runs them: each repetition parses the text (the baseline, timed) and builds the ledger from what
                   it parsed (the subject, timed), nothing else parsed in the heap. Under one collector setting for
                   both: on (as in production; Ledger.build pauses the collector itself while it runs, json.loads
                   pays the collections its allocations trigger) and off for both (the work alone).
2. one pod event   median cost of one pod update on the full ledger  vs  on a 100-pod ledger (target <= 1.5), both
                   with the collector on and the ledger frozen out of its way, as the operator keeps it.
3. kept memory     what a ledger built from parsed JSON keeps once the manifests are dropped (tracemalloc), per pod,
                   on a snapshot of ``--memory-pods`` pods (target <= 1 KiB with realistic pods): in all (nodes,
                   queues and a PodGroup per 8 pods included) and the pods' share (minus the same snapshot without
                   pods).

``--profile`` adds the top costs of one full build (cProfile, collector paused as the build pauses it).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import PodMaker, cluster, pod, realistic_pod
from timing import collector, pod_event_seconds

from cardquota.core.ledger import Ledger

SHAPES: dict[str, PodMaker] = {"realistic": realistic_pod, "minimal": pod}


def build_vs_loads(text: str, repeats: int, collect: bool) -> tuple[float, float]:
    """(fastest json.loads, fastest Ledger.build of what it parsed) in seconds, over ``repeats`` repetitions under
    one collector setting."""
    loads: list[float] = []
    builds: list[float] = []
    for _ in range(repeats):
        with collector(collect):
            start = time.perf_counter()
            objects = json.loads(text)
            parsed = time.perf_counter()
            ledger = Ledger.build(objects)
            built = time.perf_counter()
        loads.append(parsed - start)
        builds.append(built - parsed)
        del objects, ledger
    return min(loads), min(builds)


def kept_bytes(text: str) -> int:
    """Bytes a ledger built from ``text`` keeps allocated once the parsed manifests are dropped (tracemalloc)."""
    with collector(True):
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            ledger = Ledger.build(json.loads(text))
            gc.collect()
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    del ledger
    return kept


def profile(text: str, top: int = 15) -> str:
    """The top costs (own time) of one Ledger.build of ``text``."""
    objects = json.loads(text)
    profiler = cProfile.Profile()
    with collector(False):
        profiler.runcall(Ledger.build, objects)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def snapshot_text(nodes: int, pods: int, make_pod: PodMaker) -> tuple[str, int]:
    objects = cluster(nodes, pods, make_pod=make_pod)
    return json.dumps(objects), len(objects)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="realistic")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-pods", type=int, default=10_000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    make_pod = SHAPES[args.shape]
    text, count = snapshot_text(args.nodes, args.pods, make_pod)
    print(f"snapshot: {args.nodes} nodes, {args.pods} pods ({args.shape}), {count} objects, "
          f"{len(text) / 1e6:.0f} MB of JSON")

    loads_on, build_on = build_vs_loads(text, args.repeats, collect=True)
    loads_off, build_off = build_vs_loads(text, args.repeats, collect=False)
    print(f"1. full build:    {build_on / loads_on:5.2f}x json.loads, collector on for both ({build_on:.2f} s vs "
          f"{loads_on:.2f} s); {build_off / loads_off:5.2f}x with it off for both ({build_off:.2f} s vs "
          f"{loads_off:.2f} s); target <= 1.5")

    groups = max(1, args.pods // 8)
    big = Ledger.build(json.loads(text))
    small_nodes = max(3, args.nodes // 1000)
    small = Ledger.build(cluster(small_nodes, 100, make_pod=make_pod))
    events = min(2000, args.pods)
    big_event = pod_event_seconds(big, args.nodes, groups, events, make_pod)
    small_event = pod_event_seconds(small, small_nodes, max(1, 100 // 8), min(events, 100), make_pod)
    print(f"2. one pod event: {big_event / small_event:5.2f}x a 100-pod ledger   ({big_event * 1e6:.0f} us vs "
          f"{small_event * 1e6:.0f} us; target <= 1.5)")
    del big, small

    memory_pods = min(args.pods, args.memory_pods)
    memory_nodes = max(3, args.nodes * memory_pods // max(1, args.pods))
    objects: list[dict[str, Any]] = cluster(memory_nodes, memory_pods, make_pod=make_pod)
    with_pods = kept_bytes(json.dumps(objects))
    without_pods = kept_bytes(json.dumps([o for o in objects if o["kind"] != "Pod"]))
    del objects
    own = (with_pods - without_pods) / memory_pods
    print(f"3. kept memory:   {with_pods / memory_pods:5.0f} bytes per pod in all, {own:.0f} of them the pod's own "
          f"({memory_nodes} nodes, {memory_pods} pods, {with_pods / 2**20:.1f} MiB in all; target <= 1024)")

    if args.profile:
        print(profile(text))


if __name__ == "__main__":
    main()
