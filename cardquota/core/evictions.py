"""The evictions a planned preemption makes, as ``simulate`` and ``explain`` show them (pure).

The card-quota gate decides a preemption (:class:`~cardquota.core.preemption.Preemption`, one per preemptor in a
round of :func:`~cardquota.core.gate.gate_round`); each of its victims is one :class:`Eviction` here: the unit (a
whole PodGroup, or a pod without one), its priority, the cards its release frees and the pods the Eviction API
deletes, with the preemptor it is evicted for. The sentences are the gate's own
(:meth:`~cardquota.core.preemption.Preemption.victim_message`), so ``explain``, ``simulate`` and the victims'
events say the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cardquota.core.objects import ObjectKey
from cardquota.core.preemption import Preemption, cards_text


@dataclass(frozen=True)
class Eviction:
    """One victim of a planned preemption."""

    kind: str
    """``PodGroup`` or ``Pod``."""
    victim: ObjectKey
    priority: int
    queue: str
    cards: Mapping[str, int]
    """Cards its release frees, per card name as held."""
    pods: tuple[ObjectKey, ...]
    """Its pods holding cards: what the Eviction API deletes."""
    preemptor: str
    """``namespace/name`` of the PodGroup or pod it is evicted for."""
    preemptor_priority: int
    message: str
    """The Warning event the victim gets (``Preempted by ml/llama (priority 1000) to free …``)."""

    @property
    def identity(self) -> tuple[str, str, str]:
        """(kind, namespace, name), as the ledger names a unit holding cards."""
        return (self.kind, self.victim[0], self.victim[1])

    @property
    def name(self) -> str:
        """``podgroup ml/sweep`` or ``pod ml/notebook``."""
        return f"{self.kind.lower()} {_name(self.victim)}"

    def cards_text(self) -> str:
        return cards_text(self.cards)

    @property
    def clause(self) -> str:
        """Its event's message as the rest of a sentence (``preempted by ml/llama (priority 1000) to free …``)."""
        return f"{self.message[0].lower()}{self.message[1:]}"

    def summary(self) -> str:
        """``podgroup ml/sweep (priority 10, 4 NVIDIA-H100; pods ml/sweep-0, ml/sweep-1)``."""
        pods = ", ".join(_name(pod) for pod in self.pods)
        return (f"{self.name} (priority {self.priority}, {self.cards_text()}"
                + (f"; pod{'s' if len(self.pods) != 1 else ''} {pods})" if pods else ")"))

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": _name(self.victim), "priority": self.priority, "queue": self.queue,
                "cards": dict(sorted(self.cards.items())), "pods": [_name(pod) for pod in self.pods],
                "preemptor": self.preemptor, "preemptorPriority": self.preemptor_priority}


def evictions(preemptions: Iterable[Preemption]) -> list[Eviction]:
    """The victims of ``preemptions``, each an :class:`Eviction`, in the gate's order (preemptors in order, each
    one's victims in eviction order)."""
    found = []
    for preemption in preemptions:
        message = preemption.victim_message()
        for victim in preemption.victims:
            found.append(Eviction(victim.kind, victim.key, victim.priority, victim.queue, dict(victim.cards),
                                  tuple(sorted(victim.pods)), preemption.preemptor.name,
                                  preemption.preemptor.priority, message))
    return found




def _name(key: ObjectKey) -> str:
    return f"{key[0]}/{key[1]}"
