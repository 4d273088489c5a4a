"""Violations: how the core reports bad input as values instead of exceptions.

The project's words for "why not":

* a **violation** is what is wrong with an object offered for admission (or read by the ledger): at a field path
  (:class:`FieldPath`, rendered ``spec.tasks[0].template.metadata.annotations["volcano.sh/card.name"]``), with a
  :class:`Reason` (the kind of wrong, for programs: ``FieldValueRequired``, ``FieldValueInvalid``, …) and a message
  a person can act on. Policies return violations; :func:`cardquota.core.verdict.deny` turns them into a denial.
* a **refusal** (:mod:`cardquota.core.scheduling.refusal`) is why the scheduler cannot place something *now*: the
  object is valid, the cluster is not ready for it.

The reasons are spelled as the Kubernetes API server spells its own field errors (``metav1.CauseType``), so a
client reading a denial's ``details.causes`` treats ours like the API server's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from cardquota.core.jsontypes import MAPPING_TYPES, SEQUENCE_TYPES


class Reason(StrEnum):
    """The kind of a violation. Which one a rule uses:"""

    INVALID = "FieldValueInvalid"
    """The value is malformed or out of range, alone or against another value (a quota, a parent's quota)."""
    REQUIRED = "FieldValueRequired"
    """A value that must be given is missing or empty."""
    NOT_SUPPORTED = "FieldValueNotSupported"
    """The value is not one of a closed set, which the message lists (a scoring strategy, a field name)."""
    FORBIDDEN = "FieldValueForbidden"
    """The value may not be set or changed here, whatever it is (memory beside a whole card, a bound pod's name)."""
    DUPLICATE = "FieldValueDuplicate"
    """A value given twice where each must be unique (a card type in one annotation)."""
    NOT_FOUND = "FieldValueNotFound"
    """The value refers to an object that does not exist (a queue, a parent queue)."""
    TOO_MANY = "FieldValueTooMany"
    """A list or map with more items than the limit the message names."""
    TOO_LONG = "FieldValueTooLong"
    """A text longer than the limit the message names."""


@dataclass(frozen=True, slots=True)
class FieldPath:
    """Where in an object a violation is: built one step at a time, immutable, rendered by ``str()``.

    ``FieldPath.of("spec", "tasks").index(0).child("template")`` is ``spec.tasks[0].template``; ``.key(name)``
    is a map key, ``["volcano.sh/card.name"]``. A key from the input is escaped so the path stays on one line."""

    text: str = ""

    @classmethod
    def of(cls, *names: str) -> FieldPath:
        """``of("metadata", "annotations")`` → ``metadata.annotations``."""
        return cls(".".join(names))

    def child(self, *names: str) -> FieldPath:
        """A field of this one (or a field of a field, with several names): ``spec`` → ``spec.tasks``."""
        tail = ".".join(names)
        return FieldPath(f"{self.text}.{tail}" if self.text else tail)

    def index(self, index: int) -> FieldPath:
        """An item of a list: ``spec.tasks`` → ``spec.tasks[0]``."""
        return FieldPath(f"{self.text}[{index}]")

    def key(self, key: str) -> FieldPath:
        """A map key, as written when it is printable (``["volcano.sh/card.name"]``), JSON-escaped otherwise
        (``["a\\nb"]``): an annotation name reads as the user wrote it, on one line."""
        return FieldPath(f'{self.text}["{key}"]' if key.isprintable() else f"{self.text}[{json.dumps(key)}]")

    def escaped_key(self, key: object) -> FieldPath:
        """A map key always JSON-escaped to ASCII (``["\\u00e9"]``; a key that is not a string by its ``str``):
        keys of the YAML and JSON maps a user writes inside a field (``spec.dra``, the scheduler conf's
        arguments), where a quote or a non-ASCII letter in a key must not be mistaken for the path's syntax."""
        return FieldPath(f"{self.text}[{json.dumps(key if isinstance(key, str) else str(key))}]")

    def field(self, name: object) -> FieldPath:
        """A field the input named (an unknown field, say): ``.name`` when it is an identifier, else
        :meth:`escaped_key`."""
        if isinstance(name, str) and name.isidentifier() and name.isascii():
            return self.child(name)
        return self.escaped_key(name)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Violation:
    """Something wrong at ``path`` (``metadata.annotations["volcano.sh/card.quota"]``), of a kind (``reason``),
    said so a person can act (``message``). Built with :func:`invalid`, :func:`required`, … from a
    :class:`FieldPath`; ``path`` is kept rendered, so it reads and compares as text."""

    path: str
    message: str
    reason: Reason = Reason.INVALID

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def under(self, prefix: FieldPath | str) -> Violation:
        """The same violation in an object embedding this one at ``prefix`` (a workload's pod template)."""
        return Violation(f"{prefix}.{self.path}" if self.path else str(prefix), self.message, self.reason)

    def with_message(self, message: str) -> Violation:
        """The same violation said otherwise (with context in front, on one line)."""
        return Violation(self.path, message, self.reason)


ViolationAt = Callable[[FieldPath | str, str], Violation]
"""``invalid(path, message)``: a violation of one reason at a path."""


def _at(reason: Reason) -> ViolationAt:
    def violation(path: FieldPath | str, message: str) -> Violation:
        return Violation(str(path), message, reason)

    violation.__doc__ = f"A violation of reason {reason.value} at ``path``."
    return violation


invalid = _at(Reason.INVALID)
required = _at(Reason.REQUIRED)
not_supported = _at(Reason.NOT_SUPPORTED)
forbidden = _at(Reason.FORBIDDEN)
duplicate = _at(Reason.DUPLICATE)
not_found = _at(Reason.NOT_FOUND)
too_many = _at(Reason.TOO_MANY)
too_long = _at(Reason.TOO_LONG)


ANNOTATIONS = FieldPath.of("metadata", "annotations")


MAX_SHOWN = 40
"""Values longer than this are clipped in messages."""


def type_name(value: object) -> str:
    """What a value from the input is, for messages: ``a map``, ``a list``, ``a string``, ``a number``, …"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, MAPPING_TYPES):
        return "a map"
    if isinstance(value, SEQUENCE_TYPES):
        return "a list"
    return type(value).__name__


def written(value: object) -> str:
    """A scalar from the input as it was written (JSON spelling: strings quoted, ``true``, ``null``), clipped and
    on one line; maps and lists by their type."""
    if isinstance(value, str):
        return quoted(value)
    if isinstance(value, Mapping | list | tuple):
        return type_name(value)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return "a number too large to show"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = type_name(value)
    return _clip(text)


def quoted(text: str) -> str:
    """A string from the input in double quotes, escaped to one line, clipped."""
    return json.dumps(_clip(text), ensure_ascii=False) if text.isprintable() else json.dumps(_clip(text))


def _clip(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def shown(name: str) -> str:
    """A name from the input as it goes into a message: as is when printable, JSON-escaped otherwise (so a
    message always stays on one line and shows what was really there)."""
    return name if name.isprintable() and name.strip() == name and name else json.dumps(name)
