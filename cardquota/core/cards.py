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

The name follows the seed's rules above; the *kind* says what one counted unit is. A card can be shared, and then
the allocatable amount counts slices, not cards (a quota of N is N slices):

* NVIDIA's device plugin with MPS or time-slicing and its default naming keeps ``nvidia.com/gpu`` and appends
  ``-SHARED`` to the product (labels ``<base>.replicas`` > 1 and ``<base>.sharing-strategy`` ``mps`` or
  ``time-slicing``): kind ``mps`` or ``time-slicing``, the type keeps the product's name. With ``renameByDefault``
  the resource is ``<prefix>/gpu.shared`` (the MPS-named type above; kind ``time-slicing`` when the strategy says
  so). (NVIDIA/k8s-device-plugin v0.20.0, ``internal/lm/resource.go`` ``baseLabeler``/``getProductName``;
  ``api/config/v1/sharing.go``, ``replicas.go``.)
* HAMi's device plugin advertises ``nvidia.com/gpu`` = cards times ``deviceSplitCount`` and registers the cards in the
  node annotation ``hami.io/node-nvidia-register``: kind ``vgpu`` (Project-HAMi/HAMi v2.10.0,
  ``pkg/device/nvidia/device.go`` ``RegisterAnnos``, ``pkg/device-plugin/nvidiadevice/nvinternal/rm/devices.go``
  ``GetPluginDevices``).
* NVIDIA's MIG ``single`` strategy (``<prefix>/mig.strategy: single``) keeps ``nvidia.com/gpu`` for slices of one
  profile and names the product ``<model>-MIG-<profile>``: kind ``mig`` (``internal/lm/mig-strategy.go``,
  ``strategy.go`` ``migStrategyLabeler``).
* A MIG profile whose own labels say it is replicated (``nvidia.com/mig-1g.5gb.replicas`` > 1, with its
  ``.sharing-strategy``): the MIG type keeps its name and takes the sharing kind, its instances as the cards.
* Any other whole-card resource with more allocatable than the family's ``.count`` label (or ``.replicas`` > 1
  without a strategy we know): kind ``shared``.

Accelerators without a product label offer no card type (discovery reads nothing else: the capacity-card plugin
of Volcano reads only ``<prefix>/<type>.product``); :func:`unlabelled_accelerators` says which resources and which
label would name them, for ``cardquota discover`` and ``doctor`` alike.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

from cardquota.core.objects import Node

PRODUCT_LABEL = re.compile(r"^((.+?)/(\w+))\.product$", re.ASCII)
MIB_PER_GIB = 1024
HAMI_NVIDIA_REGISTER = "hami.io/node-nvidia-register"
"""The node annotation in which HAMi's NVIDIA device plugin registers each card and its split count."""
HAMI_RESOURCE = "nvidia.com/gpu"
"""The resource HAMi's NVIDIA device plugin advertises by default (``resourceName`` in its chart)."""
PRODUCT_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", re.ASCII)
"""A label value a suggested product may be (Kubernetes' label value syntax)."""
NPU_CHIP_LABEL = "node.kubernetes.io/npu.chip.name"
"""The label Ascend's device plugin writes with the node's chip (``910B3``): Ascend/mind-cluster v26.1.0,
``component/ascend-device-plugin/pkg/common/constants.go`` ``ChipNameLabel``, set by ``updateChipNameToNode``."""
ACCELERATOR_RESOURCE = re.compile(
    r"nvidia\.com/(gpu|gpu\.shared|mig-.+)|amd\.com/gpu|huawei\.com/Ascend.+|habana\.ai/gaudi|gpu\.intel\.com/.+"
    r"|aws\.amazon\.com/neuron.*|google\.com/tpu", re.ASCII)
"""Allocatable resources that mean "this node has accelerators", whether or not discovery finds a card type."""


class CardKind(StrEnum):
    """What one counted unit of a card type is: a card, a MIG slice, or a slice of a shared card."""

    WHOLE = "whole"
    MPS = "mps"
    MIG = "mig"
    TIME_SLICING = "time-slicing"
    VGPU = "vgpu"
    SHARED = "shared"
    """More slices than cards, the sharing mode not labelled."""


SHARED_KINDS = frozenset({CardKind.MPS, CardKind.TIME_SLICING, CardKind.VGPU, CardKind.SHARED})
SHARING_MODES = {CardKind.MPS: "by MPS", CardKind.TIME_SLICING: "by time-slicing", CardKind.VGPU: "by HAMi vGPU",
                 CardKind.SHARED: "in a way the node's labels do not name"}
