"""Parsing of the card annotations: ``volcano.sh/card.quota``, ``volcano.sh/card.request``, ``volcano.sh/card.name``.

Parsers never raise: they return what they could read plus :class:`Violation` values for the rest, so the
ledger can keep accounting while the admission policies turn the same violations into denials.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from cardquota.core import keys
from cardquota.core.cards import CARD_NAME_LENGTH_REASON, MAX_CARD_NAME_LENGTH
from cardquota.core.violations import (
    ANNOTATIONS,
    FieldPath,
    Reason,
    Violation,
    duplicate,
    invalid,
    required,
    shown,
    too_long,
    too_many,
    written,
)
from cardquota.core.yamltext import json_nesting_exceeds

MAX_CARD_AMOUNT = 2**63 - 1
"""Amounts must fit in int64, as the scheduler stores them."""
MAX_CARD_JSON_NESTING = 32
"""A card annotation is one flat object; anything nested deeper than this is refused before parsing."""

# Limits on the card annotations, so admission and accounting cost stays linear and small whatever is written
# (the API server alone lets an object carry 256 KiB of annotations). Each is set well above what a real cluster
# writes, and a value beyond it is refused with a one-line message naming the limit.
MAX_CARD_ALTERNATIVES = 128
"""Alternatives in one card key (``A|B|…``) or ``volcano.sh/card.name``. Alternatives must share one Kubernetes
resource, so they are the products of one vendor's whole cards (or the cards of one MIG profile, or one MPS
resource): NVIDIA's entire data-centre and workstation lineup is well under 64 products."""
MAX_CARD_KEYS = 1024
"""Card types in one ``volcano.sh/card.quota`` (or keys in one ``volcano.sh/card.request``). A quota names card
types the nodes offer; a very large heterogeneous fleet — 40 products, each as whole cards, six MIG slice types
and an MPS type — offers about 300."""
MAX_CARD_ANNOTATION_BYTES = 128 * 1024
"""Size of one card annotation's text, checked before it is parsed: ``MAX_CARD_KEYS`` entries of the longest real
card type (a 63-character product label value plus ``/mig-<profile>-mixed``) with an int64 amount need ~110 KiB."""
MAX_NAME_SHOWN = 64
"""A card name or key from the input longer than this is clipped in messages (a key may be kilobytes long)."""
_CACHED_TEXT = 4096
"""Annotations up to this size are parsed once and cached (real ones are ~100 bytes); larger ones are parsed each
time, so hostile texts cannot fill the caches."""


EXPECTED_FORM = '(expected {"<card type>": <cards>, ...})'
"""What a card annotation must look like, said after every error reading its JSON."""


