"""The one module that talks to the Kubernetes API (besides Kopf's own watch machinery).

Blocking ``kubernetes`` client calls run in a worker thread so the event loop (and the admission server on it)
never waits on the API server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config

# (API path prefix, plural, kind, apiVersion) of everything the cache holds.
CACHED_RESOURCES: tuple[tuple[str, str, str, str], ...] = (
    ("/api/v1", "nodes", "Node", "v1"),
    ("/apis/scheduling.volcano.sh/v1beta1", "queues", "Queue", "scheduling.volcano.sh/v1beta1"),
    ("/apis/scheduling.volcano.sh/v1beta1", "podgroups", "PodGroup", "scheduling.volcano.sh/v1beta1"),
    ("/api/v1", "pods", "Pod", "v1"),
)


@dataclass(frozen=True)
class Connection:
    """Where the API server is; ``host`` empty means in-cluster config, else kubeconfig."""

    host: str = ""
    insecure: bool = False
    token: str = ""


def api_client(connection: Connection | None = None) -> client.ApiClient:
    if connection is not None and connection.host:
        configuration = client.Configuration()
        configuration.host = connection.host
        configuration.verify_ssl = not connection.insecure
        if connection.token:
            configuration.api_key = {"authorization": f"Bearer {connection.token}"}
        return client.ApiClient(configuration)
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


class KubeError(RuntimeError):
    """The API server answered with an error, or could not be reached."""


def _get(api: client.ApiClient, path: str) -> Mapping[str, Any]:
    method, url, headers, body, post = api.param_serialize("GET", path, auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers, body=body, post_params=post)
    data = response.read()  # type: ignore[no-untyped-call]
    if not 200 <= response.status < 300:
        raise KubeError(f"GET {path}: HTTP {response.status}: {data[:200]!r}")
    document: Mapping[str, Any] = json.loads(data)
    return document


def list_all(api: client.ApiClient) -> list[Mapping[str, Any]]:
    """A full list of every cached kind, with apiVersion and kind set on each item (lists leave them out)."""
    manifests: list[Mapping[str, Any]] = []
    for prefix, plural, kind, api_version in CACHED_RESOURCES:
        listing = _get(api, f"{prefix}/{plural}")
        for item in listing.get("items") or []:
            manifests.append({"apiVersion": api_version, "kind": kind, **item})
    return manifests


async def list_all_async(api: client.ApiClient) -> list[Mapping[str, Any]]:
    return await asyncio.to_thread(list_all, api)
