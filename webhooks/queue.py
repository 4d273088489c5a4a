"""Queue webhook: card quota and DRA rules; fail-closed; a warning when a queue with card work is deleted."""

from cardquota.core.policies import queue
from cardquota.core.policies.config import FailureMode
from cardquota.webhooks.kinds import admitted

WEBHOOK = admitted("scheduling.volcano.sh", "Queue", FailureMode.CLOSED, on_delete=queue.delete_warnings)
