"""What fits a queue and every ancestor with a card quota: the one rule the gate admits by
(:mod:`cardquota.core.gate`) and preemption chooses victims by (:mod:`cardquota.core.preemption`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cardquota.core.quota import card_alternatives
from cardquota.core.snapshot import ClusterSnapshot


@dataclass(frozen=True)
class Shortage:
    """Why ``amount`` more ``card`` do not fit ``queue``: ``where`` (the queue itself or the first ancestor of its
    chain without room) has ``free`` of its ``limit`` free."""

    queue: str
    where: str
    card: str
    free: int
    limit: int

    @property
    def parent_bound(self) -> bool:
        """Whether an ancestor's card quota binds, not the queue's own."""
        return self.where != self.queue

    def sentence(self) -> str:
        return f"{named(self.queue, self.where)} has {self.free} of {self.limit} {self.card} free"


class CardRoom:
    """Cards held per (queue, card type), over each queue's subtree, with the limits that apply to them: the one
    rule of what fits a queue and every ancestor (:meth:`short`), for the gate and for choosing preemption victims
    (:mod:`cardquota.core.preemption`)."""

    def __init__(self, snapshot: ClusterSnapshot, held: Mapping[str, Mapping[str, int]]) -> None:
        self.snapshot = snapshot
        self.chains: dict[str, list[str]] = {}
        self.subtree: dict[str, dict[str, int]] = {}
        for queue, cards in held.items():
            for name, amount in cards.items():
                self.hold(queue, name, amount)

    def hold(self, queue: str, name: str, amount: int) -> None:
        """Count ``amount`` cards held under card name ``name`` as written (negative: released): an ``A|B`` past
        the gate unnarrowed is counted against every alternative."""
        for card in card_alternatives(name):
            self.take(queue, card, amount)

    def chain(self, queue: str) -> list[str]:
        found = self.chains.get(queue)
        if found is None:
            found = self.chains[queue] = self.snapshot.ancestry(queue)
        return found

    def limit(self, queue: str, card: str, own: bool) -> int | None:
        record = self.snapshot.queues.get(queue)
        if own:
            return record.quota.values.get(card, 0) if record is not None else 0
        if record is None or not record.quota.present:
            return None
        return record.quota.values.get(card, 0)

    def take(self, queue: str, card: str, amount: int) -> None:
        for member in self.chain(queue):
            cards = self.subtree.setdefault(member, {})
            cards[card] = cards.get(card, 0) + amount

    def short(self, queue: str, card: str, amount: int) -> Shortage | None:
        """Why ``amount`` more do not fit: the first queue of the chain without room for them; None if all have."""
        for index, member in enumerate(self.chain(queue)):
            limit = self.limit(member, card, own=index == 0)
            if limit is None:
                continue
            used = self.subtree.get(member, {}).get(card, 0)
            if used + amount > limit:
                return Shortage(queue, member, card, max(0, limit - used), limit)
        return None

    def choose(self, queue: str, card_name: str, amount: int, free: Mapping[str, int]
               ) -> tuple[str | None, Shortage | None]:
        """The card type a pod naming ``card_name`` (``A|B``: alternatives in order) and waiting for ``amount``
        cards is let through for: the first alternative that fits, preferring one ``free`` (cards the nodes offer)
        has room for; else None and the first alternative's shortage. Nothing is taken."""
        fitting = []
        first: Shortage | None = None
        for card in card_alternatives(card_name):
            short = self.short(queue, card, amount)
            if short is None:
                fitting.append(card)
            elif first is None:
                first = short
        if not fitting:
            return None, first
        return next((card for card in fitting if free.get(card, 0) >= amount), fitting[0]), None


def named(queue: str, where: str) -> str:
    return f"queue {queue}" if where == queue else f"queue {queue} (parent {where})"
