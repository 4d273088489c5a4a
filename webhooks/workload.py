"""Workloads with a pod template, and HorizontalPodAutoscalers: fail open, like the pods they are about."""

from cardquota.core.policies import workload
from cardquota.core.workloads import TEMPLATE_PATHS
from cardquota.webhooks.kinds import AdmittedKind, FailureMode

WEBHOOKS = (
    *(AdmittedKind(group, kind, workload.admit, FailureMode.OPEN) for group, kind in TEMPLATE_PATHS),
    AdmittedKind("autoscaling", "HorizontalPodAutoscaler", workload.admit_hpa, FailureMode.OPEN),
)
