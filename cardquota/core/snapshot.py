"""The cluster snapshot: the typed views of every object cardquota accounts for, keyed for O(1) updates.

Manifests of other kinds are ignored, so a whole ``kubectl get -o yaml`` dump or a watch stream of mixed kinds
can be fed in as it is.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import itertools
import re
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from cardquota.core import keys
from cardquota.core.cards import CardKind, NodeCards, discover_card_types
from cardquota.core.dra_claims import DeviceAmounts
from cardquota.core.errors import InputError
from cardquota.core.objects import Manifest, Node, ObjectKey, Pod, PodGroup, PriorityClass, Queue, read_meta
from cardquota.core.quota import CardAmounts, card_quota
from cardquota.core.workloads import WorkloadKey

VOLCANO_SCHEDULING_GROUP = "scheduling.volcano.sh"
KUBERNETES_SCHEDULING_GROUP = "scheduling.k8s.io"
"""PriorityClasses' API group (``v1``; the ``v1beta1`` and ``v1alpha1`` of older dumps read the same)."""
MAX_ANCESTRY = 64
"""Ancestors of a queue followed at most (a cycle of ``spec.parent`` stops here; Volcano refuses one)."""


class UnquotedQueues(StrEnum):
    """How many cards a queue without ``volcano.sh/card.quota`` holds (cardquota's ``--unquoted-queues``)."""

    ZERO = "zero"
    """None, as the capacity-card design says ("Card types without quotas default to 0, and must have a quota to use
    that card type"): card work in a queue without a card quota (its own; an ancestor's holds the subtree besides)
    is refused at apply time, including pods that name no ``volcano.sh/card.name`` (which Volcano's plugin never
    charges)."""
    UNLIMITED = "unlimited"
    """Pods naming no card type are not limited in such a queue (what cardquota did before the setting existed).
    Named card requests are still held to 0 there: Volcano's capacity-card plugin refuses them itself."""


class OutsideVolcano(StrEnum):
    """What cardquota does with card pods Volcano does not schedule (another ``spec.schedulerName``, no PodGroup):
    no queue is charged for them, so no card quota holds them (cardquota's ``--card-pods-outside-volcano``)."""

    ENFORCE = "enforce"
    """Charged to the queue Volcano would give them (their queue-name annotation, their namespace's, else
    ``default``) like Volcano's pods: with the card-quota gate they wait at it, or are refused as Volcano's pods are;
    without the gate nothing could hold them, so they are refused."""
    WARN = "warn"
    """Admitted with a warning naming the quota that does not hold them (the default: cluster add-ons such as the
    GPU Operator's validators request cards on the default scheduler, and refusing them would stop a node's
    bring-up on the day cardquota is installed; ``enforce`` once such pods are exempted by namespace)."""
    OFF = "off"
    """Admitted without a word."""


@dataclass(frozen=True)
class CardPolicy:
    """The cluster's card-quota settings every path reads from its snapshot (admission, the gate, the scheduling
    rules, ``check``, ``simulate``, ``usage``, ``explain``, ``doctor``), copied there by whoever builds it."""

    unquoted_queues: UnquotedQueues = UnquotedQueues.ZERO
    outside_volcano: OutsideVolcano = OutsideVolcano.WARN

    @property
    def unquoted_hold_zero(self) -> bool:
        return self.unquoted_queues is UnquotedQueues.ZERO


DEFAULT_CARD_POLICY = CardPolicy()


class Kind(StrEnum):
    NODE = "Node"
    QUEUE = "Queue"
    PODGROUP = "PodGroup"
    POD = "Pod"
    NAMESPACE = "Namespace"
    PRIORITY_CLASS = "PriorityClass"


NAMESPACED_KINDS = frozenset({Kind.POD, Kind.PODGROUP})


def kind_of(manifest: Manifest) -> Kind | None:
    """The accounted kind of a manifest, or None for kinds cardquota does not account for."""
    kind = manifest.get("kind")
    api_version = manifest.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return None
    return _accounted_kind(api_version, kind)


