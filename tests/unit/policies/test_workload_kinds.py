"""The registered workload kinds (issue 40, item 2): Kubeflow training jobs, KubeRay, JobSet, LeaderWorkerSet — each
template through the Pod policy at its path, each PodGroup its operator creates judged like a Volcano Job's gang
(a minimum the queue can never hold is denied; an elastic remainder is a warning), and any other kind with a pod
template named as not checked."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import gpu_node, queue
from verdicts import violations_of

from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.snapshot import CardPolicy, UnquotedQueues
from cardquota.core.violations import Reason
from cardquota.core.workload_kinds import gang_of

H100 = "NVIDIA-H100"
DATA = Path(__file__).resolve().parents[2] / "data" / "upstream_kinds"


def snapshot(quota: int = 16) -> Any:
    built = Ledger.build([gpu_node(f"h{index}", H100, 8) for index in range(4)]
                         + [queue("train", {H100: quota})]).snapshot
    built.complete = True
    return built


def card_template(gpus: int, *, card: str = H100, scheduler: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trainer",
                                            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"metadata": {"annotations": {"volcano.sh/card.name": card}}, "spec": spec}


def pytorchjob(workers: int, gpus: int = 8, *, min_available: int | None = None) -> dict[str, Any]:
    policy: dict[str, Any] = {"queue": "train"}
    if min_available is not None:
        policy["minAvailable"] = min_available
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "llm", "namespace": "ml"},
            "spec": {"runPolicy": {"schedulingPolicy": policy},
                     "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": card_template(gpus)},
                                             "Worker": {"replicas": workers, "template": card_template(gpus)}}}}


def volcano_job(tasks: int, gpus: int = 8) -> dict[str, Any]:
    template = card_template(gpus, scheduler="volcano")
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "llm", "namespace": "ml"},
            "spec": {"queue": "train", "tasks": [{"name": "master", "replicas": 1, "template": template},
                                                 {"name": "worker", "replicas": tasks, "template": template}]}}


def test_a_pytorchjob_whose_gang_can_never_fit_is_refused_as_the_same_volcano_job_is() -> None:
    """32 H100 (4 pods of 8) in a queue allowing 16: "it can never run", for both ways of writing the job."""
    as_pytorch = admit(pytorchjob(3), None, snapshot(), PolicyConfig())
    as_volcano = admit(volcano_job(3), None, snapshot(), PolicyConfig())
    assert not as_pytorch.allowed
    assert not as_volcano.allowed
    assert violations_of(as_pytorch) == [("spec", Reason.INVALID)]
    message = as_pytorch.violations[0].message
    assert "PodGroup llm" in message
    assert "minMember 4" in message
    assert message.endswith("requests 32 NVIDIA-H100 but queue train allows at most 16: it can never run")
    assert as_volcano.violations[0].message.endswith(
        "requests 32 NVIDIA-H100 but queue train allows at most 16: it can never run")
    assert admit(pytorchjob(1), None, snapshot(), PolicyConfig()).allowed  # 16: fits


def test_an_elastic_remainder_is_a_warning_not_a_denial() -> None:
    """minAvailable 2 of 4 pods: the gang (16) fits; the other two pods only wait for cards."""
    verdict = admit(pytorchjob(3, min_available=2), None, snapshot(), PolicyConfig())
    assert verdict.allowed
    (warning,) = verdict.warnings
    assert "must start with 16 NVIDIA-H100" in warning
    assert "all 4 pods need 32 NVIDIA-H100, but queue train allows at most 16" in warning


def test_the_operators_scheduler_and_queue_are_given_to_the_templates() -> None:
    """The template names no scheduler (the training operator sets volcano) and no queue (runPolicy's): the Pod
    policy judges the pods as created, so neither is refused."""
    verdict = admit(pytorchjob(1), None, snapshot(), PolicyConfig())
    assert (verdict.allowed, verdict.warnings) == (True, ())


def test_a_template_violation_is_at_the_templates_path() -> None:
    job = pytorchjob(1)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["volcano.sh/card.name"] = "A|"
    verdict = admit(job, None, snapshot(), PolicyConfig())
    assert violations_of(verdict) == [
        ('spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["volcano.sh/card.name"]', Reason.INVALID)]


def test_a_queue_that_does_not_exist_is_refused_where_the_operator_reads_it() -> None:
    job = pytorchjob(1)
    job["spec"]["runPolicy"]["schedulingPolicy"]["queue"] = "nope"
    assert violations_of(admit(job, None, snapshot(), PolicyConfig())) == [
        ("spec.runPolicy.schedulingPolicy.queue", Reason.NOT_FOUND)]


def test_a_training_job_without_a_scheduling_policy_is_a_volcano_gang_unless_its_templates_say_otherwise() -> None:
    """The training operator gangs every job on Volcano when it runs with --gang-scheduler-name=volcano
    (``EnableGangScheduling()`` in pkg/controller.v1/common/job.go, training-operator v1.9.0), policy or not: the job
    is judged in queue default, which does not exist here — not refused for using the default scheduler."""
    job = pytorchjob(1)
    del job["spec"]["runPolicy"]
    assert violations_of(admit(job, None, snapshot(), PolicyConfig())) == [
        ("spec.runPolicy.schedulingPolicy.queue", Reason.NOT_FOUND)]
    for role in job["spec"]["pytorchReplicaSpecs"].values():
        role["template"]["spec"]["schedulerName"] = "default-scheduler"
    assert ("spec.pytorchReplicaSpecs.Master.template.spec.schedulerName", Reason.NOT_SUPPORTED) in \
        violations_of(admit(job, None, snapshot(), PolicyConfig()))


def ray_cluster(workers: int, *, labels: dict[str, str] | None = None, autoscaling: bool = False) -> dict[str, Any]:
    written = {"volcano.sh/queue-name": "train"} if labels is None else labels
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "ml", "labels": written},
            "spec": {"enableInTreeAutoscaling": autoscaling,
                     "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "ray"}]}}},
                     "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "minReplicas": 1,
                                           "maxReplicas": 8, "template": card_template(8)}]}}


def test_a_card_request_written_on_a_ray_cluster_is_judged_as_its_podgroups_is() -> None:
    """KubeRay copies every annotation of the RayCluster onto its PodGroup (``createPodGroup``,
    pkg/scheduler/volcano/volcano_scheduler.go, v1.7.0): a written card.request is what Volcano enqueues it by."""
    cluster = ray_cluster(1)
    cluster["metadata"]["annotations"] = {"volcano.sh/card.request": json.dumps({H100: 100})}
    verdict = admit(cluster, None, snapshot(), PolicyConfig())
    assert violations_of(verdict) == [('metadata.annotations["volcano.sh/card.request"]', Reason.INVALID)]
    assert "requests 100 NVIDIA-H100" in verdict.message
    assert "allows at most 16: it can never run" in verdict.message
    cluster["metadata"]["annotations"] = {"volcano.sh/card.request": json.dumps({H100: 8})}
    assert admit(cluster, None, snapshot(), PolicyConfig()).allowed


def test_kuberay_reads_its_queue_label_and_sizes_the_gang_as_kuberay_does() -> None:
    assert not admit(ray_cluster(3), None, snapshot(), PolicyConfig()).allowed  # 24 of 16
    assert admit(ray_cluster(2), None, snapshot(), PolicyConfig()).allowed
    elastic = admit(ray_cluster(3, autoscaling=True), None, snapshot(), PolicyConfig())  # minReplicas 1: 8
    assert elastic.allowed
    assert "all 4 pods need 24 NVIDIA-H100" in elastic.warnings[0]
    shape = gang_of(ray_cluster(3))
    assert shape is not None
    assert [(group.name, group.min_member) for group in shape.groups] == [("ray-rc-pg", 4)]


def test_a_ray_cluster_not_on_volcano_has_its_templates_checked_and_no_gang() -> None:
    """No queue label, no scheduler label, no template naming volcano: its pods go to the default scheduler, which
    the Pod policy refuses for a card pod."""
    verdict = admit(ray_cluster(3, labels={}), None, snapshot(), PolicyConfig())
    assert ("spec.workerGroupSpecs[0].template.spec.schedulerName", Reason.NOT_SUPPORTED) in violations_of(verdict)


def lws(size: int, replicas: int = 1) -> dict[str, Any]:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "serve", "namespace": "ml", "annotations": {"scheduling.volcano.sh/queue-name":
                                                                             "train"}},
            "spec": {"replicas": replicas,
                     "leaderWorkerTemplate": {"size": size, "workerTemplate": card_template(8, scheduler="volcano")}}}


def test_a_leaderworkerset_group_is_one_podgroup_of_size_pods() -> None:
    assert not admit(lws(3), None, snapshot(), PolicyConfig()).allowed  # one group of 3 x 8 = 24
    more = admit(lws(2, replicas=2), None, snapshot(), PolicyConfig())  # each group 16: fits; two need 32
    assert more.allowed
    assert more.warnings == ("2 PodGroups like serve-0 need 32 NVIDIA-H100, queue train allows at most 16: the "
                             "groups beyond it wait",)


def jobset(parallelism: int, min_member: str | None = None) -> dict[str, Any]:
    job_metadata = {"annotations": {"scheduling.volcano.sh/group-min-member": min_member}} if min_member else {}
    template = card_template(8, scheduler="volcano")
    template["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] = "train"
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js", "namespace": "ml"},
            "spec": {"replicatedJobs": [{"name": "workers", "template": {
                "metadata": job_metadata, "spec": {"parallelism": parallelism, "template": template}}}]}}


def test_a_jobset_job_is_a_group_of_one_unless_its_job_asks_for_more() -> None:
    """Volcano's PodGroup controller gives each batch Job a PodGroup of minMember 1: pods beyond the quota wait."""
    verdict = admit(jobset(3), None, snapshot(), PolicyConfig())
    assert verdict.allowed
    assert "all 3 pods need 24 NVIDIA-H100" in verdict.warnings[0]
    assert not admit(jobset(3, "3"), None, snapshot(), PolicyConfig()).allowed


def test_an_unknown_kind_with_a_pod_template_is_named_as_not_checked() -> None:
    service = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "s"},
               "spec": {"rayClusterConfig": {"headGroupSpec": {"template": card_template(1)}}}}
    verdict = admit(service, None, snapshot(), PolicyConfig())
    assert verdict.allowed
    assert verdict.warnings == ("kind RayService (ray.io) is not checked: it holds a pod template "
                                "(spec.rayClusterConfig.headGroupSpec.template) whose pods cardquota checks only "
                                "when they are created",)
    train = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "t"},
             "spec": {"trainer": {"numNodes": 4}}}
    assert admit(train, None, snapshot(), PolicyConfig()).warnings[0].startswith(
        "kind TrainJob (trainer.kubeflow.org) is not checked: its pods are built from the ClusterTrainingRuntime "
        "its runtimeRef names, which was not among the objects read")
    plain = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}}
    assert admit(plain, None, snapshot(), PolicyConfig()).warnings == ()


