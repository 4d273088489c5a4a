"""The corpus of upstream-shaped examples (issue 18, tests/data/upstream_shaped/): every file goes through
``cardquota check`` with the GFD/NFD-labelled cluster; no well-formed object stops a file with exit 2, and the
verdicts are the ones issue 18 asks for (items 1, 2, 4, 5, 6, 8)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from cardquota.cli.main import run

CORPUS = Path(__file__).resolve().parents[1] / "data" / "upstream_shaped"
CLUSTER = CORPUS / "cluster.yaml"
FILES = sorted(path.name for path in CORPUS.glob("*.yaml") if path != CLUSTER)


def check(name: str) -> tuple[int, list[dict[str, Any]], str]:
    out, err = io.StringIO(), io.StringIO()
    code = run("cardquota", ["check", "--cluster", str(CLUSTER), "-f", str(CORPUS / name), "-o", "json"],
               stdout=out, stderr=err)
    return code, json.loads(out.getvalue()) if out.getvalue().startswith("[") else [], err.getvalue()


def rows(verdicts: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    return [(verdict["kind"], verdict["name"], verdict["allowed"]) for verdict in verdicts]


@pytest.mark.parametrize("name", FILES)
def test_no_well_formed_file_is_refused_whole(name: str) -> None:
    code, verdicts, err = check(name)
    assert code in (0, 1), err
    assert verdicts, err


def test_generate_name_objects_and_kinds_no_rule_concerns() -> None:
    """Item 1."""
    for name, expected in [
        ("generatename-jobs.yaml", [("Job", "sample-job-*", True), ("Job", "train-*", True),
                                    ("Pod", "debug-*", True), ("ConfigMap", "run-config-*", True)]),
        ("argo-workflow.yaml", [("Workflow", "hello-world-*", True), ("Workflow", "gpu-step-*", True)]),
        ("tekton-pipelinerun.yaml", [("PipelineRun", "build-and-test-run-*", True)]),
        ("jobset.yaml", [("JobSet", "pytorch-*", True)]),
    ]:
        code, verdicts, _ = check(name)
        assert (code, rows(verdicts)) == (0, expected), name


def test_the_elastic_volcano_job_is_allowed_with_the_gangs_request_and_a_warning() -> None:
    """Item 2."""
    code, verdicts, _ = check("elastic-vcjob.yaml")
    assert code == 0
    assert verdicts[0]["patch"][0]["value"] == {"volcano.sh/card.request": '{"NVIDIA-A100-SXM4-80GB":1}'}
    assert verdicts[0]["warnings"] == [
        "volcano.sh/card.request set to the gang's 1 NVIDIA-A100-SXM4-80GB (minAvailable's pods); all 20 pods need 20 "
        "NVIDIA-A100-SXM4-80GB, but queue team-a allows at most 16: at most 16 of those cards are ever in use, the "
        "other pods stay Pending"]


def test_a_node_annotation_update_is_judged_on_the_node_in_the_cluster() -> None:
    """Item 4."""
    code, verdicts, _ = check("node-update.yaml")
    assert (code, rows(verdicts)) == (0, [("Node", "a100-whole", True)])


def test_volcano_cronjobs_go_through_the_job_rules() -> None:
    """Item 5."""
    code, verdicts, _ = check("volcano-cronjob.yaml")
    assert (code, rows(verdicts)) == (1, [("CronJob", "nightly-eval", True), ("CronJob", "nightly-broken", False)])
    assert verdicts[1]["violations"] == [{
        "path": 'spec.jobTemplate.spec.tasks[0].template.metadata.annotations["volcano.sh/card.name"]',
        "reason": "FieldValueInvalid",
        "message": 'task eval: "NVIDIA-A100-SXM4-80GB|" has an empty alternative'}]


def test_hami_pods_are_one_card_each(tmp_path: Path) -> None:
    """Item 8: allowed as one card (HAMi's memory, cores and percentage are not cards), and counted so — also when
    no node offers a card type yet (each was counted as 3,031 and 51 cards)."""
    code, verdicts, _ = check("hami-pods.yaml")
    assert (code, rows(verdicts)) == (0, [("Pod", "hami-gpu-pod", True), ("Pod", "hami-gpu-percentage", True)])
    queue_only = tmp_path / "queue.yaml"
    queue_only.write_text(CLUSTER.read_text().rpartition("---\n")[2])
    for cluster in (CLUSTER, queue_only):
        out = io.StringIO()
        assert run("cardquota", ["usage", "--cluster", str(cluster), "--cluster", str(CORPUS / "hami-pods.yaml"),
                                 "-o", "json"], stdout=out, stderr=io.StringIO()) == 0
        assert json.loads(out.getvalue())["queues"]["team-a"]["pending"] == {"NVIDIA-A100-SXM4-80GB": 2}, cluster


def test_the_cluster_discovers_gfd_whole_mig_mps_and_time_slicing() -> None:
    out = io.StringIO()
    assert run("cardquota", ["discover", "-f", str(CLUSTER), "-o", "json"], stdout=out, stderr=io.StringIO()) == 0
    assert json.loads(out.getvalue())["totals"] == {
        "NVIDIA-A100-SXM4-40GB/mig-1g.5gb-mixed": 14, "NVIDIA-A100-SXM4-40GB/mig-3g.20gb-mixed": 4,
        "NVIDIA-A100-SXM4-80GB": 16, "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb": 56, "NVIDIA-L40S/mps-45g*1/4": 16,
        "Tesla-T4-SHARED": 8}
