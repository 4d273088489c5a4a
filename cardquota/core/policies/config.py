"""Settings of the admission policies (the same for the CLI and the webhooks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cardquota.core.objects import Manifest
    from cardquota.core.snapshot import ClusterSnapshot
    from cardquota.core.verdict import Verdict

DEFAULT_CARD_AWARE_SCHEDULERS = frozenset({"volcano"})
DEFAULT_SCHEDULER_CONFIGMAP = "volcano-scheduler-configmap"


class FailureMode(StrEnum):
    """What a webhook answers for a kind when cardquota cannot check an object of it (its policy failed, or the
    cluster is not listed yet)."""

    OPEN = "open"
    """Allowed with a warning when cardquota cannot check: a bug here must never stop workloads or kubelets."""
    CLOSED = "closed"
    """Denied with the reason when cardquota cannot check: a quota object must never slip through unchecked."""


@dataclass(frozen=True)
class PolicyConfig:
    card_aware_schedulers: frozenset[str] = DEFAULT_CARD_AWARE_SCHEDULERS
    """``spec.schedulerName`` values that honour card quotas; a card pod with another scheduler is denied."""
    scheduler_configmap: str = DEFAULT_SCHEDULER_CONFIGMAP
    """The name of the Volcano scheduler ConfigMap; other ConfigMaps are not examined."""


Admit = Callable[["Manifest", "Manifest | None", "ClusterSnapshot", PolicyConfig], "Verdict"]
"""The signature of every policy: ``admit(obj, old, snapshot, config) -> Verdict``."""
