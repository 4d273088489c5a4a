"""What the ledger keeps per pod (issue 20: at most 1 KiB per pod, everything it holds counted: views, indexes,
charges, nodes, queues, PodGroups). Memory, unlike time, is deterministic enough to assert (tracemalloc)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from measuring import kept_bytes

from cardquota.core.ledger import Ledger

PODS = 8_000
PODS_PER_JOB = 8
PODS_PER_NODE = 20
KIB = 1024


def _cluster() -> list[dict[str, Any]]:
    """Jobs of 8 pods on A100 nodes of 8 cards, as Volcano's job controller labels and annotates them; names of a
    realistic length; a fifth of the jobs still pending."""
    objects: list[dict[str, Any]] = []
    for node in range(PODS // PODS_PER_NODE):
        name = f"gpu-a100-pool-b-{node:05d}"
        objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8",
            "kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}}})
    objects.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                    "metadata": {"name": "research", "annotations": {
                        "volcano.sh/card.quota": json.dumps({"NVIDIA-A100-SXM4-80GB": 100_000})}}})
    for job in range(PODS // PODS_PER_JOB):
        group = f"llm-finetune-{job:05d}-7f9c2"
        pending = job % 5 == 0
        objects.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                        "metadata": {"name": group, "namespace": "team-nlp", "annotations": {
                            "volcano.sh/card.request": json.dumps({"NVIDIA-A100-SXM4-80GB": 8})}},
                        "spec": {"queue": "research", "minMember": PODS_PER_JOB},
                        "status": {"phase": "Inqueue" if pending else "Running"}})
        for worker in range(PODS_PER_JOB):
            index = job * PODS_PER_JOB + worker
            spec: dict[str, Any] = {"schedulerName": "volcano", "containers": [{"name": "trainer", "resources": {
                "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                "limits": {"nvidia.com/gpu": "1"}}}]}
            if not pending:
                spec["nodeName"] = f"gpu-a100-pool-b-{index // PODS_PER_NODE:05d}"
            objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{group[:-6]}-worker-{worker}", "namespace": "team-nlp",
                "labels": {"volcano.sh/job-name": group[:-6], "volcano.sh/task-spec": "worker",
                           "volcano.sh/queue-name": "research"},
                "annotations": {"volcano.sh/card.name": "NVIDIA-A100-SXM4-80GB",
                                "scheduling.k8s.io/group-name": group, "volcano.sh/task-spec": "worker",
                                "volcano.sh/job-version": "0", "volcano.sh/task-index": str(worker)}},
                "spec": spec, "status": {"phase": "Pending" if pending else "Running"}})
    for index, manifest in enumerate(objects):  # as the API server returns them: a uid and a resourceVersion each
        manifest["metadata"].update(uid=str(uuid.UUID(int=index + 1)), resourceVersion=str(48_210_000 + index))
    return objects


def test_the_ledger_keeps_at_most_a_kib_per_pod() -> None:
    text = json.dumps(_cluster())
    kept, ledger = kept_bytes(lambda: Ledger.build(json.loads(text)))
    assert isinstance(ledger, Ledger)
    assert len(ledger.snapshot.pods) == PODS
    assert ledger.usage("research").allocated == {"NVIDIA-A100-SXM4-80GB": PODS * 4 // 5}
    print(f"{kept / PODS:.0f} bytes kept per pod")
    assert kept / PODS <= KIB, f"{kept / PODS:.0f} bytes kept per pod"
