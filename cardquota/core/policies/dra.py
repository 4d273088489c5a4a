"""A Volcano Queue's ``spec.dra``: DRA device quotas per DeviceClass (see the DRA queue quota design).

``spec.dra.capability`` / ``deserved`` / ``guarantee`` each map a DeviceClass name to ``{count, capacity}``:
``count`` a whole number of devices (int64, ≥ 0, required), ``capacity`` optional consumable-capacity dimensions
(``cores``, ``memory``) as Kubernetes quantities ≥ 0. Rules:

* the shape above, with DeviceClass names that are DNS subdomains and no unknown fields;
* per class, ``guarantee ≤ deserved ≤ capability`` for the count and every capacity dimension written in both
  (``guarantee ≤ capability`` directly where ``deserved`` says nothing). The capacity plugin does not use
  ``deserved``/``guarantee`` for elasticity today, but an inverted order is a mistake whoever reads it later;
* hierarchy: a child's capability per class and dimension must not exceed its parent's (a parent with no entry
  for a class, or no value for a dimension, does not limit it), and a queue must not drop below an existing child.

Never raises: everything wrong becomes a :class:`Violation`; rules that need queues missing from an incomplete
snapshot become warnings saying they were skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from cardquota.core.dra_quota import (
    CAPABILITY,
    CAPACITY,
    COUNT,
    DESERVED,
    DRA_PATH,
    GUARANTEE,
    ROOT_QUEUE,
    SECTIONS,
    DeviceQuota,
    Quotas,
    Value,
    name_of,
    read_quotas,
)
from cardquota.core.errors import one_line
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.policies.common import queue_not_found, skipped
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.violations import FieldPath, Violation, invalid, not_supported, shown, type_name

PARENT_PATH = FieldPath.of("spec", "parent")


def dra_violations(queue: Mapping[str, Any], snapshot: ClusterSnapshot) -> tuple[list[Violation], list[str]]:
    """(violations, warnings) for a Queue manifest's ``spec.dra``; ([], []) when it has none."""
    spec = queue.get("spec")
    if not isinstance(spec, MAPPING_TYPES):
        return [], []
    dra = spec.get("dra")
    if dra is None:
        return [], []
    violations: list[Violation] = []
    if not isinstance(dra, MAPPING_TYPES):
        return [invalid(DRA_PATH, f"must be a map of capability, deserved and guarantee, not {type_name(dra)}")], []
    for key in dra:
        if key not in SECTIONS:
            violations.append(not_supported(
                DRA_PATH.field(key),
                f"unknown field {name_of(key)} (spec.dra has capability, deserved and guarantee)",
            ))
    sections = {section: read_quotas(dra.get(section), DRA_PATH.child(section), violations) for section in SECTIONS}
    # a bound is judged against the other sections' bounds of its class: it depends on all of spec.dra
    violations.extend(violation.depending_on(DRA_PATH) for violation in _order_violations(sections))
    warnings: list[str] = []
    capability = sections[CAPABILITY]
    if capability:
        name = _queuename_of(queue)
        parent = spec.get("parent")
        if isinstance(parent, str) and parent and parent != name:
            parent_violations, parent_warnings = _parent_violations(parent, capability, snapshot)
            violations.extend(violation.depending_on(PARENT_PATH, DRA_PATH.child(CAPABILITY))
                              for violation in parent_violations)
            warnings.extend(parent_warnings)
        if name is not None:
            # Against the children the snapshot holds; like the card-quota rule, no warning for those it lacks.
            violations.extend(_child_violations(name, capability, snapshot))
    return [v.with_message(one_line(v.message)) for v in violations], [one_line(w) for w in warnings]


