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
