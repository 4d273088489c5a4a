"""Card rules shared by the PodGroup, Job and Pod policies: requests against queue quotas, card names against
the resources a pod requests.

Where the cluster's nodes are known (the snapshot's card catalog) a card type's resource is the one nodes offer
for it; where they are not, the type's name tells its kind (``…/mps-…`` MPS replicas, ``…/mig-<profile>-mixed``
MIG slices, anything else whole cards), which is enough to catch a whole-card name on an MPS resource.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from cardquota.core import keys
from cardquota.core.quantity import whole_units
from cardquota.core.quota import card_alternatives
from cardquota.core.snapshot import CardCatalog, ClusterSnapshot
from cardquota.core.violations import Violation, annotation_path, shown

_MIG_TYPE = re.compile(r"/mig-(?P<profile>.+)-mixed$")
_MPS_TYPE = re.compile(r"/mps-")
NOT_CARD_DOMAINS = ("kubernetes.io/", "vke.volcengine.com/")


@dataclass(frozen=True)
class ExpectedResource:
    """The Kubernetes resource a card type is requested through."""

    resource: str | None
    """The exact resource when nodes offer the type; None when only its kind is known."""
    description: str

    def matches(self, name: str, card_type: str) -> bool:
        if self.resource is not None:
            return name == self.resource
        return _kind_matches(card_type, name)


def expected_resource(card_type: str, catalog: CardCatalog) -> ExpectedResource:
    resource = catalog.resource_of(card_type)
    if resource is not None:
        return ExpectedResource(resource, resource)
    mig = _MIG_TYPE.search(card_type)
    if mig is not None:
        return ExpectedResource(None, f"a MIG resource <vendor>/mig-{mig['profile']}")
    if _MPS_TYPE.search(card_type):
        return ExpectedResource(None, "an MPS resource such as nvidia.com/gpu.shared")
    return ExpectedResource(None, "a whole-card resource such as nvidia.com/gpu")


def _kind_matches(card_type: str, resource: str) -> bool:
    if not _is_card_like(resource):
        return False
    mig = _MIG_TYPE.search(card_type)
    if mig is not None:
        return resource.endswith(f"/mig-{mig['profile']}")
    if _MPS_TYPE.search(card_type):
        return resource.endswith(".shared")
    return not resource.endswith(".shared") and "/mig-" not in resource


def _is_card_like(resource: str) -> bool:
    return "/" in resource and not resource.startswith(NOT_CARD_DOMAINS) and ".kubernetes.io/" not in resource


def card_resources_requested(requests: Mapping[str, Fraction], catalog: CardCatalog) -> dict[str, Fraction]:
    """The requested resources that are card resources: offered as cards by some node, else card-like names."""
    known = {entry.resource for entry in catalog.entries.values()}
    positive = {name: amount for name, amount in requests.items() if amount > 0}
    offered = {name: amount for name, amount in positive.items() if name in known}
    return offered or {name: amount for name, amount in positive.items() if _is_card_like(name)}


def card_name_resource_violations(card_name: str, requests: Mapping[str, Fraction], catalog: CardCatalog,
                                  path: str, subject: str) -> list[Violation]:
    """A pod (or pod template) naming ``card_name`` must request the card type's resource, and all alternatives
    must be requested through one resource."""
    alternatives = card_alternatives(card_name)
    mixed = alternatives_resource_violation(alternatives, catalog, path)
    if mixed is not None:
        return [mixed]
    requested = card_resources_requested(requests, catalog)
    violations = []
    for card_type in alternatives:
        expected = expected_resource(card_type, catalog)
        if not any(expected.matches(resource, card_type) for resource in requested):
            asked = ", ".join(sorted(requested)) or "no card resource"
            violations.append(Violation(
                path,
                f"{shown(card_type)} is requested through {expected.description}, but {subject} requests {asked}",
            ))
    return violations


def alternatives_resource_violation(alternatives: tuple[str, ...], catalog: CardCatalog,
                                    path: str) -> Violation | None:
    """``A|B`` alternatives must share one Kubernetes resource (a pod's resources are fixed at creation)."""
    if len(alternatives) < 2:
        return None
    described = {card: expected_resource(card, catalog) for card in alternatives}
    exact = {card: e.resource for card, e in described.items() if e.resource is not None}
    kinds = {card: _kind_of(card) for card in alternatives}
    if len(set(exact.values())) > 1 or len(set(kinds.values())) > 1:
        parts = ", ".join(f"{shown(card)} uses {described[card].description}" for card in alternatives)
        return Violation(path, f"alternatives must share one Kubernetes resource, but {parts}")
    return None


def _kind_of(card_type: str) -> str:
    mig = _MIG_TYPE.search(card_type)
    if mig is not None:
        return f"mig-{mig['profile']}"
    return "mps" if _MPS_TYPE.search(card_type) else "whole"


def quota_allows(key: str, quota: Mapping[str, int]) -> int:
    """The most of a card key a queue's quota can ever admit: the key's quota, or for an ``A|B`` key its
    alternatives' quotas together (the scheduler's enqueue rule); a type the quota does not name counts 0."""
    return sum(quota.get(card, 0) for card in card_alternatives(key))


def request_against_queue(request: Mapping[str, int], queue_name: str, snapshot: ClusterSnapshot,
                          path: str) -> tuple[list[Violation], list[str]]:
    """Can this card request ever be admitted by its queue? Current usage never denies (that is pending)."""
    violations: list[Violation] = []
    warnings: list[str] = []
    catalog = snapshot.catalog()
    for key in request:
        mixed = alternatives_resource_violation(card_alternatives(key), catalog, path)
        if mixed is not None:
            violations.append(mixed)
        warnings.extend(unknown_type_warnings(card_alternatives(key), snapshot))
    record = snapshot.queues.get(queue_name)
    if record is None:
        if snapshot.complete:
            violations.append(Violation("spec.queue", f"queue {shown(queue_name)} does not exist"))
        else:
            warnings.append(f"card.request against queue {shown(queue_name)}'s quota not checked: the queue is not "
                            "in the snapshot (pass --cluster with it)")
        return violations, warnings
    quota = record.quota.values
    if not quota:
        violations.append(Violation(path, f"queue {shown(queue_name)} has no card quota ({keys.CARD_QUOTA}), so "
                                          "no card request in it can ever run"))
        return violations, warnings
    for key, wanted in request.items():
        alternatives = card_alternatives(key)
        quoted = [card for card in alternatives if card in quota]
        if not quoted:
            which = shown(key) if len(alternatives) == 1 else "any of " + ", ".join(map(shown, alternatives))
            violations.append(Violation(path, f"queue {shown(queue_name)} has no quota for {which} "
                                              f"(its quota: {format_amounts(quota)})"))
            continue
        for card in alternatives:
            if card not in quota:
                warnings.append(f"queue {shown(queue_name)} has no quota for {shown(card)}: only "
                                f"{', '.join(map(shown, quoted))} of {shown(key)} can be used")
        allowed = quota_allows(key, quota)
        if wanted > allowed:
            if len(alternatives) == 1:
                violations.append(Violation(path, f"requests {wanted} {shown(key)} but queue {shown(queue_name)} "
                                                  f"allows at most {allowed}: it can never run"))
            else:
                split = " + ".join(f"{shown(card)} {quota[card]}" for card in quoted)
                violations.append(Violation(path, f"requests {wanted} of {shown(key)} but queue "
                                                  f"{shown(queue_name)} allows at most {allowed} across them "
                                                  f"({split}): it can never run"))
    return violations, warnings


def unknown_type_warnings(card_types: tuple[str, ...] | list[str], snapshot: ClusterSnapshot) -> list[str]:
    """Card types no node offers (suggesting the closest discovered type), when the nodes are known."""
    catalog = snapshot.catalog()
    if not snapshot.complete or not catalog.entries:
        return []
    warnings = []
    for card in card_types:
        if catalog.get(card) is None:
            closest = catalog.closest(card)
            hint = f" (did you mean {closest}?)" if closest else ""
            warnings.append(f"card type {shown(card)} is not offered by any node{hint}")
    return warnings


def card_count(requests: Mapping[str, Fraction], card_name: str, catalog: CardCatalog) -> int:
    """Whole cards one pod takes for ``card_name``: its requests of the resource(s) the type uses."""
    alternatives = card_alternatives(card_name)
    if not alternatives:
        return 0
    expected = expected_resource(alternatives[0], catalog)
    requested = card_resources_requested(requests, catalog)
    matching = [amount for resource, amount in requested.items() if expected.matches(resource, alternatives[0])]
    return whole_units(sum(matching, Fraction(0)))


def format_amounts(amounts: Mapping[str, int]) -> str:
    return ", ".join(f"{shown(name)} {amount}" for name, amount in amounts.items()) or "none"


CARD_NAME_PATH = annotation_path(keys.CARD_NAME)
CARD_REQUEST_PATH = annotation_path(keys.CARD_REQUEST)
CARD_QUOTA_PATH = annotation_path(keys.CARD_QUOTA)
