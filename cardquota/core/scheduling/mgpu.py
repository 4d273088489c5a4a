"""mGPU (mgpu-design.md): several containers share a card, or one container shares several cards.

The node model (the design leaves it to the mGPU agent; these are the names cardquota reads):

* a node offers ``vke.volcengine.com/mgpu-core`` (100 per card) and ``vke.volcengine.com/mgpu-memory`` (MiB, all
  cards together) in its allocatable; cards are numbered 0 … n-1 and share the memory evenly;
* its compute policy is the label ``vke.volcengine.com/mgpu-compute-policy`` (``fixed-share`` when absent), and a
  pod's is the annotation of the same name (same default); they must match;
* multiple-mGPU pods (``vke.volcengine.com/container-multiple-gpu``) need ``native-burst-share`` and the node
  label ``vke.volcengine.com/mgpu-multiple-gpu: "true"``;
* what a card already carries comes from the pods bound to the node: their
  ``vke.volcengine.com/gpu-index-container-<name>`` annotations and their containers' requests.

A container asks for ``n`` cards with a share of each: a normal container with mgpu-core below 100 takes one card
(that core and memory); a multiple of 100 takes core/100 whole cards; a multiple-mGPU container with count ``k``
takes ``k`` cards with core/k and memory/k each. A card admits a share when its core stays within 100, its memory
within the card's, its containers within ``MGPUMaxContainersPerCard``, and a whole-card share only an idle card.

Allocation is a depth-first search, one tree level per container, trying each set of cards for it and pruning as
soon as a card cannot admit; every complete path is scored — binpack prefers fuller cards, spread emptier ones:
``weightOfCore * core utilisation + (1 - weightOfCore) * memory utilisation`` over the cards used, in 0…100 — and
the best one wins (ties: the lowest card indexes).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from cardquota.core.errors import InputError
from cardquota.core.keys import CONTAINER_MULTIPLE_GPU, FULL_CARD_CORE, GPU_INDEX_PREFIX, MGPU_CORE, MGPU_MEMORY
from cardquota.core.quantity import parse_quantity
from cardquota.core.schedconf.reader import read_bool, read_int, read_number
from cardquota.core.scheduling.refusal import Refusal

PREFIX = "vke.volcengine.com/"
COMPUTE_POLICY = f"{PREFIX}mgpu-compute-policy"
MULTIPLE_GPU_LABEL = f"{PREFIX}mgpu-multiple-gpu"
CARD_IDS = f"{PREFIX}mgpu-card-ids"
"""Node annotation: the cards' IDs in index order, comma-separated (used in ``id`` schedule mode)."""
ASSUMED = f"{PREFIX}assumed"
DEFAULT_POLICY = "fixed-share"
NATIVE_BURST = "native-burst-share"
BINPACK = "binpack"
SPREAD = "spread"
MGPU_UNSCHEDULABLE = "MGPUUnschedulable"
MAX_VISITS = 20_000
"""Search-tree nodes visited per pod and node at most (a few milliseconds): beyond it the best allocation found so
far is kept, or none (the search stays within the scheduler's time budget)."""
MIB = 2**20


@dataclass(frozen=True)
class MGPUConfig:
    enabled: bool = False
    policy: str = BINPACK
    weight_of_core: float = 0.5
    """0…1 (MGPUWeightOfCore / 100)."""
    schedule_mode: str = "index"
    max_containers_per_card: int = 16

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> MGPUConfig:
        """The ``predicates`` plugin's ``predicate.MGPU*`` arguments (bad values → defaults)."""
        enabled = read_bool(arguments.get("predicate.MGPUEnable"))
        policy = str(arguments.get("predicate.MGPUPolicy", BINPACK)).lower()
        weight = read_number(arguments.get("predicate.MGPUWeightOfCore"))
        mode = arguments.get("predicate.MGPUScheduleMode", "index")
        per_card = read_int(arguments.get("predicate.MGPUMaxContainersPerCard"))
        return cls(enabled=bool(enabled), policy=policy if policy in (BINPACK, SPREAD) else BINPACK,
                   weight_of_core=float(weight) / 100 if weight is not None and 0 <= weight <= 100 else 0.5,
                   schedule_mode=mode if mode in ("index", "id") else "index",
                   max_containers_per_card=per_card if per_card is not None and per_card >= 1 else 16)


@dataclass(frozen=True)
class Share:
    """What one container takes of each of its cards."""

    container: str
    cards: int
    core: Fraction
    memory: Fraction
    """MiB; for a whole card, the card's whole memory (filled in against the node)."""

    @property
    def whole(self) -> bool:
        return self.core >= FULL_CARD_CORE


