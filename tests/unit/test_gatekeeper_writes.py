"""The gate keeper's loop does not wait for its writes: while the lifts of one round are still being sent (the API
server slow under a burst), the next rounds decide the pods created meanwhile, and every write goes through at most
:data:`~cardquota.operator.gatekeeper.WRITERS` at a time. The API is replaced by a stand-in whose PATCH blocks until
the test lets it go."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from builders import gpu_node, pod, queue

from cardquota.core import keys
from cardquota.operator import gatekeeper as gatekeeper_module
from cardquota.operator.gatekeeper import WRITERS, Gatekeeper
from cardquota.runtime.cache import ClusterCache

A100 = "NVIDIA-A100"


def gated(name: str, second: int) -> dict[str, Any]:
    return pod(name, namespace="ml", card=A100, gpus=1, queue="team", gated=True,
               created=f"2026-12-07T10:00:{second:02d}Z", uid=f"uid-{name}")


class SlowApi:
    """PATCHes that return only once released; how many were sending at once, at most."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.sending = 0
        self.most = 0
        self.sent: list[str] = []

    def patch(self, _api: object, namespace: str, name: str, _operations: Sequence[Mapping[str, Any]],
              **_: object) -> None:
        with self.lock:
            self.sending += 1
            self.most = max(self.most, self.sending)
        self.release.wait(10)
        with self.lock:
            self.sending -= 1
            self.sent.append(name)


@pytest.mark.asyncio
async def test_a_round_decides_new_pods_while_the_last_rounds_writes_are_still_under_way(
        monkeypatch: pytest.MonkeyPatch) -> None:
    api = SlowApi()
    monkeypatch.setattr(gatekeeper_module, "patch_pod", api.patch)
    cache = ClusterCache()
    cache.load([gpu_node("a100-1", A100, 64), queue("team", {A100: 64}),
                *(gated(f"early-{index}", index) for index in range(40))])
    keeper = Gatekeeper(cache, object(), takeover_wait=0)  # type: ignore[arg-type]
    first = await keeper.round(wait=False)
    assert first is not None
    assert len(first.lifts) == 40
    cache.apply("ADDED", gated("late", 50))
    second = await asyncio.wait_for(keeper.round(wait=False), timeout=2)  # not held up by the 40 writes
    assert second is not None
    assert [lift.pod[1] for lift in second.lifts] == ["late"]  # (the 40 in flight are not decided again)
    await asyncio.sleep(0.2)
    assert api.most == WRITERS  # 41 writes under way, 16 sending
    api.release.set()
    await asyncio.wait_for(asyncio.gather(*keeper._writing), timeout=10)
    assert sorted(api.sent) == sorted([f"early-{index}" for index in range(40)] + ["late"])
    assert keeper.stats.lifted == 41


@pytest.mark.asyncio
async def test_a_stale_write_never_touches_the_lift_of_the_pod_recreated_under_its_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Pod p (uid-1) is lifted; before its write goes out, p is deleted and recreated (uid-2) and lifted in turn.
    The first write is skipped when its turn comes; one that does go out and is refused (the uid test fails) is
    read back, finds the new pod, and leaves the new pod's lift counted and its retry clock untouched."""
    from cardquota.core.gate import Lift
    from cardquota.kube import KubeError
    from cardquota.operator.gatekeeper import Flight

    sent: list[str] = []

    def refused(_api: object, _namespace: str, name: str, _operations: Sequence[Mapping[str, Any]],
                **_: object) -> None:
        sent.append(name)
        raise KubeError("the test of /metadata/uid failed", 422)

    recreated = gated("p", 1)
    recreated["metadata"]["uid"] = "uid-2"
    monkeypatch.setattr(gatekeeper_module, "patch_pod", refused)
    monkeypatch.setattr(gatekeeper_module, "read_object", lambda _api, _path: recreated)
    cache = ClusterCache()
    cache.load([gpu_node("a100-1", A100, 8), queue("team", {A100: 8}), recreated])
    keeper = Gatekeeper(cache, object(), takeover_wait=0)  # type: ignore[arg-type]
    old = Flight(Lift(("ml", "p"), "uid-1", "team", A100, 1, A100, (keys.CARD_GATE,)))
    new = Flight(Lift(("ml", "p"), "uid-2", "team", A100, 1, A100, (keys.CARD_GATE,)))
    keeper.in_flight[("ml", "p")] = new
    await keeper._send(old)  # its turn came after the pod was recreated and lifted again: not sent
    assert sent == []
    await keeper._write(old)  # (one that went out all the same)
    assert sent == ["p"]
    assert keeper.in_flight == {("ml", "p"): new}
    assert list(keeper.retry) == [(("ml", "p"), "uid-1")]
    assert keeper.stats.refused == 1


