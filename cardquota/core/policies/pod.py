"""Pod admission: card pods, mGPU pods and the crossquota scoring strategy. Plain pods are untouched.

A card pod (``volcano.sh/card.name``):

* the name is one type or ``A|B|…`` alternatives, no empty one;
* the pod requests the card type's resource, and the alternatives share one resource;
* the pod uses a card-aware scheduler (``spec.schedulerName`` in :attr:`PolicyConfig.card_aware_schedulers`);
* its queue (its PodGroup's once that exists, else ``scheduling.volcano.sh/queue-name``, else ``default``) has
  quota for at least one alternative;
* mutation on create: a required node-affinity term ``<vendor>/<type>.product In [products]`` added to every
  term the pod already has (terms are ORed, so adding it to each keeps the user's intent), and for alternatives
  preferred terms weighted by their order (100, 50, 25, …) — idempotent: a pod that has them gets no patch, so the
  webhook can be reinvoked after later mutations;
* with :attr:`PolicyConfig.card_gate`, also on create: cardquota's scheduling gate, which the controller lifts
  when the pod's cards fit its queue and every ancestor (:mod:`cardquota.core.gate`);
* on update (the webhook sees an update only when a ``volcano.sh/card.*`` annotation, the crossquota scoring
  strategy, ``container-multiple-gpu``, the pod's queue or PodGroup, or a bound pod's mGPU placement changes: the
  others the rules read are in the immutable spec): ``card.name`` of a pod bound to a node cannot change (its cards
  are counted under the name it was bound with), nor its mGPU placement (``vke.volcengine.com/gpu-index-container-*``,
  the extender's to write, whose writes the webhook lets through); the other rules are ratcheted (a violation the
  pod already had is a warning while the update leaves every value it depends on as it was:
  :data:`CARD_RULE_INPUTS` for the card rules).

mGPU rules (mgpu-design.md) and the crossquota strategy annotation apply to any pod.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from cardquota.core import keys
from cardquota.core.errors import InputError
from cardquota.core.gate import gate_operations, needs_gate
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest, Pod
from cardquota.core.policies.cards import (
    CARD_NAME_PATH,
    HELD_TO_0,
    card_name_resource_violations,
    card_product,
    listed_names,
    product_label,
    unknown_type_warnings,
)
from cardquota.core.policies.common import (
    did_you_mean_name,
    queue_not_found,
    ratcheting,
    read_view,
    skipped,
    warning_unknown_card_keys,
)
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.crossquota import scoring_strategy_violations
from cardquota.core.policies.mgpu import may_break_mgpu_rules, mgpu_violations
from cardquota.core.quantity import parse_quantity
from cardquota.core.quota import card_alternatives, card_name_violation
from cardquota.core.resources import card_requests
from cardquota.core.snapshot import CardCatalog, ClusterSnapshot, OutsideVolcano, UnquotedQueues
from cardquota.core.verdict import SHARED_OPERATIONS, PatchOperation, Verdict, decide, pointer
from cardquota.core.violations import (
    ANNOTATIONS,
    FieldPath,
    Violation,
    forbidden,
    invalid,
    not_supported,
    required,
    shown,
    written,
)

DEFAULT_SCHEDULER = keys.DEFAULT_SCHEDULER
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
AFFINITY_TYPOS = {
    "requiredDuringSchedulingIgnoreDuringExecution": REQUIRED,
    "preferredDuringSchedulingIgnoreDuringExecution": PREFERRED,
}


CARD_RULE_INPUTS = (CARD_NAME_PATH, ANNOTATIONS.key(keys.QUEUE_NAME), ANNOTATIONS.key(keys.GROUP_NAME),
                    FieldPath.of("spec", "schedulerName"), *(FieldPath.of("spec", name) for name in
                                                             ("containers", "initContainers", "overhead")))
"""What a card pod's rules read (:func:`_card_rules`): its card.name, its queue (the queue-name annotation, else its
PodGroup's), its scheduler and what it requests (the effective requests' fields)."""


@warning_unknown_card_keys("pod")
@ratcheting
def admit(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    pod, violations = read_view(Pod.from_manifest, manifest)
    if pod is None:
        return decide(violations)
    violations.extend(extended_resource_violations(manifest))
    violations.extend(_bound_pod_violations(pod, old))
    if may_break_mgpu_rules(pod.annotations, pod.requests):
        violations.extend(mgpu_violations(manifest))
    violations.extend(scoring_strategy_violations(pod.annotations))
    warnings = affinity_typo_warnings(manifest)
    patch: list[PatchOperation] = []
    if pod.card_name is not None:
        card_violations, card_warnings = _card_rules(pod, manifest, snapshot, config)
        card_violations = [violation.depending_on(*CARD_RULE_INPUTS) for violation in card_violations]
        violations.extend(card_violations)
        warnings.extend(card_warnings)
        if not card_violations and old is None:
            patch = _affinity_patch(manifest, pod.card_name, pod, snapshot.catalog())
            if config.card_gate and needs_gate(pod, snapshot):
                patch = [*patch, *gate_operations(manifest)]
    else:
        finding = outside_volcano_finding(pod, snapshot, gate=config.card_gate, creating=old is None)
        charged = not pod.bound and snapshot.charges_a_queue(pod)
        if finding is None and charged:
            group = missing_podgroup(pod, snapshot) if card_requests(pod.requests, snapshot.catalog().resources) \
                else None
            finding = group or unnamed_card_finding(pod.requests, snapshot.queue_of(pod), snapshot,
                                                    refuse=config.card_gate and old is None, creating=old is None)
        if isinstance(finding, Violation):
            violations.append(finding)
        elif finding is not None:
            warnings.append(finding)
        if charged and config.card_gate and old is None and pod.claims and not violations \
                and needs_gate(pod, snapshot):
            patch = gate_operations(manifest)  # (DRA claims under a DRA quota: the gate reads them)
    return decide(violations, warnings, patch)


def _bound_pod_violations(pod: Pod, old: Manifest | None) -> list[Violation]:
    """What an update cannot change once the pod is bound to a node: its card.name (its cards are counted under the
    name it was bound with) and its mGPU placement (:data:`~cardquota.core.keys.GPU_INDEX_PREFIX` annotations: the
    node's mGPU agent allocates by them and the scheduling rules count the pod's shares on those cards). The
    placement is the extender's to write: its writes, like cardquota's own, never reach a policy (the webhook lets
    its service account through, ``--extender-service-account``)."""
    if old is None:
        return []
    before, _ = read_view(Pod.from_manifest, old)
    if before is None or not before.node_name:
        return []
    node = shown(before.node_name)
    violations: list[Violation] = []
    if before.card_name != pod.card_name:
        was = shown(before.card_name) if before.card_name is not None else "none"
        violations.append(forbidden(CARD_NAME_PATH, f"cannot change on a pod bound to node {node} (was {was}): its "
                                                    "cards are counted under the name it was bound with; delete the "
                                                    "pod and create it with the new name"))
    placed = sorted({name for name in (*before.annotations, *pod.annotations)
                     if name.startswith(keys.GPU_INDEX_PREFIX)
                     and before.annotations.get(name) != pod.annotations.get(name)})
    if placed:
        more = f" (and {len(placed) - 1:,} more {keys.GPU_INDEX_PREFIX}* annotations)" if len(placed) > 1 else ""
        violations.append(forbidden(ANNOTATIONS.key(placed[0]),
                                    f"cannot change on a pod bound to node {node}{more}: it says which cards the "
                                    "container runs on, written by cardquota's extender when it placed the pod, and "
                                    "the node's mGPU agent allocates by it; delete the pod to place it again"))
    return violations


def _card_rules(pod: Pod, manifest: Manifest, snapshot: ClusterSnapshot,
                config: PolicyConfig) -> tuple[list[Violation], list[str]]:
    card_name = pod.card_name or ""
    violation = card_name_violation(card_name, CARD_NAME_PATH)
    if violation is not None:
        return [violation], []
    catalog = snapshot.catalog()
    alternatives = card_alternatives(card_name)
    violations = card_name_resource_violations(card_name, pod.requests, catalog, CARD_NAME_PATH, "the pod")
    scheduler = _scheduler_name(manifest)
    gate_holds_it = config.card_gate and snapshot.card_policy.outside_volcano is OutsideVolcano.ENFORCE
    if scheduler not in config.card_aware_schedulers and not gate_holds_it:
        aware = ", ".join(sorted(config.card_aware_schedulers))
        violations.append(not_supported(
            FieldPath.of("spec", "schedulerName"),
            f"{shown(scheduler)} does not enforce card quotas; a pod with {keys.CARD_NAME} must use {aware}",
        ))
    warnings = unknown_type_warnings(alternatives, snapshot)
    queue_name = snapshot.queue_of(pod)
    record = snapshot.queues.get(queue_name)
    queue = shown(queue_name)
    if snapshot.pod_queue_from_namespace(pod):  # (the queue Volcano's PodGroup mutation will give it)
        queue += f" (namespace {shown(pod.key[0])}'s {keys.QUEUE_NAME})"
    group = missing_podgroup(pod, snapshot)  # then the queue is only a guess: the PodGroup is what is said
    if group is not None:
        warnings.append(group)
    elif record is None:
        if snapshot.complete:
            violations.append(queue_not_found(QUEUE_NAME_PATH, queue_name, snapshot, said=queue))
        else:
            warnings.append(skipped(f"quota of queue {queue} for {shown(card_name)}"))
    elif not any(card in record.quota.values for card in alternatives):
        which = shown(card_name) if len(alternatives) == 1 else "any of " + ", ".join(map(shown, alternatives))
        violations.append(invalid(CARD_NAME_PATH, f"queue {queue} has no quota for {which}: {HELD_TO_0}"))
    return violations, warnings


QUEUE_NAME_PATH = ANNOTATIONS.key(keys.QUEUE_NAME)
GROUP_NAME_PATH = ANNOTATIONS.key(keys.GROUP_NAME)


def missing_podgroup(pod: Pod, snapshot: ClusterSnapshot) -> str | None:
    """A pod naming a PodGroup (``scheduling.k8s.io/group-name``) the complete snapshot does not hold: Volcano
    schedules a pod only with its PodGroup, in the PodGroup's queue, so the queue the pod would otherwise fall back to
    is only a guess and no queue rule denies it. Said, never denied: operators create a gang's PodGroup after its pods
    (LeaderWorkerSet's pod webhook names it, its pod controller creates it on reconciling the leader:
    ``InjectPodGroupMetadata`` in pkg/webhooks/pod_webhook.go and ``CreatePodGroupIfNotExists`` in
    pkg/controllers/pod_controller.go, lws v0.10.0), and a cache may lag; a misspelt name gets the closest PodGroups
    of its namespace."""
    if pod.group_key is None or not snapshot.complete or pod.group_key in snapshot.podgroups:
        return None
    namespace, name = pod.group_key[0], pod.group_key[1]
    others = (key[1] for key in snapshot.podgroups if key[0] == namespace)
    return (f"{GROUP_NAME_PATH}: PodGroup {shown(namespace)}/{shown(name)} does not exist yet"
            f"{did_you_mean_name(name, others)}: Volcano schedules a pod only with its PodGroup, in the PodGroup's "
            f"queue, so its queue's quota is judged once the PodGroup exists; if the name is misspelt, fix "
            f"{keys.GROUP_NAME}")


def _scheduler_name(manifest: Manifest) -> str:
    spec = manifest.get("spec")
    name = spec.get("schedulerName") if isinstance(spec, MAPPING_TYPES) else None
    return name if isinstance(name, str) and name else DEFAULT_SCHEDULER


def unnamed_card_finding(requests: Mapping[str, Fraction], queue: str, snapshot: ClusterSnapshot, *, refuse: bool,
                         creating: bool = True, path: FieldPath = CARD_NAME_PATH, subject: str = "the pod",
                         queue_path: FieldPath | None = None) -> Violation | str | None:
    """What is said of a pod (or a pod template: ``subject``, its card.name at ``path``) requesting a card resource
    without volcano.sh/card.name, charged to ``queue``: nothing when no card quota limits it
    (:meth:`~cardquota.core.snapshot.ClusterSnapshot.card_limit_queue`: unquoted queues are unlimited and neither
    the queue nor an ancestor has one) or it asks for no card; a violation when it is being created (``creating``)
    in a queue held to 0 cards because it has no card quota (``--unquoted-queues=zero``: it can never run);
    else a warning — or, with the card-quota gate (``refuse``), a violation giving the card.name
    that would admit it: the gate admits card pods by that name alone, and Volcano's extender, asked only at
    enqueue, would place an unnamed one past those quotas."""
    catalog = snapshot.catalog()
    requested = _offered_resources(requests, catalog)
    if not requested:
        return None
    queue_path = QUEUE_NAME_PATH if queue_path is None else queue_path
    limiting = snapshot.card_limit_queue(queue)
    if limiting is None:
        return None
    own = snapshot.queues.get(queue)
    asked, shown_queue = ", ".join(requested), shown(queue)
    limit = snapshot.queues.get(limiting)
    if limit is None or not limit.quota.values:  # no card quota: held to 0 (UnquotedQueues.ZERO)
        if own is None:
            if not snapshot.complete:
                return skipped(f"card quota of queue {shown_queue} for {asked}")
            missing = queue_not_found(queue_path, queue, snapshot)
            return missing.with_message(f"{missing.message}: {subject} requests {asked} there") if creating \
                else f"{missing.path}: {missing.message}"
        offered = _types_through(requested, catalog)
        types = f" (nodes offer {listed_names(offered)} through {asked})" if offered else ""
        message = (f"{subject} requests {asked} in queue {shown_queue}, which has no card quota ({keys.CARD_QUOTA}): "
                   f"a queue without one holds 0 cards "
                   f"(--unquoted-queues={UnquotedQueues.ZERO.value}, as the capacity-card design says), so it can "
                   f"never run; give queue {shown_queue} a card quota for the card type{types} and name it in "
                   f"{keys.CARD_NAME}, or run cardquota with --unquoted-queues={UnquotedQueues.UNLIMITED.value}")
        return invalid(path, message) if creating else message
    quotas = f"queue {shown_queue}'s card quota" if limiting == queue else \
        f"the card quota of queue {shown_queue}'s ancestor {shown(limiting)}"
    allowed = [name for name, amount in (own.quota.values if own is not None else {}).items()
               if amount > 0 and catalog.resource_of(name) in requested]
    if not refuse:
        if not allowed and limiting == queue and creating:  # (each type it could get is held to 0 there)
            offered = _types_through(requested, catalog)
            return invalid(path, f"{subject} requests {asked} in queue {shown_queue}, whose card quota lists no card "
                                 f"type offered through {asked}"
                                 f"{f' ({listed_names(offered)})' if offered else ''}: a card type without a quota "
                                 "is held to 0, so it can never run; add the type to the queue's "
                                 f"{keys.CARD_QUOTA} and name it in {keys.CARD_NAME}")
        return f"{subject} requests {asked} without {keys.CARD_NAME}: {quotas} cannot check it before it is scheduled"
    fix = (f"add the annotation {keys.CARD_NAME}: {shown('|'.join(allowed))} (the types of its quota offered through "
           f"{asked}), or one of them" if allowed else
           f"queue {shown_queue}'s quota has no card type offered through {asked} (a type without a quota is held "
           "to 0)")
    return required(path, f"{subject} requests {asked} in queue {shown_queue}: {quotas}, which the card-quota gate "
                          f"enforces by {keys.CARD_NAME}, would not hold it; {fix}")


def _offered_resources(requests: Mapping[str, Fraction], catalog: CardCatalog) -> list[str]:
    """The requested resources nodes offer as cards (a positive amount), sorted."""
    return sorted(name for name, amount in requests.items() if name in catalog.resources and amount > 0)


def _types_through(resources: list[str], catalog: CardCatalog) -> list[str]:
    """The card types nodes offer through one of ``resources``, sorted."""
    return sorted(card for card in catalog.entries if catalog.resource_of(card) in resources)


def outside_volcano_finding(pod: Pod, snapshot: ClusterSnapshot, *, gate: bool,
                            creating: bool) -> Violation | str | None:
    """What is said of an unbound pod requesting cards that Volcano does not schedule (another scheduler, no
    PodGroup), by ``--card-pods-outside-volcano`` (:class:`~cardquota.core.snapshot.OutsideVolcano`): ``warn``, a
    warning naming the quota that does not hold it; ``enforce`` without the card-quota gate, refused on creation
    (nothing could hold it: Volcano's extender never sees it); ``off``, or ``enforce`` with the gate (which holds it
    like Volcano's pods, :meth:`~cardquota.core.snapshot.ClusterSnapshot.charges_a_queue`), nothing here."""
    policy = snapshot.card_policy.outside_volcano
    if pod.bound or snapshot.volcano_schedules(pod) or policy is OutsideVolcano.OFF:
        return None
    if policy is OutsideVolcano.ENFORCE and gate:
        return None
    requested = _offered_resources(pod.requests, snapshot.catalog())
    if not requested:
        return None
    queue = snapshot.queue_of(pod)
    scheduler = shown(pod.scheduler or DEFAULT_SCHEDULER)
    volcano = ", ".join(sorted(snapshot.volcano_schedulers))
    if policy is OutsideVolcano.ENFORCE:
        message = (f"the pod requests {', '.join(requested)} with scheduler {scheduler}, which no card quota holds: "
                   f"card pods must be scheduled by {volcano} (--card-pods-outside-volcano=enforce; without the "
                   "card-quota gate nothing else can hold them)")
        return invalid(FieldPath.of("spec", "schedulerName"), message) if creating else message
    return (f"the pod requests {', '.join(requested)} with scheduler {scheduler}: Volcano charges no queue for it, so "
            f"no card quota holds it (--card-pods-outside-volcano=warn); with spec.schedulerName {volcano} it would "
            f"be charged to queue {shown(queue)}")


def _affinity_patch(manifest: Manifest, card_name: str, pod: Pod, catalog: CardCatalog) -> list[PatchOperation]:
    alternatives = card_alternatives(card_name)
    label = product_label(alternatives, pod.requests, catalog)
    products = tuple(dict.fromkeys(card_product(card, catalog) for card in alternatives))
    raw_spec = manifest.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, MAPPING_TYPES) else {}
    current = spec.get("affinity")
    operation = "replace" if "affinity" in spec else "add"
    if current is None:  # most pods: the same operation for every pod asking for these products
        return [SHARED_OPERATIONS.get(("pod-affinity", operation, label, products),
                                      lambda: _affinity_operation(operation, {}, label, products))]
    if not isinstance(current, MAPPING_TYPES) or not _product_terms(current, label, products, merge=False):
        return []  # (read without copying: on the validating webhook, after the mutation, the terms are there)
    return [_affinity_operation(operation, copy.deepcopy(dict(current)), label, products)]


