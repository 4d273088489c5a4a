"""``cardquota extender``: the Volcano scheduler's ``extender`` plugin served over HTTP.

Each verb is ``POST /<verb>`` with a JSON body and is answered 200 with a JSON object, always — a body that is not
JSON, an unknown verb or a failure inside gets the verb's abstaining answer (see
:mod:`cardquota.core.scheduling.extender`), logged. The handlers do no I/O: the scheduler's 1 s timeout is spent
on the rules only — except writing mGPU results: ``allocateFunc`` of an mGPU pod answers only once its result
annotations are on the pod (a merge patch, within :data:`MGPU_PATCH_SECONDS`, below Volcano's ``httpTimeout``), and
refuses the allocation when they could not be written — so the pod is never bound without them; ``deallocateFunc``
removes them again (a merge patch with null). Writes to one pod go one after another, in the order the scheduler's
calls came.

Served, the extender keeps its session by watches (:func:`run_extender` with an API client: the operator's cluster
cache and pod reflector, feeding the session instead of a ledger): ``onSessionOpen`` is answered at once, its body
never read, and every verb costs what its job or node costs, whatever the cluster's size. Until the first full list
is in, and while its pod watch has been failing for a minute, it is *degraded*: each verb is answered 503 (a
transport error to Volcano, which then does what the stanza's ``extender.ignorable`` says: with the card-quota gate's
stanza, true — jobs are enqueued and their card pods wait at the gate; with task verbs, false — those tasks wait),
``/readyz`` answers 503, ``cardquota_extender_synced`` is 0 and every such answer is counted in
``cardquota_extender_abstentions_total`` and logged (at most once a minute) — never silently.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import msgspec
from aiohttp import web
from prometheus_client import Counter, Gauge, Histogram

from cardquota.core.objects import Manifest, ObjectKey, namespaced_key
from cardquota.core.scheduling.extender import Extender
from cardquota.runtime.health import add_health_routes
from cardquota.runtime.limits import ServerLimits
from cardquota.runtime.metrics import REGISTRY, metrics_response
from cardquota.runtime.serving import BodyBudget, FairShares, body_guard, received_body

log = logging.getLogger("cardquota.extender")
DEFAULT_PORT = 8713
MAX_BODY = 64 * 2**20
"""The largest verb body read: onSessionOpen carries the whole cluster (read only in the body-fed mode; watched, it
is never read), prioritize every candidate NodeInfo with the pods on it (Volcano pkg/scheduler/plugins/extender
``PrioritizeRequest``): 64 MiB holds 50k pods. Larger, or compressed (Volcano's client never compresses: it posts
plain JSON with net/http, extender.go ``send``), is refused before it is read (:func:`~cardquota.runtime.serving.
body_guard`)."""
BODY_BYTES = 256 * 2**20
"""Bytes of verb bodies held at once (arriving, or received and being answered), counted as they arrive: 4 x
:data:`MAX_BODY`, well within the extender's 2 GiB memory limit, where 2,048 connections each sending 64 MiB would
have been held together. When it is full, the next bytes of a body wait, unread (503 after
:data:`~cardquota.runtime.serving.BODY_SECONDS`). ``prioritize`` (the scheduler's large body: one task, its
candidate nodes) is asked for one task at a time."""
PEER_BODY_BYTES = 128 * 2**20
"""Of :data:`BODY_BYTES`, what one source not in ``--trusted-cidrs`` may hold (a peer holding nothing may always
take what is free)."""
TRUSTED_BODY_BYTES = 128 * 2**20
"""Bytes beyond :data:`BODY_BYTES` that only trusted sources (the scheduler's addresses, when given) may hold."""
LARGE_BODY = 2**20
"""A verb body above this (``prioritize`` of many nodes with their pods, ``onSessionOpen`` read from the body),
once received, waits for one of :data:`LARGE_BODIES_AT_ONCE` to be decoded; smaller ones (``predicate``: one task
and one node) are decoded at once."""
LARGE_BODIES_AT_ONCE = 4
"""Large verb bodies decoded at once, at most two by one untrusted source, two more kept for the trusted ones."""
VERB_SECONDS = Histogram("cardquota_extender_duration_seconds", "Extender verb latency in the server", ["verb"],
                         registry=REGISTRY, buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0))
SYNCED = Gauge("cardquota_extender_synced", "1 once the extender's watched session holds the whole cluster",
               registry=REGISTRY)
