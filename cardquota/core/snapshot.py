"""The cluster snapshot: the typed views of every object cardquota accounts for, keyed for O(1) updates.

Manifests of other kinds are ignored, so a whole ``kubectl get -o yaml`` dump or a watch stream of mixed kinds
can be fed in as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from cardquota.core.cards import NodeCards, discover_card_types
from cardquota.core.errors import InputError
from cardquota.core.objects import Manifest, Node, ObjectKey, Pod, PodGroup, Queue, read_meta
from cardquota.core.quota import CardAmounts, card_quota

VOLCANO_SCHEDULING_GROUP = "scheduling.volcano.sh"


class Kind(StrEnum):
    NODE = "Node"
    QUEUE = "Queue"
    PODGROUP = "PodGroup"
    POD = "Pod"


NAMESPACED_KINDS = frozenset({Kind.POD, Kind.PODGROUP})


def kind_of(manifest: Manifest) -> Kind | None:
    """The accounted kind of a manifest, or None for kinds cardquota does not account for."""
    kind = manifest.get("kind")
    api_version = manifest.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return None
    group = api_version.rpartition("/")[0]
    if kind in (Kind.NODE, Kind.POD) and api_version == "v1":
        return Kind(kind)
    if kind in (Kind.QUEUE, Kind.PODGROUP) and group == VOLCANO_SCHEDULING_GROUP:
        return Kind(kind)
    return None


def object_key(kind: Kind, manifest: Manifest) -> ObjectKey:
    return read_meta(manifest, namespaced=kind in NAMESPACED_KINDS).key


@dataclass(frozen=True)
class NodeRecord:
    node: Node
    cards: NodeCards


@dataclass(frozen=True)
class QueueRecord:
    queue: Queue
    quota: CardAmounts


@dataclass
class ClusterSnapshot:
    """Nodes (with their discovered card types), Queues (with parsed quotas), PodGroups and Pods."""

    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    queues: dict[str, QueueRecord] = field(default_factory=dict)
    podgroups: dict[ObjectKey, PodGroup] = field(default_factory=dict)
    pods: dict[ObjectKey, Pod] = field(default_factory=dict)


def node_record(manifest: Manifest) -> NodeRecord:
    node = Node.from_manifest(manifest)
    return NodeRecord(node=node, cards=discover_card_types(node))


def queue_record(manifest: Manifest) -> QueueRecord:
    queue = Queue.from_manifest(manifest)
    return QueueRecord(queue=queue, quota=card_quota(queue.meta.annotations))


def describe(kind: Kind, manifest: Manifest) -> str:
    """``Pod team-a/train-0`` for messages; falls back to the kind when the object has no readable name."""
    try:
        meta = read_meta(manifest, namespaced=kind in NAMESPACED_KINDS)
    except InputError:
        return str(kind)
    return str(meta)
