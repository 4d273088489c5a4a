"""Typed views over Kubernetes manifests (plain dicts as the API server or a YAML file gives them).

Each ``X.from_manifest`` reads only the fields cardquota needs and raises :class:`InputError` naming the field
path when one of them has the wrong shape. Views are immutable values: a watch event replaces a view whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from cardquota.core import keys
from cardquota.core.dra_claims import ClaimRef, claim_refs
from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES, SEQUENCE_TYPES
from cardquota.core.quantity import parse_quantity
from cardquota.core.violations import type_name

Manifest = Mapping[str, Any]
ObjectKey = tuple[str, ...]
"""(namespace, name); the namespace is "" for cluster-scoped objects. Typed as a tuple of any length, not
``tuple[str, str]``: the compiled core holds a value of a fixed-length tuple type unboxed and builds a new tuple
each time it stores one, so every dict keyed by a pod would hold its own copy of the key (~60 bytes each), and the
keys the views share (a PodGroup's, :func:`share`) would no longer be shared."""

NO_STRINGS: Mapping[str, str] = MappingProxyType({})
NO_AMOUNTS: Mapping[str, Fraction] = MappingProxyType({})
"""The labels or annotations of an object that has none (shared: most objects have no labels or no annotations)."""
TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})
RELEASABLE_POD_PHASES = frozenset({"Pending", "Running"})
"""Phases in which a pod being deleted is Releasing to Volcano (see :attr:`Pod.releasing`)."""
RESTART_POLICY_ALWAYS = "Always"


def namespaced_key(manifest: Mapping[str, Any]) -> ObjectKey:
    """(namespace, name) of a namespaced object, read leniently (no validation: a deleted object, a TaskInfo's pod):
    the namespace "default" when it is not written, as the API server defaults it."""
    metadata = manifest.get("metadata")
    metadata = metadata if isinstance(metadata, MAPPING_TYPES) else {}
    return (str(metadata.get("namespace") or "default"), str(metadata.get("name", "")))


# The named tuples built on every admission and watch event (ObjectMeta, Pod, the webhook's AdmissionRequest) are
# built with ``tuple.__new__(Type, (fields…))``, every field given in order: a named tuple's own constructor is a
# Python function (the compiled core calls it as one), which costs ~0.3 µs more per tuple, and more when the
# server's other work has left the CPU's caches cold (bench/webhook.py). tests/unit/test_objects.py checks that
# these views equal the ones their constructors build.


class ObjectMeta(NamedTuple):
    """An object's identity, labels and annotations (a named tuple: one is built per watch event, cheaply)."""

    kind: str
    name: str
    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    uid: str = ""
    """``metadata.uid``, "" when not written (a manifest on disk; an object not yet created). Events about the
    object name it: ``kubectl describe`` selects an object's events by uid as well as by kind, namespace and name
    (see :func:`cardquota.operator.controller.kubernetes_event`)."""
    resource_version: str = ""
    """``metadata.resourceVersion`` as written, "" when not: the version an event about the object refers to."""

    @property
    def key(self) -> ObjectKey:
        return (self.namespace, self.name)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


GENERATED_MARK = "*"
"""Ends the name an object with only ``metadata.generateName`` is shown and keyed by (``train-*``): no object name
can contain it."""


def given_name(metadata: object) -> str:
    """The object's name: ``metadata.name``, else ``metadata.generateName`` followed by ``*`` (the API server
    generates the rest on create; ``kubectl create -f`` accepts such objects), else ""."""
    if not isinstance(metadata, MAPPING_TYPES):
        return ""
    name = metadata.get("name")
    if isinstance(name, str) and name:
        return name
    generated = metadata.get("generateName")
    return generated + GENERATED_MARK if isinstance(generated, str) and generated else ""


def is_generated(name: str) -> bool:
    """Whether a name from :func:`given_name` stands for one the API server will generate."""
    return name.endswith(GENERATED_MARK)


def completed(manifest: Manifest, name: str = "", namespace: str = "") -> Manifest:
    """The object as a policy reads it: ``metadata.name`` filled (``name`` when given, as an admission request
    gives it, else the :func:`given_name`, else ``(unnamed)``) and ``metadata.namespace`` filled from
    ``namespace`` when the object leaves it out. The webhooks and ``cardquota check`` both read objects so."""
    metadata = manifest.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, MAPPING_TYPES) else {}
    if not (isinstance(metadata.get("name"), str) and metadata["name"]):
        metadata["name"] = name or given_name(metadata) or "(unnamed)"
    if namespace and not metadata.get("namespace"):
        metadata["namespace"] = namespace
    return {**manifest, "metadata": metadata}