@functools.lru_cache(maxsize=256)
def _accounted_kind(api_version: str, kind: str) -> Kind | None:
    """(Cached: a list or a watch stream repeats a handful of apiVersion/kind pairs.)"""
    if kind in (Kind.NODE, Kind.POD, Kind.NAMESPACE) and api_version == "v1":
        return Kind(kind)
    if kind in (Kind.QUEUE, Kind.PODGROUP) and api_version.rpartition("/")[0] == VOLCANO_SCHEDULING_GROUP:
        return Kind(kind)
    if kind == Kind.PRIORITY_CLASS and api_version.rpartition("/")[0] == KUBERNETES_SCHEDULING_GROUP:
        return Kind.PRIORITY_CLASS
    return None


def object_key(kind: Kind, manifest: Manifest) -> ObjectKey:
    return read_meta(manifest, namespaced=kind in NAMESPACED_KINDS).key


@dataclass(frozen=True)
class NodeRecord:
    node: Node
    cards: NodeCards


@dataclass(frozen=True)
class QueueRecord:
    queue: Queue
    quota: CardAmounts


@dataclass(frozen=True)
class CatalogEntry:
    """One card type across the cluster: its resource, how many cards all nodes offer, and its product."""

    name: str
    resource: str
    kind: CardKind
    product: str
    product_label: str
    total: int


CLOSEST_CUTOFF = 0.75
"""How alike (difflib's ratio) a discovered type must be to be suggested for a typo."""
MAX_CLOSEST_CANDIDATES = 32
"""Full similarity computations per suggestion, at most: candidates are tried best bound first. (Against
difflib.get_close_matches on a 322-type catalog of near-identical MIG names, 3,000 typos: 16 suggestions differ,
each a near-identical type; 0 on catalogs of distinct products.)"""


MAX_MEMO = 4096
"""Entries of a catalog's :attr:`CardCatalog.memo` (cleared when full)."""


@dataclass(frozen=True)
class Closest:
    """A remembered suggestion (None: there is none)."""

    name: str | None


MAX_SUGGESTED = 4
"""Discovered types one suggestion names (the rest are counted: ``… and 2 more``)."""
MAX_INDEXED_TOKENS = 8
"""Words of a product name indexed as places a written name may start (GFD products have at most 5)."""
_WORD_SEPARATORS = re.compile(r"[-_ ]+")


@dataclass(frozen=True)
class Suggestion:
    """What a card type no node offers most likely meant: ``names`` (sorted, at most the limit asked for) out of
    ``total`` discovered types; empty when nothing is close."""

    names: tuple[str, ...] = ()
    total: int = 0


def _words(product: str) -> list[str]:
    return [word for word in _WORD_SEPARATORS.split(product.casefold()) if word]


def _split_type(name: str) -> tuple[str, str]:
    """A card type's product and what follows it (``NVIDIA-A100/mig-1g.5gb-mixed`` → product, ``mig-1g.5gb-mixed``),
    the latter lower-cased."""
    product, _, rest = name.partition("/")
    return product, rest.casefold()


@dataclass(frozen=True)
class _WordIndex:
    """Sorted keys ``<rest>\x01<word>-<word>…`` (a product's words from some word on) with the type each is of:
    every type whose words extend a written run of words is found by two bisections."""

    keys: list[str]
    names: list[str]

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> _WordIndex:
        ordered = sorted(pairs)
        return cls([key for key, _ in ordered], [name for _, name in ordered])

    def extending(self, rest: str, words: list[str]) -> list[str]:
        """The types (each once, sorted) with keys that are ``words``, or ``words`` followed by more words."""
        run = f"{rest}\x01{'-'.join(words)}"
        low = bisect.bisect_left(self.keys, run)
        exact = bisect.bisect_right(self.keys, run, low)
        # keys starting with run + "-" sort from there up to run + "." ("." follows "-"; words hold no "-")
        high = bisect.bisect_left(self.keys, run + ".", exact)
        names = self.names[low:exact] + self.names[bisect.bisect_left(self.keys, run + "-", exact):high]
        return sorted(set(names))


