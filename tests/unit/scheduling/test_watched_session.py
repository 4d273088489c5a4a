"""The extender's session kept by watches (issue 20): fed object by object — in any order, with changes and
deletions — it holds what a session built from the final cluster holds; the extender decides from it without any
``onSessionOpen`` body, and the decisions of a cycle (a task allocated, a job enqueued) stand until the watch shows
them (the pod bound, the PodGroup Inqueue) or ``ASSUMED_SECONDS`` pass — as Volcano binds after the session closes
(pkg/scheduler/cache: Bind runs asynchronously after the session's dispatch)."""

from __future__ import annotations

import copy
from typing import Any

from builders import gpu_labels, node, pod, podgroup, queue
from hypothesis import given, settings
from hypothesis import strategies as st
from session_state import state
from volcano_payloads import ALLOCATED, job_info, node_info, task_info

from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import ASSUMED_SECONDS, Extender
from cardquota.core.scheduling.session import SchedulerConfig, Session
from cardquota.runtime.cache import ClusterCache

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
CONFIG = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=False))


def gpu_node(name: str, product: str, gpus: int) -> dict[str, Any]:
    return node(name, labels=gpu_labels(product, count=gpus), allocatable={"nvidia.com/gpu": str(gpus)})


def claim(name: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.example.com",
                                               "count": count}]}}}


def cluster_objects() -> list[dict[str, Any]]:
    """Nodes, a queue hierarchy with DRA quota, PodGroups, bound and pending pods (some with claims)."""
    root = queue("root")
    parent = queue("research", {A100: 8, H100: 8})
    child = queue("team-a", {A100: 4}, parent="research")
    for manifest in (parent, child):
        manifest["spec"] = {**manifest.get("spec", {}), "capability": {"cpu": "64", "memory": "256Gi"},
                            "dra": {"capability": {"gpu.example.com": {"count": 8}}}}
    objects: list[dict[str, Any]] = [gpu_node("a1", A100, 4), gpu_node("a2", A100, 4), gpu_node("h1", H100, 4),
                                     root, parent, child, claim("c1", 2), claim("c2", 1),
                                     podgroup("g1", namespace="ml", queue="team-a", phase="Running",
                                              request={A100: 2}),
                                     podgroup("g2", namespace="ml", queue="research", phase="Inqueue",
                                              request={H100: 1})]
    for index in range(6):
        manifest = pod(f"p{index}", namespace="ml", card=A100 if index % 2 else H100, gpus=1,
                       group="g1" if index < 3 else "g2", node_name=["a1", "a2", "h1", None][index % 4],
                       phase="Running" if index % 4 != 3 else "Pending")
        if index in (1, 4):
            manifest["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c1" if index == 1 else "c2"}]
        manifest["spec"]["containers"][0]["resources"]["requests"] = {"cpu": f"{index + 1}", "memory": "1Gi"}
        # What the API server returns beside (the watched session keeps only what it reads: watched_pod).
        manifest["spec"]["containers"][0]["env"] = [{"name": "RANK", "value": str(index)}]
        manifest["spec"]["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
        manifest["metadata"]["managedFields"] = [{"manager": "kubelet", "operation": "Update"}]
        manifest.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True"}]
        objects.append(manifest)
    return objects


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(len(cluster_objects()))), st.lists(st.integers(0, len(cluster_objects()) - 1),
                                                                max_size=6))
def test_a_session_fed_event_by_event_holds_what_one_built_from_the_cluster_holds(
        order: list[int], churn: list[int]) -> None:
    objects = cluster_objects()
    watched = Session([], CONFIG)
    for index in order:  # any order: pods before their group, groups before their queue
        watched.upsert(copy.deepcopy(objects[index]))
    for index in churn:  # deleted, then back (a relist); and changed back and forth
        watched.delete(objects[index])
        watched.upsert(copy.deepcopy(objects[index]))
    assert state(watched) == state(Session(copy.deepcopy(objects), CONFIG))


