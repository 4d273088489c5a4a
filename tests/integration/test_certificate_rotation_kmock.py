"""Certificate rotation with the API server in the picture (kmock), over real HTTPS, under load.

The API server verifies the webhook's certificate against the caBundle it has *seen*: it reads webhook configurations
through an informer, so a caBundle written now is used some time later. The client here does the same: its trust
store is the caBundle of the configuration as it was :data:`INFORMER_DELAY` seconds ago. Two replicas serve (the
API server picks either, as through the Service), one of them restarts mid-rotation, the CA is renewed, then the
serving certificate: no request may fail. And the caBundle patch racing a ``kubectl apply`` that reorders, renames,
adds or removes webhooks between its read and its write is refused and done again on what is there now.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import itertools
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest
from admission_reviews import CLUSTER, review
from builders import container, pod
from cryptography import x509
from polling import eventually

from cardquota import kube
from cardquota.kube import Connection, api_client
from cardquota.operator.certificates import (
    NEXT_CA_CERT,
    PREVIOUS_CA_CERT,
    Certificates,
    ensure_certificates,
    keep_certificates,
    secret_body,
)
from cardquota.operator.settings import Settings
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.tls import KeyPair, ReloadableContext, new_ca, new_serving_cert, service_dns_names
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.server import build_app, serve

NAMESPACE = "cardquota-system"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1"
SECRET = f"/api/v1/namespaces/{NAMESPACE}/secrets/cardquota-webhook-tls"
SERVICE_HOST = "cardquota.cardquota-system.svc"
NAMES = service_dns_names("cardquota", NAMESPACE)
GRACE, INTERVAL, INFORMER_DELAY = 0.8, 0.1, 0.3
"""Seconds: the grace period, the replicas' check interval, how late the "API server" sees a caBundle change."""
CONFIGURATIONS = (("validatingwebhookconfigurations", "ValidatingWebhookConfiguration", "cardquota-validating", 2,
                   "/validate"),
                  ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration", "cardquota-mutating", 1,
                   "/mutate"))
VERSIONS = itertools.count(1)


class Stale(kmock.KubernetesError):
    status = 409
    reason = "Conflict"
    message = "the object has been modified; please apply your changes to the latest version and try again"


class VersionedSecrets(kmock.KubernetesEmulator):
    """kmock with the API server's optimistic concurrency on Secrets: every write gets a new resourceVersion, and a
    write carrying another one than the stored is refused (409), so of two replicas writing the TLS Secret at once one
    loses, reads again and follows what the other wrote."""

    async def _handle(self, request: Any) -> Any:
        resource = request.resource
        if resource is not None and resource.plural == "secrets" and isinstance(request.data, dict) \
                and request.action in (kmock.action.CREATE, kmock.action.UPDATE):
            metadata = request.data.setdefault("metadata", {})
            if request.action == kmock.action.UPDATE:
                key = (resource, request.namespace, request.name)
                stored = self._objects[key] if key in self._objects else None  # noqa: SIM401 - no .get there
                held = None if stored is None or stored.deleted else (stored.get("metadata") or {}).get(
                    "resourceVersion")
                sent = metadata.get("resourceVersion")
                if sent is not None and sent != held:
                    raise Stale()
            metadata["resourceVersion"] = str(next(VERSIONS))
        return await super()._handle(request)


def no_keepalive(url: Any) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(base_url=url, connector=aiohttp.TCPConnector(force_close=True))


async def call(kmock_server: Any, method: str, path: str, body: object = None) -> Any:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session, \
            session.request(method, f"{str(kmock_server.url).rstrip('/')}{path}", json=body) as response:
        assert response.status < 300, await response.text()
        return await response.json()


def configuration(kind: str, name: str, count: int, ca_bundle: str | None = None,
                  names: list[str] | None = None) -> dict[str, Any]:
    webhooks = []
    for index, webhook_name in enumerate(names or [f"w{index}.cardquota.io" for index in range(count)]):
        client_config: dict[str, Any] = {"service": {"name": "cardquota", "namespace": NAMESPACE,
                                                     "path": f"/x/{index}"}}
        if ca_bundle is not None:
            client_config["caBundle"] = ca_bundle
        webhooks.append({"name": webhook_name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                         "clientConfig": client_config})
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "webhooks": webhooks}


