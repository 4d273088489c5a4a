"""Volcano-shaped extender payloads (TaskInfo, NodeInfo, JobInfo, QueueInfo with Go field names) built from
manifests, as the scheduler's extender plugin marshals them."""

from __future__ import annotations

import copy
from typing import Any

PENDING, ALLOCATED, PIPELINED, BOUND, RUNNING, RELEASING = 1, 2, 4, 16, 32, 64
"""``TaskStatus`` bit flags (pkg/scheduler/api/types.go, v1.15.1)."""


def task_info(pod: dict[str, Any], *, status: int | None = None, node: str | None = None) -> dict[str, Any]:
    metadata = pod["metadata"]
    node = node if node is not None else pod["spec"].get("nodeName", "")
    group = metadata.get("annotations", {}).get("scheduling.k8s.io/group-name", metadata["name"])
    return {"UID": f"uid-{metadata['name']}", "Job": f"{metadata.get('namespace', 'default')}/{group}",
            "Name": metadata["name"], "Namespace": metadata.get("namespace", "default"), "TaskRole": "worker",
            "Resreq": {"MilliCPU": 1000, "Memory": 0, "ScalarResources": {}}, "NodeName": node,
            "Status": status if status is not None else (RUNNING if node else PENDING), "Priority": 0,
            "Preemptable": False, "BestEffort": False, "Pod": copy.deepcopy(pod)}


def node_info(node: dict[str, Any], pods: list[dict[str, Any]] = ()) -> dict[str, Any]:
    name = node["metadata"]["name"]
    return {"Name": name, "Node": copy.deepcopy(node), "State": {"Phase": 1},
            "Idle": {"MilliCPU": 64000, "Memory": 0, "ScalarResources": {}},
            # keyed by namespace/name (``PodKey``, NodeInfo.AddTask, pkg/scheduler/api/node_info.go, v1.15.1)
            "Tasks": {f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}":
                      task_info(pod, node=name) for pod in pods},
            "Generation": 1}


def queue_info(queue: dict[str, Any]) -> dict[str, Any]:
    name = queue["metadata"]["name"]
    return {"UID": name, "Name": name, "Weight": 1, "Hierarchy": "", "Weights": "",
            "Queue": {key: copy.deepcopy(queue[key]) for key in ("metadata", "spec", "status") if key in queue}}


def job_info(podgroup: dict[str, Any], pods: list[dict[str, Any]] = ()) -> dict[str, Any]:
    metadata = podgroup["metadata"]
    namespace = metadata.get("namespace", "default")
    return {"UID": f"{namespace}/{metadata['name']}", "PgUID": f"pg-{metadata['name']}", "Name": metadata["name"],
            "Namespace": namespace, "Queue": podgroup["spec"].get("queue", "default"), "Priority": 0,
            "MinAvailable": podgroup["spec"].get("minMember", 1),
            "Tasks": {f"uid-{pod['metadata']['name']}": task_info(pod) for pod in pods},
            "PodGroup": {**{key: copy.deepcopy(podgroup[key]) for key in ("metadata", "spec", "status")},
                         "Version": "v1beta1"}}


def session_open(nodes: list[dict[str, Any]], queues: list[dict[str, Any]], jobs: list[dict[str, Any]],
                 pods_by_node: dict[str, list[dict[str, Any]]] | None = None,
                 pods_by_job: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The onSessionOpen body: ``pods_by_job`` (by PodGroup name) are the jobs' tasks, as Volcano sends every
    pending pod of a job in its JobInfo."""
    pods_by_node, pods_by_job = pods_by_node or {}, pods_by_job or {}
    return {"Jobs": {f"{j['metadata'].get('namespace', 'default')}/{j['metadata']['name']}":
                     job_info(j, pods_by_job.get(j["metadata"]["name"], [])) for j in jobs},
            "Nodes": {n["metadata"]["name"]: node_info(n, pods_by_node.get(n["metadata"]["name"], []))
                      for n in nodes},
            "Queues": {q["metadata"]["name"]: queue_info(q) for q in queues},
            "NamespaceInfo": {}, "RevocableNodes": {}, "NodeList": None}