def read_meta(manifest: Manifest, *, namespaced: bool, kept_annotations: tuple[str, ...] | None = None,
              kept_labels: tuple[str, ...] = ()) -> ObjectMeta:
    """The identity, labels and annotations of any object, validated (an object with only
    ``metadata.generateName`` is named by :func:`given_name`).

    With ``kept_annotations`` (the view a cache holds): the labels and annotations are validated as ever, but only
    those annotations and the ``kept_labels`` are kept, and their values, the kind and the namespace are shared
    strings (:data:`_STRINGS`)."""
    kind = manifest.get("kind")
    if not isinstance(kind, str) or not kind:
        raise InputError("missing or non-string 'kind'", where="kind")
    metadata = _mapping(manifest.get("metadata"), "metadata", required=True)
    name = given_name(metadata)
    if not name:
        raise InputError(f"{kind} has no metadata.name", where="metadata.name")
    namespace = metadata.get("namespace", "default" if namespaced else "")
    if namespace is None:
        namespace = "default" if namespaced else ""
    if not isinstance(namespace, str):
        raise InputError("must be a string", where="metadata.namespace")
    if kept_annotations is not None:
        labels = _string_map(metadata.get("labels"), "metadata.labels", copy=False)
        annotations = _string_map(metadata.get("annotations"), "metadata.annotations", copy=False)
        shared_namespace = _intern(namespace, namespace) if namespaced else ""
        return tuple.__new__(ObjectMeta, (_intern(kind, kind), name, shared_namespace, _kept(labels, kept_labels),
                                          _kept(annotations, kept_annotations), _text(metadata.get("uid")),
                                          _text(metadata.get("resourceVersion"))))
    return tuple.__new__(ObjectMeta, (  # (see the note above ObjectMeta)
        kind,
        name,
        namespace if namespaced else "",
        _string_map(metadata.get("labels"), "metadata.labels"),
        _string_map(metadata.get("annotations"), "metadata.annotations"),
        _text(metadata.get("uid")),
        _text(metadata.get("resourceVersion")),
    ))


def _text(value: object) -> str:
    """A string field the API server sets (``uid``, ``resourceVersion``), read leniently: "" when it is not a
    string (only ever carried into events, never judged)."""
    return value if type(value) is str else ""


def _kept(annotations: Mapping[str, str], names: tuple[str, ...]) -> Mapping[str, str]:
    """The annotations (or labels) among ``names``, values shared (:data:`_STRINGS`) (shared :data:`NO_STRINGS`
    when none)."""
    kept: dict[str, str] | None = None
    for name in names:  # a handful: cheaper than going through the object's annotations
        value = annotations.get(name)
        if value is not None:
            if kept is None:
                kept = {}
            kept[name] = _intern(value, value)
    if kept is None:
        return NO_STRINGS
    return share(_ANNOTATIONS, tuple(kept.items()), kept)  # a job's pods name the same card, PodGroup, queue


@dataclass(frozen=True)
class Node:
    meta: ObjectMeta
    allocatable: Mapping[str, Fraction]

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def labels(self) -> Mapping[str, str]:
        return self.meta.labels

    @classmethod
    def from_manifest(cls, manifest: Manifest) -> Node:
        meta = read_meta(manifest, namespaced=False)
        status = _mapping(manifest.get("status"), "status")
        raw = _mapping(status.get("allocatable"), "status.allocatable")
        allocatable = {}
        for resource, value in raw.items():
            path = f'status.allocatable["{resource}"]'
            if not isinstance(resource, str):
                raise InputError("resource names must be strings", where=path)
            allocatable[resource] = _quantity(value, path)
        return cls(meta=meta, allocatable=allocatable)


@dataclass(frozen=True)
class Queue:
    meta: ObjectMeta
    parent: str
    state: str
    dra: Mapping[str, Any]
    """``spec.dra`` as written (validated by the DRA policy, not here); empty when absent."""
    capability: Mapping[str, Fraction] | None = None
    """``spec.capability`` cpu and memory (cores, bytes); None when it sets neither (see :func:`cpu_memory_of`)."""

    @property
    def name(self) -> str:
        return self.meta.name

    @classmethod
    def from_manifest(cls, manifest: Manifest) -> Queue:
        meta = read_meta(manifest, namespaced=False)
        spec = _mapping(manifest.get("spec"), "spec")
        status = _mapping(manifest.get("status"), "status")
        return cls(
            meta=meta,
            parent=_optional_string(spec.get("parent"), "spec.parent"),
            state=_optional_string(status.get("state"), "status.state"),
            dra=_mapping(spec.get("dra"), "spec.dra"),
            capability=cpu_memory_of(spec.get("capability")) or None,
        )