class CardCatalog:
    """Every card type some node offers, by name; never changed once made (it is rebuilt when a node's card types
    change). What the rules derive from it is kept with it: the resources the types are offered through, computed
    once here, and the suggestion indexes and :attr:`memo`, filled on first use.

    (A plain class with its caches as attributes, not a frozen dataclass with ``functools.cached_property``: the
    optional compiled build turns such a property into one that computes on every read.)"""

    __slots__ = ("_counted_cache", "_word_indexes_cache", "entries", "memo", "resource_by_name", "resources")

    def __init__(self, entries: Mapping[str, CatalogEntry] | None = None) -> None:
        self.entries: Mapping[str, CatalogEntry] = entries if entries is not None else {}
        self.resource_by_name: Mapping[str, str] = {name: entry.resource for name, entry in self.entries.items()}
        """Card type → the resource it is offered through."""
        self.resources: frozenset[str] = frozenset(self.resource_by_name.values())
        """The Kubernetes resources the card types are offered through."""
        self.memo: dict[Hashable, object] = {}
        """Facts derived from this catalog (suggestions, what a card name's alternatives are requested through),
        kept for as long as the catalog lives; at most :data:`MAX_MEMO` entries, each of a short name."""
        self._counted_cache: list[tuple[str, Counter[str]]] | None = None
        self._word_indexes_cache: tuple[_WordIndex, _WordIndex] | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CardCatalog) and self.entries == other.entries

    __hash__ = None  # type: ignore[assignment]  # equal by entries, which a dict holds

    def __repr__(self) -> str:
        return f"CardCatalog(entries={self.entries!r})"

    def get(self, name: str) -> CatalogEntry | None:
        return self.entries.get(name)

    def resource_of(self, name: str) -> str | None:
        return self.resource_by_name.get(name)

    def offered_through(self, resources: Iterable[str], products: Iterable[str]) -> list[str]:
        """The card types offered through one of ``resources`` that are parts of one of ``products`` (a MIG slice
        ``NVIDIA-A100-SXM4-40GB/mig-1g.5gb-mixed`` or an MPS share of ``NVIDIA-A100-SXM4-40GB``: the product, a
        ``/``, the part; capacity-card-design.md, "Card Type Name and Quantity Generation Rules"), in catalog
        order: what a pod naming the whole card while requesting a part's resource meant. Linear in the catalog."""
        wanted = frozenset(resources)
        prefixes = tuple(f"{product}/" for product in products)
        if not wanted or not prefixes:
            return []
        return [name for name, resource in self.resource_by_name.items()
                if resource in wanted and name.startswith(prefixes)]

    @property
    def _counted(self) -> list[tuple[str, Counter[str]]]:
        """The index the suggestion search uses, built once per catalog: each name with its characters counted."""
        if self._counted_cache is None:
            self._counted_cache = [(name, Counter(name)) for name in self.entries]
        return self._counted_cache

    @property
    def _word_indexes(self) -> tuple[_WordIndex, _WordIndex]:
        """The indexes :meth:`suggest` uses, built once per catalog: products by their words from the first, and
        from each later word (at most :data:`MAX_INDEXED_TOKENS` places per type)."""
        if self._word_indexes_cache is None:
            starts: list[tuple[str, str]] = []
            inner: list[tuple[str, str]] = []
            for name in self.entries:
                product, rest = _split_type(name)
                words = _words(product)[:MAX_INDEXED_TOKENS]
                for place in range(len(words)):
                    (inner if place else starts).append((f"{rest}\x01{'-'.join(words[place:])}", name))
            self._word_indexes_cache = _WordIndex.of(starts), _WordIndex.of(inner)
        return self._word_indexes_cache

    def suggest(self, name: str, limit: int = MAX_SUGGESTED) -> Suggestion:
        """The discovered types a card type no node offers most likely meant, as GPU feature discovery names
        products (``NVIDIA-A100-SXM4-80GB``, ``NVIDIA-H100-80GB-HBM3``, ``Tesla-T4``) and people write them
        (``NVIDIA-A100``, ``H100``, ``NVIDIA-T4``), the first rule that finds any:

        1. the types whose product extends the written one word by word, case aside (``NVIDIA-A100`` →
           ``NVIDIA-A100-SXM4-40GB``, ``NVIDIA-A100-SXM4-80GB``; not ``NVIDIA-A1000``), with the same MIG or MPS
           suffix, if any (``NVIDIA-A100/mig-1g.5gb-mixed`` → ``NVIDIA-A100-SXM4-40GB/mig-1g.5gb-mixed``);
        2. the types whose product has the written words further in (``H100`` → ``NVIDIA-H100-PCIe``);
        3. the same two with the first written word (a vendor: ``NVIDIA-T4`` → ``Tesla-T4``) left out, when a word
           with a digit (a model) remains;
        4. :meth:`closest`, the edit-distance match of a typo (``NVIDIA-A10O`` → ``NVIDIA-A100``).

        All the types a rule finds are counted, the first ``limit`` named. Bounded like :meth:`closest`: rules 1-3
        are bisections of indexes built once per catalog (and take the matching types), rule 4 is
        :meth:`closest`; the answer is remembered."""
        remembered = self.memo.get(("suggest", name, limit))
        if isinstance(remembered, Suggestion):
            return remembered
        found = self._suggest(name)
        if found is None:
            closest = self.closest(name)
            suggestion = Suggestion((closest,), 1) if closest is not None else Suggestion()
        else:
            suggestion = Suggestion(tuple(found[:limit]), len(found))
        if len(name) <= 256:
            if len(self.memo) >= MAX_MEMO:
                self.memo.clear()
            self.memo[("suggest", name, limit)] = suggestion
        return suggestion

    def _suggest(self, name: str) -> list[str] | None:
        product, rest = _split_type(name)
        words = _words(product)
        if not words or len(words) > MAX_INDEXED_TOKENS:
            return None
        tries = [words]
        if len(words) > 1 and any(char.isdigit() for word in words[1:] for char in word):
            tries.append(words[1:])
        for written in tries:
            for index in self._word_indexes:
                found = [candidate for candidate in index.extending(rest, written) if candidate != name]
                if found:
                    return found
        return None

    def closest(self, name: str) -> str | None:
        """The discovered type a typo most likely meant (``NVIDIA-A10O`` → ``NVIDIA-A100``): the best difflib ratio
        of at least :data:`CLOSEST_CUTOFF`, as ``difflib.get_close_matches(name, entries, 1, 0.75)`` finds it.

        Bounded whatever the name and the catalog: ratio = 2·matches / (len(a) + len(b)) ≥ 0.75 needs the lengths
        within a factor 5/3 of each other, and matches ≤ the characters both have in common (difflib's quick_ratio,
        from counts made once per catalog); only the :data:`MAX_CLOSEST_CANDIDATES` best by that bound get the full
        (quadratic) comparison, in that order, stopping when the bound cannot beat the best found."""
        remembered = self.memo.get(("closest", name))
        if isinstance(remembered, Closest):
            return remembered.name
        found = self._closest(name)
        if len(name) <= 256:  # (typos repeat: every pod of a workload carries the same one)
            if len(self.memo) >= MAX_MEMO:
                self.memo.clear()
            self.memo[("closest", name)] = Closest(found)
        return found

    def _closest(self, name: str) -> str | None:
        size = len(name)
        candidates = [(candidate, counts) for candidate, counts in self._counted
                      if 3 * size <= 5 * len(candidate) and 3 * len(candidate) <= 5 * size]
        if not candidates:
            return None
        counts = Counter(name)  # (no longer than 5/3 of a catalog name, here)
        bounds = []
        for candidate, candidate_counts in candidates:
            total = size + len(candidate)
            common = sum(map(min, counts.values(), map(candidate_counts.get, counts, itertools.repeat(0))))
            if 2 * common >= CLOSEST_CUTOFF * total:
                bounds.append((2 * common / total, candidate))
        bounds.sort(reverse=True)
        best: tuple[float, str] | None = None
        matcher = difflib.SequenceMatcher()
        matcher.set_seq2(name)
        for bound, candidate in bounds[:MAX_CLOSEST_CANDIDATES]:
            if best is not None and bound < best[0]:
                break
            matcher.set_seq1(candidate)
            score = matcher.ratio()
            if score >= CLOSEST_CUTOFF and (best is None or (score, candidate) > best):
                best = (score, candidate)
        return best[1] if best is not None else None

    @classmethod
    def of(cls, nodes: Iterable[NodeCards]) -> CardCatalog:
        entries: dict[str, CatalogEntry] = {}
        for cards in nodes:
            for card in cards.types.values():
                known = entries.get(card.name)
                total = card.count + (known.total if known is not None else 0)
                entries[card.name] = CatalogEntry(card.name, card.resource, card.kind, card.product,
                                                  card.product_label, total)
        return cls(dict(sorted(entries.items())))


