"""The publisher's events: once per distinct message, at most one per object per interval."""

from __future__ import annotations

from typing import Any

import pytest
from builders import gpu_node, pod, queue

import cardquota.operator.controller as controller
from cardquota.operator.controller import Publisher
from cardquota.runtime.cache import ClusterCache

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


async def test_an_annotation_edited_by_someone_else_is_corrected(monkeypatch: pytest.MonkeyPatch) -> None:
    patches: list[dict[str, Any]] = []
    def record(api: object, path: str, changes: dict[str, Any]) -> bool:
        if "/queues/" in path:
            patches.append(dict(changes))
        return True

    monkeypatch.setattr(controller, "patch_annotations", record)
    monkeypatch.setattr(controller, "create_event", lambda *args: None)
    cache = ClusterCache()
    team = queue("team-a", {"NVIDIA-A100": 4})
    cache.load([gpu_node("a", "NVIDIA-A100", 8), team])
    publisher = Publisher(cache, api=None)  # type: ignore[arg-type]
    await publisher.flush()
    assert patches[-1]["volcano.sh/card.usage"] == "NVIDIA-A100 0/4"
    await publisher.flush()
    assert len(patches) == 1  # written, not yet echoed by the watch: not written again

    echoed = queue("team-a", {"NVIDIA-A100": 4})
    echoed["metadata"]["annotations"].update(patches[0])
    cache.apply("MODIFIED", echoed)  # the watch shows our write
    await publisher.flush()
    assert len(patches) == 1

    edited = queue("team-a", {"NVIDIA-A100": 4})
    edited["metadata"]["annotations"].update({**patches[0], "volcano.sh/card.usage": "hand-edited"})
    cache.apply("MODIFIED", edited)  # someone else changes it
    await publisher.flush()
    assert patches[-1] == {"volcano.sh/card.usage": "NVIDIA-A100 0/4"}


async def test_events_in_all_are_within_a_budget_and_the_rest_wait_their_turn(monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    """A storm of pods that cannot move on: at most EVENTS_BURST events at once, then EVENTS_PER_SECOND; each of the
    others is sent in its turn, and looked at again about once (not every window)."""
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(controller, "create_event", lambda api, namespace, event: sent.append(event))
    monkeypatch.setattr(controller, "patch_annotations", lambda *args: True)
    now = [1000.0]
    cache = ClusterCache()
    waiting = 120
    cache.load([gpu_node("a", "NVIDIA-A100", 8), queue("team-a", {"NVIDIA-A100": 1}),
                *(pod(f"w{index}", gpus=2, card="NVIDIA-A100", queue="team-a") for index in range(waiting))])
    publisher = Publisher(cache, api=None, clock=lambda: now[0])  # type: ignore[arg-type]

    await publisher.flush()
    assert len(sent) == controller.EVENTS_BURST
    assert publisher.stats.events_deferred == waiting - controller.EVENTS_BURST
    examined = publisher.stats.examined
    for _ in range(3):  # a second: the budget's rate, and the next ones in turn
        now[0] += 1
        await publisher.flush()
    rate = int(controller.EVENTS_PER_SECOND)
    assert controller.EVENTS_BURST + 3 * rate - 1 <= len(sent) <= controller.EVENTS_BURST + 3 * rate  # (turns fall
    # due on a float schedule: the last of a second may fall in the next)
    assert publisher.stats.examined - examined <= 3 * rate + 3  # each looked at again about once
    for _ in range(10):
        now[0] += 1
        await publisher.flush()
    assert len(sent) == waiting  # every one said, once
    assert len({event["involvedObject"]["name"] for event in sent}) == waiting
