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
              timeout: object = None) -> None:
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
                timeout: object = None) -> None:
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
