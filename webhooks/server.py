"""The HTTPS admission server.

Why an aiohttp server of our own rather than Kopf's webhook server: Kopf cannot (a) answer a malformed body with
HTTP 400 and a JSON error (we must never answer 500), (b) reload its SSL context in place for certificate rotation
without a restart, or (c) apply a failure mode per kind around the policy call; and its per-request handler
machinery costs latency on the API server's write path. Kopf still runs the watch handlers that feed the cache.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field

from aiohttp import web

from cardquota.runtime.health import add_health_routes
from cardquota.runtime.serving import (
    BodyBudget,
    FairShares,
    ServerLimits,
    body_guard,
    received_body,
    start_server,
    trim_soon,
)
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.review import (
    MalformedReview,
    NotInPlace,
    encoded,
    read_review,
)

log = logging.getLogger("cardquota.webhooks")
OBJECT_BYTES = 3 * 2**20
"""The largest request body the API server accepts, hence the largest object a review carries as JSON:
``MaxRequestBodyBytes`` = 3 MiB (k8s.io/apiserver pkg/server/config.go, ``NewConfig``; the JSON and YAML decoders
refuse larger bodies, pkg/endpoints/handlers/rest.go ``limitedReadBody``)."""
REVIEW_WRAPPER_BYTES = 256 * 2**10
"""The rest of an AdmissionReview: uid, kind, resource, names, the user (name, uid, groups, extra) and the
options; a few KiB, rarely more (a user in hundreds of groups)."""
MAX_BODY = 2 * OBJECT_BYTES + REVIEW_WRAPPER_BYTES
"""The largest review body the API server sends: an UPDATE carries ``object`` and ``oldObject``, each up to
:data:`OBJECT_BYTES` (k8s.io/api admission/v1 ``AdmissionRequest``; built by k8s.io/apiserver
pkg/admission/plugin/webhook/request/admissionreview.go ``CreateV1AdmissionReview``), plus the wrapper. Anything
larger is not an AdmissionReview: refused with 413 before it is read when its Content-Length says so."""
BODY_BYTES = 64 * 2**20
"""Bytes of review bodies held at once (arriving, or received and being judged): about ten maximal UPDATE reviews,
and thousands of realistic ones (~6 KB). A body's whole ``Content-Length`` (or the most a body may have, when it
has none) is taken once its first bytes arrive (:func:`~cardquota.runtime.serving.received_body`), so a caller
declaring a large body and sending it at the rate floor holds that much for up to
:data:`~cardquota.runtime.serving.BODY_SECONDS`. When it is full, a body waits, unread past its first bytes, up to
:data:`~cardquota.runtime.serving.BODY_SECONDS` (503 after)."""
PEER_BODY_BYTES = 16 * 2**20
"""Of :data:`BODY_BYTES`, what one source that is not trusted (``--trusted-cidrs``) may hold: a quarter, so one
caller sending large bodies as fast as it can leaves three quarters to the others; a peer holding nothing may
always take what is free."""
TRUSTED_BODY_BYTES = 32 * 2**20
"""Bytes beyond :data:`BODY_BYTES` that only trusted sources (the API server's addresses, when given) may hold."""
LARGE_BODY_BYTES = 2**20
"""A body above this size, once received, waits for one of :data:`LARGE_BODY_SLOTS` to be decoded and judged."""
LARGE_BODY_SLOTS = 2
"""Large bodies decoded and judged at once, at most one by any one untrusted source, and one more kept for the
trusted sources. Decoding a 3 MiB object builds up to ~100 MiB of Python objects and an UPDATE holds two: three
slots keep as many maximal reviews at once under half the Deployment's 1 GiB (``tests/reliability/
test_bounded_servers.py``). A slot is taken once the whole body is in, so a caller sending slowly never holds one.
Waiting rather than answering 429: a slot frees in tens to hundreds of milliseconds (a 3 MiB body is read in
~30-130 ms: ``bench/worst_case.py``), where a refused review would come back, if at all, no sooner than a second
later (a Retry-After counts whole seconds) and from the same 5 s budget; a 429 the API server does not retry fails
the write, or lets it through unchecked under ``failurePolicy: Ignore``."""


@dataclass(frozen=True)
class _Gates:
    bodies: BodyBudget = field(default_factory=lambda: BodyBudget(
        MAX_BODY, FairShares(BODY_BYTES, PEER_BODY_BYTES, TRUSTED_BODY_BYTES)))
    decoding: FairShares = field(default_factory=lambda: FairShares(LARGE_BODY_SLOTS, 1, 1))


POLICY_THREADS = 4
"""Large review bodies are read, and large answers encoded, on these threads, off the event loop: a 3 MiB object takes
tens of milliseconds to decode (bench/worst_case.py), and meanwhile the loop keeps accepting and answering other
reviews. More than one, so a small review does not queue behind a large one. The policy itself runs on the loop
(see :func:`answer_body`), bounded by the limits in the card rules."""
INLINE_BODY_BYTES = 32 * 2**10
"""A body of at most this size is read on the event loop (:func:`read_on_the_loop`) when json.loads reads it in
place; a larger one, or one nested deeper than the recursion limit, on the policy threads."""
INLINE_ANSWER_BYTES = 64 * 2**10
"""An answer is encoded on the event loop, right after the policy, when the body and the answer's patch are both
at most this size (its other parts are bounded: the message is clipped, the warnings kept within the API server's
budget): encoding it takes a few microseconds, where a trip to a policy thread and back costs tens of microseconds
of CPU and a wait for the GIL (``bench/webhook.py``). Larger answers are encoded on the policy threads."""


def build_app(admission: Admission, executor: Executor | None = None) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY, middlewares=[body_guard(lambda _: MAX_BODY)])
    pool = executor or ThreadPoolExecutor(POLICY_THREADS, thread_name_prefix="cardquota-review")
    gates = _Gates()

    async def validate(request: web.Request) -> web.Response:
        return await _review(admission, pool, gates, request, mutating=False)

    async def mutate(request: web.Request) -> web.Response:
        return await _review(admission, pool, gates, request, mutating=True)

    async def stop_pool(_: web.Application) -> None:
        if executor is None:
            pool.shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(stop_pool)

    app.router.add_post("/validate", validate)
    app.router.add_post("/validate/{kind}", validate)
    app.router.add_post("/mutate", mutate)
    app.router.add_post("/mutate/{kind}", mutate)
    add_health_routes(app, lambda: admission.cache.ready)
    return app


