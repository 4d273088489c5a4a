"""Ledger figures, each a ratio against a baseline measured in the same run.

    python bench/ledger.py [--pods 100000] [--nodes 5000]

1. full build      Ledger.build of a synthetic snapshot  vs  json.loads of the same snapshot as JSON text
                   (target <= 1.0)
2. one pod event   median cost of one pod update on the full ledger  vs  on a 100-pod ledger (target <= 1.5)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import cluster
from timing import best_of, pod_event_seconds

from cardquota.core.ledger import Ledger


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
    big_event = pod_event_seconds(big, args.nodes, groups, events)
    small_event = pod_event_seconds(small, max(3, args.nodes // 1000), max(1, 100 // 8), min(events, 100))
    print(f"2. one pod event: {big_event / small_event:5.2f}x a 100-pod ledger   ({big_event * 1e6:.0f} us vs "
          f"{small_event * 1e6:.0f} us; target <= 1.5)")


if __name__ == "__main__":
    main()
