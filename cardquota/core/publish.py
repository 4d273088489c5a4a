"""What the controllers write: node card types and queue card usage as annotations (pure).

Annotations, not ``status``: the Volcano scheduler rewrites a Queue's ``status.allocated`` wholesale. Values are
canonical JSON (sorted keys, no whitespace) so that an unchanged value compares equal and is never re-written.

What a Queue carries always fits beside the annotations others wrote on it. The API server refuses an object whose
annotations (keys and values, in bytes) add up to more than 256 KiB (:data:`ANNOTATIONS_LIMIT`), and the ledger keys
``card.pending`` by each pod's ``card.name`` as written, so pods admitted before the webhooks (or past them) can name
any number of long types. :func:`bounded_queue_annotations` publishes the exact figures when they fit in the room
left (:func:`queue_budget`); otherwise, deterministically:

1. every entry whose name is not a known card type (one a node offers or the queue's quota names; an ``A|B`` key is
   known when all its alternatives are) is grouped into one entry ``"(N more)": <their cards added up>`` in each of
   ``card.allocated``, ``.inqueue`` and ``.pending``;
2. if that is not enough, the largest remaining entries (longest first, then by annotation and name) join that group
   one by one, and then the largest parts of ``card.usage`` are replaced by ``(N more)`` at its end;
3. if even the four annotations at their smallest (about 200 bytes) do not fit, they are removed.

The values stay what readers expect: JSON objects of name → whole cards (the group is one more name, which never
matches a card type: label values have no parentheses or spaces), and a ``card.usage`` line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass

from cardquota.core.cards import NodeCards
from cardquota.core.keys import CARD_ALLOCATED, CARD_INQUEUE, CARD_PENDING, CARD_USAGE
from cardquota.core.ledger import QueueUsage
from cardquota.core.quota import card_alternatives

CARD_TYPES = "volcano.sh/card.types"
QUEUE_ANNOTATIONS = (CARD_ALLOCATED, CARD_INQUEUE, CARD_PENDING, CARD_USAGE)


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def node_annotations(cards: NodeCards) -> dict[str, str | None]:
    """``volcano.sh/card.types`` for a node, or its removal (None) when the node offers no card."""
    return {CARD_TYPES: canonical_json(cards.as_json()) if cards.types else None}


def usage_summary(usage: QueueUsage) -> str:
    """``NVIDIA-A100 3/10, NVIDIA-H100 0/5``: allocated/quota per quota'd type, then types used without quota."""
    return ", ".join(_usage_parts(usage)) or "-"


def _usage_parts(usage: QueueUsage) -> list[str]:
    parts = [f"{card} {usage.allocated.get(card, 0)}/{quota}" for card, quota in sorted(usage.quota.items())]
    parts += [f"{card} {amount}/0" for card, amount in sorted(usage.allocated.items())
              if card not in usage.quota and amount]
    return parts


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


ANNOTATIONS_LIMIT = 256 * 1024
"""The most an object's annotations may add up to, keys and values in bytes: the API server refuses more with
``metadata.annotations: Too long`` (k8s.io/apimachinery ``pkg/api/validation/objectmeta.go``,
``TotalAnnotationSizeLimitB``, summed by ``ValidateAnnotationsSize``)."""
GROUPED = re.compile(r"\((\d+) more\)")
"""How a group of entries left out is written: the key ``(N more)`` in the JSON annotations, the last part of
``card.usage``."""
_JSON_ANNOTATIONS = (CARD_ALLOCATED, CARD_INQUEUE, CARD_PENDING)


