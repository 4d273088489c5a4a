"""The real ``cardquota operator`` run in the test's own task against kmock (stopped from the same task: Kopf
cancels tasks created after it started, which a fixture's teardown would be)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from kubeconfigs import write_kubeconfig
from rbac import Grants, assert_nothing_refused, charted, enforcing, grants_of, rendered_grants

from cardquota.kube import Connection, api_client
from cardquota.operator.reflector import Reflector
from cardquota.operator.settings import Role, Settings
from cardquota.operator.watch import follow
from cardquota.processes import run
from cardquota.runtime.cache import ClusterCache


def shipped_grants(settings: Settings) -> Grants:
    """The RBAC the Helm chart (made of the overlays' manifests) renders for the account a process with
    ``settings`` runs as: ``cardquota`` for the operator and ``--role webhook``, ``cardquota-controller`` for
    ``--role controller`` (separateController), with the namespace-queues and card-gate options as set."""
    split = settings.role is not Role.ALL
    values = {"separateController": {"enabled": split}, "mapNamespaceQueues": settings.map_namespace_queues,
              "cardGate": {"enabled": settings.card_gate or settings.role is Role.WEBHOOK}}
    account = "cardquota-controller" if settings.role is Role.CONTROLLER else "cardquota"
    return grants_of(charted(values), account)


def extender_grants() -> Grants:
    """The RBAC manifests/components/extender grants the served extender's account, ``cardquota-extender``."""
    return rendered_grants("cardquota-extender", overlay="dev-extender")


def token_of(grants: Grants) -> str:
    """The bearer token kmock holds to ``grants`` (:func:`calling_as`)."""
    return f"token-of-{grants.user}"


@contextlib.contextmanager
def calling_as(kmock: Any, grants: Grants) -> Iterator[Connection]:
    """A Connection to kmock whose requests kmock holds to ``grants`` (the account a component runs as: a request they
    do not allow gets the API server's 403); none may have been refused when the block ends. A test that exercises a
    refusal on purpose holds its calls with :func:`rbac.enforcing` instead."""
    token = token_of(grants)
    enforcing(kmock, token, grants)
    yield Connection(host=str(kmock.url).rstrip("/"), insecure=True, token=token)
    assert_nothing_refused(kmock)


@contextlib.asynccontextmanager
async def operator_running(kmock: Any, tmp_path: Path, *, api_url: str = "", token: str = "", rbac: bool = False,
                           **settings: Any) -> AsyncIterator[list[int]]:
    """Yields the admission server's port(s) once the first full list has loaded; dev certificates in ``tmp_path``
    unless ``settings`` say otherwise. The operator talks to kmock, or to ``api_url`` (a proxy in front of it) with
    the bearer ``token``. With ``rbac``, kmock answers 403 to what the shipped RBAC of its account does not allow
    (:func:`shipped_grants`), as the API server would, and none may have been refused when the run ends."""
    options: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "metrics_port": 0, "dev": True,
                               "cert_dir": str(tmp_path), **settings}
    if rbac:
        token = token or f"token-of-role-{Settings(**options).role.value}"
        enforcing(kmock, token, shipped_grants(Settings(**options)))
    stop, started = asyncio.Event(), asyncio.Event()
    ports: list[int] = []
    connection = Connection(host=(api_url or str(kmock.url)).rstrip("/"), insecure=True, token=token)
    task = asyncio.create_task(run(Settings(**options), connection=connection,
                                   stop=stop, started=started, on_listening=ports.append))
    await asyncio.wait_for(started.wait(), timeout=15)
    try:
        yield ports
    finally:
        stop.set()
        end_kept_alive_requests()
        await asyncio.wait_for(task, timeout=15)
    if rbac:
        assert_nothing_refused(kmock)


@contextlib.asynccontextmanager
async def following_through_a_kubeconfig(kmock: Any, tmp_path: Any, reflectors: list[Reflector] | None = None,
                                         claim_watches: list[Reflector] | None = None,
                                         settings: Settings | None = None) -> AsyncIterator[ClusterCache]:
    """``follow`` (the cache, then Kopf) as `cardquota operator` runs it: through a kubeconfig, no Connection.
    Yields the cache once it has synced (its reflectors put in ``reflectors``; with ``claim_watches``, DRA claims
    followed too, their reflectors put there); leaving stops Kopf and every task it started. The kubeconfig,
    ``tmp_path/kubeconfig``, holds the token of the account a process with ``settings`` (default: the operator's
    own) runs as, and kmock holds every request made with it to that account's shipped RBAC (:func:`calling_as`)."""
    grants = shipped_grants(settings or Settings())
    with calling_as(kmock, grants):
        async with _following(kmock, write_kubeconfig(tmp_path, str(kmock.url), insecure=True,
                                                      token=token_of(grants)), reflectors, claim_watches) as cache:
            yield cache


@contextlib.asynccontextmanager
async def _following(kmock: Any, kubeconfig: str, reflectors: list[Reflector] | None,
                     claim_watches: list[Reflector] | None) -> AsyncIterator[ClusterCache]:
    api = api_client(kubeconfig=kubeconfig)
    cache = ClusterCache()
    stop, started = asyncio.Event(), asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    following = asyncio.create_task(follow(cache, api, stop, tasks, started=started, reflectors=reflectors,
                                           claims=claim_watches is not None, claim_watches=claim_watches))
    try:
        await asyncio.wait_for(started.wait(), timeout=15)
        yield cache
        assert not following.done(), "follow ended on its own"
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        end_kept_alive_requests()
        await asyncio.wait_for(asyncio.gather(following, *tasks, return_exceptions=True), timeout=15)


def end_kept_alive_requests() -> None:
    """kmock's handlers of long, kept-alive requests (the watches) would keep Kopf's shutdown waiting 5 s for "hung"
    tasks: they are ended here, as the process ends them when it stops."""
    for running in asyncio.all_tasks():
        if getattr(running.get_coro(), "__qualname__", "") in ("RequestHandler._handle_request",
                                                                "RequestHandler.start"):
            running.cancel()


def serve_dra(kmock: Any, version: str = "v1beta1") -> None:
    """kmock serves resource.k8s.io's ResourceClaims and ResourceClaimTemplates through ``version``, as a cluster
    with DRA does (discovery then lists the group, and the claim reflectors read it)."""
    for plural, kind in (("resourceclaims", "ResourceClaim"), ("resourceclaimtemplates", "ResourceClaimTemplate")):
        kmock.resources[f"resource.k8s.io/{version}/{plural}"] = {
            "namespaced": True, "kind": kind, "singular": kind.lower(), "verbs": ["list", "watch", "get", "create"]}