def json_error(error: json.JSONDecodeError) -> str:
    """The one-line message for a card annotation the JSON parser refused: what is wrong, where (line and column,
    as the parser counts them, from 1) and the form expected. A comma before ``}`` or ``]`` is called a trailing
    comma: Python before 3.13 reports it as a missing property name or value (``json.decoder``'s ``JSONObject``
    and ``JSONArray``), 3.13 as "Illegal trailing comma" at the comma itself."""
    text, position = error.doc, error.pos
    before = text[:position].rstrip()
    after = text[position + 1:].lstrip() if text[position:position + 1] == "," else ""
    if (before.endswith(",") and text[position:position + 1] in ("}", "]")) or after[:1] in ("}", "]"):
        what = "a trailing comma"
        if not after:  # reported after the comma: point at the comma itself
            position = len(before) - 1
    else:
        what = error.msg[:1].lower() + error.msg[1:]
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    return f"is not valid JSON: {what} at line {line}, column {column} {EXPECTED_FORM}"


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
    path = ANNOTATIONS.key(annotation)
    example = '{"NVIDIA-A100": 4}'
    size = len(text.encode("utf-8", errors="surrogatepass")) if len(text) * 4 > MAX_CARD_ANNOTATION_BYTES else 0
    if size > MAX_CARD_ANNOTATION_BYTES:
        return _denied(too_long(path, f"is {size:,} bytes long; the limit is {MAX_CARD_ANNOTATION_BYTES:,} bytes "
                                      f"({MAX_CARD_KEYS:,} card types)"))
    if json_nesting_exceeds(text, MAX_CARD_JSON_NESTING):
        return _denied(invalid(path, "is not valid JSON: nested too deeply"))
    try:
        pairs = json.loads(text, object_pairs_hook=_keep_pairs, parse_constant=_reject_constant)
    except _NonFiniteNumber as constant:  # a name of its own: one name bound to two exception types breaks mypyc
        return _denied(invalid(path, f"is not valid JSON: {constant} is not a number JSON allows"))
    except RecursionError:
        return _denied(invalid(path, "is not valid JSON: nested too deeply"))
    except ValueError as error:
        if isinstance(error, json.JSONDecodeError):
            return _denied(invalid(path, json_error(error)))
        return _denied(invalid(path, f"is not valid JSON: a number too large to read {EXPECTED_FORM}"))
    if not isinstance(pairs, _Pairs):
        return _denied(invalid(path, f"must be a JSON object of card type to number of cards, such as {example}"))
    values: dict[str, int] = {}
    violations: list[Violation] = []
    seen: set[str] = set()
    members = pairs.members
    if len(members) > MAX_CARD_KEYS:
        kind = "card types" if not alternatives else "card keys"
        violations.append(too_many(path, f"has {len(members):,} {kind}; the limit is {MAX_CARD_KEYS:,} "
                                         f"(only the first {MAX_CARD_KEYS:,} are read)"))
        del members[MAX_CARD_KEYS:]
    for name, amount in members:
        violation = _entry_violation(path, name, amount, seen, alternatives=alternatives, minimum=minimum)
        seen.add(name)
        if violation is not None:
            violations.append(violation)
            continue
        if alternatives:
            written_fault = _written_fault(name)
            if written_fault is not None:
                # Refused at admission, yet counted if stored anyway: once per type, under its canonical key.
                violations.append(Violation(str(path), f"{clipped(name)} {written_fault[1]}", written_fault[0]))
                name = canonical_key(name)
            amount = values.get(name, 0) + amount  # type: ignore[operator]  # checked by _entry_violation
        values[name] = amount  # type: ignore[assignment]  # checked by _entry_violation
    return CardAmounts(values=MappingProxyType(values), violations=tuple(violations), present=True)


def _entry_violation(path: FieldPath, name: str, amount: object, seen: set[str], *, alternatives: bool,
                     minimum: int) -> Violation | None:
    label = clipped(name)
    if name in seen:
        return duplicate(path, f"card type {label} appears more than once")
    if not name.strip():
        return required(path, "card type names must not be empty")
    parts = name.split(keys.CARD_ALTERNATIVE_SEPARATOR)
    if len(parts) > 1 and not alternatives:
        return invalid(path, f"{label} lists alternatives; a quota names one card type per key "
                             f"(alternatives belong in {keys.CARD_REQUEST})")
    if len(parts) > MAX_CARD_ALTERNATIVES:
        return too_many(path, f"{label} lists {len(parts):,} alternatives; the limit is {MAX_CARD_ALTERNATIVES} "
                              "per card key")
    if not all(map(str.strip, parts)):
        return invalid(path, f"{label} has an empty alternative")
    too_long_name = _name_length_fault(parts)
    if too_long_name is not None:
        return too_long(path, f"{label}: {too_long_name}")
    if isinstance(amount, bool) or not isinstance(amount, int):
        value = "an object" if isinstance(amount, _Pairs) else written(amount)
        return invalid(path, f"{label}: {value} is not a whole number of cards")
    if amount < minimum:
        bound = "negative" if minimum == 0 else f"below {minimum}"
        return invalid(path, f"{label}: {amount} is {bound}")
    if amount > MAX_CARD_AMOUNT:
        return invalid(path, f"{label}: {amount} is too large (the limit is {MAX_CARD_AMOUNT})")
    return None


def _denied(violation: Violation) -> CardAmounts:
    """An annotation that cannot be read at all: this one violation, no values."""
    return CardAmounts(violations=(violation,), present=True)


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


def _parsed(text: str | None, annotation: str, alternatives: bool, minimum: int) -> CardAmounts:
    """The ledger re-reads a PodGroup's request whenever its pods change: parse each text once (results are
    immutable); a text too large to be a real annotation is parsed each time instead of cached."""
    if text is not None and len(text) > _CACHED_TEXT:
        return parse_card_amounts(text, annotation, alternatives=alternatives, minimum=minimum)
    return _parsed_cached(text, annotation, alternatives, minimum)


