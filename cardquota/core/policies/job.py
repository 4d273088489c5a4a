"""Volcano Job (``batch.volcano.sh``) admission.

* ``volcano.sh/card.request`` on the Job: the PodGroup rules (it becomes the PodGroup's annotation).
* each task's pod template: its ``volcano.sh/card.name`` must parse, be covered by the Job's card.request, and
  the template must request the card type's resource (denials name the task and the expected resource).
* each task's template also gets the pod rules that are not about cards: mGPU requests and the crossquota scoring
  strategy (the Pod policy's own rule functions), at the template's path;
* each task's template also gets the pod rules' affinity-typo warning (``nodeAffinity.requiredDuringScheduling…``
  misspelt), at the template's path;
* mutation: a Job with no card.request whose tasks name cards gets one — what the gang needs to be enqueued: the
  cards of the pods Volcano counts in the PodGroup's minResources (``minAvailable``'s pods, see
  :func:`cardquota.core.workloads.gang_pod_counts`), per card key — and that request must fit its queue like a
  written one; an elastic Job whose every replica together needs more than the queue's quota is allowed with a
  warning giving the numbers (the pods beyond the quota wait for cards, as ``simulate`` shows).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cardquota.core import keys
from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest, effective_requests
from cardquota.core.policies.cards import (
    CARD_REQUEST_PATH,
    card_name_resource_violations,
    job_tasks_violation,
)
from cardquota.core.policies.common import annotations_of, ratcheting, warning_unknown_card_keys
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.crossquota import scoring_strategy_violations
from cardquota.core.policies.gang import CardRole, as_derived, derivation, derived_request, gang_against_queue
from cardquota.core.policies.mgpu import mgpu_violations
from cardquota.core.policies.pod import affinity_typo_warnings, unnamed_card_finding
from cardquota.core.policies.podgroup import read_request_header
from cardquota.core.quota import card_alternatives, card_name_violation, clipped
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.usage import pending_cards
from cardquota.core.verdict import PatchOperation, Verdict, decide, set_annotation
from cardquota.core.violations import FieldPath, Violation, invalid, shown
from cardquota.core.workloads import gang_pod_counts, job_min_available


@warning_unknown_card_keys("Volcano Job")
@ratcheting
def admit(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    header = read_request_header(manifest, snapshot, created=True)  # the job controller creates its PodGroup
    if isinstance(header, Verdict):
        return header
    too_many = job_tasks_violation(manifest)
    if too_many is not None:  # the per-task rules below are not run: a review's cost stays bounded
        return decide([*header.violations, too_many])
    request, violations = header.request, header.violations
    tasks, task_violations = _card_tasks(manifest, snapshot)
    violations.extend(task_violations)
    unnamed = _unnamed_task_findings(manifest, header.queue, snapshot, refuse=config.card_gate and old is None,
                                     creating=old is None) \
        if header.queue_ok else []
    violations.extend(finding for finding in unnamed if isinstance(finding, Violation))
    reported = {violation.path for violation in violations}  # a value the card checks already refused: once
    violations.extend(v for v in _template_pod_violations(manifest) if v.path not in reported)
    patch: list[PatchOperation] = []
    wanted: Mapping[str, int] = request.values
    if request.present:
        covered = {card for key in request.values for card in card_alternatives(key)}
        for task in tasks:
            missing = [card for card in card_alternatives(task.card_name) if card not in covered]
            if missing and request.ok:
                violations.append(invalid(
                    task.card_name_path,
                    f"task {shown(task.name)} uses {', '.join(map(shown, missing))}, which the Job's "
                    f"{keys.CARD_REQUEST} does not request",
                ).depending_on(CARD_REQUEST_PATH))
    warnings: list[str] = [*_template_pod_warnings(manifest), *(f for f in unnamed if isinstance(f, str))]
    full: dict[str, int] = {}
    counts: list[int] | None = None
    if not request.present and tasks:
        counts = _gang_counts(manifest)
        wanted = derived_request(tasks, counts)
        full = derived_request(tasks, None)
        if wanted:
            patch = set_annotation(manifest, keys.CARD_REQUEST, json.dumps(wanted, separators=(",", ":")))
    if wanted and header.queue_ok and request.ok:
        fit, fit_warnings = gang_against_queue(wanted, full, sum(task.replicas for task in tasks), header.queue,
                                               snapshot, CARD_REQUEST_PATH, _derived_said)
        # a request derived from the tasks is said so, at the tasks; it depends on them, their replicas and
        # minAvailable: on the whole spec
        violations.extend(fit if request.present else [
            violation.depending_on(SPEC) for violation in
            as_derived(fit, CARD_REQUEST_PATH, TASKS, "the tasks", derivation(tasks, counts, "task"))])
        warnings.extend(fit_warnings)
    return decide(violations, warnings, patch)


def _derived_said(key: str, amount: int) -> str:
    return f"{keys.CARD_REQUEST} set to the gang's {amount} {clipped(key)} (minAvailable's pods)"


class _CardTask(CardRole):
    @property
    def card_name_path(self) -> FieldPath:
        return _card_name_path(TASKS.index(self.index))


SPEC = FieldPath.of("spec")
TASKS = SPEC.child("tasks")


def _card_name_path(task: FieldPath) -> FieldPath:
    """``spec.tasks[0].template.metadata.annotations["volcano.sh/card.name"]``."""
    return task.child("template", "metadata", "annotations").key(keys.CARD_NAME)


def _card_tasks(manifest: Manifest, snapshot: ClusterSnapshot) -> tuple[list[_CardTask], list[Violation]]:
    spec = manifest.get("spec")
    tasks = spec.get("tasks") if isinstance(spec, MAPPING_TYPES) else None
    if tasks is None:
        return [], []
    if not isinstance(tasks, list):
        return [], [invalid(TASKS, "must be a list")]
    found: list[_CardTask] = []
    violations: list[Violation] = []
    catalog = snapshot.catalog()
    for index, task in enumerate(tasks):
        path = TASKS.index(index)
        if not isinstance(task, MAPPING_TYPES):
            violations.append(invalid(path, "must be a map"))
            continue
        raw_name = task.get("name")
        name = raw_name if isinstance(raw_name, str) and raw_name else f"#{index}"
        template = task.get("template") or {}
        if not isinstance(template, MAPPING_TYPES):
            violations.append(invalid(path.child("template"), "must be a map"))
            continue
        annotations = annotations_of(template)
        card_name = annotations.get(keys.CARD_NAME)
        if not isinstance(card_name, str):
            continue
        card_path = _card_name_path(path)
        violation = card_name_violation(card_name, card_path, f"task {shown(name)}: ")
        if violation is not None:
            violations.append(violation)
            continue
        replicas = task.get("replicas")
        if replicas is None:  # none written (or null, pruned by the API server): Volcano's TaskSpec.Replicas is 0
            replicas = 0
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            violations.append(invalid(path.child("replicas"), "must be a non-negative integer"))
            continue
        try:
            requests = effective_requests(template.get("spec") or {}, str(path.child("template", "spec")))
        except InputError as error:
            violations.append(invalid(error.where, error.message))
            continue
        violations.extend(violation.depending_on(path.child("template", "spec")) for violation in
                          card_name_resource_violations(card_name, requests, catalog, card_path,
                                                        f"task {shown(name)}'s pod template"))
        found.append(_CardTask(name, index, card_name, replicas, pending_cards(requests, catalog.resources)))
    return found, violations


def _unnamed_task_findings(manifest: Manifest, queue: str, snapshot: ClusterSnapshot, *,
                           refuse: bool, creating: bool) -> list[Violation | str]:
    """The pod rule for card requests without volcano.sh/card.name (:func:`unnamed_card_finding`), on each task's
    template: its pods would be refused (or unchecked) the same way."""
    spec = manifest.get("spec")
    tasks = spec.get("tasks") if isinstance(spec, MAPPING_TYPES) else None
    findings: list[Violation | str] = []
    for index, task in enumerate(tasks if isinstance(tasks, list) else []):
        template = task.get("template") if isinstance(task, MAPPING_TYPES) else None
        if not isinstance(template, MAPPING_TYPES) or keys.CARD_NAME in annotations_of(template):
            continue
        path = TASKS.index(index)
        try:
            requests = effective_requests(template.get("spec") or {}, str(path.child("template", "spec")))
        except InputError:
            continue  # (said by the card checks)
        raw_name = task.get("name")
        name = raw_name if isinstance(raw_name, str) and raw_name else f"#{index}"
        finding = unnamed_card_finding(requests, queue, snapshot, refuse=refuse, creating=creating,
                                       path=_card_name_path(path),
                                       subject=f"task {shown(name)}'s pod template")
        if finding is not None:
            findings.append(finding)
    return findings


def _template_pod_violations(manifest: Manifest) -> list[Violation]:
    """The pod rules the card checks above do not cover, on each task's template: mGPU requests and the crossquota
    scoring strategy (the same rule functions the Pod policy runs), at the template's path."""
    spec = manifest.get("spec")
    tasks = spec.get("tasks") if isinstance(spec, MAPPING_TYPES) else None
    violations: list[Violation] = []
    for index, task in enumerate(tasks if isinstance(tasks, list) else []):
        template = task.get("template") if isinstance(task, MAPPING_TYPES) else None
        if not isinstance(template, MAPPING_TYPES):
            continue
        prefix = TASKS.index(index).child("template")
        found = [*mgpu_violations(template), *scoring_strategy_violations(annotations_of(template))]
        violations.extend(violation.under(prefix) for violation in found)
    return violations


def _template_pod_warnings(manifest: Manifest) -> list[str]:
    """The pod rules' warnings on each task's template (the affinity typos), at the template's path."""
    spec = manifest.get("spec")
    tasks = spec.get("tasks") if isinstance(spec, MAPPING_TYPES) else None
    warnings: list[str] = []
    for index, task in enumerate(tasks if isinstance(tasks, list) else []):
        template = task.get("template") if isinstance(task, MAPPING_TYPES) else None
        if isinstance(template, MAPPING_TYPES):
            warnings.extend(f"spec.tasks[{index}].template.{warning}" for warning in affinity_typo_warnings(template))
    return warnings


def _gang_counts(manifest: Manifest) -> list[int]:
    """Pods per task in the gang (what Volcano's minResources counts), by task index."""
    spec = manifest.get("spec")
    spec = spec if isinstance(spec, MAPPING_TYPES) else {}
    raw = spec.get("tasks")
    tasks = [task if isinstance(task, MAPPING_TYPES) else {} for task in raw] if isinstance(raw, list) else []
    return gang_pod_counts(tasks, job_min_available(spec, tasks))