@dataclass(frozen=True)
class PodGroup:
    meta: ObjectMeta
    queue: str
    phase: str
    min_resources: Mapping[str, Fraction] = field(default_factory=lambda: NO_AMOUNTS)
    """``spec.minResources`` (what the job needs to start; Volcano's job controller sums its first
    ``minAvailable`` pods), unreadable amounts left out; empty when unset."""
    min_member: int = 1
    """``spec.minMember``: the pods that must be placed together (the gang); at least 1."""
    created: str = ""
    """``metadata.creationTimestamp`` (RFC 3339 in UTC: sorts as time): when the job was queued, which preemption
    under ``LowerOrNewerEqualPriority`` compares (:mod:`cardquota.core.preemption`)."""
    priority_class: str = ""
    """``spec.priorityClassName`` ("" when unset): its value is the job's priority
    (:meth:`~cardquota.core.snapshot.ClusterSnapshot.job_priority`)."""

    @property
    def key(self) -> ObjectKey:
        return self.meta.key

    @classmethod
    def from_manifest(cls, manifest: Manifest) -> PodGroup:
        meta = read_meta(manifest, namespaced=True)
        spec = _mapping(manifest.get("spec"), "spec")
        status = _mapping(manifest.get("status"), "status")
        return cls(
            meta=meta,
            queue=_optional_string(spec.get("queue"), "spec.queue") or keys.DEFAULT_QUEUE,
            phase=_optional_string(status.get("phase"), "status.phase"),
            min_resources=readable_amounts(spec.get("minResources")),
            min_member=_min_member(spec.get("minMember")),
            created=creation_time(manifest.get("metadata")),
            priority_class=_optional_string(spec.get("priorityClassName"), "spec.priorityClassName"),
        )


@dataclass(frozen=True)
class PriorityClass:
    """A ``scheduling.k8s.io/v1`` PriorityClass: the priority of the jobs whose PodGroup names it
    (:meth:`~cardquota.core.snapshot.ClusterSnapshot.job_priority`)."""

    name: str
    value: int
    """``value`` (an int32 the API server requires)."""
    global_default: bool = False
    """``globalDefault``: its value is the priority of the PodGroups that name no class, or one that does not
    exist."""

    @classmethod
    def from_manifest(cls, manifest: Manifest) -> PriorityClass:
        meta = read_meta(manifest, namespaced=False)
        value = manifest.get("value")
        if value is None:
            raise InputError("is required", where="value")
        if type(value) is not int:
            raise InputError(f"must be an integer, not {type_name(value)}", where="value")
        global_default = manifest.get("globalDefault")
        if global_default is not None and type(global_default) is not bool:
            raise InputError(f"must be true or false, not {type_name(global_default)}", where="globalDefault")
        return cls(meta.name, value, bool(global_default))


def _min_member(value: object) -> int:
    """``spec.minMember`` as the gang's size: the CRD makes it an int32 (Volcano treats 0 as 1, and so does this);
    anything else reads as 1."""
    return value if type(value) is int and value > 1 else 1


CACHED_POD_ANNOTATIONS = (keys.CARD_NAME, keys.GROUP_NAME, keys.QUEUE_NAME, keys.SCORING_STRATEGY_ANNOTATION,
                          keys.PREEMPTABLE, keys.ADMITTED_BY_PREEMPTION)
"""The pod annotations any rule reads from a pod the ledger holds (the card name, PodGroup and queue it is charged
by; the crossquota scoring strategy the scheduling session scores it with; whether Volcano may preempt it,
:func:`~cardquota.core.preemption.pod_preemptable`; whether the gate admitted it by preempting others). A cached
view keeps only these (the admission policies read the incoming object itself)."""
CACHED_POD_LABELS = (keys.PREEMPTABLE,)
"""The pod labels any rule reads from a pod the ledger holds: ``volcano.sh/preemptable``, which Volcano reads from
the labels when the annotations do not set it. A cached view keeps only this one (most pods: no labels at all)."""


class GateState(NamedTuple):
    """What a pod waiting at cardquota's scheduling gate (:data:`~cardquota.core.keys.CARD_GATE`) carries for the
    gate's decisions: its gates (to lift one and keep the others), its order (priority, then creation)."""

    gates: tuple[str, ...]
    """Every ``spec.schedulingGates[].name``, in order (cardquota's among them)."""
    priority: int
    """``spec.priority`` (set by the API server from the priority class); 0 when unset."""
    created: str
    """``metadata.creationTimestamp`` (RFC 3339 in UTC: sorts as time)."""