@functools.lru_cache(maxsize=8192)
def _parsed_cached(text: str | None, annotation: str, alternatives: bool, minimum: int) -> CardAmounts:
    return parse_card_amounts(text, annotation, alternatives=alternatives, minimum=minimum)


def card_name_violation(card_name: str, path: FieldPath | str, context: str = "") -> Violation | None:
    """What is wrong with a ``volcano.sh/card.name`` value at ``path`` (its message after ``context``, such as
    ``task "worker": ``), or None: one type or ``A|B|…`` alternatives (at most :data:`MAX_CARD_ALTERNATIVES`)."""
    found = _card_name_fault(card_name)
    return None if found is None else Violation(str(path), context + found[1], found[0])


def card_name_problem(card_name: str) -> str | None:
    """The message of :func:`card_name_violation`, for what is not a violation: a scheduling refusal, an event."""
    found = _card_name_fault(card_name)
    return None if found is None else found[1]


def _card_name_fault(card_name: str) -> tuple[Reason, str] | None:
    if not card_name.strip():
        return (Reason.REQUIRED,
                "must name a card type, such as NVIDIA-A100, or alternatives such as NVIDIA-A100|NVIDIA-H100")
    parts = card_name.split(keys.CARD_ALTERNATIVE_SEPARATOR)
    if len(parts) > MAX_CARD_ALTERNATIVES:
        return (Reason.TOO_MANY,
                f"{_label(card_name)} lists {len(parts):,} alternatives; the limit is {MAX_CARD_ALTERNATIVES}")
    stripped = list(map(str.strip, parts))  # (each check a pass at C speed: a Job repeats names in every task)
    if not all(stripped):
        return Reason.INVALID, f"{_label(card_name)} has an empty alternative"
    too_long_name = _name_length_fault(parts)
    if too_long_name is not None:
        return Reason.TOO_LONG, f"{clipped(card_name)}: {too_long_name}"
    found = _written_fault(card_name, stripped, parts)
    return None if found is None else (found[0], f"{_label(card_name)} {found[1]}")


def _name_length_fault(parts: list[str]) -> str | None:
    """What is wrong with the length of a card type name or of each alternative in ``parts``, or None: each at most
    :data:`~cardquota.core.cards.MAX_CARD_NAME_LENGTH` characters, the longest name discovery can produce."""
    longest = max(parts, key=len)
    if len(longest) <= MAX_CARD_NAME_LENGTH:
        return None
    which = f"alternative {parts.index(longest) + 1} is" if len(parts) > 1 else "card type name is"
    return (f"{which} {len(longest):,} characters; at most {MAX_CARD_NAME_LENGTH} "
            f"({CARD_NAME_LENGTH_REASON})")


def _written_fault(card_name: str, stripped: list[str] | None = None,
                   parts: list[str] | None = None) -> tuple[Reason, str] | None:
    """What is wrong with how a card name or request key writes its alternatives (spaces or control characters
    around a type, a type named twice), as (reason, message after the name), or None. The rules still read such a
    key through :func:`card_alternatives` (trimmed, each type once); admission refuses it."""
    if parts is None:
        parts = card_name.split(keys.CARD_ALTERNATIVE_SEPARATOR)
    if stripped is None:
        stripped = list(map(str.strip, parts))
    if stripped != parts or not card_name.isprintable():
        return Reason.INVALID, "has spaces or control characters around a card type"
    if len(set(stripped)) != len(stripped):
        return Reason.DUPLICATE, "lists a card type twice"
    if ALTERNATIVES_MISWRITTEN in card_name:
        return Reason.INVALID, f"has a comma: {comma_hint(card_name)}"
    return None


ALTERNATIVES_MISWRITTEN = ","
"""What people write between alternatives instead of ``|``. No card type name has one: names come from node label
values and resource names (capacity-card-design.md, "Card Type Name"), whose syntax has no comma."""


def comma_hint(card_name: str) -> str:
    """Why a name with a comma names no card type, and what was meant: ``alternatives are separated by |, not a
    comma (did you mean NVIDIA-A100|NVIDIA-H100?)``."""
    meant = keys.CARD_ALTERNATIVE_SEPARATOR.join(
        part.strip() for part in card_name.replace(ALTERNATIVES_MISWRITTEN, keys.CARD_ALTERNATIVE_SEPARATOR)
        .split(keys.CARD_ALTERNATIVE_SEPARATOR) if part.strip())
    return f"alternatives are separated by {keys.CARD_ALTERNATIVE_SEPARATOR}, not a comma (did you mean " \
           f"{clipped(meant)}?)"


