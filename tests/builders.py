"""Small builders of Kubernetes manifests for tests: ``node(...)``, ``queue(...)``, ``podgroup(...)``, ``pod(...)``.

Each returns the plain dict a YAML file or the API server would give, with only the fields a test cares about.
``priority_class(...)`` builds a PriorityClass; ``admitted_unit(...)`` and ``waiting_unit(...)`` the inputs of
:mod:`cardquota.core.preemption`.
"""

from __future__ import annotations

import json
from typing import Any

from cardquota.core.preemption import Admitted, CardAsk, Preemptor

Manifest = dict[str, Any]


def gpu_labels(product: str, *, prefix: str = "nvidia.com", family: str = "gpu", count: int | None = None,
               memory: int | None = None, replicas: int | None = None) -> dict[str, str]:
    """The labels vendor feature discovery writes for one card family."""
    base = f"{prefix}/{family}"
    labels = {f"{base}.product": product}
    for suffix, value in (("count", count), ("memory", memory), ("replicas", replicas)):
        if value is not None:
            labels[f"{base}.{suffix}"] = str(value)
    return labels


def node(name: str = "node-1", *, labels: dict[str, str] | None = None,
         allocatable: dict[str, Any] | None = None) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", **(allocatable or {})}},
    }


def gpu_node(name: str, product: str, gpus: int, *, resource: str = "nvidia.com/gpu", **label_args: Any) -> Manifest:
    """A node with ``gpus`` whole cards of ``product``."""
    return node(name, labels=gpu_labels(product, count=gpus, **label_args), allocatable={resource: str(gpus)})


def queue(name: str, quota: dict[str, int] | str | None = None, *, parent: str | None = None,
          capability: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> Manifest:
    metadata: dict[str, Any] = {"name": name}
    if quota is not None or annotations:
        metadata["annotations"] = dict(annotations or {})
    if quota is not None:
        metadata["annotations"]["volcano.sh/card.quota"] = quota if isinstance(quota, str) else json.dumps(quota)
    spec: dict[str, Any] = {"weight": 1}
    if parent is not None:
        spec["parent"] = parent
    if capability is not None:
        spec["capability"] = capability
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": metadata, "spec": spec}


def podgroup(name: str, *, namespace: str = "default", queue: str | None = "default", phase: str = "Inqueue",
             request: dict[str, int] | str | None = None, min_member: int = 1, created: str | None = None,
             priority_class: str | None = None) -> Manifest:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if created is not None:
        metadata["creationTimestamp"] = created
    if request is not None:
        metadata["annotations"] = {
            "volcano.sh/card.request": request if isinstance(request, str) else json.dumps(request)
        }
    spec: dict[str, Any] = {"minMember": min_member}
    if queue is not None:
        spec["queue"] = queue
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": metadata,
            "spec": spec, "status": {"phase": phase}}


def priority_class(name: str, value: int, *, global_default: bool = False) -> Manifest:
    manifest: Manifest = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                          "value": value}
    if global_default:
        manifest["globalDefault"] = True
    return manifest


def container(name: str = "main", *, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
              restart_policy: str | None = None) -> Manifest:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    spec: Manifest = {"name": name, "image": "example/app:1", "resources": resources}
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return spec


