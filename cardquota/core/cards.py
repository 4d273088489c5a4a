"""Card-type discovery: which card types a Node offers, under which resource name, and how many.

A node advertises its accelerator family through labels (normally written by the vendor's feature discovery):
``<prefix>/<type>.product`` names the product, and ``.count``, ``.memory`` (MiB) and ``.replicas`` of the same
family describe it. Its ``status.allocatable`` then says how the cards are exposed:

* whole cards — a resource under the vendor prefix that is neither ``*.shared`` nor ``mig-*``
  (``nvidia.com/gpu``, ``huawei.com/Ascend910``) → card type ``<product>``;
* MPS replicas — ``<prefix>/gpu.shared`` (or ``<prefix>/<type>.shared``)
  → ``<product>/mps-<memory GiB, rounded>g*1/<replicas>``;
* MIG slices — each ``<prefix>/mig-<profile>`` → ``<product>/mig-<profile>-mixed``.

The count is the allocatable amount; a resource present with 0 allocatable is listed with count 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

from cardquota.core.objects import Node

PRODUCT_LABEL = re.compile(r"^((.+?)/(\w+))\.product$", re.ASCII)
MIB_PER_GIB = 1024


class CardKind(StrEnum):
    WHOLE = "whole"
    MPS = "mps"
    MIG = "mig"


@dataclass(frozen=True)
class CardType:
    name: str
    resource: str
    count: int
    kind: CardKind
    product: str = ""
    """The product the type belongs to (``NVIDIA-A100`` for ``NVIDIA-A100/mig-1g.5gb-mixed``)."""
    product_label: str = ""
    """The node label that names the product (``nvidia.com/gpu.product``), for node affinity."""

    def as_json(self) -> dict[str, str | int]:
        return {"resource": self.resource, "count": self.count, "kind": self.kind.value}


@dataclass(frozen=True)
class CardFamily:
    """One ``<prefix>/<type>.product`` label and its sibling labels."""

    base: str
    """``nvidia.com/gpu``: the label key without ``.product``."""
    prefix: str
    """``nvidia.com``: the vendor prefix under which the family's resources live."""
    product: str
    memory_mib: str | None
    replicas: str | None

    @property
    def names(self) -> tuple[str, str]:
        """(product, product label key) as card types carry them."""
        return (self.product, f"{self.base}.product")

    @property
    def shared_resources(self) -> frozenset[str]:
        return frozenset({f"{self.prefix}/gpu.shared", f"{self.base}.shared"})


@dataclass(frozen=True)
class NodeCards:
    """What discovery found on one node: its card types by name, plus notes on what it had to skip."""

    node: str
    types: Mapping[str, CardType]
    notes: tuple[str, ...] = ()
    by_resource: Mapping[str, CardType] = field(init=False, compare=False, repr=False)
    """Card type per resource name (each resource offers one type), for the ledger's hot path."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_resource", {card.resource: card for card in self.types.values()})

    def type_for_resource(self, resource: str) -> CardType | None:
        return self.by_resource.get(resource)

    def as_json(self) -> dict[str, dict[str, str | int]]:
        return {name: self.types[name].as_json() for name in sorted(self.types)}


def card_families(labels: Mapping[str, str]) -> list[CardFamily]:
    """The product-label families on a node, one per vendor prefix (the first label key in sorted order wins)."""
    families: dict[str, CardFamily] = {}
    for key in sorted(labels):
        match = PRODUCT_LABEL.match(key)
        if match is None or not labels[key]:
            continue
        base, prefix = match.group(1), match.group(2)
        if prefix in families:
            continue
        families[prefix] = CardFamily(
            base=base,
            prefix=prefix,
            product=labels[key],
            memory_mib=labels.get(f"{base}.memory"),
            replicas=labels.get(f"{base}.replicas"),
        )
    return list(families.values())


def mps_card_name(product: str, memory_mib: int, replicas: int) -> str:
    """``NVIDIA-A100/mps-80g*1/8``: memory is rounded half-up to whole GiB."""
    gib = (memory_mib * 2 + MIB_PER_GIB) // (2 * MIB_PER_GIB)
    return f"{product}/mps-{gib}g*1/{replicas}"


def mig_card_name(product: str, profile: str) -> str:
    """``NVIDIA-A100/mig-1g.5gb-mixed``."""
    return f"{product}/mig-{profile}-mixed"


def discover_card_types(node: Node) -> NodeCards:
    """The card types a node offers. A node without a product label (CPU node, unlabeled GPU node) has none."""
    types: dict[str, CardType] = {}
    notes: list[str] = []
    for family in card_families(node.labels):
        for card in _family_cards(family, node.allocatable, notes):
            if card.name in types and types[card.name].resource != card.resource:
                notes.append(
                    f"card type {card.name} is offered by both {types[card.name].resource} and {card.resource}; "
                    f"keeping {types[card.name].resource}"
                )
                continue
            types[card.name] = card
    return NodeCards(node=node.name, types=types, notes=tuple(notes))


def _family_cards(family: CardFamily, allocatable: Mapping[str, Fraction], notes: list[str]) -> Iterable[CardType]:
    vendor = f"{family.prefix}/"
    mig = f"{vendor}mig-"
    whole_resources: list[str] = []
    for resource in sorted(allocatable):
        if not resource.startswith(vendor):
            continue
        count = _count(allocatable[resource])
        if resource.startswith(mig):
            profile = resource[len(mig):]
            yield CardType(mig_card_name(family.product, profile), resource, count, CardKind.MIG, *family.names)
        elif resource.endswith(".shared"):
            if resource in family.shared_resources:
                name = _mps_name(family, resource, notes)
                if name is not None:
                    yield CardType(name, resource, count, CardKind.MPS, *family.names)
        else:
            whole_resources.append(resource)
    if not whole_resources:
        return
    chosen = family.base if family.base in whole_resources else whole_resources[0]
    if len(whole_resources) > 1:
        others = ", ".join(r for r in whole_resources if r != chosen)
        notes.append(f"{family.product}: whole cards counted from {chosen}; ignored {others}")
    yield CardType(family.product, chosen, _count(allocatable[chosen]), CardKind.WHOLE, *family.names)


def _mps_name(family: CardFamily, resource: str, notes: list[str]) -> str | None:
    memory = _positive_int(family.memory_mib)
    replicas = _positive_int(family.replicas)
    if memory is None or replicas is None:
        problems = [f"the label {family.base}.{suffix} is missing" if text is None
                    else f"{family.base}.{suffix}={text!r} is not a positive whole number"
                    for suffix, text, value in (("memory", family.memory_mib, memory),
                                                ("replicas", family.replicas, replicas)) if value is None]
        notes.append(f"{resource} is allocatable but {' and '.join(problems)}, so it names no MPS card type; "
                     "skipped")
        return None
    return mps_card_name(family.product, memory, replicas)


def _positive_int(text: str | None) -> int | None:
    if text is None or len(text) > 18 or not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if value > 0 else None


def _count(amount: Fraction) -> int:
    return max(0, math.floor(amount))


def cluster_totals(nodes: Iterable[NodeCards]) -> dict[str, int]:
    """Cards per type across nodes."""
    totals: dict[str, int] = {}
    for node in nodes:
        for card in node.types.values():
            totals[card.name] = totals.get(card.name, 0) + card.count
    return dict(sorted(totals.items()))