@pytest.mark.asyncio
async def test_a_lift_that_got_no_answer_holds_its_cards_until_the_api_servers_deadline_then_is_read_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The PATCH timed out: the API server may still apply it until the deadline it was given, so the pod's cards
    stay counted (a second pod does not get its room) and it is read back only after that deadline."""
    from cardquota.kube import Unreachable
    from cardquota.operator.leader import SERVER_TIMEOUT_SECONDS

    def no_answer(*_: object, **__: object) -> None:
        raise Unreachable("no Kubernetes API reachable: read timed out", 0)

    reads: list[str] = []

    def read_back(_api: object, path: str) -> dict[str, Any]:
        reads.append(path)
        return gated("first", 0)  # still gated: the write never landed

    monkeypatch.setattr(gatekeeper_module, "patch_pod", no_answer)
    monkeypatch.setattr(gatekeeper_module, "read_object", read_back)
    cache = ClusterCache()
    cache.load([gpu_node("a100-1", A100, 8), queue("team", {A100: 1}), gated("first", 0), gated("second", 1)])
    now = [0.0]
    keeper = Gatekeeper(cache, object(), takeover_wait=0, clock=lambda: now[0])  # type: ignore[arg-type]
    decided = await keeper.round()
    assert decided is not None
    assert [lift.pod[1] for lift in decided.lifts] == ["first"]
    now[0] = SERVER_TIMEOUT_SECONDS  # within the deadline: not read back, still counted
    again = await keeper.round()
    assert again is not None
    assert again.lifts == []
    assert reads == []
    assert keeper.in_flight[("ml", "first")].unsettled
    now[0] = SERVER_TIMEOUT_SECONDS + 1  # past it: read back, found gated, judged again after a pause
    after = await keeper.round()
    assert after is not None
    assert reads == ["/api/v1/namespaces/ml/pods/first"]
    assert ("ml", "first") not in keeper.in_flight
    assert keeper.stats.refused == 1
    assert keeper.stats.held_back == 1  # (decided again, held back for its retry pause)


@pytest.mark.asyncio
async def test_a_lift_not_sent_because_leadership_ended_is_not_left_holding_its_cards(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Leadership lapses between the decision and the write: the PATCH is not sent, and the lift is no longer in
    flight (else the pod would never be judged again while its cards stayed counted)."""
    sent: list[str] = []
    monkeypatch.setattr(gatekeeper_module, "patch_pod", lambda _api, _ns, name, *_, **__: sent.append(name))
    cache = ClusterCache()
    cache.load([gpu_node("a100-1", A100, 8), queue("team", {A100: 1}), gated("p", 0)])
    answers = iter([True, False])  # the round's check, then the one before the write
    keeper = Gatekeeper(cache, object(), is_leader=lambda: next(answers, True),  # type: ignore[arg-type]
                        takeover_wait=0)
    decided = await keeper.round()
    assert decided is not None
    assert [lift.pod[1] for lift in decided.lifts] == ["p"]
    assert sent == []
    assert keeper.in_flight == {}


