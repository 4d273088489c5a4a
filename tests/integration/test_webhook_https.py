"""The admission server over real HTTPS: every kind allowed, denied, mutated and warned; malformed bodies; a
crashing policy per failure mode; a cache still loading; the TLS chain; certificate rotation under load."""

from __future__ import annotations

import asyncio
import copy
import ssl
from dataclasses import replace
from typing import Any

import aiohttp
import jsonpatch
import pytest
from admission_reviews import A100, Server, client_context, decoded_patch, review
from builders import container, node, pod, podgroup, queue

from cardquota.core.policies.config import FailureMode
from cardquota.core.verdict import Verdict
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.tls import new_ca, new_serving_cert

pytestmark = pytest.mark.asyncio


def vcjob(request: str | None, replicas: int = 2) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "train", "namespace": "ml"}
    if request is not None:
        metadata["annotations"] = {"volcano.sh/card.request": request}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": metadata, "spec": {
        "queue": "team-a", "tasks": [{"name": "worker", "replicas": replicas, "template": {
            "metadata": {"annotations": {"volcano.sh/card.name": A100}},
            "spec": {"containers": [container(limits={"nvidia.com/gpu": "1"})]}}}]}}


def scheduler_configmap(conf: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
            "data": {"volcano-scheduler.conf": conf}}


async def test_queue_allowed_mutated_and_denied(server: Server) -> None:
    good = queue("team-b", '{ "NVIDIA-H100": 1, "NVIDIA-A100/mps-80g*1/8": 2 }',
                 capability={"cpu": "8", "memory": "8Gi"})
    body = review(good)
    assert await server.validate(body) == {"uid": body["request"]["uid"], "allowed": True}
    mutated = await server.mutate(review(good))
    assert decoded_patch(mutated) == [{"op": "replace", "path": "/metadata/annotations/volcano.sh~1card.quota",
                                       "value": '{"NVIDIA-A100/mps-80g*1/8":2,"NVIDIA-H100":1}'}]
    bad = await server.validate(review(queue("team-c", '{"NVIDIA-A100|NVIDIA-H100": 4}')))
    assert bad["allowed"] is False
    assert bad["status"]["code"] == 403
    assert bad["status"]["message"].startswith('metadata.annotations["volcano.sh/card.quota"]: '
                                               "NVIDIA-A100|NVIDIA-H100 lists alternatives")
    assert "patch" not in await server.mutate(review(queue("team-c", "{bad")))


async def test_queue_warnings_reach_kubectl_once(server: Server) -> None:
    body = review(queue("typo", {"NVIDIA-A10O": 1}, capability={"cpu": "8", "memory": "8Gi"}))
    assert (await server.validate(body))["warnings"] == [
        "card type NVIDIA-A10O is not offered by any node (did you mean NVIDIA-A100?)"]
    assert "warnings" not in await server.mutate(body)


async def test_podgroup_and_job(server: Server) -> None:
    denied = await server.validate(review(podgroup("big", namespace="ml", queue="team-a", request={A100: 11})))
    assert denied["status"]["message"] == ('metadata.annotations["volcano.sh/card.request"]: requests 11 NVIDIA-A100 '
                                           "but queue team-a allows at most 10: it can never run")
    job = vcjob(None, replicas=3)
    assert decoded_patch(await server.mutate(review(job))) == [
        {"op": "add", "path": "/metadata/annotations", "value": {"volcano.sh/card.request": '{"NVIDIA-A100":3}'}}]
    assert (await server.validate(review(vcjob('{"NVIDIA-A100": 12}'))))["allowed"] is False


async def test_pods_plain_card_denied_and_generated_names(server: Server) -> None:
    plain = review(pod("web", namespace="shop", containers=[container(requests={"cpu": "1"})]))
    assert await server.validate(plain) == {"uid": plain["request"]["uid"], "allowed": True}
    assert await server.mutate(plain) == {"uid": plain["request"]["uid"], "allowed": True}
    card = pod("", namespace="", card=A100, gpus=1, queue="team-a")
    del card["metadata"]["name"], card["metadata"]["namespace"]
    card["metadata"]["generateName"] = "trainer-7d9f8-"
    body = review(card, name="", namespace="ml")
    patch = decoded_patch(await server.mutate(body))
    assert patch[0]["path"] == "/spec/affinity"
    assert patch[0]["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"] == [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                                        "values": [A100]}]}]
    assert (await server.validate(body))["allowed"] is True
    wrong = pod("w", namespace="ml", card=A100, gpus=1, resource="nvidia.com/gpu.shared", queue="team-a")
    answer = await server.validate(review(wrong))
    assert answer["status"]["message"] == ('metadata.annotations["volcano.sh/card.name"]: NVIDIA-A100 is requested '
                                           "through nvidia.com/gpu, but the pod requests nvidia.com/gpu.shared "
                                           "(did you mean NVIDIA-A100/mps-80g*1/8?)")


