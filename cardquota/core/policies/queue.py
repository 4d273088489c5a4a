"""Queue (``scheduling.volcano.sh``) admission: ``volcano.sh/card.quota``, its hierarchy, and ``spec.dra``.

* the quota must parse (see :func:`cardquota.core.quota.card_quota`): any bad entry denies;
* a child queue's quota per type must not exceed its parent's (a parent with no card quota at all does not
  manage cards and limits nothing; a type missing from a parent's quota is 0), and a parent must not drop below
  an existing child;
* card types no node offers are allowed with a "did you mean" warning; a type whose quotas over all top-level
  queues exceed the cards in the cluster is allowed with an over-commit warning;
* a card quota on a queue whose ``spec.capability`` sets no cpu or no memory is allowed with a warning: its card jobs
  get 0 of it unless the capacity-card plugin's ``cardUnlimitedCpuMemory`` is on (a scheduler argument admission
  does not read);
* mutation: the annotation a write sets or changes is rewritten in canonical form (sorted keys, no whitespace) when
  it differs (an update that carries a stored value over leaves it as it is: the webhook is not even called for it);
* ``spec.dra`` is validated by :mod:`cardquota.core.policies.dra`; while the installed Queue CRD lacks cardquota's
  ``spec.dra`` schema (a Volcano upgrade re-applied Volcano's CRD), every Queue write is warned that the API server
  prunes ``spec.dra``, with the command that restores the schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cardquota.core import keys
from cardquota.core.crd_additions import DRA_ADDITION, restore_command
from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.ledger import Ledger
from cardquota.core.objects import CPU_MEMORY, Manifest, Queue
from cardquota.core.policies.cards import CARD_QUOTA_PATH, format_amounts, unknown_type_warnings
from cardquota.core.policies.common import (
    annotations_of,
    queue_not_found,
    ratcheting,
    read_view,
    skipped,
    warning_unknown_card_keys,
)
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.dra import PARENT_PATH, dra_violations
from cardquota.core.preemption import PreemptionPolicy, preemption_policy
from cardquota.core.quantity import parse_quantity
from cardquota.core.quota import CardAmounts, card_alternatives, card_quota, card_request, quota_allows
from cardquota.core.scheduling.capacity_card import CARD_UNLIMITED_CPU_MEMORY
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import PatchOperation, Verdict, decide, set_annotation
from cardquota.core.violations import FieldPath, Reason, Violation, invalid, merge_violations, shown

ROOT_QUEUE = "root"
"""Volcano's implicit top of the queue hierarchy."""


