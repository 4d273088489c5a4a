"""The DRA queue quota (dra-queue-quota-design.md): a task's ResourceClaims, added up per DeviceClass (device count
and capacity dimensions), must fit ``spec.dra.capability`` of its queue and of every ancestor queue.

Claims are read as ``resource.k8s.io`` writes them: each request names a ``deviceClassName`` and a ``count``
(default 1; ``allocationMode: All`` counts as 1, the number is only known once allocated), either directly
(v1beta1) or under ``exactly`` (v1), with consumable capacity in ``capacity.requests``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from cardquota.core.dra_quota import CAPABILITY, ROOT_QUEUE, read_quotas
from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.quantity import parse_quantity
from cardquota.core.scheduling.refusal import Refusal

INSUFFICIENT_DRA = "InsufficientDRAQuota"


@dataclass
class DeviceAmount:
    count: Fraction = Fraction(0)
    capacity: dict[str, Fraction] = field(default_factory=dict)

    def add(self, other: DeviceAmount, sign: int = 1) -> None:
        self.count += sign * other.count
        for dimension, amount in other.capacity.items():
            self.capacity[dimension] = self.capacity.get(dimension, Fraction(0)) + sign * amount


DeviceAmounts = dict[str, DeviceAmount]
"""DeviceClass → amount."""


def claim_amounts(claim_spec: Mapping[str, Any]) -> DeviceAmounts:
    """One ResourceClaim's (or template's) ``spec``, per DeviceClass; unreadable requests are skipped."""
    amounts: DeviceAmounts = {}
    devices = claim_spec.get("devices") if isinstance(claim_spec, MAPPING_TYPES) else None
    requests = devices.get("requests") if isinstance(devices, MAPPING_TYPES) else None
    for request in requests if isinstance(requests, list) else []:
        if not isinstance(request, MAPPING_TYPES):
            continue
        exactly = request.get("exactly")
        exact: Mapping[str, Any] = exactly if isinstance(exactly, MAPPING_TYPES) else request
        device_class = exact.get("deviceClassName")
        if not isinstance(device_class, str) or not device_class:
            continue
        count = exact.get("count", 1)
        amount = DeviceAmount(Fraction(count) if isinstance(count, int) and count > 0 else Fraction(1))
        capacity = exact.get("capacity")
        dimensions = capacity.get("requests") if isinstance(capacity, MAPPING_TYPES) else None
        for dimension, value in (dimensions if isinstance(dimensions, MAPPING_TYPES) else {}).items():
            try:
                amount.capacity[str(dimension)] = parse_quantity(value) * amount.count
            except InputError:
                continue
        amounts.setdefault(device_class, DeviceAmount()).add(amount)
    return amounts


def total(parts: Iterable[DeviceAmounts]) -> DeviceAmounts:
    """Several claims added up per DeviceClass (the design's aggregation of a pod's claims)."""
    result: DeviceAmounts = {}
    for part in parts:
        for device_class, amount in part.items():
            result.setdefault(device_class, DeviceAmount()).add(amount)
    return result


def ancestry(queue: str, parents: Mapping[str, str]) -> list[str]:
    """The queue, its parent, and so on up the hierarchy (``parents`` has every Queue object): ``root`` is included
    when a Queue object of that name exists (its capability bounds everything under it); stops at a loop."""
    chain: list[str] = []
    while queue and queue not in chain and (queue != ROOT_QUEUE or queue in parents):
        chain.append(queue)
        if queue == ROOT_QUEUE:
            break
        queue = parents.get(queue, "") or (ROOT_QUEUE if queue in parents else "")
    return chain


def quota_refusal(queue: str, request: DeviceAmounts, allocated: Mapping[str, DeviceAmounts],
                  queue_specs: Mapping[str, Mapping[str, Any]], parents: Mapping[str, str]) -> Refusal | None:
    """None when ``allocated + request`` fits ``spec.dra.capability`` of the queue and each ancestor (a DeviceClass
    a queue sets no bound for is not limited there)."""
    for name in ancestry(queue, parents):
        spec = queue_specs.get(name) or {}
        dra = spec.get("dra")
        capability = read_quotas(dra.get(CAPABILITY) if isinstance(dra, MAPPING_TYPES) else None, "spec.dra.capability")
        for device_class, wanted in request.items():
            bound = capability.get(device_class)
            if bound is None:
                continue
            held = allocated.get(name, {}).get(device_class, DeviceAmount())
            if bound.count is not None and held.count + wanted.count > bound.count.amount:
                return _refusal(name, queue, device_class, "devices", held.count + wanted.count,
                                bound.count.written)
            for dimension, limit in bound.capacity.items():
                after = held.capacity.get(dimension, Fraction(0)) + wanted.capacity.get(dimension, Fraction(0))
                if wanted.capacity.get(dimension) and after > limit.amount:
                    return _refusal(name, queue, device_class, dimension, after, limit.written)
    return None


def _refusal(limiting: str, queue: str, device_class: str, what: str, total: Fraction, limit: str) -> Refusal:
    through = "" if limiting == queue else f" (through queue {queue})"
    return Refusal(INSUFFICIENT_DRA, f"Queue {limiting} has insufficient {device_class} {what} quota{through}: total "
                                     f"would be {_number(total)}, but capability is {limit}")


def _number(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"
