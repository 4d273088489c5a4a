"""Workload kinds whose operators run their pods on Volcano as gangs — Kubeflow training jobs, KubeRay, JobSet,
LeaderWorkerSet: one small adapter each, reading a manifest into the PodGroups and pods its operator creates.

What every adapter gives (:class:`Gang`): the pod templates (:class:`Role`, each with its path in the manifest and
its pods per PodGroup), the PodGroups the operator creates for Volcano (:class:`GroupShape`: name, ``minMember``,
queue, and the annotations it copies onto them), the queue where the operator reads it, and whether the manifest
says it runs on Volcano at all. The admission policy (:mod:`cardquota.core.policies.workload`) and ``simulate``
(:mod:`cardquota.core.scheduling.simulate`) read this one description. Each fact about an operator is cited next to
the code that models it (file, function, version).

Trainer v2's ``TrainJob`` (``trainer.kubeflow.org``) builds its pods from a ``TrainingRuntime`` or
``ClusterTrainingRuntime`` held apart (``spec.runtimeRef``): :func:`gang_of` reads it as the JobSet the trainer
creates when that runtime is among the objects it is given (:func:`train_job`); without it, a TrainJob is named as
not checked (:func:`not_checked_reason`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cardquota.core import keys
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest
from cardquota.core.violations import FieldPath
from cardquota.core.workloads import count_of

VOLCANO_SCHEDULER = "volcano"
GROUP_MIN_MEMBER = "scheduling.volcano.sh/group-min-member"
"""The annotation of a pod's controller (a batch Job, a ReplicaSet, …) that sets the ``minMember`` of the PodGroup
Volcano makes for its pods (``VolcanoGroupMinMemberAnnotationKey``, staging/src/volcano.sh/apis/pkg/apis/scheduling/
v1beta1/labels.go; read by ``getMinMemberFromUpperRes``, pkg/controllers/podgroup/pg_controller_handler.go,
v1.15.1). Unset: 1."""
RAY_QUEUE_LABEL = "volcano.sh/queue-name"
RAY_SCHEDULER_LABEL = "ray.io/scheduler-name"
MAX_ROLES = 64
"""Roles (replica types, worker groups, replicated jobs) read per manifest: real ones have a handful; beyond, the
rest are left out (and said: :attr:`Gang.cut`)."""


@dataclass(frozen=True)
class Role:
    """One pod template of a workload and how many pods of it each of its PodGroups holds."""

    name: str
    path: FieldPath
    """Where the template is (``spec.pytorchReplicaSpecs.Worker.template``)."""
    template: Mapping[str, Any]
    pods: int
    """Pods of this role in each PodGroup."""
    in_gang: bool = True
    """Whether its pods are PodGroup members (a RayJob's submitter is not: KubeRay counts its resources only)."""


@dataclass(frozen=True)
class GroupShape:
    """PodGroups the operator creates alike: ``copies`` of them (a LeaderWorkerSet's replicas), each holding every
    role's pods, ``min_member`` of which must be placed together."""

    name: str
    """The PodGroup's name (with ``-<index>`` added when ``copies`` > 1)."""
    roles: tuple[Role, ...]
    min_member: int
    copies: int = 1

    def names(self) -> Iterator[str]:
        if self.copies == 1:
            yield self.name
            return
        for index in range(self.copies):
            yield f"{self.name}-{index}"


@dataclass(frozen=True)
class Gang:
    """A registered kind's pods as its operator creates them for Volcano."""

    what: str
    """The operator and version this follows (``Kubeflow training operator v1.9``), for messages."""
    groups: tuple[GroupShape, ...]
    queue: str | None
    """The queue as written where the operator reads it (None: unset, so ``default``)."""
    queue_path: FieldPath
    volcano: bool
    """Whether the manifest says its pods run on Volcano (its operator's sign: a scheduling policy, a queue label, a
    template's ``schedulerName``)."""
    scheduler: str | None = None
    """The ``schedulerName`` the operator gives pods whose template names none, when it runs them on Volcano."""
    group_annotations: Mapping[str, str] = field(default_factory=dict)
    """Annotations the operator copies from the manifest onto its PodGroups."""
    elastic: bool = False
    """Whether the operator may run fewer pods than written (autoscaling), so pods beyond ``minMember`` only wait."""
    cut: int = 0
    """Roles left out (beyond :data:`MAX_ROLES`)."""

    @property
    def roles(self) -> tuple[Role, ...]:
        return tuple(role for group in self.groups for role in group.roles)


Adapter = Callable[[Manifest], Gang]


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, MAPPING_TYPES) else {}