def _label(card_name: str) -> str:
    """The card name as a message quotes it (built only for a message: a name that is right needs none)."""
    return json.dumps(_clip(card_name))


def card_alternatives(card_name: str) -> tuple[str, ...]:
    """``"NVIDIA-A100|NVIDIA-H100"`` → ``("NVIDIA-A100", "NVIDIA-H100")``, most preferred first: the one reading of
    alternatives every rule uses — each trimmed, empty ones dropped, a type named twice kept once (``"A|A"`` and
    ``"A| A"`` are ``("A",)``). Cached, but for names too long to be real."""
    if len(card_name) > _CACHED_TEXT:
        return _alternatives(card_name)
    return _cached_alternatives(card_name)


def _alternatives(card_name: str) -> tuple[str, ...]:
    # dict.fromkeys: distinct, in the order written (a type named twice is one alternative, never two ceilings)
    return tuple(dict.fromkeys(part for part in map(str.strip, card_name.split(keys.CARD_ALTERNATIVE_SEPARATOR))
                               if part))


def canonical_key(card_name: str) -> str:
    """A card name or request key as the rules compare it: its :func:`card_alternatives` joined by ``|``
    (``"A| A|B"`` → ``"A|B"``). Two keys name the same set of types when their ``alternative_set`` are equal."""
    alternatives = card_alternatives(card_name)
    return alternatives[0] if len(alternatives) == 1 else keys.CARD_ALTERNATIVE_SEPARATOR.join(alternatives)


def alternative_set(card_name: str) -> frozenset[str]:
    """The card types a card name or request key may land on, as a set (``A|B`` and ``B|A`` are one set; cached,
    but for names too long to be real)."""
    if len(card_name) > _CACHED_TEXT:
        return frozenset(_alternatives(card_name))
    return _cached_set(card_name)


@functools.lru_cache(maxsize=4096)
def _cached_set(card_name: str) -> frozenset[str]:
    return frozenset(card_alternatives(card_name))


_cached_alternatives = functools.lru_cache(maxsize=4096)(_alternatives)


def clipped(name: str) -> str:
    """A card name or key from the input as it goes into a message (see :func:`shown`), clipped to
    :data:`MAX_NAME_SHOWN` characters: a key of many alternatives says how many it has."""
    if len(name) <= MAX_NAME_SHOWN:
        return shown(name)
    count = name.count(keys.CARD_ALTERNATIVE_SEPARATOR) + 1
    more = f" ({count:,} alternatives)" if count > 1 else ""
    return shown(_clip(name)) + more


def _clip(name: str) -> str:
    return name if len(name) <= MAX_NAME_SHOWN else name[: MAX_NAME_SHOWN - 1] + "…"


class _Pairs:
    """A JSON object's members in order, duplicates kept (json.loads would silently keep only the last).

    A plain class holding the list rather than a ``list`` subclass, so that the optional compiled build (mypyc,
    which cannot subclass most builtins) takes this module too."""

    __slots__ = ("members",)

    def __init__(self, members: list[tuple[str, object]]) -> None:
        self.members = members


def _keep_pairs(pairs: list[tuple[str, object]]) -> _Pairs:
    return _Pairs(pairs)


def quota_allows(key: str, quota: Mapping[str, int]) -> int:
    """The most of a card key a queue's quota can ever admit: the key's quota, or for an ``A|B`` key its
    alternatives' quotas together (the scheduler's enqueue rule); a type the quota does not name counts 0."""
    return sum(map(quota.get, card_alternatives(key), itertools.repeat(0)))


def reserved_on(types: frozenset[str], amounts: Mapping[str, int]) -> int:
    """Cards of ``amounts`` (card type or ``A|B`` key → cards) that may land on one of ``types``: every key sharing
    a type with them counts in full (an ``A|B`` reservation counts against ``A``, ``B``, ``A|B``, ``B|A`` and
    ``A|C``), so that reservations admitted one by one can never promise any type more than its quota."""
    return sum(amount for key, amount in amounts.items() if not types.isdisjoint(alternative_set(key)))