class Standing(NamedTuple):
    """What orders a pod past the gate among the admitted ones when preempting (:mod:`cardquota.core.preemption`):
    its priority and when it was admitted. Shared between views (:func:`share`): a gang's pods, bound together, hold
    one. Not its creation time: a distinct string per pod (~70 B) for pods not in gangs, where the ledger keeps at
    most 1 KiB a pod (tests/reliability/test_ledger_memory.py)."""

    priority: int
    """``spec.priority`` (set by the API server from the priority class); 0 when unset."""
    admitted: str
    """When the pod was bound (RFC 3339 in UTC: sorts as time): its ``PodScheduled`` condition's
    ``lastTransitionTime`` once ``True``, which the API server stamps when it binds the pod (``BindingREST``'s
    ``setPodNodeAndMetadata`` in pkg/registry/core/pod/storage/storage.go sets ``PodScheduled`` ``True`` through
    ``UpdatePodCondition``, which sets the time only when the status changes; kubernetes/kubernetes). "" when not
    bound yet: a pod past the gate and not bound is the most recently admitted there is (the ledger keeps no time
    of lifts; an unbound pod's condition says ``SchedulingGated`` or ``Unschedulable``, neither a lift; see
    :func:`~cardquota.core.preemption.unit_admitted`)."""


NO_STANDING = Standing(0, "")
"""The standing of a pod of priority 0 not bound yet (held as None)."""


