"""The card-quota gate's keeper against kmock: it lifts the gate of the pods whose cards fit (a JSON patch the API
applies), leaves the others gated with why, and lets a waiting pod through once cards are released — every decision
read back from the watch."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from builders import claim_template, pod, queue
from operator_runs import following_through_a_kubeconfig, serve_dra
from polling import eventually

from cardquota.core import keys
from cardquota.kube import WatchEvent, api_client
from cardquota.operator.controller import Publisher
from cardquota.operator.gatekeeper import LISTED_KINDS, Gatekeeper
from cardquota.operator.reflector import Reflector, listed_anew
from cardquota.operator.settings import Settings
from cardquota.processes import claims_current

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

A100 = "NVIDIA-A100"
PODS = "v1/pods"
GATE = Settings(card_gate=True)
"""The operator with the card gate on: kmock holds the cache's and the keeper's calls to the RBAC the chart renders
for it (its account, with the card-gate ClusterRole bound)."""


def gated(name: str, gpus: int, second: int) -> dict[str, Any]:
    return pod(name, namespace="ml", card=A100, gpus=gpus, queue="team", gated=True,
               created=f"2026-12-07T10:00:{second:02d}Z", uid=f"uid-{name}")


def gates(kmock: Any, name: str) -> list[Any]:
    return list(kmock.objects[PODS, "ml", name]["spec"].get("schedulingGates") or [])


async def delete_pod(kmock: Any, name: str, cache: Any) -> None:
    """Deletes pod ml/NAME through the API and waits until the cache's watch no longer shows it."""
    url = f"{str(kmock.url).rstrip('/')}/api/v1/namespaces/ml/pods/{name}"
    async with aiohttp.ClientSession() as session, session.delete(url) as response:
        assert response.status < 300, await response.text()
    await eventually(lambda: ("ml", name) not in cache.ledger.snapshot.pods)


async def test_the_gate_is_lifted_for_what_fits_and_the_rest_waits_until_cards_are_released(
        volcano_kmock: Any, tmp_path: Any) -> None:
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team"] = queue("team", {A100: 4})
    for index, name in enumerate(("first", "second", "third")):
        volcano_kmock.objects[PODS, "ml", name] = gated(name, 2, index)
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        keeper = Gatekeeper(cache, api, takeover_wait=0)
        decided = await keeper.round()
        assert decided is not None
        assert sorted(lift.pod[1] for lift in decided.lifts) == ["first", "second"]
        assert gates(volcano_kmock, "first") == gates(volcano_kmock, "second") == []
        assert gates(volcano_kmock, "third") == [{"name": keys.CARD_GATE}]
        assert [wait.reason for wait in decided.waits] == [
            "waiting at the card-quota gate: queue team has 0 of 4 NVIDIA-A100 free; 2 pods ahead"]

        # The watch brings the lifts back: the ledger now counts them, and nothing is in flight any more.
        await eventually(lambda: cache.ledger.snapshot.pods[("ml", "first")].gate is None
                         and cache.ledger.snapshot.pods[("ml", "second")].gate is None)
        again = await keeper.round()
        assert again is not None
        assert again.lifts == []
        assert keeper.in_flight == {}
        assert cache.ledger.held_cards("team") == {A100: 4}

        await delete_pod(volcano_kmock, "first", cache)
        released = await keeper.round()
        assert released is not None
        assert [lift.pod[1] for lift in released.lifts] == ["third"]
        assert gates(volcano_kmock, "third") == []
        assert keeper.stats.lifted == 3


