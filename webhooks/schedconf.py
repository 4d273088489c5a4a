"""Scheduler ConfigMap webhook: plugin configuration rules; fail-closed. Other ConfigMaps are allowed untouched
(the policy only examines the configured name; the webhook configuration narrows the calls further)."""

from cardquota.core.policies.config import FailureMode
from cardquota.webhooks.kinds import admitted

WEBHOOK = admitted("", "ConfigMap", FailureMode.CLOSED)
