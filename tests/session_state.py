"""What the scheduling rules read of a :class:`Session`, to compare two sessions."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from cardquota.core.scheduling.session import Session


def state(session: Session) -> dict[str, Any]:
    """What the rules read of a session, without zero entries."""
    def nonzero(values: dict[str, Fraction]) -> dict[str, Fraction]:
        return {key: value for key, value in values.items() if value}

    return {
        "node_used": {name: nonzero(used) for name, used in session.node_used.items()
                      if nonzero(used) and name in session.nodes},
        "node_pods": {name: members for name, members in session.node_pods.items() if members},
        "queue_used": {name: nonzero(used) for name, used in session.queue_used.items() if nonzero(used)},
        "queue_dra": {name: {cls: amount for cls, amount in held.items() if amount != type(amount)()}
                      for name, held in session.queue_dra.items()
                      if any(amount != type(amount)() for amount in held.values())},
        "usage": {name: session.ledger.usage(name) for name in session.ledger.queue_names()},
        "pods": set(session.pods),
        "nodes": set(session.nodes),
    }