"""How warnings name each shared kind's sharing mode."""


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
    cards: int | None = None
    """Physical cards behind the count: the count itself for whole cards; for shared kinds when the node says
    (``.count`` label, HAMi's registration); None for MIG slices."""
    replicas: int | None = None
    """Slices per physical card for a shared kind, when known; None for whole cards and MIG."""

    @property
    def shared(self) -> bool:
        """Whether the count is of slices of shared cards (a quota of N is then N slices, not N cards)."""
        return self.kind in SHARED_KINDS

    @property
    def named_shared(self) -> bool:
        """Whether the name itself says the type counts MPS slices: the seed's ``<product>/mps-…`` type of an MPS
        ``.shared`` resource (time-slicing under that name is not what the name says)."""
        return self.kind is CardKind.MPS and self.resource.endswith(".shared")

    def as_json(self) -> dict[str, str | int]:
        """``resource``, ``count`` and ``kind``; a shared kind adds ``cards`` and ``replicas`` when known."""
        found: dict[str, str | int] = {"resource": self.resource, "count": self.count, "kind": self.kind.value}
        if self.shared:
            found.update({key: value for key, value in (("cards", self.cards), ("replicas", self.replicas))
                          if value is not None})
        return found


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
    count: str | None = None
    strategy: str | None = None
    """``<base>.sharing-strategy``: ``mps``, ``time-slicing`` or ``none`` as NVIDIA's feature discovery writes it."""
    mig_strategy: str | None = None
    """``<prefix>/mig.strategy``: with ``single``, ``<base>`` counts MIG slices of one profile, not cards."""

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
            count=labels.get(f"{base}.count"),
            strategy=labels.get(f"{base}.sharing-strategy"),
            mig_strategy=labels.get(f"{prefix}/mig.strategy"),
        )
    return list(families.values())


def mps_card_name(product: str, memory_mib: int, replicas: int) -> str:
    """``NVIDIA-A100/mps-80g*1/8``: memory is rounded half-up to whole GiB."""
    gib = (memory_mib * 2 + MIB_PER_GIB) // (2 * MIB_PER_GIB)
    return f"{product}/mps-{gib}g*1/{replicas}"


def mig_card_name(product: str, profile: str) -> str:
    """``NVIDIA-A100/mig-1g.5gb-mixed``."""
    return f"{product}/mig-{profile}-mixed"


LABEL_VALUE_MAX_LENGTH = 63
"""A label value (so a product label's value, the name of a whole-card type) is at most 63 characters
(k8s.io/apimachinery ``pkg/api/validate/content/kube.go`` ``LabelValueMaxLength``, checked by ``IsLabelValue``)."""
RESOURCE_NAME_MAX_LENGTH = 63
"""The name part of an extended resource name (``mig-1g.5gb`` in ``nvidia.com/mig-1g.5gb``) is at most 63
characters: resource names are qualified names (``IsQualifiedName``, ``labelKeyMaxLength`` in the same file)."""
DISCOVERY_SUFFIX_MAX_LENGTH = max(
    len(mig_card_name("", "p" * (RESOURCE_NAME_MAX_LENGTH - len("mig-")))),
    len(mps_card_name("", 10**18 - 1, 10**18 - 1)),
)
"""The longest suffix discovery appends to a product: ``/mig-<profile>-mixed`` with the longest profile a resource
name can carry (70 characters; an MPS ``/mps-<GiB>g*1/<replicas>`` suffix of the largest numbers read is 42)."""
MAX_CARD_NAME_LENGTH = LABEL_VALUE_MAX_LENGTH + DISCOVERY_SUFFIX_MAX_LENGTH
"""The longest card type name discovery can produce (133): a product label value plus the longest suffix. Every
parser of card type names (quota keys, each alternative of a ``card.request`` key or ``card.name``) refuses a longer
one, so what the ledger keys and the controller publishes by name stays bounded."""
CARD_NAME_LENGTH_REASON = (f"a node label value is at most {LABEL_VALUE_MAX_LENGTH} characters, plus the suffix "
                           f"discovery adds (/mig-<profile>-mixed), at most {DISCOVERY_SUFFIX_MAX_LENGTH}")
"""Why :data:`MAX_CARD_NAME_LENGTH`, as the refusal says it."""


