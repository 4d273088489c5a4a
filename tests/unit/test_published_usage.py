"""A process that follows no pods (``cardquota operator --role webhook``) answers a queue's usage from what the
controller published on the Queue (core/publish.py). Held here: what it reads back is what the controller computed
from pods (a round trip over random clusters), the Queue policy's warnings read it the same way, and a hand-written
or unreadable annotation adds no warning."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from builders import gpu_node, pod, podgroup, queue
from hypothesis import given, settings
from hypothesis import strategies as st

from cardquota.core import keys
from cardquota.core.ledger import Ledger, published_amounts
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.queue import delete_warnings
from cardquota.core.publish import queue_annotations

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
NODES = [gpu_node("a100-1", A100, 8), gpu_node("h100-1", H100, 8)]
QUEUES = ["team-a", "team-b"]


def published(controller: Ledger, manifests: list[dict[str, Any]]) -> Ledger:
    """The ledger of a webhook process: the same objects but pods, each Queue carrying what ``controller``
    published on it."""
    ledger = Ledger(published_usage=True)
    for manifest in manifests:
        if manifest["kind"] == "Pod":
            continue
        if manifest["kind"] == "Queue":
            manifest = copy.deepcopy(manifest)
            written = queue_annotations(controller.usage(manifest["metadata"]["name"]))
            manifest["metadata"].setdefault("annotations", {}).update(written)
        ledger.upsert(manifest)
    return ledger


def nonzero(amounts: dict[str, int]) -> dict[str, int]:
    return {card: amount for card, amount in amounts.items() if amount}


pods = st.lists(st.fixed_dictionaries({
    "queue": st.sampled_from(QUEUES),
    "card": st.sampled_from([A100, H100, None]),
    "gpus": st.integers(0, 4),
    "bound": st.booleans(),
    "group": st.sampled_from(["g-1", "g-2", None]),
}), max_size=12)


@settings(max_examples=80, deadline=None)
@given(pods, st.integers(0, 8), st.sampled_from(["Inqueue", "Running", "Pending"]))
def test_what_a_webhook_reads_back_is_what_the_controller_computed(
        specs: list[dict[str, Any]], requested: int, phase: str) -> None:
    manifests: list[dict[str, Any]] = [*NODES, queue("team-a", {A100: 6, H100: 2}), queue("team-b", {A100: 1}),
                                       podgroup("g-1", queue="team-a", phase=phase, request={A100: requested}),
                                       podgroup("g-2", queue="team-b", phase="Inqueue", request={H100: 1})]
    for index, spec in enumerate(specs):
        node_name = None
        if spec["bound"] and spec["card"] is not None:
            node_name = "a100-1" if spec["card"] == A100 else "h100-1"
        manifests.append(pod(f"p-{index}", card=spec["card"], gpus=spec["gpus"], node_name=node_name,
                             **({"group": spec["group"]} if spec["group"] else {"queue": spec["queue"]})))
    controller = Ledger.build(manifests)
    webhook = published(controller, manifests)
    for name in QUEUES:
        assert webhook.usage(name).as_json() == controller.usage(name).as_json()
        assert nonzero(webhook.queue_use(name)) == nonzero(controller.queue_use(name))
    assert webhook.snapshot.pods == {}


def test_only_queue_objects_are_listed_and_a_queue_never_published_has_no_use() -> None:
    webhook = Ledger(published_usage=True)
    for manifest in [*NODES, queue("team-a", {A100: 4}),
                     pod("p", card=A100, gpus=1, node_name="a100-1", queue="ghost")]:
        webhook.upsert(manifest)
    assert webhook.queue_names() == ["team-a"]
    assert webhook.usage("team-a").as_json() == {"quota": {A100: 4}, "allocated": {}, "inqueue": {}, "pending": {}}
    assert webhook.queue_use("team-a") == {}
    assert webhook.usage("ghost").as_json() == {"quota": {}, "allocated": {}, "inqueue": {}, "pending": {}}


@pytest.mark.parametrize("written", [
    "not json", "[1, 2]", '"A100"', '{"NVIDIA-A100": -1}', '{"NVIDIA-A100": true}', '{"NVIDIA-A100": 1.5}',
    '{"NVIDIA-A100": "2"}', "[" * 100_000 + "]" * 100_000, "",
])
def test_an_unreadable_published_figure_reads_as_none(written: str) -> None:
    assert published_amounts({keys.CARD_ALLOCATED: written}, keys.CARD_ALLOCATED) == {}


def test_a_published_figure_reads_sorted() -> None:
    assert published_amounts({keys.CARD_INQUEUE: '{"b":2,"a":0}'}, keys.CARD_INQUEUE) == {"a": 0, "b": 2}


def webhook_cluster(*objects: dict[str, Any]) -> Ledger:
    ledger = Ledger(published_usage=True)
    for manifest in (*NODES, *objects):
        ledger.upsert(manifest)
    ledger.snapshot.complete = True
    return ledger


def with_usage(manifest: dict[str, Any], allocated: dict[str, int], inqueue: dict[str, int]) -> dict[str, Any]:
    changed = copy.deepcopy(manifest)
    changed["metadata"]["annotations"].update({keys.CARD_ALLOCATED: json.dumps(allocated),
                                              keys.CARD_INQUEUE: json.dumps(inqueue)})
    return changed


def test_lowering_a_quota_below_the_published_use_warns_with_its_numbers() -> None:
    before = with_usage(queue("team-a", {A100: 8}), {A100: 3}, {A100: 2})
    ledger = webhook_cluster(before)
    after = copy.deepcopy(before)
    after["metadata"]["annotations"][keys.CARD_QUOTA] = json.dumps({A100: 4})
    warnings = admit(after, before, ledger.snapshot, PolicyConfig()).warnings
    assert [w for w in warnings if "lowered" in w] == [
        "NVIDIA-A100 quota lowered from 8 to 4, below the 5 queue team-a holds or has reserved now: running work "
        "keeps its cards, new work waits until usage falls below the quota"]
    after["metadata"]["annotations"][keys.CARD_QUOTA] = json.dumps({A100: 5})
    assert [w for w in admit(after, before, ledger.snapshot, PolicyConfig()).warnings if "lowered" in w] == []


def test_deleting_a_queue_warns_from_its_published_usage() -> None:
    ledger = webhook_cluster(with_usage(queue("team-a", {A100: 8}), {A100: 2}, {}), queue("idle", {A100: 8}))
    assert delete_warnings("team-a", ledger) == [
        "queue team-a still has card work (allocated NVIDIA-A100 2); deleting it leaves that work without a queue"]
    assert delete_warnings("idle", ledger) == []
