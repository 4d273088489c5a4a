"""What a pod's DRA ResourceClaims ask, and whether it fits the DRA queue quotas (dra-queue-quota-design.md): a
pod's claims, added up per DeviceClass (device count and capacity dimensions), must fit ``spec.dra.capability`` of
its queue and of every ancestor queue. Read by the card-quota gate (which admits pods) and by the scheduling session
(which places them), so both judge a claim alike.

Claims are read as ``resource.k8s.io`` writes them: each request names a ``deviceClassName`` and a ``count``
(default 1; ``allocationMode: All`` counts as 1, the number is only known once allocated), either directly
(v1beta1) or under ``exactly`` (v1), with consumable capacity in ``capacity.requests``. A request listing
alternatives (``firstAvailable``, v1) counts every alternative, as the allocator may take any one of them: a count
that can delay a pod, never let one past a quota.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from cardquota.core.dra_quota import CAPABILITY, ROOT_QUEUE, Quotas, read_quotas
from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.quantity import parse_quantity

CLAIM_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})
DRA_API_GROUP = "resource.k8s.io"

ClaimRef = tuple[bool, str]
"""One entry of a pod's ``spec.resourceClaims``: (names a ResourceClaimTemplate, the claim's or template's name)."""


ZERO = Fraction(0)


@dataclass
class DeviceAmount:
    count: int = 0
    """Devices (whole: a request's ``count``, or 1)."""
    capacity: dict[str, Fraction] = field(default_factory=dict)
    """Consumable capacity per dimension (quantities: exact fractions)."""

    def add(self, other: DeviceAmount, sign: int = 1) -> None:
        """Add (``sign`` 1) or take back (-1) another amount (no multiplication: this runs once per pod and queue
        in a gate round)."""
        capacity = self.capacity
        if sign > 0:
            self.count += other.count
            for dimension, amount in other.capacity.items():
                capacity[dimension] = capacity.get(dimension, ZERO) + amount
        else:
            self.count -= other.count
            for dimension, amount in other.capacity.items():
                capacity[dimension] = capacity.get(dimension, ZERO) - amount


DeviceAmounts = dict[str, DeviceAmount]
"""DeviceClass → amount."""


def is_claim(manifest: Mapping[str, Any]) -> bool:
    """Whether the object is a ResourceClaim or ResourceClaimTemplate of ``resource.k8s.io`` (any version)."""
    api_version = manifest.get("apiVersion")
    return (manifest.get("kind") in CLAIM_KINDS and isinstance(api_version, str)
            and api_version.startswith(f"{DRA_API_GROUP}/"))


def asked(manifest: Mapping[str, Any]) -> DeviceAmounts:
    """What a ResourceClaim (its ``spec``) or ResourceClaimTemplate (its ``spec.spec``) asks, per DeviceClass."""
    spec = manifest.get("spec")
    spec = spec if isinstance(spec, MAPPING_TYPES) else {}
    if manifest.get("kind") == "ResourceClaimTemplate":
        inner = spec.get("spec")
        spec = inner if isinstance(inner, MAPPING_TYPES) else {}
    return claim_amounts(spec)


def claim_amounts(claim_spec: Mapping[str, Any]) -> DeviceAmounts:
    """One ResourceClaim's (or template's) ``spec``, per DeviceClass; unreadable requests are skipped."""
    amounts: DeviceAmounts = {}
    devices = claim_spec.get("devices") if isinstance(claim_spec, MAPPING_TYPES) else None
    requests = devices.get("requests") if isinstance(devices, MAPPING_TYPES) else None
    for request in requests if isinstance(requests, list) else []:
        if not isinstance(request, MAPPING_TYPES):
            continue
        exactly = request.get("exactly")
        alternatives = request.get("firstAvailable")
        if isinstance(exactly, MAPPING_TYPES):
            choices: list[Any] = [exactly]
        elif isinstance(alternatives, list):
            choices = alternatives
        else:
            choices = [request]
        for exact in choices:
            if isinstance(exact, MAPPING_TYPES):
                _add_request(amounts, exact)
    return amounts


def _add_request(amounts: DeviceAmounts, exact: Mapping[str, Any]) -> None:
    """One device request (or sub-request) added to ``amounts``; one naming no DeviceClass is skipped."""
    device_class = exact.get("deviceClassName")
    if isinstance(device_class, str) and device_class:
        count = exact.get("count", 1)
        amount = DeviceAmount(count if type(count) is int and count > 0 else 1)
        capacity = exact.get("capacity")
        dimensions = capacity.get("requests") if isinstance(capacity, MAPPING_TYPES) else None
        for dimension, value in (dimensions if isinstance(dimensions, MAPPING_TYPES) else {}).items():
            try:
                amount.capacity[str(dimension)] = parse_quantity(value) * amount.count
            except InputError:
                continue
        amounts.setdefault(device_class, DeviceAmount()).add(amount)