def discover_card_types(node: Node) -> NodeCards:
    """The card types a node offers. A node without a product label (CPU node, unlabeled GPU node) has none."""
    types: dict[str, CardType] = {}
    notes: list[str] = []
    vgpu = hami_cards(node.meta.annotations.get(HAMI_NVIDIA_REGISTER))
    for family in card_families(node.labels):
        for card in _family_cards(family, node.allocatable, notes, vgpu, node.labels):
            if card.name in types and types[card.name].resource != card.resource:
                notes.append(
                    f"card type {card.name} is offered by both {types[card.name].resource} and {card.resource}; "
                    f"keeping {types[card.name].resource}"
                )
                continue
            types[card.name] = card
    return NodeCards(node=node.name, types=types, notes=tuple(notes))


def _family_cards(family: CardFamily, allocatable: Mapping[str, Fraction], notes: list[str],
                  vgpu: tuple[int, int | None] | None = None,
                  labels: Mapping[str, str] | None = None) -> Iterable[CardType]:
    vendor = f"{family.prefix}/"
    mig = f"{vendor}mig-"
    whole_resources: list[str] = []
    for resource in sorted(allocatable):
        if not resource.startswith(vendor):
            continue
        count = _count(allocatable[resource])
        if resource.startswith(mig):
            profile = resource[len(mig):]
            kind, cards, replicas = _mig_sharing(resource, labels or {})
            yield CardType(mig_card_name(family.product, profile), resource, count, kind, *family.names,
                           cards=cards, replicas=replicas)
        elif resource.endswith(".shared"):
            if resource in family.shared_resources:
                name = _mps_name(family, resource, notes)
                if name is not None:
                    kind = CardKind.TIME_SLICING if _strategy(family) is CardKind.TIME_SLICING else CardKind.MPS
                    yield CardType(name, resource, count, kind, *family.names, cards=_positive_int(family.count),
                                   replicas=_positive_int(family.replicas))
        else:
            whole_resources.append(resource)
    if not whole_resources:
        return
    renamed = any(resource in allocatable for resource in family.shared_resources)
    chosen = family.base if family.base in whole_resources else whole_resources[0]
    if len(whole_resources) > 1:
        others = ", ".join(r for r in whole_resources if r != chosen)
        notes.append(f"{family.product}: whole cards counted from {chosen}; ignored {others}")
    count = _count(allocatable[chosen])
    kind, cards, replicas = _whole_sharing(family, chosen, count, None if renamed else vgpu, renamed=renamed)
    yield CardType(family.product, chosen, count, kind, *family.names, cards=cards, replicas=replicas)


def _mig_sharing(resource: str, labels: Mapping[str, str]) -> tuple[CardKind, int | None, int | None]:
    """(kind, MIG instances, replicas) of a mixed-strategy MIG resource: GPU feature discovery labels each MIG
    resource like a card (``nvidia.com/mig-1g.5gb.count``, ``.replicas``, ``.sharing-strategy``:
    ``internal/lm/resource.go`` ``NewMIGResourceLabeler``), and a time-sliced or MPS-shared profile counts slices of
    its instances."""
    replicas = _positive_int(labels.get(f"{resource}.replicas"))
    if replicas is None or replicas < 2:
        return CardKind.MIG, None, None
    strategy = labels.get(f"{resource}.sharing-strategy", "").strip().lower()
    kind = {"mps": CardKind.MPS, "time-slicing": CardKind.TIME_SLICING}.get(strategy, CardKind.SHARED)
    return kind, _positive_int(labels.get(f"{resource}.count")), replicas


def _strategy(family: CardFamily) -> CardKind | None:
    """The shared kind ``<base>.sharing-strategy`` names, when ``<base>.replicas`` says cards are split."""
    replicas = _positive_int(family.replicas)
    if replicas is None or replicas < 2:
        return None
    strategy = (family.strategy or "").strip().lower()
    return {"mps": CardKind.MPS, "time-slicing": CardKind.TIME_SLICING}.get(strategy, CardKind.SHARED)


