"""PodGroup webhook: card.request rules; fail-closed."""

from cardquota.core.policies import podgroup
from cardquota.webhooks.kinds import AdmittedKind, FailureMode

WEBHOOK = AdmittedKind("scheduling.volcano.sh", "PodGroup", podgroup.admit, FailureMode.CLOSED)
