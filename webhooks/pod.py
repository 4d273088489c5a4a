"""Pod webhook: card name, mGPU and crossquota rules, product node affinity by mutation; fail-open (a bug here
must never stop workloads)."""

from cardquota.core.policies.config import FailureMode
from cardquota.webhooks.kinds import admitted

WEBHOOK = admitted("", "Pod", FailureMode.OPEN, mutation_matters=True)
