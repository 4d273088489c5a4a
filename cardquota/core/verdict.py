"""The answer of an admission policy: allowed or not, why, warnings, and the JSON Patch that mutates the object."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from cardquota.core.errors import one_line
from cardquota.core.violations import Violation

MAX_MESSAGE_PROBLEMS = 5
"""A denial message lists at most this many problems, then says how many more there are."""


class PatchOperation(TypedDict, total=False):
    """One RFC 6902 operation. ``value`` is absent for ``remove``."""

    op: str
    path: str
    value: Any


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""
    """One readable line: empty when allowed, every problem (up to a few) when denied."""
    violations: tuple[Violation, ...] = ()
    warnings: tuple[str, ...] = ()
    patch: tuple[PatchOperation, ...] = field(default_factory=tuple)

    def as_json(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "message": self.message,
            "violations": [{"path": v.path, "message": v.message} for v in self.violations],
            "warnings": list(self.warnings),
            "patch": [dict(op) for op in self.patch],
        }


def allow(warnings: Iterable[str] = (), patch: Iterable[PatchOperation] = ()) -> Verdict:
    return Verdict(allowed=True, warnings=tuple(one_line(w) for w in warnings), patch=tuple(patch))


def deny(violations: Sequence[Violation], warnings: Iterable[str] = ()) -> Verdict:
    """A denial whose message lists the problems, each as ``field path: reason``."""
    shown = [str(violation) for violation in violations[:MAX_MESSAGE_PROBLEMS]]
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