def _metadata(manifest: Manifest) -> tuple[str, Mapping[str, Any], Mapping[str, Any]]:
    metadata = _map(manifest.get("metadata"))
    name = metadata.get("name")
    return (name if isinstance(name, str) else "", _map(metadata.get("annotations")), _map(metadata.get("labels")))


def _strings(values: Mapping[str, Any]) -> dict[str, str]:
    return {key: value for key, value in values.items() if isinstance(key, str) and isinstance(value, str)}


def _scheduler_of(template: Mapping[str, Any]) -> str | None:
    name = _map(template.get("spec")).get("schedulerName")
    return name if isinstance(name, str) and name else None


def _names_other_schedulers(roles: tuple[Role, ...]) -> bool:
    """Whether every role's template names a scheduler other than Volcano's (so none of its pods is Volcano's)."""
    return bool(roles) and all(_scheduler_of(role.template) not in (None, VOLCANO_SCHEDULER) for role in roles)


def _names_volcano(roles: tuple[Role, ...]) -> bool:
    return any(_scheduler_of(role.template) == VOLCANO_SCHEDULER for role in roles)


# --------------------------------------------------------------------------------------- Kubeflow training

TRAINING_REPLICA_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs", "PaddleJob": "paddleReplicaSpecs", "JAXJob": "jaxReplicaSpecs",
}
"""The field holding each Kubeflow training job's replica specs (kubeflow/training-operator v1.9.0,
pkg/apis/kubeflow.org/v1/*_types.go; mpi-operator v0.8.0 pkg/apis/kubeflow/v2beta1/types.go for MPIJob v2beta1)."""


def training_job(manifest: Manifest) -> Gang:
    """A Kubeflow training job (``kubeflow.org/v1`` PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob; and
    ``kubeflow.org/v2beta1`` MPIJob of mpi-operator).

    Training operator v1.9.0, ``ReconcileJobs`` (pkg/controller.v1/common/job.go), with gang scheduling on Volcano:
    one PodGroup named after the job; ``minMember`` is ``runPolicy.schedulingPolicy.minAvailable``, else every
    replica added up; its queue is ``runPolicy.schedulingPolicy.queue``, else ``default``; its ``minResources``
    are the requests of ``minMember`` pods taken role by role in priority-class order (``CalcPGMinResources``,
    pkg/controller.v1/common/util.go: among equal priorities, Go's map order). ``DecoratePodTemplateSpec``
    (pkg/controller.v1/control/podgroup_control.go) sets ``schedulerName: volcano`` on templates that name no
    scheduler and the ``scheduling.k8s.io/group-name`` annotation; pods are created once the PodGroup is no longer
    Pending (``DelayPodCreationDueToPodGroup``).

    Gang scheduling is the operator's choice, not the job's (``EnableGangScheduling()``, from
    ``--gang-scheduler-name``, decides for every job: job.go ``ReconcileJobs``): a job is taken to run on Volcano,
    as it does on a cluster whose training operator gangs on Volcano, unless every template names another
    scheduler — with or without ``runPolicy.schedulingPolicy``.

    mpi-operator v0.8.0 (``kubeflow.org/v2beta1`` MPIJob), ``VolcanoCtrl.newPodGroup`` (pkg/controller/podgroup.go):
    ``minMember`` is ``schedulingPolicy.minAvailable``, else the workers' replicas + 1 (the launcher); the queue is
    ``schedulingPolicy.queue``, else the job's ``scheduling.volcano.sh/queue-name`` annotation."""
    name, annotations, _ = _metadata(manifest)
    kind = str(manifest.get("kind"))
    spec = _map(manifest.get("spec"))
    field_name = TRAINING_REPLICA_SPECS.get(kind, "")
    specs = _map(spec.get(field_name))
    roles: list[Role] = []
    for role_name, replica in list(specs.items())[:MAX_ROLES]:
        replica = _map(replica)
        roles.append(Role(str(role_name), FieldPath.of("spec", field_name, str(role_name), "template"),
                          _map(replica.get("template")), count_of(replica.get("replicas"), 1)))
    mpi_v2 = str(manifest.get("apiVersion")) == "kubeflow.org/v2beta1"
    policy_path = ("spec", "runPolicy", "schedulingPolicy")
    policy = _map(_map(spec.get("runPolicy")).get("schedulingPolicy"))
    total = sum(role.pods for role in roles)
    if mpi_v2:  # calculateMinAvailable: the workers + 1
        workers = sum(role.pods for role in roles if role.name == "Worker")
        default_minimum = workers + 1
    else:
        default_minimum = total
    minimum = count_of(policy.get("minAvailable"), default_minimum) if "minAvailable" in policy else default_minimum
    queue = policy.get("queue") if isinstance(policy.get("queue"), str) and policy.get("queue") else None
    queue_path = FieldPath.of(*policy_path, "queue")
    if queue is None and mpi_v2 and isinstance(annotations.get(keys.QUEUE_NAME), str):
        queue, queue_path = annotations[keys.QUEUE_NAME], FieldPath.of("metadata", "annotations").key(keys.QUEUE_NAME)
    shaped = tuple(roles)
    what = "mpi-operator v0.8" if mpi_v2 else "Kubeflow training operator v1.9"
    return Gang(what, (GroupShape(name, shaped, max(minimum, 1) if total else 0),), queue, queue_path,
                volcano=bool(policy) or not _names_other_schedulers(shaped), scheduler=VOLCANO_SCHEDULER,
                elastic=minimum < total, cut=max(len(specs) - MAX_ROLES, 0))