async def test_node_and_scheduler_configmap(server: Server) -> None:
    crossquota = node("a100-1", allocatable={"nvidia.com/gpu": "8"})
    crossquota["metadata"]["annotations"] = {"volcano.sh/crossquota-cpu": "500"}
    answer = await server.validate(review(crossquota, operation="CREATE"))
    assert answer["allowed"] is False
    assert "volcano.sh/crossquota-cpu 500 is above the node's allocatable cpu 64" in answer["status"]["message"]
    conflict = scheduler_configmap(
        "actions: enqueue\ntiers:\n- plugins:\n  - name: capacity-card\n  - name: proportion\n")
    denied = await server.validate(review(conflict))
    assert "plugin proportion conflicts with capacity-card" in denied["status"]["message"]
    other = scheduler_configmap("not: [valid")
    other["metadata"]["name"] = "something-else"
    assert (await server.validate(review(other)))["allowed"] is True


async def test_delete_of_a_queue_with_card_work_warns(server: Server) -> None:
    answer = await server.validate(review(None, operation="DELETE", old=queue("team-a", {A100: 10}), name="team-a"))
    assert answer["allowed"] is True
    assert answer["warnings"] == ["queue team-a still has card work (allocated NVIDIA-A100 2); deleting it leaves "
                                  "that work without a queue"]
    quiet = await server.validate(review(None, operation="DELETE", old=queue("cpu-only"), name="cpu-only"))
    assert "warnings" not in quiet


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{not json", "the body is not JSON"),
        (b"[1, 2]", "the body is not a JSON object"),
        (b'{"kind": "Pod"}', "expected kind AdmissionReview"),
        (b'{"kind": "AdmissionReview"}', "the AdmissionReview has no request"),
        (b'{"kind": "AdmissionReview", "request": {"kind": {"kind": "Pod"}, "operation": "CREATE"}}',
         "request.uid is missing"),
        (b'{"kind": "AdmissionReview", "request": {"uid": "u", "operation": "CREATE"}}', "request.kind is missing"),
        # The uid is echoed in the answer: one larger than the API server's (a 36-character UUID) made each answer
        # as large as the body, three times with escaping (a 1,000 KiB uid: 3 MiB held per unread answer).
        (b'{"kind": "AdmissionReview", "request": {"uid": "' + b"u" * 129 + b'", "kind": {"kind": "Pod"}, '
         b'"operation": "CREATE"}}', "request.uid is not a UID as the API server sends"),
        ('{"kind": "AdmissionReview", "request": {"uid": "\u00e9t\u00e9", "kind": {"kind": "Pod"}, '
         '"operation": "CREATE"}}'.encode(), "request.uid is not a UID as the API server sends"),
        (b'{"kind": "AdmissionReview", "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", '
         b'"object": [1]}}', "request.object is not an object"),
        (b"[" * 100_000, "the body nests more than 10,002 levels deep"),  # the API server's limit, +2 for the review
    ],
)
async def test_malformed_bodies_get_400_with_a_json_error(server: Server, body: bytes, error: str) -> None:
    for path in ("/validate", "/mutate"):
        status, answer = await server.post(path, body)
        assert status == 400
        assert error in answer["error"]


