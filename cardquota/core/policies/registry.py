"""Which policy admits which kind: (API group, kind) → admit function."""

from __future__ import annotations

from cardquota.core.policies import Admit, job, node, pod, podgroup, queue, schedconf

POLICIES: dict[tuple[str, str], Admit] = {
    ("scheduling.volcano.sh", "Queue"): queue.admit,
    ("scheduling.volcano.sh", "PodGroup"): podgroup.admit,
    ("batch.volcano.sh", "Job"): job.admit,
    ("", "Pod"): pod.admit,
    ("", "Node"): node.admit,
    ("", "ConfigMap"): schedconf.admit,
}