@dataclass
class Card:
    index: int
    memory: Fraction
    core_used: Fraction = Fraction(0)
    memory_used: Fraction = Fraction(0)
    containers: int = 0

    def admits(self, share: Share, config: MGPUConfig) -> bool:
        if share.whole:
            return self.containers == 0 and self.core_used == 0 and self.memory_used == 0
        return (self.core_used + share.core <= FULL_CARD_CORE and self.memory_used + share.memory <= self.memory
                and self.containers < config.max_containers_per_card)

    def take(self, share: Share, sign: int = 1) -> None:
        memory = self.memory if share.whole else share.memory
        self.core_used += sign * min(share.core, Fraction(FULL_CARD_CORE))
        self.memory_used += sign * memory
        self.containers += sign


@dataclass
class MGPUNode:
    name: str
    cards: list[Card] = field(default_factory=list)
    policy: str = DEFAULT_POLICY
    multiple_gpu: bool = False
    card_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Allocation:
    indexes: Mapping[str, tuple[int, ...]]
    """Per container name, the cards it uses."""
    score: float


def pod_shares(pod: Mapping[str, Any]) -> list[Share] | Refusal:
    """What each container of a pod takes (only the containers asking for mGPU); a Refusal when it cannot be read
    (the admission webhook refuses such pods, so this only meets pods that bypassed it)."""
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    counts: list[str] | None = None
    if CONTAINER_MULTIPLE_GPU in annotations:
        counts = str(annotations[CONTAINER_MULTIPLE_GPU]).split(",")
        if len(counts) != len(containers):
            return Refusal(MGPU_UNSCHEDULABLE, f"{CONTAINER_MULTIPLE_GPU} lists {len(counts)} card counts for "
                                               f"{len(containers)} containers")
    shares: list[Share] = []
    for index, container in enumerate(containers):
        name = str(container.get("name") or index)
        try:
            core, memory = _request(container, MGPU_CORE), _request(container, MGPU_MEMORY)
            count = int(counts[index]) if counts is not None else None
        except (InputError, ValueError):
            return Refusal(MGPU_UNSCHEDULABLE, f"the mGPU request of container {name} cannot be read")
        if core is None and memory is None:
            continue
        core = core or Fraction(0)
        memory = memory or Fraction(0)
        if count is not None and count > 0:
            shares.append(Share(name, count, core / count, memory / count))
        elif core >= FULL_CARD_CORE:
            shares.append(Share(name, int(core // FULL_CARD_CORE), Fraction(FULL_CARD_CORE), Fraction(0)))
        else:
            shares.append(Share(name, 1, core, memory))
    return shares


def is_multiple(pod: Mapping[str, Any]) -> bool:
    return CONTAINER_MULTIPLE_GPU in ((pod.get("metadata") or {}).get("annotations") or {})


def node_model(node: Mapping[str, Any], pods_on_node: Iterable[Mapping[str, Any]]) -> MGPUNode | None:
    """The node's cards with what its pods already take, or None when it offers no mGPU."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    metadata = node.get("metadata") or {}
    try:
        core = parse_quantity(allocatable[MGPU_CORE])
        memory = parse_quantity(allocatable.get(MGPU_MEMORY, "0"))
    except (KeyError, InputError):
        return None
    count = int(core // FULL_CARD_CORE)
    if count <= 0:
        return None
    labels = metadata.get("labels") or {}
    ids = str((metadata.get("annotations") or {}).get(CARD_IDS, "")).split(",")
    model = MGPUNode(str(metadata.get("name", "")), [Card(index, memory / count) for index in range(count)],
                     policy=labels.get(COMPUTE_POLICY, DEFAULT_POLICY),
                     multiple_gpu=labels.get(MULTIPLE_GPU_LABEL) == "true",
                     card_ids=tuple(ids) if len(ids) == count and all(ids) else ())
    for pod in pods_on_node:
        shares = pod_shares(pod)
        if isinstance(shares, Refusal):
            continue
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        for share in shares:
            for index in _indexes(annotations.get(f"{GPU_INDEX_PREFIX}{share.container}"), model):
                model.cards[index].take(share)
    return model


def filter_refusal(pod: Mapping[str, Any], shares: Sequence[Share], node: MGPUNode) -> Refusal | None:
    """The design's Filter rules: a normal mGPU pod's compute policy matches the node's; multiple-mGPU pods only on
    native-burst-share nodes that enable them; no container asks for more cards than the node has."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    policy = annotations.get(COMPUTE_POLICY, DEFAULT_POLICY)
    if not is_multiple(pod) and policy != node.policy:
        return Refusal(MGPU_UNSCHEDULABLE, f"node {node.name} runs mGPU policy {node.policy}, the pod asks for "
                                           f"{policy}")
    if is_multiple(pod) and not (node.policy == NATIVE_BURST and node.multiple_gpu):
        return Refusal(MGPU_UNSCHEDULABLE, f"node {node.name} does not enable multiple-mGPU pods "
                                           f"({NATIVE_BURST} and {MULTIPLE_GPU_LABEL}=true)")
    for share in shares:
        if share.cards > len(node.cards):
            return Refusal(MGPU_UNSCHEDULABLE, f"container {share.container} asks for {share.cards} cards, node "
                                               f"{node.name} has {len(node.cards)}")
    return None


def allocate(shares: Sequence[Share], node: MGPUNode, config: MGPUConfig) -> Allocation | None:
    """The best assignment of cards to the containers (DFS with pruning), or None when none fits.

    Bounded: a quick capacity check first (core, container slots, idle cards for whole-card shares); among cards in
    the same state only the lowest-numbered are tried (the others give the same scores); and at most
    :data:`MAX_VISITS` tree nodes are visited, keeping the best allocation found by then.
    """
    if not _may_fit(shares, node, config):
        return None
    best: list[Allocation] = []
    chosen: list[tuple[int, ...]] = []
    visits = 0

    def visit(level: int) -> None:
        nonlocal visits
        visits += 1
        if visits > MAX_VISITS:
            return
        if level == len(shares):
            candidate = Allocation({share.container: cards for share, cards in zip(shares, chosen, strict=True)},
                                   _score(shares, chosen, node, config))
            if not best or candidate.score > best[0].score:
                best[:] = [candidate]
            return
        share = shares[level]
        states = [(card.core_used, card.memory_used, card.containers, card.memory) for card in node.cards]
        for cards in itertools.combinations(range(len(node.cards)), share.cards):
            if any(states[other] == states[index] and other not in cards
                   for index in cards for other in range(index)):
                continue  # the same as a set of lower-numbered cards in the same state
            if not all(node.cards[index].admits(share, config) for index in cards):
                continue  # prune: this container cannot sit on these cards, whatever comes below
            for index in cards:
                node.cards[index].take(share)
            chosen.append(cards)
            visit(level + 1)
            chosen.pop()
            for index in cards:
                node.cards[index].take(share, -1)

    visit(0)
    return best[0] if best else None


def _may_fit(shares: Sequence[Share], node: MGPUNode, config: MGPUConfig) -> bool:
    """Necessary conditions, cheap: enough free core, container slots and idle cards for whole-card shares."""
    whole = sum(share.cards for share in shares if share.whole)
    idle = sum(1 for card in node.cards if card.containers == 0 and card.core_used == 0 and card.memory_used == 0)
    core = sum(share.cards * share.core for share in shares if not share.whole)
    free_core = sum(FULL_CARD_CORE - card.core_used for card in node.cards) - whole * FULL_CARD_CORE
    slots = sum(max(0, config.max_containers_per_card - card.containers) for card in node.cards)
    return whole <= idle and core <= free_core and sum(share.cards for share in shares) <= slots


def result_annotations(allocation: Allocation, node: MGPUNode, config: MGPUConfig) -> dict[str, str]:
    """What the mGPU agent reads on the pod: the cards per container and ``assumed: "true"``."""
    names = node.card_ids if config.schedule_mode == "id" and node.card_ids else None
    result = {f"{GPU_INDEX_PREFIX}{container}": ",".join(names[i] if names else str(i) for i in cards)
              for container, cards in allocation.indexes.items()}
    result[ASSUMED] = "true"
    return result


def _score(shares: Sequence[Share], chosen: Sequence[tuple[int, ...]], node: MGPUNode, config: MGPUConfig) -> float:
    """Mean utilisation of the cards used (the shares already taken), binpack: as is; spread: its complement."""
    used = sorted({index for cards in chosen for index in cards})
    if not used:
        return 0.0
    total = 0.0
    for index in used:
        card = node.cards[index]
        core = float(card.core_used / FULL_CARD_CORE)
        memory = float(card.memory_used / card.memory) if card.memory else core
        total += config.weight_of_core * core + (1 - config.weight_of_core) * memory
    utilisation = total / len(used)
    value = utilisation if config.policy == BINPACK else 1 - utilisation
    return round(100 * value, 6) - len(used) * 1e-9 - sum(used) * 1e-12  # ties: fewer, then lower, cards


def _request(container: Mapping[str, Any], resource: str) -> Fraction | None:
    resources = container.get("resources") or {}
    for section in ("requests", "limits"):
        values = resources.get(section) or {}
        if resource in values:
            return parse_quantity(values[resource])
    return None


def _indexes(value: object, node: MGPUNode) -> list[int]:
    if not isinstance(value, str) or not value:
        return []
    indexes = []
    for item in value.split(","):
        item = item.strip()
        if item in node.card_ids:
            indexes.append(node.card_ids.index(item))
        elif item.isdigit() and int(item) < len(node.cards):
            indexes.append(int(item))
    return indexes