def test_an_mpijob_of_mpi_operator_counts_the_launcher_and_reads_the_queue_annotation() -> None:
    manifest = yaml.safe_load((DATA / "mpijob-v2beta1-tensorflow-benchmarks.yaml").read_text())
    manifest["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": "train"}
    shape = gang_of(manifest)
    assert shape is not None
    assert shape.queue == "train"
    assert [group.min_member for group in shape.groups] == [3]  # 2 workers + the launcher


@pytest.mark.parametrize("name", sorted(path.name for path in DATA.glob("*.yaml")))
def test_the_upstream_examples_are_read_and_admitted(name: str) -> None:
    """Each example from the operators' repositories (tests/data/upstream_kinds/README.md) is read without error;
    those not on Volcano, or asking for no card, are allowed (in a cluster with Volcano's default queue, which they
    land in, unquoted queues unlimited: the examples name no card type)."""
    cluster = Ledger.build([gpu_node(f"h{index}", H100, 8) for index in range(4)] + [queue("train", {H100: 16}),
                                                                                     queue("default")],
                           card_policy=CardPolicy(unquoted_queues=UnquotedQueues.UNLIMITED)).snapshot
    cluster.complete = True
    for manifest in yaml.safe_load_all((DATA / name).read_text()):
        if manifest is None:
            continue
        verdict = admit(copy.deepcopy(manifest), None, cluster, PolicyConfig())
        if gang_of(manifest) is not None:
            assert verdict.allowed or any("schedulerName" in v.path for v in verdict.violations), verdict


