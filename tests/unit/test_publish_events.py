"""What the controller writes (annotations, events) and how it retries, without a cluster."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from builders import gpu_node, node, pod, podgroup, queue

from cardquota.core.cards import discover_card_types
from cardquota.core.events import CardEvent, pod_event, podgroup_event
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Node
from cardquota.core.publish import (
    annotation_changes,
    merge_patch,
    node_annotations,
    queue_annotations,
    usage_summary,
)
from cardquota.core.snapshot import queue_record
from cardquota.kube import KubeError, api_error, with_retries
from cardquota.operator.controller import kubernetes_event

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"


def test_node_annotation_is_canonical_json_and_removed_without_cards() -> None:
    cards = discover_card_types(Node.from_manifest(gpu_node("n", A100, 8)))
    assert node_annotations(cards) == {
        "volcano.sh/card.types": '{"NVIDIA-A100":{"count":8,"kind":"whole","resource":"nvidia.com/gpu"}}'}
    assert node_annotations(discover_card_types(Node.from_manifest(node("cpu")))) == {"volcano.sh/card.types": None}


def test_queue_annotations_and_summary() -> None:
    ledger = Ledger.build([gpu_node("a", A100, 8), queue("q", {A100: 10, H100: 5}),
                           pod("p", node_name="a", gpus=3, queue="q"), pod("w", gpus=1, card=H100, queue="q"),
                           podgroup("g", queue="q", request={f"{A100}|{H100}": 2})])
    assert queue_annotations(ledger.usage("q")) == {
        "volcano.sh/card.allocated": '{"NVIDIA-A100":3,"NVIDIA-H100":0}',
        "volcano.sh/card.inqueue": '{"NVIDIA-A100|NVIDIA-H100":2}',
        "volcano.sh/card.pending": '{"NVIDIA-H100":1}',
        "volcano.sh/card.usage": "NVIDIA-A100 3/10, NVIDIA-H100 0/5",
    }
    over = Ledger.build([gpu_node("a", A100, 8), queue("q"), pod("p", node_name="a", gpus=2, queue="q")])
    assert usage_summary(over.usage("q")) == "NVIDIA-A100 2/0"
    assert usage_summary(Ledger.build([queue("q")]).usage("q")) == "-"


@pytest.mark.parametrize(
    ("current", "desired", "changes"),
    [
        ({"a": "1"}, {"a": "1"}, {}),
        ({"a": "1"}, {"a": "2"}, {"a": "2"}),
        ({}, {"a": "1"}, {"a": "1"}),
        ({"a": "1"}, {"a": None}, {"a": None}),
        ({}, {"a": None}, {}),
        ({"other": "x"}, {"a": "1"}, {"a": "1"}),
    ],
)
def test_annotation_changes_only_what_differs(current: dict[str, str], desired: dict[str, Any],
                                               changes: dict[str, Any]) -> None:
    assert annotation_changes(current, desired) == changes


def test_merge_patch_touches_annotations_only() -> None:
    assert merge_patch({"a": "1", "b": None}) == {"metadata": {"annotations": {"a": "1", "b": None}}}


def events_for(*objects: dict[str, Any]) -> Ledger:
    return Ledger.build([gpu_node("a", A100, 8), *objects])


def test_podgroup_that_cannot_be_enqueued_gets_the_seeds_message() -> None:
    ledger = events_for(queue("team-a", {A100: 10}), pod("busy", node_name="a", gpus=8, queue="team-a"),
                        podgroup("pg", queue="team-a", phase="Pending", request={A100: 4}))
    event = podgroup_event(ledger.snapshot.podgroups[("default", "pg")], ledger)
    assert event == CardEvent("PodGroup", "default", "pg", "InsufficientScalarQuota",
                              "Queue team-a has insufficient NVIDIA-A100 quota: requested 4, total would be 12, but "
                              "capability is 10")


def test_podgroup_events_judge_alternatives_together_and_skip_enqueued_groups() -> None:
    ledger = events_for(queue("team-a", {A100: 2, H100: 2}),
                        podgroup("fits", queue="team-a", phase="Pending", request={f"{A100}|{H100}": 4}),
                        podgroup("big", queue="team-a", phase="Pending", request={f"{A100}|{H100}": 5}),
                        podgroup("running", queue="team-a", phase="Running", request={A100: 50}))
    groups = ledger.snapshot.podgroups
    assert podgroup_event(groups[("default", "fits")], ledger) is None
    big = podgroup_event(groups[("default", "big")], ledger)
    assert big is not None
    assert big.message.endswith("requested 5, total would be 5, but capability is 4")
    assert podgroup_event(groups[("default", "running")], ledger) is None


def test_empty_queue_capability() -> None:
    ledger = events_for(queue("plain"), podgroup("pg", queue="plain", phase="Pending", request={A100: 1}),
                        pod("p", gpus=1, card=A100, queue="plain"))
    group_event = podgroup_event(ledger.snapshot.podgroups[("default", "pg")], ledger)
    pod_evt = pod_event(ledger.snapshot.pods[("default", "p")], ledger)
    assert group_event is not None
    assert pod_evt is not None
    assert (group_event.reason, pod_evt.reason) == ("EmptyQueueCapability", "EmptyQueueCapability")


def test_no_event_until_the_queue_is_seen() -> None:
    """A PodGroup or pod seen before its queue (the queue's watch behind the PodGroups', just after both were
    created) says nothing: before, it got EmptyQueueCapability, and the right reason waited the event interval."""
    ledger = events_for(podgroup("pg", queue="team-a", phase="Pending", request={A100: 4}),
                        pod("p", gpus=1, card=A100, queue="team-a"))
    assert podgroup_event(ledger.snapshot.podgroups[("default", "pg")], ledger) is None
    assert pod_event(ledger.snapshot.pods[("default", "p")], ledger) is None
    ledger.upsert_queue(queue_record(queue("team-a", {A100: 2})))
    group_event = podgroup_event(ledger.snapshot.podgroups[("default", "pg")], ledger)
    assert group_event is not None
    assert group_event.reason == "InsufficientScalarQuota"


def test_pending_pod_events_task_mode() -> None:
    ledger = events_for(queue("team-a", {A100: 1, H100: 1}), pod("busy", node_name="a", gpus=1, queue="team-a"),
                        pod("flex", gpus=1, card=f"{A100}|{H100}", queue="team-a"),
                        pod("stuck", gpus=1, card=A100, queue="team-a"),
                        pod("bad", gpus=1, card=f"{A100}||", queue="team-a"),
                        pod("none", card=A100, queue="team-a"))
    pods = ledger.snapshot.pods
    assert pod_event(pods[("default", "flex")], ledger) is None  # H100 still fits
    stuck = pod_event(pods[("default", "stuck")], ledger)
    assert stuck is not None
    assert stuck.message == ("Queue team-a has insufficient NVIDIA-A100 quota: requested 1, total would be 2, but "
                             "capability is 1")
    for name in ("bad", "none"):
        event = pod_event(pods[("default", name)], ledger)
        assert event is not None
        assert event.reason == "GetTaskRequestResourceFailed"
    assert pod_event(pods[("default", "busy")], ledger) is None


def test_kubernetes_event_body() -> None:
    event = CardEvent("PodGroup", "ml", "pg", "InsufficientScalarQuota", "msg")
    body = kubernetes_event(event, "cardquota", now=datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC))
    assert body["involvedObject"] == {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                                      "namespace": "ml", "name": "pg"}
    assert (body["reason"], body["type"], body["message"]) == ("InsufficientScalarQuota", "Warning", "msg")
    assert body["metadata"]["name"].startswith("pg.")
    assert body["firstTimestamp"] == "2026-01-02T00:00:00Z"


@pytest.mark.parametrize(("status", "retried"), [(409, True), (410, True), (429, True), (500, True), (503, True),
                                                  (400, False), (403, False), (404, False), (422, False)])
def test_retries_with_backoff_only_on_transient_errors(status: int, retried: bool) -> None:
    calls: list[int] = []
    sleeps: list[float] = []

    def action() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise api_error("nope", status)
        return "done"

    if retried:
        assert with_retries(action, sleep=sleeps.append) == "done"
        assert sleeps == [0.1, 0.2]
    else:
        with pytest.raises(KubeError):
            with_retries(action, sleep=sleeps.append)
        assert (len(calls), sleeps) == (1, [])


def test_retries_give_up_after_the_last_delay() -> None:
    def action() -> str:
        raise api_error("still failing", 503)

    sleeps: list[float] = []
    with pytest.raises(KubeError, match="still failing"):
        with_retries(action, sleep=sleeps.append)
    assert sleeps == [0.1, 0.2, 0.4, 0.8, 1.6]