def test_a_pod_moved_to_another_queue_or_node_or_deleted_is_accounted_once() -> None:
    objects = cluster_objects()
    watched = Session(copy.deepcopy(objects), CONFIG)
    moved = copy.deepcopy(objects[-2])  # p4 (bound on a1, group g2)
    moved["spec"]["nodeName"] = "a2"
    moved["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "g1"
    watched.upsert(moved)
    watched.delete(objects[-1])
    changed_group = copy.deepcopy(objects[8])  # g1 moves to queue research
    changed_group["spec"]["queue"] = "research"
    watched.upsert(changed_group)
    final = [*objects[:8], changed_group, *objects[9:-2], moved]
    assert state(watched) == state(Session(copy.deepcopy(final), CONFIG))


# ------------------------------------------------------------------------------------- the watch-fed extender

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watched_extender(*objects: dict[str, Any]) -> tuple[Extender, Clock]:
    clock = Clock()
    extender = Extender(SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True)),
                        clock=clock)
    ClusterCache(sink=extender).load([gpu_node("a1", A100, 4), queue("team-a", {A100: 2}), *objects])
    return extender, clock


def card_pod(name: str, *, node_name: str | None = None) -> dict[str, Any]:
    return pod(name, namespace="ml", card=A100, gpus=1, queue="team-a", node_name=node_name,
               phase="Running" if node_name else "Pending")


def refused(extender: Extender, name: str) -> bool:
    return extender.predicate({"task": task_info(card_pod(name)), "node": node_info(gpu_node("a1", A100, 4))})[
        "code"] != 0


def test_the_extender_decides_from_the_watch_alone() -> None:
    extender, _ = watched_extender(card_pod("x", node_name="a1"))
    assert extender.on_session_open({"nothing": "read"}) == {}  # the body is not the cluster any more
    assert not refused(extender, "new")
    extender.upsert(card_pod("y", node_name="a1"))  # the watch: a second card taken
    assert refused(extender, "new")
    extender.delete(card_pod("x"))
    assert not refused(extender, "new")


def test_an_allocation_stands_until_the_watch_shows_the_bind_or_it_expires() -> None:
    extender, clock = watched_extender(card_pod("x", node_name="a1"), card_pod("p"))
    assert extender.allocate_func({"task": task_info(card_pod("p"), status=ALLOCATED, node="a1")})[0] == {
        "errorMessage": ""}
    extender.on_session_close({})
    extender.on_session_open({})
    assert refused(extender, "new")  # next cycle: the card is still taken, though no bind was seen yet
    extender.upsert(card_pod("p"))  # a status update of the pod, still unbound: the placement stands
    assert refused(extender, "new")
    clock.now += ASSUMED_SECONDS + 1
    extender.on_session_open({})
    assert not refused(extender, "new")  # the bind never came: undone

    extender.allocate_func({"task": task_info(card_pod("p"), status=ALLOCATED, node="a1")})
    extender.upsert(card_pod("p", node_name="a1"))  # the watch shows it bound: no longer an assumption
    clock.now += ASSUMED_SECONDS + 1
    extender.on_session_open({})
    assert refused(extender, "new")


def test_a_deallocation_puts_back_the_pod_as_watched() -> None:
    extender, _ = watched_extender(card_pod("x", node_name="a1"), card_pod("p"))
    extender.allocate_func({"task": task_info(card_pod("p"), status=ALLOCATED, node="a1")})
    assert refused(extender, "new")
    extender.deallocate_func({"task": task_info(card_pod("p"), status=ALLOCATED, node="a1")})
    assert not refused(extender, "new")


def test_an_enqueued_job_keeps_its_reservation_until_the_watch_shows_it_inqueue_or_it_expires() -> None:
    first = podgroup("first", namespace="ml", queue="team-a", phase="Pending", request={A100: 2})
    second = podgroup("second", namespace="ml", queue="team-a", phase="Pending", request={A100: 1})
    extender, clock = watched_extender(first, second)
    assert extender.job_enqueueable({"job": job_info(first)}) == {"status": 1}
    assert extender.job_enqueued({"job": job_info(first)}) == {}  # Volcano enqueued it (master's jobEnqueued)
    extender.on_session_close({})
    extender.upsert(first)  # the watch still shows it Pending (the phase is written after the session closes)
    extender.on_session_open({})
    assert extender.job_enqueueable({"job": job_info(second)}) == {"status": -1}  # 2 of 2 reserved
    clock.now += ASSUMED_SECONDS + 1
    extender.on_session_open({})
    assert extender.job_enqueueable({"job": job_info(second)}) == {"status": 1}
