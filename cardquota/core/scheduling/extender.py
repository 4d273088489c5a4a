"""The Volcano ``extender`` plugin's verbs over a :class:`Session` (pure: JSON in, JSON out).

Request and response shapes follow the wire protocol (Volcano v1.10+ predicate shape): top-level keys in lower
camelCase, the objects inside (TaskInfo, NodeInfo, JobInfo, QueueInfo) with Go field names, each carrying the full
Kubernetes object (``Pod``, ``Node``, ``PodGroup``, ``Queue``). Unknown keys are ignored and keys are matched
without regard to case. Every answer is a JSON object; when cardquota cannot decide (no session yet, an object it
cannot read) it abstains the way that never blocks the scheduler: predicate passes, no scores, enqueue abstains,
queue not overused, job ready, allocation accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cardquota.core.errors import InputError
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Manifest, ObjectKey, Pod, PodGroup
from cardquota.core.scheduling import capacity_card
from cardquota.core.scheduling.session import SchedulerConfig, Session

CODE_PASS = 0
CODE_ERROR = 1
CODE_UNSCHEDULABLE = 2
CODE_UNRESOLVABLE = 3
ENQUEUE_REJECT, ENQUEUE_ABSTAIN, ENQUEUE_PERMIT = -1, 0, 1
BOUND_STATUSES = 2 | 8 | 16 | 32 | 64
"""TaskInfo.Status bits that mean the task holds its node: Allocated, Binding, Bound, Running, Releasing."""


def field(obj: object, name: str) -> Any:
    """``obj[name]`` matched without regard to case (Go's JSON decoding), None when absent."""
    if not isinstance(obj, Mapping):
        return None
    if name in obj:
        return obj[name]
    lowered = name.lower()
    return next((value for key, value in obj.items() if isinstance(key, str) and key.lower() == lowered), None)


def task_pod(task: object) -> Manifest | None:
    """The full v1.Pod a TaskInfo carries, with its node when the task holds one."""
    pod = field(task, "Pod")
    if not isinstance(pod, Mapping) or not isinstance(pod.get("metadata"), Mapping):
        return None
    manifest: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", **pod}
    node = field(task, "NodeName")
    status = field(task, "Status")
    spec = dict(manifest.get("spec") or {})
    if isinstance(node, str) and node and isinstance(status, int) and status & BOUND_STATUSES:
        spec["nodeName"] = node
    manifest["spec"] = spec
    return manifest


def node_manifest(node_info: object) -> Manifest | None:
    node = field(node_info, "Node")
    if not isinstance(node, Mapping) or not isinstance(node.get("metadata"), Mapping):
        return None
    return {"apiVersion": "v1", "kind": "Node", **node}


def podgroup_manifest(job: object) -> Manifest | None:
    group = field(job, "PodGroup")
    if not isinstance(group, Mapping) or not isinstance(group.get("metadata"), Mapping):
        return None
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            **{key: group[key] for key in ("metadata", "spec", "status") if key in group}}


def queue_manifest(queue_info: object) -> Manifest | None:
    queue = field(queue_info, "Queue")
    if not isinstance(queue, Mapping) or not isinstance(queue.get("metadata"), Mapping):
        return None
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            **{key: queue[key] for key in ("metadata", "spec", "status") if key in queue}}


def session_manifests(snapshot: Mapping[str, Any]) -> list[Manifest]:
    """Every object an ``onSessionOpen`` snapshot carries: nodes, queues, PodGroups and the pods of both jobs and
    nodes (a pod listed twice is kept once)."""
    manifests: list[Manifest] = []
    pods: dict[tuple[str, str], Manifest] = {}
    for section, convert in (("Nodes", node_manifest), ("Queues", queue_manifest), ("Jobs", podgroup_manifest)):
        for info in _values(field(snapshot, section)):
            manifest = convert(info)
            if manifest is not None:
                manifests.append(manifest)
            for task in _values(field(info, "Tasks")):  # NodeInfo and JobInfo carry their tasks' pods
                _keep_pod(pods, task_pod(task))
    return [*manifests, *pods.values()]


