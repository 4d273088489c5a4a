"""Workloads whose pods come later — Deployments, StatefulSets, ReplicaSets, DaemonSets, Jobs, CronJobs — and the
HorizontalPodAutoscalers that scale them: the pod rules at ``kubectl apply`` time, on the object applied.

* The pod template is admitted by the **Pod policy itself** (never a second copy of the rules): its violations come
  back with the template's path (``spec.template.metadata.annotations["volcano.sh/card.name"]``) and the same
  reason the pods would get. Pod-only facts are not checked on a template: it is not bound to a node, has no owner
  yet, and is not mutated (its pods are, when they are created).
* Quota feasibility is a **warning**, not a denial (the workload may be scaled later): when ``replicas`` pods of
  the template need more cards than the queue allows for every alternative together (each pod uses one type), it
  says so: ``2 replicas need 2 NVIDIA-A100, queue cr-queue1 allows 1``.
* An **autoscaling/v2 HorizontalPodAutoscaler** whose target is a card workload (in the snapshot) warns when
  ``maxReplicas`` pods would not fit, and says at how many replicas scale-up will stall.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cardquota.core import keys
from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest, effective_requests
from cardquota.core.policies.cards import CARD_REQUEST_PATH, request_against_queue
from cardquota.core.policies.common import ratcheting, warning_unknown_card_keys
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.gang import CardRole, as_derived, derivation, derived_request, gang_against_queue
from cardquota.core.policies.pod import admit as admit_pod
from cardquota.core.quota import card_alternatives, card_name_problem, card_request, clipped, quota_allows
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.usage import pending_cards
from cardquota.core.verdict import Verdict, allow, decide
from cardquota.core.violations import FieldPath, Violation, invalid, shown, warning_under
from cardquota.core.workload_kinds import TRAINER_GROUP, Gang, GroupShape, gang_of, not_checked_reason
from cardquota.core.workloads import TEMPLATE_PATHS, as_defaulted

SCALABLE = frozenset({("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet")})


@dataclass(frozen=True)
class CardTemplate:
    """What one pod of a workload takes: its card name, cards per pod, and the queue it is accounted to."""

    card_name: str
    cards_per_pod: int
    queue: str


def admit(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    """The verdict on a workload: its pod template through the Pod policy, and the quota feasibility warning."""
    group = str(manifest.get("apiVersion", "")).rpartition("/")[0]
    path = TEMPLATE_PATHS.get((group, str(manifest.get("kind", ""))))
    if path is None:
        return allow()
    template, problem = _template(manifest, path)
    where = FieldPath.of(*path)
    if problem is not None:
        return decide([invalid(where, problem)])
    assert template is not None
    namespace, name, deleting = _identity(manifest)
    previous = _template(old, path)[0] if old is not None else None
    violations, warnings = template_findings(template, where, namespace, name, previous, deleting, snapshot, config)
    if violations:
        return decide(violations, warnings)
    card = card_template(template, namespace, snapshot)
    replicas = _replicas(manifest, path)
    if card is not None and replicas is not None and snapshot.complete:
        capacity = pods_that_fit(card, snapshot)
        if capacity is not None and replicas > capacity:
            noun = "pods" if manifest.get("kind") in ("Job", "CronJob") else "replicas"
            noun = noun if replicas != 1 else noun[:-1]
            warnings.append(f"{replicas} {noun} need {replicas * card.cards_per_pod} {card.card_name}, queue "
                            f"{card.queue} allows {_allowed(card, snapshot)}")
    return decide([], warnings)


def _identity(manifest: Manifest) -> tuple[str, str, bool]:
    """A workload's namespace, name and whether it is being deleted."""
    metadata = manifest.get("metadata") if isinstance(manifest.get("metadata"), MAPPING_TYPES) else {}
    return (str((metadata or {}).get("namespace") or "default"), str((metadata or {}).get("name")),
            bool((metadata or {}).get("deletionTimestamp")))


