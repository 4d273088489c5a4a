"""A gang its queue's card quota keeps out of the queue is enqueued when it may preempt: Volcano's job controller
creates a Volcano Job's pods only once its PodGroup is Inqueue (``syncJob`` in
pkg/controllers/job/job_controller_actions.go, volcano-sh/volcano v1.15.1: pods are synced only when the PodGroup's
phase is set and not Pending), so without this a Volcano Job (whose ``volcano.sh/card.request`` the Job webhook
writes) would never reach the gate, where preemption happens (cardquota.core.preemption.enqueue_plan, read by
cardquota.core.scheduling.capacity_card.podgroup_enqueue_refusal: the extender's jobEnqueueable, simulate, events
and explain)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import gpu_node, pod, podgroup, queue

from cardquota.core import keys
from cardquota.core.ledger import Ledger
from cardquota.core.objects import PodGroup
from cardquota.core.preemption import NoPlan, NoPreemption, PreemptionPlan, enqueue_plan
from cardquota.core.scheduling.capacity_card import INSUFFICIENT_SCALAR, podgroup_enqueue_refusal

H100 = "NVIDIA-H100"
NODES = [gpu_node(f"n{index}", H100, 8) for index in range(3)]
CLASSES = {"urgent": 1000, "batch": 10}


def research(policy: str | None = "LowerPriority", quota: int = 8) -> dict[str, Any]:
    return queue("research", {H100: quota}, annotations={keys.PREEMPTION: policy} if policy else None)


def running(name: str, gpus: int = 8, priority: int = 10, node: str = "n0",
            annotations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return [podgroup(name, namespace="ml", queue="research", phase="Running", created="2026-12-07T09:00:00Z"),
            pod(f"{name}-0", namespace="ml", card=H100, gpus=gpus, group=name, node_name=node, priority=priority,
                scheduled_at="2026-12-07T09:01:00Z", annotations=annotations)]


def pending_job(name: str = "llama", priority_class: str = "urgent", request: int = 8) -> dict[str, Any]:
    manifest = podgroup(name, namespace="ml", queue="research", phase="Pending", request={H100: request},
                        min_member=1, created="2026-12-07T10:00:00Z")
    manifest["spec"]["priorityClassName"] = priority_class
    return manifest


def judged(*manifests: dict[str, Any]) -> tuple[Ledger, PodGroup]:
    ledger = Ledger.build([*NODES, *manifests])
    ledger.snapshot.priority_classes.update(CLASSES)
    return ledger, ledger.snapshot.podgroups["ml", "llama"]


def test_a_higher_priority_job_short_of_card_quota_is_enqueued_to_preempt() -> None:
    ledger, group = judged(research(), *running("sweep"), pending_job())
    assert podgroup_enqueue_refusal(group, ledger, None) is None
    plan = enqueue_plan(group, {H100: 8}, ledger)
    assert isinstance(plan, PreemptionPlan)
    assert [victim.key for victim in plan.victims] == [("ml", "sweep")]


@pytest.mark.parametrize(("case", "manifests", "why"), [
    ("policy Never", [research(None), *running("sweep")], None),
    ("equal priority", [research(), *running("sweep", priority=1000)], NoPreemption.NO_LOWER_PRIORITY),
    ("not preemptable", [research(), *running("sweep", annotations={keys.PREEMPTABLE: "false"})],
     NoPreemption.NOT_PREEMPTABLE),
    ("asks more than the quota", [research(), *running("sweep")], NoPreemption.NO_SET_FITS),
])
def test_otherwise_the_enqueue_check_refuses_it_as_before(case: str, manifests: list[dict[str, Any]],
                                                          why: NoPreemption | None) -> None:
    request = 16 if case == "asks more than the quota" else 8
    ledger, group = judged(*manifests, pending_job(request=request))
    refusal = podgroup_enqueue_refusal(group, ledger, None)
    assert refusal is not None
    assert refusal.reason == INSUFFICIENT_SCALAR
    plan = enqueue_plan(group, {H100: request}, ledger)
    assert (plan.why if isinstance(plan, NoPlan) else plan) == why


def test_a_job_short_only_of_what_other_enqueued_jobs_reserve_waits_its_turn() -> None:
    """Room on the gate's count (the queue's pods hold 0 of 8) but an enqueued job reserves 8: no victim would help,
    so the enqueue order stands."""
    reserved = podgroup("earlier", namespace="ml", queue="research", phase="Inqueue", request={H100: 8})
    ledger, group = judged(research(), reserved, pending_job())
    refusal = podgroup_enqueue_refusal(group, ledger, None)
    assert refusal is not None
    assert refusal.reason == INSUFFICIENT_SCALAR


def test_its_priority_is_its_priority_class_value_else_the_global_default() -> None:
    ledger, group = judged(research(), *running("sweep", priority=10), pending_job(priority_class="missing"))
    assert ledger.snapshot.job_priority(group) == 0  # (no class of that name, no global default)
    assert podgroup_enqueue_refusal(group, ledger, None) is not None
    ledger.snapshot.default_priority = 100
    assert ledger.snapshot.job_priority(group) == 100
    assert podgroup_enqueue_refusal(group, ledger, None) is None
