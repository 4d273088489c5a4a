"""Node webhook: crossquota annotations; fail-open (a bug here must never stop kubelets)."""

from cardquota.core.policies import node
from cardquota.webhooks.kinds import AdmittedKind, FailureMode

WEBHOOK = AdmittedKind("", "Node", node.admit, FailureMode.OPEN)