@warning_unknown_card_keys("queue")
@ratcheting
def admit(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    queue, violations = read_view(Queue.from_manifest, manifest)
    if queue is None:
        return decide(violations)
    quota = card_quota(queue.meta.annotations)
    violations.extend(quota.violations)
    violations.extend(resource_list_violations(manifest))
    warnings: list[str] = []
    if quota.ok and quota.values:
        warnings.extend(unknown_type_warnings(list(quota.values), snapshot))
        warnings.extend(_overcommit_warnings(queue, quota.values, snapshot))
        warnings.extend(_no_cpu_memory_warnings(queue, quota.values, snapshot))
    hierarchy_violations, hierarchy_warnings = _hierarchy(queue, quota, snapshot)
    violations.extend(hierarchy_violations)
    warnings.extend(hierarchy_warnings)
    dra_found, dra_warnings = dra_violations(manifest, snapshot)
    violations = merge_violations(violations, dra_found)  # a parent both rules find missing: said once
    warnings.extend(warning for warning in dra_warnings if warning not in warnings)
    warnings.extend(_pruned_dra_warnings(manifest, snapshot))
    warnings.extend(_lowered_quota_warnings(queue, quota, old, snapshot))
    preemption_violations, preemption_warnings = _preemption_findings(queue, old, config.card_gate)
    violations.extend(preemption_violations)
    warnings.extend(preemption_warnings)
    return decide(violations, warnings, _canonical_quota_patch(manifest, old, queue, quota))


PREEMPTION_PATH = FieldPath.of("metadata", "annotations").key(keys.PREEMPTION)


def _preemption_findings(queue: Queue, old: Manifest | None, card_gate: bool) -> tuple[list[Violation], list[str]]:
    """The queue's preemption policy: a value that is no policy is refused when written (warned about when an update
    leaves it as it was); a policy other than ``Never`` while the card-quota gate is off is said to do nothing (the
    gate's keeper is what preempts)."""
    if keys.PREEMPTION not in queue.meta.annotations:
        return [], []
    policy, error = preemption_policy(queue.meta.annotations)
    if error:
        value = queue.meta.annotations[keys.PREEMPTION]
        message = (f"{shown(value)} is not a preemption policy: write one of "
                   f"{', '.join(choice.value for choice in PreemptionPolicy)}")
        metadata = old.get("metadata") if isinstance(old, MAPPING_TYPES) else None
        before = metadata.get("annotations") if isinstance(metadata, MAPPING_TYPES) else None
        if isinstance(before, MAPPING_TYPES) and before.get(keys.PREEMPTION) == value:
            return [], [f"{PREEMPTION_PATH}: {message}"]
        return [Violation(str(PREEMPTION_PATH), message, Reason.NOT_SUPPORTED)], []
    if policy is PreemptionPolicy.NEVER or card_gate:
        return [], []
    return [], [f"{PREEMPTION_PATH}: {policy.value} acts at the card-quota gate, which is off (turn it on with "
                f"--card-gate): waiting card work in queue {shown(queue.name)} is admitted first come, first served, "
                "and nothing is preempted"]


def _no_cpu_memory_warnings(queue: Queue, values: Mapping[str, int], snapshot: ClusterSnapshot) -> list[str]:
    """A queue with cards to give but no cpu or memory in ``spec.capability``: the capacity-card plugin's cpu/memory
    quota is then 0 (capacity-card-design.md, "CPU/Memory Quotas": "If not set, the default quota is also 0"), so
    its card jobs are never enqueued (``EmptyQueueCapability``, or short of cpu/memory) unless the plugin's
    ``cardUnlimitedCpuMemory`` is on — a scheduler argument: said, not judged, and not said when it is known to be
    on (:attr:`ClusterSnapshot.card_unlimited_cpu_memory`)."""
    if snapshot.card_unlimited_cpu_memory or not any(amount > 0 for amount in values.values()):
        return []
    missing = [resource for resource in CPU_MEMORY if resource not in (queue.capability or {})]
    if not missing:
        return []
    return [f"queue {shown(queue.name)} has a card quota but spec.capability sets no {' or '.join(missing)}: its "
            f"card jobs get 0 {' and '.join(missing)} and are never enqueued unless the scheduler's capacity-card "
            f"argument {CARD_UNLIMITED_CPU_MEMORY} is true; set spec.capability {' and '.join(missing)}, or turn "
            f"{CARD_UNLIMITED_CPU_MEMORY} on"]


def _pruned_dra_warnings(manifest: Manifest, snapshot: ClusterSnapshot) -> list[str]:
    if DRA_ADDITION.label not in snapshot.queue_crd_missing:
        return []
    spec = manifest.get("spec")
    written = isinstance(spec, MAPPING_TYPES) and "dra" in spec
    return [f"{'spec.dra of this queue is dropped' if written else 'spec.dra is dropped from every queue written'}: "
            "the installed Queue CRD lacks cardquota's spec.dra schema (re-applied by a Volcano upgrade?), so the "
            f"API server prunes it; restore the schema with: {restore_command()}"]


MAX_NAMED = 3
"""Objects named in one warning; the rest are counted."""


def _lowered_quota_warnings(queue: Queue, quota: CardAmounts, old: Manifest | None,
                            snapshot: ClusterSnapshot) -> list[str]:
    """An update lowering a card type's quota: below what the queue holds now (running work keeps its cards, new
    work waits), and below what its PodGroups request (they can never run) — said with the numbers."""
    if old is None or not quota.ok or not quota.present:
        return []
    before = card_quota(annotations_of(old))
    if not before.ok:
        return []
    lowered = {card: (amount, quota.values.get(card, 0)) for card, amount in before.values.items()
               if quota.values.get(card, 0) < amount}
    if not lowered:
        return []
    warnings = []
    use = snapshot.queue_use(queue.name) if snapshot.queue_use is not None else {}
    for card, (was, now) in lowered.items():
        if use.get(card, 0) > now:
            warnings.append(f"{shown(card)} quota lowered from {was} to {now}, below the {use[card]} queue "
                            f"{shown(queue.name)} holds or has reserved now: running work keeps its cards, new "
                            "work waits until usage falls below the quota")
    stranded = []
    for group in snapshot.podgroups.values():
        if group.queue != queue.name:
            continue
        for key, wanted in card_request(group.meta.annotations).values.items():
            if any(card in lowered for card in card_alternatives(key)) and wanted > quota_allows(key, quota.values):
                stranded.append(f"{group.meta.namespace}/{group.meta.name} ({wanted} {shown(key)}, at most "
                                f"{quota_allows(key, quota.values)})")
                break
    if stranded:
        more = f" and {len(stranded) - MAX_NAMED} more" if len(stranded) > MAX_NAMED else ""
        warnings.append(f"{len(stranded)} PodGroup{'s' if len(stranded) > 1 else ''} of queue {shown(queue.name)} "
                        f"request more than the lowered quota allows and can never run: "
                        f"{', '.join(sorted(stranded)[:MAX_NAMED])}{more}")
    return warnings


def canonical_quota(values: Mapping[str, int]) -> str:
    return json.dumps(dict(sorted(values.items())), separators=(",", ":"), ensure_ascii=False)


def _canonical_quota_patch(manifest: Manifest, old: Manifest | None, queue: Queue,
                           quota: CardAmounts) -> list[PatchOperation]:
    if not quota.present or not quota.ok:
        return []
    written = queue.meta.annotations.get(keys.CARD_QUOTA)
    if old is not None and annotations_of(old).get(keys.CARD_QUOTA) == written:
        return []  # carried over, not written: the mutating webhook's conditions skip such an update
    canonical = canonical_quota(quota.values)
    if written == canonical:
        return []
    return set_annotation(manifest, keys.CARD_QUOTA, canonical)


def _hierarchy(queue: Queue, quota: CardAmounts, snapshot: ClusterSnapshot) -> tuple[list[Violation], list[str]]:
    violations: list[Violation] = []
    warnings: list[str] = []
    if queue.parent and queue.parent != ROOT_QUEUE and quota.present:
        parent = snapshot.queues.get(queue.parent)
        if parent is None:
            if snapshot.complete:
                # found only for a queue with a card quota, and about that quota: it depends on it too
                violations.append(queue_not_found(PARENT_PATH, queue.parent, snapshot, what="parent queue")
                                  .depending_on(CARD_QUOTA_PATH))
            else:
                warnings.append(skipped(f"card quota against parent queue {shown(queue.parent)}"))
        elif parent.quota.present:
            for card, amount in quota.values.items():
                limit = parent.quota.values.get(card, 0)
                if amount > limit:
                    violations.append(invalid(
                        CARD_QUOTA_PATH,
                        f"{shown(card)} quota {amount} exceeds parent queue {shown(queue.parent)}'s quota of {limit}",
                    ).depending_on(PARENT_PATH))
            if quota.ok:
                siblings = [child.quota.values for child in snapshot.children_of(queue.parent)
                            if child.queue.name != queue.name and child.quota.present and child.quota.ok]
                warnings.extend(_shared_parent_warnings(queue.parent, parent.quota.values, [quota.values, *siblings]))
    if quota.present and quota.ok:
        children = [child for child in snapshot.children_of(queue.name)
                    if child.queue.name != queue.name and child.quota.present]
        for child in children:
            for card, amount in child.quota.values.items():
                limit = quota.values.get(card, 0)
                if amount > limit:
                    violations.append(invalid(
                        CARD_QUOTA_PATH,
                        f"{shown(card)} quota {limit} is below child queue {shown(child.queue.name)}'s quota of "
                        f"{amount}",
                    ))
        warnings.extend(_shared_parent_warnings(queue.name, quota.values,
                                                [child.quota.values for child in children if child.quota.ok]))
    return violations, warnings


def _shared_parent_warnings(parent: str, limits: Mapping[str, int], children: list[Mapping[str, int]]) -> list[str]:
    """Children whose quotas of a card type add up to more than their parent's: allowed (they share it, and the gate
    lets them through in order until the parent's is used), but said — a child may wait while its own quota has
    room."""
    warnings = []
    for card in sorted({card for child in children for card in child}):
        together = sum(child.get(card, 0) for child in children)
        limit = limits.get(card, 0)
        if len(children) > 1 and together > limit:
            warnings.append(f"{shown(card)} quotas of parent queue {shown(parent)}'s children add up to {together}, "
                            f"above its {limit}: they share it (a child may wait while its own quota has room)")
    return warnings


def _overcommit_warnings(queue: Queue, values: Mapping[str, int], snapshot: ClusterSnapshot) -> list[str]:
    """Quotas of all top-level queues together above the cards the nodes offer (children share their parent's)."""
    if queue.parent and queue.parent != ROOT_QUEUE:
        return []
    catalog = snapshot.catalog()
    if not snapshot.complete or not catalog.entries:
        return []
    warnings = []
    for card, amount in values.items():
        entry = catalog.get(card)
        if entry is None:
            continue
        others = sum(
            record.quota.values.get(card, 0)
            for name, record in snapshot.queues.items()
            if name != queue.name and (not record.queue.parent or record.queue.parent == ROOT_QUEUE)
        )
        if others + amount > entry.total:
            warnings.append(
                f"{shown(card)} is over-committed: top-level queues' quotas add up to {others + amount} "
                f"but the nodes offer {entry.total}"
            )
    return warnings


def delete_warnings(name: str, ledger: Ledger) -> list[str]:
    """Deleting a queue that still holds, reserves or waits for cards strands that work: say what it has."""
    if name not in ledger.queue_names():
        return []
    usage = ledger.usage(name)
    parts = [
        f"{label} {format_amounts({card: amount for card, amount in amounts.items() if amount > 0})}"
        for label, amounts in (("allocated", usage.allocated), ("inqueue", usage.inqueue), ("pending", usage.pending))
        if any(amount > 0 for amount in amounts.values())
    ]
    if not parts:
        return []
    return [f"queue {shown(name)} still has card work ({'; '.join(parts)}); deleting it leaves that work without "
            "a queue"]


RESOURCE_LISTS = (("spec", "capability"), ("spec", "deserved"), ("spec", "guarantee", "resource"))
"""A Queue's resource lists (``v1.ResourceList``: resource name → quantity)."""


def resource_list_violations(manifest: Manifest) -> list[Violation]:
    """A quantity in a Queue's resource lists that is not one (``64cores``, ``4TB``): the API server refuses it
    (the CRD's quantity pattern), so offline ``check`` does too; Volcano would read nothing of it, and ``usage`` would
    leave the row out."""
    violations = []
    for path in RESOURCE_LISTS:
        listing: object = manifest
        for step in path:
            listing = listing.get(step) if isinstance(listing, MAPPING_TYPES) else None
        for name, value in (listing.items() if isinstance(listing, MAPPING_TYPES) else ()):
            try:
                parse_quantity(value)
            except InputError as error:
                violations.append(invalid(FieldPath.of(*path).key(str(name)), error.message))
    return violations
