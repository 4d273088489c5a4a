"""What the scheduler ConfigMap's admission costs once it also looks for leaks (the card resources every node
offers against ``extender.managedResources``, the queues' capability, the enqueue voters' order), against the same
policy's syntax check alone (``conf_violations``) on the same text, in one process:

    python bench/schedconf.py [--nodes 5000] [--repeats 50] [--runs 3]

Nodes are realistic in what the check reads: an A100 node's allocatable (cpu, memory, pods, ephemeral storage,
hugepages at 0, ``nvidia.com/gpu``) and GPU feature discovery's labels. Figures are the median of ``--repeats`` per
run, min-max over ``--runs``; the machine and its load change them, the ratio less so.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.schedconf import admit, conf_violations
from cardquota.core.snapshot import ClusterSnapshot, NodeRecord, node_record

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "crds" / "examples" / "volcano-scheduler-configmap-extender.yaml"


def gpu_node(index: int) -> NodeRecord:
    return node_record({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": f"gpu-{index}", "labels": {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.memory": "81920"}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti",
                                   "hugepages-2Mi": "0", "nvidia.com/gpu": "8"}}})


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    (configmap,) = [document for document in yaml.safe_load_all(EXAMPLE.read_text()) if document]
    text = configmap["data"]["volcano-scheduler.conf"]
    snapshot = ClusterSnapshot(nodes={record.node.name: record for record in map(gpu_node, range(args.nodes))})
    baselines, totals = [], []
    for _ in range(args.runs):
        baselines.append(median_seconds(lambda: conf_violations(text), args.repeats))
        totals.append(median_seconds(lambda: admit(configmap, None, snapshot, PolicyConfig()), args.repeats))
    ratios = [total / base for total, base in zip(totals, baselines, strict=True)]
    print(f"scheduler ConfigMap admission, {args.nodes} nodes, median of {args.repeats}, {args.runs} runs")
    print(f"  syntax check alone: {min(baselines) * 1e3:.2f}-{max(baselines) * 1e3:.2f} ms")
    print(f"  with the leak checks: {min(totals) * 1e3:.2f}-{max(totals) * 1e3:.2f} ms "
          f"(ratio {min(ratios):.1f}-{max(ratios):.1f})")


if __name__ == "__main__":
    main()
