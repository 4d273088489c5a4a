"""A Volcano Queue's DRA device quotas (``spec.dra``, the DRA queue quota design) read into exact values: per
DeviceClass, ``count`` (int64 ≥ 0) and ``capacity`` dimensions (Kubernetes quantities ≥ 0). Read by the Queue policy
(which reports what is wrong, with field paths) and by the scheduling session (which enforces the valid part)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction

from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.quantity import parse_quantity
from cardquota.core.violations import (
    FieldPath,
    Violation,
    invalid,
    not_supported,
    required,
    shown,
    too_long,
    type_name,
    written,
)

DRA_PATH = FieldPath.of("spec", "dra")
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


def read_quotas(section: object, path: FieldPath | str = "",
                violations: list[Violation] | None = None) -> Quotas:
    """The valid entries of one of ``capability`` / ``deserved`` / ``guarantee``; what is wrong goes to
    ``violations`` at ``path`` (pass None to read another queue's section leniently)."""
    found: list[Violation] = [] if violations is None else violations
    path = path if isinstance(path, FieldPath) else FieldPath(path)
    if section is None:
        return {}
    if not isinstance(section, MAPPING_TYPES):
        found.append(invalid(path, f"must be a map of DeviceClass name to quota, not {type_name(section)}"))
        return {}
    quotas: Quotas = {}
    for name, entry in section.items():
        entry_path = path.escaped_key(name)
        violation = device_class_violation(name, entry_path)
        if violation is not None:
            found.append(violation)
            continue
        quota = _read_entry(name, entry, entry_path, found)
        if quota is not None:
            quotas[name] = quota
    return quotas


def device_class_violation(name: object, path: FieldPath) -> Violation | None:
    """What is wrong with a DeviceClass name (a DNS subdomain: lowercase RFC 1123, at most 253 characters) at
    ``path``, or None."""
    if not isinstance(name, str):
        return invalid(path, f"DeviceClass names must be strings, not {type_name(name)} {name_of(name)}")
    if not name:
        return required(path, "DeviceClass names must not be empty")
    if len(name) > MAX_DNS_SUBDOMAIN:
        return too_long(path, f"DeviceClass name {shown(name[:40])}... is {len(name)} characters long "
                              f"(at most {MAX_DNS_SUBDOMAIN})")
    if _DNS_SUBDOMAIN.fullmatch(name) is None:
        return invalid(path, f"DeviceClass name {shown(name)} is not a DNS subdomain (lowercase letters, digits, "
                             f"'-' and '.', starting and ending with a letter or digit, such as nvidia-h100 or "
                             f"gpu.example.com)")
    return None


def _read_entry(device_class: str, entry: object, path: FieldPath,
                violations: list[Violation]) -> DeviceQuota | None:
    label = f"DeviceClass {device_class}"
    if not isinstance(entry, MAPPING_TYPES):
        violations.append(invalid(path, f"{label}: must be a map with count and optional capacity, "
                                        f"not {type_name(entry)}"))
        return None
    for key in entry:
        if key not in ENTRY_FIELDS:
            violations.append(not_supported(path.field(key), f"{label}: unknown field {name_of(key)} (an entry has "
                                                             "count and capacity)"))
    quota = DeviceQuota()
    quota.count = _read_count(entry.get(COUNT), path.child(COUNT), label, violations)
    capacity = entry.get(CAPACITY)
    capacity_path = path.child(CAPACITY)
    if capacity is not None and not isinstance(capacity, MAPPING_TYPES):
        violations.append(invalid(capacity_path, f"{label}: capacity must be a map of dimension to quantity, "
                                                 f"not {type_name(capacity)}"))
    elif capacity is not None:
        for dimension, amount in capacity.items():
            dimension_path = capacity_path.escaped_key(dimension)
            if not isinstance(dimension, str) or not dimension.strip():
                blank = required if isinstance(dimension, str) else invalid
                violations.append(blank(dimension_path, f"{label}: capacity dimension {name_of(dimension)} "
                                                        "must be a non-empty name"))
                continue
            value = _read_quantity(amount)
            if isinstance(value, str):
                violations.append(invalid(dimension_path, f"{label}: capacity {shown(dimension)}: {value}"))
            else:
                quota.capacity[dimension] = value
    return quota


def _read_count(count: object, path: FieldPath, label: str, violations: list[Violation]) -> Value | None:
    if count is None:
        violations.append(required(path, f"{label}: count is required (the number of devices)"))
    elif isinstance(count, bool) or not isinstance(count, int):
        violations.append(invalid(path, f"{label}: count must be a whole number, not {written(count)}"))
    elif count < 0:
        violations.append(invalid(path, f"{label}: count {written(count)} is negative"))
    elif count > MAX_COUNT:
        violations.append(invalid(path, f"{label}: count {written(count)} is too large (at most {MAX_COUNT})"))
    else:
        return Value(Fraction(count), str(count))
    return None


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


def name_of(key: object) -> str:
    return shown(key) if isinstance(key, str) else written(key)
