"""Workloads with a pod template, and HorizontalPodAutoscalers: fail open, like the pods they are about."""

from cardquota.core.policies import workload
from cardquota.core.policies.config import FailureMode
from cardquota.core.workloads import TEMPLATE_PATHS
from cardquota.webhooks.kinds import AdmittedKind

WEBHOOKS = (
    *(AdmittedKind(group, kind, workload.admit, FailureMode.OPEN) for group, kind in TEMPLATE_PATHS),
    AdmittedKind("autoscaling", "HorizontalPodAutoscaler", workload.admit_hpa, FailureMode.OPEN),
)
