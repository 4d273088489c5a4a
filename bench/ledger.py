"""Ledger figures, each a ratio against a baseline measured in the same run.

    python bench/ledger.py [--pods 100000] [--nodes 5000]

1. full build      Ledger.build of a synthetic snapshot  vs  json.loads of the same snapshot as JSON text
                   (target <= 1.0)
2. one pod event   median cost of one pod update on the full ledger  vs  on a 100-pod ledger (target <= 1.5)
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import cluster, pod

from cardquota.core.ledger import Ledger


def best_of(repeats: int, action: object) -> float:
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        action()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def event_cost(ledger: Ledger, nodes: int, groups: int, events: int) -> float:
    samples = []
    for index in range(events):
        manifest = pod(index, (index * 7) % nodes, groups)
        start = time.perf_counter()
        ledger.upsert(manifest)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    objects = cluster(args.nodes, args.pods)
    text = json.dumps(objects)
    print(f"snapshot: {args.nodes} nodes, {args.pods} pods, {len(objects)} objects, {len(text) / 1e6:.0f} MB of JSON")
    loads = best_of(args.repeats, lambda: json.loads(text))
    build = best_of(args.repeats, lambda: Ledger.build(objects))
    print(f"1. full build:    {build / loads:5.2f}x json.loads   ({build:.2f} s vs {loads:.2f} s; target <= 1.0)")
    groups = max(1, args.pods // 8)
    big = Ledger.build(objects)
    small = Ledger.build(cluster(max(3, args.nodes // 1000), 100))
    events = min(2000, args.pods)
    big_event = event_cost(big, args.nodes, groups, events)
    small_event = event_cost(small, max(3, args.nodes // 1000), max(1, 100 // 8), min(events, 100))
    print(f"2. one pod event: {big_event / small_event:5.2f}x a 100-pod ledger   ({big_event * 1e6:.0f} us vs "
          f"{small_event * 1e6:.0f} us; target <= 1.5)")


if __name__ == "__main__":
    main()
