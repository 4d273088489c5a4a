"""Workloads with a pod template (Deployments, StatefulSets, ReplicaSets, DaemonSets, Jobs, CronJobs): where the
template is, and how a snapshot keys them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cardquota.core import keys
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest

TEMPLATE_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("apps", "Deployment"): ("spec", "template"),
    ("apps", "StatefulSet"): ("spec", "template"),
    ("apps", "ReplicaSet"): ("spec", "template"),
    ("apps", "DaemonSet"): ("spec", "template"),
    ("batch", "Job"): ("spec", "template"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template"),
}
"""Where each workload kind keeps its pod template ((API group, kind) -> path)."""

def as_defaulted(spec: Any) -> Any:
    """A pod template's spec as the API server stores it: ``schedulerName`` defaults to ``default-scheduler``
    (``SetDefaults_PodSpec``, k8s.io/kubernetes pkg/apis/core/v1/defaults.go, v1.35 — run on pods and on the
    templates of Deployments and the other workloads alike), so a template offline that names no scheduler is not
    Volcano's."""
    if isinstance(spec, MAPPING_TYPES) and not spec.get("schedulerName"):
        return {**spec, "schedulerName": keys.DEFAULT_SCHEDULER}
    return spec


WorkloadKey = tuple[str, str, str, str]
"""(API group, kind, namespace, name)."""


def workload_key(manifest: Manifest) -> WorkloadKey | None:
    """The key of a workload with a pod template, None for any other object (or one without a name)."""
    group = str(manifest.get("apiVersion", "")).rpartition("/")[0]
    kind = str(manifest.get("kind", ""))
    if (group, kind) not in TEMPLATE_PATHS:
        return None
    metadata = manifest.get("metadata")
    metadata = metadata if isinstance(metadata, MAPPING_TYPES) else {}
    namespace, name = metadata.get("namespace") or "default", metadata.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str) or not name:
        return None
    return (group, kind, namespace, name)


def template_only(manifest: Manifest) -> Manifest:
    """A workload reduced to what the HPA rule reads — identity and pod template — so a cache of many ReplicaSets
    (every old revision has one) stays small."""
    key = workload_key(manifest)
    if key is None:
        return manifest
    path = TEMPLATE_PATHS[(key[0], key[1])]
    node: object = manifest
    for step in path:
        node = node.get(step) if isinstance(node, MAPPING_TYPES) else None
    kept: object = node
    for step in reversed(path):
        kept = {step: kept}
    assert isinstance(kept, dict)
    return {"apiVersion": manifest.get("apiVersion"), "kind": key[1],
            "metadata": {"name": key[3], "namespace": key[2]}, **kept}


def count_of(value: object, default: int) -> int:
    """A replica or member count as written (an int, or digits in a string); ``default`` otherwise (the admission
    policies refuse such objects; the simulation reads what it can)."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return default


def task_min_available(task: Mapping[str, Any]) -> int:
    """A Volcano Job task's ``minAvailable`` as Volcano defaults it: as written when set; unset, from a partition
    policy that sets ``minPartitions`` (``minPartitions * partitionSize``), otherwise the task's replicas
    (pkg/webhooks/admission/jobs/mutate/mutate_job.go, ``mutateSpec``, and the job controller's
    ``getMinTaskMember`` in pkg/controllers/job/job_controller_actions.go, v1.15.1)."""
    replicas = count_of(task.get("replicas"), 0)
    if task.get("minAvailable") is None:
        policy = task.get("partitionPolicy")
        policy = policy if isinstance(policy, MAPPING_TYPES) else {}
        partitions, size = count_of(policy.get("minPartitions"), 0), count_of(policy.get("partitionSize"), 0)
        return partitions * size if partitions and size else replicas
    return count_of(task.get("minAvailable"), replicas)


def job_min_available(spec: Mapping[str, Any], tasks: Sequence[Mapping[str, Any]]) -> int:
    """A Volcano Job's ``spec.minAvailable``. Unset or 0, Volcano's job mutating webhook sets it to the tasks' own
    ``minAvailable`` added up (:func:`task_min_available`) (pkg/webhooks/admission/jobs/mutate/mutate_job.go,
    ``patchDefaultMinAvailable``, v1.8 to v1.15) — at least 1 here. That webhook's configuration sorts after
    cardquota's, so cardquota's Job mutation sees the Job before Volcano has defaulted it."""
    written = count_of(spec.get("minAvailable"), 0)
    if written:
        return written
    return sum(task_min_available(task) for task in tasks) or 1


def gang_pod_counts(tasks: Sequence[Mapping[str, Any]], min_available: int) -> list[int]:
    """How many pods of each task a Volcano Job's gang holds — the pods its job controller adds up into the
    PodGroup's ``spec.minResources`` (``calcPGMinResources``), what the job needs to be enqueued: when
    ``minAvailable`` is below the tasks' own ``minAvailable`` (:func:`task_min_available`) added up, the first
    ``minAvailable`` pods in task order; otherwise each task's ``minAvailable`` pods, then the other replicas in task
    order until ``minAvailable`` pods are counted. (Volcano orders tasks by priority class first; offline, the
    classes' values are unknown and the tasks keep their order.) One count per task, in order."""
    shapes = []
    for task in tasks:
        replicas = count_of(task.get("replicas"), 0)
        shapes.append((replicas, min(task_min_available(task), replicas)))
    counts = [0] * len(shapes)
    left = min_available
    if min_available < sum(task_minimum for _, task_minimum in shapes):
        passes = [[replicas for replicas, _ in shapes]]
    else:
        passes = [[task_minimum for _, task_minimum in shapes], [replicas for replicas, _ in shapes]]
    for limits in passes:
        for index, limit in enumerate(limits):
            taken = min(max(limit - counts[index], 0), left)
            counts[index] += taken
            left -= taken
    return counts
