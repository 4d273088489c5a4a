"""The operator's own writes with the webhooks in the loop: the real operator against kmock behind an admission proxy
that calls the operator's own webhook server as the API server's admission dispatchers would (tests/admission_proxy.py:
the mutating then the validating webhooks of manifests/base/webhooks.yaml, with their rules, selectors,
matchConditions and failurePolicy). Its usage annotations land on a queue whose quota
is unreadable, a child whose parent is gone and a queue whose quota was lowered below a PodGroup's request — with
the matchCondition skipping its writes, and without it (then ratcheting lets them through); a user's update that
changes nothing wrong passes, one that writes a bad quota is refused, naming the validating webhook; what the
mutating webhook makes of a write is what kmock stores."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from admission_proxy import AdmissionProxy, namespaces_in
from aiohttp import web
from builders import podgroup, queue
from operator_runs import operator_running
from polling import eventually
from webhook_conditions import configuration_documents

from cardquota.core.keys import CARD_USAGE
from cardquota.kube import queue_path

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]
A100 = "NVIDIA-A100"
OPERATOR = "system:serviceaccount:cardquota-system:cardquota"
QUEUES = "scheduling.volcano.sh/v1beta1/queues"


def seed(kmock: Any) -> None:
    kmock.objects["v1/namespaces", None, "ml"] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}
    kmock.objects[QUEUES, None, "broken"] = queue("broken", '{"NVIDIA-A100": "four"}')
    kmock.objects[QUEUES, None, "child"] = queue("child", {A100: 2}, parent="gone")
    kmock.objects[QUEUES, None, "lowered"] = queue("lowered", {A100: 2})
    kmock.objects["scheduling.volcano.sh/v1beta1/podgroups", "ml", "big"] = podgroup(
        "big", namespace="ml", queue="lowered", phase="Pending", request={A100: 8})


def without_our_condition() -> list[dict[str, Any]]:
    documents = configuration_documents()
    for document in documents:
        for hook in document["webhooks"]:
            hook["matchConditions"] = [c for c in hook.get("matchConditions") or []
                                       if c["name"] != "not-cardquota-itself"]
    return documents


@contextlib.asynccontextmanager
async def proxied(kmock: Any, tmp_path: Path, configurations: list[dict[str, Any]]) -> AsyncIterator[
        tuple[AdmissionProxy, str, list[int]]]:
    ports: list[int] = []
    proxy = AdmissionProxy(upstream=str(kmock.url).rstrip("/"), webhook_url=lambda: f"https://localhost:{ports[0]}",
                           ca_file=tmp_path / "ca.crt", users={"operator-token": OPERATOR, "alice-token": "alice"},
                           configurations=configurations, namespaces=namespaces_in(kmock))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        proxy.session = session
        # Handlers end when their client goes (a watch Kopf closed), and no connection idles: nothing for Kopf to
        # wait on when it stops.
        runner = web.AppRunner(proxy.app(), keepalive_timeout=0, handler_cancellation=True, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            yield proxy, url, ports
        finally:
            await runner.cleanup()


async def usage_everywhere(kmock: Any) -> bool:
    return all(CARD_USAGE in (kmock.objects[QUEUES, None, name].get("metadata", {}).get("annotations") or {})
               for name in ("broken", "child", "lowered"))


@pytest.mark.parametrize(("hooks", "service_account", "webhook_sees_us"), [
    (configuration_documents, "cardquota", False),
    (without_our_condition, "someone-else", True),  # neither the condition nor own_users: ratcheting alone
], ids=["match-condition", "ratcheting-alone"])
async def test_the_operators_usage_annotations_pass_the_webhooks(
        volcano_kmock: Any, tmp_path: Path, hooks: Any, service_account: str, webhook_sees_us: bool) -> None:
    seed(volcano_kmock)
    async with proxied(volcano_kmock, tmp_path, hooks()) as (proxy, url, ports):
        async with operator_running(volcano_kmock, tmp_path, api_url=url, token="operator-token",
                                    service_account=service_account) as served:
            ports.extend(served)
            await eventually(lambda: usage_everywhere(volcano_kmock), timeout=20)
        assert proxy.refused == []
        ours = [call for call in proxy.calls if call[1] == OPERATOR]
        assert bool(ours) is webhook_sees_us
        assert all(allowed for _, _, allowed in ours)


async def test_a_users_update_is_judged_on_what_it_changes(volcano_kmock: Any, tmp_path: Path) -> None:
    seed(volcano_kmock)
    volcano_kmock.objects[QUEUES, None, "team-a"] = queue("team-a", {A100: 4})
    headers = {"Authorization": "Bearer alice-token", "Content-Type": "application/merge-patch+json"}
    async with proxied(volcano_kmock, tmp_path, configuration_documents()) as (proxy, url, ports), \
            operator_running(volcano_kmock, tmp_path, api_url=url, token="operator-token") as served, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as alice:
        ports.extend(served)
        label = {"metadata": {"labels": {"team": "vision"}}}
        async with alice.patch(url + queue_path("broken"), data=json.dumps(label), headers=headers) as reply:
            assert reply.status == 200, await reply.text()
        bad = {"metadata": {"annotations": {"volcano.sh/card.quota": '{"NVIDIA-A100": -1}'}}}
        async with alice.patch(url + queue_path("team-a"), data=json.dumps(bad), headers=headers) as reply:
            assert reply.status == 403
            denial = await reply.json()
    assert denial["message"].startswith('admission webhook "queues.validate.cardquota.io" denied the request: ')
    assert "-1" in denial["message"]
    # The webhook's status reaches the client whole: its reason and the violation as a field cause.
    assert denial["reason"] == "Forbidden"
    assert [cause["field"] for cause in denial["details"]["causes"]] == [
        'metadata.annotations["volcano.sh/card.quota"]']
    # The label change passes without a call (the matchConditions skip an update that changes no quota, spec or
    # card annotation); the bad quota goes to the mutating webhook (its canonical form), which passes it on, then
    # to the validating one, which refuses it.
    assert [(name, user, allowed) for name, user, allowed in proxy.calls if user == "alice"] == [
        ("queues.mutate.cardquota.io", "alice", True), ("queues.validate.cardquota.io", "alice", False)]


async def test_what_the_mutating_webhook_makes_of_a_write_is_what_is_stored(volcano_kmock: Any, tmp_path: Path) -> None:
    """The queue mutation (canonical card.quota) in the loop: a user's create and update, as sent, are not what
    kmock stores — the object the mutating webhook patched is (mutating/dispatcher.go applies the patch to the
    object that is then validated and persisted). The validating webhook's warning comes back as a Warning
    header."""
    seed(volcano_kmock)
    headers = {"Authorization": "Bearer alice-token"}
    loose = '{ "NVIDIA-A100" : 3 }'
    created = queue("team-b", loose)
    async with proxied(volcano_kmock, tmp_path, configuration_documents()) as (proxy, url, ports), \
            operator_running(volcano_kmock, tmp_path, api_url=url, token="operator-token") as served, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as alice:
        ports.extend(served)
        async with alice.post(url + "/apis/scheduling.volcano.sh/v1beta1/queues", data=json.dumps(created),
                              headers={**headers, "Content-Type": "application/json"}) as reply:
            assert reply.status in (200, 201), await reply.text()
        stored = volcano_kmock.objects[QUEUES, None, "team-b"]["metadata"]["annotations"]["volcano.sh/card.quota"]
        assert stored == '{"NVIDIA-A100":3}'
        change = {"metadata": {"annotations": {"volcano.sh/card.quota": '{"NVIDIA-A100":  9}'}}}
        async with alice.patch(url + queue_path("team-b"), data=json.dumps(change),
                               headers={**headers, "Content-Type": "application/merge-patch+json"}) as reply:
            assert reply.status == 200, await reply.text()
            warning = reply.headers.get("Warning", "")
        stored = volcano_kmock.objects[QUEUES, None, "team-b"]["metadata"]["annotations"]["volcano.sh/card.quota"]
    assert stored == '{"NVIDIA-A100":9}'
    assert warning.startswith('299 - "')
    assert "over-committed" in warning
    assert [(name, allowed) for name, user, allowed in proxy.calls if user == "alice"] == [
        ("queues.mutate.cardquota.io", True), ("queues.validate.cardquota.io", True)] * 2


async def test_a_child_whose_parent_is_gone_takes_labels_but_cannot_raise_its_quota(volcano_kmock: Any,
                                                                                     tmp_path: Path) -> None:
    """Through the API server's path: the missing parent is carried over a label update, not over an update that
    raises the quota it is about (comparing messages let 2 → 100,000 through, "already so before this update")."""
    seed(volcano_kmock)
    headers = {"Authorization": "Bearer alice-token", "Content-Type": "application/merge-patch+json"}
    async with proxied(volcano_kmock, tmp_path, configuration_documents()) as (proxy, url, ports), \
            operator_running(volcano_kmock, tmp_path, api_url=url, token="operator-token") as served, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as alice:
        ports.extend(served)
        labelled = {"metadata": {"labels": {"team": "vision"},
                                 "annotations": {"volcano.sh/card.note": "x"}}}  # an annotation: the webhook is called
        async with alice.patch(url + queue_path("child"), data=json.dumps(labelled), headers=headers) as reply:
            assert reply.status == 200, await reply.text()
        raised = {"metadata": {"annotations": {"volcano.sh/card.quota": json.dumps({A100: 100_000})}}}
        async with alice.patch(url + queue_path("child"), data=json.dumps(raised), headers=headers) as reply:
            assert reply.status == 403
            message = (await reply.json())["message"]
    assert message == ('admission webhook "queues.validate.cardquota.io" denied the request: spec.parent: parent '
                       "queue gone does not exist")
    stored = volcano_kmock.objects[QUEUES, None, "child"]["metadata"]["annotations"]["volcano.sh/card.quota"]
    assert json.loads(stored) == {A100: 2}
    assert [(name, allowed) for name, user, allowed in proxy.calls if user == "alice"] == [
        ("queues.validate.cardquota.io", True), ("queues.mutate.cardquota.io", True),
        ("queues.validate.cardquota.io", False)]