# --------------------------------------------------------------------------------------------------- KubeRay

def _ray_cluster_roles(spec: Mapping[str, Any], prefix: FieldPath) -> tuple[list[Role], int, bool, int]:
    """The head and worker groups of a RayCluster spec, each worker group with its desired pods: ``replicas``
    clamped to ``[minReplicas, maxReplicas]`` times ``numOfHosts``, 0 when suspended
    (``GetWorkerGroupDesiredReplicas``, ray-operator/controllers/ray/utils/util.go, KubeRay v1.7.0); the PodGroup's
    ``minMember``: those pods + 1 (the head), or with in-tree autoscaling ``minReplicas * numOfHosts`` of each
    group + 1 (``CalculateMinReplicas``, ``calculatePodGroupParams``). Also whether it autoscales, and how many
    groups were left out."""
    autoscaling = spec.get("enableInTreeAutoscaling") is True
    head = _map(spec.get("headGroupSpec"))
    roles = [Role("head", prefix.child("headGroupSpec", "template"), _map(head.get("template")), 1)]
    raw = spec.get("workerGroupSpecs")
    groups = raw if isinstance(raw, list) else []
    minimum = 1
    for index, group in enumerate(groups[:MAX_ROLES]):
        group = _map(group)
        hosts = max(count_of(group.get("numOfHosts"), 1), 1)
        low = count_of(group.get("minReplicas"), 0)
        high = count_of(group.get("maxReplicas"), 2**31 - 1)
        wanted = count_of(group.get("replicas"), low)
        suspended = group.get("suspend") is True
        desired = 0 if suspended else min(max(wanted, low), high) * hosts
        minimum += (0 if suspended else low * hosts) if autoscaling else desired
        name = group.get("groupName") if isinstance(group.get("groupName"), str) else f"#{index}"
        roles.append(Role(str(name), prefix.child("workerGroupSpecs").index(index).child("template"),
                          _map(group.get("template")), desired))
    return roles, minimum, autoscaling, max(len(groups) - MAX_ROLES, 0)


