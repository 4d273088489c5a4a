"""Volcano CronJob webhook: its job template through the Volcano Job policy; fail-closed like the Job's."""

from cardquota.core.policies.config import FailureMode
from cardquota.webhooks.kinds import admitted

WEBHOOK = admitted("batch.volcano.sh", "CronJob", FailureMode.CLOSED)
