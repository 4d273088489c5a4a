"""The one module that talks to the Kubernetes API (besides Kopf's own watch machinery).

Blocking ``kubernetes`` client calls run in a worker thread so the event loop (and the admission server on it)
never waits on the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar
from urllib.parse import quote

import urllib3
from kubernetes import client, config

from cardquota.core.workload_kinds import SERVED_VERSIONS as WORKLOAD_KIND_VERSIONS

T = TypeVar("T")
log = logging.getLogger("cardquota.kube")

# (API path prefix, plural, kind, apiVersion) of everything the cache holds.
CARD_RESOURCES: tuple[tuple[str, str, str, str], ...] = (
    ("/api/v1", "nodes", "Node", "v1"),
    ("/apis/scheduling.volcano.sh/v1beta1", "queues", "Queue", "scheduling.volcano.sh/v1beta1"),
    ("/apis/scheduling.volcano.sh/v1beta1", "podgroups", "PodGroup", "scheduling.volcano.sh/v1beta1"),
    ("/api/v1", "pods", "Pod", "v1"),
)
"""What card accounting needs."""
WORKLOAD_RESOURCES: tuple[tuple[str, str, str, str], ...] = (
    ("/apis/apps/v1", "deployments", "Deployment", "apps/v1"),
    ("/apis/apps/v1", "statefulsets", "StatefulSet", "apps/v1"),
    ("/apis/apps/v1", "replicasets", "ReplicaSet", "apps/v1"),
)
"""The workloads an HorizontalPodAutoscaler can scale (their pod template, for the HPA rule)."""
PRIORITY_CLASS_RESOURCES: tuple[tuple[str, str, str, str], ...] = (
    ("/apis/scheduling.k8s.io/v1", "priorityclasses", "PriorityClass", "scheduling.k8s.io/v1"),
)
"""PriorityClasses, whose value is the priority of a PodGroup naming one (``spec.priorityClassName``), the only
priority a gang has before its pods exist. Optional: a 403 (an install whose RBAC predates them) reads as none, every
job then of the default priority, 0."""
CACHED_RESOURCES = CARD_RESOURCES + PRIORITY_CLASS_RESOURCES + WORKLOAD_RESOURCES
NAMESPACE_RESOURCES: tuple[tuple[str, str, str, str], ...] = (("/api/v1", "namespaces", "Namespace", "v1"),)
"""Namespaces, for their ``scheduling.volcano.sh/queue-name`` annotation, when Volcano maps namespaces to queues
(:attr:`~cardquota.core.policies.config.PolicyConfig.map_namespace_queues`)."""


@dataclass(frozen=True)
class Connection:
    """Where the API server is; ``host`` empty means in-cluster config, else kubeconfig."""

    host: str = ""
    insecure: bool = False
    token: str = ""


class KubeError(RuntimeError):
    """The API server answered with an error, or could not be reached. Raised from here as the subclass the HTTP
    status names (:func:`api_error`); callers catch the class, never compare statuses. ``status`` stays for
    messages and metrics (-1: no answer came)."""

    def __init__(self, message: str, status: int = 0, *, retry_after: float | None = None,
                 answer: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        """Seconds the API server asked to wait before trying again (its ``Retry-After`` header on a 429 or a 5xx
        answer: :func:`retry_after_seconds`); None when it named none."""
        self.answer: Mapping[str, Any] = answer or {}
        """The Status the API server answered with (its ``message``, ``reason``, ``details``); empty when it sent
        none."""


class NotConfigured(KubeError):
    """No usable Kubernetes configuration (not in a cluster, no usable kubeconfig)."""


class Unreachable(KubeError):
    """No (whole) answer came: connection refused, reset or timed out, a watch stream that broke."""


class Unauthorized(KubeError):
    """401: the credentials were not accepted."""


class Forbidden(KubeError):
    """403: RBAC does not allow it (the message names the verb and resource)."""


class NotFound(KubeError):
    """404: no such object, or the API server does not serve that resource."""


class NotServed(NotFound):
    """404 for a whole resource: the API server does not serve it (its CRD is not installed)."""


class Conflict(KubeError):
    """409: written since it was read (a resourceVersion precondition), or created already."""


class Gone(KubeError):
    """410: a continue token or resourceVersion older than the API server's history: list again."""


class Invalid(KubeError):
    """422: the request was refused as invalid (a JSON patch whose ``test`` failed included)."""


class Throttled(KubeError):
    """429: too many requests (API priority and fairness)."""


class ServerError(KubeError):
    """5xx: the API server (or what stands in front of it) failed."""


_ERRORS: dict[int, type[KubeError]] = {401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone,
                                       422: Invalid, 429: Throttled}


def api_error(message: str, status: int, *, retry_after: float | None = None,
              answer: Mapping[str, Any] | None = None) -> KubeError:
    """The KubeError for an HTTP status (-1 for no answer)."""
    if status == UNREACHABLE:
        return Unreachable(message, status)
    kind = _ERRORS.get(status) or (ServerError if status >= 500 else KubeError)
    return kind(message, status, retry_after=retry_after, answer=answer)


def retry_after_seconds(status: int, header: str | None) -> float | None:
    """The wait a ``Retry-After`` header asks for, as client-go reads it (k8s.io/client-go v0.36.3,
    rest/with_retry.go ``checkWait``: only on a 429 or a 5xx; rest/request.go ``retryAfterSeconds``: a whole number
    of seconds, anything else ignored). The API server's max-in-flight and priority-and-fairness filters set it on
    every 429 they send (k8s.io/apiserver, pkg/server/filters, ``tooManyRequests``)."""
    if header is None or not (status == 429 or status >= 500):
        return None
    text = header.strip()
    return float(text) if text.isdigit() else None