def template_findings(template: Mapping[str, Any], where: FieldPath, namespace: str, name: str,
                      previous: Mapping[str, Any] | None, deleting: bool, snapshot: ClusterSnapshot,
                      config: PolicyConfig) -> tuple[list[Violation], list[str]]:
    """A pod template through the Pod policy, as a pod of it would be admitted, its violations at the template's
    path (``where``). ``previous``: the same template before this update (None on CREATE); a violation of a
    template that was already admitted (unchanged, or the workload being deleted) is said, not enforced: denying
    would only block scaling, rollouts' bookkeeping and deletion, and the pods are still checked one by one."""
    template_metadata = template.get("metadata")
    if template_metadata is not None and not isinstance(template_metadata, MAPPING_TYPES):
        return [invalid(where.child("metadata"), "must be a map")], []
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**(template_metadata if isinstance(template_metadata, MAPPING_TYPES) else {}),
                        "name": f"{name}-template", "namespace": namespace},
           "spec": as_defaulted(template.get("spec") or {})}
    verdict = admit_pod(pod, None, snapshot, config)
    violations = [violation.under(where) for violation in verdict.violations]
    warnings = [warning_under(where, warning) for warning in verdict.warnings]
    if violations and (deleting or (previous is not None and previous == template)):
        warnings = [*(f"{v.path}: {v.message} (already in the template before this update, so not denied)"
                      for v in violations), *warnings]
        violations = []
    return violations, warnings


def admit_hpa(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    """An autoscaling/v2 HorizontalPodAutoscaler: warns when ``maxReplicas`` pods of its card workload do not fit
    the queue, and says where scale-up will stall."""
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), MAPPING_TYPES) else {}
    target = (spec or {}).get("scaleTargetRef")
    maximum = (spec or {}).get("maxReplicas")
    if not isinstance(target, MAPPING_TYPES) or isinstance(maximum, bool) or not isinstance(maximum, int):
        return allow()  # the API server validates the HPA's own shape
    metadata = manifest.get("metadata") if isinstance(manifest.get("metadata"), MAPPING_TYPES) else {}
    namespace = str((metadata or {}).get("namespace") or "default")
    group = str(target.get("apiVersion", "")).rpartition("/")[0]
    key = (group, str(target.get("kind", "")), namespace, str(target.get("name", "")))
    workload = snapshot.workloads.get(key)
    if workload is None or (group, key[1]) not in SCALABLE:
        return allow()
    template, _ = _template(workload, TEMPLATE_PATHS[(group, key[1])])
    card = card_template(template, namespace, snapshot) if template is not None else None
    if card is None or not snapshot.complete:
        return allow()
    capacity = pods_that_fit(card, snapshot)
    if capacity is None or maximum <= capacity:
        return allow()
    return allow([f"scale-up of {key[1]} {namespace}/{key[3]} will stall at {capacity} "
                  f"replica{'s' if capacity != 1 else ''}: maxReplicas {maximum} would need "
                  f"{maximum * card.cards_per_pod} {card.card_name}, queue {card.queue} allows "
                  f"{_allowed(card, snapshot)}"])


def card_template(template: Mapping[str, Any], namespace: str, snapshot: ClusterSnapshot) -> CardTemplate | None:
    """The card facts of a pod template, None when it names no usable card type."""
    metadata = template.get("metadata") if isinstance(template.get("metadata"), MAPPING_TYPES) else {}
    annotations = (metadata or {}).get("annotations")
    annotations = annotations if isinstance(annotations, MAPPING_TYPES) else {}
    card_name = annotations.get(keys.CARD_NAME)
    if not isinstance(card_name, str) or card_name_problem(card_name) is not None:
        return None
    try:
        requests = effective_requests(template.get("spec") or {}, "spec")
    except InputError:
        return None
    per_pod = pending_cards(requests, snapshot.catalog().resources)
    if per_pod <= 0:
        return None
    queue = annotations.get(keys.QUEUE_NAME)
    written = queue if isinstance(queue, str) else None
    return CardTemplate(card_name, per_pod, snapshot.volcano_queue(written, namespace))


