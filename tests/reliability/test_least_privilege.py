"""Least privilege, derived from what the operator really calls: the real ``cardquota operator`` (managed
certificates, leader election, annotation writes, events) runs against kmock, every request it makes is recorded,
and the shipped RBAC must grant each one — and grant nothing that no request used. So too for each process of the
split deployment (``--role webhook`` and ``--role controller``) against its own roles
(manifests/components/separate-controller), and the served extender against components/extender. The rules are the
ones ``kubectl kustomize`` renders, read and matched by tests/rbac.py as the API server matches them. kmock serves
the Eviction API as the API server does (tests/evictions.py), so the card gate's preemption really evicts."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from builders import node, pod, queue
from evictions import EvictingUnderRbac
from operator_runs import extender_grants, operator_running, serve_dra
from polling import eventually
from rbac import Grants, Permission, Request, rendered_grants, request_of
from volcano_payloads import ALLOCATED, task_info

from cardquota.core import keys
from cardquota.core.scheduling.extender import Extender
from cardquota.core.scheduling.mgpu import MGPUConfig
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.kube import Connection, api_client
from cardquota.operator import extender as extender_module
from cardquota.operator import reflector as reflector_module
from cardquota.operator.certificates import ensure_certificates
from cardquota.operator.extender import api_pod_patcher, run_extender
from cardquota.operator.leader import LeaderElection
from cardquota.operator.settings import Role, Settings

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(cls=EvictingUnderRbac, client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

NAMESPACE = "cardquota-system"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1"
A100 = "NVIDIA-A100"


def seen(requests: Iterable[Any]) -> list[Request]:
    """What RBAC sees of the recorded requests (discovery left out: every authenticated user may read it)."""
    return [request for recorded in requests
            if (request := request_of(str(recorded.method.value), recorded.url.path, recorded.params)) is not None]


async def post(kmock: Any, path: str, body: object) -> None:
    async with aiohttp.ClientSession() as session, \
            session.post(f"{str(kmock.url).rstrip('/')}{path}", json=body) as response:
        assert response.status < 300, await response.text()


async def webhook_configurations(kmock: Any) -> None:
    for plural, kind in (("validatingwebhookconfigurations", "ValidatingWebhookConfiguration"),
                         ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration")):
        name = "cardquota-validating" if kind.startswith("Validating") else "cardquota-mutating"
        await post(kmock, f"{WEBHOOKS}/{plural}", {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "webhooks": [{"name": "w.cardquota.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "clientConfig": {"service": {"name": "cardquota", "namespace": NAMESPACE}}}]})


def cluster(kmock: Any) -> int:
    """A queue with a bound and a waiting card pod (so there is usage to publish and an event to record), a pod at
    the gate whose card fits, and an urgent pod at the gate of a queue whose preemption policy lets it displace the
    low-priority pod holding the queue's only card (the leader evicts it); the number of requests made so far (the
    test's own)."""
    kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team-a"] = queue("team-a", {A100: 1})
    kmock.objects["v1/pods", "ml", "held"] = pod("held", namespace="ml", card=A100, gpus=1, queue="team-a",
                                                 node_name="a100-1")
    kmock.objects["v1/pods", "ml", "waiting"] = pod("waiting", namespace="ml", card=A100, gpus=1, queue="team-a")
    # a pod at the card-quota gate whose card fits: the leader reads it (to narrow its A|B request) and lifts its gate
    kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team-b"] = queue("team-b", {A100: 1})
    kmock.objects["v1/pods", "ml", "gated"] = pod("gated", namespace="ml", card=f"{A100}|NVIDIA-H100", gpus=1,
                                                  queue="team-b", gated=True, uid="uid-gated")
    # an urgent pod at the gate of a full queue with LowerPriority: the leader evicts the low-priority pod for it
    kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team-c"] = queue(
        "team-c", {A100: 1}, annotations={keys.PREEMPTION: "LowerPriority"})
    kmock.objects["v1/pods", "ml", "sweep"] = pod("sweep", namespace="ml", card=A100, gpus=1, queue="team-c",
                                                  node_name="a100-1", priority=10, uid="uid-sweep")
    kmock.objects["v1/pods", "ml", "urgent"] = pod("urgent", namespace="ml", card=A100, gpus=1, queue="team-c",
                                                   gated=True, priority=1000, uid="uid-urgent")
    return len(list(kmock))


