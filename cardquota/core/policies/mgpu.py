"""mGPU admission rules (mgpu-design.md, "Webhook Addmission"): what a pod may request of the mGPU share.

Two kinds of pod are checked, any other pod is left alone:

* a **normal** mGPU pod requests ``vke.volcengine.com/mgpu-core`` (percent of one card; 100 is a whole card) or
  ``vke.volcengine.com/mgpu-memory`` (MiB) in some container;
* a **multiple** mGPU pod has ``vke.volcengine.com/container-multiple-gpu: "2,1,3"``: one card count per container
  of ``spec.containers``, in order; the container's core and memory are split evenly over its cards.

Values are Kubernetes quantities (``6k`` is 6000) and a request falls back to the limit of the same resource, as
the scheduler reads them. Only ``spec.containers`` are examined: the annotation lists those, and the mGPU scheduler
reads no other containers. Nothing here raises: a value that cannot be read is a :class:`Violation` too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES, SEQUENCE_TYPES
from cardquota.core.keys import CONTAINER_MULTIPLE_GPU, FULL_CARD_CORE, MGPU_CORE, MGPU_MEMORY
from cardquota.core.quantity import parse_quantity
from cardquota.core.violations import (
    ANNOTATIONS,
    FieldPath,
    Violation,
    forbidden,
    invalid,
    quoted,
    required,
    shown,
    type_name,
    written,
)

MIN_MGPU_MEMORY = 256
"""MiB: the least memory a container sharing a card can run with (MinGPUMemory)."""
MAX_CARD_COUNT = 2**63 - 1
"""A card count must fit in int64, as the scheduler parses it (``strconv.Atoi``)."""
MAX_ENTRY_VIOLATIONS = 5
"""Bad entries of the annotation reported one by one; the rest are counted in one more violation."""

_CARD_COUNT = re.compile(r"[+-]?[0-9]+")
MULTIPLE_GPU_PATH = ANNOTATIONS.key(CONTAINER_MULTIPLE_GPU)
CONTAINERS = FieldPath.of("spec", "containers")


@dataclass(frozen=True)
class _Value:
    """One mGPU resource of one container, as written, with where it was found."""

    path: FieldPath
    raw: Any
    """The value as written: any JSON value. (Typed ``Any``, not ``object``: the optional compiled build cannot
    resolve a dataclass field annotated with a builtin's name.)"""
    amount: Fraction | None
    """None when ``raw`` is not a quantity (that is reported once, by :func:`_parse_violations`)."""


@dataclass(frozen=True)
class _Container:
    index: int
    label: str
    """``container "worker"`` (``container #2`` when it has no name) for messages."""
    core: _Value | None
    memory: _Value | None
    base: FieldPath
    """``spec.containers[0].resources``: the path of a resource not set at all is put under ``requests``."""

    @property
    def requests_mgpu(self) -> bool:
        return self.core is not None or self.memory is not None

    def missing(self, resource: str) -> FieldPath:
        return self.base.child("requests").key(resource)


def may_break_mgpu_rules(annotations: Mapping[str, str], requests: Mapping[str, Fraction]) -> bool:
    """Whether :func:`mgpu_violations` can find anything, from a readable pod's view: its annotations and its
    effective requests, whose names include every name its containers request or limit. A cheap test the Pod
    policy makes first (most pods have nothing to do with mGPU); False means there is nothing to check."""
    return CONTAINER_MULTIPLE_GPU in annotations or MGPU_CORE in requests or MGPU_MEMORY in requests


def mgpu_violations(pod: Mapping[str, Any]) -> list[Violation]:
    """Every mGPU rule the pod breaks; empty for a pod with no mGPU request and no container-multiple-gpu. The rules
    read the container-multiple-gpu annotation and ``spec.containers``: each violation depends on both."""
    return [violation.depending_on(MULTIPLE_GPU_PATH, CONTAINERS) for violation in _mgpu_violations(pod)]


def _mgpu_violations(pod: Mapping[str, Any]) -> list[Violation]:
    annotation = _multiple_gpu_annotation(pod)
    if annotation is None and not _mentions_mgpu(pod):
        return []  # the admission hot path: most pods have nothing to do with mGPU
    containers, shape = _containers(pod)
    if annotation is None:
        return [violation for container in containers for violation in _normal_container(container)]
    violations = list(shape)
    value, annotation_violation = annotation
    if annotation_violation is not None:
        violations.append(annotation_violation)
        return violations
    counts, entry_violations = _card_counts(value)
    violations.extend(entry_violations)
    if shape:  # the counts cannot be matched against containers that cannot be read
        return violations
    if len(counts) != len(containers):
        plural = "" if len(containers) == 1 else "s"
        violations.append(invalid(
            MULTIPLE_GPU_PATH,
            f"lists {len(counts)} card count{'' if len(counts) == 1 else 's'} ({quoted(value)}) but the pod has "
            f"{len(containers)} container{plural}; give one count per container, in spec.containers order",
        ))
        return violations
    for container, count in zip(containers, counts, strict=True):
        if count is not None:
            violations.extend(_multiple_container(container, count))
    return violations


# --- reading the pod ---------------------------------------------------------------------------------------------


def _mentions_mgpu(pod: Mapping[str, Any]) -> bool:
    """Whether any container names an mGPU resource in its requests or limits (a cheap scan, no parsing)."""
    spec = pod.get("spec") if isinstance(pod, MAPPING_TYPES) else None
    containers = spec.get("containers") if isinstance(spec, MAPPING_TYPES) else None
    if not isinstance(containers, SEQUENCE_TYPES):
        return False
    for container in containers:
        resources = container.get("resources") if isinstance(container, MAPPING_TYPES) else None
        if not isinstance(resources, MAPPING_TYPES):
            continue
        for section in (resources.get("requests"), resources.get("limits")):
            if isinstance(section, MAPPING_TYPES) and (MGPU_CORE in section or MGPU_MEMORY in section):
                return True
    return False


def _containers(pod: Mapping[str, Any]) -> tuple[list[_Container], list[Violation]]:
    """The containers of ``spec.containers`` (parts that are not maps read as empty), and a violation when the list
    itself cannot be read (reported only for a multiple mGPU pod, whose annotation must be matched against it)."""
    spec = pod.get("spec") if isinstance(pod, MAPPING_TYPES) else None
    raw = spec.get("containers") if isinstance(spec, MAPPING_TYPES) else None
    if raw is None:
        return [], []
    if not isinstance(raw, SEQUENCE_TYPES):
        return [], [invalid(CONTAINERS, "must be a list of containers")]
    return [_container(index, item) for index, item in enumerate(raw)], []


def _container(index: int, item: object) -> _Container:
    container = item if isinstance(item, MAPPING_TYPES) else {}
    name = container.get("name")
    if isinstance(name, str) and name:
        label = f'container "{name}"' if shown(name) == name else f"container {shown(name)}"
    else:
        label = f"container #{index}"
    base = CONTAINERS.index(index).child("resources")
    resources = container.get("resources")
    resources = resources if isinstance(resources, MAPPING_TYPES) else {}
    requests = resources.get("requests")
    limits = resources.get("limits")
    sections = [(section, values) for section, values in (("requests", requests), ("limits", limits))
                if isinstance(values, MAPPING_TYPES)]

    def value(resource: str) -> _Value | None:
        for section, values in sections:
            if resource in values:
                raw = values[resource]
                return _Value(base.child(section).key(resource), raw, _amount(raw))
        return None

    return _Container(index, label, value(MGPU_CORE), value(MGPU_MEMORY), base)


def _amount(raw: object) -> Fraction | None:
    try:
        return parse_quantity(raw)
    except InputError:
        return None


def _multiple_gpu_annotation(pod: Mapping[str, Any]) -> tuple[str, Violation | None] | None:
    """The annotation's value (and a violation when it is not a string), or None when the pod has none."""
    metadata = pod.get("metadata") if isinstance(pod, MAPPING_TYPES) else None
    annotations = metadata.get("annotations") if isinstance(metadata, MAPPING_TYPES) else None
    if not isinstance(annotations, MAPPING_TYPES) or CONTAINER_MULTIPLE_GPU not in annotations:
        return None
    value = annotations[CONTAINER_MULTIPLE_GPU]
    if not isinstance(value, str):
        return "", invalid(MULTIPLE_GPU_PATH,
                           f'must be a string such as "2,1", not {type_name(value)} (quote the value)')
    return value, None


def _card_counts(value: str) -> tuple[list[int | None], list[Violation]]:
    """The card count of each entry (None for an entry that is not a non-negative whole number) and what is wrong
    with the bad entries."""
    counts: list[int | None] = []
    violations: list[Violation] = []
    bad = 0
    for position, entry in enumerate(value.split(",")):
        count, problem = _card_count(entry)
        counts.append(count)
        if problem is None:
            continue
        bad += 1
        if bad <= MAX_ENTRY_VIOLATIONS:
            violations.append(invalid(MULTIPLE_GPU_PATH, f"entry {position} ({quoted(entry)}) {problem}"))
    if bad > MAX_ENTRY_VIOLATIONS:
        more = bad - MAX_ENTRY_VIOLATIONS
        violations.append(invalid(MULTIPLE_GPU_PATH,
                                  f"{more} more entr{'y is' if more == 1 else 'ies are'} not a card count"))
    return counts, violations


def _card_count(entry: str) -> tuple[int | None, str | None]:
    if not _CARD_COUNT.fullmatch(entry):
        return None, 'is not a whole number of cards (write counts such as "2,1,0", without spaces)'
    digits = entry.lstrip("+-").lstrip("0")
    if len(digits) > len(str(MAX_CARD_COUNT)):  # checked before int(): no huge conversions
        return None, "is too large"
    count = int(entry)
    if count < 0:
        return None, "is negative; a card count is 0 or more"
    if count > MAX_CARD_COUNT:
        return None, "is too large"
    return count, None


# --- the rules ---------------------------------------------------------------------------------------------------


def _parse_violations(container: _Container) -> list[Violation]:
    return [
        invalid(value.path, f"{container.label}: {resource} {written(value.raw)} is not a Kubernetes quantity "
                            f"(such as 50 or 6k)")
        for resource, value in ((MGPU_CORE, container.core), (MGPU_MEMORY, container.memory))
        if value is not None and value.amount is None
    ]


def _core_violation(container: _Container, core: _Value, amount: Fraction) -> Violation | None:
    """core ≤ 0 or not a whole number: true of a normal and a multiple container alike."""
    if amount <= 0:
        return invalid(core.path, f"{container.label}: {MGPU_CORE} {_number(amount)} must be above 0")
    if amount.denominator != 1:
        return invalid(core.path, f"{container.label}: {MGPU_CORE} {_number(amount)} is not a whole number")
    return None


def _memory_violation(container: _Container, memory: _Value, amount: Fraction) -> Violation | None:
    if amount <= 0:
        return invalid(memory.path, f"{container.label}: {MGPU_MEMORY} {_number(amount)} must be above 0")
    if amount.denominator != 1:
        return invalid(memory.path,
                       f"{container.label}: {MGPU_MEMORY} {_number(amount)} is not a whole number of MiB")
    return None


def _normal_container(container: _Container) -> list[Violation]:
    """Rules 1-4 of a normal mGPU pod, for one container."""
    if not container.requests_mgpu:
        return []
    violations = _parse_violations(container)
    if violations:
        return violations
    core, memory = container.core, container.memory
    memory_amount = memory.amount if memory is not None else None
    if core is None or core.amount is None:
        violations.append(required(
            container.missing(MGPU_CORE),
            f"{container.label}: requests {MGPU_MEMORY} without {MGPU_CORE}; set {MGPU_CORE} above 0",
        ))
        if memory is not None and memory_amount is not None:
            violations.extend(_some(_memory_violation(container, memory, memory_amount)))
        return violations
    amount = core.amount
    core_violation = _core_violation(container, core, amount)
    if core_violation is None and amount > FULL_CARD_CORE and amount % FULL_CARD_CORE != 0:
        core_violation = invalid(core.path, f"{container.label}: {MGPU_CORE} {_number(amount)} is above "
                                          f"{FULL_CARD_CORE} and not a multiple of {FULL_CARD_CORE} "
                                          f"(a full card is {FULL_CARD_CORE})")
    if core_violation is not None:
        violations.append(core_violation)
        if memory is not None and memory_amount is not None:
            violations.extend(_some(_memory_violation(container, memory, memory_amount)))
        return violations
    if amount % FULL_CARD_CORE == 0:
        if memory is not None:
            cards = amount // FULL_CARD_CORE
            violations.append(forbidden(
                memory.path,
                f"{container.label}: {MGPU_MEMORY} must not be set when {MGPU_CORE} {_number(amount)} asks for "
                f"{_cards(cards)} (a full card comes with all its memory); remove {MGPU_MEMORY}",
            ))
        return violations
    # 0 < core < 100: part of one card.
    if memory is None or memory_amount is None:
        violations.append(required(
            container.missing(MGPU_MEMORY),
            f"{container.label}: {MGPU_MEMORY} is not set; {MGPU_CORE} {_number(amount)} shares a card and needs "
            f"at least {MIN_MGPU_MEMORY} MiB of its memory",
        ))
        return violations
    memory_violation = _memory_violation(container, memory, memory_amount)
    if memory_violation is not None:
        violations.append(memory_violation)
    elif memory_amount < MIN_MGPU_MEMORY:
        violations.append(invalid(
            memory.path,
            f"{container.label}: {MGPU_MEMORY} {_number(memory_amount)} is below {MIN_MGPU_MEMORY} MiB, the least "
            f"a container sharing a card ({MGPU_CORE} {_number(amount)}) can run with",
        ))
    return violations


def _multiple_container(container: _Container, count: int) -> list[Violation]:
    """The rules of a multiple mGPU pod for one container sharing ``count`` cards."""
    violations = _parse_violations(container)
    if violations:
        return violations
    core, memory = container.core, container.memory
    if count == 0:
        return [
            forbidden(value.path, f"{container.label}: requests {resource} {_number(value.amount)} but its "
                                f"{CONTAINER_MULTIPLE_GPU} entry is 0 (no mGPU); give the number of cards it "
                                f"shares, or remove the request")
            for resource, value in ((MGPU_CORE, core), (MGPU_MEMORY, memory))
            if value is not None and value.amount is not None and value.amount != 0
        ]
    sharing = f"its {_cards(count)} ({CONTAINER_MULTIPLE_GPU})"
    memory_amount = memory.amount if memory is not None else None
    if core is None or core.amount is None:
        violations.append(required(
            container.missing(MGPU_CORE),
            f"{container.label}: {MGPU_CORE} is not set, but {CONTAINER_MULTIPLE_GPU} gives it {_cards(count)}",
        ))
        if memory is not None and memory_amount is not None:
            violations.extend(_some(_memory_violation(container, memory, memory_amount)))
        return violations
    amount = core.amount
    core_violation = _core_violation(container, core, amount)
    if core_violation is None and amount > FULL_CARD_CORE * count:
        core_violation = invalid(core.path, f"{container.label}: {MGPU_CORE} {_number(amount)} over {sharing} is "
                                          f"above {FULL_CARD_CORE} per card (a full card is {FULL_CARD_CORE})")
    if core_violation is not None:
        violations.append(core_violation)
        if memory is not None and memory_amount is not None:
            violations.extend(_some(_memory_violation(container, memory, memory_amount)))
        return violations
    if amount == FULL_CARD_CORE * count:
        if memory is not None:
            violations.append(forbidden(
                memory.path,
                f"{container.label}: {MGPU_MEMORY} must not be set when {MGPU_CORE} {_number(amount)} over "
                f"{sharing} is a full card each (a full card comes with all its memory); remove {MGPU_MEMORY}",
            ))
        return violations
    # core / count < 100: a part of each card.
    if amount % count != 0:
        violations.append(invalid(core.path, f"{container.label}: {MGPU_CORE} {_number(amount)} is not divisible "
                                           f"by {sharing}"))
    least = MIN_MGPU_MEMORY * count
    if memory is None or memory_amount is None:
        violations.append(required(
            container.missing(MGPU_MEMORY),
            f"{container.label}: {MGPU_MEMORY} is not set; sharing {_cards(count)} needs at least "
            f"{MIN_MGPU_MEMORY} MiB per card ({least} in all)",
        ))
        return violations
    memory_violation = _memory_violation(container, memory, memory_amount)
    if memory_violation is not None:
        violations.append(memory_violation)
        return violations
    if memory_amount < least:
        violations.append(invalid(
            memory.path,
            f"{container.label}: {MGPU_MEMORY} {_number(memory_amount)} over {sharing} is below {MIN_MGPU_MEMORY} "
            f"MiB per card (at least {least} in all)",
        ))
    if memory_amount % count != 0:
        violations.append(invalid(memory.path, f"{container.label}: {MGPU_MEMORY} {_number(memory_amount)} is not "
                                             f"divisible by {sharing}"))
    return violations


# --- messages ----------------------------------------------------------------------------------------------------


def _some(violation: Violation | None) -> list[Violation]:
    return [violation] if violation is not None else []


def _cards(count: int | Fraction) -> str:
    return f"{count} card" if count == 1 else f"{count} cards"


def _number(amount: Fraction | None) -> str:
    """A parsed quantity, exactly: ``120``, ``0.5``, ``-20`` (quantities have power-of-ten denominators, times
    a power of two for ``Ki``…; anything else is shown as a fraction)."""
    if amount is None:
        return "?"
    if amount.denominator == 1:
        return str(amount.numerator)
    denominator = amount.denominator
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator != 1:
        return f"{amount.numerator}/{amount.denominator}"
    places = max(twos, fives)
    scaled = abs(amount.numerator) * 10**places // amount.denominator
    digits = str(scaled).rjust(places + 1, "0")
    sign = "-" if amount < 0 else ""
    return f"{sign}{digits[:-places]}.{digits[-places:]}"