def pods_that_fit(card: CardTemplate, snapshot: ClusterSnapshot) -> int | None:
    """How many such pods the queue's card quota holds (each pod one type: the alternatives' shares added up);
    None when the queue is not in the snapshot."""
    record = snapshot.queues.get(card.queue)
    if record is None:
        return None
    quota = record.quota.values
    return sum(quota.get(alternative, 0) // card.cards_per_pod for alternative in card_alternatives(card.card_name))


def _allowed(card: CardTemplate, snapshot: ClusterSnapshot) -> str:
    record = snapshot.queues.get(card.queue)
    quota = record.quota.values if record is not None else {}
    alternatives = card_alternatives(card.card_name)
    if len(alternatives) == 1:
        return str(quota.get(alternatives[0], 0))
    return ", ".join(f"{quota.get(alternative, 0)} {alternative}" for alternative in alternatives)


def _template(manifest: Manifest, path: tuple[str, ...]) -> tuple[Mapping[str, Any] | None, str | None]:
    node: Any = manifest
    for step in path:
        node = node.get(step) if isinstance(node, MAPPING_TYPES) else None
        if node is None:
            return {}, None  # no template yet: nothing to check (the API server requires one where it must)
    if not isinstance(node, MAPPING_TYPES):
        return None, "must be a pod template (a map)"
    return node, None


def _replicas(manifest: Manifest, path: tuple[str, ...]) -> int | None:
    """How many pods run at once: ``spec.replicas`` (default 1), a Job's ``parallelism``; None for DaemonSets
    (one per node)."""
    kind = manifest.get("kind")
    if kind == "DaemonSet":
        return None
    holder: Any = manifest
    for step in path[:-1]:  # the object holding the template: spec (or the CronJob's job spec)
        holder = holder.get(step) if isinstance(holder, MAPPING_TYPES) else None
    if not isinstance(holder, MAPPING_TYPES):
        return None
    def count(name: str) -> int | None:
        value = holder.get(name, 1)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    if kind in ("Job", "CronJob"):  # at most parallelism pods run at once, and never more than completions
        parallelism = count("parallelism")
        completions = count("completions") if "completions" in holder else parallelism  # unset: a work queue
        return None if parallelism is None or completions is None else min(parallelism, completions)
    return count("replicas")


@warning_unknown_card_keys("workload")
@ratcheting
def admit_gang(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    """A registered workload kind (:mod:`cardquota.core.workload_kinds`: Kubeflow training jobs, KubeRay, JobSet,
    LeaderWorkerSet): each pod template through the Pod policy as its operator creates the pods (on Volcano: with
    the operator's queue and ``schedulerName``), at the template's path; then each PodGroup the operator creates,
    judged as a Volcano Job's gang is (:func:`~cardquota.core.policies.gang.gang_against_queue`): the cards of the
    ``minMember`` pods it must place together must fit the queue — else denied, it can never run — and the
    replicas beyond them that need more than the queue allows are said (they only wait). Which ``minMember`` pods
    the operator counts depends on an order cardquota cannot know offline (the training operator sorts roles by
    priority class, Go's map order among equals), so the gang is counted from the pods with the fewest cards: a
    denial holds whatever that order is."""
    runtimes = tuple(snapshot.trainer_runtimes.values())  # (a TrainJob's pods are built from its runtime)
    gang = gang_of(manifest, runtimes)
    if gang is None:
        reason = not_checked_reason(manifest, runtimes)
        return allow([f"kind {manifest.get('kind')} ({TRAINER_GROUP}) is not checked: {reason}"] if reason else [])
    namespace, name, deleting = _identity(manifest)
    previous = gang_of(old, runtimes) if old is not None else None
    before = {str(role.path): role.template for role in previous.roles} if previous is not None else {}
    queue = snapshot.volcano_queue(gang.queue, namespace)
    violations: list[Violation] = []
    warnings: list[str] = []
    created: dict[str, Mapping[str, Any]] = {}
    for role in {str(role.path): role for role in gang.roles}.values():  # (LWS: a leader of the worker template)
        template = as_created(role.template, gang, queue)
        created[str(role.path)] = template
        earlier = before.get(str(role.path))
        found, said = template_findings(template, role.path, namespace, name,
                                        as_created(earlier, gang, queue) if earlier is not None else None, deleting,
                                        snapshot, config)
        queue_written = str(role.path.child("metadata", "annotations").key(keys.QUEUE_NAME))
        violations.extend(dataclasses.replace(violation, path=gang.queue_path.text)  # (where the operator reads it)
                          if gang.volcano and violation.path == queue_written else violation for violation in found)
        warnings.extend(said)
    if gang.cut:
        warnings.append(f"only the first {len(gang.roles)} roles are checked ({gang.cut:,} more left out)")
    violations = list(dict.fromkeys(violations))  # (a queue missing: said once, not per role)
    warnings = list(dict.fromkeys(warnings))
    if violations or not gang.volcano:
        return decide(violations, warnings)
    if keys.CARD_REQUEST in gang.group_annotations:  # (written on the object; the operator copies it on)
        return decide(*_written_request(gang, queue, snapshot, warnings))
    for group in gang.groups:
        found, said = _group_against_queue(group, gang, created, queue, namespace, snapshot)
        violations.extend(found)
        warnings.extend(said)
    return decide(violations, warnings)


def _written_request(gang: Gang, queue: str, snapshot: ClusterSnapshot,
                     warnings: list[str]) -> tuple[list[Violation], list[str]]:
    """A ``volcano.sh/card.request`` written on the object, which its operator copies onto each PodGroup (KubeRay
    v1.7.0 ``createPodGroup`` copies every annotation of the owner, pkg/scheduler/volcano/volcano_scheduler.go;
    LeaderWorkerSet v0.10.0 ``inheritVolcanoAnnotations`` the ``volcano.sh/*`` ones): what Volcano enqueues the
    PodGroup by, so it is judged as a PodGroup's written request is, against the queue the PodGroup goes to."""
    request = card_request(gang.group_annotations)
    if request.violations:
        return list(request.violations), warnings
    fit, said = request_against_queue(request.values, queue, snapshot, CARD_REQUEST_PATH)
    return [violation.depending_on(gang.queue_path) for violation in fit], [*warnings, *said]


def as_created(template: Mapping[str, Any], gang: Gang, queue: str) -> Mapping[str, Any]:
    """A role's pod template as its operator creates the pods on Volcano: in the PodGroup's queue, with the
    operator's ``schedulerName`` where the template names none. Off Volcano, as written."""
    if not gang.volcano:
        return template
    metadata = template.get("metadata")
    metadata = metadata if isinstance(metadata, MAPPING_TYPES) else {}
    annotations = metadata.get("annotations")
    annotations = annotations if isinstance(annotations, MAPPING_TYPES) else {}
    spec = template.get("spec")
    spec = dict(spec) if isinstance(spec, MAPPING_TYPES) else {}
    if gang.scheduler is not None and not spec.get("schedulerName"):
        spec["schedulerName"] = gang.scheduler
    return {**template, "metadata": {**metadata, "annotations": {**annotations, keys.QUEUE_NAME: queue}},
            "spec": spec}


def _group_against_queue(group: GroupShape, gang: Gang, created: Mapping[str, Mapping[str, Any]], queue: str,
                         namespace: str, snapshot: ClusterSnapshot) -> tuple[list[Violation], list[str]]:
    members = [role for role in group.roles if role.in_gang]
    roles: list[CardRole] = []
    per_pod: list[int] = []
    for index, role in enumerate(members):
        card = card_template(created[str(role.path)], namespace, snapshot)
        per_pod.append(card.cards_per_pod if card is not None else 0)
        if card is not None:
            roles.append(CardRole(role.name, index, card.card_name, role.pods, card.cards_per_pod))
    if not roles:
        return [], []
    counts = [0] * len(members)
    left = group.min_member
    for index in sorted(range(len(members)), key=per_pod.__getitem__):  # the fewest cards first: a lower bound
        counts[index] = min(members[index].pods, left)
        left -= counts[index]
    wanted = derived_request(roles, counts)
    full = derived_request(roles, None)
    pods = sum(role.pods for role in members)
    first = next(group.names())
    said = f"its PodGroup {shown(first)} ({gang.what}, minMember {group.min_member})"

    def gang_said(key: str, amount: int) -> str:
        return f"{said} must start with {amount} {clipped(key)}"

    violations, warnings = gang_against_queue(wanted, full, pods, queue, snapshot, SPEC, gang_said) \
        if wanted else ([], [])
    violations = [violation.with_message(f"{said}: {violation.message}").depending_on(gang.queue_path)
                  for violation in as_derived(violations, SPEC, SPEC, "its pods", derivation(roles, counts, "role"))]
    if not violations and group.copies > 1:
        record = snapshot.queues.get(queue)
        for key, amount in full.items():
            allowed = quota_allows(key, record.quota.values) if record is not None else 0
            if record is not None and amount * group.copies > allowed:
                warnings.append(f"{group.copies} PodGroups like {shown(first)} need {amount * group.copies} "
                                f"{clipped(key)}, queue {shown(queue)} allows at most {allowed}: the groups "
                                "beyond it wait")
    return violations, warnings


SPEC = FieldPath.of("spec")
