"""One scheduling cycle of the watch-fed extender, for one job, at 1k and 100k pods: the cost must be the job's and
its nodes', not the cluster's (issue 20's target: 100k vs 1k at most 1.5x).

    python bench/extender_cycle.py [--pods 1000 --pods 100000] [--repeats 200]

The extender is loaded from a synthetic cluster (nodes = pods / 20) as its watch would fill it, then a cycle is what
Volcano sends for one pending 8-card job: onSessionOpen (no body), jobEnqueueable, predicate and prioritize over 16
nodes for each of its tasks, allocateFunc for each task, onSessionClose — with the allocations undone after each
cycle (deallocateFunc) so every cycle sees the same cluster. GC on, as served; the loaded cluster frozen out of the
collector (gc.freeze) at both sizes, as the served extender does after its list. Reports the median and p99 of a
cycle's time at each size and their ratio.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from synthetic import PRODUCTS, cluster
from timing import percentile
from volcano_payloads import ALLOCATED, job_info, node_info, task_info

from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import Extender
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.runtime.cache import ClusterCache

TASKS = 8
NODES_PER_VERB = 16
"""Nodes each task is filtered and scored on (a third of the 1k-pod cluster's 50 nodes offer the job's card)."""


def pending_job() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The job's own queue (quota for all of it: every verb decides "yes" at every size, so the work compared is
    the same), its PodGroup and its pending pods."""
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
             "metadata": {"name": "bench", "annotations": {"volcano.sh/card.quota": f'{{"{PRODUCTS[0]}": 1000}}'}},
             "spec": {"weight": 1, "capability": {"cpu": "1000", "memory": "10Ti"}}}
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "bench-job", "namespace": "ml",
                          "annotations": {"volcano.sh/card.request": f'{{"{PRODUCTS[0]}": {TASKS}}}'}},
             "spec": {"queue": "bench", "minMember": TASKS}, "status": {"phase": "Pending"}}
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"bench-job-{index}", "namespace": "ml",
                          "annotations": {"scheduling.k8s.io/group-name": "bench-job",
                                          "volcano.sh/card.name": PRODUCTS[0]}},
             "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "image": "i", "resources": {
                 "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]},
             "status": {"phase": "Pending"}} for index in range(TASKS)]
    return queue, group, pods


@dataclass(frozen=True)
class Requests:
    """The cycle's request bodies, built before timing (the server parses each from JSON: a cost per request,
    whatever the cluster's size)."""

    enqueue: dict[str, Any]
    predicates: list[list[dict[str, Any]]]
    prioritize: list[dict[str, Any]]
    allocate: list[dict[str, Any]]

    @classmethod
    def of(cls, group: dict[str, Any], pods: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> Requests:
        infos = [node_info(node) for node in nodes]
        tasks = [task_info(pod) for pod in pods]
        return cls({"job": job_info(group)},
                   [[{"task": task, "node": info} for info in infos] for task in tasks],
                   [{"task": task, "nodes": infos} for task in tasks],
                   [{"task": task_info(pod, status=ALLOCATED, node=nodes[index % len(nodes)]["metadata"]["name"])}
                    for index, pod in enumerate(pods)])


def cycle(extender: Extender, requests: Requests) -> float:
    started = time.perf_counter()
    extender.on_session_open({})
    extender.job_enqueueable(requests.enqueue)
    for predicates, prioritize, allocate in zip(requests.predicates, requests.prioritize, requests.allocate,
                                                strict=True):
        for predicate in predicates:
            extender.predicate(predicate)
        extender.prioritize(prioritize)
        extender.allocate_func(allocate)
    elapsed = time.perf_counter() - started
    for allocate in requests.allocate:  # (not timed) the same cluster for the next cycle: undone while the cycle
        extender.deallocate_func(allocate)  # lasts (the extender undoes only the current cycle's allocations)
    started = time.perf_counter()
    extender.on_session_close({})
    return elapsed + time.perf_counter() - started


def measure(pods: int, repeats: int) -> list[float]:
    objects = cluster(max(1, pods // 20), pods)
    extender = Extender(SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True)))
    queue, group, job_pods = pending_job()
    ClusterCache(sink=extender).load([*objects, queue, group, *job_pods])  # (collects and freezes, as served)
    nodes = [item for item in objects if item["kind"] == "Node" and
             item["metadata"]["labels"]["nvidia.com/gpu.product"] == PRODUCTS[0]][:NODES_PER_VERB]
    assert len(nodes) == NODES_PER_VERB, "the same nodes per verb at every size"
    requests = Requests.of(group, job_pods, nodes)
    cycle(extender, requests)  # warm caches
    times = [cycle(extender, requests) for _ in range(repeats)]
    gc.unfreeze()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, action="append")
    parser.add_argument("--repeats", type=int, default=200)
    options = parser.parse_args()
    sizes = options.pods or [1_000, 100_000]
    results = {}
    for pods in sizes:
        results[pods] = measure(pods, options.repeats)
        times = results[pods]
        print(f"{pods:>7} pods  cycle median {statistics.median(times) * 1e3:7.2f} ms  "
              f"p99 {percentile(times, 0.99) * 1e3:7.2f} ms", flush=True)
    small, large = results[sizes[0]], results[sizes[-1]]
    print(f"ratio {sizes[-1]:,} vs {sizes[0]:,} pods: median "
          f"{statistics.median(large) / statistics.median(small):.2f}x  "
          f"p99 {percentile(large, 0.99) / percentile(small, 0.99):.2f}x")


if __name__ == "__main__":
    main()