async def test_a_crashing_policy_fails_open_for_pods_and_closed_for_queues(server: Server) -> None:
    def crash(*_: object) -> None:
        raise RuntimeError("boom")

    server.admission.kinds = {key: replace(kind, admit=crash) for key, kind in server.admission.kinds.items()}
    card_pod = review(pod("p", namespace="ml", card=A100, gpus=1, queue="team-a"))
    pod_answer = await server.validate(card_pod)
    assert pod_answer["allowed"] is True
    assert pod_answer["warnings"] == ["cardquota could not check Pod ml/p: internal error (RuntimeError: boom); "
                                      "it was let through unchecked"]
    queue_answer = await server.validate(review(queue("q", {A100: 1})))
    assert queue_answer["allowed"] is False
    assert queue_answer["status"]["message"] == "cardquota could not check Queue q: internal error (RuntimeError: boom)"
    assert "details" not in queue_answer["status"]  # no field is at fault: no causes
    server.admission.failure_modes = {"Pod": FailureMode.CLOSED, "Queue": FailureMode.OPEN}
    assert (await server.validate(card_pod))["allowed"] is False
    assert (await server.validate(review(queue("q", {A100: 1}))))["allowed"] is True


async def test_a_failure_outside_the_policy_is_still_answered_per_the_failure_mode(
        server: Server, caplog: pytest.LogCaptureFixture) -> None:
    """Whatever fails while a review is answered (here the cache, before any policy runs) is answered as a crashing
    policy is, per the kind's failure mode, and logged; never an HTTP 500."""

    class BrokenLedger:
        @property
        def snapshot(self) -> None:
            raise RuntimeError("boom")

    server.admission.cache = ClusterCache(ledger=BrokenLedger())  # type: ignore[arg-type]
    pod_answer = await server.validate(review(pod("p", namespace="ml", card=A100, gpus=1, queue="team-a")))
    assert pod_answer["allowed"] is True
    assert pod_answer["warnings"][0].startswith("cardquota could not check Pod ml/p: internal error (")
    queue_answer = await server.validate(review(queue("q", {A100: 1})))
    assert queue_answer["allowed"] is False
    assert queue_answer["status"]["message"].startswith("cardquota could not check Queue q: internal error (")
    assert "could not answer the review of Queue q" in caplog.text


async def test_until_the_first_full_list_answers_follow_the_failure_mode(server: Server) -> None:
    server.admission.cache = ClusterCache()
    pod_answer = await server.validate(review(pod("p", namespace="ml", card=A100, gpus=1, queue="team-a")))
    assert pod_answer["allowed"] is True
    assert pod_answer["warnings"] == ["cardquota could not check Pod ml/p: its cluster snapshot is still loading; "
                                      "retry in a few seconds; it was let through unchecked"]
    queue_answer = await server.validate(review(queue("q", {A100: 1})))
    assert queue_answer["allowed"] is False
    assert "still loading" in queue_answer["status"]["message"]
    assert "details" not in queue_answer["status"]


async def test_the_mutating_webhook_never_denies(server: Server) -> None:
    """A refusal must name the validating webhook and carry its message: the mutating one lets everything through
    (still loading, a crashing policy, a denial), the validating one refuses."""
    queue_review = review(queue("q", {A100: 1}))
    server.admission.cache = ClusterCache()
    assert (await server.mutate(queue_review))["allowed"] is True
    assert (await server.validate(queue_review))["allowed"] is False

    def crash(*_: object) -> Verdict:
        raise RuntimeError("boom")

    server.admission.cache = server.cache
    server.admission.kinds = {key: replace(kind, admit=crash) for key, kind in server.admission.kinds.items()}
    assert (await server.mutate(queue_review))["allowed"] is True
    assert (await server.validate(queue_review))["allowed"] is False


async def test_the_validating_webhook_says_when_the_mutation_is_missing(server: Server) -> None:
    """The validating webhook sees the object after every mutating webhook: a card pod still lacking the product
    affinity (ours did not run, or a later one dropped it) is admitted with a warning saying so."""
    card_pod = pod("p", namespace="ml", card=A100, gpus=1, queue="team-a")
    unmutated = await server.validate(review(card_pod))
    assert unmutated["allowed"] is True
    assert any(w.startswith("cardquota's mutating webhook would still change /spec/affinity: it did not run")
               for w in unmutated.get("warnings", []))
    mutated = copy.deepcopy(card_pod)
    mutated["spec"]["affinity"] = json_patched(card_pod, await server.mutate(review(card_pod)))["spec"]["affinity"]
    assert "warnings" not in await server.validate(review(mutated))


