"""The cluster cache against kmock: the initial full list through the kube module, then Kopf watch events that
change verdicts (a Queue created in the API makes a PodGroup for it admissible). The cache calls as the operator's
account, held to its shipped RBAC (the operator_connection fixture, operator_runs.following_through_a_kubeconfig)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import aiohttp
import kopf
import pytest
from builders import podgroup, queue
from operator_runs import following_through_a_kubeconfig
from polling import eventually

from cardquota.core.policies.config import PolicyConfig
from cardquota.kube import Connection, api_client, list_all_async
from cardquota.operator.watch import register
from cardquota.runtime.cache import ClusterCache
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.review import read_review

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

QUEUES = "scheduling.volcano.sh/v1beta1/queues"
PODGROUPS = "scheduling.volcano.sh/v1beta1/podgroups"


def podgroup_review(queue_name: str) -> Any:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "scheduling.volcano.sh", "version": "v1beta1", "kind": "PodGroup"},
        "operation": "CREATE", "namespace": "ml", "name": "pg",
        "object": podgroup("pg", namespace="ml", queue=queue_name, request={"NVIDIA-A100": 4})}}
    return read_review(json.dumps(body).encode())


async def test_initial_list_then_watch_events_change_verdicts(operator_connection: Connection) -> None:
    connection = operator_connection
    cache = ClusterCache()
    cache.load(await list_all_async(api_client(connection)))
    assert cache.ready
    assert set(cache.ledger.snapshot.nodes) == {"a100-1"}
    admission = Admission(cache, PolicyConfig())
    before = admission.review(podgroup_review("team-z"), mutating=False)
    assert not before.allowed
    assert "queue team-z does not exist" in before.message

    registry = kopf.OperatorRegistry()
    register(registry, cache)

    @kopf.on.login(registry=registry, id="login")
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=connection.host, insecure=True, token=connection.token)

    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    settings.scanning.disabled = True  # as watch.follow runs Kopf: the operator's RBAC grants no CRD list
    settings.persistence.consistency_timeout = 0.5
    stop = asyncio.Event()
    operator = asyncio.create_task(kopf.operator(registry=registry, settings=settings, clusterwide=True,
                                                 standalone=True, stop_flag=stop))
    try:
        url = f"{connection.host}/apis/{QUEUES}"
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json=queue("team-z", {"NVIDIA-A100": 8})) as response:
                assert response.status < 300, await response.text()
            await eventually(lambda: "team-z" in cache.ledger.snapshot.queues)
            assert admission.review(podgroup_review("team-z"), mutating=False).allowed
            patch = {"metadata": {"annotations": {"volcano.sh/card.quota": '{"NVIDIA-A100":2}'}}}
            async with session.patch(f"{url}/team-z", json=patch,
                                     headers={"Content-Type": "application/merge-patch+json"}) as response:
                assert response.status < 300, await response.text()
        await eventually(lambda: dict(cache.ledger.snapshot.queues["team-z"].quota.values) == {"NVIDIA-A100": 2})
        later = admission.review(podgroup_review("team-z"), mutating=False)
        assert not later.allowed
        assert "requests 4 NVIDIA-A100 but queue team-z allows at most 2" in later.message
    finally:
        stop.set()
        await asyncio.wait_for(operator, timeout=15)


async def create_queue_and_see_it(kmock: Any, cache: ClusterCache, name: str) -> None:
    """Create a Queue in kmock and wait until Kopf's queue handler puts it in the cache."""
    url = f"{str(kmock.url).rstrip('/')}/apis/{QUEUES}"
    async with aiohttp.ClientSession() as session, session.post(url, json=queue(name, {"NVIDIA-A100": 8})) as response:
        assert response.status < 300, await response.text()
    await eventually(lambda: name in cache.ledger.snapshot.queues)


async def test_following_with_only_a_kubeconfig_logs_kopf_in_as_the_client_is(volcano_kmock: Any,
                                                                              tmp_path: Any) -> None:
    """`cardquota operator` and `cardquota extender` reach the API through a kubeconfig (or the in-cluster account),
    not a Connection: Kopf logs in from the same client configuration (watch.connection_info). Before, a plain
    registry had no login handler and Kopf stopped with LoginError right after the cache had synced."""
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path) as cache:
        assert set(cache.ledger.snapshot.nodes) == {"a100-1"}
        await create_queue_and_see_it(volcano_kmock, cache, "team-k")


async def test_following_works_for_a_user_id_with_no_passwd_entry(volcano_kmock: Any, tmp_path: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod may run as a uid its image does not list (OpenShift's restricted SCC picks one per namespace; the host
    kubelet of ``make e2e-local`` ran the shipped Deployment's 65532 on a root without it): ``getpass.getuser()``
    then raises KeyError. Kopf asks it for its identity unless given one, and the operator crash-looped right after
    its cache had loaded; it now names itself after the pod (HOSTNAME)."""
    import getpass

    def no_passwd_entry() -> str:
        raise KeyError("getpwuid(): uid not found: 65532")

    monkeypatch.setattr(getpass, "getuser", no_passwd_entry)
    monkeypatch.setenv("HOSTNAME", "cardquota-7d76bc7df-l7vvm")
    async with following_through_a_kubeconfig(volcano_kmock, tmp_path) as cache:
        await create_queue_and_see_it(volcano_kmock, cache, "team-p")  # Kopf is up and handling events
