"""A pod that requests a card resource without ``volcano.sh/card.name`` is checked as it is charged: on a node, the
card type that node offers for the resource (the ledger's :func:`~cardquota.core.usage.cards_on_node`), against its
queue's quota in task mode — never charged unchecked, which left its queue over quota (and Volcano's allocate action
skips every job of an overused queue: ``ssn.Overused(queue)`` in pkg/scheduler/actions/allocate/allocate.go, v1.15.1).
"""

from __future__ import annotations

from typing import Any

from builders import gpu_node, pod, queue

from cardquota.core.scheduling.capacity_card import INSUFFICIENT_SCALAR
from cardquota.core.scheduling.session import SchedulerConfig, Session
from cardquota.core.snapshot import CardPolicy, UnquotedQueues

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"


def _queue(name: str, quota: dict[str, int] | None = None) -> dict[str, Any]:
    manifest = queue(name, quota)
    manifest["spec"]["capability"] = {"cpu": "100", "memory": "100Gi"}
    return manifest


def _session(*extra: dict[str, Any], unquoted: UnquotedQueues = UnquotedQueues.ZERO) -> Session:
    return Session([gpu_node("a100", A100, 8), gpu_node("h100", H100, 8),
                    _queue("team-a", {A100: 2, H100: 4}), _queue("plain"),
                    pod("held", card=A100, gpus=1, queue="team-a", node_name="a100"), *extra],
                   SchedulerConfig(card_policy=CardPolicy(unquoted_queues=unquoted)))


def test_an_unnamed_gpu_pod_is_refused_where_its_charge_would_exceed_the_quota() -> None:
    session = _session(pod("p", gpus=2, queue="team-a"))
    key = ("default", "p")
    assert session.task_refusal(key) is None  # no node yet: nothing to charge
    refusal = session.node_refusal(key, "a100")
    assert refusal is not None
    assert refusal.reason == INSUFFICIENT_SCALAR
    assert refusal.message == ("Queue team-a has insufficient NVIDIA-A100 quota: requested 2, total would be 3, but "
                               "capability is 2 (the pod names no volcano.sh/card.name: it is charged the node's card "
                               "type)")
    assert session.node_refusal(key, "h100") is None
    # what was checked is what the ledger charges once it is placed
    assert session.cards_on(key, "h100") == {H100: 2}
    session.allocate(key, "h100")
    assert session.ledger.usage("team-a").allocated == {A100: 1, H100: 2}


def test_the_check_and_the_charge_agree_up_to_the_quota() -> None:
    session = _session(*(pod(f"p{index}", gpus=1, queue="team-a") for index in range(6)))
    placed = []
    for index in range(6):
        key = ("default", f"p{index}")
        node = next((name for name in ("a100", "h100") if session.node_refusal(key, name) is None), None)
        if node is not None:
            session.allocate(key, node)
            placed.append(node)
    usage = session.ledger.usage("team-a")
    assert all(usage.allocated.get(card, 0) <= usage.quota[card] for card in usage.allocated)
    assert usage.allocated == {A100: 2, H100: 4}
    assert placed == ["a100", "h100", "h100", "h100", "h100"]


def test_a_queue_without_any_card_quota_holds_0_cards_unless_unquoted_queues_are_unlimited() -> None:
    session = _session(pod("p", gpus=2, queue="plain"))
    refusal = session.node_refusal(("default", "p"), "a100")
    assert refusal is not None
    assert refusal.reason == "EmptyQueueCapability"
    assert refusal.message.endswith("(a queue without one holds 0 cards: --unquoted-queues=zero)")
    session = _session(pod("p", gpus=2, queue="plain"), unquoted=UnquotedQueues.UNLIMITED)
    assert session.node_refusal(("default", "p"), "a100") is None
