"""AdmissionReview builders and a running HTTPS admission server with a generated CA (the fixtures are in
tests/integration/conftest.py)."""

from __future__ import annotations

import base64
import json
import ssl
import uuid
from dataclasses import dataclass
from typing import Any

import aiohttp
from builders import gpu_labels, gpu_node, node, pod, queue

from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.tls import KeyPair, ReloadableContext
from cardquota.webhooks.admission import Admission

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
CLUSTER = [
    gpu_node("a100-1", A100, 8), gpu_node("h100-1", H100, 8),
    node("mps-1", labels=gpu_labels(A100, memory=81920, replicas=8), allocatable={"nvidia.com/gpu.shared": "32"}),
    queue("team-a", {A100: 10, H100: 5}), queue("cpu-only"),
    pod("busy-0", namespace="ml", node_name="a100-1", gpus=2, card=A100, queue="team-a"),
]


@dataclass
class Server:
    url: str
    admission: Admission
    cache: ClusterCache
    tls: ReloadableContext
    ca: KeyPair
    session: aiohttp.ClientSession

    async def post(self, path: str, body: bytes | dict[str, Any]) -> tuple[int, dict[str, Any]]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with self.session.post(self.url + path, data=data,
                                     headers={"Content-Type": "application/json"}) as response:
            return response.status, await response.json()

    async def validate(self, review_body: dict[str, Any]) -> dict[str, Any]:
        status, answer = await self.post("/validate", review_body)
        assert status == 200
        assert answer["apiVersion"] == "admission.k8s.io/v1"
        assert answer["kind"] == "AdmissionReview"
        assert answer["response"]["uid"] == review_body["request"]["uid"]
        assert "patch" not in answer["response"]
        return answer["response"]

    async def mutate(self, review_body: dict[str, Any]) -> dict[str, Any]:
        status, answer = await self.post("/mutate", review_body)
        assert status == 200
        assert answer["response"]["uid"] == review_body["request"]["uid"]
        assert answer["response"]["allowed"] is True
        return answer["response"]


def client_context(ca: KeyPair) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca.cert_pem.decode())


def review(obj: dict[str, Any] | None, *, operation: str = "CREATE", old: dict[str, Any] | None = None,
           name: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    subject = obj if obj is not None else old
    assert subject is not None
    group, _, version = subject["apiVersion"].rpartition("/")
    metadata = subject.get("metadata", {})
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": subject["kind"]},
        "resource": {"group": group, "version": version, "resource": subject["kind"].lower() + "s"},
        "operation": operation,
        "name": name if name is not None else metadata.get("name", ""),
        "namespace": namespace if namespace is not None else metadata.get("namespace", ""),
        "object": obj, "oldObject": old, "dryRun": False,
        "userInfo": {"username": "alice"},
    }}


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))