def trainer_pair(*, num_nodes: int = 4, gpus: int = 8, queue_patch: str | None = None,
                 mpi_launcher_as_node: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """kubeflow/trainer v2.3.0's Volcano example (tests/data/upstream_kinds/trainjob-volcano.yaml): its
    ClusterTrainingRuntime (queue ``train`` in its template's annotations, a card annotation on the pods) and its
    TrainJob asking ``gpus`` per node through ``resourcesPerNode``."""
    runtime, job = (m for m in yaml.safe_load_all((DATA / "trainjob-volcano.yaml").read_text()) if m)
    runtime["spec"]["template"]["metadata"] = {"annotations": {"scheduling.volcano.sh/queue-name": "train"}}
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["metadata"] = {"annotations": {"volcano.sh/card.name": H100}}
    pod["spec"]["schedulerName"] = "volcano"
    if mpi_launcher_as_node:
        runtime["spec"]["mlPolicy"] = {"numNodes": 1, "mpi": {"runLauncherAsNode": True}}
    job["metadata"]["namespace"] = "ml"
    job["spec"]["trainer"]["numNodes"] = num_nodes
    job["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = gpus
    if queue_patch is not None:
        job["spec"]["runtimePatches"] = [{"manager": "me", "trainingRuntimeSpec": {"template": {"metadata": {
            "annotations": {"scheduling.volcano.sh/queue-name": queue_patch}}}}}]
    return runtime, job


@pytest.mark.parametrize(("options", "pods", "queue_name"), [
    ({}, 4, "train"),
    ({"num_nodes": 2}, 2, "train"),
    ({"queue_patch": "other"}, 4, "other"),
    ({"mpi_launcher_as_node": True}, 3, "train"),  # one node of four runs the launcher
])
def test_a_trainjob_is_read_with_its_runtime_as_the_trainer_builds_it(options: dict[str, Any], pods: int,
                                                                       queue_name: str) -> None:
    runtime, job = trainer_pair(**options)
    assert gang_of(job) is None  # without its runtime
    shape = gang_of(job, [runtime])
    assert shape is not None
    assert shape.volcano
    assert shape.queue == queue_name
    [group] = shape.groups
    [role] = group.roles
    assert (group.name, group.min_member, role.pods) == ("volcano-example", pods, pods)
    resources = role.template["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 8},
                         "requests": {"cpu": "1", "memory": "2Gi"}}
    assert role.template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "volcano-example"


def test_a_trainjob_with_a_coscheduling_runtime_is_not_on_volcano() -> None:
    runtime, job = trainer_pair()
    runtime["spec"]["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 60}}
    shape = gang_of(job, [runtime])
    assert shape is not None
    assert not shape.volcano


def test_a_trainjob_is_admitted_with_the_runtime_the_snapshot_holds_and_named_as_unchecked_without() -> None:
    """At admission (``check`` reads the runtimes of its input and cluster; the webhooks' cache follows none), a
    TrainJob is judged as the JobSet and PodGroup the trainer builds from its runtime: 4 nodes of 8 H100 in a queue
    allowing 16 can never run."""
    runtime, job = trainer_pair()
    with_runtime = Ledger.build([gpu_node(f"h{index}", H100, 8) for index in range(4)]
                                + [queue("train", {H100: 16}), runtime]).snapshot
    with_runtime.complete = True
    verdict = admit(copy.deepcopy(job), None, with_runtime, PolicyConfig())
    assert not verdict.allowed
    assert "requests 32 NVIDIA-H100" in verdict.message
    assert "allows at most 16: it can never run" in verdict.message
    assert admit(trainer_pair(num_nodes=2)[1], None, with_runtime, PolicyConfig()).allowed
    alone = admit(copy.deepcopy(job), None, snapshot(), PolicyConfig())
    assert alone.allowed
    assert alone.warnings == ("kind TrainJob (trainer.kubeflow.org) is not checked: its pods are built from the "
                              "ClusterTrainingRuntime torch-distributed-volcano its runtimeRef names, which was not "
                              "among the objects read, so cardquota checks them when they are created",)
