"""What the webhooks admit: one :class:`AdmittedKind` per kind, declared in that kind's module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cardquota.core.ledger import Ledger
from cardquota.core.policies.config import Admit, FailureMode


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
