"""What changed in the cluster since someone last asked (pure): the keys of the queues, nodes, PodGroups and pods that
watch events touched.

The :class:`~cardquota.core.ledger.Ledger` records into a :class:`ChangeLog` as it applies each event (a set ``add``
per object it recomputes); the publisher drains it once a window and works on those keys only, so a window in which
nothing happened costs nothing, whatever the size of the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cardquota.core.objects import ObjectKey


@dataclass
class Changes:
    """The keys of the objects touched in one stretch of time: an object whose own contribution may have changed
    (queues: their quota, capability or totals; nodes: their card types; PodGroups and pods: the object itself, what
    it is charged or which queue it is charged to). A key may name an object deleted since."""

    queues: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    podgroups: set[ObjectKey] = field(default_factory=set)
    pods: set[ObjectKey] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.queues or self.nodes or self.podgroups or self.pods)

    def __len__(self) -> int:
        return len(self.queues) + len(self.nodes) + len(self.podgroups) + len(self.pods)


@dataclass
class ChangeLog:
    """The changes recorded since the last :meth:`drain`. Recording is one set ``add``; draining swaps the sets out
    (O(1)), so whoever drains owns what it got and may read it while new events are recorded into fresh sets."""

    pending: Changes = field(default_factory=Changes)
    versions: dict[str, int] = field(default_factory=dict)
    """Per queue, how many times it was recorded (never drained): equal versions, an unchanged queue. Lets a reader
    that works in slices tell whether a queue changed while it worked, even when it changed back."""

    def queue(self, name: str) -> None:
        self.pending.queues.add(name)
        self.versions[name] = self.versions.get(name, 0) + 1

    def forget_queue(self, name: str) -> None:
        """A deleted queue: nothing to publish for it (its annotations went with it)."""
        self.pending.queues.discard(name)
        self.versions[name] = self.versions.get(name, 0) + 1

    def node(self, name: str) -> None:
        self.pending.nodes.add(name)

    def podgroup(self, key: ObjectKey) -> None:
        self.pending.podgroups.add(key)

    def pod(self, key: ObjectKey) -> None:
        self.pending.pods.add(key)

    def record(self, changes: Changes) -> None:
        """Record every key of ``changes`` (work drained but not done, to be done after the next drain)."""
        self.pending.queues |= changes.queues
        self.pending.nodes |= changes.nodes
        self.pending.podgroups |= changes.podgroups
        self.pending.pods |= changes.pods

    def drain(self) -> Changes:
        """What was recorded since the last drain; the log starts empty again."""
        drained, self.pending = self.pending, Changes()
        return drained