class _NoRetryChatter(logging.Filter):
    """Drops urllib3's "Retrying (Retry(total=…)) after connection broken by …" lines: an unreachable API server
    would print about twenty of them before the one line that says so (:class:`KubeError`, which names the host and
    the reason). Its other messages pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Retrying ")


_URLLIB3_POOL_LOG = logging.getLogger("urllib3.connectionpool")


def _quiet_retries() -> None:
    if not any(isinstance(existing, _NoRetryChatter) for existing in _URLLIB3_POOL_LOG.filters):
        _URLLIB3_POOL_LOG.addFilter(_NoRetryChatter())


def api_client(connection: Connection | None = None, *, kubeconfig: str | None = None,
               context: str | None = None) -> client.ApiClient:
    """A client for ``connection``; else the kubeconfig (``kubeconfig``/``context`` when given, then the usual
    places) or, without one, the in-cluster service account. urllib3's retry warnings are silenced (its retries
    stay; a failure still becomes one :class:`KubeError`)."""
    _quiet_retries()
    if kubeconfig or context:
        configuration = client.Configuration()
        try:
            config.load_kube_config(config_file=kubeconfig, context=context,  # type: ignore[no-untyped-call]
                                    client_configuration=configuration)
        except Exception as error:  # a missing file, broken YAML, bad certificate data: all one line for the user
            raise NotConfigured(f"cannot use the kubeconfig{f' {kubeconfig}' if kubeconfig else ''}"
                            f"{f' (context {context})' if context else ''}: {error}") from None
        return _client(configuration)
    if connection is not None and connection.host:
        configuration = client.Configuration()
        configuration.host = connection.host
        configuration.verify_ssl = not connection.insecure
        if connection.token:
            configuration.api_key = {"authorization": f"Bearer {connection.token}"}
        return _client(configuration)
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError) as error:
            raise NotConfigured(f"no Kubernetes configuration (not in a cluster, no usable kubeconfig): {error}"
                                ) from None
    return _client(client.Configuration.get_default_copy())


def _client(configuration: client.Configuration) -> client.ApiClient:
    """A client whose connection pool retries what never reached an answer (urllib3's default: three times) but
    not a 429 or 503 answer: urllib3 would otherwise follow their ``Retry-After`` itself, unbounded and unseen,
    before :func:`with_retries` (which follows it within :data:`RETRY_AFTER_MAX_SECONDS`, and logs) saw them."""
    configuration.retries = urllib3.Retry(3, respect_retry_after_header=False)
    return client.ApiClient(configuration)


Timeout = tuple[float, float]
"""(connect, read) seconds for one request."""


def _request(api: client.ApiClient, method: str, path: str, body: object = None,
             content_type: str = "application/json", timeout: Timeout | None = None) -> Mapping[str, Any]:
    data = _send(api, method, path, body, content_type, timeout)
    document: Mapping[str, Any] = json.loads(data) if data else {}
    return document


def _send(api: client.ApiClient, method: str, path: str, body: object = None,
          content_type: str = "application/json", timeout: Timeout | None = None) -> bytes:
    """The body of the API server's answer (KubeError unless it is a 2xx); ``timeout`` bounds the connection and
    the wait for the answer (none by default)."""
    headers = {"Content-Type": content_type} if body is not None else None
    method, url, header_params, serialized, post = api.param_serialize(
        method, path, header_params=headers, body=body, auth_settings=["BearerToken"])
    try:
        response = api.call_api(method, url, header_params=header_params, body=serialized, post_params=post,
                                _request_timeout=timeout)
        data = response.read()  # type: ignore[no-untyped-call]
    except urllib3.exceptions.HTTPError as error:  # refused, reset, timed out — before or during the answer
        reason = getattr(error, "reason", None) or error
        raise Unreachable(f"no Kubernetes API reachable at {api.configuration.host}: {reason}", UNREACHABLE) from None
    if not 200 <= response.status < 300:
        raise api_error(f"{method} {path}: HTTP {response.status}: {_status_message(data)}", response.status,
                        retry_after=_retry_after(response), answer=_status(data))
    return bytes(data)


def _retry_after(response: Any) -> float | None:
    """The ``Retry-After`` of an answer of the client (:func:`retry_after_seconds`)."""
    return retry_after_seconds(response.status, response.getheader("Retry-After"))


def _status(data: bytes) -> Mapping[str, Any]:
    """The API server's Status from an answer's body; empty when the body is none."""
    try:
        status = json.loads(data)
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def _status_message(data: bytes) -> str:
    """The API server's own sentence from a Status body (it names the verb and resource a 403 is about)."""
    message = _status(data).get("message")
    return message if isinstance(message, str) else repr(data[:200])


NAMESPACED_PATHS: dict[str, tuple[str, str, str, str]] = {
    # kind (as typed on the command line) -> (API path prefix, plural, kind, apiVersion)
    "pod": ("/api/v1", "pods", "Pod", "v1"),
    "podgroup": ("/apis/scheduling.volcano.sh/v1beta1", "podgroups", "PodGroup", "scheduling.volcano.sh/v1beta1"),
    "job": ("/apis/batch.volcano.sh/v1alpha1", "jobs", "Job", "batch.volcano.sh/v1alpha1"),
    "configmap": ("/api/v1", "configmaps", "ConfigMap", "v1"),
    "deployment": ("/apis/apps/v1", "deployments", "Deployment", "apps/v1"),
    **{kind.lower(): (f"/apis/{group}/{versions[-1]}", f"{kind.lower()}s", kind, f"{group}/{versions[-1]}")
       for (group, kind), versions in WORKLOAD_KIND_VERSIONS.items()},
    "trainjob": ("/apis/trainer.kubeflow.org/v1alpha1", "trainjobs", "TrainJob", "trainer.kubeflow.org/v1alpha1"),
    "trainingruntime": ("/apis/trainer.kubeflow.org/v1alpha1", "trainingruntimes", "TrainingRuntime",
                        "trainer.kubeflow.org/v1alpha1"),
}
"""Each registered workload kind (:data:`cardquota.core.workload_kinds.SERVED_VERSIONS`) is read through the last
version its CRD serves (MPIJob: ``v2beta1``, mpi-operator's; the training operator's ``v1`` is
:data:`OTHER_VERSIONS`); plurals are the kind in lower case with an ``s``, as their CRDs name them."""
WORKLOAD_KIND_WORDS = frozenset({*(kind.lower() for _, kind in WORKLOAD_KIND_VERSIONS), "trainjob", "trainingruntime"})
"""The kinds of other operators, whose CRDs may not be installed (a 404 then says so: :class:`NotServed`)."""
OTHER_VERSIONS: dict[str, tuple[str, str, str, str]] = {
    "mpijob": ("/apis/kubeflow.org/v1", "mpijobs", "MPIJob", "kubeflow.org/v1"),
}
"""Where a kind is read when its first version is not served (the two MPIJob CRDs never are together)."""


def resource_served(api: client.ApiClient, prefix: str, plural: str) -> bool:
    """Whether the API server serves ``plural`` in the group version at ``prefix`` (its discovery document)."""
    try:
        discovery = _get(api, prefix)
    except NotFound:
        return False
    resources = discovery.get("resources")
    return any(isinstance(entry, Mapping) and entry.get("name") == plural
               for entry in (resources if isinstance(resources, list) else []))


def _paths_of(api: client.ApiClient, kind: str) -> tuple[str, str, str, str]:
    """Where ``kind`` is read: its path, or its other version's when only that one is served; NotServed when
    neither is (the CRD is not installed: a 404 for every object of it)."""
    choices = [NAMESPACED_PATHS[kind], *([OTHER_VERSIONS[kind]] if kind in OTHER_VERSIONS else [])]
    for choice in choices:
        if resource_served(api, choice[0], choice[1]):
            return choice
    names = " or ".join(choice[3] for choice in choices)
    raise NotServed(f"the API server does not serve {choices[0][2]} ({names}): its CRD is not installed", 404)


def read_namespaced(api: client.ApiClient, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
    """One object (``kind`` a key of :data:`NAMESPACED_PATHS`), with apiVersion and kind; None when not found;
    NotServed when the API server does not serve its kind (a CRD not installed)."""
    prefix, plural, kind_name, api_version = NAMESPACED_PATHS[kind]
    try:
        found = _get(api, f"{prefix}/namespaces/{namespace}/{plural}/{name}")
    except NotFound:
        if kind not in WORKLOAD_KIND_WORDS:
            return None
        prefix, plural, kind_name, api_version = _paths_of(api, kind)  # (NotServed when neither is served)
        if (prefix, plural) == NAMESPACED_PATHS[kind][:2]:
            return None
        try:
            found = _get(api, f"{prefix}/namespaces/{namespace}/{plural}/{name}")
        except NotFound:
            return None
    return {"apiVersion": api_version, "kind": kind_name, **found}


def list_namespaced_kind(api: client.ApiClient, kind: str) -> list[Mapping[str, Any]]:
    """Every object of ``kind`` (a key of :data:`NAMESPACED_PATHS`) in all namespaces, with apiVersion and kind;
    NotServed when the API server does not serve its kind (a CRD not installed)."""
    prefix, plural, kind_name, api_version = NAMESPACED_PATHS[kind]
    try:
        listing = _get(api, f"{prefix}/{plural}")
    except NotFound:
        if kind not in WORKLOAD_KIND_WORDS:
            raise
        prefix, plural, kind_name, api_version = _paths_of(api, kind)
        listing = _get(api, f"{prefix}/{plural}")
    return [{"apiVersion": api_version, "kind": kind_name, **item} for item in listing.get("items") or []]


def _get(api: client.ApiClient, path: str) -> Mapping[str, Any]:
    return _request(api, "GET", path)


def read_secret(api: client.ApiClient, namespace: str, name: str) -> Mapping[str, Any] | None:
    try:
        return _get(api, f"/api/v1/namespaces/{namespace}/secrets/{name}")
    except NotFound:
        return None


def write_secret(api: client.ApiClient, secret: Mapping[str, Any], *, create: bool) -> Mapping[str, Any]:
    """Create the Secret, or update it with a merge patch that carries the resourceVersion read (a precondition:
    a concurrent writer makes this fail with a conflict instead of being overwritten)."""
    metadata = secret["metadata"]
    base = f"/api/v1/namespaces/{metadata['namespace']}/secrets"
    if create:
        return _request(api, "POST", base, secret)
    return _request(api, "PATCH", f"{base}/{metadata['name']}", secret, "application/merge-patch+json")


class BundlePatch(Enum):
    """What :func:`patch_ca_bundle` found and did."""

    MISSING = "missing"
    """No such configuration (the manifests are not installed yet): nothing to set."""
    IN_PLACE = "in place"
    """Every webhook already carried the caBundle: nothing written."""
    WRITTEN = "written"
    """At least one webhook's caBundle was set."""


BUNDLE_PATCH_STALE: tuple[type[KubeError], ...] = (Conflict, Invalid, ServerError)
"""Answers to a caBundle patch that mean "the configuration changed after it was read: read it again". 422 is the
API server's answer to a JSON patch whose ``test`` fails (and to an index past the end: a webhook removed meanwhile);
409 a conflicting write; older API servers, and kmock, answer a failed ``test`` with 500. Retrying a genuine 500 from
a fresh read does no harm either: each attempt is computed anew."""
BUNDLE_PATCH_ATTEMPTS = 5


def ca_bundle_patch(configuration: Mapping[str, Any], ca_bundle: str) -> list[dict[str, Any]]:
    """The JSON patch setting ``clientConfig.caBundle`` on each webhook of ``configuration`` that does not carry
    ``ca_bundle``: every ``add`` preceded by a ``test`` that the webhook at that index still has the name read, so the
    API server refuses the whole patch (nothing half-applied) if the webhooks were reordered, renamed, added or removed
    in between (a concurrent ``kubectl apply``)."""
    operations: list[dict[str, Any]] = []
    for index, webhook in enumerate(configuration.get("webhooks") or []):
        if (webhook.get("clientConfig") or {}).get("caBundle") != ca_bundle:
            operations += [{"op": "test", "path": f"/webhooks/{index}/name", "value": webhook.get("name")},
                           {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": ca_bundle}]
    return operations


def patch_ca_bundle(api: client.ApiClient, kind: str, name: str, ca_bundle: str, *,
                    attempts: int = BUNDLE_PATCH_ATTEMPTS) -> BundlePatch:
    """Set ``clientConfig.caBundle`` of every webhook of a Validating/MutatingWebhookConfiguration that does not
    carry it yet (no write when all do). The patch tests each webhook's name (:func:`ca_bundle_patch`); when the
    configuration changed between the read and the patch, the API server refuses it, and it is read and computed
    again, up to ``attempts`` times.

    Why a guarded JSON patch rather than server-side apply with a field manager owning only caBundle: apply upserts
    by the webhooks' list key, so an apply naming a webhook that a concurrent ``kubectl apply`` just removed or
    renamed would bring it back as an entry holding nothing but a caBundle (refused by validation at best); the
    ``test`` makes a stale patch fail as a whole, and the next read sees the webhooks as they now are. It also needs
    nothing kmock (the test API server) does not implement, and no RBAC beyond ``patch``."""
    path = f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/{name}"
    for attempt in range(1, attempts + 1):
        try:
            configuration = with_retries(functools.partial(_get, api, path))
        except NotFound:
            return BundlePatch.MISSING
        operations = ca_bundle_patch(configuration, ca_bundle)
        if not operations:
            return BundlePatch.IN_PLACE
        try:
            _request(api, "PATCH", path, operations, "application/json-patch+json")
        except NotFound:
            return BundlePatch.MISSING
        except BUNDLE_PATCH_STALE as error:
            if attempt == attempts:
                raise
            log.info("%s %s changed while its caBundle was being set (%s): reading it again", kind, name, error)
            continue
        return BundlePatch.WRITTEN
    raise KubeError(f"{kind} {name}: the caBundle could not be set in {attempts} attempts")


def list_all(api: client.ApiClient, resources: Sequence[tuple[str, str, str, str]] = CACHED_RESOURCES,
             *, optional: Sequence[tuple[str, str, str, str]] = ()) -> list[Mapping[str, Any]]:
    """A full list of every cached kind, with apiVersion and kind set on each item (lists leave them out).

    ``optional`` resources a 403 leaves out (with a warning) instead of failing. Server errors, throttling and lost
    connections are retried with backoff. A Volcano kind the API server does
    not serve (the CRDs are not installed yet) lists as empty, with a warning: the webhooks and the node controller
    keep working meanwhile.
    """
    manifests: list[Mapping[str, Any]] = []
    for resource in (*resources, *optional):
        prefix, plural, kind, api_version = resource
        try:
            listing = with_retries(functools.partial(_get, api, f"{prefix}/{plural}"))
        except Forbidden as error:
            if resource not in optional:
                raise
            log.warning("%s %s cannot be listed (%s): left out", api_version, plural, error)
            continue
        except NotFound:
            if not prefix.startswith("/apis/scheduling.volcano.sh"):
                raise
            log.warning("%s %s are not served by the API server (are the Volcano CRDs installed?): counted as none "
                        "until the operator restarts", api_version, plural)
            continue
        for item in listing.get("items") or []:
            manifests.append({"apiVersion": api_version, "kind": kind, **item})
    return manifests


DRA_GROUP = "resource.k8s.io"
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")
"""The DRA API versions ResourceClaims are read through, preferred first: v1 is GA and served by default from
Kubernetes 1.34 on (v1beta1 and v1beta2 only when enabled there), v1beta1 is what 1.32 serves."""


def dra_resources(version: str) -> tuple[tuple[str, str, str, str], ...]:
    """ResourceClaims and ResourceClaimTemplates read through ``version`` of ``resource.k8s.io`` (as
    :data:`CARD_RESOURCES` lists kinds)."""
    return tuple((f"/apis/{DRA_GROUP}/{version}", plural, kind, f"{DRA_GROUP}/{version}")
                 for plural, kind in (("resourceclaims", "ResourceClaim"),
                                      ("resourceclaimtemplates", "ResourceClaimTemplate")))


def preferred_dra_version(served: Iterable[str]) -> str | None:
    """The first of :data:`DRA_VERSIONS` among the versions ``served``; None when none is."""
    offered = set(served)
    return next((version for version in DRA_VERSIONS if version in offered), None)


def served_dra_version(api: client.ApiClient) -> str | None:
    """The ``resource.k8s.io`` version to read claims through, from the API group's discovery document
    (``GET /apis/resource.k8s.io``, an APIGroup listing ``versions[].version``); None when the group is not served
    (404) or serves none of :data:`DRA_VERSIONS`."""
    try:
        group = with_retries(functools.partial(_get, api, f"/apis/{DRA_GROUP}"))
    except NotFound:
        return None
    versions = group.get("versions")
    entries = versions if isinstance(versions, list) else []
    return preferred_dra_version(str(entry.get("version")) for entry in entries if isinstance(entry, Mapping))


async def list_all_async(api: client.ApiClient, resources: Sequence[tuple[str, str, str, str]] = CACHED_RESOURCES,
                         ) -> list[Mapping[str, Any]]:
    return await asyncio.to_thread(list_all, api, resources)


UNREACHABLE = -1
"""The status of a KubeError raised because no (whole) answer came: connection refused, reset, timed out."""
RETRYABLE: tuple[type[KubeError], ...] = (Unreachable, Conflict, Gone, Throttled, ServerError)
RETRY_DELAYS = (0.1, 0.2, 0.4, 0.8, 1.6)
RETRY_AFTER_MAX_SECONDS = 30.0
"""The longest wait a ``Retry-After`` header is followed for. client-go follows the header as sent (it waits the
longer of it and its own backoff: k8s.io/client-go v0.36.3, rest/with_retry.go ``withRetry.Before``) with no bound;
here one request never waits longer than this, as a wait of minutes inside one request would leave the cache behind
without a word: once the retries are spent, the caller's own backoff, which reports the failure, takes over."""


def retryable_but(kind: type[KubeError]) -> tuple[type[KubeError], ...]:
    return tuple(retryable for retryable in RETRYABLE if retryable is not kind)


def retry_wait(backoff: float, error: BaseException) -> float:
    """How long to wait before trying again: ``backoff``, or what the API server asked for in ``Retry-After``
    when that is longer (bounded by :data:`RETRY_AFTER_MAX_SECONDS`), as client-go waits the longer of the two."""
    asked = error.retry_after if isinstance(error, KubeError) else None
    return backoff if asked is None else max(backoff, min(asked, RETRY_AFTER_MAX_SECONDS))


def with_retries(action: Callable[[], T], *, delays: Sequence[float] = RETRY_DELAYS,
                 sleep: Callable[[float], None] | None = None,
                 retryable: tuple[type[KubeError], ...] = RETRYABLE) -> T:
    """Run ``action``, retrying with backoff on conflicts, throttling, server errors and lost connections; a
    ``Retry-After`` the API server sends is waited for (:func:`retry_wait`)."""
    for delay in delays:
        try:
            return action()
        except retryable as error:
            wait = retry_wait(delay, error)
        except (OSError, urllib3.exceptions.HTTPError):
            wait = delay
        (sleep or time.sleep)(wait)  # (looked up now: a test replaces time.sleep to see the waits)
    return action()


def queue_path(name: str) -> str:
    return f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}"


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{name}"


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def patch_annotations(api: client.ApiClient, path: str, changes: Mapping[str, str | None]) -> bool:
    """Merge-patch annotations only (null removes one), with retries; False when the object is gone (a deletion
    mid-flight is not an error)."""
    body = {"metadata": {"annotations": dict(changes)}}
    try:
        with_retries(lambda: _request(api, "PATCH", path, body, "application/merge-patch+json"))
    except NotFound:
        return False
    return True


def create_event(api: client.ApiClient, namespace: str, event: Mapping[str, Any]) -> None:
    """Create an event (a 409 means it exists already: creating is not retried on conflicts)."""
    with_retries(lambda: _request(api, "POST", f"/api/v1/namespaces/{namespace}/events", event),
                 retryable=retryable_but(Conflict))


def lease_path(namespace: str, name: str = "") -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return f"{base}/{name}" if name else base


def read_lease(api: client.ApiClient, namespace: str, name: str,
               timeout: Timeout | None = None) -> Mapping[str, Any] | None:
    try:
        return _request(api, "GET", lease_path(namespace, name), timeout=timeout)
    except NotFound:
        return None


def create_lease(api: client.ApiClient, namespace: str, lease: Mapping[str, Any],
                 timeout: Timeout | None = None) -> Mapping[str, Any]:
    return _request(api, "POST", lease_path(namespace), lease, timeout=timeout)


def update_lease(api: client.ApiClient, namespace: str, name: str, spec: Mapping[str, Any],
                 resource_version: str | None, timeout: Timeout | None = None) -> Mapping[str, Any]:
    """Merge-patch a Lease's spec; with ``resource_version`` a precondition, so a competing holder loses."""
    body: dict[str, Any] = {"spec": dict(spec)}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return _request(api, "PATCH", lease_path(namespace, name), body, "application/merge-patch+json", timeout)


FIELD_MANAGER = "cardquota"
"""Named in the managedFields of what cardquota writes to objects it does not own (the CRD additions)."""


def crd_path(name: str) -> str:
    return f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"


def read_crd(api: client.ApiClient, name: str) -> Mapping[str, Any] | None:
    """One CustomResourceDefinition; None when it is not installed."""
    return read_object(api, crd_path(name))


def patch_crd(api: client.ApiClient, name: str, operations: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """Apply a JSON patch to a CRD (not retried: its ``test`` operations make a stale patch fail, and the caller
    reads the CRD again and computes a new one)."""
    return _request(api, "PATCH", f"{crd_path(name)}?fieldManager={FIELD_MANAGER}", list(operations),
                    "application/json-patch+json")


def patch_pod(api: client.ApiClient, namespace: str, name: str, operations: Sequence[Mapping[str, Any]],
              timeout: Timeout | None = None, server_timeout: int | None = None) -> None:
    """Apply a JSON patch to a pod, once: not retried, as a retry after a lost answer would fail the patch's
    ``test`` operations although the first attempt applied; the caller reads the pod back instead. ``timeout``:
    the client's (connect, read) seconds; ``server_timeout``: seconds after which the API server ends the request
    (its ``timeout`` parameter)."""
    deadline = f"&timeout={server_timeout}s" if server_timeout is not None else ""
    _send(api, "PATCH", f"{pod_path(namespace, name)}?fieldManager={FIELD_MANAGER}{deadline}", list(operations),
          "application/json-patch+json", timeout)


class EvictionOutcome(Enum):
    EVICTED = "evicted"
    """The API server deleted the pod (with ``dry_run``: it would have)."""
    GONE = "gone"
    """No pod of that name: nothing left to evict."""
    REFUSED_BY_BUDGET = "refused by budget"
    """A PodDisruptionBudget does not allow it now (or several select the pod, which the API server refuses); the
    pod stays. Not retried here: the caller chooses again or waits."""
    CONFLICT = "conflict"
    """The pod under that name is not the one named by ``uid`` (recreated since): it was not evicted."""


@dataclass(frozen=True)
class EvictionAnswer:
    """What became of one eviction request (:func:`evict_pod`)."""

    outcome: EvictionOutcome
    message: str = ""
    """The API server's sentence for a refusal or a conflict, with the budget's own (its Status cause) when it
    named one; "" for :attr:`EvictionOutcome.EVICTED`."""
    retry_after: float | None = None
    """For a refusal: the seconds the API server suggested waiting (10 while a budget's status is behind its spec,
    none when the budget allows no disruption now)."""


EVICTION_API_VERSION = "policy/v1"
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
"""The Status cause of a refusal by a PodDisruptionBudget (k8s.io/api v0.33.0, policy/v1/types.go
``DisruptionBudgetCause``)."""
SEVERAL_BUDGETS = "more than one PodDisruptionBudget"
"""In the 500 the API server answers when several budgets select the pod (k8s.io/kubernetes v1.33,
pkg/registry/core/pod/storage/eviction.go ``EvictionREST.Create``: a Status with no reason, so only its message
tells it)."""


def eviction_body(namespace: str, name: str, uid: str | None, *, dry_run: bool = False) -> dict[str, Any]:
    """The ``policy/v1`` Eviction of pod ``namespace/name``: only the pod with ``uid`` (when given: a precondition
    of the deletion, so a pod recreated under the name is left alone), and nothing deleted with ``dry_run``."""
    options: dict[str, Any] = {}
    if uid:
        options["preconditions"] = {"uid": uid}
    if dry_run:
        options["dryRun"] = ["All"]
    body: dict[str, Any] = {"apiVersion": EVICTION_API_VERSION, "kind": "Eviction",
                            "metadata": {"name": name, "namespace": namespace}}
    if options:
        body["deleteOptions"] = options
    return body


def eviction_refusal(error: KubeError) -> EvictionAnswer | None:
    """What an error answer to an eviction means, as the API server gives them (k8s.io/kubernetes v1.33,
    pkg/registry/core/pod/storage/eviction.go ``EvictionREST.Create`` and ``checkAndDecrement``): 404, no such pod;
    409, the ``uid`` precondition failed (the store's Conflict); 429 with a ``DisruptionBudget`` cause, the budget
    allows no disruption now or its status is behind its spec; 403 about a ``poddisruptionbudget`` of group
    ``policy``, a budget whose status is broken (negative disruptions allowed, too many evictions unconfirmed); 500
    naming several budgets. None for anything else (a 429 of API priority and fairness, an RBAC 403, a lost
    answer): the caller's error to raise."""
    answer = error.answer
    said, details = answer.get("message"), answer.get("details")
    message = said if isinstance(said, str) else str(error)
    details = details if isinstance(details, dict) else {}
    causes = [cause for cause in details.get("causes") or [] if isinstance(cause, dict)]
    if isinstance(error, NotFound):
        return EvictionAnswer(EvictionOutcome.GONE, message)
    if isinstance(error, Conflict):
        return EvictionAnswer(EvictionOutcome.CONFLICT, message)
    budget = any(cause.get("reason") == DISRUPTION_BUDGET_CAUSE for cause in causes)
    if (isinstance(error, Throttled) and budget) \
            or (isinstance(error, Forbidden) and details.get("group") == "policy"
                and details.get("kind") == "poddisruptionbudget") \
            or (isinstance(error, ServerError) and error.status == 500 and SEVERAL_BUDGETS in message):
        why = [cause["message"] for cause in causes if isinstance(cause.get("message"), str)]
        return EvictionAnswer(EvictionOutcome.REFUSED_BY_BUDGET, " ".join([message, *why]), error.retry_after)
    return None


def evict_pod(api: client.ApiClient, namespace: str, name: str, uid: str | None, *, dry_run: bool = False,
              timeout: Timeout | None = None, server_timeout: int | None = None) -> EvictionAnswer:
    """Ask the API server to evict a pod (POST ``policy/v1`` Eviction to its ``eviction`` subresource), so that
    PodDisruptionBudgets hold; once, and never retried here: a refusal is an answer
    (:attr:`EvictionOutcome.REFUSED_BY_BUDGET`, returned at once even when the API server names a ``Retry-After``),
    and the connection pool retries a POST only when it was never sent (:func:`_client`). A pod still Pending (e.g.
    just past the gate), Succeeded, Failed or already terminating is deleted without a budget check (upstream
    ``canIgnorePDB``); for such a pod a failed ``uid`` precondition is retried by the API server for up to ~10 s
    (``EvictionsRetry``) before its 409, so a short ``timeout`` may end first (:class:`Unreachable`: read the pod
    back). ``timeout``: the client's (connect, read) seconds; ``server_timeout``: seconds after which the API
    server ends the request (its ``timeout`` parameter). Raises :class:`KubeError` for any other answer."""
    deadline = f"?timeout={server_timeout}s" if server_timeout is not None else ""
    try:
        _send(api, "POST", f"{pod_path(namespace, name)}/eviction{deadline}",
              eviction_body(namespace, name, uid, dry_run=dry_run), timeout=timeout)
    except KubeError as error:
        refusal = eviction_refusal(error)
        if refusal is None:
            raise
        return refusal
    return EvictionAnswer(EvictionOutcome.EVICTED)


def budgets_path(namespace: str) -> str:
    """The PodDisruptionBudgets of a namespace (``policy/v1``)."""
    return f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"


def read_object(api: client.ApiClient, path: str) -> Mapping[str, Any] | None:
    """GET the one object at ``path`` (e.g. ``/api/v1/namespaces/ns/secrets/name``), with retries; None when it does
    not exist."""
    try:
        return with_retries(lambda: _get(api, path))
    except NotFound:
        return None


def list_objects(api: client.ApiClient, path: str, api_version: str, kind: str, *,
                 label_selector: str = "") -> list[Mapping[str, Any]]:
    """Every object the list at ``path`` returns (``label_selector`` narrows it on the server), with apiVersion and
    kind set on each (lists leave them out), with retries."""
    query = f"?labelSelector={quote(label_selector, safe='=,/')}" if label_selector else ""
    listing = with_retries(lambda: _get(api, path + query))
    return [{"apiVersion": api_version, "kind": kind, **item} for item in listing.get("items") or []
            if isinstance(item, Mapping)]


# ------------------------------------------------------------------------------------------ list and watch

LIST_PAGE_SIZE = 100
"""Objects per page of a paginated list. client-go's reflector lists 500 at a time, in protobuf; here a page is JSON,
parsed by one ``json.loads`` that holds the GIL throughout (~38 ms for 500 realistic pods, 3.8 MB), during which the
admission event loop cannot run. 100 a page keeps that under ~8 ms, for five times the list requests at start-up
(1,000 at 100k pods; ``bench/scale.py --page-size``)."""
WATCH_SECONDS = 290
"""How long the API server keeps one watch request open (``timeoutSeconds``); the caller then watches again from
the last resourceVersion it saw."""


@dataclass(frozen=True)
class ListPage:
    """One page of a paginated list: its objects (apiVersion and kind set), and the list's resourceVersion."""

    items: Sequence[Mapping[str, Any]]
    resource_version: str
    last: bool
    restart: bool = False
    """The list starts here, from a snapshot of its own: what earlier pages of the same listing held is of an older
    snapshot (the first page of a list, or the first of the unpaginated list an expired continue token falls back
    to), and whoever gathers the list forgets it."""


@dataclass
class ListProgress:
    """Where a paginated list stands, kept by the caller across failures: a page whose retries are spent raises,
    and :func:`list_pages` called again with the same progress asks for that page again (same continue token)
    rather than listing from the first page."""

    token: str = ""
    """The continue token of the next page ("" for the first)."""
    unpaginated: bool = False
    """The continue token expired: the list is one unpaginated request."""


def list_pages(api: client.ApiClient, path: str, api_version: str, kind: str, progress: ListProgress | None = None,
               *, limit: int = LIST_PAGE_SIZE) -> Iterator[ListPage]:
    """The list at ``path`` in pages of ``limit`` objects (``limit``/``continue``), so that a large cluster is never
    held in one response; each page retried with backoff and ``Retry-After`` (:func:`with_retries`), and, once its
    retries are spent, asked for again from ``progress`` by the caller's next call. A server that ignores ``limit``
    answers in one page.

    A continue token the API server no longer honours (410 ``Expired``: a paginated list that took longer than
    etcd's compaction interval, five minutes by default) falls back to one unpaginated list from the current state,
    as client-go's pager does (k8s.io/client-go v0.36.3, tools/pager/pager.go, ``ListPager.List`` with
    ``FullListIfExpired``, at the list's requested resourceVersion: none here, the most recent). Listing again from
    the first page could expire again, and never end, when pages come slowly; the fallback is one request. Its
    objects come in pages of ``limit`` too, the first marked :attr:`ListPage.restart`. The alternative the API
    server offers, continuing with the token a 410 carries, reads the rest from a newer snapshot than the first
    pages: objects created or deleted meanwhile before the token's key would be missed, so a cache could not be
    complete at any one resourceVersion to watch from."""
    progress = progress if progress is not None else ListProgress()
    while not progress.unpaginated:
        query = f"?limit={limit}" + (f"&continue={quote(progress.token, safe='')}" if progress.token else "")
        try:
            listing = with_retries(functools.partial(_get, api, path + query), retryable=retryable_but(Gone))
        except Gone as error:
            if not progress.token:
                raise
            log.info("%s: the continue token expired mid-list (%s): listing the rest in one unpaginated request",
                     path, error)
            progress.unpaginated, progress.token = True, ""
            break
        metadata = listing.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        token = str(metadata.get("continue") or "")
        items = [{"apiVersion": api_version, "kind": kind, **item} for item in listing.get("items") or []
                 if isinstance(item, Mapping)]
        restart = not progress.token
        del listing
        yield ListPage(items, str(metadata.get("resourceVersion") or ""), not token, restart)
        progress.token = token  # (only once the page is taken: a page that fails is asked for again)
        if not token:
            return
    text = with_retries(functools.partial(_get_text, api, path))
    first = True
    for part, resource_version, last in _list_parts(text, limit):
        yield ListPage([{"apiVersion": api_version, "kind": kind, **item} for item in part], resource_version,
                       last, first)
        first = False
    progress.unpaginated, progress.token = False, ""


def _get_text(api: client.ApiClient, path: str) -> str:
    return _send(api, "GET", path).decode()


_JSON = json.JSONDecoder()
_BLANKS = re.compile(r"[ \t\n\r]*")


def _list_parts(text: str, limit: int) -> Iterator[tuple[list[Mapping[str, Any]], str, bool]]:
    """The items of a whole list (a JSON object with ``items`` and ``metadata``) ``limit`` at a time, each part with
    the list's resourceVersion (known once ``metadata`` is read: the API server writes it before ``items``) and
    whether it is the last. Decoded one item at a time rather than in one ``json.loads``: at 100k pods a whole list
    is hundreds of MB of JSON, which one call would decode for seconds without letting another thread (the event
    loop, with the admission server) run. Raises Unreachable for what is not a JSON object."""
    try:
        yield from _list_parts_of(text, limit)
    except (ValueError, IndexError) as error:
        raise Unreachable(f"not a JSON list: {error}", UNREACHABLE) from None


def _list_parts_of(text: str, limit: int) -> Iterator[tuple[list[Mapping[str, Any]], str, bool]]:
    def skip(position: int, separator: str = "") -> int:
        """Past blanks, then past ``separator`` (and the blanks after it) when it comes next."""
        position = _BLANKS.match(text, position).end()  # type: ignore[union-attr]
        if separator and text.startswith(separator, position):
            position = _BLANKS.match(text, position + 1).end()  # type: ignore[union-attr]
        return position

    position = skip(0)
    if not text.startswith("{", position):
        raise ValueError(f"no object: {text[:200]!r}")
    resource_version = ""
    part: list[Mapping[str, Any]] = []
    position = skip(position + 1)
    while not text.startswith("}", position):
        key, position = _JSON.raw_decode(text, position)
        position = skip(position)
        if not text.startswith(":", position):
            raise ValueError(f"no ':' at {position}")
        position = skip(position + 1)
        if key == "items" and text.startswith("[", position):
            position = skip(position + 1)
            while not text.startswith("]", position):
                item, position = _JSON.raw_decode(text, position)
                if isinstance(item, Mapping):
                    part.append(item)
                if len(part) >= limit:
                    yield part, resource_version, False
                    part = []
                position = skip(position, ",")
            position += 1
        else:
            value, position = _JSON.raw_decode(text, position)
            if key == "metadata" and isinstance(value, Mapping):
                resource_version = str(value.get("resourceVersion") or "")
        position = skip(position, ",")
    yield part, resource_version, True


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch stream: ADDED, MODIFIED, DELETED or BOOKMARK, and the object (apiVersion and kind
    set)."""

    type: str
    object: Mapping[str, Any]

    @property
    def resource_version(self) -> str:
        metadata = self.object.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
        return version if isinstance(version, str) else ""


class WatchStream:
    """One watch request (``watch=true`` from a resourceVersion, with bookmarks), read line by line on the calling
    thread. :meth:`close` may be called from another thread: it ends a read that is waiting for the next event.

    Raises KubeError: the HTTP status of a refused request, 410 for an ERROR event saying the resourceVersion is too
    old (the API server's own status code), UNREACHABLE when the stream breaks."""

    def __init__(self, api: client.ApiClient, path: str, api_version: str, kind: str, resource_version: str, *,
                 timeout_seconds: int = WATCH_SECONDS) -> None:
        self._api = api
        self._path = (f"{path}?watch=true&allowWatchBookmarks=true&timeoutSeconds={timeout_seconds}"
                      f"&resourceVersion={quote(resource_version, safe='')}")
        self._identity = {"apiVersion": api_version, "kind": kind}
        self._timeout = timeout_seconds
        self._response: Any = None
        self._closed = False

    def events(self) -> Iterator[WatchEvent]:
        method, url, headers, _, _ = self._api.param_serialize("GET", self._path, auth_settings=["BearerToken"])
        try:
            response = self._api.call_api(method, url, header_params=headers,
                                          _request_timeout=(10, self._timeout + 30))
        except urllib3.exceptions.HTTPError as error:
            raise Unreachable(f"watch {self._path}: no Kubernetes API reachable: {error}", UNREACHABLE) from None
        if not 200 <= response.status < 300:
            data = response.read()  # type: ignore[no-untyped-call]
            raise api_error(f"watch {self._path}: HTTP {response.status}: {_status_message(data)}", response.status,
                            retry_after=_retry_after(response))
        self._response = response.response
        if self._closed:
            self.close()
        try:
            for line in _lines(self._response.stream(65536)):
                yield self._event(line)
        except (urllib3.exceptions.HTTPError, OSError) as error:
            if not self._closed:
                raise Unreachable(f"watch {self._path}: the stream broke: {error}", UNREACHABLE) from None
        finally:
            self._response.release_conn()

    def close(self) -> None:
        self._closed = True
        if self._response is not None:
            with contextlib.suppress(Exception):  # (closing from another thread, half-way through a read)
                self._response.shutdown()

    def _event(self, line: bytes) -> WatchEvent:
        try:
            event = json.loads(line)
        except ValueError:
            raise Unreachable(f"watch {self._path}: not a JSON event: {line[:200]!r}", UNREACHABLE) from None
        kind, manifest = event.get("type"), event.get("object")
        if not isinstance(manifest, Mapping) or not isinstance(kind, str):
            raise Unreachable(f"watch {self._path}: not a watch event: {line[:200]!r}", UNREACHABLE)
        if kind == "ERROR":
            code = manifest.get("code")
            raise api_error(f"watch {self._path}: {manifest.get('message') or manifest}",
                            code if isinstance(code, int) else UNREACHABLE)
        return WatchEvent(kind, {**self._identity, **manifest})


RBAC_VERBS: dict[str, frozenset[str]] = {
    **dict.fromkeys(("read_namespaced", "read_secret", "read_lease", "read_crd", "read_object"), frozenset({"get"})),
    **dict.fromkeys(("list_namespaced_kind", "list_all", "list_all_async", "list_objects", "list_pages"),
                    frozenset({"list"})),
    "WatchStream": frozenset({"watch"}),
    **dict.fromkeys(("create_event", "create_lease", "evict_pod"), frozenset({"create"})),
    **dict.fromkeys(("patch_annotations", "update_lease", "patch_crd", "patch_pod"), frozenset({"patch"})),
    "write_secret": frozenset({"create", "patch"}),
    "patch_ca_bundle": frozenset({"get", "patch"}),
    **dict.fromkeys(("resource_served", "served_dra_version"), frozenset()),  # discovery: any authenticated user
}
"""The RBAC verbs (k8s.io/apiserver ``RequestInfoFactory``: GET of one object ``get``, of a collection ``list``,
``watch=true`` ``watch``, POST ``create``, PATCH ``patch``; an eviction is ``create`` on ``pods/eviction``) each
function here that calls the API server makes.
Which resources they reach is up to their callers: tests/unit/test_rbac_inventory.py lists every call of every
component and holds the shipped roles to it, and fails when a function that calls the API server is missing here."""


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The non-empty lines of a byte stream cut anywhere (each chunk split once: linear in the stream)."""
    pending: list[bytes] = []
    for chunk in chunks:
        head, *rest = chunk.split(b"\n")
        if not rest:
            pending.append(head)
            continue
        pending.append(head)
        lines = [b"".join(pending), *rest[:-1]]
        pending = [rest[-1]]
        yield from (line for line in lines if line.strip())
    if tail := b"".join(pending).strip():
        yield tail
