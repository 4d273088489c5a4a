"""What the controllers write: node card types and queue card usage as annotations (pure).

Annotations, not ``status``: the Volcano scheduler rewrites a Queue's ``status.allocated`` wholesale. Values are
canonical JSON (sorted keys, no whitespace) so that an unchanged value compares equal and is never re-written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cardquota.core.cards import NodeCards
from cardquota.core.keys import CARD_ALLOCATED, CARD_INQUEUE, CARD_PENDING, CARD_USAGE
from cardquota.core.ledger import QueueUsage

CARD_TYPES = "volcano.sh/card.types"
QUEUE_ANNOTATIONS = (CARD_ALLOCATED, CARD_INQUEUE, CARD_PENDING, CARD_USAGE)


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def node_annotations(cards: NodeCards) -> dict[str, str | None]:
    """``volcano.sh/card.types`` for a node, or its removal (None) when the node offers no card."""
    return {CARD_TYPES: canonical_json(cards.as_json()) if cards.types else None}


def usage_summary(usage: QueueUsage) -> str:
    """``NVIDIA-A100 3/10, NVIDIA-H100 0/5``: allocated/quota per quota'd type, then types used without quota."""
    parts = [f"{card} {usage.allocated.get(card, 0)}/{quota}" for card, quota in sorted(usage.quota.items())]
    parts += [f"{card} {amount}/0" for card, amount in sorted(usage.allocated.items())
              if card not in usage.quota and amount]
    return ", ".join(parts) or "-"


def queue_annotations(usage: QueueUsage) -> dict[str, str | None]:
    return {
        CARD_ALLOCATED: canonical_json(dict(usage.allocated)),
        CARD_INQUEUE: canonical_json(dict(usage.inqueue)),
        CARD_PENDING: canonical_json(dict(usage.pending)),
        CARD_USAGE: usage_summary(usage),
    }


def annotation_changes(current: Mapping[str, str], desired: Mapping[str, str | None]) -> dict[str, str | None]:
    """The annotations to set (or remove, None) so that ``current`` matches ``desired``; empty when it does."""
    return {name: value for name, value in desired.items()
            if (value is None and name in current) or (value is not None and current.get(name) != value)}


def merge_patch(changes: Mapping[str, str | None]) -> dict[str, object]:
    """A JSON merge patch (RFC 7386) of annotations only: null removes one."""
    return {"metadata": {"annotations": dict(changes)}}
