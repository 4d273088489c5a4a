"""How long ``kubectl get nodes,queues,podgroups,pods -A -o yaml|json | cardquota usage --cluster -`` takes, and how
much memory, on a large cluster dump: 1,000 nodes and 40,000 pods shaped as the API server returns them (managed
fields, env, volumes, tolerations, conditions, container statuses: ~4.5 KB of YAML a pod, ~190 MB in all).

    python bench/large_input.py [--nodes 1000] [--pods 40000] [--runs 3] [--keep DIR]

Each run is a fresh ``cardquota usage --cluster -`` process reading the dump from stdin; wall time and peak RSS
(``ru_maxrss`` of the child) are printed per format, as min-max over the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import PRODUCTS, TIME, TOLERATIONS, job_volumes

_Dumper: type[Any] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def realistic_node(index: int) -> dict[str, Any]:
    product = PRODUCTS[index % len(PRODUCTS)]
    name = f"gpu-node-{index:04d}"
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "p4d.24xl",
        "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": f"us-east-1{'abc'[index % 3]}",
        "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true", "feature.node.kubernetes.io/kernel-version.full":
        "5.15.0-1051-aws", "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "129",
        "nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "2", "nvidia.com/gfd.timestamp":
        "1732000000", "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "8", "nvidia.com/gpu.family": "ampere", "nvidia.com/gpu.machine": "p4d.24xlarge",
        "nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.product": product, "nvidia.com/gpu.replicas": "1",
        "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "single", "nvidia.com/gpu.present": "true",
    }
    conditions = [{"type": kind, "status": "False" if kind != "Ready" else "True", "reason": f"Kubelet{kind}",
                   "message": f"kubelet reports {kind}", "lastHeartbeatTime": TIME, "lastTransitionTime": TIME}
                  for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")]
    images = [{"names": [f"registry.example.com/ml/image-{image}@sha256:{'%064x' % (index * 100 + image)}",
                         f"registry.example.com/ml/image-{image}:v1.{image}"], "sizeBytes": 4_000_000_000 + image}
              for image in range(20)]
    capacity = {"cpu": "96", "ephemeral-storage": "1000000000Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                "memory": "1176522768Ki", "nvidia.com/gpu": "8", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"{index:08d}-aaaa-bbbb-cccc-000000000000", "labels": labels,
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                         "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
                         "creationTimestamp": TIME, "resourceVersion": str(1_000_000 + index)},
            "spec": {"providerID": f"aws:///us-east-1a/i-{index:017x}",
                     "podCIDR": f"10.{index // 256}.{index % 256}.0/24"},
            "status": {"allocatable": dict(capacity), "capacity": capacity, "conditions": conditions,
                       "addresses": [{"type": "InternalIP", "address": f"10.0.{index // 256}.{index % 256}"},
                                     {"type": "Hostname", "address": name}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}, "images": images,
                       "nodeInfo": {"architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.11",
                                    "kernelVersion": "5.15.0-1051-aws", "kubeletVersion": "v1.29.3",
                                    "operatingSystem": "linux", "osImage": "Ubuntu 22.04.4 LTS"}}}


def realistic_pod(index: int, nodes: int, groups: int) -> dict[str, Any]:
    running = index % 5 != 0
    group = f"pg-{index % groups}"
    env = [{"name": name, "value": value} for name, value in (
        ("NCCL_DEBUG", "INFO"), ("NCCL_SOCKET_IFNAME", "eth0"), ("OMP_NUM_THREADS", "8"),
        ("MASTER_ADDR", f"{group}-master-0.{group}"), ("MASTER_PORT", "23456"), ("WORLD_SIZE", "8"),
        ("PYTHONUNBUFFERED", "1"), ("HF_HOME", "/cache/huggingface"))]
    index_field = "metadata.annotations['volcano.sh/task-index']"
    env.append({"name": "RANK", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": index_field}}})
    container = {
        "name": "trainer", "image": "registry.example.com/ml/trainer:v2.4.1", "imagePullPolicy": "IfNotPresent",
        "command": ["torchrun"],
        "args": ["--nnodes=1", "--nproc_per_node=1", "train.py", "--config=/etc/job/config.yaml"],
        "env": env, "ports": [{"containerPort": 23456, "name": "master", "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                      "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}},
        "volumeMounts": [{"mountPath": "/dev/shm", "name": "dshm"}, {"mountPath": "/cache", "name": "cache"},
                         {"mountPath": "/etc/job", "name": "config", "readOnly": True},
                         {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access",
                          "readOnly": True}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    spec: dict[str, Any] = {
        "containers": [container], "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "priority": 0,
        "preemptionPolicy": "PreemptLowerPriority", "restartPolicy": "OnFailure", "schedulerName": "volcano",
        "securityContext": {}, "serviceAccount": "default", "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": TOLERATIONS, "volumes": job_volumes(group)}
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Guaranteed", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastProbeTime": None,
         "lastTransitionTime": TIME, "message": "pod group is not ready, 1 Pending, 8 minAvailable"}]}
    if running:
        node = f"gpu-node-{(index * 7919) % nodes:04d}"
        spec["nodeName"] = node
        status = {"phase": "Running", "qosClass": "Guaranteed", "hostIP": "10.0.0.1",
                  "podIP": f"10.1.{index % 250}.{index % 200}",
                  "podIPs": [{"ip": f"10.1.{index % 250}.{index % 200}"}], "startTime": TIME,
                  "conditions": [{"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": TIME}
                                 for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                  "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 0, "started": True,
                                         "image": "registry.example.com/ml/trainer:v2.4.1",
                                         "imageID": "registry.example.com/ml/trainer@sha256:" + "ab" * 32,
                                         "containerID": "containerd://" + f"{index:064x}",
                                         "state": {"running": {"startedAt": TIME}}, "lastState": {}}]}
    managed = [{"manager": "vc-controller-manager", "operation": "Update", "apiVersion": "v1", "time": TIME,
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {
                ".": {}, "f:volcano.sh/card.name": {},
                "f:scheduling.k8s.io/group-name": {}, "f:volcano.sh/job-name": {}, "f:volcano.sh/task-index": {}},
                "f:labels": {".": {}, "f:volcano.sh/job-name": {}, "f:volcano.sh/task-spec": {}}}, "f:spec": {
                "f:containers": {'k:{"name":"trainer"}': {".": {}, "f:env": {}, "f:image": {}, "f:resources": {}}}}}},
               {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": TIME,
                "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {
                    "f:conditions": {}, "f:containerStatuses": {}, "f:phase": {}, "f:startTime": {}}}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{group}-worker-{index}", "namespace": "ml",
                         "uid": f"{index:08d}-1111-2222-3333-444444444444", "resourceVersion": str(2_000_000 + index),
                         "creationTimestamp": TIME, "generateName": f"{group}-worker-",
                         "labels": {"volcano.sh/job-name": group, "volcano.sh/job-namespace": "ml",
                                    "volcano.sh/queue-name": f"q{index % 20}", "volcano.sh/task-spec": "worker"},
                         "annotations": {"volcano.sh/card.name": "NVIDIA-A100|NVIDIA-H100",
                                         "scheduling.k8s.io/group-name": group, "volcano.sh/job-name": group,
                                         "volcano.sh/job-version": "0", "volcano.sh/queue-name": f"q{index % 20}",
                                         "volcano.sh/task-index": str(index % 8), "volcano.sh/task-spec": "worker"},
                         "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": group,
                                              "uid": f"{index % groups:08d}-5555-6666-7777-888888888888",
                                              "controller": True, "blockOwnerDeletion": True}],
                         "managedFields": managed},
            "spec": spec, "status": status}


def realistic_cluster(nodes: int, pods: int, queues: int = 20) -> dict[str, Any]:
    """One ``kind: List`` as ``kubectl get nodes,queues,podgroups,pods -A -o yaml`` prints it."""
    groups = max(1, pods // 8)
    items: list[dict[str, Any]] = [realistic_node(index) for index in range(nodes)]
    for index in range(queues):
        quota = dict.fromkeys(PRODUCTS, 64)
        items.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                      "metadata": {"name": f"q{index}", "annotations": {"volcano.sh/card.quota": json.dumps(quota)}},
                      "spec": {"weight": 1, "reclaimable": True}, "status": {"state": "Open"}})
    for index in range(groups):
        items.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                      "metadata": {"name": f"pg-{index}", "namespace": "ml",
                                   "annotations": {"volcano.sh/card.request": json.dumps({PRODUCTS[0]: 8})}},
                      "spec": {"queue": f"q{index % queues}", "minMember": 8},
                      "status": {"phase": "Running" if index % 5 else "Pending"}})
    items.extend(realistic_pod(index, nodes, groups) for index in range(pods))
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def write(cluster: dict[str, Any], directory: Path) -> dict[str, Path]:
    paths = {"yaml": directory / "cluster.yaml", "json": directory / "cluster.json"}
    with paths["yaml"].open("w") as out:
        yaml.dump(cluster, out, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    with paths["json"].open("w") as out:
        json.dump(cluster, out, indent=4)  # as kubectl -o json prints it
    return paths


def measure(path: Path) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, exit code) of one ``cardquota usage --cluster -`` reading ``path``."""
    with path.open("rb") as stdin:
        started = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "cardquota", "usage", "--cluster", "-", "-o", "json"],
                                 stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        child.stderr.close()  # type: ignore[union-attr]
    return elapsed, usage.ru_maxrss / 1024, child.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=40_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write (or reuse) the dumps in this directory")
    parser.add_argument("--formats", default="json,yaml")
    args = parser.parse_args()
    directory = args.keep or Path(tempfile.mkdtemp(prefix="cardquota-large-"))
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"yaml": directory / "cluster.yaml", "json": directory / "cluster.json"}
    if not all(path.exists() for path in paths.values()):
        paths = write(realistic_cluster(args.nodes, args.pods), directory)
    for form in args.formats.split(","):
        path = paths[form]
        results = [measure(path) for _ in range(args.runs)]
        seconds = [result[0] for result in results]
        peaks = [result[1] for result in results]
        codes = {result[2] for result in results}
        print(f"{form}: {path.stat().st_size / 1e6:.0f} MB, {args.nodes:,} nodes / {args.pods:,} pods: "
              f"{min(seconds):.1f}-{max(seconds):.1f} s, peak RSS {min(peaks):,.0f}-{max(peaks):,.0f} MB "
              f"(exit {', '.join(map(str, sorted(codes)))}; {args.runs} runs)", flush=True)


if __name__ == "__main__":
    main()
