"""Field-path violations: how the core reports bad input as values instead of exceptions."""

from __future__ import annotations

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
