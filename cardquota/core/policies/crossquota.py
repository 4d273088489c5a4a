"""The crossquota annotations (crossquota-design.md): per-node quota overrides and the pod's scoring strategy.

On a Node, for the non-GPU pods the crossquota scheduler plugin lets onto a GPU node:

* ``volcano.sh/crossquota-<resource>: "32"`` caps ``<resource>`` at an absolute Kubernetes quantity, which must
  be 0 or more and at most what the node has (``status.allocatable[<resource>]``): a cap above it limits nothing,
  and a cap on a resource the node does not offer is a typo or a stale override;
* ``volcano.sh/crossquota-percentage-<resource>: "50"`` caps it at a percentage of allocatable, a number from 0
  to 100 (decimals allowed; NaN and infinities are not numbers here).

These override the plugin's ``quota.<resource>`` / ``quota-percentage.<resource>`` arguments, absolute first.

On a Pod, ``volcano.sh/crossquota-scoring-strategy`` picks ``most-allocated`` (the default) or
``least-allocated``; it is not a ``crossquota-<resource>`` annotation, and on a Node it means nothing and is not
examined (nor is any annotation outside the ``volcano.sh/crossquota-`` prefix).

Nothing here raises: values and allocatable amounts that cannot be read become :class:`Violation` values. A
quota that cannot be compared because the node's allocatable cannot be read is a violation naming that.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.keys import (
    ANNOTATION_QUOTA_PERCENTAGE_PREFIX,
    ANNOTATION_QUOTA_PREFIX,
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    SCORING_STRATEGY_ANNOTATION,
)
from cardquota.core.quantity import parse_quantity
from cardquota.core.violations import (
    ANNOTATIONS,
    FieldPath,
    Violation,
    invalid,
    not_supported,
    quoted,
    required,
    shown,
    type_name,
    written,
)

SCORING_STRATEGIES = (MOST_ALLOCATED, LEAST_ALLOCATED)
"""The valid scoring strategies; most-allocated is the plugin's default."""

MAX_PERCENTAGE = Decimal(100)
_PERCENTAGE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_MAX_VALUE_LENGTH = 64


def scoring_strategy_violations(annotations: Mapping[str, object]) -> list[Violation]:
    """What is wrong with a pod's ``volcano.sh/crossquota-scoring-strategy``: nothing when it is absent. The
    annotations as written (a pod template's are read unvalidated, so a value may be any JSON)."""
    if not isinstance(annotations, MAPPING_TYPES) or SCORING_STRATEGY_ANNOTATION not in annotations:
        return []
    value = annotations[SCORING_STRATEGY_ANNOTATION]
    if isinstance(value, str) and value in SCORING_STRATEGIES:
        return []
    shown_value = quoted(value) if isinstance(value, str) else type_name(value)
    return [not_supported(ANNOTATIONS.key(SCORING_STRATEGY_ANNOTATION),
                          f"{shown_value} is not a scoring strategy; use {MOST_ALLOCATED} or {LEAST_ALLOCATED}")]


def quota_resource(annotation: str) -> str | None:
    """The resource a ``volcano.sh/crossquota-<resource>`` annotation caps, or None for any other annotation
    (``crossquota-percentage-…`` and ``crossquota-scoring-strategy`` included)."""
    if (not annotation.startswith(ANNOTATION_QUOTA_PREFIX) or annotation == SCORING_STRATEGY_ANNOTATION
            or annotation.startswith(ANNOTATION_QUOTA_PERCENTAGE_PREFIX)):
        return None
    return annotation[len(ANNOTATION_QUOTA_PREFIX):]


def percentage_resource(annotation: str) -> str | None:
    """The resource a ``volcano.sh/crossquota-percentage-<resource>`` annotation caps, or None."""
    if not annotation.startswith(ANNOTATION_QUOTA_PERCENTAGE_PREFIX):
        return None
    return annotation[len(ANNOTATION_QUOTA_PERCENTAGE_PREFIX):]




def node_annotation_violations(node: Mapping[str, Any]) -> list[Violation]:
    """Every crossquota annotation of a Node that is malformed or out of range; empty when it has none."""
    metadata = node.get("metadata") if isinstance(node, MAPPING_TYPES) else None
    annotations = metadata.get("annotations") if isinstance(metadata, MAPPING_TYPES) else None
    if not isinstance(annotations, MAPPING_TYPES):
        return []
    violations: list[Violation] = []
    for name, value in annotations.items():
        if not isinstance(name, str):
            continue
        percentage_of = percentage_resource(name)
        quota_of = quota_resource(name)
        if percentage_of is None and quota_of is None:
            continue
        path = ANNOTATIONS.key(name)
        violation: Violation | None
        if not isinstance(value, str):
            violation = invalid(path, f"must be a string, not {type_name(value)} (quote the value)")
        elif not (percentage_of if percentage_of is not None else quota_of):
            violation = required(path, f"{shown(name)} names no resource; write {name}<resource>, such as {name}cpu")
        elif percentage_of is not None:
            violation = _percentage_violation(path, shown(name), value)
        else:
            assert quota_of is not None  # narrowed above: exactly one of the two is set
            violation = _quota_violation(path, shown(name), quota_of, value, node)
        if violation is not None:
            violations.append(violation)
    return violations


def _percentage_violation(path: FieldPath, name: str, value: str) -> Violation | None:
    if len(value) > _MAX_VALUE_LENGTH or not _PERCENTAGE.fullmatch(value):
        return invalid(path, f'{name} {quoted(value)} is not a number; write a percentage from 0 to 100, such as '
                             '"50" or "12.5"')
    if not Decimal(0) <= Decimal(value) <= MAX_PERCENTAGE:
        return invalid(path, f"{name} {value} is not a percentage from 0 to 100")
    return None


def _quota_violation(path: FieldPath, name: str, resource: str, value: str,
                     node: Mapping[str, Any]) -> Violation | None:
    try:
        quota = parse_quantity(value)
    except InputError:
        return invalid(path, f"{name} {quoted(value)} is not a Kubernetes quantity (such as 32, 500m or 64Gi)")
    if quota < 0:
        return invalid(path, f"{name} {value} is negative; a quota is 0 or more")
    label = shown(resource)
    status = node.get("status") if isinstance(node, MAPPING_TYPES) else None
    allocatable = status.get("allocatable") if isinstance(status, MAPPING_TYPES) else None
    if allocatable is None:
        return invalid(path, f"{name} {value} limits {label}, but the node reports no status.allocatable to limit")
    if not isinstance(allocatable, MAPPING_TYPES):
        return invalid(path, f"{name} {value} cannot be checked: the node's status.allocatable is not a map")
    if resource not in allocatable:
        return invalid(path, f"{name} {value} limits {label}, which the node does not have (it is not in "
                             "status.allocatable)")
    raw = allocatable[resource]
    try:
        available = parse_quantity(raw)
    except InputError:
        return invalid(path, f"{name} {value} cannot be checked: the node's allocatable {label} "
                             f"{written(raw)} is not a Kubernetes quantity")
    if quota > available:
        return invalid(path, f"{name} {value} is above the node's allocatable {label} {_written(raw)}")
    return None


def _written(raw: object) -> str:
    """An allocatable amount as the node wrote it (it parsed, so it is a short quantity or a number)."""
    return raw if isinstance(raw, str) else str(raw)