async def test_a_lift_the_api_refuses_is_read_back_and_judged_again(volcano_kmock: Any, tmp_path: Any) -> None:
    """The pod was recreated under the same name between the watch event and the write: the patch's uid test fails,
    the keeper reads the pod back, finds it is not the one it judged, and drops the lift (its cards are free)."""
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team"] = queue("team", {A100: 4})
    volcano_kmock.objects[PODS, "ml", "p"] = gated("p", 4, 0)
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        keeper = Gatekeeper(cache, api, takeover_wait=0)
        recreated = gated("p", 4, 0)
        recreated["metadata"]["uid"] = "uid-recreated"
        volcano_kmock.objects[PODS, "ml", "p"] = recreated  # (the watch has not brought it yet)
        decided = await keeper.round()
        assert decided is not None
        assert [lift.uid for lift in decided.lifts] == ["uid-p"]
        assert gates(volcano_kmock, "p") == [{"name": keys.CARD_GATE}]
        assert keeper.stats.refused == 1
        assert keeper.in_flight == {}


async def test_nothing_is_lifted_while_not_leading_or_within_the_takeover_wait(volcano_kmock: Any,
                                                                               tmp_path: Any) -> None:
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team"] = queue("team", {A100: 4})
    volcano_kmock.objects[PODS, "ml", "p"] = gated("p", 1, 0)
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        now = [100.0]
        leading = [False]
        keeper = Gatekeeper(cache, api, is_leader=lambda: leading[0], takeover_wait=15, clock=lambda: now[0])
        assert await keeper.round() is None
        leading[0] = True
        assert await keeper.round() is None  # just elected: the former leader's lifts may still be on their way
        now[0] += 15
        decided = await keeper.round()
        assert decided is not None
        assert [lift.pod[1] for lift in decided.lifts] == ["p"]


