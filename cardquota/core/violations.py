"""Field-path violations: how the core reports bad input as values instead of exceptions."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """Something wrong at ``path`` (``metadata.annotations["volcano.sh/card.quota"]``), said so a person can act."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def annotation_path(name: str) -> str:
    return f'metadata.annotations["{name}"]'


def shown(name: str) -> str:
    """A name from the input as it goes into a message: as is when printable, JSON-escaped otherwise (so a
    message always stays on one line and shows what was really there)."""
    return name if name.isprintable() and name.strip() == name and name else json.dumps(name)
