"""The publisher's events: once per distinct message, at most one per object per interval."""

from __future__ import annotations

from typing import Any

import pytest
from builders import gpu_node, pod, queue

import cardquota.operator.controller as controller
from cardquota.operator.cache import ClusterCache
from cardquota.operator.controller import Publisher

pytestmark = pytest.mark.asyncio


async def test_events_are_not_repeated_and_are_rate_limited(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(controller, "create_event", lambda api, namespace, event: sent.append(event))
    now = [1000.0]
    cache = ClusterCache()
    cache.load([gpu_node("a", "NVIDIA-A100", 8), queue("team-a", {"NVIDIA-A100": 1}),
                pod("waiting", gpus=2, card="NVIDIA-A100", queue="team-a")])
    publisher = Publisher(cache, api=None, event_interval=60, clock=lambda: now[0])  # type: ignore[arg-type]
    monkeypatch.setattr(controller, "patch_annotations", lambda *args: True)

    await publisher.flush()
    assert [e["message"] for e in sent] == [
        "Queue team-a has insufficient NVIDIA-A100 quota: requested 2, total would be 2, but capability is 1"]

    cache.apply("ADDED", pod("busy", node_name="a", gpus=1, queue="team-a"))
    now[0] += 1
    await publisher.flush()
    assert len(sent) == 1  # the message changed (total would be 3), but within the interval

    now[0] += 60
    cache.apply("MODIFIED", pod("busy", node_name="a", gpus=1, queue="team-a", annotations={"touch": "1"}))
    await publisher.flush()
    assert len(sent) == 2
    assert sent[1]["message"].endswith("requested 2, total would be 3, but capability is 1")

    now[0] += 600
    cache.apply("MODIFIED", pod("busy", node_name="a", gpus=1, queue="team-a", annotations={"touch": "2"}))
    await publisher.flush()
    assert len(sent) == 2  # same message: nothing new to say, however long it has been