ABSTENTIONS = Counter("cardquota_extender_abstentions_total", "Verbs answered without judging, by why",
                      ["verb", "reason"], registry=REGISTRY)
IGNORED = Counter("cardquota_extender_ignored_total", "Requests naming a pod, node or job the extender would not "
                  "act on (not in its watch, bound, not allocated in this cycle), by verb and why", ["verb", "reason"],
                  registry=REGISTRY)
DEGRADED_LOG_SECONDS = 60.0
MGPU_PATCH_SECONDS = 0.3
"""How long ``allocateFunc`` waits for an mGPU result to be written onto the pod before refusing the allocation (and
``deallocateFunc`` for it to be removed). Volcano waits ``extender.httpTimeout`` for the whole call — 1 s by default
(pkg/scheduler/plugins/extender/extender.go, ``parseExtenderConfig``, v1.15.1), 500ms in the shipped configuration
— and rolls the allocation back when the call fails and ``ignorable`` is false: the write must end well inside it."""
PATCHES = Counter("cardquota_extender_mgpu_patches_total", "mGPU result annotations written onto pods (or removed), "
                  "by verb and outcome", ["verb", "outcome"], registry=REGISTRY)
PodPatcher = Callable[[Manifest, Mapping[str, str | None]], Coroutine[Any, Any, None]]
"""Merge-patch annotations onto a pod (None removes one); raises when they were not written."""

ABSTAIN: dict[str, dict[str, Any]] = {
    "onsessionopen": {}, "onsessionclose": {},
    "predicate": {"status": "", "code": 0},
    "prioritize": {"nodeScore": {}, "errorMessage": ""},
    "jobenqueueable": {"status": 0},
    "jobenqueued": {},
    "queueoverused": {"overused": False},
    "jobready": {"status": True},
    "allocatefunc": {"errorMessage": ""},
    "deallocatefunc": {"errorMessage": ""},
}
"""Per verb (lower case), the answer that never blocks the scheduler."""
NOT_SYNCED = ("cardquota's extender is not synced: the cluster is not listed yet, or its watch has been failing for "
              "a minute")
"""The body of the 503 every verb gets meanwhile. Not an abstaining 200: Volcano takes a 200 as an answer whatever
the stanza's ``extender.ignorable`` says (it applies ``ignorable`` to transport errors only, a non-200 status among
them: plugins/extender/extender.go ``send``, v1.15.1), so a 200 abstention let every quota fail open even where the
operator asked for closed. A 503 lets that setting decide."""


