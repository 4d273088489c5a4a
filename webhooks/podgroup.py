"""PodGroup webhook: card.request rules; fail-closed."""

from cardquota.core.policies import podgroup
from cardquota.core.policies.config import FailureMode
from cardquota.webhooks.kinds import AdmittedKind

WEBHOOK = AdmittedKind("scheduling.volcano.sh", "PodGroup", podgroup.admit, FailureMode.CLOSED)
