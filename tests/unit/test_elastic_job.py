"""Elastic Volcano Jobs (issue 18 item 2) and the pod rules' warnings on task templates (item 6).

One answer for an elastic job: 20 replicas, ``minAvailable: 1``, no card.request, queue quota 16. ``check`` fills
card.request with what the gang needs to be enqueued (minAvailable's pods, as Volcano computes minResources) and
warns, with the numbers, that all 20 pods need more than the queue allows; ``simulate`` enqueues it and places 16
pods; ``explain`` finds nothing blocking it."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import yaml
from builders import gpu_node, queue

from cardquota.cli.main import run
from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig

A100 = "NVIDIA-A100"


def elastic_job(replicas: int = 20, min_available: int | None = 1, *, cards: int = 1,
                tasks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"queue": "team-a", "schedulerName": "volcano", "tasks": tasks or [worker(replicas, cards)]}
    if min_available is not None:
        spec["minAvailable"] = min_available
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "elastic", "namespace": "ml"}, "spec": spec}


def worker(replicas: int, cards: int = 1, name: str = "worker", min_available: int | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {"name": name, "replicas": replicas, "template": {
        "metadata": {"annotations": {"volcano.sh/card.name": A100}},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(cards)}}}]}}}
    if min_available is not None:
        task["minAvailable"] = min_available
    return task


def cluster(tmp_path: Path) -> str:
    manifests = [gpu_node(f"gpu-{index}", A100, 8) for index in range(3)] + [queue("team-a", {A100: 16})]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(manifests, sort_keys=False))
    return str(path)


def job_file(tmp_path: Path, job: dict[str, Any]) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return str(path)


def cli(program: str, *argv: str) -> tuple[int, Any]:
    out, err = io.StringIO(), io.StringIO()
    code = run(program, list(argv), stdout=out, stderr=err)
    assert code in (0, 1), err.getvalue()
    return code, json.loads(out.getvalue())


def test_check_simulate_and_explain_give_one_answer_for_an_elastic_job(tmp_path: Path) -> None:
    """Item 2: the Job was denied by the card.request check itself filled in (20 > 16)."""
    clusterfile, jobfile = cluster(tmp_path), job_file(tmp_path, elastic_job())
    code, verdicts = cli("cardquota", "check", "--cluster", clusterfile, "-f", jobfile, "-o", "json")
    assert code == 0, verdicts[0]["message"]
    assert verdicts[0]["patch"] == [{"op": "add", "path": "/metadata/annotations",
                                     "value": {"volcano.sh/card.request": '{"NVIDIA-A100":1}'}}]
    assert verdicts[0]["warnings"] == [
        "volcano.sh/card.request set to the gang's 1 NVIDIA-A100 (minAvailable's pods); all 20 pods need 20 "
        "NVIDIA-A100, but queue team-a allows at most 16: at most 16 of those cards are ever in use, the other "
        "pods stay Pending"]
    code, simulated = cli("cardquota", "simulate", "--cluster", clusterfile, "-f", jobfile, "-o", "json")
    assert simulated["podgroups"]["ml/elastic"] == {"phase": "Running"}
    assert sum(1 for placement in simulated["placements"].values() if placement["node"]) == 16
    code, explained = cli("kubectl cardquota", "explain", "job/elastic", "-n", "ml", "--cluster", clusterfile,
                          "-f", jobfile, "-o", "json")
    assert (code, explained[0]["blocked"], explained[0]["blockers"]) == (0, False, [])
    # The Job as the webhook stored it (with the derived card.request) runs the same way.
    stored = copy.deepcopy(elastic_job())
    stored["metadata"]["annotations"] = {"volcano.sh/card.request": '{"NVIDIA-A100":1}'}
    code, simulated = cli("cardquota", "simulate", "--cluster", clusterfile, "-f", job_file(tmp_path, stored),
                          "-o", "json")
    assert sum(1 for placement in simulated["placements"].values() if placement["node"]) == 16


def request_of(job: dict[str, Any], quota: int = 64) -> tuple[bool, str | None]:
    ledger = Ledger.build([gpu_node("gpu-0", A100, 8), queue("team-a", {A100: quota})])
    ledger.snapshot.complete = True
    verdict = admit(job, None, ledger.snapshot, PolicyConfig())
    values = [op["value"] for op in verdict.patch]
    return verdict.allowed, values[0]["volcano.sh/card.request"] if values else None


def test_the_derived_request_is_the_gang_as_volcano_counts_min_resources() -> None:
    """Item 2: minAvailable's pods (each task's minAvailable first), not replicas x cards."""
    assert request_of(elastic_job(20, 1)) == (True, '{"NVIDIA-A100":1}')
    assert request_of(elastic_job(20, 4, cards=2)) == (True, '{"NVIDIA-A100":8}')
    assert request_of(elastic_job(20, None)) == (True, '{"NVIDIA-A100":20}')  # default: every replica
    two_tasks = [worker(4, name="a", min_available=1), worker(6, cards=2, name="b", min_available=2)]
    assert request_of(elastic_job(tasks=two_tasks, min_available=3)) == (True, '{"NVIDIA-A100":5}')  # 1 + 2 x 2
    assert request_of(elastic_job(20, 17), quota=16) == (False, None)  # the gang itself never fits
    # A partition policy that sets minPartitions is the task's minimum when it writes none (Volcano v1.15.1
    # mutate_job.go mutateSpec): 16 replicas in 8 partitions of 2, 3 partitions needed -> 6 pods of 2 cards.
    partitioned = worker(16, cards=2)
    partitioned["partitionPolicy"] = {"totalPartitions": 8, "partitionSize": 2, "minPartitions": 3}
    assert request_of(elastic_job(tasks=[partitioned], min_available=None)) == (True, '{"NVIDIA-A100":12}')


def test_a_task_without_replicas_has_no_pods() -> None:
    """A task that writes no ``replicas`` has none: ``TaskSpec.Replicas`` is an int32 with no default in Volcano's
    Job CRD or its mutating webhook (staging/src/volcano.sh/apis/pkg/apis/batch/v1alpha1/job.go; mutate_job.go
    ``createPatch``; ``validateJobCreate`` in admit_job.go adds it up as 0, v1.15.1), so the job controller
    creates no pod of it and the Job's cards are the other task's: no "all pods" warning about it."""
    bare = worker(1, name="bare")
    del bare["replicas"]
    job = elastic_job(tasks=[worker(2, name="a"), bare], min_available=None)
    ledger = Ledger.build([gpu_node("gpu-0", A100, 8), queue("team-a", {A100: 2})])
    ledger.snapshot.complete = True
    verdict = admit(job, None, ledger.snapshot, PolicyConfig())
    assert verdict.allowed, verdict.message
    assert [op["value"] for op in verdict.patch] == [{"volcano.sh/card.request": '{"NVIDIA-A100":2}'}]
    assert verdict.warnings == ()


def test_affinity_typos_are_warned_about_on_task_templates() -> None:
    """Item 6: the Pod policy's affinity-typo warning, at the task template's path."""
    job = elastic_job()
    job["spec"]["tasks"][0]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoreDuringExecution": {"nodeSelectorTerms": []}}}
    ledger = Ledger.build([gpu_node("gpu-0", A100, 8), queue("team-a", {A100: 64})])
    verdict = admit(job, None, ledger.snapshot, PolicyConfig())
    assert verdict.allowed
    assert verdict.warnings[0] == (
        "spec.tasks[0].template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoreDuringExecution is not a "
        "Kubernetes field and is ignored (did you mean requiredDuringSchedulingIgnoredDuringExecution?)")
