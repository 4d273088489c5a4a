"""A synthetic heterogeneous cluster of any size, for benchmarks (deterministic for a given seed): minimal pods
(:func:`pod`, ~400 bytes of JSON: only what the ledger reads) or pods as the API server returns them
(:func:`realistic_pod`, 6 to 8 KB)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

PRODUCTS = ["NVIDIA-A100", "NVIDIA-H100", "NVIDIA-GeForce-RTX-4090"]
PodMaker = Callable[[int, "int | None", int], dict[str, Any]]
"""``(index, node index or None for a pending pod, PodGroups) -> manifest``: :func:`pod` or :func:`realistic_pod`."""


def cluster(nodes: int, pods: int, queues: int = 20, seed: int = 7, make_pod: PodMaker | None = None
            ) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = []
    for index in range(nodes):
        product = PRODUCTS[index % len(PRODUCTS)]
        labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920"}
        objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{index}", "labels": labels},
                        "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}}})
    for index in range(queues):
        quota = {product: rng.randint(8, 64) for product in PRODUCTS}
        objects.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                        "metadata": {"name": f"q{index}", "annotations": {"volcano.sh/card.quota": json.dumps(quota)}},
                        "spec": {"weight": 1}})
    groups = max(1, pods // 8)
    for index in range(groups):
        objects.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                        "metadata": {"name": f"pg-{index}", "namespace": "ml",
                                     "annotations": {"volcano.sh/card.request": json.dumps({PRODUCTS[0]: 8})}},
                        "spec": {"queue": f"q{index % queues}"},
                        "status": {"phase": rng.choice(["Inqueue", "Running", "Pending"])}})
    for index in range(pods):
        objects.append((make_pod or pod)(index, rng.randrange(nodes) if rng.random() < 0.8 else None, groups))
    return objects


def pod(index: int, node: int | None, groups: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trainer:1", "resources": {
        "requests": {"cpu": "4", "memory": "32Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]}
    if node is not None:
        spec["nodeName"] = f"node-{node}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{index}", "namespace": "ml", "annotations": {
                "volcano.sh/card.name": "NVIDIA-A100|NVIDIA-H100",
                "scheduling.k8s.io/group-name": f"pg-{index % groups}"}},
            "spec": spec, "status": {"phase": "Running" if node is not None else "Pending"}}


TIME = "2026-11-20T08:14:31Z"
TOLERATIONS = [{"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists",
                "tolerationSeconds": 300},
               {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists",
                "tolerationSeconds": 300},
               {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
"""A GPU job pod's tolerations as the API server returns them (the two default ones and the GPU taint's)."""


def job_volumes(group: str, *, secrets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """A training job pod's volumes: shared memory, a model cache, its config, ``secrets``, the API token."""
    return [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            {"name": "cache", "persistentVolumeClaim": {"claimName": "hf-cache"}},
            {"name": "config", "configMap": {"name": f"{group}-config", "defaultMode": 420}},
            *({"name": secret, "secret": {"secretName": secret, "defaultMode": 420}} for secret in secrets),
            {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]
SIDECAR_ENV = (("LOG_LEVEL", "info"), ("METRICS_PORT", "9102"), ("SHIP_TO", "http://logs.observability:8080"))


def realistic_pod(index: int, node: int | None, groups: int) -> dict[str, Any]:
    """The pod of :func:`pod` as the API server returns it (6.4 KB of JSON pending, 8.4 KB bound): a Volcano job's
    worker with an init container, a trainer and a log sidecar (env, a probe, volume mounts), five volumes,
    tolerations, an owner reference, managedFields of three managers, and conditions and container statuses once
    bound. The ledger reads the same fields as from :func:`pod`; the rest is what it has to skip."""
    group = f"pg-{index % groups}"
    manifest = pod(index, node, groups)
    trainer = manifest["spec"]["containers"][0]
    env: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in (
        ("NCCL_DEBUG", "INFO"), ("NCCL_SOCKET_IFNAME", "eth0"), ("NCCL_IB_DISABLE", "0"), ("OMP_NUM_THREADS", "8"),
        ("MASTER_ADDR", f"{group}-worker-0.{group}"), ("MASTER_PORT", "23456"), ("WORLD_SIZE", "8"),
        ("PYTHONUNBUFFERED", "1"), ("HF_HOME", "/cache/huggingface"))]
    env += [{"name": "RANK", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                        "fieldPath": "metadata.annotations['volcano.sh/task-index']"}}},
            {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}]
    mounts = [{"mountPath": "/dev/shm", "name": "dshm"}, {"mountPath": "/cache", "name": "cache"},
              {"mountPath": "/etc/job", "name": "config", "readOnly": True},
              {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access",
               "readOnly": True}]
    trainer.update({
        "image": "registry.example.com/ml/trainer:v2.4.1", "imagePullPolicy": "IfNotPresent", "command": ["torchrun"],
        "args": ["--nnodes=8", "--nproc_per_node=1", "train.py", "--config=/etc/job/config.yaml"], "env": env,
        "ports": [{"containerPort": 23456, "name": "master", "protocol": "TCP"}], "volumeMounts": mounts,
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10,
                           "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"})
    sidecar = {"name": "log-shipper", "image": "registry.example.com/infra/fluent-bit:3.0.4",
               "imagePullPolicy": "IfNotPresent", "env": [{"name": k, "value": v} for k, v in SIDECAR_ENV],
               "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
               "volumeMounts": [mounts[0], mounts[3]], "terminationMessagePath": "/dev/termination-log",
               "terminationMessagePolicy": "File"}
    init = {"name": "fetch-weights", "image": "registry.example.com/ml/fetcher:v1.2.0",
            "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", "fetch --to /cache/models/foundation-7b --if-missing"],
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}, "volumeMounts": [mounts[1], mounts[3]],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    manifest["spec"].update({
        "containers": [trainer, sidecar], "initContainers": [init], "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True, "priority": 0, "preemptionPolicy": "PreemptLowerPriority",
        "restartPolicy": "OnFailure", "schedulerName": "volcano", "securityContext": {"fsGroup": 1000},
        "serviceAccount": "default", "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
        "hostname": f"{group}-worker-{index % 8}", "subdomain": group,
        "tolerations": TOLERATIONS, "volumes": job_volumes(group, secrets=("wandb",))})
    metadata = manifest["metadata"]
    metadata["annotations"].update({"volcano.sh/job-name": group, "volcano.sh/job-version": "0",
                                    "volcano.sh/task-index": str(index % 8), "volcano.sh/task-spec": "worker"})
    metadata.update({
        "generateName": f"{group}-worker-", "uid": f"{index:08x}-1111-4222-8333-444444444444",
        "resourceVersion": str(2_000_000 + index), "creationTimestamp": TIME,
        "labels": {"volcano.sh/job-name": group, "volcano.sh/job-namespace": "ml", "volcano.sh/queue-name": "q0",
                   "volcano.sh/task-spec": "worker", "app.kubernetes.io/part-of": "foundation-7b"},
        "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": group,
                             "uid": f"{index % groups:08x}-5555-4666-8777-888888888888", "controller": True,
                             "blockOwnerDeletion": True}],
        "managedFields": _managed_fields(node is not None)})
    if node is not None:
        ip = f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}"
        manifest["status"].update({
            "qosClass": "Burstable", "hostIP": f"10.0.{node // 256 % 256}.{node % 256}", "podIP": ip,
            "podIPs": [{"ip": ip}], "startTime": TIME,
            "conditions": [{"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": TIME}
                           for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "initContainerStatuses": [_container_status(init, index, {"terminated": {
                "exitCode": 0, "reason": "Completed", "startedAt": TIME, "finishedAt": TIME}})],
            "containerStatuses": [_container_status(container, index, {"running": {"startedAt": TIME}})
                                  for container in (trainer, sidecar)]})
    else:
        manifest["status"].update({"qosClass": "Burstable", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastProbeTime": None,
             "lastTransitionTime": TIME, "message": "pod group is not ready, 1 Pending, 8 minAvailable"}]})
    return manifest


