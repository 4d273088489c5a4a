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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cardquota.core import keys
from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest, effective_requests
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.pod import DEFAULT_SCHEDULER
from cardquota.core.policies.pod import admit as admit_pod
from cardquota.core.quota import card_alternatives, card_name_problem
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.usage import pending_cards
from cardquota.core.verdict import Verdict, allow, decide
from cardquota.core.violations import FieldPath, invalid
from cardquota.core.workloads import TEMPLATE_PATHS

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
    metadata = manifest.get("metadata") if isinstance(manifest.get("metadata"), MAPPING_TYPES) else {}
    namespace = str((metadata or {}).get("namespace") or "default")
    template_metadata = template.get("metadata")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**(template_metadata if isinstance(template_metadata, MAPPING_TYPES) else {}),
                        "name": f"{(metadata or {}).get('name')}-template", "namespace": namespace},
           "spec": as_defaulted(template.get("spec") or {})}
    if template_metadata is not None and not isinstance(template_metadata, MAPPING_TYPES):
        return decide([invalid(where.child("metadata"), "must be a map")])
    verdict = admit_pod(pod, None, snapshot, config)
    violations = [violation.under(where) for violation in verdict.violations]
    warnings = list(verdict.warnings)
    deleting = bool((metadata or {}).get("deletionTimestamp"))
    if violations and (deleting or _template_unchanged(old, path, template)):
        # The template was admitted before (the queue or the cluster changed since): denying now would only block
        # scaling, rollouts' bookkeeping and deletion. Said, not enforced; the pods are still checked one by one.
        warnings = [*(f"{v.path}: {v.message} (already in the template before this update, so not denied)"
                      for v in violations), *warnings]
        violations = []
    if violations:
        return decide(violations, verdict.warnings)
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


def as_defaulted(spec: Any) -> Any:
    """A pod template's spec as the API server stores it: ``schedulerName`` defaults to ``default-scheduler``
    (``SetDefaults_PodSpec``, k8s.io/kubernetes pkg/apis/core/v1/defaults.go, v1.35 — run on the templates of
    Deployments and the other workloads too), so a template offline that names no scheduler is not Volcano's."""
    if isinstance(spec, MAPPING_TYPES) and not spec.get("schedulerName"):
        return {**spec, "schedulerName": DEFAULT_SCHEDULER}
    return spec


def _template_unchanged(old: Manifest | None, path: tuple[str, ...], template: Mapping[str, Any]) -> bool:
    if old is None:
        return False
    previous, _ = _template(old, path)
    return previous == template


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