class Extender:
    """The verbs, over the session opened by ``onSessionOpen`` (and the allocations made in it since)."""

    def __init__(self, config: SchedulerConfig | None = None) -> None:
        self.config = config or SchedulerConfig()
        self.session: Session | None = None

    # ------------------------------------------------------------------------------------------------- session

    def on_session_open(self, request: Mapping[str, Any]) -> dict[str, Any]:
        self.session = Session(_readable(session_manifests(request)), self.config)
        return {}

    def on_session_close(self, request: Mapping[str, Any]) -> dict[str, Any]:
        del request
        self.session = None
        return {}

    # --------------------------------------------------------------------------------------------------- verbs

    def predicate(self, request: Mapping[str, Any]) -> dict[str, Any]:
        session, key = self._task(field(request, "task"))
        node = node_manifest(field(request, "node"))
        if session is None or key is None or node is None:
            return {"status": "", "code": CODE_PASS}
        name = str(node["metadata"].get("name", ""))
        if not _known(session, node):
            return {"status": "", "code": CODE_PASS}
        refusal = session.task_refusal(key) or session.node_refusal(key, name)
        if refusal is None:
            return {"status": "", "code": CODE_PASS}
        return {"status": f"{refusal.reason}: {refusal.message}", "code": CODE_UNSCHEDULABLE}

    def prioritize(self, request: Mapping[str, Any]) -> dict[str, Any]:
        session, key = self._task(field(request, "task"))
        nodes = [node_manifest(info) for info in field(request, "nodes") or []]
        scores: dict[str, float] = {}
        for node in nodes:
            if node is None:
                continue
            name = str(node["metadata"].get("name", ""))
            if session is None or key is None:
                scores[name] = 0.0
                continue
            scores[name] = session.score(key, name) if _known(session, node) else 0.0
        return {"nodeScore": scores, "errorMessage": ""}

    def job_enqueueable(self, request: Mapping[str, Any]) -> dict[str, Any]:
        manifest = podgroup_manifest(field(request, "job"))
        if self.session is None or manifest is None:
            return {"status": ENQUEUE_ABSTAIN}
        try:
            group = PodGroup.from_manifest(manifest)
        except InputError:
            return {"status": ENQUEUE_ABSTAIN}
        if not self.session.enqueue_is_judged(group):
            return {"status": ENQUEUE_ABSTAIN}  # no cards, no cpu/memory its queue limits: not capacity-card's say
        refusal = self.session.enqueue_refusal(group)
        if refusal is not None:
            return {"status": ENQUEUE_REJECT}
        # Reserved: the next job in this cycle sees its cards and its minResources cpu/memory as inqueue.
        self.session.set_phase(manifest, "Inqueue")
        return {"status": ENQUEUE_PERMIT}

    def queue_overused(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Over its card quota: some card type holds more than the queue's quota (share above 1)."""
        queue = field(field(request, "queue"), "Name")
        if self.session is None or not isinstance(queue, str):
            return {"overused": False}
        quota = self.session.quota(queue)
        allocated = self.session.ledger.usage(queue).allocated
        share = capacity_card.queue_share({card: float(allocated.get(card, 0)) for card in quota},
                                          {card: float(amount) for card, amount in quota.items()})
        return {"overused": share > 1}

    def job_ready(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Card quotas were checked task by task on allocation: nothing more to hold the commit back for."""
        del request
        return {"status": True}

    def allocate_func(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], Manifest | None, dict[str, str]]:
        """(response, the pod, the annotations to patch onto it). An allocation that breaks the card quota (two
        tasks raced for the last card) is refused, and the scheduler rolls it back."""
        task = field(request, "task")
        session, key = self._task(task)
        node = field(task, "NodeName")
        if session is None or key is None or not isinstance(node, str) or node not in session.nodes:
            return {"errorMessage": ""}, None, {}
        session.deallocate(key)  # the task arrives with its node set: account it once, from the pending state
        refusal = session.task_refusal(key) or session.node_refusal(key, node)
        if refusal is not None:
            return {"errorMessage": f"{refusal.reason}: {refusal.message}"}, None, {}
        placement = session.allocate(key, node)
        return {"errorMessage": ""}, session.pods[key], dict(placement.annotations)

    def deallocate_func(self, request: Mapping[str, Any]) -> dict[str, Any]:
        session, key = self._task(field(request, "task"))
        if session is not None and key is not None:
            session.deallocate(key)
        return {"errorMessage": ""}

    # ------------------------------------------------------------------------------------------------ internals

    def _task(self, task: object) -> tuple[Session | None, ObjectKey | None]:
        """The session and the task's pod in it (added as pending when the session has not seen it)."""
        if self.session is None:
            return None, None
        manifest = task_pod(task)
        if manifest is None:
            return self.session, None
        try:
            key = Pod.from_manifest(manifest).key
            if key not in self.session.pods:
                key = self.session.add_pending(manifest)
        except InputError:
            return self.session, None
        return self.session, key


def _known(session: Session, node: Manifest) -> bool:
    """Whether the session holds the node, adding it when it can be read (a node the snapshot lacked)."""
    name = str(node["metadata"].get("name", ""))
    if name not in session.nodes:
        try:
            session.add_node(node)
        except InputError:
            return False
    return True


def _values(value: object) -> list[Any]:
    if isinstance(value, Mapping):
        return list(value.values())
    return list(value) if isinstance(value, list) else []


def _keep_pod(pods: dict[tuple[str, str], Manifest], manifest: Manifest | None) -> None:
    if manifest is None:
        return
    metadata = manifest["metadata"]
    pods[(str(metadata.get("namespace") or "default"), str(metadata.get("name", "")))] = manifest


def _readable(manifests: list[Manifest]) -> list[Manifest]:
    """The objects a ledger can read (a malformed one is left out, not the whole snapshot)."""
    readable = []
    for manifest in manifests:
        try:
            Ledger().upsert(manifest)
        except InputError:
            continue
        readable.append(manifest)
    return readable
