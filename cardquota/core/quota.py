"""Parsing of the card annotations: ``volcano.sh/card.quota``, ``volcano.sh/card.request``, ``volcano.sh/card.name``.

Parsers never raise: they return what they could read plus :class:`Violation` values for the rest, so the
ledger can keep accounting while the admission policies turn the same violations into denials.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from cardquota.core import keys
from cardquota.core.violations import Violation, annotation_path, shown, written
from cardquota.core.yamltext import json_nesting_exceeds

MAX_CARD_AMOUNT = 2**63 - 1
MAX_CARD_JSON_NESTING = 32
"""A card annotation is one flat object; anything nested deeper than this is refused before parsing."""
"""Amounts must fit in int64, as the scheduler stores them."""


@dataclass(frozen=True)
class CardAmounts:
    """A parsed card-amount annotation: card type (or ``A|B``) → whole cards, in the order written.

    ``values`` keeps every entry that is valid on its own, so accounting can go on; ``violations`` says what
    was wrong with the rest (admission denies on any).
    """

    values: Mapping[str, int] = field(default_factory=dict)
    violations: tuple[Violation, ...] = ()
    present: bool = False

    @property
    def ok(self) -> bool:
        return not self.violations


def parse_card_amounts(
    text: str | None, annotation: str, *, alternatives: bool = True, minimum: int = 0
) -> CardAmounts:
    """Parse a JSON object of card type → integer ≥ ``minimum`` (card.quota: 0, no ``A|B`` keys; card.request: 1).

    Never raises: invalid JSON, non-objects, duplicate keys, NaN/Infinity, floats, strings, booleans, null,
    numbers beyond int64, absurd nesting, out-of-range values, empty names and misplaced ``A|B`` keys all become
    :class:`Violation` values naming the annotation and the card type.
    """
    if text is None:
        return CardAmounts()
    path = annotation_path(annotation)
    example = '{"NVIDIA-A100": 4}'
    if json_nesting_exceeds(text, MAX_CARD_JSON_NESTING):
        return _invalid(path, "is not valid JSON: nested too deeply")
    try:
        pairs = json.loads(text, object_pairs_hook=_keep_pairs, parse_constant=_reject_constant)
    except _NonFiniteNumber as error:
        return _invalid(path, f"is not valid JSON: {error} is not a number JSON allows")
    except RecursionError:
        return _invalid(path, "is not valid JSON: nested too deeply")
    except ValueError as error:
        reason = error.msg if isinstance(error, json.JSONDecodeError) else "a number too large to read"
        return _invalid(path, f"is not valid JSON: {reason}")
    if not isinstance(pairs, _Pairs):
        return _invalid(path, f"must be a JSON object of card type to number of cards, such as {example}")
    values: dict[str, int] = {}
    violations: list[Violation] = []
    seen: set[str] = set()
    for name, amount in pairs:
        problem = _entry_problem(name, amount, seen, alternatives=alternatives, minimum=minimum)
        seen.add(name)
        if problem is not None:
            violations.append(Violation(path, problem))
        else:
            values[name] = amount  # type: ignore[assignment]  # checked by _entry_problem
    return CardAmounts(values=MappingProxyType(values), violations=tuple(violations), present=True)


def _entry_problem(name: str, amount: object, seen: set[str], *, alternatives: bool, minimum: int) -> str | None:
    label = shown(name)
    if name in seen:
        return f"card type {label} appears more than once"
    if not name.strip():
        return "card type names must not be empty"
    parts = name.split(keys.CARD_ALTERNATIVE_SEPARATOR)
    if len(parts) > 1 and not alternatives:
        return (f"{label} lists alternatives; a quota names one card type per key "
                f"(alternatives belong in {keys.CARD_REQUEST})")
    if any(not part.strip() for part in parts):
        return f"{label} has an empty alternative"
    if isinstance(amount, bool) or not isinstance(amount, int):
        value = "an object" if isinstance(amount, _Pairs) else written(amount)
        return f"{label}: {value} is not a whole number of cards"
    if amount < minimum:
        bound = "negative" if minimum == 0 else f"below {minimum}"
        return f"{label}: {amount} is {bound}"
    if amount > MAX_CARD_AMOUNT:
        return f"{label}: {amount} is too large (the limit is {MAX_CARD_AMOUNT})"
    return None


def _invalid(path: str, message: str) -> CardAmounts:
    return CardAmounts(violations=(Violation(path, message),), present=True)


class _NonFiniteNumber(ValueError):
    pass


def _reject_constant(constant: str) -> object:
    raise _NonFiniteNumber(constant)


def card_quota(annotations: Mapping[str, str]) -> CardAmounts:
    """A Queue's ``volcano.sh/card.quota``: one card type per key, quotas ≥ 0."""
    return _parsed(annotations.get(keys.CARD_QUOTA), keys.CARD_QUOTA, False, 0)


def card_request(annotations: Mapping[str, str]) -> CardAmounts:
    """A PodGroup's or Volcano Job's ``volcano.sh/card.request``: keys may list ``A|B`` alternatives, amounts ≥ 1."""
    return _parsed(annotations.get(keys.CARD_REQUEST), keys.CARD_REQUEST, True, 1)


@functools.lru_cache(maxsize=8192)
def _parsed(text: str | None, annotation: str, alternatives: bool, minimum: int) -> CardAmounts:
    """The ledger re-reads a PodGroup's request whenever its pods change: parse each text once (results are
    immutable)."""
    return parse_card_amounts(text, annotation, alternatives=alternatives, minimum=minimum)


def card_name_problem(card_name: str) -> str | None:
    """What is wrong with a ``volcano.sh/card.name`` value, or None: one type or ``A|B|…`` alternatives."""
    if not card_name.strip():
        return "must name a card type, such as NVIDIA-A100, or alternatives such as NVIDIA-A100|NVIDIA-H100"
    label = json.dumps(card_name)
    parts = card_name.split(keys.CARD_ALTERNATIVE_SEPARATOR)
    if any(not part.strip() for part in parts):
        return f"{label} has an empty alternative"
    if any(part != part.strip() or not part.isprintable() for part in parts):
        return f"{label} has spaces or control characters around a card type"
    if len(set(parts)) != len(parts):
        return f"{label} lists a card type twice"
    return None


@functools.lru_cache(maxsize=4096)
def card_alternatives(card_name: str) -> tuple[str, ...]:
    """``"NVIDIA-A100|NVIDIA-H100"`` → ``("NVIDIA-A100", "NVIDIA-H100")``, most preferred first."""
    return tuple(part.strip() for part in card_name.split(keys.CARD_ALTERNATIVE_SEPARATOR) if part.strip())


class _Pairs(list[tuple[str, object]]):
    """A JSON object's members in order, duplicates kept (json.loads would silently keep only the last)."""


def _keep_pairs(pairs: list[tuple[str, object]]) -> _Pairs:
    return _Pairs(pairs)
