"""Keeping a cluster cache current: the reflectors of the high-cardinality kinds (operator/reflector.py: nodes,
PodGroups, ReplicaSets, then pods) and of PriorityClasses, the start-up list of the others and Kopf's watch handlers
for them (``<kind>_event``: queues, Deployments, StatefulSets) — the same for the operator's admission ledger and the
extender's scheduling session."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import kopf
from kubernetes import client

from cardquota.kube import CACHED_RESOURCES, NAMESPACE_RESOURCES, KubeError, list_all_async
from cardquota.operator.reflector import Reflector, backoff, claim_reflectors, resource_reflector
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.metrics import EVENTS_PROCESSED

log = logging.getLogger("cardquota.watch")
REFLECTED_KINDS = ("PriorityClass", "Node", "PodGroup", "ReplicaSet", "Pod")
"""Kinds the reflectors list and watch (one object per node, per job, per Deployment revision, per pod), in the
order they are listed: pods last, so that each pod's charge is computed once, against its node and PodGroup. And
PriorityClasses, few, but optional: a process whose RBAC predates them (403) must hold none and keep serving, and
pick them up once allowed (:attr:`~cardquota.operator.reflector.Reflector.optional`), which Kopf's watch of a
forbidden kind would not."""
REFLECTED = tuple(sorted((resource for resource in CACHED_RESOURCES if resource[2] in REFLECTED_KINDS),
                         key=lambda resource: REFLECTED_KINDS.index(resource[2])))
LISTED_AT_START = tuple(resource for resource in CACHED_RESOURCES if resource[2] not in REFLECTED_KINDS)
"""Listed once at start-up, then kept current by Kopf."""


def listed_at_start(*, namespaces: bool = False) -> tuple[tuple[str, str, str, str], ...]:
    """:data:`LISTED_AT_START`, with Namespaces when Volcano maps them to queues (their queue-name annotation:
    :attr:`~cardquota.core.policies.config.PolicyConfig.map_namespace_queues`)."""
    return (*LISTED_AT_START, *(NAMESPACE_RESOURCES if namespaces else ()))


def register(registry: kopf.OperatorRegistry, cache: ClusterCache, *, namespaces: bool = False) -> None:
    """Handlers for the low-cardinality kinds (queues, Deployments, StatefulSets; Namespaces with ``namespaces``);
    each feeds its events to ``cache``. The others are the reflectors' (:data:`REFLECTED_KINDS`)."""

    def feed(kind: str, api_version: str) -> Any:
        # async, so Kopf runs it on the event loop (a plain function would run on Kopf's executor threads): the cache
        # changes only there, where the admission policies read it, and never under a policy half-way through.
        async def handler(event: dict[str, Any], **_: Any) -> None:
            manifest = event.get("object")
            if isinstance(manifest, dict):
                cache.apply(event.get("type"), {"apiVersion": api_version, "kind": kind, **manifest})
                EVENTS_PROCESSED.labels(kind=kind).inc()
        handler.__name__ = f"{kind.lower()}_event"
        return handler

    for _, plural, kind, api_version in listed_at_start(namespaces=namespaces):
        group, _, version = api_version.rpartition("/")  # ("" for the core group: Namespaces)
        kopf.on.event(group, version, plural, registry=registry, id=f"{kind.lower()}_event")(feed(kind, api_version))


def connection_info(api: client.ApiClient) -> kopf.ConnectionInfo:
    """Kopf's credentials, read from the client the rest of cardquota uses (one configuration: ``--api-url``, the
    kubeconfig or the in-cluster service account, whichever :func:`cardquota.kube.api_client` chose). A plain
    ``kopf.OperatorRegistry`` has no login handler of its own: without this one, Kopf could not log in."""
    configuration = api.configuration
    header = (configuration.get_api_key_with_prefix("BearerToken")
              or configuration.get_api_key_with_prefix("authorization") or "")
    scheme, _, token = header.rpartition(" ")  # "Bearer <token>", or a bare token
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


