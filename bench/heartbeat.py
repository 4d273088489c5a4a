"""A pod admission right after a Node heartbeat against one in steady state, at 5,000 nodes.

    python bench/heartbeat.py [--nodes 5000] [--rounds 2000]

A kubelet status update (conditions, heartbeat time, resourceVersion) is applied to the cache between reviews, as
the watch does many times a second at that size; the baseline is the same review with no event between. Both in
one process, GC on, the same review body. Reports p50/p99 of each and the ratio (target 1.5x at most: the card catalog
is kept across events that change no card type).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import cluster
from timing import percentile

from cardquota.core.policies.config import PolicyConfig
from cardquota.runtime.cache import ClusterCache
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.review import read_review


def pod_review() -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "annotations": {
        "volcano.sh/card.name": "NVIDIA-A100", "scheduling.k8s.io/group-name": "pg-1"}},
        "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "image": "i", "resources": {
            "limits": {"nvidia.com/gpu": "1"}}}]}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": "ml", "name": "p", "object": pod}}).encode()


def heartbeat(node: dict[str, Any], beat: int) -> dict[str, Any]:
    changed = copy.deepcopy(node)
    changed["metadata"]["resourceVersion"] = str(10_000_000 + beat)
    changed["status"]["conditions"] = [{"type": "Ready", "status": "True",
                                        "lastHeartbeatTime": f"2026-11-24T13:{beat // 60 % 60:02d}:{beat % 60:02d}Z"}]
    return changed


def review_seconds(admission: Admission, body: bytes, before: Any) -> float:
    before()
    started = time.perf_counter()
    admission.review(read_review(body), mutating=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=2_000)
    options = parser.parse_args()
    objects = cluster(options.nodes, options.nodes * 4)
    nodes = [item for item in objects if item["kind"] == "Node"]
    cache = ClusterCache()
    cache.load(objects)
    admission = Admission(cache, PolicyConfig())
    body = pod_review()
    beats = iter(range(10**9))
    steady, after_beat = [], []
    for _ in range(options.rounds):
        steady.append(review_seconds(admission, body, lambda: None))
        beat = next(beats)
        after_beat.append(review_seconds(admission, body, lambda beat=beat: cache.apply(
            "MODIFIED", heartbeat(nodes[beat % len(nodes)], beat))))
    for name, values in (("steady", steady), ("after a heartbeat", after_beat)):
        print(f"{options.nodes} nodes  {name:18} p50 {percentile(values, 0.5) * 1e6:7.1f} µs  "
              f"p99 {percentile(values, 0.99) * 1e6:7.1f} µs")
    print(f"ratio p50 {percentile(after_beat, 0.5) / percentile(steady, 0.5):.2f}x  "
          f"p99 {percentile(after_beat, 0.99) / percentile(steady, 0.99):.2f}x")


if __name__ == "__main__":
    main()