def build_extender_app(extender: Extender, patch_pod: PodPatcher | None = None,
                       synced: Callable[[], bool] | None = None, *,
                       patch_seconds: float = MGPU_PATCH_SECONDS,
                       degraded_reasons: Callable[[], list[str]] | None = None) -> web.Application:
    """The verbs' routes. ``synced`` says whether the watched session holds the whole cluster (None: the session
    comes from each onSessionOpen body, as in tests and benchmarks of the body-fed mode); ``degraded_reasons``: what the
    extender cannot enforce although it serves (listed in ``/readyz``'s body)."""
    writes = _PodWrites(patch_pod) if patch_pod is not None else None
    bodies = BodyBudget(MAX_BODY, FairShares(BODY_BYTES, PEER_BODY_BYTES, TRUSTED_BODY_BYTES))
    large = FairShares(LARGE_BODIES_AT_ONCE, LARGE_BODIES_AT_ONCE // 2, LARGE_BODIES_AT_ONCE // 2)
    last_degraded_log = [float("-inf")]
    extender.on_ignored = ignored
    verbs: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
        "onsessionopen": extender.on_session_open,
        "onsessionclose": extender.on_session_close,
        "predicate": extender.predicate,
        "prioritize": extender.prioritize,
        "jobenqueueable": extender.job_enqueueable,
        "queueoverused": extender.queue_overused,
        "jobready": extender.job_ready,
        "jobenqueued": extender.job_enqueued,
    }

    def degraded(verb: str) -> web.Response:
        ABSTENTIONS.labels(verb, "not-synced").inc()
        now = time.monotonic()
        if now - last_degraded_log[0] >= DEGRADED_LOG_SECONDS:
            last_degraded_log[0] = now
            log.warning("extender degraded: the cluster is not listed yet, or its watch has been failing for a "
                        "minute; verbs answered 503 (Volcano applies the stanza's extender.ignorable)")
        return web.json_response({"error": NOT_SYNCED}, status=503, headers={"Retry-After": "1"})

    async def answered(verb: str, request: web.Request, body: bytes) -> dict[str, Any]:
        """The verb's answer to ``body``."""
        try:
            try:  # deep nesting cannot change the answer here (anything unreadable gets the abstaining one)
                payload = (read_job_request(body) if verb in JOB_VERBS else json.loads(body)) if body else {}
            except RecursionError:
                raise ValueError("the body nests too deeply") from None
            if not isinstance(payload, dict):
                raise ValueError("the body is not a JSON object")
            if verb in ("allocatefunc", "deallocatefunc"):
                call = extender.allocate_func if verb == "allocatefunc" else extender.deallocate_func
                answer, pod, annotations = call(payload)
                if pod is not None and annotations and writes is not None:
                    problem = await writes.write(pod, annotations, patch_seconds)
                    PATCHES.labels(verb, "failed" if problem else "written").inc()
                    if problem is not None and verb == "allocatefunc":
                        extender.withdraw(namespaced_key(pod))  # refused: the scheduler rolls it back
                        writes.write_later(pod, dict.fromkeys(annotations))  # (whatever lands late goes again)
                        answer = {"errorMessage": f"cardquota could not write the mGPU result onto pod "
                                                  f"{'/'.join(namespaced_key(pod))}: {problem}"}
                    elif problem is not None:
                        log.warning("could not remove the mGPU result from %s: %s", "/".join(namespaced_key(pod)),
                                    problem)
            elif verb == "onsessionopen":
                gc.unfreeze()  # the previous session goes back to the collector (and whatever cycles came with it)
                answer = verbs[verb](payload)
                # The session lives for the whole cycle and holds no reference cycles: keep the collector from
                # walking it on every request (each request body allocates thousands of objects).
                gc.freeze()
            elif verb in verbs:
                answer = verbs[verb](payload)
            else:
                answer = {"errorMessage": f"cardquota serves no verb {request.match_info['verb']!r}"}
        except ValueError as error:  # not JSON, or not an object: the scheduler sent something else
            log.warning("extender verb %s: unreadable body (%s); abstaining", verb, error)
            answer = dict(ABSTAIN.get(verb, {}))
        except Exception:  # never a 500: the scheduler treats transport errors per `ignorable`
            log.exception("extender verb %s failed; abstaining", verb)
            answer = dict(ABSTAIN.get(verb, {}))
        return answer

    async def handle(request: web.Request) -> web.Response:
        verb = request.match_info["verb"].lower()
        started = time.perf_counter()
        if synced is not None:
            if not synced():
                return degraded(verb)
            if verb in ("onsessionopen", "onsessionclose"):  # the watched session: the body is never read
                answer = verbs[verb]({})
                VERB_SECONDS.labels(verb).observe(time.perf_counter() - started)
                return web.json_response(answer)
        async with received_body(request, bodies) as body:  # a refusal when it arrives too slowly, never the
            if isinstance(body, web.Response):            # scheduler's
                return body
            if len(body) <= LARGE_BODY:
                outcome: dict[str, Any] | web.Response = await answered(verb, request, body)
            else:
                async with large.held(request) as busy:
                    outcome = busy or await answered(verb, request, body)
        if isinstance(outcome, web.Response):
            return outcome
        VERB_SECONDS.labels(verb).observe(time.perf_counter() - started)
        return web.json_response(outcome)

    async def metrics(_: web.Request) -> web.Response:
        return metrics_response()

    app = web.Application(client_max_size=MAX_BODY, middlewares=[body_guard(lambda _: MAX_BODY)])
    app.router.add_get("/metrics", metrics)
    add_health_routes(app, synced or (lambda: True), degraded_reasons)
    app.router.add_post("/{verb}", handle)
    return app


JOB_VERBS = frozenset({"jobenqueueable", "jobenqueued"})
"""The verbs that read nothing of their body but the job's PodGroup (:func:`read_job_request`)."""


class _PodGroupRead(msgspec.Struct):
    metadata: Any = msgspec.UNSET
    spec: Any = msgspec.UNSET
    status: Any = msgspec.UNSET