def ray(manifest: Manifest) -> Gang:
    """A ``ray.io/v1`` RayCluster or RayJob (its ``rayClusterSpec``), KubeRay v1.7.0 with ``--batch-scheduler=volcano``
    (ray-operator/controllers/ray/batchscheduler/volcano/volcano_scheduler.go): one PodGroup ``ray-<name>-pg``
    whose ``minMember`` is the workers' desired pods + 1 (the head) (``calculatePodGroupParams``), whose queue is
    the object's ``volcano.sh/queue-name`` **label** (``createPodGroup``), and which carries every annotation of the
    object; pods get ``schedulerName: volcano`` (``AddMetadataToChildResource``). A RayJob's submitter adds its
    resources to ``minResources`` but is no member (``handleRayJob``). Up to v1.2 the scheduler was chosen per
    object by the label ``ray.io/scheduler-name: volcano`` (batchscheduler/schedulermanager.go, v1.2.2); since
    v1.3 it is the operator's setting, so here an object is on Volcano when it has either label or a template naming
    ``volcano``."""
    name, annotations, labels = _metadata(manifest)
    spec = _map(manifest.get("spec"))
    job = manifest.get("kind") == "RayJob"
    prefix = FieldPath.of("spec", "rayClusterSpec") if job else FieldPath.of("spec")
    cluster = _map(spec.get("rayClusterSpec")) if job else spec
    roles, minimum, autoscaling, cut = _ray_cluster_roles(cluster, prefix)
    if job and isinstance(spec.get("submitterPodTemplate"), MAPPING_TYPES):
        roles.append(Role("submitter", FieldPath.of("spec", "submitterPodTemplate"),
                          _map(spec.get("submitterPodTemplate")), 1, in_gang=False))
    shaped = tuple(roles)
    queue = labels.get(RAY_QUEUE_LABEL)
    volcano = (labels.get(RAY_SCHEDULER_LABEL) == VOLCANO_SCHEDULER or RAY_QUEUE_LABEL in labels
               or _names_volcano(shaped))
    return Gang("KubeRay v1.7", (GroupShape(f"ray-{name}-pg", shaped, minimum),),
                queue if isinstance(queue, str) and queue else None,
                FieldPath.of("metadata", "labels").key(RAY_QUEUE_LABEL), volcano, VOLCANO_SCHEDULER,
                _strings(annotations), elastic=autoscaling, cut=cut)


# --------------------------------------------------------------------------------------------------- JobSet

def jobset(manifest: Manifest) -> Gang:
    """A ``jobset.x-k8s.io/v1alpha2`` JobSet: ``replicas`` batch Jobs (default 1) per replicated job, each running
    ``parallelism`` pods at once (default 1, at most ``completions``). JobSet creates no PodGroup (kubernetes-sigs/
    jobset v0.12.0 has no Volcano integration): Volcano's PodGroup controller makes one per pod *controller* — each
    batch Job — named ``podgroup-<Job UID>`` (``GeneratePodgroupName``, staging/src/volcano.sh/apis/pkg/apis/helpers/
    helpers.go), ``minMember`` from the Job's ``scheduling.volcano.sh/group-min-member`` annotation, else 1, and the
    queue of the pod's ``scheduling.volcano.sh/queue-name`` annotation (``buildPodGroupFromPod``,
    pkg/controllers/podgroup/pg_controller_handler.go, v1.15.1). A JobSet runs on Volcano when its pod templates name
    ``schedulerName: volcano``."""
    name, _, _ = _metadata(manifest)
    raw = _map(manifest.get("spec")).get("replicatedJobs")
    replicated = raw if isinstance(raw, list) else []
    groups: list[GroupShape] = []
    queue: str | None = None
    queue_path = FieldPath.of("spec", "replicatedJobs")
    for index, entry in enumerate(replicated[:MAX_ROLES]):
        entry = _map(entry)
        job_template = _map(entry.get("template"))
        job_spec = _map(job_template.get("spec"))
        parallelism = count_of(job_spec.get("parallelism"), 1)
        pods = min(parallelism, count_of(job_spec.get("completions"), parallelism))
        role_name = entry.get("name") if isinstance(entry.get("name"), str) else f"#{index}"
        path = queue_path.index(index).child("template", "spec", "template")
        template = _map(job_spec.get("template"))
        role = Role(str(role_name), path, template, pods)
        written = _map(_map(template.get("metadata")).get("annotations")).get(keys.QUEUE_NAME)
        if queue is None and isinstance(written, str) and written:
            queue, queue_path = written, path.child("metadata", "annotations").key(keys.QUEUE_NAME)
        minimum = count_of(_map(_map(job_template.get("metadata")).get("annotations")).get(GROUP_MIN_MEMBER), 1)
        groups.append(GroupShape(f"{name}-{role_name}", (role,), min(max(minimum, 1), pods) if pods else 0,
                                 count_of(entry.get("replicas"), 1)))
    shaped = tuple(groups)
    return Gang("JobSet v0.12 on Volcano's PodGroup controller", shaped, queue, queue_path,
                volcano=_names_volcano(tuple(role for group in shaped for role in group.roles)),
                cut=max(len(replicated) - MAX_ROLES, 0))


