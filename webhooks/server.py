"""The HTTPS admission server.

Why an aiohttp server of our own rather than Kopf's webhook server: Kopf cannot (a) answer a malformed body with
HTTP 400 and a JSON error (we must never answer 500), (b) reload its SSL context in place for certificate rotation
without a restart, or (c) apply a failure mode per kind around the policy call; and its per-request handler
machinery costs latency on the API server's write path. Kopf still runs the watch handlers that feed the cache.
"""

from __future__ import annotations

import logging
import ssl

from aiohttp import web

from cardquota.operator.health import add_health_routes
from cardquota.operator.metrics import Timer
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.review import MalformedReview, read_review, response

log = logging.getLogger("cardquota.webhooks")
MAX_BODY = 16 * 2**20
"""The API server sends objects up to ~3 MiB; a larger body is not an AdmissionReview."""


def build_app(admission: Admission) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)

    async def validate(request: web.Request) -> web.Response:
        return await _review(admission, request, mutating=False)

    async def mutate(request: web.Request) -> web.Response:
        return await _review(admission, request, mutating=True)

    app.router.add_post("/validate", validate)
    app.router.add_post("/validate/{kind}", validate)
    app.router.add_post("/mutate", mutate)
    app.router.add_post("/mutate/{kind}", mutate)
    add_health_routes(app, lambda: admission.cache.ready)
    return app


async def _review(admission: Admission, request: web.Request, *, mutating: bool) -> web.Response:
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _bad_request(f"the body is larger than {MAX_BODY} bytes")
    try:
        review = read_review(body)
    except MalformedReview as error:
        return _bad_request(str(error))
    timer = Timer()
    try:
        verdict = admission.review(review, mutating=mutating)
        timer.observe(review.kind, "allowed" if verdict.allowed else "denied")
        return web.json_response(response(review.uid, verdict, with_patch=mutating))
    except Exception as error:  # nothing here should fail; if it does, still answer, per the kind's failure mode
        log.exception("could not answer the review of %s (uid %s)", review.identity, review.uid)
        verdict = admission.cannot_check(review, f"internal error ({type(error).__name__})")
        return web.json_response(response(review.uid, verdict, with_patch=False))


def _bad_request(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


async def serve(app: web.Application, host: str, port: int, context: ssl.SSLContext) -> web.AppRunner:
    """Start serving; the caller stops it with ``await runner.cleanup()``."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=context)
    await site.start()
    log.info("admission server listening on https://%s:%s", host, port)
    return runner