GATE_LEADER_CALLS = (("create", "events"), ("patch", "queues"), ("patch", "nodes"), ("patch", "leases"),
                     ("watch", "pods"), ("watch", "queues"), ("get", "pods"), ("patch", "pods"),
                     ("create", "pods/eviction"), ("list", "poddisruptionbudgets"), ("watch", "resourceclaims"),
                     ("watch", "resourceclaimtemplates"))
"""The (verb, resource) pairs the leading controllers of :func:`cluster` make with the card gate on."""


def preempted(kmock: Any) -> bool:
    """Whether the leader evicted ``sweep`` and then let ``urgent`` through (:func:`cluster`)."""
    gone = not any(resource.plural == "pods" and (namespace, name) == ("ml", "sweep") and not stored.deleted
                   for (resource, namespace, name), stored in kmock.objects.items())
    urgent = kmock.objects["v1/pods", "ml", "urgent"]
    return gone and not urgent["spec"].get("schedulingGates")


def made(kmock: Any, *wanted: tuple[str, str]) -> bool:
    """Whether the operator has made a request of each (verb, resource)."""
    made = {(request.verb, request.resource) for request in seen(kmock)}
    return all(item in made for item in wanted)


async def renew_certificate(kmock: Any) -> None:
    """A certificate close to expiry is replaced in the Secret (a patch)."""
    api = api_client(Connection(host=str(kmock.url).rstrip("/"), insecure=True))
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=340)
    await asyncio.to_thread(ensure_certificates, api, Settings(namespace=NAMESPACE), later)


UNUSED_HERE: set[Permission] = {
    ("get", "scheduling.volcano.sh", "queues", "", ""),
    *((verb, "admissionregistration.k8s.io", resource, name, "") for verb in ("get", "patch")
      for resource, name in (("validatingwebhookconfigurations", "cardquota-mutating"),
                             ("mutatingwebhookconfigurations", "cardquota-validating")))}
"""Grants these scenarios do not reach, and why: ``get`` on queues, the Queue read again after the API server refused
a usage patch as too large (Publisher._publish_queue), is made under the controllers' enforced RBAC in
tests/integration/test_publish_limits_kmock.py; one rule lists both webhook configuration kinds and both names, so
RBAC grants each kind under either name, and the operator patches each under its own only (certificates.py:
``WEBHOOK_KINDS`` zipped with ``Settings.webhook_configurations``)."""


def assert_exactly_granted(kmock: Any, setup_requests: int, grants: Grants) -> None:
    """Every request after the test's own is allowed by ``grants``, and every grant was used."""
    used: set[Permission] = set()
    refused = []
    for request in seen(list(kmock)[setup_requests:]):
        allowing = grants.allowing(request)
        if not allowing:
            refused.append(str(request))
        used |= allowing
    assert refused == []
    assert sorted(grants.permissions() - used - UNUSED_HERE) == []


async def test_the_rbac_grants_exactly_what_the_operator_calls(volcano_kmock: Any, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LeaderElection.run, "__defaults__", (0.2,))  # renew the Lease within the test
    await webhook_configurations(volcano_kmock)
    serve_dra(volcano_kmock)
    setup_requests = cluster(volcano_kmock)
    async with operator_running(volcano_kmock, tmp_path, dev=False, cert_dir="", namespace=NAMESPACE,
                                publish_window=0.1, card_gate=True):
        await eventually(lambda: made(volcano_kmock, *GATE_LEADER_CALLS) and preempted(volcano_kmock), timeout=20)
    await renew_certificate(volcano_kmock)
    assert_exactly_granted(volcano_kmock, setup_requests, rendered_grants("cardquota", overlay="dev"))


