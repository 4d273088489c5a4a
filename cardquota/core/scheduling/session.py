"""A scheduling session: the cluster as the scheduler sees it in one cycle, and the plugins' rules applied to it.

The same object answers the extender's verbs and runs ``cardquota simulate``: card usage comes from the
:class:`Ledger` (so the numbers match ``kubectl get queue`` and the events), CPU/memory and DRA usage per queue and
resource usage per node are added up from the bound pods, and every allocation in the session updates them.

Rules per step (each one the design's, from :mod:`capacity_card`, :mod:`crossquota`, :mod:`mgpu`, :mod:`dra`):

* ``enqueue_refusal`` — a PodGroup's ``minResources`` cpu/memory against its queue's capability (unless it is a card
  job and ``cardUnlimitedCpuMemory`` is on), then its card.request in job mode
  (:func:`capacity_card.podgroup_enqueue_refusal`, on the ledger's counts, so a job enqueued in the session reserves
  its cpu, memory and cards for the jobs after it);
* ``task_refusal`` — the task's queue: card quota in task mode, CPU/memory unless ``cardUnlimitedCpuMemory``
  (under which a card task's cpu/memory does not count against its queue either, as the plugin counts it), the DRA
  quota up the queue hierarchy;
* ``node_refusal`` — the plugins' node filters: the card type the node offers for the task's card resource is one
  of its alternatives with quota left, crossquota for CPU pods on GPU nodes, the mGPU filter and allocation;
* ``fit_refusal`` — what Volcano's own predicates check (``simulate`` only): resources, node selector, required
  node affinity, taints;
* ``score`` — capacity-card node order + crossquota score + mGPU allocation score.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from cardquota.core.dra_claims import CLAIM_KINDS, claim_refs, pod_request
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.keys import GPU_INDEX_PREFIX
from cardquota.core.ledger import Ledger
from cardquota.core.objects import CPU_MEMORY, Manifest, ObjectKey, Pod, PodGroup, namespaced_key
from cardquota.core.quota import card_alternatives
from cardquota.core.resources import card_requests
from cardquota.core.schedconf.extender import plugin_arguments, plugin_entries
from cardquota.core.schedconf.reader import read_conf
from cardquota.core.schedconf.source import arguments_text
from cardquota.core.scheduling import capacity_card, crossquota, dra, mgpu
from cardquota.core.scheduling.predicates import required_affinity_matches, untolerated_taint
from cardquota.core.scheduling.refusal import Refusal
from cardquota.core.snapshot import DEFAULT_CARD_POLICY, CardPolicy, Kind, kind_of
from cardquota.core.usage import cards_on_node

CARD_TYPE_MISMATCH = "NodeCardTypeMismatch"
UNSCHEDULABLE = "Unschedulable"
NODES_AVAILABLE = "nodes are available"
"""The words of the scheduler-style summary of a pod no node can take (``0/3 nodes are available: …``)."""


@dataclass(frozen=True)
class SchedulerConfig:
    """The plugins' arguments from ``volcano-scheduler.conf`` (crossquota and mGPU only when enabled there)."""

    capacity_card: capacity_card.CapacityCardConfig = field(default_factory=capacity_card.CapacityCardConfig)
    crossquota: crossquota.CrossQuotaConfig | None = None
    mgpu: mgpu.MGPUConfig = field(default_factory=mgpu.MGPUConfig)
    scheduler_names: frozenset[str] = frozenset({"volcano"})
    """Pods of these schedulers placed in the session count against their queue's cpu/memory/DRA quota even without
    a PodGroup (Volcano's controller gives them one before they are scheduled)."""
    map_namespace_queues: bool = False
    """Whether Volcano maps namespaces to queues (:attr:`ClusterSnapshot.map_namespace_queues
    <cardquota.core.snapshot.ClusterSnapshot.map_namespace_queues>`): the PodGroups a replay creates, and pods
    without one yet, follow their namespace's queue."""
    card_policy: CardPolicy = DEFAULT_CARD_POLICY
    """cardquota's card-quota settings (:class:`~cardquota.core.snapshot.CardPolicy`), given to the session's
    ledger."""

    @classmethod
    def from_conf(cls, text: str) -> SchedulerConfig:
        """From the text of ``volcano-scheduler.conf`` (raises InputError when it is not YAML)."""
        plugins = plugin_arguments(plugin_entries(read_conf(text)))
        return cls(
            capacity_card=capacity_card.CapacityCardConfig.from_arguments(plugins.get(capacity_card.PLUGIN, {})),
            crossquota=(crossquota.CrossQuotaConfig.from_arguments(plugins[crossquota.PLUGIN])
                        if crossquota.PLUGIN in plugins else None),
            mgpu=mgpu.MGPUConfig.from_arguments(plugins.get("predicates", {})),
        )

    @classmethod
    def from_manifests(cls, manifests: Iterable[Manifest], configmap: str) -> SchedulerConfig:
        """From the ConfigMap among ``manifests`` the plugins' arguments are read from (the extender's conf, else
        the scheduler ConfigMap ``configmap``: :func:`~cardquota.core.schedconf.source.arguments_text`, the one
        reading the extender, the CLI and the controller share); the defaults when there is none."""
        return read_scheduler_config(manifests, configmap).config


