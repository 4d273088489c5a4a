"""What Volcano's own predicates check of a node for a pod, beyond resources (``cardquota simulate``): required node
affinity and taints, as kube-scheduler's NodeAffinity and TaintToleration plugins read them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.selectors import expression_matches


def required_affinity_matches(pod_spec: Mapping[str, Any], labels: Mapping[str, str], node_name: str) -> bool:
    """Whether a node with ``labels`` named ``node_name`` satisfies the pod's required node affinity (its terms ORed,
    each term's expressions ANDed; ``matchFields`` on ``metadata.name``)."""
    affinity = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(affinity, MAPPING_TYPES):
        return True
    terms = [term for term in affinity.get("nodeSelectorTerms") or [] if isinstance(term, MAPPING_TYPES)]
    fields = {"metadata.name": node_name}
    return not terms or any(
        all(expression_matches(e, labels) for e in term.get("matchExpressions") or [])
        and all(expression_matches(e, fields) for e in term.get("matchFields") or [])
        for term in terms)


def untolerated_taint(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """The first NoSchedule/NoExecute taint of ``node`` the pod does not tolerate (``key: value``), or None."""
    tolerations = [t for t in pod_spec.get("tolerations") or [] if isinstance(t, MAPPING_TYPES)]
    for taint in (node.get("spec") or {}).get("taints") or []:
        if not isinstance(taint, MAPPING_TYPES) or taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(toleration, taint) for toleration in tolerations):
            return f"{taint.get('key')}: {taint.get('value', '')}" if taint.get("value") else str(taint.get("key"))
    return None


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration.get("key") == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", "")
