"""PodGroup (``scheduling.volcano.sh``) admission: ``volcano.sh/card.request`` must parse and must be able to fit
its queue's card quota some day (single type: request ≤ quota; ``A|B`` key: request ≤ the alternatives' quotas
together, the scheduler's enqueue rule). Current usage never denies: that is pending, not invalid."""

from __future__ import annotations

from cardquota.core import keys
from cardquota.core.objects import Manifest, read_meta
from cardquota.core.policies.cards import CARD_REQUEST_PATH, request_against_queue
from cardquota.core.policies.common import read_view
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.quota import card_request
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict, decide
from cardquota.core.violations import Violation


def admit(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    meta, violations = read_view(lambda m: read_meta(m, namespaced=True), manifest)
    if meta is None:
        return decide(violations)
    queue_name, queue_violations = spec_queue(manifest)
    violations.extend(queue_violations)
    request = card_request(meta.annotations)
    violations.extend(request.violations)
    warnings: list[str] = []
    if request.values and not queue_violations:
        fit, warnings = request_against_queue(request.values, queue_name, snapshot, CARD_REQUEST_PATH)
        violations.extend(fit)
    return decide(violations, warnings)


def spec_queue(manifest: Manifest) -> tuple[str, list[Violation]]:
    """``spec.queue`` of a PodGroup or Volcano Job, ``default`` when unset."""
    spec = manifest.get("spec")
    queue = spec.get("queue") if isinstance(spec, dict) else None
    if queue is None or queue == "":
        return keys.DEFAULT_QUEUE, []
    if not isinstance(queue, str):
        return keys.DEFAULT_QUEUE, [Violation("spec.queue", "must be a string")]
    return queue, []