@dataclass(frozen=True)
class ReadSchedulerConfig:
    """The plugins' arguments an offline command applies, and a line saying which and where they came from."""

    config: SchedulerConfig
    found: bool
    """Whether a ConfigMap was found (else ``config`` holds the plugins' defaults)."""
    note: str
    """``read: cardUnlimitedCpuMemory=true, … from ConfigMap volcano-system/volcano-scheduler-configmap`` or
    ``assumed: cardUnlimitedCpuMemory=false, … (no extender ConfigMap … in the input)``: a verdict that depends on
    them says what it rests on (the same job is "never enqueued" or "Running" by ``cardUnlimitedCpuMemory``)."""


NOTED_ARGUMENTS = ((capacity_card.PLUGIN, capacity_card.CARD_UNLIMITED_CPU_MEMORY),
                   ("predicates", "predicate.MGPUEnable"))
"""The arguments a note names (besides whether crossquota is on): those that change what is enqueued or placed."""


def read_scheduler_config(manifests: Iterable[Manifest], configmap: str, where: str = "the input"
                          ) -> ReadSchedulerConfig:
    """:meth:`SchedulerConfig.from_manifests`, with its note (``where``: what ``manifests`` are, for the note)."""
    source = arguments_text(manifests, configmap)
    if source.text is None:
        config = SchedulerConfig()
        return ReadSchedulerConfig(config, False, f"assumed: {_noted(config)} (the plugins' defaults: {source.source} "
                                           f"in {where})")
    config = SchedulerConfig.from_conf(source.text)
    plugins = plugin_arguments(plugin_entries(read_conf(source.text)))
    unwritten = [argument for plugin, argument in NOTED_ARGUMENTS if argument not in plugins.get(plugin, {})]
    note = f"read: {_noted(config)} from {source.source}"
    if unwritten:
        note += f" ({', '.join(unwritten)} not written there: the default)"
    return ReadSchedulerConfig(config, True, note)


def _noted(config: SchedulerConfig) -> str:
    values = {capacity_card.CARD_UNLIMITED_CPU_MEMORY: config.capacity_card.card_unlimited_cpu_memory,
              "predicate.MGPUEnable": config.mgpu.enabled}
    said = [f"{argument}={str(values[argument]).lower()}" for _, argument in NOTED_ARGUMENTS]
    return ", ".join([*said, f"crossquota {'off' if config.crossquota is None else 'on'}"])


@dataclass(frozen=True)
class Placement:
    node: str
    card_type: str | None
    annotations: Mapping[str, str]
    """What the pod gets on allocation (the mGPU result annotations), empty when nothing."""


@dataclass(frozen=True)
class _QueueUse:
    """What one bound pod uses beside cards (those are the ledger's, :mod:`cardquota.core.usage`): cpu/memory of
    its queue, DRA devices of it and of every queue above."""

    queue: str
    cpu_memory: Mapping[str, Fraction]
    devices: dra.DeviceAmounts
    ancestry: tuple[str, ...]


_POD_METADATA_READ = ("name", "namespace", "generateName", "uid", "resourceVersion", "labels", "annotations",
                      "deletionTimestamp")
_POD_SPEC_READ = ("nodeName", "schedulerName", "overhead", "resourceClaims", "nodeSelector", "affinity", "tolerations",
                  "schedulingGates", "priority")
"""(``schedulingGates``: a pod waiting at cardquota's gate reserves nothing at enqueue,
:func:`~cardquota.core.usage.group_charge`; ``priority``: what preemption weighs, :mod:`cardquota.core.preemption`.)"""
_CONTAINER_READ = ("name", "resources", "restartPolicy")


def watched_pod(manifest: Manifest) -> Manifest:
    """What the session reads of a pod: its identity, labels and annotations, where it runs and what it requests
    (containers' names and resources, overhead, claims, placement constraints), its scheduling gates and priority,
    and its phase. A pod as the API
    server returns it is 4 to 8 KB of env, volumes, status and managedFields no rule reads, and a session kept by
    watches holds every pod of the cluster."""
    metadata, spec, status = (manifest.get(name) for name in ("metadata", "spec", "status"))
    if not (isinstance(metadata, MAPPING_TYPES) and isinstance(spec, MAPPING_TYPES)):
        return manifest  # (unreadable: the ledger says why)
    kept_spec: dict[str, Any] = {name: spec[name] for name in _POD_SPEC_READ if name in spec}
    for name in ("containers", "initContainers"):
        containers = spec.get(name)
        if isinstance(containers, list):
            kept_spec[name] = [{key: container[key] for key in _CONTAINER_READ if key in container}
                               if isinstance(container, MAPPING_TYPES) else container for container in containers]
        elif name in spec:
            kept_spec[name] = containers
    phase = status.get("phase") if isinstance(status, MAPPING_TYPES) else None
    kept_metadata = {name: metadata[name] for name in _POD_METADATA_READ if name in metadata}
    if "schedulingGates" in kept_spec and "creationTimestamp" in metadata:  # (a gated pod's order: the gate's state)
        kept_metadata["creationTimestamp"] = metadata["creationTimestamp"]
    return {"apiVersion": manifest.get("apiVersion"), "kind": manifest.get("kind"),
            "metadata": kept_metadata,
            "spec": kept_spec, "status": {} if phase is None else {"phase": phase}}