class _JobRead(msgspec.Struct):
    PodGroup: _PodGroupRead | None = None  # (Go's field name: api.JobInfo has no json tags)


class _JobRequestRead(msgspec.Struct):
    job: _JobRead | None = None


def read_job_request(body: bytes) -> Any:
    """A ``jobEnqueueable`` or ``jobEnqueued`` body read for the one thing those verbs use: the job's PodGroup
    (``{"job": {"PodGroup": {metadata, spec, status}}}``). The rest of the JobInfo — every task with its full Pod: 52
    KB for a gang of 8, 6.3 MiB for a pending PodGroup of 1,000 existing pods — is stepped over by msgspec without
    being built into Python objects. A body Volcano would not send (keys in another case, which Go's decoder and
    ``field`` accept; JSON that only Python's decoder takes; a PodGroup without metadata) is read whole with
    ``json.loads``, so the verbs see the same PodGroup either way (tests/unit/test_job_request_reads.py)."""
    try:
        read = msgspec.json.decode(body, type=_JobRequestRead)
    except msgspec.DecodeError:
        read = None
    group = read.job.PodGroup if read is not None and read.job is not None else None
    if group is None or not isinstance(group.metadata, dict) or not _utf8(body):
        return json.loads(body)
    return {"job": {"PodGroup": {name: value for name, value in (
        ("metadata", group.metadata), ("spec", group.spec), ("status", group.status)) if value is not msgspec.UNSET}}}


def _utf8(body: bytes) -> bool:
    """Whether ``body`` reads as UTF-8 as ``json.loads`` reads it (msgspec does not look into the strings it steps
    over); ASCII, as Go's encoder mostly writes, is answered without decoding."""
    if body.isascii():
        return True
    try:
        body.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return False
    return True


def ignored(verb: str, reason: str, key: ObjectKey | None) -> None:
    """A request the extender answered without acting on it: counted, and logged at debug level (a caller other
    than the scheduler can send many)."""
    IGNORED.labels(verb, reason).inc()
    log.debug("extender verb %s: %s/%s ignored (%s)", verb, *(key or ("-", "-")), reason)


def api_pod_patcher(api: Any) -> PodPatcher:
    """Patch result annotations onto a pod through the Kubernetes API (in a thread: the client blocks)."""
    from cardquota.kube import KubeError, patch_annotations, pod_path

    async def patch(pod: Manifest, annotations: Mapping[str, str | None]) -> None:
        path = pod_path(*namespaced_key(pod))
        try:
            written = await asyncio.to_thread(patch_annotations, api, path, dict(annotations))
        except KubeError as error:
            raise PatchFailed(str(error)) from None
        if not written:
            raise PatchFailed("the pod is gone")

    return patch


DRA_UNREADABLE_REASON = ("DRA claims cannot be read: resource.k8s.io not served (none of v1, v1beta2, v1beta1); the "
                         "spec.dra quotas of queues are not enforced")
DEGRADED_CHECK_SECONDS = 2.0
"""How often the served extender looks whether it became degraded (two flags: cheap)."""
DEGRADED_EVENT_REASON = "ExtenderDegraded"


async def report_degraded(degraded: Callable[[], list[str]], api: Any) -> None:
    """One Warning event (and log line) each time a degraded reason appears — on the Queue CRD, where the quotas
    it concerns are defined (cluster-scoped: the event goes to the ``default`` namespace, as the controller's for
    that CRD); again only after it went and came back. It names the CRD without its uid (the extender may not read
    CRDs), so ``kubectl describe crd`` does not list it; ``kubectl get events -A --field-selector
    reason=ExtenderDegraded`` does."""
    from cardquota.core.crd_additions import QUEUE_CRD
    from cardquota.core.events import CardEvent
    from cardquota.kube import KubeError, create_event
    from cardquota.operator.controller import EVENT_NAMESPACE, kubernetes_event

    reported: set[str] = set()
    while True:
        now = set(degraded())
        for reason in sorted(now - reported):
            log.warning("extender degraded: %s", reason)
            event = CardEvent("CustomResourceDefinition", "", QUEUE_CRD, DEGRADED_EVENT_REASON,
                              f"cardquota extender: {reason}")
            try:
                await asyncio.to_thread(create_event, api, EVENT_NAMESPACE,
                                        kubernetes_event(event, "cardquota-extender"))
            except KubeError as error:
                log.warning("could not record the %s event: %s", DEGRADED_EVENT_REASON, error)
        for reason in sorted(reported - now):
            log.info("extender no longer degraded: %s", reason)
        reported = now
        await asyncio.sleep(DEGRADED_CHECK_SECONDS)


