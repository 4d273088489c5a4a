"""Workloads with a pod template (Deployments, StatefulSets, ReplicaSets, DaemonSets, Jobs, CronJobs): where the
template is, and how a snapshot keys them."""

from __future__ import annotations

from collections.abc import Mapping

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

WorkloadKey = tuple[str, str, str, str]
"""(API group, kind, namespace, name)."""


def workload_key(manifest: Manifest) -> WorkloadKey | None:
    """The key of a workload with a pod template, None for any other object (or one without a name)."""
    group = str(manifest.get("apiVersion", "")).rpartition("/")[0]
    kind = str(manifest.get("kind", ""))
    if (group, kind) not in TEMPLATE_PATHS:
        return None
    metadata = manifest.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
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
        node = node.get(step) if isinstance(node, Mapping) else None
    kept: object = node
    for step in reversed(path):
        kept = {step: kept}
    assert isinstance(kept, dict)
    return {"apiVersion": manifest.get("apiVersion"), "kind": key[1],
            "metadata": {"name": key[3], "namespace": key[2]}, **kept}