def _holds_node(pod: Pod) -> bool:
    return pod.bound and not pod.terminated


def _node_facts(node: Manifest) -> tuple[object, ...]:
    """What the rules read of a node (labels, annotations, allocatable, taints): a change elsewhere is a heartbeat."""
    metadata = node.get("metadata") or {}
    return (metadata.get("labels"), metadata.get("annotations"), (node.get("status") or {}).get("allocatable"),
            (node.get("spec") or {}).get("taints"), (node.get("spec") or {}).get("unschedulable"))


class Session:
    """The cluster as the scheduler sees it, and the scheduling rules over it: built from a list of objects, then
    kept current by watch events (:meth:`upsert`, :meth:`delete`) and by the cycle's own allocations."""

    def __init__(self, manifests: Iterable[Manifest], config: SchedulerConfig | None = None) -> None:
        self.config = config or SchedulerConfig()
        accounted: list[Manifest] = []
        self.nodes: dict[str, Manifest] = {}
        self.pods: dict[ObjectKey, Manifest] = {}
        self.queue_specs: dict[str, Mapping[str, Any]] = {}
        claims: list[Manifest] = []
        self.podgroup_conditions: dict[ObjectKey, list[Any]] = {}
        """``status.conditions`` of the PodGroups that have some (the scheduler's last word, for ``explain``)."""
        for manifest in manifests:
            kind = kind_of(manifest)
            if kind is not None:
                accounted.append(manifest)
            name = (manifest.get("metadata") or {}).get("name", "")
            namespace = (manifest.get("metadata") or {}).get("namespace") or "default"
            if kind is Kind.NODE:
                self.nodes[name] = manifest
            elif kind is Kind.POD:
                self.pods[(namespace, name)] = manifest
            elif kind is Kind.PODGROUP:
                conditions = (manifest.get("status") or {}).get("conditions")
                if isinstance(conditions, list) and conditions:
                    self.podgroup_conditions[(namespace, name)] = conditions
            elif kind is Kind.QUEUE:
                spec = manifest.get("spec")
                self.queue_specs[name] = spec if isinstance(spec, MAPPING_TYPES) else {}
            elif manifest.get("kind") in CLAIM_KINDS:
                claims.append(manifest)
        self.ledger = Ledger.build(accounted, map_namespace_queues=self.config.map_namespace_queues,
                                   volcano_schedulers=self.config.scheduler_names, card_policy=self.config.card_policy)
        for manifest in claims:  # (kept by the ledger, which the card-quota gate reads too)
            self.ledger.upsert_claim(manifest)
        self.node_used: dict[str, dict[str, Fraction]] = {name: {} for name in self.nodes}
        self.node_pods: dict[str, set[ObjectKey]] = {name: set() for name in self.nodes}
        self.queue_used: dict[str, dict[str, Fraction]] = {}
        self._queue_uses: dict[ObjectKey, _QueueUse] = {}
        """Per bound pod, what it uses of its queue and the queues above (taken back exactly on release)."""
        self._parents: dict[str, str] | None = None
        self._members: dict[ObjectKey, set[ObjectKey]] = {}
        """Pods per PodGroup (of the pods the session holds), to recharge them when their group changes queue."""
        self.queue_dra: dict[str, dra.DeviceAmounts] = {}
        self._nodes_by_card_type: dict[str, list[str]] | None = None
        self._mgpu_results: dict[ObjectKey, dict[str, tuple[int, mgpu.Allocation | Refusal | None]]] = {}
        """Per pod and node, the mGPU result and the session version it was computed at (dropped with the pod)."""
        self.releases = 0
        """Counts the pods unbound or removed, and nodes added: what can make a node fit a pod it refused."""
        self.version = 0
        """Counts every change of the session (any allocation, release, pod, node or phase added or changed)."""
        for key, pod in self.ledger.snapshot.pods.items():
            self._index_member(key, None, pod)
            if _holds_node(pod):
                self._add_use(key, pod, +1)

    # ------------------------------------------------------------------------------------------------ facts

    @property
    def parents(self) -> dict[str, str]:
        """Each queue's parent (kept until a queue changes: read once per bound pod charged)."""
        if self._parents is None:
            self._parents = {name: record.queue.parent for name, record in self.ledger.snapshot.queues.items()}
        return self._parents

    @property
    def claims(self) -> dict[ObjectKey, dra.DeviceAmounts]:
        """DRA ResourceClaims, what each asks (the ledger's)."""
        return self.ledger.snapshot.claims

    @property
    def claim_templates(self) -> dict[ObjectKey, dra.DeviceAmounts]:
        return self.ledger.snapshot.claim_templates

    def view(self, key: ObjectKey) -> Pod:
        return self.ledger.snapshot.pods[key]

    def queue_of(self, key: ObjectKey) -> str:
        return self.ledger.queue_of(self.view(key))

    def quota(self, queue: str) -> Mapping[str, int]:
        record = self.ledger.snapshot.queues.get(queue)
        return record.quota.values if record is not None else {}

    def cards_wanted(self, key: ObjectKey) -> int:
        """Whole cards the pod asks for (as the ledger counts them: its card resources)."""
        charge = self.ledger.pod_charge(key)
        return sum(charge.cards.values()) if charge is not None else 0

    def uses_cards(self, key: ObjectKey) -> bool:
        """Whether the pod is a card task to capacity-card (its cpu/memory exempt under ``cardUnlimitedCpuMemory``):
        it is charged cards, or requests a resource nodes offer as cards, with or without ``volcano.sh/card.name``
        (the plugin's ``HasCardResource`` at 61a5f00 looks at the task's requests too)."""
        return self.cards_wanted(key) > 0 or bool(card_requests(self.view(key).requests,
                                                                self.ledger.card_resources))

    def node_card_type(self, key: ObjectKey, node: str) -> str | None:
        """The card type ``node`` offers for the pod's card resource (None when it offers none it asks for)."""
        return next(iter(self.cards_on(key, node)), None)

    def cards_on(self, key: ObjectKey, node: str) -> dict[str, int]:
        """What the pod would be charged bound to ``node``, per card type: the ledger's own rule
        (:func:`~cardquota.core.usage.cards_on_node`), so a check on a node and the charge after it agree."""
        return cards_on_node(self.view(key).requests, self.ledger.snapshot.nodes.get(node))

    def wants_mgpu(self, key: ObjectKey) -> bool:
        """Whether the pod asks for mGPU shares the session places (mGPU enabled): its placement writes annotations."""
        return self.config.mgpu.enabled and bool(mgpu.pod_shares(self.pods[key]))

    def dra_request(self, key: ObjectKey) -> dra.DeviceAmounts:
        spec = self.pods[key].get("spec")
        return pod_request(key[0], claim_refs(spec if isinstance(spec, MAPPING_TYPES) else {},
                                              self.pods[key].get("status")), self.claims, self.claim_templates)

    # ------------------------------------------------------------------------------------------------ rules

    def enqueue_refusal(self, group: PodGroup) -> capacity_card.EnqueueRefusal | None:
        """capacity-card's enqueue check for a PodGroup: its cpu/memory, then its ``volcano.sh/card.request``."""
        return capacity_card.podgroup_enqueue_refusal(group, self.ledger, self.config.capacity_card)

    def enqueue_is_judged(self, group: PodGroup) -> bool:
        """Whether capacity-card has a say in enqueueing ``group`` (cards, or cpu/memory its queue limits)."""
        return capacity_card.enqueue_is_judged(group, self.ledger, self.config.capacity_card)

    def task_refusal(self, key: ObjectKey) -> Refusal | None:
        """The queue-level checks of one task (the scheduler's AllocatableFn)."""
        pod = self.view(key)
        queue = self.queue_of(key)
        record = self.ledger.snapshot.queues.get(queue)
        if record is not None and (closed := capacity_card.queue_state_refusal(
                queue, record.queue.state, "it allocates no new task")) is not None:
            return closed
        wanted = self.cards_wanted(key)
        if pod.card_name is not None:
            problem = capacity_card.card_request_problem(pod.card_name, wanted)
            if problem is not None:
                return capacity_card.request_failed(pod.card_name, problem)
            refusal = capacity_card.task_allocate_refusal(queue, pod.card_name, wanted, self.quota(queue),
                                                          self.ledger.usage(queue).allocated)
            if refusal is not None:
                return refusal
        spec = self.queue_specs.get(queue)
        if spec is not None:  # a queue that exists: its cpu/memory capability applies
            refusal = capacity_card.cpu_memory_refusal(
                queue, pod.requests, capacity_card.queue_capability(spec), self.queue_used.get(queue, {}),
                uses_cards=self.uses_cards(key), config=self.config.capacity_card)
            if refusal is not None:
                return refusal
        request = self.dra_request(key)
        if request:
            return dra.quota_refusal(queue, request, self.queue_dra, self.queue_specs, self.parents)
        return None

    def node_refusal(self, key: ObjectKey, node: str) -> Refusal | None:
        """The plugins' node filters for one task on one node."""
        pod = self.view(key)
        if pod.card_name is not None:
            card_type = self.node_card_type(key, node)
            alternatives = card_alternatives(pod.card_name)
            if card_type is None or card_type not in alternatives:
                offered = f"offers {card_type}" if card_type else "offers no card type for the pod's card resource"
                return Refusal(CARD_TYPE_MISMATCH, f"node {node} {offered}, not one of {pod.card_name}")
            queue = self.queue_of(key)
            wanted = self.cards_wanted(key)
            allocated = self.ledger.usage(queue).allocated
            capability = self.quota(queue)
            if card_type not in capacity_card.fitting_alternatives(pod.card_name, wanted, capability, allocated):
                return Refusal(capacity_card.INSUFFICIENT_SCALAR, capacity_card.insufficient(
                    queue, card_type, wanted, allocated.get(card_type, 0) + wanted, capability.get(card_type, 0)))
        elif self.ledger.snapshot.charges_a_queue(pod):  # (another scheduler's pod: Volcano charges no queue)
            charged = self.cards_on(key, node)
            if charged:
                queue = self.queue_of(key)
                refusal = capacity_card.charged_cards_refusal(
                    queue, charged, self.quota(queue), self.ledger.usage(queue).allocated,
                    unquoted_hold_zero=self.ledger.snapshot.card_policy.unquoted_hold_zero)
                if refusal is not None:
                    return refusal
        refusal = self._crossquota_refusal(key, node)
        if refusal is not None:
            return refusal
        mgpu_result = self._mgpu(key, node)
        return mgpu_result if isinstance(mgpu_result, Refusal) else None

    def fit_refusal(self, key: ObjectKey, node: str) -> Refusal | None:
        """What Volcano's own predicates would check: resources left, node selector, required node affinity,
        taints (``simulate`` replaces the whole scheduler; the extender leaves these to Volcano)."""
        manifest = self.nodes[node]
        pod_spec = self.pods[key].get("spec") or {}
        labels = (manifest.get("metadata") or {}).get("labels") or {}
        selector = pod_spec.get("nodeSelector") or {}
        if any(labels.get(name) != value for name, value in selector.items()):
            return Refusal(UNSCHEDULABLE, "node(s) didn't match Pod's node selector")
        if not required_affinity_matches(pod_spec, labels, node):
            return Refusal(UNSCHEDULABLE, "node(s) didn't match Pod's node affinity")
        taint = untolerated_taint(pod_spec, manifest)
        if taint is not None:
            return Refusal(UNSCHEDULABLE, f"node(s) had untolerated taint {{{taint}}}")
        record = self.ledger.snapshot.nodes[node]
        used = self.node_used.get(node, {})
        for resource, amount in self.view(key).requests.items():
            if amount > 0 and used.get(resource, Fraction(0)) + amount > record.node.allocatable.get(resource, 0):
                return Refusal(UNSCHEDULABLE, f"Insufficient {resource}")
        pods = record.node.allocatable.get("pods")
        if pods is not None and len(self.node_pods.get(node, ())) + 1 > pods:
            return Refusal(UNSCHEDULABLE, "Too many pods")
        return None

    def preference_groups(self, key: ObjectKey) -> list[list[str]] | None:
        """For a card pod whose score depends on nothing but the card type a node offers (no crossquota, no mGPU):
        the candidate nodes, grouped by alternative in the pod's order (so by falling score), each sorted by name.
        None when the score may differ otherwise, and every node must be scored."""
        pod = self.view(key)
        if pod.card_name is None:
            return None
        crossquota_config = self.config.crossquota
        if crossquota_config is not None and crossquota.is_cpu_pod(pod.requests, crossquota_config):
            return None
        if self.config.mgpu.enabled and mgpu.pod_shares(self.pods[key]):
            return None
        if self._nodes_by_card_type is None:
            self._nodes_by_card_type = {}
            for name in sorted(self.nodes):
                record = self.ledger.snapshot.nodes.get(name)
                for card in record.cards.types if record is not None else ():
                    self._nodes_by_card_type.setdefault(card, []).append(name)
        return [self._nodes_by_card_type.get(card, []) for card in dict.fromkeys(card_alternatives(pod.card_name))]

    def score(self, key: ObjectKey, node: str) -> float:
        pod = self.view(key)
        record = self.ledger.snapshot.nodes.get(node)
        types = record.cards.types if record is not None else {}
        total = capacity_card.node_order_score(pod.card_name, types, self.config.capacity_card)
        total += self._crossquota_score(key, node)
        mgpu_result = self._mgpu(key, node)
        if isinstance(mgpu_result, mgpu.Allocation):
            total += mgpu_result.score
        return total

    # -------------------------------------------------------------------------------------------- allocation

    def add_pending(self, manifest: Manifest) -> ObjectKey:
        """A pod (a workload's), as an unbound pod; one the session holds bound is released first."""
        self.version += 1
        existing = self.ledger.snapshot.pods.get(Pod.from_manifest(manifest).key)
        if existing is not None:
            self.deallocate(existing.key)
        spec = dict(manifest.get("spec") or {})
        spec.pop("nodeName", None)
        pending = {**manifest, "spec": spec, "status": {"phase": "Pending"}}
        self.ledger.upsert(pending)
        key = Pod.from_manifest(pending).key
        self.pods[key] = pending
        return key

    def set_phase(self, manifest: Manifest, phase: str) -> None:
        """Move a PodGroup (its manifest) to ``phase`` in the session (Inqueue reserves its card.request)."""
        self.version += 1
        self.ledger.upsert({**manifest, "status": {**(manifest.get("status") or {}), "phase": phase}})

    def set_group_phase(self, key: ObjectKey, phase: str) -> None:
        """Move a PodGroup the session holds to ``phase`` (nothing when it holds none)."""
        group = self.ledger.snapshot.podgroups.get(key)
        if group is None or group.phase == phase:
            return
        self.version += 1
        self.ledger.upsert_podgroup(replace(group, phase=phase))

    def allocate(self, key: ObjectKey, node: str) -> Placement:
        """Bind the pod to ``node`` in the session: usage moves, the mGPU cards are taken."""
        mgpu_result = self._mgpu(key, node)
        self.version += 1
        annotations: dict[str, str] = {}
        if isinstance(mgpu_result, mgpu.Allocation):
            model = self._mgpu_model(node)
            if model is not None:
                annotations = mgpu.result_annotations(mgpu_result, model, self.config.mgpu)
        card_type = self.node_card_type(key, node)
        manifest = self.pods[key]
        metadata = dict(manifest.get("metadata") or {})
        metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
        bound = {**manifest, "metadata": metadata, "spec": {**(manifest.get("spec") or {}), "nodeName": node},
                 "status": {"phase": "Running"}}
        self.ledger.upsert(bound)
        self.pods[key] = bound
        self._add_use(key, self.view(key), +1, placed_here=True)
        return Placement(node, card_type, annotations)

    def deallocate(self, key: ObjectKey) -> None:
        """Undo :meth:`allocate` (or release a bound pod): the pod is unbound again."""
        self.version += 1
        pod = self.ledger.snapshot.pods.get(key)
        if pod is None or not pod.bound:
            return
        self.releases += 1
        self._add_use(key, pod, -1)
        manifest = self.pods[key]
        spec = dict(manifest.get("spec") or {})
        spec.pop("nodeName", None)
        metadata = dict(manifest.get("metadata") or {})
        metadata["annotations"] = {name: value for name, value in (metadata.get("annotations") or {}).items()
                                   if not name.startswith(GPU_INDEX_PREFIX) and name != mgpu.ASSUMED}
        pending = {**manifest, "metadata": metadata, "spec": spec, "status": {"phase": "Pending"}}
        self.ledger.upsert(pending)
        self.pods[key] = pending

    def remove(self, key: ObjectKey) -> None:
        self.version += 1
        pod = self.ledger.snapshot.pods.get(key)
        if pod is not None and _holds_node(pod):
            self._add_use(key, pod, -1)
            self.releases += 1
        self._index_member(key, pod, None)
        self.pods.pop(key, None)
        self._mgpu_results.pop(key, None)
        self.ledger.delete_pod(key)

    # ------------------------------------------------------------------------------------------ watch events

    def upsert(self, manifest: Manifest) -> None:
        """An object added or changed in the cluster (a watch event): the session's usage follows, at the cost of
        that object (raises InputError when it cannot be read)."""
        kind = kind_of(manifest)
        if kind is Kind.POD:
            self._upsert_pod(watched_pod(manifest))
        elif kind is Kind.NODE:
            self._upsert_node(manifest)
        elif kind is Kind.QUEUE:
            self._upsert_queue(manifest)
        elif kind is Kind.PODGROUP:
            self._upsert_podgroup(manifest)
        elif kind is Kind.PRIORITY_CLASS:
            self.ledger.upsert(manifest)
        elif manifest.get("kind") in CLAIM_KINDS:
            self._upsert_claim(manifest, deleted=False)
        else:
            return
        self.version += 1

    def delete(self, manifest: Manifest) -> None:
        """An object deleted from the cluster (only its kind and identity are read)."""
        kind = kind_of(manifest)
        key = namespaced_key(manifest)
        name = key[1]
        if kind is Kind.POD:
            self.remove(key)
        elif kind is Kind.NODE:  # (what its pods use of it stays counted: they are charged until they go)
            self.ledger.delete(manifest)
            self.nodes.pop(name, None)
            self._nodes_by_card_type = None
        elif kind is Kind.QUEUE:
            self.ledger.delete(manifest)
            self.queue_specs.pop(name, None)
            self._queues_changed()
        elif kind is Kind.PODGROUP:
            self.ledger.delete(manifest)
            self.podgroup_conditions.pop(key, None)
            self._take_uses_again(self._members.get(key, set()))
        elif kind is Kind.PRIORITY_CLASS:
            self.ledger.delete(manifest)
        elif manifest.get("kind") in CLAIM_KINDS:
            self._upsert_claim(manifest, deleted=True)
        else:
            return
        self.version += 1

    def _upsert_pod(self, manifest: Manifest) -> None:
        key = Pod.from_manifest(manifest).key
        previous = self.ledger.snapshot.pods.get(key)
        if previous is not None and _holds_node(previous):
            self._add_use(key, previous, -1)
            self.releases += 1
        self.ledger.upsert(manifest)
        self.pods[key] = manifest
        pod = self.view(key)
        self._index_member(key, previous, pod)
        if _holds_node(pod):
            self._add_use(key, pod, +1)

    def _upsert_node(self, manifest: Manifest) -> None:
        name = str((manifest.get("metadata") or {}).get("name", ""))
        previous = self.nodes.get(name)
        self.ledger.upsert(manifest)
        self.nodes[name] = manifest
        self.node_used.setdefault(name, {})
        self.node_pods.setdefault(name, set())
        if previous is None or _node_facts(previous) != _node_facts(manifest):  # not a status heartbeat
            self._nodes_by_card_type = None
            self.releases += 1

    def _upsert_queue(self, manifest: Manifest) -> None:
        name = str((manifest.get("metadata") or {}).get("name", ""))
        previous = self.ledger.snapshot.queues.get(name)
        self.ledger.upsert(manifest)
        spec = manifest.get("spec")
        self.queue_specs[name] = spec if isinstance(spec, MAPPING_TYPES) else {}
        current = self.ledger.snapshot.queues.get(name)
        if previous is None or current is None or previous.queue.parent != current.queue.parent:
            self._queues_changed()

    def _upsert_podgroup(self, manifest: Manifest) -> None:
        group = PodGroup.from_manifest(manifest)
        previous = self.ledger.snapshot.podgroups.get(group.key)
        self.ledger.upsert(manifest)
        conditions = (manifest.get("status") or {}).get("conditions")
        if isinstance(conditions, list) and conditions:
            self.podgroup_conditions[group.key] = conditions
        else:
            self.podgroup_conditions.pop(group.key, None)
        if previous is None or previous.queue != group.queue:
            self._take_uses_again(self._members.get(group.key, set()))

    def _upsert_claim(self, manifest: Manifest, *, deleted: bool) -> None:
        key = namespaced_key(manifest)
        template = manifest.get("kind") == "ResourceClaimTemplate"
        claims = self.claim_templates if template else self.claims
        previous = claims.get(key)
        if deleted:
            self.ledger.delete_claim(manifest)
        else:
            self.ledger.upsert_claim(manifest)
        if claims.get(key) == previous:
            return  # (a status update: the claim's allocation, not what it asks for)
        reference = "resourceClaimTemplateName" if template else "resourceClaimName"
        self._take_uses_again(pod_key for pod_key in list(self._queue_uses) if pod_key[0] == key[0] and any(
            isinstance(claim, MAPPING_TYPES) and claim.get(reference) == key[1]
            for claim in (self.pods.get(pod_key, {}).get("spec") or {}).get("resourceClaims") or []))

    def _queues_changed(self) -> None:
        """A queue came, went or changed parent: the queue charges (DRA up the hierarchy) are taken again."""
        self._parents = None
        self._take_uses_again(list(self._queue_uses))

    def _take_uses_again(self, keys: Iterable[ObjectKey]) -> None:
        for key in list(keys):
            pod = self.ledger.snapshot.pods.get(key)
            if pod is not None and key in self._queue_uses:
                self._add_use(key, pod, -1)
                self._add_use(key, pod, +1, placed_here=True)

    def _index_member(self, key: ObjectKey, previous: Pod | None, pod: Pod | None) -> None:
        if previous is not None and previous.group_key is not None:
            self._members.get(previous.group_key, set()).discard(key)
        if pod is not None and pod.group_key is not None:
            self._members.setdefault(pod.group_key, set()).add(key)

    def best_node(self, key: ObjectKey) -> tuple[str | None, str]:
        """Every node scored: (the one that can take the pod now, the best by score, ties by name — or None, and
        the scheduler-style reason none can)."""
        refusals = []
        best: tuple[float, str] | None = None
        for node in sorted(self.nodes):
            refusal = self.fit_refusal(key, node) or self.node_refusal(key, node)
            if refusal is not None:
                refusals.append(refusal)
                continue
            score = self.score(key, node)
            if best is None or score > best[0]:
                best = (score, node)
        if best is not None:
            return best[1], ""
        return None, self.no_node_reason(refusals, len(self.nodes))

    def no_node_reason(self, refusals: Iterable[Refusal], nodes: int) -> str:
        """kube-scheduler's summary: ``0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 ...``."""
        counts = Counter(refusal.message for refusal in refusals)
        parts = ", ".join(f"{count} {message}" for message, count in
                          sorted(counts.items(), key=lambda item: (-item[1], item[0])))
        return f"0/{nodes} {NODES_AVAILABLE}: {parts}" if parts else f"0/{nodes} {NODES_AVAILABLE}"

    # ------------------------------------------------------------------------------------------- internals

    def _add_use(self, key: ObjectKey, pod: Pod, sign: int, *, placed_here: bool = False) -> None:
        node = pod.node_name
        used = self.node_used.setdefault(node, {})
        for resource, amount in pod.requests.items():
            used[resource] = used.get(resource, Fraction(0)) + sign * amount
        members = self.node_pods.setdefault(node, set())
        if sign > 0:
            members.add(key)
        else:
            members.discard(key)
        if not self._in_a_queue(key, pod, placed_here=placed_here):
            return  # a pod the scheduler does not place (a DaemonSet's, kube-system's) uses its node, not a queue
        if sign > 0:
            if pod.releasing:
                return  # Releasing: still on its node, no longer its queue's (as the ledger counts it)
            queue = self.ledger.queue_of(pod)
            # Under cardUnlimitedCpuMemory a card task's cpu/memory is not added to its queue's allocated (the
            # plugin's GetTaskRequestResources): GPU work does not spend the CPU quota of the CPU work beside it.
            exempt = self.config.capacity_card.card_unlimited_cpu_memory and self.uses_cards(key)
            amounts = {} if exempt else {resource: pod.requests.get(resource, Fraction(0)) for resource in CPU_MEMORY}
            use = _QueueUse(queue, amounts, self.dra_request(key) if key in self.pods else {},
                            tuple(dra.ancestry(queue, self.parents)))
            self._queue_uses[key] = use
        else:
            taken = self._queue_uses.pop(key, None)
            if taken is None:
                return
            use = taken
        queue_used = self.queue_used.setdefault(use.queue, {})
        for resource, amount in use.cpu_memory.items():
            queue_used[resource] = queue_used.get(resource, Fraction(0)) + sign * amount
        for name in use.ancestry:
            held = self.queue_dra.setdefault(name, {})
            for device_class, device_amount in use.devices.items():
                held.setdefault(device_class, dra.DeviceAmount()).add(device_amount, sign)

    def _in_a_queue(self, key: ObjectKey, pod: Pod, *, placed_here: bool) -> bool:
        """Whether a pod counts against a queue's cpu, memory and DRA quota: it belongs to a PodGroup; or it is
        placed in this session (``simulate``: a pod without a PodGroup) and names a queue or one of the schedulers
        the session serves — Volcano's controller gives such a pod a PodGroup, and its group-name annotation, before
        it is scheduled (``buildPodGroupFromPod``, ``updatePodAnnotations`` in
        pkg/controllers/podgroup/pg_controller_handler.go, v1.15.1). A pod found bound without a PodGroup is in no
        job of Volcano's, so in no queue (pkg/scheduler/cache/event_handlers.go ``getOrCreateJob``, v1.15.1), as
        the ledger counts it."""
        if pod.group_key is not None:
            return True
        if not placed_here:
            return False
        if pod.queue_annotation is not None:
            return True
        spec = (self.pods.get(key) or {}).get("spec") or {}
        return spec.get("schedulerName") in self.config.scheduler_names

    def _crossquota_inputs(self, key: ObjectKey, node: str
                           ) -> tuple[crossquota.CrossQuotaConfig, dict[str, Fraction], dict[str, Fraction]] | None:
        config = self.config.crossquota
        if config is None:
            return None
        record = self.ledger.snapshot.nodes.get(node)
        pod = self.view(key)
        cards = record.cards.by_resource if record is not None else {}
        if record is None or not crossquota.is_gpu_node(record.node.allocatable, config, cards):
            return None
        if not crossquota.is_cpu_pod(pod.requests, config, cards):
            return None
        quota = crossquota.node_quota(record.node.meta.annotations, record.node.allocatable, config)
        used: dict[str, Fraction] = {}
        for other in self.node_pods.get(node, ()):
            other_pod = self.ledger.snapshot.pods.get(other)
            if other_pod is not None and crossquota.is_cpu_pod(other_pod.requests, config, cards):
                for resource, amount in other_pod.requests.items():
                    used[resource] = used.get(resource, Fraction(0)) + amount
        return config, quota, used

    def _crossquota_refusal(self, key: ObjectKey, node: str) -> Refusal | None:
        inputs = self._crossquota_inputs(key, node)
        if inputs is None:
            return None
        config, quota, used = inputs
        return crossquota.predicate_refusal(node, self.view(key).requests, used, quota, config)

    def _crossquota_score(self, key: ObjectKey, node: str) -> float:
        inputs = self._crossquota_inputs(key, node)
        if inputs is None:
            return 0.0
        config, quota, used = inputs
        pod = self.view(key)
        return crossquota.score(crossquota.scoring_strategy(pod.meta.annotations), pod.requests, used, quota, config)

    def _mgpu_model(self, node: str) -> mgpu.MGPUNode | None:
        return mgpu.node_model(self.nodes[node], (self.pods[k] for k in self.node_pods.get(node, ()) if k in self.pods))

    def _mgpu(self, key: ObjectKey, node: str) -> mgpu.Allocation | Refusal | None:
        """The mGPU allocation of the pod on the node (None when mGPU is off or the pod asks for none); computed once
        per session state (the filter, the score and the allocation all ask)."""
        if not self.config.mgpu.enabled:
            return None
        per_node = self._mgpu_results.setdefault(key, {})
        cached = per_node.get(node)
        if cached is not None and cached[0] == self.version:
            return cached[1]
        result = self._mgpu_uncached(key, node)
        per_node[node] = (self.version, result)
        return result

    def _mgpu_uncached(self, key: ObjectKey, node: str) -> mgpu.Allocation | Refusal | None:
        shares = mgpu.pod_shares(self.pods[key])
        if isinstance(shares, Refusal):
            return shares
        if not shares:
            return None
        model = self._mgpu_model(node)
        if model is None:
            return Refusal(mgpu.MGPU_UNSCHEDULABLE, f"node {node} offers no mGPU")
        refusal = mgpu.filter_refusal(self.pods[key], shares, model)
        if refusal is not None:
            return refusal
        allocation = mgpu.allocate(shares, model, self.config.mgpu)
        if allocation is None:
            return Refusal(mgpu.MGPU_UNSCHEDULABLE, f"no combination of node {node}'s cards has room for the pod's "
                                                    "mGPU containers")
        return allocation