async def _review(admission: Admission, pool: Executor, gates: _Gates, request: web.Request, *,
                  mutating: bool) -> web.Response:
    async with received_body(request, gates.bodies) as body:
        if isinstance(body, web.Response):
            return body
        if len(body) <= LARGE_BODY_BYTES:
            return await _answer(admission, pool, body, mutating)
        async with gates.decoding.held(request) as busy:
            response = busy or await _answer(admission, pool, body, mutating)
    trim_soon()  # what decoding it built goes back to the system, not only to the C heap
    return response


async def _answer(admission: Admission, pool: Executor, body: bytes, mutating: bool) -> web.Response:
    status, answer = await answer_body(admission, pool, body, mutating)
    return web.Response(body=answer, status=status, content_type="application/json")


async def answer_body(admission: Admission, pool: Executor, body: bytes, mutating: bool) -> tuple[int, bytes]:
    """(HTTP status, JSON body) for one request body, as served: a small body read on the event loop, a large one
    on ``pool`` (:func:`read_on_the_loop`), the policy on the loop (:meth:`Admission.answer`: the cache it reads
    is changed by watch events on that loop, so the policy sees one consistent snapshot, where on another thread it
    could see a ledger half-way through an event, or a dict changing size under its loop), a large answer encoded on
    ``pool``."""
    try:
        try:
            if not read_on_the_loop(body):
                raise NotInPlace
            review = read_review(body, in_place=True)
        except NotInPlace:
            review = await asyncio.get_running_loop().run_in_executor(pool, read_review, body)
    except MalformedReview as error:
        return 400, _json({"error": str(error)})
    answer = admission.answer(review, mutating)
    if len(body) <= INLINE_ANSWER_BYTES and len(answer["response"].get("patch", "")) <= INLINE_ANSWER_BYTES:
        return 200, encoded(answer)  # (the running loop is only looked up off this path: it costs a getpid())
    return 200, await asyncio.get_running_loop().run_in_executor(pool, encoded, answer)


def read_on_the_loop(body: bytes) -> bool:
    """Whether a body is read on the event loop (by json.loads in place; one nested deeper than that reaches goes
    to a policy thread after all): a trip to a policy thread and back costs more CPU than reading a typical review
    (tens of microseconds and a wait for the GIL, against ~40 µs for a realistic 6 KB Pod review; ``bench/
    webhook.py``), and what a body this small costs json.loads is bounded: about a millisecond at most (32 KiB of
    large floats, or of small objects; a deep one stops at the recursion limit within ~50 µs: ``bench/
    worst_case.py``'s ``pod-on-the-loop-*`` cases). The size is the whole test: counting a body's brackets, as this
    once did, cost 5 µs a realistic review. The rest, whatever grows with a large object, is read off the loop."""
    return len(body) <= INLINE_BODY_BYTES


def answer_review(admission: Admission, body: bytes, mutating: bool) -> tuple[int, bytes]:
    """(HTTP status, JSON body) for one request body, all on the calling thread (benchmarks, tests)."""
    try:
        review = read_review(body)
    except MalformedReview as error:
        return 400, _json({"error": str(error)})
    return 200, encoded(admission.answer(review, mutating))


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


async def serve(app: web.Application, host: str, port: int, context: ssl.SSLContext,
                limits: ServerLimits | None = None) -> web.AppRunner:
    """Start serving within ``limits`` (:mod:`cardquota.runtime.serving`) with the TLS ``context`` (the listening
    context of :class:`cardquota.runtime.tls.ReloadableContext`). The caller stops it with
    ``await runner.cleanup()``."""
    runner = await start_server(app, host, port, limits or ServerLimits(), context)
    log.info("admission server listening on https://%s:%s", host, runner.addresses[0][1] if runner.addresses else port)
    return runner
