"""PodGroup webhook: card.request rules; fail-closed."""

from cardquota.core.policies.config import FailureMode
from cardquota.webhooks.kinds import admitted

WEBHOOK = admitted("scheduling.volcano.sh", "PodGroup", FailureMode.CLOSED)
