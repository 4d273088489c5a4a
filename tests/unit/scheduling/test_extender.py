"""The extender verbs with Volcano-shaped payloads: decisions, the wire shapes, and abstaining when unsure."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import gpu_labels, node, pod, podgroup, queue
from volcano_payloads import ALLOCATED, job_info, node_info, queue_info, session_open, task_info

from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import Extender, session_manifests
from cardquota.core.scheduling.session import SchedulerConfig

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
CONFIG = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True))


def gpu_node(name: str, product: str, gpus: int) -> dict[str, Any]:
    return node(name, labels=gpu_labels(product, count=gpus), allocatable={"nvidia.com/gpu": str(gpus)})


def card_pod(name: str, card: str, *, node_name: str | None = None, queue_name: str = "team-a") -> dict[str, Any]:
    return pod(name, namespace="ml", card=card, gpus=1, queue=queue_name, node_name=node_name)


NODES = [gpu_node("a1", A100, 4), gpu_node("h1", H100, 4)]
QUEUES = [queue("team-a", {A100: 2, H100: 2})]


def opened(extender: Extender | None = None, *, bound: dict[str, list[dict[str, Any]]] | None = None,
           jobs: list[dict[str, Any]] = (), pending: list[dict[str, Any]] = ()) -> Extender:
    """An extender whose session was opened with the nodes, the queue, ``jobs`` and ``pending`` pods (each in a
    job of its own, as Volcano's controller makes for plain pods)."""
    extender = extender or Extender(CONFIG)
    groups = [*jobs, *(podgroup(p["metadata"]["name"], namespace="ml", queue="team-a", phase="Inqueue")
                       for p in pending)]
    body = session_open(NODES, QUEUES, groups, bound, {p["metadata"]["name"]: [p] for p in pending})
    assert extender.on_session_open(json.loads(json.dumps(body))) == {}
    return extender


def test_the_session_snapshot_becomes_manifests_with_bound_pods_on_their_nodes() -> None:
    held = card_pod("held", A100, node_name="a1")
    manifests = session_manifests(session_open(NODES, QUEUES, [podgroup("g", namespace="ml", queue="team-a")],
                                               {"a1": [held]}))
    kinds = sorted(m["kind"] for m in manifests)
    assert kinds == ["Node", "Node", "Pod", "PodGroup", "Queue"]
    (pod_manifest,) = [m for m in manifests if m["kind"] == "Pod"]
    assert pod_manifest["spec"]["nodeName"] == "a1"


def test_predicate_passes_a_fitting_node_and_refuses_the_wrong_card_type_and_a_spent_quota() -> None:
    extender = opened(bound={"a1": [card_pod("x", A100, node_name="a1"), card_pod("y", A100, node_name="a1")]})
    task = task_info(card_pod("new", f"{A100}|{H100}"))
    assert extender.predicate({"task": task, "node": node_info(NODES[1])}) == {"status": "", "code": 0}
    spent = extender.predicate({"task": task, "node": node_info(NODES[0])})
    assert spent == {"status": "InsufficientScalarQuota: Queue team-a has insufficient NVIDIA-A100 quota: requested "
                               "1, total would be 3, but capability is 2", "code": 2}
    wrong = opened().predicate({"task": task_info(card_pod("a-only", A100)), "node": node_info(NODES[1])})
    assert wrong["code"] == 2
    assert wrong["status"].startswith("NodeCardTypeMismatch: node h1 offers NVIDIA-H100, not one of NVIDIA-A100")


def test_prioritize_scores_the_preferred_card_type_higher() -> None:
    extender = opened()
    answer = extender.prioritize({"task": task_info(card_pod("p", f"{A100}|{H100}")),
                                  "nodes": [node_info(n) for n in NODES]})
    assert answer == {"nodeScore": {"a1": 100.0, "h1": 50.0}, "errorMessage": ""}


def test_job_enqueueable_permits_rejects_and_abstains() -> None:
    groups = [podgroup("fits", namespace="ml", queue="team-a", phase="Pending", request={A100: 2}),
              podgroup("big", namespace="ml", queue="team-a", phase="Pending", request={A100: 3}),
              podgroup("plain", namespace="ml", queue="team-a", phase="Pending")]
    extender = opened(jobs=groups)
    fits, too_big, plain = (job_info(group) for group in groups)
    assert extender.job_enqueueable({"job": fits}) == {"status": 1}
    assert extender.job_enqueueable({"job": too_big}) == {"status": -1}
    assert extender.job_enqueueable({"job": plain}) == {"status": 0}


def test_allocate_and_deallocate_move_the_queue_usage_and_a_race_for_the_last_card_is_refused() -> None:
    extender = opened(bound={"a1": [card_pod("x", A100, node_name="a1")]},
                      pending=[card_pod("first", A100), card_pod("second", A100)])
    first = task_info(card_pod("first", A100), status=ALLOCATED, node="a1")
    second = task_info(card_pod("second", A100), status=ALLOCATED, node="a1")
    answer, _, annotations = extender.allocate_func({"task": first})
    assert answer == {"errorMessage": ""}
    assert annotations == {}
    assert extender.session is not None
    assert extender.session.ledger.usage("team-a").allocated[A100] == 2
    refused, _, _ = extender.allocate_func({"task": second})
    assert refused["errorMessage"].startswith("InsufficientScalarQuota: Queue team-a has insufficient NVIDIA-A100")
    assert extender.deallocate_func({"task": first})[0] == {"errorMessage": ""}
    assert extender.session.ledger.usage("team-a").allocated[A100] == 1
    again, _, _ = extender.allocate_func({"task": second})
    assert again == {"errorMessage": ""}


def test_queue_overused_never_blocks_a_whole_queue() -> None:
    # Volcano skips every job of an overused queue (actions/allocate/allocate.go, allocateResources); card quotas
    # are per type and per task, so even a queue beyond its A100 quota is not overused.
    at_quota = opened(bound={"a1": [card_pod("x", A100, node_name="a1"), card_pod("y", A100, node_name="a1")]})
    assert at_quota.queue_overused({"queue": queue_info(QUEUES[0])}) == {"overused": False}
    beyond = opened(bound={"a1": [card_pod(f"p{i}", A100, node_name="a1") for i in range(3)]})
    assert beyond.queue_overused({"queue": queue_info(QUEUES[0])}) == {"overused": False}


@pytest.mark.parametrize("verb", ["predicate", "prioritize", "job_enqueueable", "queue_overused", "job_ready",
                                  "deallocate_func"])
def test_without_a_session_every_verb_abstains(verb: str) -> None:
    extender = Extender(CONFIG)
    answer = getattr(extender, verb)({"task": task_info(card_pod("p", A100)), "node": node_info(NODES[0]),
                                      "nodes": [node_info(NODES[0])], "queue": queue_info(QUEUES[0]),
                                      "job": job_info(podgroup("g", namespace="ml", request={A100: 99}))})
    if verb == "deallocate_func":  # (response, pod, annotations to remove)
        answer, pod, removed = answer
        assert (pod, removed) == (None, {})
    assert answer in ({"status": "", "code": 0}, {"nodeScore": {"a1": 0.0}, "errorMessage": ""}, {"status": 0},
                      {"overused": False}, {"status": True}, {"errorMessage": ""})


def test_keys_are_matched_without_regard_to_case_and_unknown_keys_are_ignored() -> None:
    extender = opened()
    task = {key.lower(): value for key, value in task_info(card_pod("p", A100)).items()} | {"Extra": 1}
    assert extender.predicate({"task": task, "node": node_info(NODES[0]), "unknown": True}) == {"status": "",
                                                                                                 "code": 0}


def test_session_close_forgets_the_session() -> None:
    extender = opened()
    assert extender.on_session_close({}) == {}
    assert extender.session is None


def test_a_permitted_job_reserves_its_cards_for_the_rest_of_the_cycle() -> None:
    groups = [podgroup("j1", namespace="ml", queue="team-a", phase="Pending", request={A100: 2}),
              podgroup("j2", namespace="ml", queue="team-a", phase="Pending", request={A100: 1})]
    extender = opened(jobs=groups)
    first, second = (job_info(group) for group in groups)
    assert extender.job_enqueueable({"job": first}) == {"status": 1}
    assert extender.job_enqueueable({"job": second}) == {"status": -1}
    assert extender.session is not None
    assert extender.session.ledger.usage("team-a").inqueue == {A100: 2}


def test_pods_of_other_schedulers_use_their_node_but_no_queue() -> None:
    system = pod("kube-proxy-x", namespace="kube-system", node_name="a1",
                 containers=[{"name": "c", "resources": {"requests": {"cpu": "6"}}}])
    system["spec"]["schedulerName"] = "default-scheduler"
    team = queue("default", {})
    team["spec"]["capability"] = {"cpu": "8"}
    extender = Extender(SchedulerConfig())
    extender.on_session_open(session_open(NODES, [team], [], {"a1": [system]}))
    task = task_info(pod("p", namespace="ml", containers=[{"name": "c", "resources": {"requests": {"cpu": "4"}}}]))
    assert extender.predicate({"task": task, "node": node_info(NODES[0])}) == {"status": "", "code": 0}
    assert extender.session is not None
    assert extender.session.node_used["a1"]["cpu"] == 6