class Pod(NamedTuple):
    """A pod as the ledger and the rules see it (a named tuple: the ledger builds one per pod event, cheaply).

    Build one with :meth:`from_manifest` or :meth:`of`; the fields after ``requests`` are derived from the
    metadata. The views the ledger holds are built with ``cached=True`` (see :meth:`from_manifest`). The metadata is
    kept in the tuple's own fields (:attr:`meta` builds an :class:`ObjectMeta` when asked): a held pod is one tuple,
    not two.
    """

    key: ObjectKey
    """(namespace, name)."""
    node_name: str
    phase: str
    requests: Mapping[str, Fraction]
    """The pod's effective request per resource (see :func:`effective_requests`)."""
    card_name: str | None
    """``volcano.sh/card.name`` as written."""
    group_key: ObjectKey | None
    """The PodGroup named by ``scheduling.k8s.io/group-name`` (in the pod's namespace); None when unset or empty."""
    queue_annotation: str | None
    """``scheduling.volcano.sh/queue-name``, None when unset or empty."""
    kind: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    deleting: bool = False
    """``metadata.deletionTimestamp`` is set (see :attr:`releasing`)."""
    uid: str = ""
    """``metadata.uid`` (see :attr:`ObjectMeta.uid`). A cached view of a bound pod keeps none: only an unbound
    pod is ever the subject of an event (:func:`~cardquota.core.events.pod_event`), and binding it is a watch event
    that replaces its view whole."""
    resource_version: str = ""
    """``metadata.resourceVersion``; kept with :attr:`uid` only."""
    standing: GateState | Standing | None = None
    """While the pod carries cardquota's scheduling gate, its :class:`GateState` (read it as :attr:`gate`); else
    its :class:`Standing`, None for :data:`NO_STANDING`. One field for both (a pod is either gated or past the
    gate): a held pod costs no more than before either was kept. Read it as :attr:`gate`, :attr:`priority` and
    :attr:`admitted`."""
    scheduler: str = ""
    """``spec.schedulerName`` ("" when unset: as written by the tests' builders; the API server defaults it to
    ``default-scheduler``). See :meth:`ClusterSnapshot.charges_a_queue
    <cardquota.core.snapshot.ClusterSnapshot.charges_a_queue>`."""
    claims: tuple[ClaimRef, ...] = ()
    """The DRA claims ``spec.resourceClaims`` names (:func:`~cardquota.core.dra_claims.claim_refs`)."""

    @property
    def gate(self) -> GateState | None:
        """Set while the pod carries cardquota's scheduling gate (only then: the other pods pay nothing for it)."""
        standing = self.standing
        return standing if isinstance(standing, GateState) else None

    @property
    def priority(self) -> int:
        """``spec.priority``, 0 when unset (see :attr:`Standing.priority`)."""
        standing = self.standing
        return standing.priority if standing is not None else 0

    @property
    def admitted(self) -> str:
        """When it was bound, "" when not yet (see :attr:`Standing.admitted`; a gated pod is not admitted)."""
        standing = self.standing
        return standing.admitted if isinstance(standing, Standing) else ""

    @property
    def meta(self) -> ObjectMeta:
        namespace, name = self.key
        return ObjectMeta(self.kind, name, namespace, self.labels, self.annotations, self.uid,
                          self.resource_version)

    @classmethod
    def of(cls, meta: ObjectMeta, node_name: str, phase: str, requests: Mapping[str, Fraction], *,
           shared: bool = False, deleting: bool = False, gate: GateState | None = None, scheduler: str = "",
           claims: tuple[ClaimRef, ...] = (), standing: Standing | None = None) -> Pod:
        """``shared``: the PodGroup key, the requests and the standing are taken from the views built before when
        equal (the pods of a job share them; see :func:`share`), and a bound pod's uid and resourceVersion are not
        kept (see :attr:`uid`). A ``gate`` is held in place of the ``standing`` (it says the priority too)."""
        annotations = meta.annotations
        uid, resource_version = ("", "") if shared and node_name else (meta.uid, meta.resource_version)
        group_name = annotations.get(keys.GROUP_NAME)
        group_key: ObjectKey | None = (meta.namespace, group_name) if group_name else None
        if shared:
            if group_key is not None:
                group_key = _GROUP_KEYS.get(group_key) or share(_GROUP_KEYS, group_key, group_key)
            if requests:
                requests = share(_REQUESTS, tuple([(resource, amount.numerator, amount.denominator)
                                                     for resource, amount in requests.items()]), requests)
        if gate is not None:
            held: GateState | Standing | None = gate
        elif standing is None or standing == NO_STANDING:
            held = None
        else:
            held = standing
            if shared:
                priority = standing.priority
                if not -5 <= priority <= 256:  # (ints outside these are not shared by Python itself)
                    standing = Standing(share(_PRIORITIES, priority, priority), standing.admitted)
                held = share(_STANDINGS, standing, standing)
        return tuple.__new__(cls, (  # (see the note above ObjectMeta)
            (meta.namespace, meta.name),
            node_name,
            phase,
            requests,
            annotations.get(keys.CARD_NAME),
            group_key,
            annotations.get(keys.QUEUE_NAME) or None,
            meta.kind,
            meta.labels,
            annotations,
            deleting,
            uid,
            resource_version,
            held,
            scheduler,
            claims,
        ))

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def terminated(self) -> bool:
        return self.phase in TERMINAL_POD_PHASES

    @property
    def releasing(self) -> bool:
        """Being deleted while Pending or Running: Volcano's task status ``Releasing`` (``getTaskStatus`` in
        pkg/scheduler/api/helpers.go, v1.15.1), which is not an allocated status (``AllocatedStatus``), so its queue
        no longer counts it (the node still does until it is gone)."""
        return self.deleting and self.phase in RELEASABLE_POD_PHASES

    @classmethod
    def from_manifest(cls, manifest: Manifest, *, cached: bool = False) -> Pod:
        """The pod's view. ``cached``: the view the ledger keeps for as long as the pod lives (validated the same
        way): labels cut to :data:`CACHED_POD_LABELS`, annotations to :data:`CACHED_POD_ANNOTATIONS`, repeated
        strings (namespace, node, phase, card name, PodGroup, queue) shared, so that a held pod keeps little beyond
        what is its own."""
        if cached and len(_STRINGS) >= MAX_SHARED:
            _STRINGS.clear()
        meta = (read_meta(manifest, namespaced=True, kept_annotations=CACHED_POD_ANNOTATIONS,
                          kept_labels=CACHED_POD_LABELS) if cached else read_meta(manifest, namespaced=True))
        spec = _mapping(manifest.get("spec"), "spec")
        status = _mapping(manifest.get("status"), "status")
        node_name = _optional_string(spec.get("nodeName"), "spec.nodeName")
        phase = _optional_string(status.get("phase"), "status.phase")
        if cached:
            node_name, phase = _intern(node_name, node_name), _intern(phase, phase)
        metadata = manifest.get("metadata")
        deleting = bool(metadata.get("deletionTimestamp")) if isinstance(metadata, MAPPING_TYPES) else False
        gate = gate_state(spec, metadata) if spec.get("schedulingGates") else None
        scheduler = _optional_string(spec.get("schedulerName"), "spec.schedulerName")
        if cached:
            scheduler = _intern(scheduler, scheduler)
        claims = claim_refs(spec, status) if spec.get("resourceClaims") else ()
        standing = None
        if gate is None:
            standing = Standing(pod_priority(spec), bound_at(status) if node_name else "")
        return cls.of(meta, node_name, phase, effective_requests(spec, "spec"), shared=cached, deleting=deleting,
                      gate=gate, scheduler=scheduler, claims=claims, standing=standing)

    def cached(self) -> Pod:
        """This view as the ledger keeps it (see :meth:`from_manifest`): itself when it already is."""
        annotations = self.annotations
        labels = self.labels
        if (all(name in CACHED_POD_LABELS for name in labels) and all(name in CACHED_POD_ANNOTATIONS
                                                                      for name in annotations)
                and not (self.node_name and (self.uid or self.resource_version))):
            return self
        meta = self.meta
        if len(_STRINGS) >= MAX_SHARED:
            _STRINGS.clear()
        meta = ObjectMeta(_intern(meta.kind, meta.kind), meta.name, _intern(meta.namespace, meta.namespace),
                          _kept(labels, CACHED_POD_LABELS), _kept(annotations, CACHED_POD_ANNOTATIONS), meta.uid,
                          meta.resource_version)
        return Pod.of(meta, _intern(self.node_name, self.node_name), _intern(self.phase, self.phase), self.requests,
                      shared=True, deleting=self.deleting, gate=self.gate,
                      scheduler=_intern(self.scheduler, self.scheduler), claims=self.claims,
                      standing=self.standing if isinstance(self.standing, Standing) else None)


