"""Settings of the admission policies (the same for the CLI and the webhooks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from cardquota.core import keys

if TYPE_CHECKING:
    from cardquota.core.objects import Manifest
    from cardquota.core.snapshot import ClusterSnapshot
    from cardquota.core.verdict import Verdict

FLAG_VALUES = {"1": True, "true": True, "0": False, "false": False}
"""How an on/off setting is written in an environment variable (any case): the operator reads its variables so, and
``doctor`` reads them back from the operator's Deployment the same way."""


def read_flag(text: str) -> bool | None:
    """An on/off setting as written (:data:`FLAG_VALUES`); None for anything else."""
    return FLAG_VALUES.get(text.lower())


DEFAULT_CARD_AWARE_SCHEDULERS = keys.VOLCANO_SCHEDULERS
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
    map_namespace_queues: bool = False
    """Whether the cluster's Volcano maps a namespace to a queue: a PodGroup created with queue ``default`` in a
    namespace annotated ``scheduling.volcano.sh/queue-name: Q`` is stored with queue Q (Volcano's PodGroup
    mutation; off by default, as in Volcano's Helm chart since v1.12). Every queue a PodGroup-to-be is checked
    against follows it (:meth:`ClusterSnapshot.volcano_queue
    <cardquota.core.snapshot.ClusterSnapshot.volcano_queue>`, which reads the copy the snapshot's builder gives it:
    :attr:`ClusterSnapshot.map_namespace_queues <cardquota.core.snapshot.ClusterSnapshot.map_namespace_queues>`)."""
    card_gate: bool = False
    """Admission by scheduling gate (:mod:`cardquota.core.gate`): a card pod is created with cardquota's scheduling
    gate, which the controller's leader lifts when its cards fit. Off unless the controller that lifts it runs with
    it too (a gate nobody lifts holds its pod for ever)."""


Admit = Callable[["Manifest", "Manifest | None", "ClusterSnapshot", PolicyConfig], "Verdict"]
"""The signature of every policy: ``admit(obj, old, snapshot, config) -> Verdict``."""