def issuer_of(serving: KeyPair, authorities: dict[str, KeyPair]) -> str:
    leaf = x509.load_pem_x509_certificate(serving.cert_pem)
    for label, authority in authorities.items():
        try:
            leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(authority.cert_pem))
        except Exception:  # InvalidSignature, ValueError: not this one
            continue
        return label
    return "unknown"


@dataclass
class Replica:
    tls: ReloadableContext
    runner: Any
    port: int
    task: asyncio.Task[None] | None = None
    in_flight: int = 0


@dataclass
class ApiServerView:
    """The caBundle of each configuration as the "API server" sees it: what it was INFORMER_DELAY seconds ago."""

    history: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    contexts: dict[str, ssl.SSLContext] = field(default_factory=dict)

    def record(self, name: str, moment: float, bundle: str) -> None:
        entries = self.history.setdefault(name, [])
        if not entries or entries[-1][1] != bundle:
            entries.append((moment, bundle))

    def trust(self, name: str, now: float) -> ssl.SSLContext:
        seen = [bundle for moment, bundle in self.history[name] if moment <= now - INFORMER_DELAY]
        bundle = seen[-1] if seen else self.history[name][0][1]
        if bundle not in self.contexts:
            self.contexts[bundle] = ssl.create_default_context(cadata=base64.b64decode(bundle).decode())
        return self.contexts[bundle]

    def bundles(self, name: str) -> list[str]:
        return [bundle for _, bundle in self.history[name]]


@contextlib.asynccontextmanager
async def replica_serving(tmp_path: Path, pair: KeyPair, label: str) -> AsyncIterator[Replica]:
    cache = ClusterCache()
    cache.load(CLUSTER)
    tls = ReloadableContext(tmp_path / label)
    tls.install(pair)
    runner = await serve(build_app(Admission(cache, Settings().policy)), "127.0.0.1", 0, tls.context)
    replica = Replica(tls, runner, runner.addresses[0][1])
    try:
        yield replica
    finally:
        if replica.task is not None:
            replica.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await replica.task
        await runner.cleanup()