def gate_state(spec: Mapping[str, Any], metadata: object) -> GateState | None:
    """The :class:`GateState` of a pod spec carrying cardquota's gate, else None."""
    names = []
    for index, gate in enumerate(_sequence(spec.get("schedulingGates"), "spec.schedulingGates")):
        name = _mapping(gate, f"spec.schedulingGates[{index}]").get("name")
        names.append(_optional_string(name, f"spec.schedulingGates[{index}].name"))
    if keys.CARD_GATE not in names:
        return None
    return GateState(tuple(names), pod_priority(spec), creation_time(metadata))


def creation_time(metadata: object) -> str:
    """``metadata.creationTimestamp`` as written, "" when it is not a string (read leniently: the API server sets
    it)."""
    created = metadata.get("creationTimestamp") if isinstance(metadata, MAPPING_TYPES) else None
    return created if isinstance(created, str) else ""


def pod_priority(spec: Mapping[str, Any]) -> int:
    """``spec.priority``, 0 when unset; an :class:`InputError` when it is not an integer."""
    priority = spec.get("priority")
    if priority is not None and (type(priority) is not int):
        raise InputError(f"must be an integer, not {type_name(priority)}", where="spec.priority")
    return priority or 0


POD_SCHEDULED = "PodScheduled"


def bound_at(status: Mapping[str, Any]) -> str:
    """When the pod was bound, as :attr:`Standing.admitted` says: its ``PodScheduled`` condition's
    ``lastTransitionTime`` once ``True``; "" when there is none (read leniently: the API server writes the
    conditions, and no rule refuses a pod for them)."""
    conditions = status.get("conditions")
    if type(conditions) is not list:
        return ""
    for condition in conditions:
        if type(condition) is dict and condition.get("type") == POD_SCHEDULED and condition.get("status") == "True":
            time = condition.get("lastTransitionTime")
            return time if type(time) is str else ""
    return ""


MAX_SHARED = 1 << 16
"""Entries in each table of values shared between cached views (:func:`share`)."""
_STRINGS: dict[str, str] = {}
"""Namespaces, node names, phases and annotation values of cached views: one string object per value (as
``sys.intern`` would, which the core does not import), emptied when full (checked once per cached view)."""


_intern = _STRINGS.setdefault
"""``_intern(value, value)``: the string equal to ``value`` that cached views share."""
_GROUP_KEYS: dict[ObjectKey, ObjectKey] = {}
_ANNOTATIONS: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
_REQUESTS: dict[tuple[tuple[str, int, int], ...], Mapping[str, Fraction]] = {}
_STANDINGS: dict[Standing, Standing] = {}
_PRIORITIES: dict[int, int] = {}

Shared = TypeVar("Shared")


def share(table: dict[Any, Shared], key: object, value: Shared) -> Shared:
    """The value stored under ``key`` in ``table`` (an equal one, built for an earlier view), else ``value``, stored.

    Views are immutable: equal parts of them can be one object (the pods of a job ask for the same requests and
    name the same PodGroup). A full table is emptied and refilled, so it never holds more than :data:`MAX_SHARED`
    entries, whatever comes and goes; sharing is only ever a saving, never a difference in what a view says.
    """
    found = table.get(key)
    if found is not None:
        return found
    if len(table) >= MAX_SHARED:
        table.clear()
    table[key] = value
    return value


def forget_shared(*tables: dict[Any, Any]) -> None:
    """Empty the tables of shared values (these and the views' own), as a full build does before it starts: what
    they held for views of a former list no longer costs memory, and the build's views share only among
    themselves (so that what a build keeps is all counted as its own)."""
    every: tuple[dict[Any, Any], ...] = (_STRINGS, _GROUP_KEYS, _ANNOTATIONS, _REQUESTS, _STANDINGS, _PRIORITIES,
                                         *tables)
    for table in every:
        table.clear()


CPU_MEMORY = ("cpu", "memory")


def readable_amounts(value: object) -> Mapping[str, Fraction]:
    """A resource list (``spec.minResources``, ``spec.capability``) as amounts; entries that are not quantities are
    left out (the API server validates these lists, and the admission policies report them), so one bad amount
    never makes the whole object unreadable."""
    if not isinstance(value, MAPPING_TYPES) or not value:
        return NO_AMOUNTS
    amounts: dict[str, Fraction] = {}
    for resource, amount in value.items():
        if isinstance(resource, str):
            try:
                amounts[resource] = parse_quantity(amount)
            except InputError:
                continue
    return amounts


