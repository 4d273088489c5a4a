"""The card-quota gate's round for pods naming DRA claims, a ratio against the same round for card pods, measured in
the same run.

    python bench/gate_dra.py [--pods 100000] [--nodes 5000] [--gangs 125] [--holders 10000] [--repeats 5]

Both rounds judge ``--gangs`` gangs of 8 gated pods in 20 queues of their own with room for all of them, in a cluster
of ``--nodes`` nodes and ``--pods`` other pods (bench/synthetic.py) of which ``--holders`` more are bound pods naming
a ResourceClaimTemplate in those queues. In the subject the gated pods name a template asking one device of a
DeviceClass the queues bound in ``spec.dra``; in the baseline they ask one card of a type the queues' card.quota
bounds. The ledger keeps what the bound pods hold as they change (a round does not add them up), so a round's cost
follows the gated pods and the queues, not the holders: the target is within 2x (a pod's claims are read and its
devices checked up its queue's ancestry, beside what a card pod costs), whatever ``--holders``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synthetic
from gate import QUEUES, gated_gangs
from timing import timed

from cardquota.core.gate import gate_round
from cardquota.core.ledger import Ledger

DEVICE_CLASS = "gpu.example.com"
TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-device", "namespace": "ml"},
            "spec": {"spec": {"devices": {"requests": [{"name": "d", "exactly": {"deviceClassName": DEVICE_CLASS}}]}}}}


def with_device_quota(objects: list[dict[str, Any]], room: int) -> list[dict[str, Any]]:
    """The gate's queues bounding the DeviceClass too (room for every pod)."""
    for manifest in objects:
        if manifest["kind"] == "Queue" and manifest["metadata"]["name"].startswith("gate-q"):
            manifest["spec"]["dra"] = {"capability": {DEVICE_CLASS: {"count": room}}}
    return objects


def claiming(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gated pods naming the template instead of asking cards."""
    for manifest in objects:
        if manifest["kind"] == "Pod":
            manifest["metadata"]["annotations"].pop("volcano.sh/card.name")
            manifest["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
            manifest["spec"]["resourceClaims"] = [{"name": "d", "resourceClaimTemplateName": "one-device"}]
    return objects


def holders(count: int) -> list[dict[str, Any]]:
    """Bound pods naming the template, spread over the gate's queues."""
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"holder-{index}", "namespace": "ml", "uid": f"uid-holder-{index}",
        "annotations": {"scheduling.volcano.sh/queue-name": f"gate-q{index % QUEUES}"}},
        "spec": {"nodeName": f"node-{index % 10}", "schedulerName": "volcano",
                 "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
                 "resourceClaims": [{"name": "d", "resourceClaimTemplateName": "one-device"}]},
        "status": {"phase": "Running"}} for index in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--gangs", type=int, default=125)
    parser.add_argument("--holders", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    pods = args.gangs * 8
    room = args.holders + pods
    base = [*synthetic.cluster(args.nodes, args.pods, QUEUES), TEMPLATE, *holders(args.holders)]
    cards = Ledger.build(with_device_quota([*copy.deepcopy(base), *gated_gangs(args.gangs)], room))
    devices = Ledger.build(with_device_quota([*base, *claiming(gated_gangs(args.gangs))], room))
    card_times = timed(lambda: gate_round(cards), args.repeats)
    device_times = timed(lambda: gate_round(devices), args.repeats)
    lifted = (len(gate_round(devices).lifts), len(gate_round(cards).lifts))
    device_median, card_median = statistics.median(device_times), statistics.median(card_times)
    print(f"gate round, {pods} gated pods in {args.gangs} gangs of 8, {QUEUES} queues, {args.nodes} nodes, "
          f"{args.pods} other pods, {args.holders} bound pods naming claims")
    print(f"  pods naming DRA claims: median {device_median * 1e3:.1f} ms "
          f"({device_median / pods * 1e6:.1f} µs per gated pod; {lifted[0]} let through)")
    print(f"  card pods (baseline):   median {card_median * 1e3:.1f} ms ({lifted[1]} let through)")
    print(f"  ratio {device_median / card_median:.2f} (target: within 2x, whatever --holders)")


if __name__ == "__main__":
    main()
