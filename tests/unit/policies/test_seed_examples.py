"""The example scenarios of capacity-card-design.md, admitted against the cluster each one describes."""

from __future__ import annotations

from typing import Any

from builders import container, gpu_labels, gpu_node, node, queue
from verdicts import denied_at

from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.violations import Reason

A100, H100, T4 = "NVIDIA-A100", "NVIDIA-H100", "NVIDIA-T4"


def cluster(*objects: dict[str, Any]) -> ClusterSnapshot:
    snapshot = Ledger.build(objects).snapshot
    snapshot.complete = True
    return snapshot


def job(request: str, card_name: str, replicas: int, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "training", "namespace": "ml", "annotations": {"volcano.sh/card.request": request}},
        "spec": {"queue": "team-a", "minAvailable": 1, "schedulerName": "volcano", "tasks": [{
            "replicas": replicas, "name": "worker",
            "template": {"metadata": {"annotations": {"volcano.sh/card.name": card_name}},
                         "spec": {"containers": [container("worker", limits={resource: "1"},
                                                           requests={resource: "1"})]}}}]},
    }


def test_example_1_basic_card_quota() -> None:
    """2 nodes x 4 A100, team-a quota 5, a job of 4: enqueues (4 <= 5)."""
    snapshot = cluster(gpu_node("n1", A100, 4), gpu_node("n2", A100, 4), queue("team-a", '{"NVIDIA-A100": 5}'))
    verdict = admit(job('{"NVIDIA-A100": 4}', A100, 4), None, snapshot, PolicyConfig())
    assert verdict.allowed
    assert verdict.warnings == ()


def test_example_2_multi_card_selection_without_h100_quota_is_allowed_with_a_warning() -> None:
    snapshot = cluster(gpu_node("n1", A100, 4), gpu_node("n2", H100, 4), queue("team-a", {A100: 5}))
    verdict = admit(job('{"NVIDIA-A100|NVIDIA-H100": 4}', f"{A100}|{H100}", 4), None, snapshot, PolicyConfig())
    assert verdict.allowed
    assert verdict.warnings == ("queue team-a has no quota for NVIDIA-H100: only NVIDIA-A100 of "
                                "NVIDIA-A100|NVIDIA-H100 can be used",)


def test_example_3_mps_shared_gpu() -> None:
    """4 A100 x 8 MPS replicas = 32; quota 32; a job of 16 MPS replicas."""
    mps_node = node("mps", labels=gpu_labels(A100, count=4, memory=81920, replicas=8),
                    allocatable={"nvidia.com/gpu.shared": "32"})
    mps = "NVIDIA-A100/mps-80g*1/8"
    snapshot = cluster(mps_node, queue("team-a", {mps: 32}))
    verdict = admit(job('{"NVIDIA-A100/mps-80g*1/8": 16}', mps, 16, "nvidia.com/gpu.shared"), None, snapshot,
                    PolicyConfig())
    assert verdict.allowed
    assert verdict.warnings == ()


def test_example_4_three_alternatives_judged_in_job_mode() -> None:
    snapshot = cluster(gpu_node("a", A100, 2), gpu_node("h", H100, 2), gpu_node("t", T4, 2),
                       queue("team-a", {A100: 2, H100: 1, T4: 1}))
    alternatives = f"{A100}|{H100}|{T4}"
    assert admit(job(f'{{"{alternatives}": 4}}', alternatives, 4), None, snapshot, PolicyConfig()).allowed
    denied_at(admit(job(f'{{"{alternatives}": 5}}', alternatives, 5), None, snapshot, PolicyConfig()),
              ('metadata.annotations["volcano.sh/card.request"]', Reason.INVALID))


def test_considerations_job_mode_example() -> None:
    """'A100|H100': 6 with A100: 4, H100: 4 passes the enqueue check (6 <= 4 + 4)."""
    snapshot = cluster(gpu_node("a", A100, 4), gpu_node("h", H100, 4), queue("team-a", {A100: 4, H100: 4}))
    assert admit(job('{"NVIDIA-A100|NVIDIA-H100": 6}', f"{A100}|{H100}", 6), None, snapshot, PolicyConfig()).allowed
