"""A pod being deleted is Releasing to Volcano (v1.15.1 pkg/scheduler/api/helpers.go ``getTaskStatus``): its queue
no longer counts it (``AllocatedStatus`` excludes Releasing), its node still does until it is gone (the node's
``Releasing`` resources in pkg/scheduler/api/node_info.go). The session, fed by watches, agrees with the ledger."""

from __future__ import annotations

from typing import Any

from builders import gpu_node, pod, podgroup, queue

from cardquota.core.scheduling.session import Session, watched_pod

A100 = "NVIDIA-A100"


def _deleting(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return manifest


def test_the_watch_keeps_the_deletion_timestamp() -> None:
    manifest = _deleting(pod("p", node_name="n1", gpus=1, card=A100))
    assert watched_pod(manifest)["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:00Z"


def test_a_releasing_pod_frees_its_queue_not_its_node() -> None:
    team = queue("team-a", {A100: 2})
    team["spec"]["capability"] = {"cpu": "1", "memory": "10Gi"}
    old = pod("old", node_name="n1", gpus=2, card=A100, queue="team-a", group="pg")
    session = Session([gpu_node("n1", A100, 2), team, podgroup("pg", queue="team-a", phase="Running"), old,
                       pod("new", gpus=2, card=A100, queue="team-a", group="pg")])
    key = ("default", "new")
    assert session.task_refusal(key) is not None  # the quota is held
    session.upsert(watched_pod(_deleting(pod("old", node_name="n1", gpus=2, card=A100, queue="team-a",
                                             group="pg"))))
    assert session.ledger.usage("team-a").allocated == {A100: 0}
    assert session.queue_used.get("team-a", {}).get("cpu", 0) == 0
    assert session.task_refusal(key) is None  # the queue is free, as Volcano counts it
    fit = session.fit_refusal(key, "n1")
    assert fit is not None
    assert fit.message == "Insufficient nvidia.com/gpu"  # the cards are still on the node
