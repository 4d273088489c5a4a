"""What the webhooks admit: one :class:`AdmittedKind` per kind, declared in that kind's module with :func:`admitted`
— its failure mode and what the webhook adds; the policy itself comes from the core's registry (``POLICIES``), the
one list of admitted kinds, which the CLI's ``cardquota check`` reads too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cardquota.core.ledger import Ledger
from cardquota.core.policies.config import Admit, FailureMode
from cardquota.core.policies.registry import POLICIES


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


def admitted(group: str, kind: str, failure_mode: FailureMode, *,
             on_delete: Callable[[str, Ledger], list[str]] | None = None,
             mutation_matters: bool = False) -> AdmittedKind:
    """The webhook's view of a kind the core's registry admits (KeyError for one it does not: a webhook without a
    policy cannot be declared)."""
    return AdmittedKind(group, kind, POLICIES[(group, kind)], failure_mode, on_delete, mutation_matters)
