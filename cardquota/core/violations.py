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
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
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
    :class:`FieldPath`; ``path`` is kept rendered, so it reads and compares as text.

    ``depends_on`` names the other values the rule read to find it, besides the one at ``path`` (a PodGroup's
    ``spec.queue`` for "queue X does not exist" depends on its card.request too: the rule is only run for a
    request); :attr:`inputs` is all of them. Ratcheting carries a violation over an UPDATE only when every input is
    unchanged. It is not part of what the violation is: two violations at the same path with the same reason and
    message are equal whatever they depend on (see :meth:`merged` for keeping one of two)."""

    path: str
    message: str
    reason: Reason = Reason.INVALID
    depends_on: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.message and self.path and self.message[0] in _PATH_STARTS:
            object.__setattr__(self, "message", without_path(self.path, self.message))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    @property
    def inputs(self) -> tuple[str, ...]:
        """The paths of every value the violation depends on: its own, then :attr:`depends_on`."""
        return (self.path, *self.depends_on)

    def depending_on(self, *paths: FieldPath | str) -> Violation:
        """The same violation, depending on these values too."""
        depends_on = self.depends_on
        for path in paths:
            text = path if isinstance(path, str) else path.text
            if text != self.path and text not in depends_on:
                depends_on = (*depends_on, text)
        return self if depends_on is self.depends_on else Violation(self.path, self.message, self.reason, depends_on)

    def merged(self, other: Violation) -> Violation:
        """One of two equal violations found by two rules, depending on what either depends on."""
        return self.depending_on(*other.inputs)

    def under(self, prefix: FieldPath | str) -> Violation:
        """The same violation in an object embedding this one at ``prefix`` (a workload's pod template)."""
        return Violation(_under(prefix, self.path), self.message, self.reason,
                         tuple(_under(prefix, path) for path in self.depends_on))

    def with_message(self, message: str) -> Violation:
        """The same violation said otherwise (with context in front, on one line)."""
        return Violation(self.path, message, self.reason, self.depends_on)


_PATH_STARTS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ[")
"""How a field path begins (a message beginning otherwise cannot repeat one)."""


def without_path(path: str, message: str) -> str:
    """``message`` without a field path at its start that repeats ``path`` or its end (a nested rule's path, written
    into its message before the violation was moved :meth:`~Violation.under` a template): shown as ``path:
    message``, a line never names the same field twice. Only a path of several steps is taken for one (``queue
    team-a does not exist`` at ``spec.queue`` keeps its first word)."""
    for start in _step_starts(path):
        tail = path[start:]
        if ("." in tail or "[" in tail) and message.startswith(tail):
            rest = message[len(tail):]
            if not rest:
                return message
            if rest.startswith(": "):
                return rest[2:]
            if rest.startswith(" "):
                return rest[1:]
    return message


def _step_starts(path: str) -> Iterator[int]:
    """Where each step of a rendered path starts (its whole, then each shorter tail): after a dot, at a ``[``."""
    yield 0
    depth = 0
    for index, char in enumerate(path):
        if char == '"':
            depth ^= 1  # (inside a quoted key, dots and brackets are the key's)
        elif depth == 0 and char == ".":
            yield index + 1
        elif depth == 0 and char == "[" and index > 0:
            yield index


_OBJECT_PATHS = ("spec.", "metadata.")


def warning_under(prefix: FieldPath | str, warning: str) -> str:
    """A warning of an object embedded at ``prefix`` (a workload's pod template), moved there as
    :meth:`Violation.under` moves a violation: one that starts with a field path gets the prefix; others are kept."""
    return f"{prefix}.{warning}" if warning.startswith(_OBJECT_PATHS) else warning


def _under(prefix: FieldPath | str, path: str) -> str:
    return f"{prefix}.{path}" if path else str(prefix)


def merge_violations(violations: Iterable[Violation], more: Iterable[Violation]) -> list[Violation]:
    """``violations`` followed by those of ``more`` not among them; one in both (two rules finding the same thing:
    the card quota's and ``spec.dra``'s missing parent queue) is kept once, in its first place, depending on what
    either copy depends on."""
    merged = list(violations)
    first = {violation: index for index, violation in reversed(list(enumerate(merged)))}
    for violation in more:
        index = first.get(violation)
        if index is None:
            first[violation] = len(merged)
            merged.append(violation)
        else:
            merged[index] = merged[index].merged(violation)
    return merged


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


# --- the value a path names ---------------------------------------------------------------------------------------


class _Absent:
    """The value of a path the object does not have (a map without the key, a list without the index)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


def value_at(document: object, path: str) -> object:
    """The value a rendered :class:`FieldPath` names in a JSON-like document (read as the path was written: ``.name``,
    ``[0]``, ``["key"]`` as written or JSON-escaped); :data:`ABSENT` when the document has no such value.

    A path is not trusted to fit the document, and nothing raises. Where it goes on past a value that is not the map
    or list its next step needs, the value is that one: text above all (an annotation's JSON, the scheduler
    configuration's YAML), which holds what the rest of the path points into; so a path into an annotation names the
    annotation's text. A path that cannot be read at all names the whole document. The work is linear in the path
    and in the keys of the maps it passes through."""
    steps = _plain_steps(path)
    if steps is not None:
        found = _walk(document, steps)
        if found is not _UNPLAIN:
            return found
    value = document
    at = 0
    while at < len(path):
        if not isinstance(value, _CONTAINERS):
            return value
        step = _step(path, at, value)
        if step is None:
            return document
        found, at = step
        if found is _NO_STEP:
            return value
        value = found
        if value is ABSENT:
            return ABSENT
    return value


_CONTAINERS = (*MAPPING_TYPES, *SEQUENCE_TYPES)

# Most paths are plain: read once into steps (remembered), then walked without reading the text again.

_PLAIN_STEP = re.compile(r'\.?([^.\[\]"\\]+)|\[([0-9]+)\]|\["([^"\\]*)"\]')
"""One step of a path with nothing to tell apart: ``.name``, ``[0]``, or ``["key"]`` with no quote or backslash in
the key (then the key as written and as JSON read the same)."""
_PLAIN_PATHS: dict[str, tuple[str | int, ...] | None] = {}
MAX_PLAIN_PATHS = 4_096
"""Paths remembered as steps, or as not plain (the table is emptied when full; only paths of up to
:data:`MAX_PLAIN_PATH` characters are kept): a Job's violations repeat a handful of paths per task, and each is read
in the old and the new object."""
MAX_PLAIN_PATH = 512
_UNPLAIN = object()
"""What :func:`_walk` finds when the steps cannot say (the path is read again the slow way)."""


def _plain_steps(path: str) -> tuple[str | int, ...] | None:
    """The steps of a path made only of plain steps (see :data:`_PLAIN_STEP`), or None."""
    if path in _PLAIN_PATHS:
        return _PLAIN_PATHS[path]
    steps: list[str | int] = []
    at = 0
    while at < len(path):
        match = _PLAIN_STEP.match(path, at)
        if match is None or (match[1] is not None and (at == 0) == path.startswith(".", at)):
            break  # (a name: without a dot first, after one later)
        name, index, key = match.groups()
        steps.append(int(index) if index is not None else (name if name is not None else key))
        at = match.end()
    plain = tuple(steps) if at == len(path) else None
    if len(path) <= MAX_PLAIN_PATH:
        if len(_PLAIN_PATHS) >= MAX_PLAIN_PATHS:
            _PLAIN_PATHS.clear()
        _PLAIN_PATHS[path] = plain
    return plain


def _walk(document: object, steps: tuple[str | int, ...]) -> object:
    value = document
    for step in steps:
        if isinstance(step, str) and isinstance(value, MAPPING_TYPES):
            found = value.get(step, ABSENT)
            if found is ABSENT:  # a key that is not text (a YAML map's 7, rendered "7") is found the slow way
                return ABSENT if all(isinstance(key, str) for key in value) else _UNPLAIN
            value = found
        elif isinstance(step, int) and isinstance(value, SEQUENCE_TYPES):
            if step >= len(value):
                return ABSENT
            value = value[step]
        else:  # text holding the rest of the path, or a step that does not fit the value
            return value
    return value


# Any other path is read against the document, one step at a time: a key written as is may hold "] or a quote.

_NO_STEP = object()
"""What :func:`_step` finds when the step does not fit the value (an index into a map, a field of a list)."""
_DECODER = json.JSONDecoder()


def _step(path: str, at: int, value: Mapping[object, object] | list[object] | tuple[object, ...]
          ) -> tuple[object, int] | None:
    """The value one step of ``path`` at ``at`` names in ``value``, and where the next step starts; None when the
    text there is no step."""
    if path.startswith("[", at):
        if path.startswith('["', at):
            return _keyed(path, at, value) if isinstance(value, MAPPING_TYPES) else (_NO_STEP, at)
        end = path.find("]", at)
        if end < 0 or not path[at + 1:end].isdecimal():
            return None
        if not isinstance(value, SEQUENCE_TYPES):
            return _NO_STEP, at
        index = int(path[at + 1:end])
        return (value[index] if index < len(value) else ABSENT), end + 1
    if at > 0:
        if not path.startswith(".", at):
            return None
        at += 1
    end = min((found for found in (path.find(".", at), path.find("[", at)) if found >= 0), default=len(path))
    if end == at:
        return None
    if not isinstance(value, MAPPING_TYPES):
        return _NO_STEP, at
    return value.get(path[at:end], ABSENT), end


def _keyed(path: str, at: int, value: Mapping[object, object]) -> tuple[object, int]:
    """``["key"]`` at ``at``: the key as written (printable keys, :meth:`FieldPath.key`) or JSON-escaped
    (:meth:`FieldPath.escaped_key`). The likely readings are tried first; when neither is a key of the map, each key
    is tried against the text (a written key may hold ``"]``), the longest first."""
    end = path.find('"]', at + 2)
    if end >= 0 and path[at + 2:end] in value:
        return value[path[at + 2:end]], end + 2
    try:
        key, stop = _DECODER.raw_decode(path, at + 1)
    except ValueError:
        key, stop = None, -1
    if isinstance(key, str) and path.startswith("]", stop) and key in value:
        return value[key], stop + 1
    matches = []
    for candidate in value:
        text = candidate if isinstance(candidate, str) else str(candidate)
        for written_key in (f'["{text}"]', f"[{json.dumps(text)}]"):
            if path.startswith(written_key, at):
                matches.append((len(written_key), candidate))
    if not matches:
        return ABSENT, len(path)
    length, candidate = max(matches, key=lambda match: match[0])
    return value[candidate], at + length


def same_value(before: object, after: object) -> bool:
    """Whether two JSON-like values are the same as JSON reads them: maps with the same keys and values, lists with
    the same items in order, numbers of the same value (``1`` and ``1.0``; a boolean is not a number), equal text.
    Without recursion, in time linear in the values and memory linear in their depth (one iterator per level): a
    value nested thousands of levels deep, or a list of a million containers, compares."""
    pending: list[Iterator[tuple[object, object]]] = [iter(((before, after),))]
    while pending:
        pair = next(pending[-1], None)
        if pair is None:
            pending.pop()
            continue
        left, right = pair
        if left is right:
            continue
        if isinstance(left, MAPPING_TYPES):
            if not isinstance(right, MAPPING_TYPES) or len(left) != len(right):
                return False
            pending.append(_by_key(left, right))
        elif isinstance(left, SEQUENCE_TYPES):
            if not isinstance(right, SEQUENCE_TYPES) or len(left) != len(right):
                return False
            pending.append(zip(left, right, strict=True))
        elif not _same_scalar(left, right):
            return False
    return True


def _by_key(left: Mapping[object, object], right: Mapping[object, object]) -> Iterator[tuple[object, object]]:
    for key, item in left.items():
        yield item, right.get(key, ABSENT)


def _same_scalar(left: object, right: object) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    return type(left) is type(right) and left == right