async def synced(reflector: Reflector, task: asyncio.Task[None]) -> None:
    """Until the reflector's first list is in the cache (its task failing first raises its error)."""
    waiting = asyncio.ensure_future(reflector.synced.wait())
    try:
        await asyncio.wait({waiting, task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    if not reflector.synced.is_set():
        task.result()


async def first_list(api: client.ApiClient, stop: asyncio.Event | None,
                     sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, *, namespaces: bool = False
                     ) -> list[Mapping[str, Any]] | None:
    """The kinds listed at start, tried until the API server answers, with the reflectors' backoff (and at least the
    ``Retry-After`` it asks for), each failure logged: an API server down or refusing at start leaves the process
    serving what it can (degraded, not ready), as client-go's reflectors keep listing, instead of ending in an
    error. None once ``stop`` is set."""
    failures = 0
    resources = listed_at_start(namespaces=namespaces)
    while stop is None or not stop.is_set():
        try:
            return await list_all_async(api, resources)
        except KubeError as error:
            delay = backoff(failures, error)
            failures += 1
            kinds = ", ".join(resource[2] for resource in resources)
            log.warning("listing %s failed (%s): again in %.1f s", kinds, error, delay)
            await sleep(delay)
    return None


async def follow(cache: ClusterCache, api: client.ApiClient, stop: asyncio.Event | None,
                 tasks: list[asyncio.Task[None]], *, claims: bool = False, started: asyncio.Event | None = None,
                 reflectors: list[Reflector] | None = None, pods: bool = True,
                 claim_watches: list[Reflector] | None = None, namespaces: bool = False) -> None:
    """Fill ``cache`` and keep it current until ``stop``: the low-cardinality kinds listed, the reflectors synced
    one after the other (then the cache is complete and ``started`` set), then Kopf's watches, logged in as ``api``
    is (:func:`connection_info`); without ``pods``, no pod is listed or watched (a webhook-only process: no policy
    reads pods from the cache); with ``namespaces``, Namespaces are listed and watched too; with ``claims``,
    reflectors for DRA ResourceClaims and templates too (not waited for: a cluster without DRA serves none). Tasks
    started are added to ``tasks`` for the caller to cancel, the reflectors to ``reflectors`` (to tell whether a kind
    lags) and the claims' to ``claim_watches`` (to tell whether claims can be read at all)."""
    registry = kopf.OperatorRegistry()
    register(registry, cache, namespaces=namespaces)

    @kopf.on.login(registry=registry, id="login")
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(api)
    listed = await first_list(api, stop, namespaces=namespaces)
    if listed is None:
        return  # stopped before the API server answered
    cache.load(listed, complete=False)
    for resource in REFLECTED:  # one after the other: pods last (see REFLECTED_KINDS)
        if resource[2] == "Pod" and not pods:
            continue
        reflector = resource_reflector(cache, api, resource)
        if reflectors is not None:
            reflectors.append(reflector)
        tasks.append(asyncio.create_task(reflector.run()))
        await synced(reflector, tasks[-1])
    if claims:
        for reflector in claim_reflectors(cache, api):
            if claim_watches is not None:
                claim_watches.append(reflector)
            tasks.append(asyncio.create_task(reflector.run()))
    cache.mark_complete()
    snapshot = cache.target.snapshot
    log.info("cluster snapshot loaded: %d nodes, %d queues, %d podgroups, %d pods", len(snapshot.nodes),
             len(snapshot.queues), len(snapshot.podgroups), len(snapshot.pods))
    if started is not None:
        started.set()
    kopf_settings = kopf.OperatorSettings()
    kopf_settings.posting.enabled = False
    kopf_settings.scanning.disabled = True  # the resources are fixed: no CRD or namespace watch (no RBAC for it)
    await kopf.operator(registry=registry, settings=kopf_settings, clusterwide=True, standalone=True,
                        stop_flag=stop, identity=cast(Any, process_identity()))


def process_identity() -> str:
    """What Kopf calls this process (standalone: only its logs use it): the pod's name. Without one Kopf asks
    ``getpass.getuser()``, which raises for a user id with no passwd entry — a pod whose ``runAsUser`` the image
    does not list, as OpenShift's restricted SCC assigns per namespace (found when the host kubelet of
    ``make e2e-local`` ran the Deployment as uid 65532 on a root filesystem without that user)."""
    return os.environ.get("HOSTNAME") or socket.gethostname()