def narrowed_affinity_operations(manifest: Manifest, card_type: str, catalog: CardCatalog) -> list[PatchOperation]:
    """For a gated pod let through the card-quota gate for ``card_type`` (one of its alternatives): the product
    requirement of that type added to every required node-affinity term, as the webhook adds it at creation — the
    one change Kubernetes allows to a gated pod's required terms (KEP-3838, GA in 1.27: added requirements are
    accepted while the pod has gates). None when the terms have it already."""
    return _affinity_patch(manifest, card_type, Pod.from_manifest(manifest), catalog)


def _affinity_operation(operation: str, affinity: dict[str, Any], label: str, products: tuple[str, ...]
                        ) -> PatchOperation:
    _product_terms(affinity, label, products, merge=True)
    return PatchOperation(op=operation, path=pointer("spec", "affinity"), value=affinity)


def _required_expression(label: str, products: tuple[str, ...]) -> dict[str, Any]:
    return {"key": label, "operator": "In", "values": list(products)}


def _preferred_terms(label: str, products: tuple[str, ...]) -> list[dict[str, Any]]:
    """For alternatives, one preferred term per product, weighted by its order (100, 50, 25, …)."""
    if len(products) < 2:
        return []
    return [{"weight": max(1, round(100 * 0.5**index)),
             "preference": {"matchExpressions": [{"key": label, "operator": "In", "values": [product]}]}}
            for index, product in enumerate(products)]


