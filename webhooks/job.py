"""Volcano Job webhook: card.request and task rules, card.request added by mutation; fail-closed."""

from cardquota.core.policies.config import FailureMode
from cardquota.webhooks.kinds import admitted

WEBHOOK = admitted("batch.volcano.sh", "Job", FailureMode.CLOSED, mutation_matters=True)
