"""Field-path violations: how the core reports bad input as values instead of exceptions."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """Something wrong at ``path`` (``metadata.annotations["volcano.sh/card.quota"]``), said so a person can act."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def annotation_path(name: str) -> str:
    """``metadata.annotations["volcano.sh/card.quota"]``; a name from the input is escaped to stay on one line."""
    return f'metadata.annotations["{name}"]' if name.isprintable() else f"metadata.annotations[{json.dumps(name)}]"


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
    if isinstance(value, Mapping):
        return "a map"
    if isinstance(value, list | tuple):
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