# ---------------------------------------------------------------------------------------- LeaderWorkerSet

def leader_worker_set(manifest: Manifest) -> Gang:
    """A ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet, LWS v0.10.0 with ``gangSchedulingManagement.
    schedulerProvider: volcano`` (pkg/schedulerprovider/volcano_provider.go, ``CreatePodGroupIfNotExists``): one
    PodGroup per group (``spec.replicas``, default 1) holding the leader (``leaderTemplate``, else the worker
    template) and ``size - 1`` workers; ``minMember`` is ``size`` (1 with ``startupPolicy: LeaderReady``); its queue
    is the LWS's ``scheduling.volcano.sh/queue-name`` **annotation**, and it inherits the LWS's ``volcano.sh/*``
    annotations (``inheritVolcanoAnnotations``). The provider sets no ``schedulerName``: the templates must name
    ``volcano`` (docs/examples/sample/gang-scheduling/lws-sample-volcano.yaml), which is the sign read here."""
    name, annotations, _ = _metadata(manifest)
    spec = _map(manifest.get("spec"))
    template = _map(spec.get("leaderWorkerTemplate"))
    size = max(count_of(template.get("size"), 1), 1)
    base = FieldPath.of("spec", "leaderWorkerTemplate")
    worker = _map(template.get("workerTemplate"))
    leader_written = isinstance(template.get("leaderTemplate"), MAPPING_TYPES)
    leader = _map(template.get("leaderTemplate")) if leader_written else worker
    roles = (Role("leader", base.child("leaderTemplate" if leader_written else "workerTemplate"), leader, 1),
             Role("worker", base.child("workerTemplate"), worker, size - 1))
    minimum = 1 if spec.get("startupPolicy") == "LeaderReady" else size
    queue = annotations.get(keys.QUEUE_NAME)
    inherited = {key: value for key, value in _strings(annotations).items() if key.startswith("volcano.sh/")}
    return Gang("LeaderWorkerSet v0.10", (GroupShape(name, roles, minimum, count_of(spec.get("replicas"), 1)),),
                queue if isinstance(queue, str) and queue else None,
                FieldPath.of("metadata", "annotations").key(keys.QUEUE_NAME), _names_volcano(roles),
                group_annotations=inherited)


# ------------------------------------------------------------------------------------- Kubeflow Trainer v2

TRAINER_ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_NODE = "node"
"""The replicated job and container of the trainer's nodes (``LabelTrainJobAncestor``, ``AncestorTrainer`` =
``trainer``, ``Node`` = ``node``: pkg/constants/constants.go, kubeflow/trainer v2.3.0)."""


def runtime_ref(manifest: Manifest) -> tuple[str, str, str]:
    """The runtime a TrainJob names: (kind, namespace, name); ``kind`` defaults to ``ClusterTrainingRuntime``
    (``RuntimeRef``, pkg/apis/trainer/v1alpha1/trainjob_types.go, kubeflow/trainer v2.3.0: kubebuilder default)."""
    ref = _map(_map(manifest.get("spec")).get("runtimeRef"))
    kind = ref.get("kind") if isinstance(ref.get("kind"), str) and ref.get("kind") else "ClusterTrainingRuntime"
    namespace = _map(manifest.get("metadata")).get("namespace") or "default"
    return str(kind), str(namespace), str(ref.get("name") or "")


