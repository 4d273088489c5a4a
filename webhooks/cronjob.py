"""Volcano CronJob webhook: its job template through the Volcano Job policy; fail-closed like the Job's."""

from cardquota.core.policies import cronjob
from cardquota.core.policies.config import FailureMode
from cardquota.webhooks.kinds import AdmittedKind

WEBHOOK = AdmittedKind("batch.volcano.sh", "CronJob", cronjob.admit, FailureMode.CLOSED)
