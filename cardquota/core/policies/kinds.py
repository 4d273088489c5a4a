"""Kinds no policy admits that are most likely typos: ``kind: Queues`` in ``scheduling.volcano.sh/v1beta1`` would be
refused by the API server, yet an offline ``check`` allowed it as an object no rule concerns.

- In one of Volcano's API groups, every kind Volcano does not define is warned about, with the closest kind of that
  group when one is close ("did you mean Queue?"), else the group's kinds; an API group under ``volcano.sh`` that
  Volcano does not define is warned about with the closest group.
- In another group of a kind cardquota checks (core ``v1``, ``apps``, ``batch``, ``autoscaling``), a kind the group
  does not define is warned about only when it is close to a kind cardquota checks there (``Pods``, ``Deploymnet``):
  other kinds are the API server's business.
- Lists of a known kind (``QueueList``) are known. Nothing here denies: the API server refuses unknown kinds itself.
"""

from __future__ import annotations

import difflib

from cardquota.core.objects import Manifest
from cardquota.core.snapshot import CLOSEST_CUTOFF
from cardquota.core.violations import Violation, invalid, shown
from cardquota.core.workload_kinds import SERVED_VERSIONS as WORKLOAD_KIND_VERSIONS
from cardquota.core.workload_kinds import not_checked_reason, pod_template_path

VOLCANO_KINDS: dict[str, frozenset[str]] = {
    "scheduling.volcano.sh": frozenset({"Queue", "PodGroup"}),
    "batch.volcano.sh": frozenset({"Job", "CronJob"}),
    "bus.volcano.sh": frozenset({"Command"}),
    "flow.volcano.sh": frozenset({"JobFlow", "JobTemplate"}),
    "nodeinfo.volcano.sh": frozenset({"Numatopology"}),
    "topology.volcano.sh": frozenset({"HyperNode"}),
    "shard.volcano.sh": frozenset({"NodeShard"}),
    "config.volcano.sh": frozenset({"ColocationConfiguration"}),
}
"""Volcano's API groups and their kinds, as its CRDs define them (volcano v1.15.1 and master ed72c7c8:
``config/crd/volcano/bases/*.yaml`` and ``config/crd/jobflow/bases/*.yaml``, ``spec.group`` and ``spec.names.kind``)."""

SERVED_VERSIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("scheduling.volcano.sh", "Queue"): ("v1beta1",),
    ("scheduling.volcano.sh", "PodGroup"): ("v1beta1",),
    ("batch.volcano.sh", "Job"): ("v1alpha1",),
    ("batch.volcano.sh", "CronJob"): ("v1alpha1",),
    ("", "Pod"): ("v1",), ("", "Node"): ("v1",), ("", "ConfigMap"): ("v1",),
    **{("apps", kind): ("v1",) for kind in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet")},
    ("batch", "Job"): ("v1",), ("batch", "CronJob"): ("v1",),
    ("autoscaling", "HorizontalPodAutoscaler"): ("v1", "v2"),
    **WORKLOAD_KIND_VERSIONS,
}
"""The versions the API server serves for each kind a policy admits: Volcano's CRDs (v1.15.1,
``config/crd/volcano/bases/*.yaml``, ``spec.versions[].served``), Kubernetes v1.35's built-in groups, and the
registered workload kinds' CRDs (:data:`cardquota.core.workload_kinds.SERVED_VERSIONS`)."""

VOLCANO_DOMAIN = "volcano.sh"