def runtime_key(manifest: Manifest) -> tuple[str, str, str] | None:
    """A Trainer runtime's key as a TrainJob names it ((kind, namespace, name); namespace empty for a
    ClusterTrainingRuntime), None for any other object."""
    kind = manifest.get("kind")
    if str(manifest.get("apiVersion", "")).rpartition("/")[0] != TRAINER_GROUP or kind not in RUNTIME_KINDS:
        return None
    metadata = _map(manifest.get("metadata"))
    namespace = (metadata.get("namespace") or "default") if kind == "TrainingRuntime" else ""
    return str(kind), str(namespace), str(metadata.get("name") or "")


def runtime_of(manifest: Manifest, objects: Sequence[Manifest]) -> Manifest | None:
    """The TrainingRuntime (same namespace) or ClusterTrainingRuntime a TrainJob names, among ``objects``."""
    kind, namespace, name = runtime_ref(manifest)
    for candidate in objects:
        metadata = _map(candidate.get("metadata"))
        if (str(candidate.get("apiVersion", "")).rpartition("/")[0] == TRAINER_GROUP
                and candidate.get("kind") == kind and metadata.get("name") == name
                and (kind != "TrainingRuntime" or (metadata.get("namespace") or "default") == namespace)):
            return candidate
    return None


def _merged_resources(container: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """The container with ``resourcesPerNode`` laid over its resources, limits and requests key by key
    (``MergeResourceRequirements``, pkg/util/trainingruntime/trainingruntime.go, kubeflow/trainer v2.3.0: a
    strategic merge patch)."""
    resources = dict(_map(container.get("resources")))
    for part in ("limits", "requests"):
        if isinstance(override.get(part), MAPPING_TYPES):
            resources[part] = {**_map(resources.get(part)), **_map(override.get(part))}
    return {**container, "resources": resources}


def train_job(manifest: Manifest, runtime: Manifest) -> Gang:
    """A ``trainer.kubeflow.org/v1alpha1`` TrainJob read with its runtime, as kubeflow/trainer v2.3.0 builds the
    JobSet and the PodGroup (pkg/runtime/core/trainingruntime.go ``newRuntimeInfo``; framework plugins):

    * each replicated job of the runtime's ``spec.template`` runs ``parallelism`` pods (default 1) — the trainer's
      (label ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``) ``mlPolicy.numNodes`` (default 1) instead,
      overridden by the TrainJob's ``spec.trainer.numNodes`` (torch, jax, xgboost and plainml plugins'
      ``EnforceMLPolicy``); with an ``mpi`` policy the replicated job ``node`` takes ``numNodes``, less one for the
      launcher with ``runLauncherAsNode`` (mpi.go ``EnforceMLPolicy``); JobSet runs them with that
      ``parallelism``/``completions`` (jobset.go ``SyncParallelCount``) and one replica each (builder.go);
    * ``spec.trainer.resourcesPerNode`` is laid over the resources of the trainer's container ``node``
      (``MergeResourceRequirements``: key by key);
    * with ``podGroupPolicy.volcano`` (volcano.go ``Build``, ``EnforcePodGroupPolicy``): one PodGroup named after
      the TrainJob, ``minMember`` every pod of every replicated job, its queue the
      ``scheduling.volcano.sh/queue-name`` annotation of the runtime's ``spec.template.metadata``, overridden by the
      TrainJob's ``spec.runtimePatches[].trainingRuntimeSpec.template.metadata``; each pod annotated with
      ``scheduling.k8s.io/group-name``. The trainer sets no ``schedulerName``: templates naming none are the default
      scheduler's. ``podGroupPolicy.coscheduling`` is scheduler-plugins', not Volcano's.

    Not read: the runtime patches' pod-spec changes (node selectors, tolerations), and ``replicas`` above 1 of
    other replicated jobs (which the trainer leaves to JobSet: upstream issue #2318)."""
    name, _, _ = _metadata(manifest)
    _, _, runtime_name = runtime_ref(manifest)
    spec = _map(manifest.get("spec"))
    trainer = _map(spec.get("trainer"))
    runtime_spec = _map(runtime.get("spec"))
    ml_policy = runtime_spec.get("mlPolicy")
    ml = _map(ml_policy)
    mpi = _map(ml.get("mpi")) if "mpi" in ml else None
    template = _map(runtime_spec.get("template"))
    annotations = _strings(_map(_map(template.get("metadata")).get("annotations")))
    queue_path = FieldPath.of("spec", "runtimeRef")
    patches = spec.get("runtimePatches")
    for index, patch in enumerate(patches[:MAX_ROLES] if isinstance(patches, list) else []):
        patched = _map(_map(_map(patch).get("trainingRuntimeSpec")).get("template"))
        written = _strings(_map(_map(patched.get("metadata")).get("annotations")))
        if keys.QUEUE_NAME in written:
            queue_path = FieldPath.of("spec", "runtimePatches").index(index).child(
                "trainingRuntimeSpec", "template", "metadata", "annotations").key(keys.QUEUE_NAME)
        annotations.update(written)
    policy = _map(runtime_spec.get("podGroupPolicy"))
    volcano = isinstance(policy.get("volcano"), MAPPING_TYPES)
    raw = _map(template.get("spec")).get("replicatedJobs")
    replicated = raw if isinstance(raw, list) else []
    nodes = trainer.get("numNodes")
    per_node = _map(trainer.get("resourcesPerNode"))
    roles: list[Role] = []
    base = FieldPath.of("spec", "template", "spec", "replicatedJobs")
    for index, entry in enumerate(replicated[:MAX_ROLES]):
        entry = _map(entry)
        job_template = _map(entry.get("template"))
        role_name = str(entry.get("name") or f"#{index}")
        trainer_job = _map(_map(job_template.get("metadata")).get("labels")).get(TRAINER_ANCESTOR_LABEL) == "trainer"
        pods = count_of(_map(job_template.get("spec")).get("parallelism"), 1)
        if trainer_job and ml_policy is not None:
            pods = count_of(ml.get("numNodes"), 1)
        if mpi is not None and role_name == TRAINER_NODE and nodes is not None:
            pods = max(count_of(nodes, 1) - 1, 1) if mpi.get("runLauncherAsNode") is True else count_of(nodes, 1)
        elif mpi is None and trainer_job and nodes is not None:
            pods = count_of(nodes, 1)
        pod_template = dict(_map(_map(job_template.get("spec")).get("template")))
        pod_spec = dict(_map(pod_template.get("spec")))
        launcher_as_node = mpi is not None and mpi.get("runLauncherAsNode") is True and role_name == TRAINER_NODE
        if per_node and ((trainer_job and ml_policy is not None) or launcher_as_node):
            containers = pod_spec.get("containers")
            pod_spec["containers"] = [
                _merged_resources(_map(container), per_node) if _map(container).get("name") == TRAINER_NODE
                else container for container in (containers if isinstance(containers, list) else [])]
        pod_metadata = dict(_map(pod_template.get("metadata")))
        if volcano:
            pod_metadata["annotations"] = {**_map(pod_metadata.get("annotations")), keys.GROUP_NAME: name}
        roles.append(Role(role_name, base.index(index).child("template", "spec", "template"),
                          {**pod_template, "metadata": pod_metadata, "spec": pod_spec}, pods))
    shaped = tuple(roles)
    queue = annotations.get(keys.QUEUE_NAME)
    runtime_kind = str(runtime.get("kind"))
    return Gang(f"Kubeflow Trainer v2.3 with {runtime_kind} {runtime_name}",
                (GroupShape(name, shaped, sum(role.pods for role in shaped)),),
                queue if queue else None, queue_path, volcano, cut=max(len(replicated) - MAX_ROLES, 0))


ADAPTERS: dict[tuple[str, str], Adapter] = {
    **{("kubeflow.org", kind): training_job for kind in TRAINING_REPLICA_SPECS},
    ("ray.io", "RayCluster"): ray,
    ("ray.io", "RayJob"): ray,
    ("jobset.x-k8s.io", "JobSet"): jobset,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): leader_worker_set,
}
"""The registered workload kinds: (API group, kind) → adapter."""

