"""PodGroup (``scheduling.volcano.sh``) admission: ``volcano.sh/card.request`` must parse and must be able to fit
its queue's card quota some day (single type: request ≤ quota; ``A|B`` key: request ≤ the alternatives' quotas
together, the scheduler's enqueue rule). Current usage never denies: that is pending, not invalid."""

from __future__ import annotations

from dataclasses import dataclass

from cardquota.core import keys
from cardquota.core.objects import Manifest, ObjectMeta, read_meta
from cardquota.core.policies.cards import CARD_REQUEST_PATH, QUEUE_PATH, request_against_queue
from cardquota.core.policies.common import ratcheting, read_view, warning_unknown_card_keys
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.quota import CardAmounts, card_request
from cardquota.core.scheduling.capacity_card import minimum_beyond_capability
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict, decide
from cardquota.core.violations import Violation, invalid


@dataclass
class RequestHeader:
    """What a PodGroup and a Volcano Job share: identity, queue and card.request, with what was wrong reading them."""

    meta: ObjectMeta
    queue: str
    queue_ok: bool
    request: CardAmounts
    violations: list[Violation]


def read_request_header(manifest: Manifest, snapshot: ClusterSnapshot, *, created: bool) -> RequestHeader | Verdict:
    """The header, or the denial when the object's metadata cannot be read at all. ``created``: the PodGroup is
    yet to be created (a PodGroup's CREATE, any Volcano Job's), so its queue is the one Volcano will store
    (:meth:`ClusterSnapshot.volcano_queue`: ``default`` may become the namespace's queue); a PodGroup that exists
    keeps its ``spec.queue``."""
    meta, violations = read_view(lambda m: read_meta(m, namespaced=True), manifest)
    if meta is None:
        return decide(violations)
    queue_name, queue_violations = spec_queue(manifest)
    if created and not queue_violations:
        queue_name = snapshot.volcano_queue(queue_name, meta.namespace)
    request = card_request(meta.annotations)
    return RequestHeader(meta, queue_name, not queue_violations, request,
                         [*violations, *queue_violations, *request.violations])


@warning_unknown_card_keys("PodGroup")
@ratcheting
def admit(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    # (a validating webhook sees a PodGroup after Volcano's mutation, which leaves no mapped ``default``: resolving
    # it again changes nothing; offline, ``check`` sees it as written)
    header = read_request_header(manifest, snapshot, created=old is None)
    if isinstance(header, Verdict):
        return header
    warnings: list[str] = []
    if header.request.values and header.queue_ok:
        fit, warnings = request_against_queue(header.request.values, header.queue, snapshot, CARD_REQUEST_PATH)
        header.violations.extend(fit)
    elif header.queue_ok and (record := snapshot.queues.get(header.queue)) is not None:
        warning = minimum_beyond_capability(manifest, header.queue, record.queue.capability)
        warnings += [warning] if warning else []
    return decide(header.violations, warnings)


def spec_queue(manifest: Manifest) -> tuple[str, list[Violation]]:
    """``spec.queue`` of a PodGroup or Volcano Job, ``default`` when unset."""
    spec = manifest.get("spec")
    queue = spec.get("queue") if isinstance(spec, dict) else None
    if queue is None or queue == "":
        return keys.DEFAULT_QUEUE, []
    if not isinstance(queue, str):
        return keys.DEFAULT_QUEUE, [invalid(QUEUE_PATH, "must be a string")]
    return queue, []