def pod(name: str, *, namespace: str = "default", card: str | None = None, node_name: str | None = None,
        phase: str | None = None, group: str | None = None, queue: str | None = None,
        gpus: int | None = None, resource: str = "nvidia.com/gpu", containers: list[Manifest] | None = None,
        init_containers: list[Manifest] | None = None, annotations: dict[str, str] | None = None,
        gated: bool = False, priority: int | None = None, created: str | None = None, uid: str | None = None,
        labels: dict[str, str] | None = None, scheduled_at: str | None = None) -> Manifest:
    """A pod; ``gpus`` adds one container requesting that many of ``resource`` (as a limit, like most users);
    ``gated``: it carries cardquota's scheduling gate; ``scheduled_at``: the ``lastTransitionTime`` of the
    ``PodScheduled: True`` condition the API server writes when it binds the pod."""
    metadata_annotations = dict(annotations or {})
    if card is not None:
        metadata_annotations["volcano.sh/card.name"] = card
    if group is not None:
        metadata_annotations["scheduling.k8s.io/group-name"] = group
    if queue is not None:
        metadata_annotations["scheduling.volcano.sh/queue-name"] = queue
    if containers is None:
        containers = [container(requests={"cpu": "1"}, limits={resource: str(gpus)} if gpus else None)]
    spec: Manifest = {"schedulerName": "volcano", "containers": containers}
    if init_containers is not None:
        spec["initContainers"] = init_containers
    if node_name is not None:
        spec["nodeName"] = node_name
    if gated:
        spec["schedulingGates"] = [{"name": "cardquota.io/card-quota"}]
    if priority is not None:
        spec["priority"] = priority
    metadata: Manifest = {"name": name, "namespace": namespace, "annotations": metadata_annotations}
    if labels is not None:
        metadata["labels"] = dict(labels)
    if created is not None:
        metadata["creationTimestamp"] = created
    if uid is not None:
        metadata["uid"] = uid
    manifest: Manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase or ("Running" if node_name else "Pending")},
    }
    if scheduled_at is not None:
        manifest["status"]["conditions"] = [
            {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": scheduled_at}]
    return manifest


def shared_gpu_node(name: str, product: str, cards: int, replicas: int, *, strategy: str | None = "mps",
                    renamed: bool = False, memory: int = 81920) -> Manifest:
    """A node whose ``cards`` GPUs NVIDIA's device plugin shares ``replicas`` ways, labelled as GPU feature discovery
    labels it (NVIDIA/k8s-device-plugin v0.20.0 ``internal/lm/resource.go``): by default the resource stays
    ``nvidia.com/gpu`` and the product gets ``-SHARED``; ``renamed`` (``renameByDefault``) offers
    ``nvidia.com/gpu.shared`` and keeps the product. ``strategy`` None: an older labeller without
    ``gpu.sharing-strategy``."""
    labels = gpu_labels(product if renamed else f"{product}-SHARED", count=cards, memory=memory, replicas=replicas)
    if strategy is not None:
        labels["nvidia.com/gpu.sharing-strategy"] = strategy
    resource = "nvidia.com/gpu.shared" if renamed else "nvidia.com/gpu"
    return node(name, labels=labels, allocatable={resource: str(cards * replicas)})


def hami_node(name: str, product: str, cards: int, split: int = 10, *, legacy: bool = False,
              gfd: bool = True) -> Manifest:
    """A HAMi vGPU node: ``nvidia.com/gpu`` = cards times split (HAMi v2.10.0 ``rm/devices.go`` ``GetPluginDevices``),
    each card registered in ``hami.io/node-nvidia-register`` (JSON since v2.8.0; ``legacy``: the older
    ``id,count,devmem,devcore,type,numa,health:`` records of ``device.DecodeNodeDevices``). ``gfd``: GPU feature
    discovery labels the physical cards too."""
    if legacy:
        register = "".join(f"GPU-{i},{split},81920,100,NVIDIA-{product},0,true:" for i in range(cards))
    else:
        register = json.dumps([{"id": f"GPU-{i}", "index": i, "count": split, "devmem": 81920, "devcore": 100,
                                "type": f"NVIDIA-{product}", "numa": 0, "mode": "hami-core", "health": True}
                               for i in range(cards)])
    manifest = node(name, labels={"gpu": "on", **(gpu_labels(product, count=cards, memory=81920) if gfd else {})},
                    allocatable={"nvidia.com/gpu": str(cards * split)})
    manifest["metadata"]["annotations"] = {"hami.io/node-nvidia-register": register}
    return manifest


def ascend_node(name: str, chip: str = "910B3", npus: int = 8, *, product: str | None = None) -> Manifest:
    """An Ascend NPU node as its device plugin leaves it: ``accelerator=huawei-Ascend910`` (the DaemonSet's
    nodeSelector the administrator writes, Ascend/ascend-device-plugin ``build/ascendplugin-910.yaml``),
    ``node.kubernetes.io/npu.chip.name`` (Ascend/mind-cluster v26.1.0 ``ChipNameLabel``) and
    ``huawei.com/Ascend910``; ``product``: also the ``huawei.com/npu.product`` label docs/cards.md recommends."""
    labels = {"accelerator": "huawei-Ascend910", "node.kubernetes.io/npu.chip.name": chip,
              "servertype": "Ascend910B-20"}
    if product is not None:
        labels["huawei.com/npu.product"] = product
    return node(name, labels=labels, allocatable={"huawei.com/Ascend910": str(npus)})


def claim_template(name: str, device_class: str, count: int, *, namespace: str = "ml") -> Manifest:
    """A ResourceClaimTemplate as resource.k8s.io/v1beta1 writes it: one request of ``count`` devices of the class."""
    return {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "d", "deviceClassName": device_class,
                                                         "count": count}]}}}}


