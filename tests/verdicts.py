"""Verdicts compared by structure: what fired where (field path and reason), not how the message is worded.

Each rule keeps one test of its message (users read it); every other test asserts ``violations_of(...)``, so a test
fails when a rule stops firing or fires at the wrong field, and a message can be reworded in one place."""

from __future__ import annotations

from collections.abc import Iterable

from cardquota.core.verdict import Verdict
from cardquota.core.violations import Reason, Violation

Found = tuple[str, Reason]
"""(field path, reason) of one violation."""


def violations_of(found: Verdict | Iterable[Violation]) -> list[Found]:
    """(path, reason) of each violation, in order."""
    violations = found.violations if isinstance(found, Verdict) else found
    return [(violation.path, violation.reason) for violation in violations]


def denied_at(verdict: Verdict, *expected: Found) -> None:
    """The verdict is a denial with exactly these violations, in order."""
    assert not verdict.allowed, verdict
    assert violations_of(verdict) == list(expected), verdict.message
