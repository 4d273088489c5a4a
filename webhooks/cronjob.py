"""Volcano CronJob webhook: its job template through the Volcano Job policy; fail-closed like the Job's."""

from cardquota.core.policies import cronjob
from cardquota.webhooks.kinds import AdmittedKind, FailureMode

WEBHOOK = AdmittedKind("batch.volcano.sh", "CronJob", cronjob.admit, FailureMode.CLOSED)
