"""Which policy admits which kind: (API group, kind) → admit function."""

from __future__ import annotations

from cardquota.core.policies import cronjob as cronjob_policy
from cardquota.core.policies import job as job_policy
from cardquota.core.policies import node as node_policy
from cardquota.core.policies import pod as pod_policy
from cardquota.core.policies import podgroup as podgroup_policy
from cardquota.core.policies import queue as queue_policy
from cardquota.core.policies import schedconf as schedconf_policy
from cardquota.core.policies import workload as workload_policy
from cardquota.core.policies.config import Admit
from cardquota.core.workload_kinds import ADAPTERS, TRAIN_JOB
from cardquota.core.workloads import TEMPLATE_PATHS

POLICIES: dict[tuple[str, str], Admit] = {
    ("scheduling.volcano.sh", "Queue"): queue_policy.admit,
    ("scheduling.volcano.sh", "PodGroup"): podgroup_policy.admit,
    ("batch.volcano.sh", "Job"): job_policy.admit,
    ("batch.volcano.sh", "CronJob"): cronjob_policy.admit,
    ("", "Pod"): pod_policy.admit,
    ("", "Node"): node_policy.admit,
    ("", "ConfigMap"): schedconf_policy.admit,
    **dict.fromkeys(TEMPLATE_PATHS, workload_policy.admit),
    ("autoscaling", "HorizontalPodAutoscaler"): workload_policy.admit_hpa,
    **dict.fromkeys(ADAPTERS, workload_policy.admit_gang),
    TRAIN_JOB: workload_policy.admit_gang,  # (with its runtime when the snapshot holds it)
}

CHECKED_KINDS: dict[str, frozenset[str]] = {
    group: frozenset(kind for kind_group, kind in POLICIES if kind_group == group) for group, _ in POLICIES
}
"""The kinds a policy admits, by API group."""