def cpu_memory_of(capability: object) -> dict[str, Fraction]:
    """The cpu and memory of a queue's ``spec.capability`` (the capacity-card plugin's CPU/memory quota); empty when
    it sets neither."""
    amounts = readable_amounts(capability)
    return {resource: amounts[resource] for resource in CPU_MEMORY if resource in amounts}


def effective_requests(pod_spec: Mapping[str, Any], path: str) -> dict[str, Fraction]:
    """What the scheduler reserves for a pod, per resource, with Kubernetes semantics.

    Regular containers add up; each init container runs alone (alongside the restartable "sidecar" init
    containers started before it), so the pod needs the larger of the two; sidecars also run beside the regular
    containers; ``spec.overhead`` is added on top. A container's request falls back to its limit.

    The result is shared by pods whose containers ask for the same (:data:`_EFFECTIVE`): callers never change it.
    """
    containers = _sequence(pod_spec.get("containers"), f"{path}.containers")
    init_containers = _sequence(pod_spec.get("initContainers"), f"{path}.initContainers")
    overhead = pod_spec.get("overhead")
    key = _requests_key(containers, init_containers, overhead)
    if key is not None:  # (then at most MAX_KEYED_ENTRIES requests and limits: nothing to refuse)
        found = _EFFECTIVE.get(key)
        if found is not None:
            return found
    else:
        entries = _resource_entries(containers) + _resource_entries(init_containers)
        if entries > MAX_RESOURCE_ENTRIES:
            raise InputError(f"has {entries} resource requests and limits in its containers: cardquota reads at "
                             f"most {MAX_RESOURCE_ENTRIES} per pod", where=path)
    computed = _effective_requests(containers, init_containers, overhead, path)
    if key is not None:
        if len(_EFFECTIVE) >= MAX_EFFECTIVE:
            _EFFECTIVE.clear()
        _EFFECTIVE[key] = computed
    return computed


MAX_EFFECTIVE = 4_096
"""Entries of :data:`_EFFECTIVE` (emptied when full): distinct container resource shapes, each at most
:data:`MAX_KEYED_ENTRIES` requests and limits (a few KB at most; a few hundred bytes for a real pod)."""
MAX_KEYED_ENTRIES = 64
"""Pods naming more requests and limits than this (real pods name a handful) are computed each time, never kept:
the table's memory stays bounded by its entries times this, not by :data:`MAX_RESOURCE_ENTRIES`."""
_EFFECTIVE: dict[tuple[object, ...], dict[str, Fraction]] = {}
"""Effective requests by what they were computed from (:func:`_requests_key`): the pods of a job, and replicas
admitted one after another, ask for the same, and adding up Fractions costs more than reading the key."""


def _requests_key(containers: Sequence[Any], init_containers: Sequence[Any], overhead: object
                  ) -> tuple[object, ...] | None:
    """Everything :func:`_effective_requests` reads, as a hashable tuple; None when any part is not of the plain
    shape JSON gives (a dict of strings), or when the containers name more than :data:`MAX_KEYED_ENTRIES` requests
    and limits (counted from the sections' lengths, before any is read), which is then counted, computed, and
    refused where it must be, as always."""
    parts: list[object] = []
    budget = MAX_KEYED_ENTRIES
    for container in containers:
        part = _resources_key(container, budget)
        if part is None:
            return None
        budget -= len(part[0]) + len(part[1])
        parts.append(part)
    parts.append(None)  # the regular containers end here
    for container in init_containers:
        part = _resources_key(container, budget)
        if part is None:
            return None
        budget -= len(part[0]) + len(part[1])
        policy = container.get("restartPolicy")  # (a dict: _resources_key read it)
        if policy is not None and type(policy) is not str:
            return None
        parts.append(part)
        parts.append(policy)
    if overhead:
        if type(overhead) is not dict or not all(type(value) is str for value in overhead.values()):
            return None
        parts.append(tuple(overhead.items()))
    return tuple(parts)


ResourcesKey = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]
_NO_RESOURCES: ResourcesKey = ((), ())


def _resources_key(container: object, budget: int) -> ResourcesKey | None:
    """A container's (limits, requests) as items, or None when they are not of the plain shape or more than
    ``budget`` in all."""
    if type(container) is not dict:
        return None
    resources = container.get("resources")
    if resources is None:
        return _NO_RESOURCES
    if type(resources) is not dict:
        return None
    limits, requests = resources.get("limits"), resources.get("requests")
    if (len(limits) if type(limits) is dict else 0) + (len(requests) if type(requests) is dict else 0) > budget:
        return None
    if limits is not None and (type(limits) is not dict or not all(type(v) is str for v in limits.values())):
        return None
    if requests is not None and (type(requests) is not dict or not all(type(v) is str for v in requests.values())):
        return None
    return (tuple(limits.items()) if limits else (), tuple(requests.items()) if requests else ())


