"""Node webhook: crossquota annotations; fail-open (a bug here must never stop kubelets)."""

from cardquota.core.policies import node
from cardquota.core.policies.config import FailureMode
from cardquota.webhooks.kinds import AdmittedKind

WEBHOOK = AdmittedKind("", "Node", node.admit, FailureMode.OPEN)