def json_patched(manifest: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    patched: dict[str, Any] = jsonpatch.apply_patch(manifest, decoded_patch(answer))
    return patched


async def test_writes_by_cardquota_itself_are_never_refused(server: Server) -> None:
    """The operator keeps annotations on queues whatever they hold: its own writes pass both webhooks unjudged."""
    broken = queue("q", '{"NVIDIA-A100": "four"}')
    ours = review(broken, operation="UPDATE", old=broken)
    ours["request"]["userInfo"] = {"username": "system:serviceaccount:cardquota-system:cardquota"}
    server.admission.own_users = frozenset({"system:serviceaccount:cardquota-system:cardquota"})
    assert (await server.validate(ours))["allowed"] is True
    assert "patch" not in (await server.mutate(ours))
    theirs = review(broken)
    assert (await server.validate(theirs))["allowed"] is False


async def test_health_and_readiness(server: Server) -> None:
    async with server.session.get(server.url + "/healthz") as response:
        assert response.status == 200
    async with server.session.get(server.url + "/readyz") as response:
        assert response.status == 200
    server.admission.cache = ClusterCache()
    async with server.session.get(server.url + "/readyz") as response:
        assert response.status == 503
        assert await response.json() == {"ready": False}


async def test_tls_chain_is_verified_against_the_ca(server: Server) -> None:
    stranger = client_context(new_ca("someone-else"))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=stranger)) as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(server.url + "/healthz")
    wrong_host = server.url.replace("localhost", "127.0.0.2")
    ours = client_context(server.ca)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ours)) as session:
        with pytest.raises((aiohttp.ClientConnectorError, aiohttp.ClientSSLError)):
            await session.get(wrong_host + "/healthz")


async def test_rotation_under_load_fails_no_request(server: Server) -> None:
    body = review(pod("p", namespace="ml", card=A100, gpus=1, queue="team-a"))
    failures: list[BaseException] = []
    serials: set[int] = set()

    async def client(count: int) -> None:
        for _ in range(count):
            try:
                status, answer = await server.post("/validate", body)
                assert status == 200
                assert answer["response"]["allowed"] is True
            except BaseException as error:
                failures.append(error)

    async def rotate() -> None:
        for _ in range(5):
            await asyncio.sleep(0.02)
            server.tls.install(new_serving_cert(server.ca, ["localhost"], ip_addresses=["127.0.0.1"]))
            assert server.tls.loaded is not None
            serials.add(_serial(server.tls.loaded.cert_pem))

    await asyncio.gather(*(client(40) for _ in range(8)), rotate())
    assert failures == []
    assert len(serials) == 5
    assert server.tls.loaded is not None
    assert await _peer_serial(server) == _serial(server.tls.loaded.cert_pem)  # new handshakes: the newest cert


def _serial(cert_pem: bytes) -> int:
    from cryptography import x509

    return x509.load_pem_x509_certificate(cert_pem).serial_number


async def _peer_serial(server: Server) -> int:
    from cryptography import x509

    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    _, writer = await asyncio.open_connection(host, port, ssl=client_context(server.ca),
                                                   server_hostname="localhost")
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    assert isinstance(writer.get_extra_info("ssl_object"), ssl.SSLObject)
    return x509.load_der_x509_certificate(der).serial_number


async def test_a_deployment_and_its_hpa_through_the_webhook(server: Server) -> None:
    annotations = {"volcano.sh/card.name": A100, "scheduling.volcano.sh/queue-name": "team-a"}
    template = {"metadata": {"annotations": annotations},
                "spec": {"schedulerName": "volcano", "containers": [
                    {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "serve", "namespace": "ml"}, "spec": {"replicas": 6, "template": template}}
    answer = await server.validate(review(deployment))
    assert answer["allowed"] is True
    assert answer["warnings"] == ["6 replicas need 12 NVIDIA-A100, queue team-a allows 10"]
    wrong = copy.deepcopy(deployment)
    wrong["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    denied = await server.validate(review(wrong))
    assert denied["allowed"] is False
    assert denied["status"]["message"].startswith("spec.template.spec.schedulerName: ")
    server.cache.apply("ADDED", deployment)  # as the watch would deliver it
    autoscaler = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                  "metadata": {"name": "serve", "namespace": "ml"},
                  "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve"},
                           "minReplicas": 1, "maxReplicas": 8}}
    hpa_answer = await server.validate(review(autoscaler))
    assert hpa_answer["allowed"] is True
    assert hpa_answer["warnings"] == ["scale-up of Deployment ml/serve will stall at 5 replicas: maxReplicas 8 would "
                                      "need 16 NVIDIA-A100, queue team-a allows 10"]
