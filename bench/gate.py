"""The card-quota gate's round, a ratio against a baseline measured in the same run.

    python bench/gate.py [--pods 100000] [--nodes 5000] [--gangs 125] [--repeats 5]

One round (:func:`cardquota.core.gate.gate_round`) over ``--gangs`` gangs of 8 gated one-card pods spread over 20
queues of their own with room for all of them, in a cluster of ``--nodes`` nodes and ``--pods`` other pods
(bench/synthetic.py), against the same round with the same gated pods, nodes and queues and no other pod. The round
reads the ledger's incremental totals, so its cost follows the gated pods and the queues, not the cluster: the
target is a ratio near 1. Printed beside: the round's time per gated pod, and how many it let through.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synthetic
from timing import timed

from cardquota.core.gate import gate_round
from cardquota.core.ledger import Ledger

QUEUES = 20


def gated_gangs(gangs: int) -> list[dict[str, Any]]:
    """The gangs, in queues of their own (``gate-q<n>``, room for all of them: both rounds let every pod through)."""
    room = json.dumps(dict.fromkeys(synthetic.PRODUCTS, gangs * 8))
    objects: list[dict[str, Any]] = [
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
         "metadata": {"name": f"gate-q{index}", "annotations": {"volcano.sh/card.quota": room}}, "spec": {"weight": 1}}
        for index in range(QUEUES)]
    for gang in range(gangs):
        name = f"gated-{gang}"
        objects.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                        "metadata": {"name": name, "namespace": "ml"},
                        "spec": {"queue": f"gate-q{gang % QUEUES}", "minMember": 8}, "status": {"phase": "Inqueue"}})
        for member in range(8):
            objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{name}-{member}", "namespace": "ml", "uid": f"uid-{gang}-{member}",
                "creationTimestamp": f"2026-12-07T10:{gang // 60 % 60:02d}:{gang % 60:02d}Z",
                "annotations": {"volcano.sh/card.name": synthetic.PRODUCTS[gang % len(synthetic.PRODUCTS)],
                                "scheduling.k8s.io/group-name": name}},
                "spec": {"schedulingGates": [{"name": "cardquota.io/card-quota"}], "containers": [
                    {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                "status": {"phase": "Pending"}})
    return objects


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--gangs", type=int, default=125)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    gated = gated_gangs(args.gangs)
    big = Ledger.build([*synthetic.cluster(args.nodes, args.pods, QUEUES), *gated])
    small = Ledger.build([*synthetic.cluster(args.nodes, 0, QUEUES), *gated])
    big_times = timed(lambda: gate_round(big), args.repeats)
    small_times = timed(lambda: gate_round(small), args.repeats)
    lifted = len(gate_round(big).lifts)
    pods = args.gangs * 8
    big_median, small_median = statistics.median(big_times), statistics.median(small_times)
    print(f"gate round, {pods} gated pods in {args.gangs} gangs of 8, {QUEUES} queues, {args.nodes} nodes")
    print(f"  with {args.pods} other pods: median {big_median * 1e3:.1f} ms "
          f"({big_median / pods * 1e6:.1f} µs per gated pod; {lifted} let through)")
    print(f"  with no other pod:  median {small_median * 1e3:.1f} ms")
    print(f"  ratio {big_median / small_median:.2f} (target: near 1, the round follows the gated pods)")


if __name__ == "__main__":
    main()
