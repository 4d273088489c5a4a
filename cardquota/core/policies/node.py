"""Node admission: the crossquota annotations (``volcano.sh/crossquota-<resource>``,
``volcano.sh/crossquota-percentage-<resource>``) must be readable and within the node's allocatable.

A node without crossquota annotations is allowed with no patch and no warning. On an update, a violation of an
annotation whose value did not change is a warning, not a denial: the value is already stored, and denying would
only block unrelated updates of the node (``kubectl cordon``, taints set by the node controller, labels set by
the kubelet) — for instance after the node's allocatable shrank below a quota admitted earlier.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest
from cardquota.core.policies.common import annotations_of
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.crossquota import node_annotation_violations
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict, decide

UNCHANGED_NOTE = "already set before this update, so not denied; fix or remove it"


def admit(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    """The verdict on creating (``old`` None) or updating a ``v1`` Node."""
    violations = node_annotation_violations(manifest)
    if old is None or not violations:
        return decide(violations)
    annotations, previous = annotations_of(manifest), annotations_of(old)
    unchanged = {name: value for name, value in annotations.items()
                 if name in previous and _same(previous[name], value)}
    if not unchanged:
        return decide(violations)
    changed = {name: value for name, value in annotations.items() if name not in unchanged}
    denied = node_annotation_violations(_with_annotations(manifest, changed))
    kept = node_annotation_violations(_with_annotations(manifest, unchanged))
    return decide(denied, [f"{violation} ({UNCHANGED_NOTE})" for violation in kept])


def _with_annotations(manifest: Manifest, annotations: Mapping[Any, Any]) -> dict[str, Any]:
    """The node with only these annotations (a shallow copy: the allocatable is shared, nothing is mutated)."""
    metadata = manifest.get("metadata")
    return {**manifest, "metadata": {**(metadata if isinstance(metadata, MAPPING_TYPES) else {}),
                                     "annotations": dict(annotations)}}


def _same(before: object, after: object) -> bool:
    return before is after or before == after