def disruption_budget(name: str, match_labels: dict[str, str], *, allowed: int, namespace: str = "ml",
                      generation: int = 1, observed_generation: int = 1) -> Manifest:
    """A policy/v1 PodDisruptionBudget selecting ``match_labels`` whose status allows ``allowed`` disruptions now
    (``observed_generation`` below ``generation``: its controller has not caught up with its spec)."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace, "generation": generation},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": dict(match_labels)}},
            "status": {"observedGeneration": observed_generation, "disruptionsAllowed": allowed,
                       "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2}}


def trainer_runtime(name: str, *, queue: str, card: str, namespace: str | None = None) -> Manifest:
    """A Kubeflow Trainer v2 runtime on Volcano (a TrainingRuntime in ``namespace``, else a ClusterTrainingRuntime):
    one trainer job ``node`` whose pods name ``card`` and Volcano's scheduler, in ``queue``."""
    metadata: dict[str, Any] = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    pod_template = {"metadata": {"annotations": {"volcano.sh/card.name": card}},
                    "spec": {"schedulerName": "volcano", "containers": [{"name": "node", "image": "torch"}]}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "ClusterTrainingRuntime" if namespace is None else "TrainingRuntime", "metadata": metadata,
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "podGroupPolicy": {"volcano": {}},
                     "template": {"metadata": {"annotations": {"scheduling.volcano.sh/queue-name": queue}},
                                  "spec": {"replicatedJobs": [{"name": "node", "template": {
                                      "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step":
                                                              "trainer"}},
                                      "spec": {"template": pod_template}}}]}}}}


def train_job(name: str, runtime_ref: dict[str, str], *, namespace: str = "ml", nodes: int = 2,
              gpus: int = 4) -> Manifest:
    """A TrainJob of ``nodes`` trainer nodes asking ``gpus`` nvidia.com/gpu each, from ``runtime_ref``."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runtimeRef": runtime_ref,
                     "trainer": {"numNodes": nodes, "resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus}}}}}


def admitted_unit(name: str, cards: dict[str, int], *, priority: int = 0, admitted: str = "2026-12-07T09:00:00Z",
                  created: str | None = None, queue: str = "research", namespace: str = "ml", kind: str = "PodGroup",
                  preemptable: bool = True, eviction_refused: bool = False,
                  admitted_by_preemption: bool = False) -> Admitted:
    """A unit admitted in ``queue`` holding ``cards`` (card name as held → cards), queued when it was admitted
    unless ``created`` says otherwise."""
    return Admitted((namespace, name), kind, queue, priority, created or admitted, admitted, dict(cards),
                    preemptable, eviction_refused, admitted_by_preemption)


def waiting_unit(name: str, card: str, cards: int, *, pods: int = 1, priority: int = 1000, queue: str = "research",
                 created: str = "2026-12-07T10:00:00Z", namespace: str = "ml") -> Preemptor:
    """A unit waiting at the gate: ``pods`` pods naming ``card`` (``A|B`` allowed), each waiting for ``cards``."""
    return Preemptor(f"{namespace}/{name}", queue, priority, created, tuple(CardAsk(card, cards) for _ in range(pods)))
