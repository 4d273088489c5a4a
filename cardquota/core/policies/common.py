"""Helpers every policy uses: reading an object without raising, and saying when a cluster rule was skipped."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from cardquota.core.errors import InputError
from cardquota.core.objects import Manifest
from cardquota.core.violations import Violation

View = TypeVar("View")

NO_CLUSTER = "no cluster snapshot"


def read_view(build: Callable[[Manifest], View], manifest: Manifest) -> tuple[View | None, list[Violation]]:
    """A typed view of the object, or the violation that says which field could not be read."""
    try:
        return build(manifest), []
    except InputError as error:
        return None, [Violation(error.where or "object", error.message)]


def skipped(what: str) -> str:
    """The warning for a rule that needs the whole cluster, evaluated without it."""
    return f"{what} not checked: {NO_CLUSTER} (pass --cluster, or wait for the webhook's first full list)"