@dataclass
class ClusterSnapshot:
    """Nodes (with their discovered card types), Queues (with parsed quotas), PodGroups and Pods.

    ``complete`` says whether the snapshot holds the whole cluster (a webhook after its first full list, the CLI
    with ``--cluster``): rules that need the cluster only deny on a complete snapshot, and otherwise say they
    were skipped.
    """

    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    queues: dict[str, QueueRecord] = field(default_factory=dict)
    podgroups: dict[ObjectKey, PodGroup] = field(default_factory=dict)
    pods: dict[ObjectKey, Pod] = field(default_factory=dict)
    workloads: dict[WorkloadKey, Manifest] = field(default_factory=dict)
    trainer_runtimes: dict[tuple[str, str, str], Manifest] = field(default_factory=dict)
    """Kubeflow Trainer runtimes (TrainingRuntime, ClusterTrainingRuntime) as written, by (kind, namespace, name):
    what a TrainJob's pods are built from (``check`` reads those of its input; the webhooks' cache follows none)."""
    claims: dict[ObjectKey, DeviceAmounts] = field(default_factory=dict)
    """DRA ResourceClaims (when the cache follows them), what each asks per DeviceClass."""
    claim_templates: dict[ObjectKey, DeviceAmounts] = field(default_factory=dict)
    """DRA ResourceClaimTemplates, likewise."""
    """Deployments, StatefulSets, ReplicaSets, DaemonSets, Jobs and CronJobs as written (for the HPA rule)."""
    complete: bool = False
    namespace_queues: dict[str, str] = field(default_factory=dict)
    """Each Namespace's ``scheduling.volcano.sh/queue-name`` annotation (namespaces without one are absent)."""
    map_namespace_queues: bool = False
    """Whether the cluster's Volcano maps a namespace to its queue (:attr:`PolicyConfig.map_namespace_queues
    <cardquota.core.policies.config.PolicyConfig.map_namespace_queues>`, copied here by whoever builds the snapshot
    from the settings): :meth:`volcano_queue` reads it."""
    volcano_schedulers: frozenset[str] = keys.VOLCANO_SCHEDULERS
    """The ``spec.schedulerName`` values Volcano schedules (:meth:`charges_a_queue`)."""
    card_policy: CardPolicy = DEFAULT_CARD_POLICY
    """The cluster's card-quota settings (:class:`CardPolicy`)."""
    queue_crd_missing: tuple[str, ...] = ()
    """cardquota's additions the installed Queue CRD lacks (``crd_additions`` labels, e.g. ``schema spec.dra``), as
    the operator's drift check last found them; empty when all are there or nobody looked (the CLI offline)."""
    card_unlimited_cpu_memory: bool | None = None
    """The capacity-card plugin's ``cardUnlimitedCpuMemory`` when the scheduler's configuration is known (``check``
    with the ConfigMap in its input); None when it is not (the webhooks): the rules that depend on it say so."""
    priority_classes: dict[str, int] = field(default_factory=dict)
    """Each PriorityClass's ``value``, by name (:meth:`job_priority`)."""
    default_priority: int = 0
    """The ``value`` of the PriorityClass marked ``globalDefault`` (0 when none is): see
    :meth:`put_priority_class`."""
    global_default_classes: set[str] = field(default_factory=set)
    """The names of the PriorityClasses marked ``globalDefault`` (one at most, unless the API server's
    ``Priority`` admission plugin is off)."""
    queue_use: Callable[[str], Mapping[str, int]] | None = field(default=None, repr=False, compare=False)
    """Cards a queue holds or has reserved now (allocated + inqueue, per card type), when a ledger keeps it."""
    _catalog: CardCatalog | None = field(default=None, repr=False, compare=False)

    def put_node(self, record: NodeRecord) -> None:
        """A node added or changed: the card catalog is recomputed only when its card types or counts changed (not
        on the kubelet's status heartbeats, many a second at 5,000 nodes)."""
        previous = self.nodes.get(record.node.name)
        self.nodes[record.node.name] = record
        if previous is None or previous.cards != record.cards:
            self._catalog = None

    def remove_node(self, name: str) -> NodeRecord | None:
        removed = self.nodes.pop(name, None)
        if removed is not None and removed.cards.types:
            self._catalog = None
        return removed

    def catalog(self) -> CardCatalog:
        """The card types the nodes offer (recomputed only after a node changed)."""
        if self._catalog is None:
            self._catalog = CardCatalog.of(record.cards for record in self.nodes.values())
        return self._catalog

    def volcano_queue(self, written: str | None, namespace: str) -> str:
        """The queue Volcano stores on a PodGroup created in ``namespace`` with ``written`` as its ``spec.queue``
        (None or empty: unset, which the PodGroup CRD defaults to ``default``): ``written``, except that ``default``
        becomes the namespace's ``scheduling.volcano.sh/queue-name`` annotation when :attr:`map_namespace_queues`
        is on and the namespace has one.

        Volcano's PodGroup mutation does this on CREATE only: the ``/podgroups/mutate`` webhook
        (``createPodGroupPatch``, pkg/webhooks/admission/podgroups/mutate/mutate_podgroup.go, v1.15.1; enabled by
        default in the Helm chart up to v1.11, ``custom.enabled_admissions``) or, from v1.12, the
        MutatingAdmissionPolicy ``volcano-podgroup-mutation-policy``
        (installer/helm/chart/volcano/policy/podgroups-mutating.yaml, value ``custom.map_enable``, default off).
        Every PodGroup-to-be goes through it: a Volcano Job's (the job controller creates it with the Job's queue,
        ``default`` when unset: ``patchDefaultQueue``), a plain pod's (``buildPodGroupFromPod``,
        pkg/controllers/podgroup/pg_controller_handler.go: the pod's queue-name annotation, else ``default``).
        A PodGroup that exists keeps its ``spec.queue``."""
        if self.maps_to_namespace_queue(written, namespace):
            return self.namespace_queues[namespace]
        return written or keys.DEFAULT_QUEUE

    def set_namespace_queue(self, name: str, queue: str | None) -> bool:
        """Record a Namespace's ``scheduling.volcano.sh/queue-name`` annotation (None: unset, or the namespace
        deleted); whether that changed what the snapshot held."""
        if self.namespace_queues.get(name) == queue:
            return False
        if queue is None:
            del self.namespace_queues[name]
        else:
            self.namespace_queues[name] = queue
        return True

    def maps_to_namespace_queue(self, written: str | None, namespace: str) -> bool:
        """Whether :meth:`volcano_queue` gives the namespace's queue for ``written`` (for messages saying so)."""
        return (written or keys.DEFAULT_QUEUE) == keys.DEFAULT_QUEUE and self.map_namespace_queues \
            and namespace in self.namespace_queues

    def pod_queue_from_namespace(self, pod: Pod) -> bool:
        """Whether :meth:`queue_of` gives the pod its namespace's queue (it has no PodGroup yet)."""
        group = self.podgroups.get(pod.group_key) if pod.group_key is not None else None
        return group is None and self.maps_to_namespace_queue(pod.queue_annotation, pod.key[0])

    def put_priority_class(self, priority_class: PriorityClass) -> None:
        """A PriorityClass added or changed, followed as Volcano's scheduler cache follows one (volcano-sh/volcano
        v1.15.1, pkg/scheduler/cache/event_handlers.go: ``UpdatePriorityClass`` deletes the old object then adds
        the new; ``addPriorityClass``): its value by name, and when it is marked ``globalDefault`` its value becomes
        :attr:`default_priority`. When several are marked, the last one added wins (Volcano logs "Updated default
        priority class ... forcefully" and replaces it; kube-scheduler would take the highest value instead). The
        API server lets only one be marked, so this happens only when its ``Priority`` admission plugin is off."""
        self.drop_priority_class(priority_class.name)
        self.priority_classes[priority_class.name] = priority_class.value
        if priority_class.global_default:
            self.global_default_classes.add(priority_class.name)
            self.default_priority = priority_class.value

    def drop_priority_class(self, name: str) -> None:
        """A PriorityClass deleted (or about to be replaced): its value goes; if it was marked ``globalDefault``,
        :attr:`default_priority` goes back to 0, even when another class is marked too (``deletePriorityClass``,
        same file)."""
        self.priority_classes.pop(name, None)
        if name in self.global_default_classes:
            self.global_default_classes.discard(name)
            self.default_priority = 0

    def job_priority(self, group: PodGroup) -> int:
        """A PodGroup's priority as Volcano's scheduler gives its job one: the value of the PriorityClass its
        ``spec.priorityClassName`` names, else the global default's (``snapshotJobs``' ``cloneJob`` in
        pkg/scheduler/cache/cache.go, volcano-sh/volcano v1.15.1: ``value.Priority = sc.defaultPriority``, then the
        named class's value when found)."""
        return self.priority_classes.get(group.priority_class, self.default_priority)

    def queue_of(self, pod: Pod) -> str:
        """A pod's queue: its PodGroup's ``spec.queue`` once that PodGroup exists, else the queue its PodGroup-to-be
        will get (:meth:`volcano_queue` of ``scheduling.volcano.sh/queue-name``, else default).

        Volcano's scheduler charges a task to its job's queue, the PodGroup's ``spec.queue`` (``JobInfo.Queue``,
        pkg/scheduler/api/job_info.go; the capacity-card plugin's ``taskJob.Queue``), and never reads the pod's
        queue-name annotation: only the PodGroup controller does, to build the PodGroup of a pod that has none
        (``buildPodGroupFromPod``, pkg/controllers/podgroup/pg_controller_handler.go, v1.15.1 and master), so
        before that PodGroup exists the annotation says where the pod will go."""
        group = self.podgroups.get(pod.group_key) if pod.group_key is not None else None
        if group is not None:
            return group.queue
        return self.volcano_queue(pod.queue_annotation, pod.key[0])

    def charges_a_queue(self, pod: Pod) -> bool:
        """Whether a queue is charged for the pod at all: it names a PodGroup, or Volcano schedules it (its
        ``spec.schedulerName`` is one of :attr:`volcano_schedulers`, or unset in a manifest the API server has not
        defaulted). Volcano's cache puts a pod that names no PodGroup in no job and charges no queue for it
        (``addTask`` → ``getOrCreateJob``: nil when ``TaskInfo.Job`` is empty; pkg/scheduler/cache/event_handlers.go,
        v1.15.1); for its own pods that lasts until vc-controller creates their PodGroup (whose queue cardquota
        charges meanwhile, :meth:`queue_of`), for another scheduler's it lasts: vc-controller makes PodGroups for
        the pods of Volcano's schedulers only (pkg/controllers/podgroup)."""
        return self.volcano_schedules(pod) or self.card_policy.outside_volcano is OutsideVolcano.ENFORCE

    def volcano_schedules(self, pod: Pod) -> bool:
        """Whether Volcano charges a queue for the pod by itself (:meth:`charges_a_queue` without
        ``--card-pods-outside-volcano=enforce``)."""
        return pod.group_key is not None or not pod.scheduler or pod.scheduler in self.volcano_schedulers

    def ancestry(self, queue: str) -> list[str]:
        """``queue`` and its ancestors (``spec.parent``), nearest first; a cycle or an unknown parent ends it."""
        chain = [queue]
        record = self.queues.get(queue)
        while record is not None and record.queue.parent and len(chain) < MAX_ANCESTRY:
            parent = record.queue.parent
            if parent in chain:
                break
            chain.append(parent)
            record = self.queues.get(parent)
        return chain

    def card_limit_queue(self, queue: str) -> str | None:
        """The queue whose card quota limits pods of ``queue`` that name no card type: ``queue`` itself when unquoted
        queues hold 0 cards (:class:`UnquotedQueues`: every queue has a card quota, empty or not; its ancestors'
        hold the subtree besides); otherwise the nearest of ``queue`` and its ancestors (``spec.parent``) with a card
        quota, None with none (not limited)."""
        if self.card_policy.unquoted_hold_zero:
            return queue
        return next((name for name in self.ancestry(queue)
                     if (record := self.queues.get(name)) is not None and record.quota.values), None)

    def children_of(self, queue: str) -> list[QueueRecord]:
        return [record for record in self.queues.values() if record.queue.parent == queue]

    def queue_dra(self, queue: str) -> object:
        """The queue's ``spec.dra`` as written (None when the queue is not known)."""
        record = self.queues.get(queue)
        return record.queue.dra if record is not None else None

    def sets_dra_capability(self) -> bool:
        """Whether some queue sets a DRA capability (``spec.dra.capability``, as written)."""
        return any(isinstance(dra := record.queue.dra.get("capability"), Mapping) and dra
                   for record in self.queues.values())

    def queue_parents(self) -> dict[str, str]:
        """Each queue's parent (``spec.parent``, "" when unset), by name."""
        return {name: record.queue.parent for name, record in self.queues.items()}


