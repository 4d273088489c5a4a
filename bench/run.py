"""cardquota benchmarks. Every figure is a ratio against a baseline measured in the same run (machines are noisy).

    python bench/run.py [--pods N]

1. loader overhead      parse_documents (UTF-8 check, nesting guard, object checks) divided by bare libyaml load_all
2. ledger build         Ledger.build of a cluster divided by only parsing the same manifests into typed views,
                        with the cyclic collector on for both (Ledger.build pauses it itself: as in production) and
                        off for both (the work alone)
3. one watch event      one incremental pod update divided by a full rebuild of the same cluster
4. O(1) per event       cost of a pod event in a 10x larger cluster divided by in the base cluster (about 1 means O(1))

Every baseline runs under the same GC setting as its subject (bench/timing.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import cluster
from timing import best_of, pod_event_seconds

from cardquota.core.ledger import Ledger
from cardquota.core.objects import Node, Pod, PodGroup, Queue
from cardquota.loader import parse_documents

VIEWS = {"Node": Node.from_manifest, "Pod": Pod.from_manifest, "PodGroup": PodGroup.from_manifest,
         "Queue": Queue.from_manifest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    nodes = max(3, args.pods // 16)
    objects = cluster(nodes, args.pods)
    text = yaml.safe_dump_all(objects, sort_keys=False)
    data = text.encode()
    print(f"cluster: {nodes} nodes, {args.pods} pods, {len(objects)} objects, {len(data) / 1e6:.1f} MB of YAML")

    bare = best_of(args.repeats, lambda: list(yaml.load_all(text, Loader=yaml.CSafeLoader)))
    ours = best_of(args.repeats, lambda: parse_documents(data, "bench.yaml"))
    print(f"1. loader overhead:  {ours / bare:6.2f}x bare libyaml   ({ours * 1e3:.0f} ms vs {bare * 1e3:.0f} ms)")

    figures = {}
    for collect in (True, False):
        views = best_of(args.repeats, lambda: [VIEWS[o["kind"]](o) for o in objects], collect=collect)
        figures[collect] = views, best_of(args.repeats, lambda: Ledger.build(objects), collect=collect)
    (views, build), (views_off, build_off) = figures[True], figures[False]
    print(f"2. ledger build:     {build / views:6.2f}x parsing views, collector on for both ({build * 1e3:.0f} ms vs "
          f"{views * 1e3:.0f} ms); {build_off / views_off:.2f}x with it off for both ({build_off * 1e3:.0f} ms vs "
          f"{views_off * 1e3:.0f} ms)")

    groups = max(1, args.pods // 8)
    ledger = Ledger.build(objects)
    event = pod_event_seconds(ledger, nodes, groups, min(2000, args.pods))
    print(f"3. one pod event:    {event / build:9.2e} of a full rebuild ({event * 1e6:.0f} µs; "
          f"{build / event:,.0f} events cost one rebuild)")

    big_objects = cluster(nodes * 10, args.pods * 10)
    big_ledger = Ledger.build(big_objects)
    big_event = pod_event_seconds(big_ledger, nodes * 10, groups * 10, min(2000, args.pods))
    print(f"4. O(1) per event:   {big_event / event:6.2f}x per-event cost at 10x the cluster size "
          f"({big_event * 1e6:.0f} µs vs {event * 1e6:.0f} µs)")


if __name__ == "__main__":
    main()