def _bytes(text: str) -> int:
    """UTF-8 bytes of ``text``, as Go's ``len`` counts a string (ASCII, the usual case, without encoding)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", errors="surrogatepass"))


def annotations_size(annotations: Mapping[str, str | None]) -> int:
    """What ``annotations`` count against :data:`ANNOTATIONS_LIMIT`: the bytes of every key and value (a None
    value, an annotation being removed, counts nothing)."""
    return sum(_bytes(key) + _bytes(value) for key, value in annotations.items() if value is not None)


def queue_budget(current: Mapping[str, str]) -> int:
    """The bytes the controller's Queue annotations (keys and values) may take beside the Queue's others."""
    return ANNOTATIONS_LIMIT - annotations_size({key: value for key, value in current.items()
                                                 if key not in QUEUE_ANNOTATIONS})


def annotations_too_long(message: str) -> bool:
    """Whether an API server's refusal (a 422 Invalid) is for annotations over :data:`ANNOTATIONS_LIMIT`: its
    message carries the cause ``metadata.annotations: Too long: …`` (apimachinery ``errors.NewInvalid`` joins each
    cause's ``field.Error``, whose type ``FieldValueTooLong`` reads "Too long")."""
    return "metadata.annotations: Too long" in message


def grouped_count(name: str) -> int | None:
    """N when ``name`` is a group of N entries left out (``(N more)``), else None."""
    match = GROUPED.fullmatch(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class QueuePublication:
    """What to publish on a Queue, and how far it is from the exact figures."""

    annotations: dict[str, str | None]
    grouped: int = 0
    """Entries left out and counted in a ``(N more)`` group (0: the figures are exact)."""
    removed: bool = False
    """Not even the smallest form fit: the annotations are removed (each None)."""

    @property
    def exact(self) -> bool:
        return not self.grouped and not self.removed


@dataclass
class _Shrinking:
    """One annotation while entries are grouped: the bytes of the entries kept, and the group so far. Sizes are
    kept as sums, so that each entry grouped costs O(1)."""

    name: str
    kept: int
    kept_bytes: int
    separator: int
    grouped: int = 0
    grouped_cards: int = 0

    def size(self) -> int:
        items = self.kept + (1 if self.grouped else 0)
        if self.name == CARD_USAGE:
            if not items:
                return 1  # "-"
            return self.kept_bytes + self.separator * (items - 1) + (len(f"({self.grouped} more)")
                                                                     if self.grouped else 0)
        group = len(f'"({self.grouped} more)":{self.grouped_cards}') if self.grouped else 0
        return 2 + self.kept_bytes + group + self.separator * max(0, items - 1)


def _known(name: str, known: Container[str]) -> bool:
    return all(card in known for card in card_alternatives(name))


def bounded_queue_annotations(usage: QueueUsage, budget: int, known: Container[str] = ()) -> QueuePublication:
    """:func:`queue_annotations` made to fit in ``budget`` bytes (keys and values, :func:`queue_budget`): exactly
    those when they fit, else entries grouped as the module docstring says. The result's size is never above
    ``budget``; ``known``: the card types nodes offer (the queue's quota keys count as known too)."""
    exact = queue_annotations(usage)
    if annotations_size(exact) <= budget:
        return QueuePublication(exact)
    amounts = {CARD_ALLOCATED: usage.allocated, CARD_INQUEUE: usage.inqueue, CARD_PENDING: usage.pending}
    entries = {name: {key: _bytes(canonical_json(key)) + 1 + len(str(amount)) for key, amount in values.items()}
               for name, values in amounts.items()}
    parts = _usage_parts(usage)
    state = {name: _Shrinking(name, len(sizes), sum(sizes.values()), 1) for name, sizes in entries.items()}
    state[CARD_USAGE] = _Shrinking(CARD_USAGE, len(parts), sum(_bytes(part) for part in parts), 2)
    fixed = sum(map(_bytes, QUEUE_ANNOTATIONS))
    left: dict[str, set[str]] = {name: set() for name in _JSON_ANNOTATIONS}

    def total() -> int:
        return fixed + sum(shrinking.size() for shrinking in state.values())

    def group(name: str, key: str) -> None:
        shrinking = state[name]
        shrinking.kept -= 1
        shrinking.kept_bytes -= entries[name][key]
        shrinking.grouped += 1
        shrinking.grouped_cards += amounts[name][key]
        left[name].add(key)

    known_here = _KnownTypes(known, usage.quota)
    for name in _JSON_ANNOTATIONS:  # 1. unknown names, grouped
        for key in sorted(amounts[name]):
            if not _known(key, known_here):
                group(name, key)
    if total() > budget:  # 2. the largest entries, one by one
        order = sorted(((size, name, key) for name in _JSON_ANNOTATIONS for key, size in entries[name].items()
                        if key not in left[name]), key=lambda item: (-item[0], item[1], item[2]))
        for _, name, key in order:
            if total() <= budget:
                break
            group(name, key)
    dropped: set[int] = set()
    if total() > budget:  # ... then card.usage's largest parts
        shrinking = state[CARD_USAGE]
        for index in sorted(range(len(parts)), key=lambda i: (-_bytes(parts[i]), i)):
            if total() <= budget:
                break
            shrinking.kept -= 1
            shrinking.kept_bytes -= _bytes(parts[index])
            shrinking.grouped += 1
            dropped.add(index)
    grouped = sum(shrinking.grouped for shrinking in state.values())
    if total() > budget:  # 3. no room at all
        return QueuePublication(dict.fromkeys(QUEUE_ANNOTATIONS), grouped=grouped, removed=True)
    published: dict[str, str | None] = {}
    for name in _JSON_ANNOTATIONS:
        kept = {key: amount for key, amount in amounts[name].items() if key not in left[name]}
        if left[name]:
            kept[f"({len(left[name])} more)"] = state[name].grouped_cards
        published[name] = canonical_json(kept)
    shown = [part for index, part in enumerate(parts) if index not in dropped]
    if dropped:
        shown.append(f"({len(dropped)} more)")
    published[CARD_USAGE] = ", ".join(shown) or "-"
    return QueuePublication(published, grouped=grouped)


class _KnownTypes:
    """Card types nodes offer, or the queue's quota names."""

    __slots__ = ("offered", "quota")

    def __init__(self, offered: Container[str], quota: Container[str]) -> None:
        self.offered = offered
        self.quota = quota

    def __contains__(self, card: object) -> bool:
        return card in self.offered or card in self.quota


OTHER_LABEL = "(other)"
"""The metric label value that stands for every card name that is not a known card type, and (as queue and card
both) for every series beyond :data:`MAX_SERIES_PER_METRIC`."""
MAX_SERIES_PER_METRIC = 10_000
"""Distinct (queue, card) series one card metric exports at most: 500 queues each using 20 card types. Beyond, the
values are added up into one ``(other)``/``(other)`` series, so a scrape stays bounded whatever pods name."""


def metric_series(rows: Iterable[tuple[str, str, float]], known: Callable[[str, str], bool],
                  cap: int = MAX_SERIES_PER_METRIC) -> dict[tuple[str, str], float]:
    """(queue, card label) → value from ``rows`` of (queue, card name, value), in their order: a name that is not a
    known card type of its queue (``known(queue, name)``: :func:`known_card`) is counted under
    :data:`OTHER_LABEL`, and once ``cap`` series exist every new one is added to (``(other)``, ``(other)``)."""
    labelled = [((queue, card if known(queue, card) else OTHER_LABEL), value) for queue, card, value in rows]
    distinct = len(dict.fromkeys(key for key, _ in labelled))
    series: dict[tuple[str, str], float] = {}
    overflow = (OTHER_LABEL, OTHER_LABEL)
    for key, value in labelled:
        if distinct > cap and key not in series and len(series) >= cap - (overflow not in series):
            key = overflow
        series[key] = series.get(key, 0) + value
    return series


def known_card(name: str, offered: Container[str], quota: Container[str]) -> bool:
    """Whether every alternative of a card name is a card type some node offers or ``quota`` names."""
    return _known(name, _KnownTypes(offered, quota))