SERVED_VERSIONS: dict[tuple[str, str], tuple[str, ...]] = {
    **{("kubeflow.org", kind): ("v1",) for kind in TRAINING_REPLICA_SPECS},
    ("kubeflow.org", "MPIJob"): ("v1", "v2beta1"),
    ("ray.io", "RayCluster"): ("v1",),
    ("ray.io", "RayJob"): ("v1",),
    ("jobset.x-k8s.io", "JobSet"): ("v1alpha2",),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): ("v1",),
    ("trainer.kubeflow.org", "TrainJob"): ("v1alpha1",),
}
"""The versions their CRDs serve and the adapters read (training operator v1.9.0 config/crd/bases; mpi-operator v0.8.0
``kubeflow.org_mpijobs.yaml`` serves v2beta1 only, the training operator's MPIJob v1; KubeRay v1.7.0 ``ray.io/v1``;
JobSet v0.12.0 ``v1alpha2``; LWS v0.10.0 ``v1``; kubeflow/trainer v2.3.0 ``v1alpha1``)."""

TRAINER_GROUP = "trainer.kubeflow.org"
TRAIN_JOB = (TRAINER_GROUP, "TrainJob")
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
NOT_CHECKED: dict[tuple[str, str], str] = {
    TRAIN_JOB: "its pods are built from the TrainingRuntime its runtimeRef names, not read here, so cardquota "
               "checks them when they are created",
}
"""Workload kinds cardquota knows but cannot check from the manifest alone, with the reason (a TrainJob: unless its
runtime is among the objects given, :func:`gang_of`)."""