def _order_violations(sections: Mapping[str, Quotas]) -> list[Violation]:
    """guarantee ≤ deserved ≤ capability per class and bound; guarantee ≤ capability where deserved is silent."""
    violations: list[Violation] = []
    guarantee, deserved, capability = sections[GUARANTEE], sections[DESERVED], sections[CAPABILITY]
    for lower_name, lower, upper_name, upper in ((GUARANTEE, guarantee, DESERVED, deserved),
                                                  (DESERVED, deserved, CAPABILITY, capability)):
        for device_class, quota in lower.items():
            bound = upper.get(device_class)
            if bound is not None:
                violations.extend(_above(lower_name, upper_name, device_class, quota, bound))
    for device_class, quota in guarantee.items():
        bound = capability.get(device_class)
        if bound is None:
            continue
        middle = deserved.get(device_class, DeviceQuota())
        # Only the bounds deserved does not set: the others were already compared through deserved.
        unchained = DeviceQuota(
            count=quota.count if middle.count is None else None,
            capacity={d: v for d, v in quota.capacity.items() if d not in middle.capacity},
        )
        violations.extend(_above(GUARANTEE, CAPABILITY, device_class, unchained, bound))
    return violations


def _above(lower_name: str, upper_name: str, device_class: str, lower: DeviceQuota,
           upper: DeviceQuota) -> list[Violation]:
    return [
        invalid(_bound_path(lower_name, device_class, dimension),
                f"DeviceClass {device_class}: {lower_name} {_metric(dimension)} {value.written} is above "
                f"{upper_name} {_metric(dimension)} {bound.written} "
                "(each must be guarantee <= deserved <= capability)")
        for dimension, value, bound in _exceeding(lower, upper)
    ]


def _parent_violations(parent: str, capability: Quotas,
                       snapshot: ClusterSnapshot) -> tuple[list[Violation], list[str]]:
    record = snapshot.queues.get(parent)
    if record is None:
        if parent == ROOT_QUEUE:
            return [], []
        if snapshot.complete:
            # Worded as the card-quota hierarchy rule words it, so the Queue policy shows it once.
            return [queue_not_found(PARENT_PATH, parent, snapshot, what="parent queue")], []
        return [], [skipped(f"{DRA_PATH}.capability against parent queue {shown(parent)}")]
    limits = read_quotas(record.queue.dra.get(CAPABILITY))
    violations = []
    for device_class, quota in capability.items():
        limit = limits.get(device_class)
        if limit is None:
            continue
        for dimension, value, bound in _exceeding(quota, limit):
            what = _metric(dimension)
            violations.append(invalid(
                _bound_path(CAPABILITY, device_class, dimension),
                f"DeviceClass {device_class}: capability {what} {value.written} is above parent queue "
                f"{shown(parent)}'s capability {what} {bound.written}",
            ))
    return violations, []


def _child_violations(name: str, capability: Quotas, snapshot: ClusterSnapshot) -> list[Violation]:
    violations = []
    for child in sorted(snapshot.children_of(name), key=lambda record: record.queue.name):
        if child.queue.name == name:
            continue
        child_capability = read_quotas(child.queue.dra.get(CAPABILITY))
        for device_class, quota in capability.items():
            child_quota = child_capability.get(device_class)
            if child_quota is None:
                continue
            for dimension, needed, value in _exceeding(child_quota, quota):
                what = _metric(dimension)
                violations.append(invalid(
                    _bound_path(CAPABILITY, device_class, dimension),
                    f"DeviceClass {device_class}: capability {what} {value.written} is below child queue "
                    f"{shown(child.queue.name)}'s capability {what} {needed.written}",
                ))
    return violations


def _exceeding(lower: DeviceQuota, upper: DeviceQuota) -> Iterator[tuple[str | None, Value, Value]]:
    """(dimension or None for the count, lower's value, upper's value) for each bound both set where the lower
    one is above the upper one — the one comparison behind the order, parent and child rules."""
    other = dict(upper.metrics())
    for dimension, value in lower.metrics():
        bound = other.get(dimension)
        if bound is not None and value.amount > bound.amount:
            yield dimension, value, bound


def _queuename_of(queue: Mapping[str, Any]) -> str | None:
    metadata = queue.get("metadata")
    name = metadata.get("name") if isinstance(metadata, MAPPING_TYPES) else None
    return name if isinstance(name, str) and name else None


def _metric(dimension: str | None) -> str:
    return COUNT if dimension is None else f"capacity {shown(dimension)}"


def _bound_path(section: str, device_class: str, dimension: str | None) -> FieldPath:
    """``spec.dra.<section>["<class>"].count``, or ``….capacity["<dimension>"]``."""
    entry = DRA_PATH.child(section).escaped_key(device_class)
    return entry.child(COUNT) if dimension is None else entry.child(CAPACITY).escaped_key(dimension)
