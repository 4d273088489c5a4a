"""The answer of an admission policy: allowed or not, why, warnings, and the JSON Patch that mutates the object."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from cardquota.core.errors import one_line
from cardquota.core.jsontypes import SEQUENCE_TYPES
from cardquota.core.violations import Violation

MAX_MESSAGE_VIOLATIONS = 5
"""A denial message lists at most this many violations, then says how many more there are."""
MAX_WARNING_RUNES = 256
"""The API server cuts a warning beyond this (k8s.io/apiserver/pkg/endpoints/filters/warning.go,
``truncateItemRunes``): cut it ourselves, visibly."""
MAX_WARNINGS_RUNES = 4096
"""The API server keeps this many runes of warnings per request (``truncateAtTotalRunes`` in the same file; beyond,
it cuts every warning to 256 and drops the rest)."""


class PatchOperation(TypedDict, total=False):
    """One RFC 6902 operation. ``value`` is absent for ``remove``."""

    op: str
    path: str
    value: Any


def operation_json(operation: PatchOperation) -> str:
    """The operation as compact JSON: remembered for a shared operation (:class:`SharedOperations`), else encoded
    now (what ``json.dumps`` gives, with no spaces)."""
    remembered = SHARED_OPERATIONS.json_of(operation)
    return remembered if remembered is not None else _compact_json(operation)


def _compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


class SharedOperations:
    """Patch operations that many verdicts carry, each built once per key and never changed afterwards, with its
    JSON text (encoding a node-affinity operation costs ~10 µs, more than the rest of a Pod's answer).

    A bounded table (emptied when full): an operation handed out stays valid after that, it is only no longer
    shared. The JSON of an operation is found by its identity, which is sound because the table holds the
    operation itself: no other object can have its id while it is in the table."""

    __slots__ = ("_by_key", "_json_by_id", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_key: dict[Hashable, PatchOperation] = {}
        self._json_by_id: dict[int, tuple[PatchOperation, str]] = {}

    def get(self, key: Hashable, build: Callable[[], PatchOperation]) -> PatchOperation:
        """The operation for ``key``, built by ``build`` the first time (``key`` must say everything it depends
        on). Callers never change it."""
        found = self._by_key.get(key)
        if found is not None:
            return found
        if len(self._by_key) >= self.limit:
            self._by_key.clear()
            self._json_by_id.clear()
        operation = build()
        self._by_key[key] = operation
        self._json_by_id[id(operation)] = (operation, _compact_json(operation))
        return operation

    def json_of(self, operation: PatchOperation) -> str | None:
        entry = self._json_by_id.get(id(operation))
        return entry[1] if entry is not None and entry[0] is operation else None

    def __len__(self) -> int:
        return len(self._by_key)


SHARED_OPERATIONS = SharedOperations(1_024)
"""The shared operations of every policy (keys name their policy): a few per card name and catalog."""


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""
    """One readable line: empty when allowed, every violation (up to a few) when denied."""
    violations: tuple[Violation, ...] = ()
    warnings: tuple[str, ...] = ()
    """Within the API server's budget, whoever builds the verdict: see :func:`within_budget`."""
    patch: tuple[PatchOperation, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "warnings", within_budget(self.warnings))

    def as_json(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "message": self.message,
            "violations": [{"path": v.path, "reason": str(v.reason), "message": v.message} for v in self.violations],
            "warnings": list(self.warnings),
            "patch": [dict(op) for op in self.patch],
        }


def allow(warnings: Iterable[str] = (), patch: Iterable[PatchOperation] = ()) -> Verdict:
    if type(warnings) in SEQUENCE_TYPES and type(patch) in SEQUENCE_TYPES and not warnings and not patch:
        return _ALLOWED  # most verdicts (a Verdict is immutable: one serves them all)
    return Verdict(allowed=True, warnings=tuple(one_line(w) for w in warnings), patch=tuple(patch))


def deny(violations: Sequence[Violation], warnings: Iterable[str] = ()) -> Verdict:
    """A denial whose message lists the violations, each as ``field path: message``; the API server's budget for
    a message is small, so after :data:`MAX_MESSAGE_VIOLATIONS` it counts the rest ("and 3 more problems")."""
    shown = [str(violation) for violation in violations[:MAX_MESSAGE_VIOLATIONS]]
    more = len(violations) - len(shown)
    if more > 0:
        shown.append(f"and {more} more problem{'s' if more > 1 else ''}")
    return Verdict(
        allowed=False,
        message=one_line("; ".join(shown)),
        violations=tuple(violations),
        warnings=tuple(one_line(w) for w in warnings),
    )


def decide(violations: Sequence[Violation], warnings: Iterable[str] = (),
           patch: Iterable[PatchOperation] = ()) -> Verdict:
    """Denied when there is any violation (then no patch), else allowed with the warnings and patch."""
    return deny(violations, warnings) if violations else allow(warnings, patch)


def pointer(*segments: str | int) -> str:
    """An RFC 6901 JSON Pointer: ``pointer("metadata", "annotations", "volcano.sh/card.quota")``."""
    return "".join("/" + str(segment).replace("~", "~0").replace("/", "~1") for segment in segments)


def set_annotation(manifest: dict[str, Any] | Any, name: str, value: str) -> list[PatchOperation]:
    """Operations that set one annotation, creating ``metadata.annotations`` when the object has none."""
    metadata = manifest.get("metadata") or {}
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        return [PatchOperation(op="add", path=pointer("metadata", "annotations"), value={name: value})]
    op = "replace" if name in annotations else "add"
    return [PatchOperation(op=op, path=pointer("metadata", "annotations", name), value=value)]


def within_budget(warnings: Iterable[str]) -> tuple[str, ...]:
    """The warnings as the API server will show them all: each on one line and at most :data:`MAX_WARNING_RUNES`
    (cut with "…"), repeats dropped (the API server drops them too), and :data:`MAX_WARNINGS_RUNES` in all. Policies
    list the most useful first; when they do not all fit, those that fit are kept in order and a last warning says
    how many were left out. Linear in the warnings' length; idempotent."""
    if not warnings:  # most verdicts: nothing to check
        return ()
    texts = list(dict.fromkeys(text for text in map(_cut, warnings) if text))
    kept, left_out = _fill(texts, MAX_WARNINGS_RUNES)
    if not left_out:
        return tuple(kept)
    kept, left_out = _fill(texts, MAX_WARNINGS_RUNES - _LEFT_OUT_ROOM)
    return (*kept, f"{left_out} more warning{'s' if left_out > 1 else ''} left out: the API server shows at most "
                   f"{MAX_WARNINGS_RUNES:,} characters of warnings")


_LEFT_OUT_ROOM = 100
"""Room kept for the last warning, the one that counts those left out."""


def _fill(texts: list[str], budget: int) -> tuple[list[str], int]:
    kept = []
    for text in texts:
        if len(text) <= budget:
            kept.append(text)
            budget -= len(text)
    return kept, len(texts) - len(kept)


def _cut(text: str) -> str:
    """One line (escapes are at most 10 characters for one) of at most :data:`MAX_WARNING_RUNES`."""
    text = one_line(text[: 4 * MAX_WARNING_RUNES]) if len(text) > MAX_WARNING_RUNES else one_line(text)
    return text if len(text) <= MAX_WARNING_RUNES else text[: MAX_WARNING_RUNES - 1] + "…"


_ALLOWED = Verdict(allowed=True)
"""What :func:`allow` gives with no warnings and no patch."""
