"""Issue 40, item 5 (explain -f): ``kubectl cardquota explain -f FILE`` runs simulate's enqueue and placement on what
FILE submits, says the cards it would request, and when a pod cannot be placed names what holds the cards it lacks
on the nodes offering them — whatever their scheduler — or says plainly what it did not check."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import yaml
from builders import gpu_node, pod, queue

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