@pytest.mark.kmock(cls=VersionedSecrets, client_fct=no_keepalive)
async def test_no_request_fails_across_ca_and_leaf_renewal_under_load(volcano_kmock: Any, tmp_path: Path) -> None:
    settings = Settings(namespace=NAMESPACE, service="cardquota", cert_grace_period=GRACE)
    old_ca = new_ca(days=60)  # within 90 days of expiry: the first check renews the CA
    first_serving = new_serving_cert(old_ca, NAMES)
    old_bundle = base64.b64encode(old_ca.cert_pem).decode()
    for plural, kind, name, count, _ in CONFIGURATIONS:  # as the operator left them: the caBundle is the old CA
        await call(volcano_kmock, "POST", f"{WEBHOOKS}/{plural}", configuration(kind, name, count, old_bundle))
    await call(volcano_kmock, "POST", f"/api/v1/namespaces/{NAMESPACE}/secrets",
               secret_body(settings, Certificates(old_ca, first_serving), None))
    base = str(volcano_kmock.url).rstrip("/")
    view = ApiServerView()
    loop = asyncio.get_running_loop()

    async def read_bundles() -> None:
        for plural, _, name, _, _ in CONFIGURATIONS:
            found = await call(volcano_kmock, "GET", f"{WEBHOOKS}/{plural}/{name}")
            bundles = {w["clientConfig"].get("caBundle", "") for w in found["webhooks"]}
            assert len(bundles) == 1, f"{name}: webhooks with different caBundles: {found['webhooks']}"
            view.record(name, loop.time(), bundles.pop())

    await read_bundles()
    stop_recording, stop_load = asyncio.Event(), asyncio.Event()

    async def recorder() -> None:
        while not stop_recording.is_set():
            await read_bundles()
            await asyncio.sleep(0.01)

    secrets: list[dict[str, Any]] = []
    authorities: dict[str, KeyPair] = {"old CA": old_ca}
    results: dict[str, int] = {}
    failures: list[str] = []
    body = review(pod("web", namespace="shop", containers=[container(requests={"cpu": "1"})]))

    async with contextlib.AsyncExitStack() as stack:
        replicas = [await stack.enter_async_context(replica_serving(tmp_path, first_serving, f"r{index}"))
                    for index in range(2)]
        pool = list(replicas)
        session = await stack.enter_async_context(
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)))
        apis = [api_client(Connection(host=base, insecure=True)) for _ in replicas]

        async def worker(number: int) -> None:
            for request in itertools.count(number):
                if stop_load.is_set():
                    return
                replica = pool[request % len(pool)]
                _, _, name, _, path = CONFIGURATIONS[request % 3 // 2]  # validating twice as often as mutating
                replica.in_flight += 1
                serving = replica.tls.loaded  # what the handshake gets (a reload in between is rare and harmless)
                try:
                    async with session.post(f"https://127.0.0.1:{replica.port}{path}", json=body,
                                            ssl=view.trust(name, loop.time()), server_hostname=SERVICE_HOST,
                                            timeout=aiohttp.ClientTimeout(total=10)) as response:
                        answer = await response.json()
                    assert response.status == 200
                    assert answer["response"]["allowed"] is True
                    issuer = issuer_of(serving, authorities) if serving is not None else "unknown"
                    results[issuer] = results.get(issuer, 0) + 1
                except Exception as error:
                    failures.append(f"{path} to replica :{replica.port}: {type(error).__name__}: {error}")
                    if len(failures) >= 50:
                        return  # enough to tell; a failure raised before any I/O must not spin the loop
                    await asyncio.sleep(0.01)
                finally:
                    replica.in_flight -= 1

        background = [asyncio.create_task(recorder()), *(asyncio.create_task(worker(n)) for n in range(8))]
        stack.callback(lambda: [task.cancel() for task in background])  # a failed step stops the load too

        async def secret() -> dict[str, Any]:
            found: dict[str, Any] = await call(volcano_kmock, "GET", SECRET)
            if not secrets or secrets[-1]["metadata"].get("resourceVersion") != found["metadata"].get(
                    "resourceVersion"):
                secrets.append(found)
            return found

        await asyncio.sleep(0.2)  # load before anything changes
        for replica, api in zip(replicas, apis, strict=True):
            replica.task = asyncio.create_task(keep_certificates(api, settings, replica.tls, interval=INTERVAL))

        # Phase 1: the new CA joins the caBundle; then the second replica restarts (a new process: the Secret is all it
        # knows) before the switch.
        async def new_ca_waiting() -> bool:
            return NEXT_CA_CERT in (await secret())["data"]

        await eventually(new_ca_waiting, timeout=10)
        new_ca_pem = base64.b64decode((await secret())["data"][NEXT_CA_CERT])
        authorities["new CA"] = KeyPair(new_ca_pem, b"")
        old_replica = replicas[1]
        assert old_replica.task is not None
        old_replica.task.cancel()
        started = await asyncio.to_thread(ensure_certificates, apis[1], settings)
        assert started.ca == old_ca  # mid-rotation: the restarted replica serves the old CA's certificate still
        restarted = await stack.enter_async_context(replica_serving(tmp_path, started.serving, "r1-restarted"))
        restarted.task = asyncio.create_task(keep_certificates(apis[1], settings, restarted.tls, interval=INTERVAL))
        pool[1] = restarted
        await eventually(lambda: old_replica.in_flight == 0)
        replicas[1] = restarted

        # Phases 2 and 3: the serving certificate switches to the new CA, then the old CA leaves the caBundle.
        async def old_ca_retired() -> bool:
            data = (await secret())["data"]
            return base64.b64decode(data["ca.crt"]) == new_ca_pem and PREVIOUS_CA_CERT not in data \
                and NEXT_CA_CERT not in data

        await eventually(old_ca_retired, timeout=10)
        await asyncio.sleep(INFORMER_DELAY + 0.2)  # the "API server" has seen the new CA alone for a while

        # Leaf renewal under the new CA: a serving certificate close to its expiry is replaced (the caBundle stays).
        current = await secret()
        expiring = new_serving_cert(KeyPair(new_ca_pem, base64.b64decode(current["data"]["ca.key"])), NAMES, days=10)
        await call(volcano_kmock, "PATCH", SECRET, {"data": {
            "tls.crt": base64.b64encode(expiring.cert_pem).decode(), "tls.key": base64.b64encode(
                expiring.key_pem).decode()}})

        async def renewed_everywhere() -> bool:
            stored = base64.b64decode((await secret())["data"]["tls.crt"])
            return stored != expiring.cert_pem and all(
                r.tls.loaded is not None and r.tls.loaded.cert_pem == stored for r in replicas)

        await eventually(renewed_everywhere, timeout=10)
        await asyncio.sleep(INFORMER_DELAY + 0.2)
        # At least 300 requests across the whole rotation, however slow the machine: the load goes on until then.
        await eventually(lambda: sum(results.values()) + len(failures) >= 300, timeout=120)
        stop_load.set()
        stop_recording.set()
        await asyncio.gather(*background)

    assert failures == [], f"{len(failures)} of {len(failures) + sum(results.values())} requests failed: {failures[:5]}"
    assert sum(results.values()) >= 300
    assert results.get("old CA", 0) > 0
    assert results.get("new CA", 0) > 0
    assert set(results) <= {"old CA", "new CA"}
    old, new = base64.b64encode(old_ca.cert_pem).decode(), base64.b64encode(new_ca_pem).decode()
    both = base64.b64encode(old_ca.cert_pem + new_ca_pem).decode()
    for _, _, name, _, _ in CONFIGURATIONS:  # the caBundle went old → old + new → new, and nothing else
        assert view.bundles(name) == [old, both, new]
    # The serving certificate switched while the caBundle held both CAs, well after every configuration had them.
    switched = [s for s in secrets if PREVIOUS_CA_CERT in s["data"]]
    assert switched, "the Secret was never seen between the switch and the old CA's removal"


@pytest.mark.parametrize("change", ["reorder", "rename", "insert", "remove"])
@pytest.mark.kmock(client_fct=no_keepalive)
async def test_a_ca_bundle_patch_racing_kubectl_apply_is_refused_and_redone(
        volcano_kmock: Any, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    """``kubectl apply`` changes the webhooks between the caBundle patch's read and its write: the patch is refused
    (its ``test`` on the webhook's name fails) and computed again from a fresh read; every webhook ends up with the
    caBundle."""
    names = ["a.cardquota.io", "b.cardquota.io", "c.cardquota.io"]
    old, new = base64.b64encode(b"old").decode(), base64.b64encode(b"new").decode()
    installed = configuration("ValidatingWebhookConfiguration", "cardquota-validating", 3, old, names)
    installed["webhooks"][1]["clientConfig"]["caBundle"] = new  # one webhook already has it
    await call(volcano_kmock, "POST", f"{WEBHOOKS}/validatingwebhookconfigurations", installed)
    path = f"{WEBHOOKS}/validatingwebhookconfigurations/cardquota-validating"
    applied = copy.deepcopy(installed["webhooks"])
    if change == "reorder":  # a, b, c → b, c, a: by index, the patch read for a and c would hit b and c
        applied = applied[1:] + applied[:1]
    elif change == "rename":
        applied[0]["name"], applied[2]["name"] = "c.cardquota.io", "a.cardquota.io"
    elif change == "insert":
        applied.insert(0, {**copy.deepcopy(applied[0]), "name": "new.cardquota.io"})
    else:
        del applied[0]
    api = api_client(Connection(host=str(volcano_kmock.url).rstrip("/"), insecure=True))
    real_get = kube._get
    reads: list[float] = []

    def get_then_apply(client: Any, url: str) -> Any:
        found = real_get(client, url)
        if url == path and not reads:  # the concurrent kubectl apply lands right after the first read
            kube._request(client, "PATCH", path, {"webhooks": applied}, "application/merge-patch+json")
        reads.append(time.monotonic())
        return found

    monkeypatch.setattr(kube, "_get", get_then_apply)
    result = await asyncio.to_thread(kube.patch_ca_bundle, api, "ValidatingWebhookConfiguration",
                                     "cardquota-validating", new)

    final = await call(volcano_kmock, "GET", path)
    assert [w["name"] for w in final["webhooks"]] == [w["name"] for w in applied]
    assert [w["clientConfig"].get("caBundle") for w in final["webhooks"]] == [new] * len(applied)
    assert result is kube.BundlePatch.WRITTEN
    json_patches = [r for r in volcano_kmock if str(r.method.value).upper() == "PATCH" and isinstance(r.data, list)]
    assert len(json_patches) == 2  # the first, computed before the apply, was refused
    first = json_patches[0].data
    assert [op["op"] for op in first] == ["test", "add"] * (len(first) // 2)
    assert len(reads) == 2
