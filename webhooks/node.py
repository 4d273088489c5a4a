"""Node webhook: crossquota annotations; fail-open (a bug here must never stop kubelets)."""

from cardquota.core.policies.config import FailureMode
from cardquota.webhooks.kinds import admitted

WEBHOOK = admitted("", "Node", FailureMode.OPEN)