def claim_refs(pod_spec: Mapping[str, Any], pod_status: object = None) -> tuple[ClaimRef, ...]:
    """The claims a pod names (``spec.resourceClaims``), in order, each once; entries naming neither are skipped.
    A template's entry is the ResourceClaim generated from it for the pod once ``status.resourceClaimStatuses`` names
    it (what the pod holds then, even when the template has gone or changed), the template until then."""
    claims = pod_spec.get("resourceClaims")
    generated: dict[str, str] = {}
    statuses = pod_status.get("resourceClaimStatuses") if isinstance(pod_status, MAPPING_TYPES) else None
    for entry in statuses if isinstance(statuses, list) else []:
        if (isinstance(entry, MAPPING_TYPES) and isinstance(entry.get("name"), str)
                and isinstance(claim_name := entry.get("resourceClaimName"), str) and claim_name):
            generated[entry["name"]] = claim_name
    refs: list[ClaimRef] = []
    for claim in claims if isinstance(claims, list) else []:
        if not isinstance(claim, MAPPING_TYPES):
            continue
        if isinstance(name := claim.get("resourceClaimName"), str) and name:
            refs.append((False, name))
        elif isinstance(name := claim.get("resourceClaimTemplateName"), str) and name:
            made = generated.get(str(claim.get("name")))
            refs.append((False, made) if made else (True, name))
    return tuple(dict.fromkeys(refs))


def pod_request(namespace: str, refs: Iterable[ClaimRef], claims: Mapping[tuple[str, ...], DeviceAmounts],
                templates: Mapping[tuple[str, ...], DeviceAmounts]) -> DeviceAmounts:
    """What a pod's claims ask together (a claim or template not known counts as nothing)."""
    return total((templates if template else claims).get((namespace, name), {}) for template, name in refs)


def unknown_ref(namespace: str, refs: Iterable[ClaimRef], claims: Mapping[tuple[str, ...], DeviceAmounts],
                templates: Mapping[tuple[str, ...], DeviceAmounts]) -> ClaimRef | None:
    """The first claim or template the pod names that is not known (None when all are)."""
    return next(((template, name) for template, name in refs
                 if (namespace, name) not in (templates if template else claims)), None)


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


@dataclass(frozen=True)
class DraShortage:
    """The first bound a request would pass: the queue that sets it, the DeviceClass, ``devices`` or the capacity
    dimension, the total it would reach, the bound as written, and the held amount before the request."""

    queue: str
    device_class: str
    what: str
    total: Fraction | int
    limit: str
    held: Fraction | int


CapabilityOf = Callable[[str], Quotas]
"""A queue's ``spec.dra.capability`` read (:func:`capability`), by queue name."""


def capability(dra: object) -> Quotas:
    """The valid bounds of a queue's ``spec.dra`` (as written) ``capability``; empty when it sets none."""
    section = dra.get(CAPABILITY) if isinstance(dra, MAPPING_TYPES) else None
    return read_quotas(section, "spec.dra.capability") if section else {}


def bounded(queue: str, capability_of: CapabilityOf, parents: Mapping[str, str]) -> bool:
    """Whether the queue or an ancestor sets a DRA capability (then its pods with claims are judged by it)."""
    return any(capability_of(name) for name in ancestry(queue, parents))


def shortage(queue: str, request: DeviceAmounts, held: Mapping[str, DeviceAmounts], capability_of: CapabilityOf,
             parents: Mapping[str, str]) -> DraShortage | None:
    """None when ``held + request`` fits ``spec.dra.capability`` of the queue and each ancestor (a DeviceClass a
    queue sets no bound for is not limited there). ``held``: per queue, what it and the queues below it hold."""
    for name in ancestry(queue, parents):
        bounds = capability_of(name)
        for device_class, wanted in request.items():
            bound = bounds.get(device_class)
            if bound is None:
                continue
            have = held.get(name, {}).get(device_class, DeviceAmount())
            if bound.count is not None and have.count + wanted.count > bound.count.amount:
                return DraShortage(name, device_class, "devices", have.count + wanted.count, bound.count.written,
                                   have.count)
            for dimension, limit in bound.capacity.items():
                before = have.capacity.get(dimension, ZERO)
                after = before + wanted.capacity.get(dimension, ZERO)
                if wanted.capacity.get(dimension) and after > limit.amount:
                    return DraShortage(name, device_class, dimension, after, limit.written, before)
    return None


def take(held: dict[str, DeviceAmounts], queue: str, request: DeviceAmounts, parents: Mapping[str, str],
         sign: int = 1) -> None:
    """Add (or take back) a request to what the queue and each ancestor hold."""
    for name in ancestry(queue, parents):
        add(held, name, request, sign)


def add(held: dict[str, DeviceAmounts], queue: str, request: DeviceAmounts, sign: int = 1) -> None:
    """Add (or take back) a request to what one queue holds."""
    queue_held = held.setdefault(queue, {})
    for device_class, amount in request.items():
        queue_held.setdefault(device_class, DeviceAmount()).add(amount, sign)


def number(value: Fraction | int) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"

