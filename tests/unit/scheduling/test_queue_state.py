"""A queue whose ``status.state`` is not Open takes nothing new: no job enqueued, no task allocated — the same answer
from the scheduling session (the extender, ``simulate``), ``explain`` and the controller's events.

Volcano v1.15.1 refuses both in pkg/scheduler/plugins/proportion/proportion.go (``queueAllocatable``, the
``JobEnqueueableFn``) and pkg/scheduler/plugins/capacity/capacity.go; the seed's plugin (volcano-sh/volcano PR #4706
at 61a5f00, capacity_card_fn_job_enqueueable.go ``JobEnqueueableFn``) refuses enqueue.
"""

from __future__ import annotations

from typing import Any

import pytest
from builders import gpu_node, pod, podgroup, queue

from cardquota.core.events import pod_event, podgroup_event, queue_inputs
from cardquota.core.explain import explain
from cardquota.core.objects import PodGroup
from cardquota.core.scheduling.capacity_card import QUEUE_NOT_OPEN
from cardquota.core.scheduling.session import Session

A100 = "NVIDIA-A100"


def _queue(state: str | None) -> dict[str, Any]:
    manifest = queue("team-a", {A100: 8})
    manifest["spec"]["capability"] = {"cpu": "10", "memory": "10Gi"}
    if state is not None:
        manifest["status"] = {"state": state}
    return manifest


def _session(state: str | None) -> Session:
    return Session([gpu_node("n1", A100, 8), _queue(state),
                    podgroup("card-job", queue="team-a", phase="Pending", request={A100: 1}),
                    podgroup("cpu-job", queue="team-a", phase="Pending"),
                    pod("p", card=A100, gpus=1, group="card-job", queue="team-a", phase="Pending"),
                    pod("cpu", group="cpu-job", queue="team-a", phase="Pending")])


@pytest.mark.parametrize("state", ["Closed", "Closing"])
def test_a_queue_not_open_enqueues_and_allocates_nothing(state: str) -> None:
    session = _session(state)
    groups = session.ledger.snapshot.podgroups
    for name in ("card-job", "cpu-job"):
        group: PodGroup = groups[("default", name)]
        refusal = session.enqueue_refusal(group)
        assert refusal is not None
        assert refusal.reason == QUEUE_NOT_OPEN
        assert refusal.message == f"Queue team-a is {state}, not Open: it enqueues no new job"
        assert session.enqueue_is_judged(group)
        event = podgroup_event(group, session.ledger, session.config.capacity_card)
        assert event is not None
        assert (event.reason, event.message) == (refusal.reason, refusal.message)
    for name in ("p", "cpu"):
        task = session.task_refusal(("default", name))
        assert task is not None
        assert (task.reason, task.message) == (QUEUE_NOT_OPEN,
                                              f"Queue team-a is {state}, not Open: it allocates no new task")
    event = pod_event(session.view(("default", "p")), session.ledger)
    assert event is not None
    assert event.reason == QUEUE_NOT_OPEN


@pytest.mark.parametrize("state", ["Open", None])
def test_an_open_queue_or_one_not_yet_reconciled_takes_work(state: str | None) -> None:
    session = _session(state)
    group = session.ledger.snapshot.podgroups[("default", "card-job")]
    assert session.enqueue_refusal(group) is None
    assert session.task_refusal(("default", "p")) is None
    assert pod_event(session.view(("default", "p")), session.ledger) is None


def test_the_queue_state_is_an_input_of_its_events() -> None:
    """The publisher recomputes a queue's events when its inputs change: a state change must be one."""
    assert queue_inputs(_session("Open").ledger, "team-a") != queue_inputs(_session("Closed").ledger, "team-a")


def test_explain_gives_the_same_reason() -> None:
    cluster = [gpu_node("n1", A100, 8), _queue("Closed")]
    group = podgroup("card-job", queue="team-a", phase="Pending", request={A100: 1})
    blockers = explain(cluster, group).blockers
    assert blockers[0] == f"Queue team-a is Closed, not Open: it enqueues no new job ({QUEUE_NOT_OPEN})."
    assert blockers[1:] == ["It can be enqueued when queue team-a is Open again (vcctl queue operate -n team-a -a "
                            "open)."]
    pending = pod("p", card=A100, gpus=1, queue="team-a", phase="Pending")
    assert explain(cluster, pending).blockers == [
        f"Queue team-a is Closed, not Open: it allocates no new task ({QUEUE_NOT_OPEN})."]