def _product_terms(affinity: Mapping[str, Any], label: str, products: tuple[str, ...], *, merge: bool) -> bool:
    """Whether ``affinity`` lacks the product terms (False when it is malformed). With ``merge`` (on a copy: it is
    changed in place) the missing terms are added; without, nothing is changed or copied (the validating webhook
    sees the mutated pod, whose terms are all there)."""
    node = _field(affinity, "nodeAffinity", {}, merge)
    if not isinstance(node, dict):
        return False
    required = _field(node, REQUIRED, {}, merge)
    if not isinstance(required, dict):
        return False
    terms = _field(required, "nodeSelectorTerms", [], merge)
    if not isinstance(terms, list) or not all(isinstance(term, dict) for term in terms):
        return False
    expression = _required_expression(label, products)
    lacking = not terms
    if lacking and merge:
        terms.append({"matchExpressions": [expression]})
    for term in terms:
        expressions = _field(term, "matchExpressions", [], merge)
        if not isinstance(expressions, list):
            return False
        if expression not in expressions:
            lacking = True
            if merge:
                expressions.append(expression)
    wanted = _preferred_terms(label, products)
    if wanted:
        preferred = _field(node, PREFERRED, [], merge)
        if not isinstance(preferred, list):
            return False
        for term in wanted:
            if term not in preferred:
                lacking = True
                if merge:
                    preferred.append(term)
    return lacking