def _effective_requests(containers: Sequence[Any], init_containers: Sequence[Any], overhead: object, path: str
                        ) -> dict[str, Fraction]:
    if len(containers) == 1 and not init_containers and not overhead:
        return container_requests(containers[0], f"{path}.containers[0]")  # the common pod: nothing to add up
    total: dict[str, Fraction] = {}
    for index, container in enumerate(containers):
        _add(total, container_requests(container, f"{path}.containers[{index}]"))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for index, container in enumerate(init_containers):
        container_path = f"{path}.initContainers[{index}]"
        requests = container_requests(container, container_path)
        policy = _optional_string(_mapping(container, container_path).get("restartPolicy"),
                                  f"{container_path}.restartPolicy")
        if policy == RESTART_POLICY_ALWAYS:
            _add(total, requests)
            _add(sidecars, requests)
            running_alone = dict(sidecars)
        else:
            running_alone = dict(sidecars)
            _add(running_alone, requests)
        for resource, amount in running_alone.items():
            init_peak[resource] = max(init_peak.get(resource, Fraction(0)), amount)
    for resource, amount in init_peak.items():
        total[resource] = max(total.get(resource, Fraction(0)), amount)
    overhead_amounts = _mapping(overhead, f"{path}.overhead")
    _add(total, {name: _quantity(value, f'{path}.overhead["{name}"]') for name, value in overhead_amounts.items()})
    return total


MAX_RESOURCE_ENTRIES = 4_096
"""Requests and limits across a pod's containers and init containers. Real pods name a handful of resources in a
handful of containers (a few hundred entries at the very most); beyond this the exact sums cost tens of ms per
thousand entries on the event loop, so such a pod is refused in one line instead of read."""


def _resource_entries(containers: Sequence[Any]) -> int:
    """How many requests and limits ``containers`` carry (counted without reading them; malformed parts count 0)."""
    count = 0
    for container in containers:
        resources = container.get("resources") if type(container) is dict else None
        if type(resources) is dict:
            for section in ("limits", "requests"):
                values = resources.get(section)
                count += len(values) if type(values) is dict else 0
    return count


def container_requests(container: object, path: str) -> dict[str, Fraction]:
    """A container's requests, each falling back to the limit of the same resource."""
    spec = _mapping(container, path, required=True)
    resources = spec.get("resources")
    merged: dict[str, Fraction] = {}
    if resources is None:
        return merged
    if type(resources) is not dict:
        resources = _mapping(resources, f"{path}.resources")
    for section in ("limits", "requests"):
        values = resources.get(section)
        if values is None:
            continue
        if type(values) is not dict:
            values = _mapping(values, f"{path}.resources.{section}")
        for resource, value in values.items():
            try:
                merged[resource if type(resource) is str else str(resource)] = parse_quantity(value)
            except InputError as error:  # the field path is only built when it is needed
                raise error.located(f'{path}.resources.{section}["{resource}"]') from None
    return merged


def _add(into: dict[str, Fraction], amounts: Mapping[str, Fraction]) -> None:
    for resource, amount in amounts.items():
        into[resource] = into.get(resource, Fraction(0)) + amount


def _quantity(value: object, path: str) -> Fraction:
    try:
        return parse_quantity(value)
    except InputError as error:
        raise error.located(path) from None


def _mapping(value: object, path: str, *, required: bool = False) -> Mapping[Any, Any]:
    if type(value) is dict:  # what JSON and YAML give: skip the slower abstract-class check
        return value
    if value is None:
        if required:
            raise InputError("is required", where=path)
        return {}
    if not isinstance(value, MAPPING_TYPES):
        raise InputError(f"must be a map, not {type_name(value)}", where=path)
    return value


def _sequence(value: object, path: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, SEQUENCE_TYPES):
        raise InputError(f"must be a list, not {type_name(value)}", where=path)
    return value


def _string_map(value: object, path: str, *, copy: bool = True) -> Mapping[str, str]:
    """``value`` validated as a map of strings to strings; a copy of it (``copy``), or itself when it is a dict of
    strings already (the caller then keeps none of it)."""
    if value is None:
        return NO_STRINGS
    if type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items()):
        return dict(value) if copy else value  # the common case: one check, one copy
    result: dict[str, str] = {}
    for key, item in _mapping(value, path).items():
        if not isinstance(key, str):
            raise InputError(f"keys must be strings, not {type_name(key)}", where=path)
        if not isinstance(item, str):
            raise InputError(f"must be a string, not {type_name(item)} (quote the value)", where=f'{path}["{key}"]')
        result[key] = item
    return result


def _optional_string(value: object, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"must be a string, not {type_name(value)}", where=path)
    return value