@pytest.mark.asyncio
async def test_a_new_leader_asks_for_its_list_only_after_the_takeover_wait_and_its_own_writes_have_ended() -> None:
    """The list it waits for must start after every write that may still land: the former leader's (the wait) and
    this replica's own, sent before a lapse (``_writes_end``)."""
    cache = ClusterCache()
    cache.load([gpu_node("a100-1", A100, 8), queue("team", {A100: 1}), gated("p", 0)])
    now = [100.0]
    asked: list[float] = []

    def listed_since(moment: float) -> bool:
        asked.append(moment)
        return moment <= 100.0 + 20  # (a list started at 120 stands in for "done")

    keeper = Gatekeeper(cache, object(), takeover_wait=15, clock=lambda: now[0],  # type: ignore[arg-type]
                        listed_since=listed_since)
    keeper._writes_end = 118.0
    assert await keeper.round() is None
    now[0] = 115.0
    assert await keeper.round() is None  # the wait is over, its own last write may still land
    assert asked == []
    now[0] = 118.0
    assert await keeper.round() is not None
    assert asked == [118.0]


@pytest.mark.asyncio
async def test_a_leader_whose_start_up_list_began_after_its_predecessor_stopped_needs_no_second_list() -> None:
    """The predecessor's Lease had expired 30 s before this replica started leading (it had died): the moment the
    list must have started from is that expiry plus the clock margin, which the start-up list (begun at 90) is
    past — so the keeper lifts at once, with no list anew and no wait counted from its own election."""
    cache = ClusterCache()
    cache.load([gpu_node("a100-1", A100, 8), queue("team", {A100: 1}), gated("p", 0)])
    asked: list[float] = []

    def listed_since(moment: float) -> bool:
        asked.append(moment)
        return moment <= 90.0  # (the start-up list began at 90)

    keeper = Gatekeeper(cache, object(), takeover_wait=15, clock=lambda: 100.0,  # type: ignore[arg-type]
                        listed_since=listed_since, predecessor_done=lambda since: since - 30)
    keeper._writes_end = float("-inf")
    decided = await keeper.round(wait=False)
    assert decided is not None
    assert asked == [85.0]
    keeper._stop_writing()


def test_a_write_decided_in_an_earlier_leadership_period_is_never_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lift still waiting for a thread when leadership lapsed, and sent only after it came back, could land after
    the new period's list began: it is not sent at all (the new period judges the pod again)."""
    sent: list[str] = []
    monkeypatch.setattr(gatekeeper_module, "patch_pod", lambda _api, _ns, name, *_, **__: sent.append(name))
    keeper = Gatekeeper(ClusterCache(), object(), takeover_wait=0)  # type: ignore[arg-type]
    keeper._epoch = 1
    assert keeper._patch_while_leading("ml", "p", [], 0) is False
    assert sent == []
    assert keeper._writes_end == float("-inf")
    assert keeper._patch_while_leading("ml", "p", [], 1) is True
    assert sent == ["p"]
    assert keeper._writes_end > 0


@pytest.mark.asyncio
async def test_a_lift_found_applied_when_read_back_is_not_read_again_while_the_watch_catches_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The PATCH got no answer but was applied: read back once after the deadline, it is known past the gate and
    stays counted until the watch brings it, without a GET every round meanwhile."""
    from cardquota.kube import Unreachable
    from cardquota.operator.leader import SERVER_TIMEOUT_SECONDS

    def no_answer(*_: object, **__: object) -> None:
        raise Unreachable("no Kubernetes API reachable: read timed out", 0)

    lifted = gated("p", 0)
    lifted["spec"]["schedulingGates"] = []
    reads: list[str] = []
    monkeypatch.setattr(gatekeeper_module, "patch_pod", no_answer)
    monkeypatch.setattr(gatekeeper_module, "read_object", lambda _api, path: reads.append(path) or lifted)
    cache = ClusterCache()
    cache.load([gpu_node("a100-1", A100, 8), queue("team", {A100: 1}), gated("p", 0)])
    now = [0.0]
    keeper = Gatekeeper(cache, object(), takeover_wait=0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert await keeper.round() is not None
    now[0] = SERVER_TIMEOUT_SECONDS + 1
    for _ in range(3):
        assert await keeper.round() is not None
    assert reads == ["/api/v1/namespaces/ml/pods/p"]
    assert keeper.in_flight[("ml", "p")].written