def _field(parent: Mapping[str, Any], key: str, default: object, merge: bool) -> Any:
    """``parent[key]``, else ``default`` — set into ``parent`` when merging."""
    if merge and isinstance(parent, dict):
        return parent.setdefault(key, default)
    return parent.get(key, default)


def affinity_typo_warnings(manifest: Manifest) -> list[str]:
    """A pod's (or pod template's) node affinity fields misspelt so that Kubernetes ignores them."""
    spec = manifest.get("spec")
    affinity = spec.get("affinity") if isinstance(spec, MAPPING_TYPES) else None
    if affinity is None:  # most pods (None is told apart first: it is no dict, and Mapping's check is slow)
        return []
    node = affinity.get("nodeAffinity") if isinstance(affinity, MAPPING_TYPES) else None
    if node is None or not isinstance(node, MAPPING_TYPES):
        return []
    return [f"spec.affinity.nodeAffinity.{typo} is not a Kubernetes field and is ignored (did you mean {right}?)"
            for typo, right in AFFINITY_TYPOS.items() if typo in node]


def is_extended_resource(name: str) -> bool:
    """A resource name outside ``kubernetes.io`` (``nvidia.com/gpu``), not a quota's ``requests.``: Kubernetes
    counts it in whole units and never overcommits it (``IsExtendedResourceName``, pkg/apis/core/helper,
    Kubernetes v1.35)."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def extended_resource_violations(manifest: Manifest) -> list[Violation]:
    """What the API server refuses in a container's extended resources (``ValidateResourceRequirements`` in
    pkg/apis/core/validation/validation.go, Kubernetes v1.35), so offline ``check`` refuses it too: a quantity that
    is not a whole number ("must be an integer"), a request without a limit ("Limit must be set for non
    overcommitable resources") and a request unlike its limit ("must be equal to … limit of …"). Quantities that do
    not read are another rule's."""
    spec = manifest.get("spec")
    if not isinstance(spec, MAPPING_TYPES):
        return []
    violations: list[Violation] = []
    for list_name in ("containers", "initContainers"):
        containers = spec.get(list_name)
        for index, container in enumerate(containers if isinstance(containers, list) else []):
            resources = container.get("resources") if isinstance(container, MAPPING_TYPES) else None
            if not isinstance(resources, MAPPING_TYPES):
                continue
            path = FieldPath.of("spec", list_name).index(index).child("resources")
            sections = {name: resources.get(name) for name in ("requests", "limits")}
            amounts: dict[str, dict[str, Fraction]] = {}
            for section, listing in sections.items():
                amounts[section] = {}
                for name, value in (listing.items() if isinstance(listing, MAPPING_TYPES) else ()):
                    if not isinstance(name, str) or not is_extended_resource(name):
                        continue
                    try:
                        amount = parse_quantity(value)
                    except InputError:
                        continue
                    amounts[section][name] = amount
                    if amount.denominator != 1:
                        violations.append(invalid(path.child(section).key(name), f"{written(value)}: must be an "
                                                  "integer (an extended resource is counted in whole units)"))
            for name, amount in amounts["requests"].items():
                if name not in amounts["limits"]:
                    if not (isinstance(sections["limits"], MAPPING_TYPES) and name in sections["limits"]):
                        violations.append(required(path.child("limits").key(name),
                                                   "Limit must be set for non overcommitable resources"))
                elif amount != amounts["limits"][name]:
                    violations.append(invalid(path.child("requests").key(name),
                                              f"{written(resources['requests'][name])}: must be equal to {name} "
                                              f"limit of {resources['limits'][name]}"))
    return violations
