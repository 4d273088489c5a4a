"""The operator against kmock: its TLS Secret and the webhooks' caBundle, and a whole ``cardquota operator`` run
answering AdmissionReviews over HTTPS while watch events change its verdicts; the operator calls as its account,
``cardquota``, held to the RBAC the chart renders for it (a forbidden call is the API server's 403 and fails)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import logging
import ssl
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from builders import podgroup, queue
from cryptography import x509
from operator_runs import operator_running
from polling import eventually

from cardquota.kube import Connection, api_client
from cardquota.operator.certificates import ensure_certificates
from cardquota.operator.settings import Settings
from cardquota.runtime.tls import renewal_reason, service_dns_names

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

SETTINGS = Settings(namespace="cardquota-system", service="cardquota")
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1"




async def call(volcano_kmock: Any, method: str, path: str, body: object = None) -> Any:
    url = f"{str(volcano_kmock.url).rstrip('/')}{path}"
    async with aiohttp.ClientSession() as session, session.request(method, url, json=body) as response:
        assert response.status < 300, await response.text()
        return await response.json()




def webhook_configuration(kind: str, name: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "webhooks": [{"name": f"w{index}.cardquota.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "clientConfig": {"service": {"name": "cardquota", "namespace": "cardquota-system"}}}
                         for index in range(count)]}


async def test_certificates_live_in_a_secret_and_the_ca_bundle_follows(
    volcano_kmock: Any, operator_connection: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await call(volcano_kmock, "POST", f"{WEBHOOKS}/validatingwebhookconfigurations",
               webhook_configuration("ValidatingWebhookConfiguration", "cardquota-validating", 2))
    await call(volcano_kmock, "POST", f"{WEBHOOKS}/mutatingwebhookconfigurations",
               webhook_configuration("MutatingWebhookConfiguration", "cardquota-mutating", 1))
    await call(volcano_kmock, "POST", "/apis/apps/v1/namespaces/cardquota-system/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "cardquota", "namespace": "cardquota-system", "uid": "d-123"}, "spec": {}})
    api = api_client(operator_connection)

    first = await asyncio.to_thread(ensure_certificates, api, SETTINGS)
    secret = await call(volcano_kmock, "GET", "/api/v1/namespaces/cardquota-system/secrets/cardquota-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "cardquota", "uid": "d-123"}]
    assert sorted(secret["data"]) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert base64.b64decode(secret["data"]["tls.crt"]) == first.serving.cert_pem
    assert renewal_reason(first.serving, first.ca, service_dns_names("cardquota", "cardquota-system")) is None
    bundle = base64.b64encode(first.ca.cert_pem).decode()
    for plural, name, count in (("validatingwebhookconfigurations", "cardquota-validating", 2),
                                ("mutatingwebhookconfigurations", "cardquota-mutating", 1)):
        configuration = await call(volcano_kmock, "GET", f"{WEBHOOKS}/{plural}/{name}")
        assert [w["clientConfig"]["caBundle"] for w in configuration["webhooks"]] == [bundle] * count

    again = await asyncio.to_thread(ensure_certificates, api, SETTINGS)
    assert again == first

    # Applied again (as kubectl apply of the manifests would): the next check puts the caBundle back.
    path = f"{WEBHOOKS}/validatingwebhookconfigurations/cardquota-validating"
    await call(volcano_kmock, "PATCH", path, {"webhooks": webhook_configuration(
        "ValidatingWebhookConfiguration", "cardquota-validating", 2)["webhooks"]})
    assert "caBundle" not in (await call(volcano_kmock, "GET", path))["webhooks"][0]["clientConfig"]
    await asyncio.to_thread(ensure_certificates, api, SETTINGS)
    restored = await call(volcano_kmock, "GET", path)
    assert [w["clientConfig"]["caBundle"] for w in restored["webhooks"]] == [bundle] * 2

    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=340)
    renewed = await asyncio.to_thread(ensure_certificates, api, SETTINGS, later)
    assert renewed.ca == first.ca
    assert renewed.serving != first.serving
    stored = await call(volcano_kmock, "GET", "/api/v1/namespaces/cardquota-system/secrets/cardquota-webhook-tls")
    assert base64.b64decode(stored["data"]["tls.crt"]) == renewed.serving.cert_pem
    assert x509.load_pem_x509_certificate(renewed.serving.cert_pem).not_valid_after_utc > later
    assert "PRIVATE KEY" not in caplog.text
    assert "PRIVATE KEY" not in repr(renewed)


async def test_operator_run_answers_over_https_and_follows_the_cluster(volcano_kmock: Any, tmp_path: Path) -> None:
    async with operator_running(volcano_kmock, tmp_path, rbac=True) as ports:
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        url = f"https://localhost:{ports[0]}/validate"

        async def verdict() -> dict[str, Any]:
            body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": str(uuid.uuid4()), "operation": "CREATE", "namespace": "ml", "name": "pg",
                "kind": {"group": "scheduling.volcano.sh", "version": "v1beta1", "kind": "PodGroup"},
                "object": podgroup("pg", namespace="ml", queue="team-z", request={"NVIDIA-A100": 4})}}
            connector = aiohttp.TCPConnector(ssl=context)
            async with aiohttp.ClientSession(connector=connector) as session, \
                    session.post(url, data=json.dumps(body)) as response:
                assert response.status == 200
                return (await response.json())["response"]

        denied = await verdict()
        assert denied["allowed"] is False
        assert "queue team-z does not exist" in denied["status"]["message"]
        await call(volcano_kmock, "POST", "/apis/scheduling.volcano.sh/v1beta1/queues",
                   queue("team-z", {"NVIDIA-A100": 8}))

        async def allowed() -> bool:
            return (await verdict())["allowed"] is True

        await eventually(allowed)
