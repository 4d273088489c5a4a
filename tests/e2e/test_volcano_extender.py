"""Stock Volcano (a pinned release) calling cardquota's extender: a multi-card job and an mGPU pod through the real
scheduler. Runs with the rest of tests/e2e (``make e2e``), over the Volcano the session fixture installs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import gpu_labels, queue
from e2e.cluster import Kubectl, apply_over, fake_gpus, gpu_node_name, replace_scheduler_config, until
from e2e.undo import UndoLog

from cardquota.core.scheduling.capacity_card import insufficient

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "cardquota-e2e-volcano"
A100, H100 = "NVIDIA-A100", "NVIDIA-H100"


@pytest.fixture(scope="module")
def volcano(kubectl: Kubectl, module_undo: UndoLog) -> Iterator[str]:
    """Volcano (installed by the session fixture, the Makefile's pinned VOLCANO_VERSION; extender allocate/deallocate
    and managedResources need v1.13+) with its scheduler configured with the extender, cardquota's extender
    deployed, and the GPU node offering 4 A100 whole cards and 4 mGPU cards — every change recorded in the module's
    undo log and put back when the module is done."""
    kubectl.run("-n", "volcano-system", "rollout", "status", "deployment/volcano-scheduler", "--timeout=300s")
    overlays = REPO / "manifests" / "overlays"
    apply_over(kubectl, module_undo, str(overlays / "dev-extender"), str(overlays / "dev"))
    kubectl.run("-n", "cardquota-system", "rollout", "status", "deployment/cardquota-extender", "--timeout=180s")
    replace_scheduler_config(kubectl, module_undo,
                             str(REPO / "crds" / "examples" / "volcano-scheduler-configmap-extender.yaml"))
    node = gpu_node_name(kubectl)
    fake_gpus(kubectl, module_undo, node, gpu_labels(A100, count=4, memory=81920), {
        "nvidia.com/gpu": "4", "vke.volcengine.com/mgpu-core": "400", "vke.volcengine.com/mgpu-memory": "98304"})
    kubectl.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait", "--timeout=120s")
    kubectl.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    team = queue("e2e-volcano", {A100: 2, H100: 2})
    team["spec"]["capability"] = {"cpu": "10", "memory": "10Gi"}  # capacity-card: no capability means 0 cpu/memory
    kubectl.apply(team)
    yield node
    kubectl.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait", "--timeout=120s")
    kubectl.run("delete", "queue", "e2e-volcano", "e2e-volcano-a100", "--ignore-not-found")


def _job(name: str, replicas: int, card: str = f"{H100}|{A100}", queue_name: str = "e2e-volcano") -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "annotations": {"volcano.sh/card.request": json.dumps({card: replicas})}},
            "spec": {"schedulerName": "volcano", "queue": queue_name, "minAvailable": replicas,
                     "tasks": [{"name": "worker", "replicas": replicas, "template": {
                         "metadata": {"annotations": {"volcano.sh/card.name": card}},
                         "spec": {"restartPolicy": "Never", "containers": [{
                             "name": "w", "image": "registry.k8s.io/pause:3.10",
                             "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "10m"}}}]}}}]}}


def _pods(kubectl: Kubectl, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kubectl.run("get", "pods", "-n", NAMESPACE, "-l", selector, "-o",
                                                         "json").stdout)["items"]
    return items


def test_a_multi_card_job_runs_within_the_queue_quota_and_a_bigger_one_waits(kubectl: Kubectl, volcano: str) -> None:
    kubectl.apply(_job("fits", 2))
    def both_bound() -> bool | None:
        bound = [p for p in _pods(kubectl, "volcano.sh/job-name=fits") if p["spec"].get("nodeName") == volcano]
        return True if len(bound) == 2 else None

    until(both_bound, what="both pods of the job bound by Volcano")
    # Two more A100 would exceed the queue's A100 quota of 2 (no H100 node here): the second job stays unbound.
    kubectl.apply(_job("waits", 2))
    until(lambda: True if len(_pods(kubectl, "volcano.sh/job-name=waits")) == 2 else None, what="pods created")
    assert all(not p["spec"].get("nodeName") for p in _pods(kubectl, "volcano.sh/job-name=waits"))


def _podgroup_of(kubectl: Kubectl, job: str) -> str | None:
    groups = json.loads(kubectl.run("get", "podgroups", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    names = [g["metadata"]["name"] for g in groups
             if any(o.get("name") == job for o in g["metadata"].get("ownerReferences") or [])]
    return names[0] if names else None


def test_a_job_over_its_queues_card_quota_waits_and_kubectl_describe_says_why(kubectl: Kubectl, volcano: str) -> None:
    """Two A100 held by one job of a queue allowed two: the next one's PodGroup stays Pending (the extender refuses
    to enqueue it, so Volcano creates none of its pods) and `kubectl describe` shows cardquota's event with the
    seed's reason and wording (capacity-card-design.md, "Event reasons")."""
    team = queue("e2e-volcano-a100", {A100: 2})
    team["spec"]["capability"] = {"cpu": "10", "memory": "10Gi"}
    kubectl.apply(team)
    kubectl.apply(_job("holds", 2, A100, "e2e-volcano-a100"))
    until(lambda: True if len([p for p in _pods(kubectl, "volcano.sh/job-name=holds")
                                if p["spec"].get("nodeName")]) == 2 else None, what="both A100 held")
    kubectl.apply(_job("over", 2, A100, "e2e-volcano-a100"))
    group = until(lambda: _podgroup_of(kubectl, "over"), what="the PodGroup of the job over its quota")
    expected = insufficient("e2e-volcano-a100", A100, 2, 4, 2)

    def described() -> str | None:
        text = kubectl.run("describe", "podgroup", group, "-n", NAMESPACE).stdout
        return text if "InsufficientScalarQuota" in text else None

    text = until(described, what=f"cardquota's event in kubectl describe podgroup {group}")
    assert expected in " ".join(text.split()), text  # describe wraps long messages
    assert kubectl.get("podgroup", group, NAMESPACE)["status"].get("phase") in ("Pending", None)
    assert not _pods(kubectl, "volcano.sh/job-name=over")  # never enqueued: Volcano made none of its pods


def test_an_mgpu_pod_gets_its_card_indexes_from_the_extender(kubectl: Kubectl, volcano: str) -> None:
    manifest = yaml.safe_load(f"""
apiVersion: v1
kind: Pod
metadata: {{name: infer, namespace: {NAMESPACE}, annotations: {{scheduling.volcano.sh/queue-name: e2e-volcano}}}}
spec:
  schedulerName: volcano
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources:
      limits: {{vke.volcengine.com/mgpu-core: "30", vke.volcengine.com/mgpu-memory: "4096"}}
      requests: {{cpu: 10m}}
""")
    kubectl.apply(manifest)

    def annotated() -> dict[str, str] | None:
        annotations = kubectl.get("pod", "infer", NAMESPACE)["metadata"].get("annotations", {})
        return annotations if "vke.volcengine.com/assumed" in annotations else None

    annotations = until(annotated, what="the mGPU result annotations")
    assert annotations["vke.volcengine.com/gpu-index-container-c"] == "0"