class StalledWatch:
    """A watch that brings no event until closed (a watch lagging behind the API server)."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    def events(self) -> Iterator[WatchEvent]:
        self._closed.wait()
        return iter(())

    def close(self) -> None:
        self._closed.set()


async def test_a_new_leader_counts_what_its_predecessor_let_through_although_its_watch_never_brought_it(
        volcano_kmock: Any, tmp_path: Any) -> None:
    """A standby's watch lags any time behind the API server: pod ``a`` was created and let through by the leader
    before it (a write to kmock's store, which no watch reports), and this replica's cache has never seen it. Taking
    over, it lists pods and PodGroups anew before judging — so ``b`` waits for ``a``'s 4 cards instead of being let
    through beside them (8 held against a quota of 4, which the old 'wait one lease duration' let happen)."""
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team"] = queue("team", {A100: 4})
    volcano_kmock.objects[PODS, "ml", "b"] = gated("b", 4, 1)
    reflectors: list[Reflector] = []
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, reflectors, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        pods = next(reflector for reflector in reflectors if reflector.kind == "Pod")
        pods.watcher = lambda _: StalledWatch()  # from now on the pod watch brings nothing
        assert pods._stream is not None
        pods._stream.close()
        await eventually(lambda: isinstance(pods._stream, StalledWatch))
        volcano_kmock.objects[PODS, "ml", "a"] = pod(  # the former leader's lift, which the watch does not bring
            "a", namespace="ml", card=A100, gpus=4, queue="team", created="2026-12-07T10:00:00Z", uid="uid-a")
        await asyncio.sleep(0.3)
        assert ("ml", "a") not in cache.ledger.snapshot.pods

        keeper = Gatekeeper(cache, api, takeover_wait=0,
                            listed_since=functools.partial(listed_anew, reflectors, LISTED_KINDS))
        assert await keeper.round() is None  # (not listed since it leads: the lists are asked for)
        await eventually(lambda: ("ml", "a") in cache.ledger.snapshot.pods)
        decided = await keeper.round()
        assert decided is not None
        assert decided.lifts == []
        assert [wait.reason for wait in decided.waits] == [
            "waiting at the card-quota gate: queue team has 0 of 4 NVIDIA-A100 free; 0 pods ahead"]
        assert gates(volcano_kmock, "b") == [{"name": keys.CARD_GATE}]
        assert {reflector.kind: reflector.lists for reflector in reflectors
                if reflector.kind in LISTED_KINDS} == {"Pod": 2, "PodGroup": 2}


async def test_a_lift_is_not_sent_once_leadership_has_ended(volcano_kmock: Any, tmp_path: Any) -> None:
    """Leadership ends between the round's decision and the write (a renewal missed its deadline): the PATCH is not
    sent — a former leader writes nothing another replica's decisions do not know about."""
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team"] = queue("team", {A100: 4})
    volcano_kmock.objects[PODS, "ml", "p"] = gated("p", 1, 0)
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        answers = iter([True])  # the round's check says leading; the check before the write does not
        keeper = Gatekeeper(cache, api, is_leader=lambda: next(answers, False), takeover_wait=0)
        decided = await keeper.round()
        assert decided is not None
        assert [lift.pod[1] for lift in decided.lifts] == ["p"]
        assert not any(str(request.method.value).upper() == "PATCH" for request in volcano_kmock)
        assert gates(volcano_kmock, "p") == [{"name": keys.CARD_GATE}]
        assert keeper.stats.lifted == 0
        assert await keeper.round() is None
        assert keeper.in_flight == {}


async def test_a_pod_whose_lift_keeps_being_refused_is_retried_after_a_growing_pause(volcano_kmock: Any,
                                                                                     tmp_path: Any) -> None:
    """Every PATCH of the pod fails: the keeper reads the pod back, finds it gated, and does not write it again for
    1 s, then 2 s, … — not every 0.2 s round. (The refusal is the API server's own: this pod has no uid, so the
    patch's uid test can never pass. A reaction such as ``kmock["patch", path] << 403`` would not do: kmock applies
    an object-changing request to its store before any reaction answers it — kmock 0.8, ``_internal/k8s.py``
    ``KubernetesEmulator._handle``.)"""
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team"] = queue("team", {A100: 4})
    volcano_kmock.objects[PODS, "ml", "p"] = pod("p", namespace="ml", card=A100, gpus=1, queue="team", gated=True)
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        now = [0.0]
        keeper = Gatekeeper(cache, api, takeover_wait=0, clock=lambda: now[0])

        def patches() -> int:
            return sum(1 for request in volcano_kmock if str(request.method.value).upper() == "PATCH")

        written = []
        for _ in range(16):  # 3.2 s of rounds
            decided = await keeper.round()
            assert decided is not None
            assert [lift.pod[1] for lift in decided.lifts] == ["p"]
            written.append(patches())
            now[0] += 0.2
        # refused at 0 s (next try at 1 s), at 1 s (next at 3 s), at 3 s (next at 7 s)
        assert written == [1] * 5 + [2] * 10 + [3], written
        assert keeper.stats.refused == 3
        assert keeper.stats.held_back == 13
        assert gates(volcano_kmock, "p") == [{"name": keys.CARD_GATE}]
        assert keeper.in_flight == {}


async def test_a_pod_left_at_the_gate_gets_an_event_saying_why_and_the_next_sentence_replaces_it(
        volcano_kmock: Any, tmp_path: Any) -> None:
    """The gate keeper's sentence reaches ``kubectl describe pod`` as a Normal event (reason
    WaitingAtCardQuotaGate) through the publisher; a pod lifted says nothing more."""
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team"] = queue("team", {A100: 2})
    volcano_kmock.objects[PODS, "ml", "first"] = gated("first", 2, 0)
    volcano_kmock.objects[PODS, "ml", "second"] = gated("second", 2, 1)
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        keeper = Gatekeeper(cache, api, takeover_wait=0)
        publisher = Publisher(cache, api, gate_sentence=keeper.sentence, event_interval=0)
        await publisher.flush()  # (the leader's first window reconciles everything)
        decided = await keeper.round()
        assert decided is not None
        assert [lift.pod[1] for lift in decided.lifts] == ["first"]
        await publisher.flush()

        def gate_events() -> list[dict[str, Any]]:
            return [event for event in volcano_kmock.objects.values()
                    if event.get("kind") == "Event" and event.get("reason") == "WaitingAtCardQuotaGate"]

        await eventually(lambda: bool(gate_events()))
        (event,) = gate_events()
        assert event["involvedObject"]["name"] == "second"
        assert event["involvedObject"]["uid"] == "uid-second"
        assert event["type"] == "Normal"
        assert event["message"] == "waiting at the card-quota gate: queue team has 0 of 2 NVIDIA-A100 free; " \
                                   "1 pod ahead"
        assert keeper.sentence(("Pod", "ml", "first")) is None


def dra_pod(name: str, second: int) -> dict[str, Any]:
    """A gated pod without cards naming the ResourceClaimTemplate ``two`` (2 nvidia-h100 devices)."""
    made = pod(name, namespace="ml", queue="team", gated=True, created=f"2026-12-07T10:00:{second:02d}Z",
               uid=f"uid-{name}")
    made["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "two"}]
    return made


async def test_pods_naming_dra_claims_go_through_as_their_devices_fit_the_queues_dra_quota(
        volcano_kmock: Any, tmp_path: Any) -> None:
    """The DRA quota at the gate, through the claim reflectors as the operator runs them: nothing goes through
    until the claims are read; then two pods asking 2 devices each fill team's 4, the third waits until one ends."""
    team = queue("team")
    team["spec"]["dra"] = {"capability": {"nvidia-h100": {"count": 4}}}
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team"] = team
    for index, name in enumerate(("first", "second", "third")):
        volcano_kmock.objects[PODS, "ml", name] = dra_pod(name, index)
    serve_dra(volcano_kmock)
    volcano_kmock.objects["resource.k8s.io/v1beta1/resourceclaimtemplates", "ml", "two"] = claim_template(
        "two", "nvidia-h100", 2)
    claim_watches: list[Reflector] = []
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, claim_watches=claim_watches,
                                              settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        keeper = Gatekeeper(cache, api, takeover_wait=0, dra_readable=functools.partial(claims_current, claim_watches))
        await eventually(lambda: claims_current(claim_watches)
                         and ("ml", "two") in cache.ledger.snapshot.claim_templates)
        decided = await keeper.round()
        assert decided is not None
        assert sorted(lift.pod[1] for lift in decided.lifts) == ["first", "second"]
        assert gates(volcano_kmock, "third") == [{"name": keys.CARD_GATE}]
        assert [wait.reason for wait in decided.waits] == [
            "waiting at the card-quota gate: queue team has 0 of 4 nvidia-h100 devices free; 2 pods ahead"]
        await eventually(lambda: cache.ledger.snapshot.pods[("ml", "second")].gate is None)
        await delete_pod(volcano_kmock, "first", cache)
        released = await keeper.round()
        assert released is not None
        assert [lift.pod[1] for lift in released.lifts] == ["third"]


async def test_pods_naming_dra_claims_wait_while_no_dra_version_is_served(volcano_kmock: Any, tmp_path: Any) -> None:
    team = queue("team")
    team["spec"]["dra"] = {"capability": {"nvidia-h100": {"count": 4}}}
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team"] = team
    volcano_kmock.objects[PODS, "ml", "p"] = dra_pod("p", 0)
    claim_watches: list[Reflector] = []
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path, claim_watches=claim_watches,
                                              settings=GATE) as cache:
        api = api_client(kubeconfig=str(tmp_path / "kubeconfig"))  # the gate keeper calls as the operator
        keeper = Gatekeeper(cache, api, takeover_wait=0, dra_readable=functools.partial(claims_current, claim_watches))
        await eventually(lambda: all(reflector.synced.is_set() for reflector in claim_watches) and claim_watches)
        decided = await keeper.round()
        assert decided is not None
        assert decided.lifts == []
        assert [wait.reason for wait in decided.waits] == [
            "waiting at the card-quota gate: the DRA ResourceClaims are not read yet; 0 pods ahead"]
