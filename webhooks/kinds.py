"""What the webhooks admit: one :class:`AdmittedKind` per kind, declared in that kind's module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from cardquota.core.ledger import Ledger
from cardquota.core.policies.config import Admit


class FailureMode(StrEnum):
    OPEN = "open"
    """Allowed with a warning when cardquota cannot check: a bug here must never stop workloads or kubelets."""
    CLOSED = "closed"
    """Denied with the reason when cardquota cannot check: a quota object must never slip through unchecked."""


@dataclass(frozen=True)
class AdmittedKind:
    group: str
    kind: str
    admit: Admit
    failure_mode: FailureMode
    on_delete: Callable[[str, Ledger], list[str]] | None = None
    """Warnings for deleting an object of this kind (by name), read from the ledger."""
    mutation_matters: bool = False
    """The mutation changes what happens to the object (a pod's node affinity, a Job's card.request), not only its
    form: the validating webhook warns when an object reaches it without."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.kind)
