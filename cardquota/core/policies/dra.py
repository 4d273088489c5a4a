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

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from cardquota.core.errors import InputError, one_line
from cardquota.core.policies.common import skipped
from cardquota.core.quantity import parse_quantity
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.violations import Violation, shown, type_name, written

DRA_PATH = "spec.dra"
CAPABILITY, DESERVED, GUARANTEE = "capability", "deserved", "guarantee"
SECTIONS = (CAPABILITY, DESERVED, GUARANTEE)
"""The fields of ``spec.dra``, from the largest bound to the smallest."""
COUNT, CAPACITY = "count", "capacity"
ENTRY_FIELDS = (COUNT, CAPACITY)
MAX_COUNT = 2**63 - 1
"""``count`` is an int64 in the Queue CRD."""
MAX_DNS_SUBDOMAIN = 253
ROOT_QUEUE = "root"
"""Volcano's implicit top of the queue hierarchy: a parent named so need not exist as an object."""

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_HUGE_BITS = 256
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Value:
    """One bound: the exact amount and the text it was written as (shown in messages)."""

    amount: Fraction
    written: str


@dataclass
class DeviceQuota:
    """The valid parts of one DeviceClass entry: the count (None when missing or invalid) and capacity dimensions."""

    count: Value | None = None
    capacity: dict[str, Value] = field(default_factory=dict)

    def metrics(self) -> Iterator[tuple[str | None, Value]]:
        """(dimension or None for the count, value) for every bound this entry sets."""
        if self.count is not None:
            yield None, self.count
        yield from self.capacity.items()


Quotas = dict[str, DeviceQuota]
"""DeviceClass name → its valid quota."""


def dra_violations(queue: Mapping[str, Any], snapshot: ClusterSnapshot) -> tuple[list[Violation], list[str]]:
    """(violations, warnings) for a Queue manifest's ``spec.dra``; ([], []) when it has none."""
    spec = queue.get("spec")
    if not isinstance(spec, Mapping):
        return [], []
    dra = spec.get("dra")
    if dra is None:
        return [], []
    violations: list[Violation] = []
    if not isinstance(dra, Mapping):
        return [Violation(DRA_PATH, f"must be a map of capability, deserved and guarantee, not {type_name(dra)}")], []
    for key in dra:
        if key not in SECTIONS:
            violations.append(Violation(
                DRA_PATH + _field(key),
                f"unknown field {_name(key)} (spec.dra has capability, deserved and guarantee)",
            ))
    sections = {section: read_quotas(dra.get(section), f"{DRA_PATH}.{section}", violations) for section in SECTIONS}
    violations.extend(_order_violations(sections))
    warnings: list[str] = []
    capability = sections[CAPABILITY]
    if capability:
        name = _queue_name(queue)
        parent = spec.get("parent")
        if isinstance(parent, str) and parent and parent != name:
            parent_violations, parent_warnings = _parent_violations(parent, capability, snapshot)
            violations.extend(parent_violations)
            warnings.extend(parent_warnings)
        if name is not None:
            # Against the children the snapshot holds; like the card-quota rule, no warning for those it lacks.
            violations.extend(_child_violations(name, capability, snapshot))
    return [Violation(v.path, one_line(v.message)) for v in violations], [one_line(w) for w in warnings]


def read_quotas(section: object, path: str, violations: list[Violation] | None = None) -> Quotas:
    """The valid entries of one of ``capability`` / ``deserved`` / ``guarantee``; what is wrong goes to
    ``violations`` (pass None to read another queue's section leniently)."""
    problems: list[Violation] = [] if violations is None else violations
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        problems.append(Violation(path, f"must be a map of DeviceClass name to quota, not {type_name(section)}"))
        return {}
    quotas: Quotas = {}
    for name, entry in section.items():
        entry_path = path + _index(name)
        problem = device_class_problem(name)
        if problem is not None:
            problems.append(Violation(entry_path, problem))
            continue
        quota = _read_entry(name, entry, entry_path, problems)
        if quota is not None:
            quotas[name] = quota
    return quotas


def device_class_problem(name: object) -> str | None:
    """What is wrong with a DeviceClass name (a DNS subdomain: lowercase RFC 1123, at most 253 characters)."""
    if not isinstance(name, str):
        return f"DeviceClass names must be strings, not {type_name(name)} {_name(name)}"
    if not name:
        return "DeviceClass names must not be empty"
    if len(name) > MAX_DNS_SUBDOMAIN:
        return f"DeviceClass name {shown(name[:40])}... is {len(name)} characters long (at most {MAX_DNS_SUBDOMAIN})"
    if _DNS_SUBDOMAIN.fullmatch(name) is None:
        return (f"DeviceClass name {shown(name)} is not a DNS subdomain (lowercase letters, digits, '-' and '.', "
                f"starting and ending with a letter or digit, such as nvidia-h100 or gpu.example.com)")
    return None


