"""``cardquota check`` on what upstream projects produce (issue 18): generateName objects (item 1) and an offline
UPDATE merged onto the object in the cluster file as ``kubectl apply`` merges it (item 4)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import yaml
from builders import gpu_node, queue

from cardquota.cli.check import Identity, stored_as, to_admit
from cardquota.cli.main import run
from cardquota.core.objects import completed
from cardquota.webhooks.review import AdmissionRequest


def write(path: Path, *manifests: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump_all(manifests, sort_keys=False))
    return str(path)


def check(*argv: str) -> tuple[int, Any, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run("cardquota", ["check", *argv, "-o", "json"], stdout=out, stderr=err)
    return code, json.loads(out.getvalue()) if out.getvalue().startswith("[") else out.getvalue(), err.getvalue()


def generated_job(prefix: str = "train-", card: str = "NVIDIA-A100", gpus: int = 2) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": prefix, "namespace": "ml"},
            "spec": {"template": {
                "metadata": {"annotations": {"volcano.sh/card.name": card}},
                "spec": {"schedulerName": "volcano", "restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu":
                                                                                             str(gpus)}}}]}}}}


def test_generate_name_objects_are_checked_like_named_ones(tmp_path: Path) -> None:
    """Item 1: no whole-file exit 2; rows say the generateName; the rules run (a bad card name is denied)."""
    workflow = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                "metadata": {"generateName": "hello-world-"}, "spec": {"entrypoint": "main"}}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "cm-"}, "data": {"a": "b"}}
    path = write(tmp_path / "in.yaml", workflow, configmap, generated_job(), generated_job(card="NVIDIA-A100|"))
    code, verdicts, err = check("-f", path)
    assert code == 1, err
    assert [(v["kind"], v["namespace"], v["name"], v["allowed"]) for v in verdicts] == [
        ("Workflow", "default", "hello-world-*", True), ("ConfigMap", "default", "cm-*", True),
        ("Job", "ml", "train-*", True), ("Job", "ml", "train-*", False)]


def test_two_objects_from_one_generate_name_are_two_creates(tmp_path: Path) -> None:
    """Item 1: the second ``train-`` Job is not an update of the first: both are kept, under distinct keys."""
    existing: dict[Identity, Any] = {}
    for _ in range(3):
        key, manifest, old = to_admit(generated_job(), existing)
        assert (key, old) == (("batch", "Job", "ml", "train-*"), None)
        stored, admitted = stored_as(manifest, existing)
        existing[stored] = admitted
    assert sorted(key[3] for key in existing) == ["train-*", "train-*2", "train-*3"]
    code, verdicts, _ = check("-f", write(tmp_path / "in.yaml", generated_job(), generated_job()))
    assert (code, [v["name"] for v in verdicts]) == (0, ["train-*", "train-*"])


def test_the_webhook_and_check_complete_a_generated_name_the_same_way() -> None:
    """Item 1: one function names the object for both."""
    job = generated_job()
    request = AdmissionRequest(uid="u", group="batch", kind="Job", operation="CREATE", namespace="ml", name="",
                               object=job, old_object=None, dry_run=False)
    assert request.policy_object() == completed(job)
    assert request.identity == "Job ml/train-*"


def test_a_node_update_is_merged_onto_the_node_in_the_cluster_file(tmp_path: Path) -> None:
    """Item 4: a Node manifest with only a crossquota annotation, for a node the cluster file has, is judged with
    that node's labels and status (kubectl apply merges onto the live object), not denied for its status."""
    cluster = write(tmp_path / "cluster.yaml", gpu_node("gpu-1", "NVIDIA-A100", 8), queue("q", {"NVIDIA-A100": 8}))
    ok = {"apiVersion": "v1", "kind": "Node",
          "metadata": {"name": "gpu-1", "annotations": {"volcano.sh/crossquota-cpu": "32"}}}
    too_much = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "gpu-1", "annotations": {"volcano.sh/crossquota-cpu": "999"}}}
    code, verdicts, _err = check("--cluster", cluster, "-f", write(tmp_path / "node.yaml", ok))
    assert (code, verdicts[0]["allowed"]) == (0, True), verdicts[0]["message"]
    code, verdicts, _ = check("--cluster", cluster, "-f", write(tmp_path / "node2.yaml", too_much))
    assert code == 1
    assert "allocatable" in verdicts[0]["message"]
    assert "status.allocatable" not in verdicts[0]["message"]
