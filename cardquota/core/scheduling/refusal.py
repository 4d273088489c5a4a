"""Why the scheduler would not move a job or a task on: the reason (an event reason) and one sentence."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    reason: str
    """A Kubernetes event reason, e.g. ``InsufficientScalarQuota``."""
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"