def _whole_sharing(family: CardFamily, resource: str, count: int, vgpu: tuple[int, int | None] | None, *,
                   renamed: bool = False) -> tuple[CardKind, int | None, int | None]:
    """(kind, physical cards, replicas) of a family's whole-card resource: shared when the labels or HAMi's
    registration say so, or when more is allocatable than the ``.count`` label's cards. When the family's
    ``.shared`` resource is offered (``renameByDefault``), the sharing labels describe that one, not this."""
    cards = _positive_int(family.count)
    strategy = None if renamed else _strategy(family)
    if strategy is not None:
        return strategy, cards, _positive_int(family.replicas)
    if family.mig_strategy == "single" and "-MIG-" in family.product:
        return CardKind.MIG, None, None
    if vgpu is not None and resource == HAMI_RESOURCE:
        devices, split = vgpu
        return CardKind.VGPU, devices, split if split is not None else _ratio(count, devices)
    if cards is not None and count > cards:
        return CardKind.SHARED, cards, _ratio(count, cards)
    return CardKind.WHOLE, count, None


def _ratio(slices: int, cards: int) -> int | None:
    """Slices per card when they divide evenly (an unhealthy card's slices are gone: then unknown)."""
    return slices // cards if cards > 0 and slices % cards == 0 else None


def hami_cards(annotation: str | None) -> tuple[int, int | None] | None:
    """(cards, slices per card — None when they differ) from HAMi's ``hami.io/node-nvidia-register``: a JSON list
    of devices with a ``count`` (HAMi v2.8.0 and later, ``device.UnMarshalNodeDevices``), or the older
    ``id,count,devmem,devcore,type,numa,health[,index,mode]:`` records (``device.DecodeNodeDevices``). None when
    absent or unreadable (discovery then judges by the labels alone)."""
    if not annotation:
        return None
    counts: list[int] = []
    text = annotation.strip()
    if text.startswith("["):
        try:
            devices = json.loads(text)
        except (ValueError, RecursionError):  # (an annotation of nested brackets is not a registration)
            return None
        if not isinstance(devices, list):
            return None
        for device in devices:
            count = device.get("count") if isinstance(device, dict) else None
            if not isinstance(count, int) or isinstance(count, bool):
                return None
            counts.append(count)
    else:
        for record in filter(None, text.split(":")):
            fields = record.split(",")
            if len(fields) not in (7, 9) or _positive_int(fields[1].strip()) is None:
                return None
            counts.append(int(fields[1]))
    if not counts:
        return None
    split = counts[0] if len(set(counts)) == 1 and counts[0] > 0 else None
    return len(counts), split


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


def sharing_warnings(nodes: Iterable[NodeCards]) -> list[str]:
    """One warning per shared card type across ``nodes`` whose name does not say so (all but the seed's MPS types,
    ``<product>/mps-<memory>g*1/<replicas>``): its sharing mode, cards times replicas = slices, what a quota of N for
    it then means (N slices), and the nodes where the same name counts whole cards. Empty when every type counts
    whole cards, MIG slices or named MPS slices."""
    shared: dict[str, list[tuple[str, CardType]]] = {}
    whole: dict[str, list[str]] = {}
    for cards in nodes:
        for card in cards.types.values():
            if card.shared and not card.named_shared:
                shared.setdefault(card.name, []).append((cards.node, card))
            elif not card.shared:
                whole.setdefault(card.name, []).append(cards.node)
    return [_sharing_warning(name, shared[name], whole.get(name, [])) for name in sorted(shared)]


def _sharing_warning(name: str, offered: list[tuple[str, CardType]], whole: list[str]) -> str:
    kinds = sorted({card.kind for _, card in offered})
    modes = " or ".join(SHARING_MODES[kind] for kind in kinds)
    resources = ", ".join(sorted({card.resource for _, card in offered}))
    slices = sum(card.count for _, card in offered)
    replicas = {card.replicas for _, card in offered}
    cards = [card.cards for _, card in offered]
    factor = replicas.pop() if len(replicas) == 1 else None
    if factor is not None and None not in cards:
        amount = f"{sum(c for c in cards if c is not None)} cards × {factor} replicas = {slices} slices"
    elif None not in cards:
        amount = f"{slices} slices of {sum(c for c in cards if c is not None)} cards"
    else:
        amount = f"{slices} slices" + (f", {factor} per card" if factor is not None else "")
    meaning = f"N slices ({'N/' + str(factor) + ' cards' if factor is not None else 'not N cards'})"
    text = (f"card type {name} counts slices of cards shared {modes}, not whole cards: {resources} on "
            f"{_nodes([node for node, _ in offered])} is {amount}; a quota of N for {name} means {meaning}")
    if whole:
        text += f", while on {_nodes(whole)} the same type counts whole cards: one quota counts both"
    return text


