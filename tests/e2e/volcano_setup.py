"""Volcano's scheduler configured with cardquota's extender stanza, as the README installs it, for the test modules
that need it (each module gets its own, put back when it is done), and helpers to make Volcano Jobs and read their
pods."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from builders import gpu_labels, queue
from e2e.cluster import (
    Kubectl,
    apply_over,
    cardquota_plugin,
    fake_gpus,
    gpu_node_name,
    replace_scheduler_config,
    wait_admitting,
)
from e2e.undo import UndoLog

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "cardquota-e2e-volcano"
A100, H100 = "NVIDIA-A100", "NVIDIA-H100"


@pytest.fixture(scope="module")
def volcano(kubectl: Kubectl, module_undo: UndoLog, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Volcano (installed by the session fixture, the Makefile's pinned VOLCANO_VERSION; extender allocate/deallocate
    and managedResources need v1.13+) with cardquota's extender deployed, the GPU node offering 4 A100 whole cards
    and 4 mGPU cards, and the scheduler's configuration made as the README's install step 5 makes it (``kubectl
    cardquota scheduler-conf``: the live configuration with the extender's entry merged in, its managedResources the
    card resources the nodes offer) — every change recorded in the module's undo log and put back when the module is
    done."""
    kubectl.run("-n", "volcano-system", "rollout", "status", "deployment/volcano-scheduler", "--timeout=300s")
    overlays = REPO / "manifests" / "overlays"
    apply_over(kubectl, module_undo, str(overlays / "dev-extender"), str(overlays / "dev"))
    kubectl.run("-n", "cardquota-system", "rollout", "status", "deployment/cardquota-extender", "--timeout=180s")
    node = gpu_node_name(kubectl)
    fake_gpus(kubectl, module_undo, node, gpu_labels(A100, count=4, memory=81920), {
        "nvidia.com/gpu": "4", "vke.volcengine.com/mgpu-core": "400", "vke.volcengine.com/mgpu-memory": "98304"})
    merged = tmp_path_factory.mktemp("scheduler") / "scheduler.yaml"
    merged.write_text(cardquota_plugin(kubectl, "scheduler-conf").stdout)
    replace_scheduler_config(kubectl, module_undo, str(merged))
    kubectl.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait", "--timeout=120s")
    kubectl.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    wait_admitting(kubectl)
    team = queue("e2e-volcano", {A100: 2, H100: 2})
    team["spec"]["capability"] = {"cpu": "10", "memory": "10Gi"}  # capacity-card: no capability means 0 cpu/memory
    kubectl.apply(team)
    yield node
    kubectl.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait", "--timeout=120s")
    queues = [q for q in json.loads(kubectl.run("get", "queues", "-o", "json").stdout)["items"]
              if q["metadata"]["name"].startswith("e2e-")]
    parents = {q["spec"].get("parent") for q in queues}
    for round_ in ([q for q in queues if q["metadata"]["name"] not in parents],  # children before their parents
                   [q for q in queues if q["metadata"]["name"] in parents]):
        if round_:
            kubectl.run("delete", "queue", *[q["metadata"]["name"] for q in round_], "--ignore-not-found", "--wait")


def job(name: str, replicas: int, card: str = f"{H100}|{A100}", queue_name: str = "e2e-volcano") -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "annotations": {"volcano.sh/card.request": json.dumps({card: replicas})}},
            "spec": {"schedulerName": "volcano", "queue": queue_name, "minAvailable": replicas,
                     "tasks": [{"name": "worker", "replicas": replicas, "template": {
                         "metadata": {"annotations": {"volcano.sh/card.name": card}},
                         "spec": {"restartPolicy": "Never", "containers": [{
                             "name": "w", "image": "registry.k8s.io/pause:3.10",
                             "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "10m"}}}]}}}]}}


def pods(kubectl: Kubectl, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kubectl.run("get", "pods", "-n", NAMESPACE, "-l", selector, "-o",
                                                         "json").stdout)["items"]
    return items


def podgroup_of(kubectl: Kubectl, job: str) -> str | None:
    groups = json.loads(kubectl.run("get", "podgroups", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    names = [g["metadata"]["name"] for g in groups
             if any(o.get("name") == job for o in g["metadata"].get("ownerReferences") or [])]
    return names[0] if names else None