class PatchFailed(Exception):
    """Annotations were not written onto a pod (why, for the scheduler's log)."""


class _PodWrites:
    """Annotation writes, one pod's one after another (a write that outlived its wait still ends before the next
    one to that pod starts: a late result never lands over a later removal, nor a late removal over a later
    result)."""

    def __init__(self, patch: PodPatcher) -> None:
        self._patch = patch
        self._last: dict[ObjectKey, asyncio.Task[str | None]] = {}

    def write_later(self, pod: Manifest, annotations: Mapping[str, str | None]) -> asyncio.Task[str | None]:
        """The write as a task whose result is None when written, else why not: it never ends in an exception, so
        a write still under way when the process stops is not an error of the process (the watch framework, which
        reraises what its tasks' stragglers raise, would stop with it)."""
        key = namespaced_key(pod)
        previous = self._last.get(key)

        async def write() -> str | None:
            if previous is not None:
                await asyncio.wait([previous])  # (its outcome was its own caller's)
            try:
                await self._patch(pod, annotations)
            except Exception as error:  # reported to whoever waits, logged for a late clean-up
                log.warning("annotations of pod %s/%s not written: %s", *key, error)
                return str(error) or type(error).__name__
            return None

        task = asyncio.create_task(write())
        self._last[key] = task
        task.add_done_callback(lambda done: self._finished(key, done))
        return task

    async def write(self, pod: Manifest, annotations: Mapping[str, str | None], seconds: float) -> str | None:
        """Write, waiting at most ``seconds``: None when written, else why not (a write still under way goes on)."""
        task = self.write_later(pod, annotations)
        done, _ = await asyncio.wait([task], timeout=seconds)
        if not done:
            return f"the API server did not answer within {seconds:g}s"
        return task.result()

    def _finished(self, key: ObjectKey, task: asyncio.Task[str | None]) -> None:
        if self._last.get(key) is task:
            del self._last[key]


async def run_extender(extender: Extender, host: str, port: int, patch_pod: PodPatcher | None,
                       stop: asyncio.Event | None = None, *, api: Any = None,
                       on_listening: Callable[[int], None] | None = None,
                       limits: ServerLimits | None = None, patch_seconds: float = MGPU_PATCH_SECONDS) -> None:
    """Serve until ``stop`` is set (forever when None); with ``api``, the session is kept by watches (degraded until
    the first full list is in)."""
    from cardquota.operator.reflector import Reflector
    from cardquota.runtime.cache import ClusterCache
    from cardquota.runtime.metrics import serve_http

    cache = ClusterCache(sink=extender) if api is not None else None
    reflectors: list[Reflector] = []
    claim_watches: list[Reflector] = []
    SYNCED.set(0)

    def degraded() -> list[str]:
        """What is not enforced although the extender serves: DRA quotas while no resource.k8s.io version the
        claim reflectors read is served (each counted in cardquota_dra_claims_unreadable)."""
        return [DRA_UNREADABLE_REASON] if any(not reflector.served for reflector in claim_watches) else []

    def synced() -> bool:
        """Listed, and no watch of pods failing for a minute (the session might be that far behind)."""
        ready = cache is not None and cache.ready and not any(reflector.behind() for reflector in reflectors)
        SYNCED.set(1 if ready else 0)
        return ready

    runner = await serve_http(build_extender_app(extender, patch_pod, synced if cache is not None else None,
                                                 patch_seconds=patch_seconds,
                                                 degraded_reasons=degraded if cache is not None else None),
                              host, port, limits)
    if on_listening is not None:
        on_listening(runner.addresses[0][1])
    log.info("extender listening on http://%s:%s%s", host, runner.addresses[0][1] if runner.addresses else port,
             " (session kept by watches)" if cache else "")
    tasks: list[asyncio.Task[None]] = []
    try:
        if cache is not None:
            from cardquota.operator.watch import follow

            tasks.append(asyncio.create_task(report_degraded(degraded, api)))
            await follow(cache, api, stop, tasks, claims=True, reflectors=reflectors, claim_watches=claim_watches)
        else:
            await (stop or asyncio.Event()).wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()