UPSTREAM_KINDS: dict[str, frozenset[str]] = {
    "": frozenset({"Binding", "ComponentStatus", "ConfigMap", "Endpoints", "Event", "LimitRange", "Namespace", "Node",
                   "PersistentVolume", "PersistentVolumeClaim", "Pod", "PodTemplate", "ReplicationController",
                   "ResourceQuota", "Secret", "Service", "ServiceAccount", "List"}),
    "apps": frozenset({"ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet", "StatefulSet"}),
    "batch": frozenset({"Job", "CronJob"}),
    "autoscaling": frozenset({"HorizontalPodAutoscaler", "Scale"}),
}
"""The kinds of the Kubernetes API groups that hold a kind cardquota checks (k8s.io/api v0.34: ``core/v1``,
``apps/v1``, ``batch/v1``, ``autoscaling/v2``, each ``register.go``'s ``addKnownTypes``; lists left out)."""

MAX_COMPARED = 100
"""Kinds and groups longer than this are not compared (difflib is quadratic; a real kind is a short identifier)."""


def unknown_kind_warning(group: str, kind: str, checked: frozenset[str]) -> str | None:
    """The warning for ``kind`` in API ``group`` (``checked``: the kinds of that group a policy admits), or None
    when the kind is known or nothing suggests a typo."""
    if not kind or kind in checked:
        return None
    volcano = group == VOLCANO_DOMAIN or group.endswith("." + VOLCANO_DOMAIN)
    if volcano and group not in VOLCANO_KINDS:
        return (f"API group {shown(group)} is not one of Volcano's{_did_you_mean(group, VOLCANO_KINDS)}: "
                f"{shown(kind)} not checked")
    known = VOLCANO_KINDS.get(group) if volcano else UPSTREAM_KINDS.get(group)
    if known is None or kind in known or kind.removesuffix("List") in known:
        return None
    where = f"{shown(group)}" if group else "the core API group (v1)"
    if volcano:
        suggestion = _did_you_mean(kind, known) or f" (its kinds: {', '.join(sorted(known))})"
        return f"kind {shown(kind)} is not a kind of {where}{suggestion}: not checked"
    suggestion = _did_you_mean(kind, checked)
    return f"kind {shown(kind)} is not a kind of {where}{suggestion}: not checked" if suggestion else None


def unserved_version_violation(api_version: str, kind: str) -> Violation | None:
    """A kind a policy admits written with a version the API server does not serve (``scheduling.volcano.sh/v1beta2``
    Queue): ``kubectl apply`` is refused ("no matches for kind"), so ``check`` refuses it too."""
    group, _, version = api_version.rpartition("/")
    served = SERVED_VERSIONS.get((group, kind))
    if served is None or version in served:
        return None
    versions = " or ".join(f"{group}/{name}" if group else name for name in served)
    return invalid("apiVersion", f"{shown(api_version)} is not served for {kind} (use {versions}): kubectl apply "
                                 f"would be refused with no matches for kind {kind} in version {api_version}")


def _did_you_mean(name: str, choices: frozenset[str] | dict[str, frozenset[str]]) -> str:
    if len(name) > MAX_COMPARED:
        return ""
    by_lower = {choice.lower(): choice for choice in choices}
    # as alike as a card type suggested for a typo, case ignored (outside Volcano's groups: whether to warn at all)
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=CLOSEST_CUTOFF)
    return f" (did you mean {by_lower[close[0]]}?)" if close else ""


def unchecked_workload_warning(manifest: Manifest, group: str, kind: str) -> str | None:
    """``kind X (group) is not checked`` for an object no policy admits that holds a pod template (a kind cardquota
    knows it cannot check, with the reason (:func:`~cardquota.core.workload_kinds.not_checked_reason`); any other, found
    by a bounded walk, :func:`~cardquota.core.workload_kinds.pod_template_path`): its pods are checked only when
    they are created, so a quota they can never fit is found late."""
    where = shown(group) if group else "core"
    reason = not_checked_reason(manifest)
    if reason is not None:
        return f"kind {shown(kind)} ({where}) is not checked: {reason}"
    path = pod_template_path(manifest)
    if path is None:
        return None
    return (f"kind {shown(kind)} ({where}) is not checked: it holds a pod template ({path}) whose pods cardquota "
            "checks only when they are created")