def gang_of(manifest: Manifest, objects: Sequence[Manifest] = ()) -> Gang | None:
    """The registered kind's description of ``manifest``, None for any other kind — and for a ``TrainJob`` whose
    runtime is not among ``objects`` (:func:`not_checked_reason` says why)."""
    group = str(manifest.get("apiVersion", "")).rpartition("/")[0]
    kind = str(manifest.get("kind", ""))
    if (group, kind) == TRAIN_JOB:
        runtime = runtime_of(manifest, objects)
        return train_job(manifest, runtime) if runtime is not None else None
    adapter = ADAPTERS.get((group, kind))
    return adapter(manifest) if adapter is not None else None


def not_checked_reason(manifest: Manifest, objects: Sequence[Manifest] = ()) -> str | None:
    """Why a kind cardquota knows is not checked (:data:`NOT_CHECKED`), naming the runtime a TrainJob lacks; None
    when it is checked, or not such a kind."""
    group = str(manifest.get("apiVersion", "")).rpartition("/")[0]
    key = (group, str(manifest.get("kind", "")))
    if key not in NOT_CHECKED:
        return None
    if key == TRAIN_JOB:
        if runtime_of(manifest, objects) is not None:
            return None
        kind, namespace, name = runtime_ref(manifest)
        where = "" if not name else f" {namespace}/{name}" if kind == "TrainingRuntime" else f" {name}"
        return (f"its pods are built from the {kind}{where} its runtimeRef names, which was not among the objects "
                "read, so cardquota checks them when they are created")
    return NOT_CHECKED[key]


MAX_WALK = 256
"""Maps a walk for a pod template looks at, at most (:func:`pod_template_path`)."""
MAX_DEPTH = 6


def pod_template_path(manifest: Manifest) -> str | None:
    """Where an object of an unknown kind keeps a pod template — a ``template`` map whose ``spec`` has
    ``containers`` — found by a walk of at most :data:`MAX_WALK` maps and :data:`MAX_DEPTH` levels under ``spec``;
    None when there is none within those bounds."""
    start = manifest.get("spec")
    if not isinstance(start, MAPPING_TYPES):
        return None
    queue: list[tuple[FieldPath, Mapping[str, Any], int]] = [(FieldPath.of("spec"), start, 0)]
    seen = 0
    while queue and seen < MAX_WALK:
        path, node, depth = queue.pop(0)
        seen += 1
        template = node.get("template")
        if isinstance(template, MAPPING_TYPES) and isinstance(_map(template.get("spec")).get("containers"), list):
            return str(path.child("template"))
        if depth >= MAX_DEPTH:
            continue
        for key, value in node.items():
            if isinstance(value, MAPPING_TYPES) and isinstance(key, str):
                queue.append((path.child(key), value, depth + 1))
            elif isinstance(value, list) and isinstance(key, str):
                for index, item in enumerate(value[:MAX_ROLES]):
                    if isinstance(item, MAPPING_TYPES):
                        queue.append((path.child(key).index(index), item, depth + 1))
    return None