def _nodes(names: list[str]) -> str:
    """``2 nodes (a, b)``, the first three named."""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{len(names)} node{'s' if len(names) != 1 else ''} ({shown})"


@dataclass(frozen=True)
class Unlabelled:
    """A node with accelerator resources under a vendor prefix that has no product label: no card type."""

    node: str
    resources: tuple[tuple[str, Fraction], ...]
    """(resource, allocatable) of the accelerators discovery cannot name."""
    labels: tuple[tuple[str, str], ...]
    """(label key, suggested value) per vendor prefix: what to write for discovery to name them."""
    vgpu: tuple[int, int | None] | None = None

    def describe(self) -> str:
        have = ", ".join(f"{amount} {resource}" for resource, amount in self.resources)
        if self.vgpu is not None and any(resource == HAMI_RESOURCE for resource, _ in self.resources):
            have += f" (HAMi vGPU slices of {self.vgpu[0]} card{'s' if self.vgpu[0] != 1 else ''})"
        wanted = ", ".join(f"no {key.partition('/')[0]}/<type>.product label (e.g. {key}={value})"
                           for key, value in self.labels)
        return f"{self.node}: {have} allocatable, {wanted}"

    @property
    def command(self) -> str:
        """``kubectl label node NODE huawei.com/Ascend910.product=Ascend-910B3``."""
        return f"kubectl label node {self.node} " + " ".join(f"{key}={value}" for key, value in self.labels)


def unlabelled_accelerators(node: Node, card_resources: Container[str] = ()) -> Unlabelled | None:
    """What a GPU/NPU node lacks for discovery: its accelerator resources (:data:`ACCELERATOR_RESOURCE`, or a
    resource another node offers as cards: ``card_resources``) under a vendor prefix without a product label, and
    the label to write for each prefix (:func:`product_label`, :func:`suggested_product`). None when it lacks
    nothing."""
    families = {family.prefix for family in card_families(node.labels)}
    lacking: dict[str, list[str]] = {}  # vendor prefix → its accelerator resources
    have: list[tuple[str, Fraction]] = []
    for resource, amount in sorted(node.allocatable.items()):
        prefix, slash, _ = resource.partition("/")
        if not slash or amount <= 0 or prefix in families:
            continue
        if resource in card_resources or ACCELERATOR_RESOURCE.fullmatch(resource):
            lacking.setdefault(prefix, []).append(resource)
            have.append((resource, amount))
    if not lacking:
        return None
    labels = tuple((product_label(resources[0]), suggested_product(node, resources[0]))
                   for resources in lacking.values())
    return Unlabelled(node.name, tuple(have), labels, hami_cards(node.meta.annotations.get(HAMI_NVIDIA_REGISTER)))


NPU_PRODUCT_LABEL = "huawei.com/npu.product"
"""The product label docs/cards.md recommends for Ascend NPUs (whose device plugin writes none)."""


def product_label(resource: str) -> str:
    """The product label to write for ``resource`` (``nvidia.com/gpu`` → ``nvidia.com/gpu.product``, as GPU
    feature discovery writes it; ``huawei.com/Ascend910`` → :data:`NPU_PRODUCT_LABEL`; MIG and MPS resources →
    ``<vendor>/gpu.product``; another vendor's ``<vendor>/<name>`` → ``<vendor>/<name>.product``)."""
    prefix, _, name = resource.partition("/")
    if prefix == "huawei.com" and name.startswith("Ascend"):
        return NPU_PRODUCT_LABEL
    family = re.match(r"\w+", name, re.ASCII)
    label = f"{prefix}/{family[0] if family and not name.startswith('mig-') else 'gpu'}.product"
    return label if PRODUCT_LABEL.match(label) else f"{prefix}/gpu.product"


def suggested_product(node: Node, resource: str) -> str:
    """The product value to write for ``resource``: ``Ascend-<chip>`` (``Ascend-910B3``) for an Ascend NPU whose
    device plugin labelled its chip (:data:`NPU_CHIP_LABEL`), else ``<product>`` for the person to fill in (NVIDIA's
    GPU feature discovery writes the real one). The value becomes the card type's name in queues' quotas."""
    chip = node.labels.get(NPU_CHIP_LABEL, "").strip()
    if resource.startswith("huawei.com/Ascend") and chip and PRODUCT_VALUE.fullmatch(chip):
        return chip if chip.lower().startswith("ascend") else f"Ascend-{chip}"
    return "<product>"