async def test_the_webhook_process_is_granted_exactly_what_it_calls(volcano_kmock: Any, tmp_path: Path) -> None:
    await webhook_configurations(volcano_kmock)
    setup_requests = cluster(volcano_kmock)
    async with operator_running(volcano_kmock, tmp_path, dev=False, cert_dir="", namespace=NAMESPACE,
                                role=Role.WEBHOOK, card_gate=True):  # as shipped: it adds gates, never lifts them
        await eventually(lambda: made(volcano_kmock, ("patch", "mutatingwebhookconfigurations"),
                                      ("watch", "queues"), ("watch", "nodes")), timeout=20)
    await renew_certificate(volcano_kmock)
    assert_exactly_granted(volcano_kmock, setup_requests, rendered_grants("cardquota", overlay="production"))


async def test_the_controller_process_is_granted_exactly_what_it_calls(volcano_kmock: Any, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LeaderElection.run, "__defaults__", (0.2,))
    serve_dra(volcano_kmock)
    setup_requests = cluster(volcano_kmock)
    async with operator_running(volcano_kmock, tmp_path, dev=False, cert_dir="", namespace=NAMESPACE,
                                publish_window=0.1, role=Role.CONTROLLER, card_gate=True):
        await eventually(lambda: made(volcano_kmock, *GATE_LEADER_CALLS) and preempted(volcano_kmock), timeout=20)
    assert_exactly_granted(volcano_kmock, setup_requests, rendered_grants("cardquota-controller", overlay="production"))


MGPU = {"vke.volcengine.com/mgpu-core": "30", "vke.volcengine.com/mgpu-memory": "4096"}


def mgpu_pod(name: str, node_name: str | None = None) -> dict[str, Any]:
    return pod(name, namespace="ml", node_name=node_name, containers=[{"name": "c", "resources": {"requests": MGPU}}])


async def test_the_extender_is_granted_exactly_what_it_calls_and_patches_only_the_pods_it_placed(
        volcano_kmock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The served extender (watching kmock) places a pending mGPU pod and is asked, by some other caller, to place
    a running one: only the first is patched; it reports DRA claims unreadable (an event) until resource.k8s.io is
    served, then watches them; and its ClusterRole grants exactly what it called."""
    monkeypatch.setattr(reflector_module, "NOT_SERVED_RETRY_SECONDS", 0.1)
    monkeypatch.setattr(extender_module, "DEGRADED_CHECK_SECONDS", 0.05)
    volcano_kmock.objects["v1/nodes", None, "m1"] = node("m1", allocatable={
        "vke.volcengine.com/mgpu-core": "400", "vke.volcengine.com/mgpu-memory": "98304"})
    volcano_kmock.objects["v1/pods", "ml", "mine"] = mgpu_pod("mine")
    volcano_kmock.objects["v1/pods", "ml", "busy"] = mgpu_pod("busy", node_name="m1")
    setup_requests = cluster(volcano_kmock)
    api = api_client(Connection(host=str(volcano_kmock.url).rstrip("/"), insecure=True))
    stop, ports = asyncio.Event(), []
    served = asyncio.create_task(run_extender(
        Extender(SchedulerConfig(mgpu=MGPUConfig(enabled=True))), "127.0.0.1", 0, api_pod_patcher(api), stop,
        api=api, on_listening=ports.append))
    try:
        await eventually(lambda: bool(ports))
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{ports[0]}") as session:
            async def ready() -> bool:
                async with session.get("/readyz") as response:
                    return response.status == 200

            await eventually(ready, timeout=20)
            await eventually(lambda: made(volcano_kmock, ("create", "events")), timeout=20)
            serve_dra(volcano_kmock)
            for manifest in (mgpu_pod("busy", node_name="m1"), mgpu_pod("mine")):
                async with session.post("/allocateFunc", json={"task": task_info(manifest, status=ALLOCATED,
                                                                                 node="m1")}) as response:
                    assert await response.json() == {"errorMessage": ""}
        await eventually(lambda: made(volcano_kmock, ("patch", "pods"), ("watch", "resourceclaims"),
                                      ("watch", "resourceclaimtemplates")), timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(served, 30)
    assert [request.name for request in seen(volcano_kmock) if request.verb == "patch"] == ["mine"]
    assert_exactly_granted(volcano_kmock, setup_requests, extender_grants())
