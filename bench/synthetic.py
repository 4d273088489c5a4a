"""A synthetic heterogeneous cluster of any size, for benchmarks (deterministic for a given seed)."""

from __future__ import annotations

import json
import random
from typing import Any

PRODUCTS = ["NVIDIA-A100", "NVIDIA-H100", "NVIDIA-GeForce-RTX-4090"]


def cluster(nodes: int, pods: int, queues: int = 20, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = []
    for index in range(nodes):
        product = PRODUCTS[index % len(PRODUCTS)]
        labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920"}
        objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{index}", "labels": labels},
                        "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}}})
    for index in range(queues):
        quota = {product: rng.randint(8, 64) for product in PRODUCTS}
        objects.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                        "metadata": {"name": f"q{index}", "annotations": {"volcano.sh/card.quota": json.dumps(quota)}},
                        "spec": {"weight": 1}})
    groups = max(1, pods // 8)
    for index in range(groups):
        objects.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                        "metadata": {"name": f"pg-{index}", "namespace": "ml",
                                     "annotations": {"volcano.sh/card.request": json.dumps({PRODUCTS[0]: 8})}},
                        "spec": {"queue": f"q{index % queues}"},
                        "status": {"phase": rng.choice(["Inqueue", "Running", "Pending"])}})
    for index in range(pods):
        objects.append(pod(index, rng.randrange(nodes) if rng.random() < 0.8 else None, groups))
    return objects


def pod(index: int, node: int | None, groups: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trainer:1", "resources": {
        "requests": {"cpu": "4", "memory": "32Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]}
    if node is not None:
        spec["nodeName"] = f"node-{node}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{index}", "namespace": "ml", "annotations": {
                "volcano.sh/card.name": "NVIDIA-A100|NVIDIA-H100",
                "scheduling.k8s.io/group-name": f"pg-{index % groups}"}},
            "spec": spec, "status": {"phase": "Running" if node is not None else "Pending"}}
