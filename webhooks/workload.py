"""Workloads with a pod template (the built-in ones and the registered workload kinds), and HorizontalPodAutoscalers:
fail open, like the pods they are about."""

from cardquota.core.policies.config import FailureMode
from cardquota.core.workload_kinds import ADAPTERS, TRAIN_JOB
from cardquota.core.workloads import TEMPLATE_PATHS
from cardquota.webhooks.kinds import admitted

WEBHOOKS = (
    *(admitted(group, kind, FailureMode.OPEN) for group, kind in TEMPLATE_PATHS),
    admitted("autoscaling", "HorizontalPodAutoscaler", FailureMode.OPEN),
    *(admitted(group, kind, FailureMode.OPEN) for group, kind in ADAPTERS),
    admitted(*TRAIN_JOB, FailureMode.OPEN),
)
