"""Relists that converge, through the real kube module and the pod reflector against kmock answering pages as the
API server does (``limit``/``continue``) and failing mid-list as it can:

- a continue token that expired (410 ``Expired``: etcd compacted the snapshot the first page was read from, every
  five minutes by default) falls back to one unpaginated list of the current state, and the watch starts from that
  list's resourceVersion — client-go's pager does the same (k8s.io/client-go v0.36.3, tools/pager/pager.go,
  ``ListPager.List``, ``FullListIfExpired``); listing again from the first page could expire again, and again;
- a page throttled (429 with ``Retry-After``: the API server's priority and fairness) is asked for again after the
  wait it names (client-go v0.36.3, rest/with_retry.go ``withRetry.Before``: the longer of Retry-After and the
  backoff), and once its retries are spent, after the reflector's backoff, from the same page, not the first.

The reflector calls as the operator's account, held to its shipped RBAC (the operator_connection fixture). No test
sleeps: kube's waits (time.sleep, on the list's worker thread) and the reflector's backoff are recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import kmock
import pytest
from builders import pod
from polling import eventually

from cardquota import kube
from cardquota.kube import Connection, api_client
from cardquota.operator.reflector import pod_reflector
from cardquota.runtime.cache import ClusterCache

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]
PODS = kmock.resource("", "v1", "pods")
EXPIRED = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410,
           "message": "The provided continue parameter is too old to display a consistent list result. You can "
                      "start a new list without the continue parameter, or use the continue token in this "
                      "response to retrieve the remainder of the results."}
THROTTLED = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "TooManyRequests", "code": 429,
             "message": "Too many requests, please try again later."}


class Pages:
    """Answers the pod list requests kmock receives, in pages of ``limit`` by name from a snapshot taken at the
    first page (``resourceVersion`` "100"; the continue token an offset), or whole and current when unpaginated
    (``resourceVersion`` "5000"). ``meanwhile(query)`` runs before each answer (the cluster changing). The pods are
    kept in kmock too (:meth:`seed`, :meth:`delete`), where the watch reads them. Faults are kmock reactions of their
    own, declared before this one (they answer first, as many times as sliced)."""

    def __init__(self, cluster: Any, meanwhile: Callable[[dict[str, str]], None] | None = None) -> None:
        self.cluster = cluster
        self.meanwhile = meanwhile
        self.pods: dict[str, dict[str, Any]] = {}
        self.snapshot: list[dict[str, Any]] = []
        self.queries: list[dict[str, str]] = []

    def seed(self, *names: str) -> None:
        for name in names:
            self.pods[name] = pod(name, namespace="ml", gpus=1, node_name="a100-1", phase="Running")
            self.cluster.objects[PODS, "ml", name] = self.pods[name]

    def delete(self, name: str) -> None:
        del self.pods[name]
        del self.cluster.objects[PODS, "ml", name]

    def current(self) -> list[dict[str, Any]]:
        return [self.pods[name] for name in sorted(self.pods)]

    def __call__(self, request: kmock.Request) -> Any:
        query = dict(request.params)
        self.queries.append(query)
        if self.meanwhile is not None:
            self.meanwhile(query)
        if "limit" not in query:
            return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5000"},
                    "items": self.current()}
        start = int(query.get("continue") or 0)
        if not start:
            self.snapshot = self.current()
        end = start + int(query["limit"])
        metadata: dict[str, Any] = {"resourceVersion": "100"}
        if end < len(self.snapshot):
            metadata["continue"] = str(end)
        return {"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": self.snapshot[start:end]}

    def page_requests(self, token: str | None) -> int:
        """The page requests with continue token ``token`` (None: the first page) kmock received, faults too."""
        return sum(1 for request in self.cluster if request.resource == PODS and "limit" in request.params
                   and "watch" not in request.params and request.params.get("continue") == token)

    def unpaginated(self) -> int:
        return sum(1 for query in self.queries if "limit" not in query)


def watched_from(cluster: Any) -> list[str]:
    return [request.params.get("resourceVersion", "") for request in cluster
            if request.params.get("watch") == "true" and request.resource == PODS]


async def reflecting(cluster: Any, connection: Connection, pages: Pages, monkeypatch: pytest.MonkeyPatch,
                     limit: int = 2) -> tuple[Any, asyncio.Task[None], list[float], list[float]]:
    cluster["list", PODS] << pages
    waits: list[float] = []
    monkeypatch.setattr(kube.time, "sleep", waits.append)
    api = api_client(connection)
    reflector = pod_reflector(ClusterCache(), api)
    reflector.lister = lambda progress: kube.list_pages(api, "/api/v1/pods", "v1", "Pod", progress, limit=limit)
    backoffs: list[float] = []

    async def backoff(delay: float) -> None:
        backoffs.append(delay)
        await asyncio.sleep(0)

    reflector.sleep = backoff
    task = asyncio.create_task(reflector.run())
    await asyncio.wait_for(reflector.synced.wait(), 10)
    return reflector, task, waits, backoffs


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_expired_continue_token_falls_back_to_one_full_list_and_watches_from_it(
        volcano_kmock: Any, operator_connection: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    def meanwhile(query: dict[str, str]) -> None:
        if query.get("continue") == "2" and "p1" in pages.pods:  # p1 (listed on page 1) gone, p9 created
            pages.delete("p1")
            pages.seed("p9")

    volcano_kmock["list", PODS, kmock.params({"continue": "4"})][:1] << 410 << EXPIRED
    pages = Pages(volcano_kmock, meanwhile)
    pages.seed("p0", "p1", "p2", "p3", "p4", "p5")
    reflector, task, waits, backoffs = await reflecting(volcano_kmock, operator_connection, pages, monkeypatch)
    cache = reflector.cache
    assert {name for _, name in cache.ledger.snapshot.pods} == {"p0", "p2", "p3", "p4", "p5", "p9"}
    assert pages.unpaginated() == 1  # one unpaginated list after the 410
    assert pages.page_requests(None) == 1  # and no second pass from the first page
    assert reflector.lists == 1
    await eventually(lambda: watched_from(volcano_kmock)[:1] == ["5000"])  # the full list's resourceVersion
    assert (waits, backoffs) == ([], [])  # an expired token is not waited on
    await stopped(task)


async def test_a_page_throttled_past_its_retries_is_asked_again_not_the_whole_list(
        volcano_kmock: Any, operator_connection: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    # Page 2 throttled 30 times: five rounds of kube's six attempts, each round ending in the reflector's backoff.
    # (Before, urllib3 followed Retry-After itself three times an attempt, unbounded, and a list failing past the
    # retries was listed again from page 1.)
    volcano_kmock["list", PODS, kmock.params({"continue": "2"})][:30] << 429 << kmock.headers(
        {"Retry-After": "3"}) << THROTTLED
    pages = Pages(volcano_kmock)
    pages.seed("p0", "p1", "p2", "p3", "p4")
    reflector, task, waits, backoffs = await reflecting(volcano_kmock, operator_connection, pages, monkeypatch)
    assert {name for _, name in reflector.cache.ledger.snapshot.pods} == {"p0", "p1", "p2", "p3", "p4"}
    assert pages.page_requests(None) == 1  # the first page was not asked for again
    assert pages.page_requests("2") == 31
    assert pages.unpaginated() == 0
    assert waits == [3.0] * 25  # each retry waited the 3 s the server asked for, not 0.1..1.6 s
    assert backoffs == [3.0, 3.0, 3.0, 4.0, 8.0]  # then the reflector's backoff (0.5, 1, 2, 4, 8), or longer as asked
    assert reflector.lists == 1
    await eventually(lambda: watched_from(volcano_kmock)[:1] == ["100"])
    await stopped(task)


async def test_a_429_on_a_watch_is_retried_after_its_retry_after(volcano_kmock: Any, operator_connection: Connection,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    volcano_kmock["watch", PODS][:1] << 429 << kmock.headers({"Retry-After": "9"}) << THROTTLED
    pages = Pages(volcano_kmock)
    pages.seed("p0")
    reflector, task, _, backoffs = await reflecting(volcano_kmock, operator_connection, pages, monkeypatch)
    await eventually(lambda: len(watched_from(volcano_kmock)) >= 2)
    assert backoffs == [9.0]
    assert reflector.lists == 1  # a throttled watch is watched again, not listed again
    await stopped(task)
