"""The controller's Queue annotations against an API server that refuses more than 256 KiB of annotations on an
object (kmock made to refuse as the API server does: tests/api_limits.py): usage that would not fit is published
summarised, a patch refused as too large is replaced by one that fits, with an Event on the Queue and a counter,
and never left stale. The publisher calls as the controllers' account and kmock holds it to that account's rendered
RBAC (tests/rbac.py: the production overlay's ``cardquota-controller``), so a call the shipped roles do not allow
fails here with the API server's 403, as on a cluster (the Queue read after a refusal needs ``get`` on queues)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from api_limits import LIMIT, AnnotationLimits, annotations_size
from builders import pod, queue
from kubectl_events import described_events
from polling import eventually
from rbac import RbacEnforced, assert_nothing_refused, enforcing, rendered_grants

from cardquota.core import keys
from cardquota.core.ledger import published_amounts
from cardquota.kube import Connection, api_client, list_all_async
from cardquota.operator.controller import Publisher
from cardquota.runtime.cache import ClusterCache


class LimitsUnderRbac(RbacEnforced, AnnotationLimits):
    """The annotation limit, and the controllers' RBAC for the publisher's requests."""


pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(cls=LimitsUnderRbac, client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

WINDOW = 0.1
A100 = "NVIDIA-A100"
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
CONTROLLER_TOKEN = "controller"
"""The bearer token of the publisher's client: kmock holds its requests to the controllers' RBAC."""


@pytest.fixture(autouse=True)
def controller_rbac(volcano_kmock: Any) -> Any:
    """The controllers' rendered RBAC enforced on the publisher's requests; none was refused at the end."""
    enforcing(volcano_kmock, CONTROLLER_TOKEN, rendered_grants("cardquota-controller"))
    yield
    assert_nothing_refused(volcano_kmock)


async def call(kmock: Any, method: str, path: str, body: object = None, *, merge: bool = False) -> tuple[int, Any]:
    headers = {"Content-Type": "application/merge-patch+json"} if merge else {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session, \
            session.request(method, str(kmock.url).rstrip("/") + path, json=body, headers=headers) as response:
        return response.status, await response.json()


async def annotations_of(kmock: Any, name: str) -> dict[str, str]:
    status, body = await call(kmock, "GET", f"{QUEUES}/{name}")
    assert status == 200, body
    return dict(body["metadata"].get("annotations") or {})


def long_card_name(number: int, alternatives: int) -> str:
    """``NVIDIA-A100|`` plus unknown alternatives of 1,100 characters: what the pod webhook admitted before card
    names were limited (and what a pod created past the webhooks may still carry)."""
    return "|".join([A100, *(f"{number}-{index:03d}".ljust(1100, "x") for index in range(alternatives))])


@contextlib.asynccontextmanager
async def publishing(kmock: Any) -> AsyncIterator[tuple[ClusterCache, Publisher]]:
    connection = Connection(host=str(kmock.url).rstrip("/"), insecure=True, token=CONTROLLER_TOKEN)
    cache = ClusterCache()
    cache.load(await list_all_async(api_client(connection)))
    publisher = Publisher(cache, api_client(connection), window=WINDOW)
    task = asyncio.create_task(publisher.run())
    try:
        yield cache, publisher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def pending_becomes(kmock: Any, name: str, expected: dict[str, int]) -> dict[str, str]:
    """The Queue's annotations once its published ``card.pending`` reads ``expected``."""
    async def published() -> bool:
        pending = (await annotations_of(kmock, name)).get(keys.CARD_PENDING)
        return pending is not None and json.loads(pending) == expected

    await eventually(published)
    return await annotations_of(kmock, name)


async def queue_events(kmock: Any, name: str) -> list[dict[str, Any]]:
    _, listing = await call(kmock, "GET", "/api/v1/namespaces/default/events")
    return [item for item in listing.get("items", [])
            if item.get("involvedObject", {}).get("kind") == "Queue" and item["involvedObject"]["name"] == name]


async def test_the_stand_in_refuses_as_the_api_server_does(volcano_kmock: Any) -> None:
    await call(volcano_kmock, "POST", QUEUES, queue("team-a", {A100: 4}))
    status, body = await call(volcano_kmock, "PATCH", f"{QUEUES}/team-a",
                              {"metadata": {"annotations": {"example.com/notes": "x" * LIMIT}}}, merge=True)
    assert status == 422
    assert body["details"]["causes"] == [{"reason": "FieldValueTooLong", "field": "metadata.annotations",
                                          "message": "Too long: may not be more than 262144 bytes"}]
    assert "example.com/notes" not in await annotations_of(volcano_kmock, "team-a")