def _read_entry(device_class: str, entry: object, path: str, problems: list[Violation]) -> DeviceQuota | None:
    label = f"DeviceClass {device_class}"
    if not isinstance(entry, Mapping):
        problems.append(Violation(path, f"{label}: must be a map with count and optional capacity, "
                                        f"not {type_name(entry)}"))
        return None
    for key in entry:
        if key not in ENTRY_FIELDS:
            problems.append(Violation(path + _field(key),
                                      f"{label}: unknown field {_name(key)} (an entry has count and capacity)"))
    quota = DeviceQuota()
    count = entry.get(COUNT)
    count_path = f"{path}.{COUNT}"
    if count is None:
        problems.append(Violation(count_path, f"{label}: count is required (the number of devices)"))
    elif isinstance(count, bool) or not isinstance(count, int):
        problems.append(Violation(count_path, f"{label}: count must be a whole number, not {written(count)}"))
    elif count < 0:
        problems.append(Violation(count_path, f"{label}: count {written(count)} is negative"))
    elif count > MAX_COUNT:
        problems.append(Violation(count_path, f"{label}: count {written(count)} is too large (at most {MAX_COUNT})"))
    else:
        quota.count = Value(Fraction(count), str(count))
    capacity = entry.get(CAPACITY)
    capacity_path = f"{path}.{CAPACITY}"
    if capacity is not None and not isinstance(capacity, Mapping):
        problems.append(Violation(capacity_path,
                                  f"{label}: capacity must be a map of dimension to quantity, "
                                  f"not {type_name(capacity)}"))
    elif capacity is not None:
        for dimension, amount in capacity.items():
            dimension_path = capacity_path + _index(dimension)
            if not isinstance(dimension, str) or not dimension.strip():
                problems.append(Violation(dimension_path,
                                          f"{label}: capacity dimension {_name(dimension)} must be a non-empty name"))
                continue
            value = _read_quantity(amount)
            if isinstance(value, str):
                problems.append(Violation(dimension_path, f"{label}: capacity {shown(dimension)}: {value}"))
            else:
                quota.capacity[dimension] = value
    return quota


def _read_quantity(amount: object) -> Value | str:
    """The value, or what is wrong with it."""
    if isinstance(amount, bool) or not isinstance(amount, str | int | float):
        return f"must be a quantity such as \"80Gi\", not {type_name(amount)}"
    if isinstance(amount, int) and not isinstance(amount, bool) and amount.bit_length() > _HUGE_BITS:
        return f"{written(amount)} is out of range"  # before parse_quantity, whose message would print it whole
    try:
        parsed = parse_quantity(amount)
    except InputError as error:
        return error.message
    as_written = amount if isinstance(amount, str) else written(amount)
    if parsed < 0:
        return f"{as_written} is negative"
    return Value(parsed, as_written)


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
        Violation(f"{DRA_PATH}.{lower_name}{_index(device_class)}{_suffix(dimension)}",
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
            return [Violation("spec.parent", f"parent queue {shown(parent)} does not exist")], []
        return [], [skipped(f"{DRA_PATH}.capability against parent queue {shown(parent)}")]
    limits = read_quotas(record.queue.dra.get(CAPABILITY), "", None)
    violations = []
    for device_class, quota in capability.items():
        limit = limits.get(device_class)
        if limit is None:
            continue
        for dimension, value, bound in _exceeding(quota, limit):
            what = _metric(dimension)
            violations.append(Violation(
                f"{DRA_PATH}.{CAPABILITY}{_index(device_class)}{_suffix(dimension)}",
                f"DeviceClass {device_class}: capability {what} {value.written} is above parent queue "
                f"{shown(parent)}'s capability {what} {bound.written}",
            ))
    return violations, []


def _child_violations(name: str, capability: Quotas, snapshot: ClusterSnapshot) -> list[Violation]:
    violations = []
    for child in sorted(snapshot.children_of(name), key=lambda record: record.queue.name):
        if child.queue.name == name:
            continue
        child_capability = read_quotas(child.queue.dra.get(CAPABILITY), "", None)
        for device_class, quota in capability.items():
            child_quota = child_capability.get(device_class)
            if child_quota is None:
                continue
            for dimension, needed, value in _exceeding(child_quota, quota):
                what = _metric(dimension)
                violations.append(Violation(
                    f"{DRA_PATH}.{CAPABILITY}{_index(device_class)}{_suffix(dimension)}",
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


def _queue_name(queue: Mapping[str, Any]) -> str | None:
    metadata = queue.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) and name else None


def _metric(dimension: str | None) -> str:
    return COUNT if dimension is None else f"capacity {shown(dimension)}"


def _suffix(dimension: str | None) -> str:
    return f".{COUNT}" if dimension is None else f".{CAPACITY}{_index(dimension)}"


def _index(key: object) -> str:
    """``["nvidia-h100"]``: a map key in a field path, escaped so the path stays on one line."""
    return f"[{json.dumps(key if isinstance(key, str) else str(key))}]"


def _field(key: object) -> str:
    """``.name`` for a plain field name, ``["odd name"]`` otherwise."""
    return f".{key}" if isinstance(key, str) and _IDENTIFIER.fullmatch(key) else _index(key)


def _name(key: object) -> str:
    return shown(key) if isinstance(key, str) else written(key)
