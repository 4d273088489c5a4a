"""Parsing of the card annotations: ``volcano.sh/card.quota``, ``volcano.sh/card.request``, ``volcano.sh/card.name``.

Parsers never raise: they return what they could read plus :class:`Violation` values for the rest, so the
ledger can keep accounting while the admission policies turn the same violations into denials.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from cardquota.core import keys
from cardquota.core.violations import Violation, annotation_path

MAX_CARD_AMOUNT = 10**9
"""Far above any fleet; keeps a typo such as 1e30 from being treated as a real quota."""


@dataclass(frozen=True)
class CardAmounts:
    """A parsed card-amount annotation: card type (or ``A|B``) → whole cards, in the order written."""

    values: Mapping[str, int] = field(default_factory=dict)
    violations: tuple[Violation, ...] = ()
    present: bool = False

    @property
    def ok(self) -> bool:
        return not self.violations


def parse_card_amounts(text: str | None, annotation: str) -> CardAmounts:
    """Parse a JSON object of card type → non-negative integer, as used by card.quota and card.request."""
    if text is None:
        return CardAmounts()
    path = annotation_path(annotation)
    try:
        pairs = json.loads(text, object_pairs_hook=_keep_pairs)
    except (ValueError, RecursionError) as error:
        reason = error.msg if isinstance(error, json.JSONDecodeError) else "too deeply nested or too large"
        return CardAmounts(violations=(Violation(path, f"is not valid JSON: {reason}"),), present=True)
    if not isinstance(pairs, _Pairs):
        return CardAmounts(
            violations=(Violation(path, 'must be a JSON object such as {"NVIDIA-A100": 4}'),), present=True
        )
    values: dict[str, int] = {}
    violations: list[Violation] = []
    for name, amount in pairs:
        if name in values:
            violations.append(Violation(path, f"card type {name!r} appears more than once"))
            continue
        if not name.strip():
            violations.append(Violation(path, "card type names must not be empty"))
            continue
        if isinstance(amount, bool) or not isinstance(amount, int):
            violations.append(Violation(path, f"{name}: {_json(amount)} is not a whole number of cards"))
            continue
        if amount < 0:
            violations.append(Violation(path, f"{name}: {amount} is negative"))
            continue
        if amount > MAX_CARD_AMOUNT:
            violations.append(Violation(path, f"{name}: {amount} exceeds {MAX_CARD_AMOUNT}"))
            continue
        values[name] = amount
    return CardAmounts(values=values, violations=tuple(violations), present=True)


def card_quota(annotations: Mapping[str, str]) -> CardAmounts:
    """A Queue's ``volcano.sh/card.quota``."""
    return parse_card_amounts(annotations.get(keys.CARD_QUOTA), keys.CARD_QUOTA)


def card_request(annotations: Mapping[str, str]) -> CardAmounts:
    """A PodGroup's or Volcano Job's ``volcano.sh/card.request``."""
    return parse_card_amounts(annotations.get(keys.CARD_REQUEST), keys.CARD_REQUEST)


def card_alternatives(card_name: str) -> tuple[str, ...]:
    """``"NVIDIA-A100|NVIDIA-H100"`` → ``("NVIDIA-A100", "NVIDIA-H100")``, most preferred first."""
    return tuple(part.strip() for part in card_name.split(keys.CARD_ALTERNATIVE_SEPARATOR) if part.strip())


class _Pairs(list[tuple[str, object]]):
    """A JSON object's members in order, duplicates kept (json.loads would silently keep only the last)."""


def _keep_pairs(pairs: list[tuple[str, object]]) -> _Pairs:
    return _Pairs(pairs)


def _json(value: object) -> str:
    if isinstance(value, _Pairs):
        return "an object"
    text = json.dumps(value)
    return text if len(text) <= 30 else text[:27] + "..."
