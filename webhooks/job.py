"""Volcano Job webhook: card.request and task rules, card.request added by mutation; fail-closed."""

from cardquota.core.policies import job
from cardquota.core.policies.config import FailureMode
from cardquota.webhooks.kinds import AdmittedKind

WEBHOOK = AdmittedKind("batch.volcano.sh", "Job", job.admit, FailureMode.CLOSED, mutation_matters=True)
