"""Issue 40, item 5 (explain -f): ``kubectl cardquota explain -f FILE`` runs simulate's enqueue and placement on what
FILE submits, says the cards it would request, and when a pod cannot be placed names what holds the cards it lacks
on the nodes offering them — whatever their scheduler — or says plainly what it did not check."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import yaml
from builders import gpu_node, pod, queue, train_job, trainer_runtime

from cardquota.cli.main import run
from cardquota.core.explain import explain, explain_submitted
from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.session import SchedulerConfig

H100 = "NVIDIA-H100-80GB-HBM3"
UNLIMITED = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True))


def mpi_job(gpus: int) -> dict[str, Any]:
    """A Volcano Job (MPI shaped: a launcher without cards and one worker asking ``gpus`` H100)."""
    worker = {"name": "worker", "replicas": 1, "template": {
        "metadata": {"annotations": {"volcano.sh/card.name": H100}},
        "spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}
    launcher = {"name": "launcher", "replicas": 1, "template": {"spec": {"containers": [{"name": "l"}]}}}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "mpi", "namespace": "ml", "annotations": {
                "volcano.sh/card.request": json.dumps({H100: gpus})}},
            "spec": {"schedulerName": "volcano", "queue": "ml", "minAvailable": 2,
                     "plugins": {"mpi": ["--master=launcher", "--worker=worker"]},
                     "tasks": [launcher, worker]}}


def notebook() -> dict[str, Any]:
    """2 H100 held by a pod of the default scheduler: no queue is charged for them, the node has them no more."""
    manifest = pod("notebook-0", namespace="ml", gpus=2, node_name="h100-03", phase="Running")
    manifest["spec"].pop("schedulerName", None)
    return manifest


CLUSTER = [gpu_node("h100-03", H100, 8), queue("ml", {H100: 8}), notebook()]


def test_a_job_simulate_cannot_place_names_the_holder_of_the_cards_it_lacks() -> None:
    job = mpi_job(8)
    assert not explain([*CLUSTER, job], job, UNLIMITED).blocked  # (the rules alone: "Nothing … blocks it")
    [explanation] = explain_submitted(CLUSTER, [job], [job], UNLIMITED)
    assert explanation.blocked
    assert f"Its 2 pods would request 8 cards of {H100}." in explanation.facts
    assert explanation.blockers[0].startswith("simulate cannot place pod ml/mpi-worker-0 (and 1 more of its pods): "
                                              "0/1 nodes are available")
    assert explanation.blockers[1:] == [f"2 {H100} on h100-03 are held by pod ml/notebook-0 of scheduler "
                                        "default-scheduler."]


def test_a_job_that_fits_says_where_simulate_places_it() -> None:
    job = mpi_job(6)
    [explanation] = explain_submitted(CLUSTER, [job], [job], UNLIMITED)
    assert not explanation.blocked
    assert (f"simulate places them: ml/mpi-launcher-0 on h100-03, ml/mpi-worker-0 on h100-03 ({H100})."
            in explanation.facts)


def test_what_was_not_checked_is_said() -> None:
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "alone", "namespace": "ml"}, "spec": {"queue": "ml", "minMember": 1}}
    [explanation] = explain_submitted(CLUSTER, [group], [group], UNLIMITED)
    assert "Not checked: where its pods would go (the input holds none of them to place)." in explanation.facts


def test_the_plugin_explains_a_file_with_simulate(tmp_path: Path) -> None:
    cluster, workload = tmp_path / "cluster.yaml", tmp_path / "job.yaml"
    cluster.write_text(yaml.safe_dump_all(CLUSTER))
    workload.write_text(yaml.safe_dump(mpi_job(8)))
    out, err = io.StringIO(), io.StringIO()
    code = run("kubectl cardquota", ["explain", "-f", str(workload), "--cluster", str(cluster), "-o", "json"],
               stdout=out, stderr=err)
    assert code == 1
    [document] = json.loads(out.getvalue())
    assert document["blocked"] is True
    assert any("held by pod ml/notebook-0 of scheduler default-scheduler" in line for line in document["blockers"])


def pytorch_job(gpus: int, workers: int = 1) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"volcano.sh/card.name": H100}},
                "spec": {"containers": [{"name": "m", "image": "m",
                                         "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt", "namespace": "ml"},
            "spec": {"runPolicy": {"schedulingPolicy": {"queue": "ml"}},
                     "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": workers, "template": template}}}}


def test_a_pytorchjob_is_explained_as_the_podgroup_and_pods_its_operator_creates() -> None:
    job = pytorch_job(4)
    [explanation] = explain_submitted(CLUSTER, [job], [job], UNLIMITED)
    assert explanation.subject == "PyTorchJob ml/pt"
    assert explanation.facts[0] == "Its operator (Kubeflow training operator v1.9) creates PodGroup ml/pt and 2 pods."
    assert f"Its 2 pods would request 8 cards of {H100}." in explanation.facts
    assert explanation.blocked  # 8 cards, but the notebook holds 2 of the node's 8
    assert explanation.blockers[0].startswith("simulate cannot place pod ml/pt-")
    assert explanation.blockers[1:] == [f"2 {H100} on h100-03 are held by pod ml/notebook-0 of scheduler "
                                        "default-scheduler."]
    fits = pytorch_job(3)
    fits["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 0
    [placed] = explain_submitted(CLUSTER, [fits], [fits], UNLIMITED)
    assert not placed.blocked
    assert any(fact.startswith("simulate places it: ml/pt-master-0 on h100-03") for fact in placed.facts)


def test_a_gang_its_queue_can_never_hold_is_refused_as_admission_refuses_it() -> None:
    job = pytorch_job(8, workers=1)  # 16 cards, queue ml allows 8
    explanation = explain([*CLUSTER, job], job, UNLIMITED)
    assert explanation.blockers[0] == (
        "Admission refuses it: spec: its PodGroup pt (Kubeflow training operator v1.9, minMember 2): the "
        f'volcano.sh/card.request derived from its pods ({{"{H100}":16}}: 1 pod of role Master × 8 + 1 pod of role '
        f"Worker × 8) requests 16 {H100} but queue ml allows at most 8: it can never run")


def test_a_trainjob_without_its_runtime_is_said_not_checked_and_with_it_is_explained() -> None:
    runtime = trainer_runtime("torch", queue="ml", card=H100, namespace="ml")
    train = train_job("tj", {"kind": "TrainingRuntime", "name": "torch"})
    alone = explain([*CLUSTER, train], train, UNLIMITED)
    assert not alone.blocked
    assert alone.facts == ["Not checked: its pods are built from the TrainingRuntime ml/torch its runtimeRef names, "
                           "which was not among the objects read, so cardquota checks them when they are created."]
    [explanation] = explain_submitted(CLUSTER, [train, runtime], [train], UNLIMITED)
    assert explanation.facts[0] == ("Its operator (Kubeflow Trainer v2.3 with TrainingRuntime torch) creates PodGroup "
                                    "ml/tj and 2 pods.")
    assert f"Its 2 pods would request 8 cards of {H100}." in explanation.facts
    assert explanation.blocked  # 8 cards on a node where the notebook holds 2
    assert explanation.blockers[1:] == [f"2 {H100} on h100-03 are held by pod ml/notebook-0 of scheduler "
                                        "default-scheduler."]