def node_record(manifest: Manifest) -> NodeRecord:
    node = Node.from_manifest(manifest)
    return NodeRecord(node=node, cards=discover_card_types(node))


def namespace_queue(manifest: Manifest) -> tuple[str, str | None]:
    """A Namespace's name and its ``scheduling.volcano.sh/queue-name`` annotation (None when unset or empty)."""
    meta = read_meta(manifest, namespaced=False)
    return meta.name, meta.annotations.get(keys.QUEUE_NAME) or None


def namespaces_snapshot(manifests: Iterable[Manifest], *, map_namespace_queues: bool) -> ClusterSnapshot:
    """A snapshot of the Namespaces among ``manifests`` only: what :func:`podgroup_as_created` reads, for the
    PodGroups a replay creates before its session is built."""
    snapshot = ClusterSnapshot(map_namespace_queues=map_namespace_queues)
    for manifest in manifests:
        if kind_of(manifest) is Kind.NAMESPACE:
            snapshot.set_namespace_queue(*namespace_queue(manifest))
    return snapshot


def podgroup_as_created(manifest: Manifest, snapshot: ClusterSnapshot) -> Manifest:
    """A PodGroup being created as Volcano's PodGroup mutation stores it (:meth:`ClusterSnapshot.volcano_queue`):
    ``spec.queue`` set to the namespace's queue where it maps; any other object, or one it leaves as it is,
    unchanged (not copied)."""
    spec = manifest.get("spec")
    metadata = manifest.get("metadata")
    if kind_of(manifest) is not Kind.PODGROUP or not isinstance(metadata, Mapping):
        return manifest
    written = spec.get("queue") if isinstance(spec, Mapping) else None
    if written is not None and not isinstance(written, str):
        return manifest
    namespace = metadata.get("namespace")
    queue = snapshot.volcano_queue(written, namespace if isinstance(namespace, str) else "")
    if queue == (written or keys.DEFAULT_QUEUE):
        return manifest
    return {**manifest, "spec": {**(spec if isinstance(spec, Mapping) else {}), "queue": queue}}


def queue_record(manifest: Manifest) -> QueueRecord:
    queue = Queue.from_manifest(manifest)
    return QueueRecord(queue=queue, quota=card_quota(queue.meta.annotations))


def describe(kind: Kind, manifest: Manifest) -> str:
    """``Pod team-a/train-0`` for messages; falls back to the kind when the object has no readable name."""
    try:
        meta = read_meta(manifest, namespaced=kind in NAMESPACED_KINDS)
    except InputError:
        return str(kind)
    return str(meta)