async def test_usage_outgrowing_the_limit_is_published_summarised_not_left_stale(volcano_kmock: Any) -> None:
    """Two pods naming 127 unknown alternatives of 1.1 KB each: the exact card.pending is 278 KiB. Before, the one
    merge patch was refused (422) and only logged, so the Queue kept its old figures as long as the pods lived."""
    created = queue("team-a", {A100: 4})
    created["metadata"]["uid"] = "uid-team-a"  # kmock keeps the uid it is given and sets none itself
    await call(volcano_kmock, "POST", QUEUES, created)
    async with publishing(volcano_kmock) as (cache, publisher):
        async def published() -> bool:
            return (await annotations_of(volcano_kmock, "team-a")).get(keys.CARD_USAGE) == f"{A100} 0/4"

        await eventually(published)
        for number in range(2):
            cache.apply("ADDED", pod(f"p{number}", namespace="ml", card=long_card_name(number, 127), gpus=1,
                                     queue="team-a"))
        cache.apply("ADDED", pod("fits", namespace="ml", card=A100, gpus=1, queue="team-a"))

        annotations = await pending_becomes(volcano_kmock, "team-a", {A100: 1, "(2 more)": 2})
        assert annotations_size(annotations) <= LIMIT
        assert published_amounts(annotations, keys.CARD_PENDING) == {"(2 more)": 2, A100: 1}
        await eventually(lambda: publisher.stats.summarised >= 1)  # counted once the patch's thread has returned

        async def told() -> bool:
            return any(event["reason"] == "CardUsageSummarised" for event in await queue_events(volcano_kmock,
                                                                                                "team-a"))

        await eventually(told)
        _, stored = await call(volcano_kmock, "GET", f"{QUEUES}/team-a")
        described = described_events(await queue_events(volcano_kmock, "team-a"), stored)
        assert "CardUsageSummarised" in [event["reason"] for event in described]  # kubectl describe queue lists it


async def test_a_patch_refused_as_too_large_is_replaced_by_one_that_fits(volcano_kmock: Any) -> None:
    """The cache has not seen a user's 200 KiB annotation yet, so the publisher's first patch (~100 KiB of usage)
    outgrows the limit on the API server: refused with 422, it reads the Queue again and publishes what fits beside
    the user's annotation, says so in an Event, and counts it."""
    await call(volcano_kmock, "POST", QUEUES, queue("team-a", {A100: 4}))
    async with publishing(volcano_kmock) as (cache, publisher):
        async def published() -> bool:
            return (await annotations_of(volcano_kmock, "team-a")).get(keys.CARD_USAGE) == f"{A100} 0/4"

        await eventually(published)
        user = "x" * (200 * 1024)
        status, _ = await call(volcano_kmock, "PATCH", f"{QUEUES}/team-a",
                               {"metadata": {"annotations": {"example.com/notes": user}}}, merge=True)
        assert status == 200
        cache.apply("ADDED", pod("big", namespace="ml", card=long_card_name(0, 90), gpus=1, queue="team-a"))
        cache.apply("ADDED", pod("fits", namespace="ml", card=A100, gpus=1, queue="team-a"))

        annotations = await pending_becomes(volcano_kmock, "team-a", {A100: 1, "(1 more)": 1})
        assert annotations["example.com/notes"] == user  # the user's own annotation kept whole
        assert annotations_size(annotations) <= LIMIT
        assert publisher.stats.refused_too_large == 1

        async def told() -> bool:
            return any(event["reason"] == "CardUsageTooLarge" for event in await queue_events(volcano_kmock,
                                                                                              "team-a"))

        await eventually(told)
        [event] = [event for event in await queue_events(volcano_kmock, "team-a")
                   if event["reason"] == "CardUsageTooLarge"]
        assert event["type"] == "Warning"
        assert event["message"] == (
            "volcano.sh/card.allocated, .inqueue, .pending and .usage were refused by the API server as too large, "
            "and are summarised to fit beside the Queue's other annotations: 1 entry (names no node offers first, "
            "then the longest) added up as \"(N more)\" (an object's annotations may take 256 KiB in all); kubectl "
            "cardquota usage shows the full figures")
