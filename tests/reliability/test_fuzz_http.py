"""The admission server under fuzzed bodies: every body is answered 200 (a review) or 400 (not one), never 500,
always with JSON, and within a second. ``--slow`` runs 10,000 bodies."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from admission_reviews import CLUSTER
from hypothesis import given
from hypothesis import strategies as st

from cardquota.core.policies.config import PolicyConfig
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.metrics import serve_http
from cardquota.webhooks.admission import ADMITTED, Admission
from cardquota.webhooks.server import build_app

KINDS = [{"group": group, "version": "v1beta1" if group else "v1", "kind": kind} for group, kind in ADMITTED]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False),
                    st.text(max_size=10))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c,
                                                                                  max_size=4), max_leaves=12)
fields = st.sampled_from(["metadata", "spec", "status", "annotations", "containers", "resources", "limits",
                          "volcano.sh/card.name", "volcano.sh/card.quota", "nvidia.com/gpu", "name", "namespace"])
objects = st.recursive(values, lambda c: st.dictionaries(fields, c, max_size=4), max_leaves=20)


@st.composite
def reviews(draw: st.DrawFn) -> Any:
    request: dict[str, Any] = {
        "uid": draw(st.one_of(st.just(str(uuid.uuid4())), values)),
        "kind": draw(st.one_of(st.sampled_from(KINDS), values)),
        "operation": draw(st.one_of(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]), values)),
        "namespace": draw(st.one_of(st.just("ml"), values)),
        "name": draw(st.one_of(st.just("x"), values)),
        "object": draw(st.one_of(objects, st.just({"metadata": {"name": "x"}, "spec": {}}))),
        "oldObject": draw(st.one_of(st.none(), objects)),
    }
    for key in draw(st.sets(st.sampled_from(sorted(request)), max_size=2)):
        del request[key]
    return {"apiVersion": "admission.k8s.io/v1", "kind": draw(st.sampled_from(["AdmissionReview", "Other"])),
            "request": draw(st.one_of(st.just(request), values))}


bodies = st.one_of(
    st.binary(max_size=200),
    values.map(lambda v: json.dumps(v).encode()),
    reviews().map(lambda r: json.dumps(r).encode()),
)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    ready = threading.Event()
    port: list[int] = []
    stop: list[asyncio.AbstractEventLoop] = []

    def serve() -> None:
        loop = asyncio.new_event_loop()
        stop.append(loop)
        cache = ClusterCache()
        cache.load(CLUSTER)

        async def start() -> None:
            runner = await serve_http(build_app(Admission(cache, PolicyConfig())), "127.0.0.1", 0)
            port.append(runner.addresses[0][1])
            ready.set()

        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield f"http://127.0.0.1:{port[0]}"
    stop[0].call_soon_threadsafe(stop[0].stop)


def answer(url: str, path: str, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(f"{url}{path}", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=1) as response:  # the API server's budget is 5 s
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@given(body=bodies, mutating=st.booleans())
def test_every_body_gets_200_or_400_with_json_never_500(url: str, body: bytes, mutating: bool) -> None:
    status, document = answer(url, "/mutate" if mutating else "/validate", body)
    assert status in (200, 400), (status, document)
    if status == 200:
        response = document["response"]
        assert isinstance(response["allowed"], bool)
        if not response["allowed"]:
            assert response["status"]["message"].strip()
    else:
        assert document["error"]