def _container_status(container: dict[str, Any], index: int, state: dict[str, Any]) -> dict[str, Any]:
    return {"name": container["name"], "ready": "running" in state, "restartCount": 0, "started": "running" in state,
            "image": container["image"], "imageID": container["image"].split(":")[0] + "@sha256:" + "ab" * 32,
            "containerID": f"containerd://{index:016x}{container['name'].encode().hex():0<48.48}", "state": state,
            "lastState": {}}


def _managed_fields(bound: bool) -> list[dict[str, Any]]:
    container: dict[str, Any] = {key: {} for key in (
        ".", "f:env", "f:image", "f:imagePullPolicy", "f:name", "f:resources", "f:terminationMessagePath",
        "f:terminationMessagePolicy", "f:volumeMounts")}
    fields = [
        {"manager": "vc-controller-manager", "operation": "Update", "apiVersion": "v1", "time": TIME,
         "fieldsType": "FieldsV1", "fieldsV1": {
             "f:metadata": {"f:annotations": {".": {}, "f:scheduling.k8s.io/group-name": {},
                                              "f:volcano.sh/card.name": {}, "f:volcano.sh/job-name": {},
                                              "f:volcano.sh/task-index": {}, "f:volcano.sh/task-spec": {}},
                            "f:generateName": {}, "f:labels": {".": {}, "f:volcano.sh/job-name": {},
                                                               "f:volcano.sh/queue-name": {}},
                            "f:ownerReferences": {".": {}, 'k:{"uid":"job"}': {}}},
             "f:spec": {"f:containers": {'k:{"name":"trainer"}': container, 'k:{"name":"log-shipper"}': {}},
                        "f:initContainers": {'k:{"name":"fetch-weights"}': {}},
                        "f:schedulerName": {}, "f:tolerations": {}, "f:volumes": {}}}},
        {"manager": "vc-scheduler", "operation": "Update", "apiVersion": "v1", "time": TIME, "fieldsType": "FieldsV1",
         "subresource": "binding", "fieldsV1": {"f:spec": {"f:nodeName": {}}}}]
    if bound:
        fields.append({"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": TIME,
                       "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {
                           "f:conditions": {}, "f:containerStatuses": {}, "f:initContainerStatuses": {}, "f:phase": {},
                           "f:podIP": {}, "f:startTime": {}}}})
    return fields
