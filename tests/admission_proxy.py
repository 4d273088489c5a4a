"""The API server's admission step, in front of kmock: a write goes through the webhook configurations (by default
those of manifests/base/webhooks.yaml) as the kube-apiserver's dispatchers put it through them, then kmock stores
what admission made of it. The operator's writes, and a user's, meet the real webhooks.

What it follows (k8s.io/apiserver, Kubernetes v1.34 = k8s.io/apiserver v0.34.0; the same in v1.31 but for
line-level changes), each cited where it is done below:

* mutating webhooks first, then validating (pkg/admission/reinvocation.go, ``reinvoker.Admit`` then
  ``Validate``); configurations in the order of their names, webhooks in the order written
  (pkg/admission/configuration/mutating_webhook_manager.go and validating_webhook_manager.go, ``sort.SliceStable
  ... ByName``);
* which webhooks are called: ``generic.Webhook.ShouldCallHook`` (plugin/webhook/generic/webhook.go): the
  namespaceSelector over the namespace's labels (predicates/namespace/matcher.go), the objectSelector over the new
  and the old object's labels (predicates/object/matcher.go), the rules (predicates/rules/rules.go), then the
  matchConditions (matchconditions/matcher.go; evaluated in tests/webhook_conditions.py with the API server's cost
  limits) whose errors go through ``failurePolicy``;
* mutating webhooks one after the other, each JSON patch applied to the object before the next sees it, and one
  reinvocation round for the ``IfNeeded`` webhooks when a later webhook changed the object
  (plugin/webhook/mutating/dispatcher.go ``Dispatch``, ``callAttrMutatingHook``; reinvocationcontext.go); a patch
  that does not apply refuses the request whatever the failurePolicy;
* validating webhooks all at once, the client told of the first refusal to arrive
  (plugin/webhook/validating/dispatcher.go ``Dispatch``);
* a denial is the webhook's own status (code, reason, details) with the message prefixed
  (plugin/webhook/errors/statuserror.go ``ToStatusErr``); a webhook that cannot be called, or answers with an
  invalid response, refuses under Fail (500, ``Internal error occurred: failed calling webhook ...``) and is skipped
  under Ignore (k8s.io/apiserver pkg/util/webhook/error.go ``ErrCallingWebhook``); webhooks' warnings come back as
  ``Warning`` headers.

A namespace's labels come from ``namespaces`` (given by name, or kmock's Namespace objects through
:func:`namespaces_in`); CEL's runtime cost is counted step by step as cel-go v0.26.0 counts it (tests/cel_cost.py;
an expression it does not model gets no limit), what happens past the limits is exact.

Not modelled: the API server's in-tree admission plugins (so nothing but a webhook changes the object between
rounds), matchPolicy Equivalent's other resources, dry runs and sideEffects, schema defaulting and validation of
what a patch made, optimistic concurrency (a write is admitted against the object as last read). Strategic merge
patches are applied as JSON merge patches. The wording of a transport error (what aiohttp says about a refused
connection or a JSON Patch error) is the stand-in's own; the text the API server wraps around it is the API
server's.

The user is told by the bearer token (``users``: token -> user name).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import json
import re
import ssl
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import jsonpointer
from aiohttp import web
from webhook_conditions import (
    MATCH_CONDITIONS_BUDGET,
    PER_CALL_LIMIT,
    configuration_documents,
    evaluate_conditions,
    matching_rules,
    on_deep_stack,
    review_request,
    validating_webhooks,
)

__all__ = ["AdmissionProxy", "Rejected", "merge_patch", "namespaces_in", "validating_webhooks"]

REPO = Path(__file__).resolve().parents[1]
_PATH = re.compile(r"^/(?:api|apis/(?P<group>[^/]+))/(?P<version>[^/]+)(?:/namespaces/(?P<namespace>[^/]+))?"
                   r"/(?P<resource>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<subresource>[^/]+))?$")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server sets on every namespace to its name (k8s.io/kubernetes
pkg/registry/core/namespace/strategy.go, ``PrepareForCreate``/``PrepareForUpdate``)."""


def namespaces_in(kmock: Any) -> Callable[[str], dict[str, str] | None]:
    """The labels of kmock's Namespace objects, with the one the API server sets on every namespace to its name
    (:data:`NAMESPACE_NAME_LABEL`)."""
    def labels(name: str) -> dict[str, str] | None:
        try:
            found = kmock.objects["v1/namespaces", None, name]
        except KeyError:
            return None
        if found.deleted:
            return None
        return {**dict((found.raw.get("metadata") or {}).get("labels") or {}), NAMESPACE_NAME_LABEL: name}
    return labels


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def merge_diff(old: Any, new: Any) -> Any:
    """The RFC 7386 patch that turns ``old`` into ``new`` (what is sent to kmock when admission changed the
    object: kmock stores a PATCH by merging it)."""
    if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
        return new
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_diff(old[key], value) if isinstance(value, Mapping) else value
    return patch


# ------------------------------------------------------------------------------------------------- statuses


def status(code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ``metav1.Status`` as the API server writes a failed request's body."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = dict(details)
    return body


def internal_error(error: str) -> dict[str, Any]:
    """k8s.io/apimachinery pkg/api/errors/errors.go ``NewInternalError`` (v0.34.0)."""
    return status(500, "InternalError", f"Internal error occurred: {error}", {"causes": [{"message": error}]})


def _group_resource(group: str, resource: str) -> str:
    """``schema.GroupResource.String``: ``queues.scheduling.volcano.sh``, ``pods``."""
    return f"{resource}.{group}" if group else resource


def forbidden(group: str, resource: str, name: str, error: str) -> dict[str, Any]:
    """k8s.io/apimachinery pkg/api/errors/errors.go ``NewForbidden`` (v0.34.0)."""
    subject = _group_resource(group, resource)
    message = f"{subject} {json.dumps(name)} is forbidden: {error}" if name else f"{subject} is forbidden: {error}"
    return status(403, "Forbidden", message, {"group": group, "kind": resource, "name": name})


def not_found(group: str, resource: str, name: str) -> dict[str, Any]:
    """k8s.io/apimachinery pkg/api/errors/errors.go ``NewNotFound`` (v0.34.0)."""
    return status(404, "NotFound", f"{_group_resource(group, resource)} {json.dumps(name)} not found",
                  {"group": group, "kind": resource, "name": name})


def to_status_err(webhook: str, result: Mapping[str, Any] | None) -> dict[str, Any]:
    """A webhook's denial as the client receives it (plugin/webhook/errors/statuserror.go ``ToStatusErr``,
    v0.34.0): the webhook's status kept — its reason and details as sent — a code below 400 raised to 400, the
    status ``Failure``, the message prefixed with who denied (the reason stands in for a missing message)."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, **dict(result or {})}
    denied_by = f"admission webhook {json.dumps(webhook)} denied the request"
    if not isinstance(body.get("code"), int) or body["code"] < 400:
        body["code"] = 400
    if body.get("status") in (None, "", "Success"):
        body["status"] = "Failure"
    if body.get("message"):
        body["message"] = f"{denied_by}: {body['message']}"
    elif body.get("reason"):
        body["message"] = f"{denied_by}: {body['reason']}"
    else:
        body["message"] = f"{denied_by} without explanation"
    return body


class Rejected(Exception):
    """The request is refused with this status (an ``apierrors.StatusError``)."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        super().__init__(body.get("message", ""))
        self.body = dict(body)


class _CallingWebhook(Exception):
    """The webhook could not be called or answered wrongly (pkg/util/webhook/error.go ``ErrCallingWebhook``):
    refuses the request under failurePolicy Fail, skipped under Ignore."""

    def __init__(self, webhook: str, reason: str) -> None:
        super().__init__(f"failed calling webhook {json.dumps(webhook)}: {reason}")


# ------------------------------------------------------------------------------------------------- webhooks


@dataclass(frozen=True)
class Webhook:
    configuration: str
    index: int
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def key(self) -> tuple[str, str, int]:
        """Who the reinvocation context remembers (accessors.go: the configuration, the webhook's name and its
        index there)."""
        return (self.configuration, self.name, self.index)

    @property
    def fails_closed(self) -> bool:
        """failurePolicy, Fail when not written (k8s.io/kubernetes pkg/apis/admissionregistration/v1/defaults.go,
        ``SetDefaults_MutatingWebhook``/``SetDefaults_ValidatingWebhook``)."""
        return bool(self.spec.get("failurePolicy", "Fail") != "Ignore")

    @property
    def reinvoked_if_needed(self) -> bool:
        """reinvocationPolicy, Never when not written (defaults.go)."""
        return bool(self.spec.get("reinvocationPolicy", "Never") == "IfNeeded")

    @property
    def timeout(self) -> float:
        """timeoutSeconds, 30 when not written in admissionregistration/v1 (defaults.go)."""
        return float(self.spec.get("timeoutSeconds", 30))


def ordered(documents: Sequence[Mapping[str, Any]], kind: str) -> list[Webhook]:
    """The webhooks of the configurations of ``kind``, configurations sorted by name (stable), each one's webhooks
    in the order written (pkg/admission/configuration/mutating_webhook_manager.go ``getConfiguration`` and
    validating_webhook_manager.go, v0.34.0)."""
    chosen = sorted((d for d in documents if d.get("kind") == kind), key=lambda d: str(d["metadata"]["name"]))
    return [Webhook(str(d["metadata"]["name"]), index, hook) for d in chosen
            for index, hook in enumerate(d.get("webhooks") or [])]


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` over a set of labels (k8s.io/apimachinery pkg/apis/meta/v1/helpers.go
    ``LabelSelectorAsSelector``; pkg/labels/selector.go ``Requirement.Matches``): matchLabels equal, In present
    and among the values, NotIn absent or not among them, Exists, DoesNotExist. An empty selector matches
    everything; a missing one is defaulted to empty (defaults.go)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _labels(manifest: Any) -> dict[str, str]:
    metadata = manifest.get("metadata") if isinstance(manifest, Mapping) else None
    return dict(metadata.get("labels") or {}) if isinstance(metadata, Mapping) else {}


@dataclass
class AdmissionRequest:
    """One write as admission sees it."""

    group: str
    version: str
    resource: str
    subresource: str
    namespace: str
    """The request's namespace; for a Namespace object, its own name (as rules.go's ``scope`` reads it)."""
    name: str
    operation: str
    user: str
    old: Any
    warnings: list[str] = field(default_factory=list)
    namespace_labels: dict[str, str] | None = None

    @property
    def is_namespace(self) -> bool:
        return self.group == "" and self.resource == "namespaces"

    def kind(self, new: Any) -> str:
        for manifest in (new, self.old):
            if isinstance(manifest, Mapping) and manifest.get("kind"):
                return str(manifest["kind"])
        return ""


@dataclass
class _Reinvocation:
    """plugin/webhook/mutating/reinvocationcontext.go (``webhookReinvokeContext``) and the chain's
    ``ReinvocationContext`` (pkg/admission/reinvocation.go)."""

    previously_invoked: set[tuple[str, str, int]] = field(default_factory=set)
    to_reinvoke: set[tuple[str, str, int]] = field(default_factory=set)
    should_reinvoke: bool = False

    def changed(self) -> None:
        """``RequireReinvokingPreviouslyInvokedPlugins`` and ``SetShouldReinvoke``: every IfNeeded webhook called
        before this change is called again in the second round."""
        self.to_reinvoke |= self.previously_invoked
        self.previously_invoked = set()
        self.should_reinvoke = True


# ------------------------------------------------------------------------------------------------- the proxy


@dataclass
class AdmissionProxy:
    upstream: str
    webhook_url: Callable[[], str]
    """Where a webhook configured by ``service`` listens (``https://localhost:PORT``), asked at each call; a webhook
    configured by ``url`` is called there."""
    ca_file: Path
    users: Mapping[str, str]
    configurations: list[dict[str, Any]] = field(default_factory=configuration_documents)
    """Mutating and validating webhook configurations (kind, metadata.name, webhooks)."""
    namespaces: Mapping[str, Mapping[str, str]] | Callable[[str], Mapping[str, str] | None] = field(
        default_factory=dict)
    """Each namespace's labels: given by name, or read by a function (None: no such namespace; see
    :func:`namespaces_in` for kmock's). A namespace it does not know is not found (404), as the API server answers
    for a namespace that does not exist (kmock cannot serve a Namespace by name: it reads
    ``/api/v1/namespaces/NAME`` as a namespace's path)."""
    per_call_limit: int = PER_CALL_LIMIT
    condition_budget: int = MATCH_CONDITIONS_BUDGET
    calls: list[tuple[str, str, bool]] = field(default_factory=list)
    """(webhook name, user, allowed) per webhook call (allowed False when the call failed)."""
    refused: list[tuple[str, str, str]] = field(default_factory=list)
    """(method, path, message) per write refused."""
    session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        body = await request.read()
        parsed = _PATH.match(request.path)
        operation = _operation(request.method, parsed)
        headers = {key: value for key, value in request.headers.items()
                   if key.lower() in ("content-type", "authorization", "accept")}
        warnings: list[str] = []
        if operation is not None and parsed is not None:
            try:
                admitted = await self._admit(request, parsed, operation, body, warnings)
            except Rejected as refusal:
                self.refused.append((request.method, request.path, refusal.body.get("message", "")))
                return web.json_response(refusal.body, status=int(refusal.body["code"]),
                                         headers=_warning_headers(warnings))
            if admitted is not None:
                body, method = admitted
                headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
                return await self._forward(request, method, body, headers, warnings)
        return await self._forward(request, request.method, body, headers, warnings)

    async def _forward(self, request: web.Request, method: str, body: bytes, headers: Mapping[str, str],
                       warnings: list[str]) -> web.StreamResponse:
        assert self.session is not None
        async with self.session.request(method, self.upstream + request.path_qs, data=body or None,
                                        headers=headers) as upstream:
            response = web.StreamResponse(status=upstream.status, headers={
                "Content-Type": upstream.headers.get("Content-Type", ""), **_warning_headers(warnings)})
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                pass  # the client went away (a watch stopped): nothing more to send
            return response

    async def _admit(self, request: web.Request, parsed: re.Match[str], operation: str, body: bytes,
                     warnings: list[str]) -> tuple[bytes, str] | None:
        """Runs admission; None when the request goes to kmock as sent, else the body (and method) that stores
        what admission made of it. Raises :class:`Rejected`."""
        assert self.session is not None
        group, resource = parsed["group"] or "", parsed["resource"]
        name = parsed["name"] or ""
        old = None
        if operation in ("UPDATE", "DELETE"):
            async with self.session.get(self.upstream + request.path) as current:
                old = await current.json() if current.status == 200 else None
        sent = json.loads(body) if body else {}
        new = None if operation == "DELETE" else _requested(request, sent, old)
        if operation == "CREATE" and isinstance(new, dict):
            name = name or str((new.get("metadata") or {}).get("name") or "")
        namespace = parsed["namespace"] or ""
        if group == "" and resource == "namespaces":
            namespace = name  # the Namespace object's own name (rules.go, ``scope``)
        elif operation == "CREATE" and namespace and isinstance(new, dict):
            # The object takes the request's namespace before admission (k8s.io/apiserver
            # pkg/registry/rest/meta.go ``EnsureObjectNamespaceMatchesRequestNamespace``).
            new.setdefault("metadata", {})["namespace"] = namespace
        user = self.users.get(request.headers.get("Authorization", "").removeprefix("Bearer "), "anonymous")
        admission = AdmissionRequest(group=group, version=parsed["version"], resource=resource,
                                     subresource=parsed["subresource"] or "", namespace=namespace, name=name,
                                     operation=operation, user=user, old=old, warnings=warnings)
        final = await self.admit(admission, new)
        if operation == "DELETE" or (final == new and request.content_type != "application/json-patch+json"
                                     and request.method != "PUT"):
            return None
        if operation == "CREATE":
            return _encoded(final), "POST"
        return _encoded(merge_diff(old or {}, final)), "PATCH"

    async def admit(self, request: AdmissionRequest, new: Any) -> Any:
        """The object once admitted (mutated), or :class:`Rejected`: the mutating webhooks, a second round for the
        IfNeeded ones when needed (pkg/admission/reinvocation.go ``reinvoker.Admit``: the mutating chain at most
        twice), then the validating webhooks."""
        reinvocation = _Reinvocation()
        mutating = ordered(self.configurations, "MutatingWebhookConfiguration")
        new = await self._mutate(request, new, mutating, reinvocation, second_round=False)
        if reinvocation.should_reinvoke:
            new = await self._mutate(request, new, mutating, reinvocation, second_round=True)
        await self._validate(request, new, ordered(self.configurations, "ValidatingWebhookConfiguration"))
        return new

    # ----------------------------------------------------------------------------------------- which webhooks

    async def should_call(self, hook: Webhook, request: AdmissionRequest, new: Any) -> bool:
        """``generic.Webhook.ShouldCallHook`` (plugin/webhook/generic/webhook.go, v0.34.0): a webhook whose
        namespaceSelector or objectSelector does not match is skipped, as is one whose rules do not; a namespace
        that cannot be read refuses the request only for a webhook whose rules match; then the matchConditions:
        an error under failurePolicy Fail refuses the request (``apierrors.NewForbidden`` over the request's
        resource and name, the conditions' errors as message), under Ignore it skips the webhook."""
        namespace_refusal: Rejected | None = None
        try:
            namespace_matches = await self._namespace_matches(hook, request, new)
        except Rejected as refusal:
            namespace_matches, namespace_refusal = False, refusal
        if not namespace_matches and namespace_refusal is None:
            return False
        if not self._object_matches(hook, request, new):
            return False
        if not matching_rules(hook.spec, request.group, request.resource, request.operation, request.subresource,
                              version=request.version, namespace=request.namespace):
            return False
        if namespace_refusal is not None:
            raise namespace_refusal
        outcome = evaluate_conditions(hook.spec, new, request.old, self._condition_request(request, new),
                                      per_call_limit=self.per_call_limit, budget=self.condition_budget)
        if outcome.error:
            raise Rejected(forbidden(request.group, request.resource, request.name, outcome.error))
        return outcome.matches

    async def _namespace_matches(self, hook: Webhook, request: AdmissionRequest, new: Any) -> bool:
        """predicates/namespace/matcher.go ``MatchNamespaceSelector`` (v0.34.0): a cluster-scoped object other
        than a Namespace is never exempted; a Namespace being created or updated is judged by its own labels
        (``GetNamespaceLabels``), anything else by its namespace's."""
        if not request.namespace and not request.is_namespace:
            return True
        selector = hook.spec.get("namespaceSelector") or {}
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            return True
        if request.is_namespace and request.operation in ("CREATE", "UPDATE") and not request.subresource:
            return selector_matches(selector, _labels(new))
        if request.namespace_labels is None:
            request.namespace_labels = await self._namespace_labels(request.namespace)
        return selector_matches(selector, request.namespace_labels)

    async def _namespace_labels(self, namespace: str) -> dict[str, str]:
        found = (self.namespaces(namespace) if callable(self.namespaces)
                 else self.namespaces.get(namespace))
        if found is None:
            raise Rejected(not_found("", "namespaces", namespace))
        return dict(found)

    @staticmethod
    def _object_matches(hook: Webhook, request: AdmissionRequest, new: Any) -> bool:
        """predicates/object/matcher.go ``MatchObjectSelector`` (v0.34.0): the new object's labels or the old
        one's; an absent object (the new one on DELETE, the old one on CREATE) matches nothing."""
        selector = hook.spec.get("objectSelector") or {}
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            return True
        return any(isinstance(manifest, Mapping) and selector_matches(selector, _labels(manifest))
                   for manifest in (new, request.old))

    @staticmethod
    def _condition_request(request: AdmissionRequest, new: Any) -> dict[str, Any]:
        return review_request(operation=request.operation, user=request.user, name=request.name,
                              namespace=request.namespace, group=request.group, version=request.version,
                              resource=request.resource, kind=request.kind(new), subresource=request.subresource)

    # ----------------------------------------------------------------------------------------- mutating

    async def _mutate(self, request: AdmissionRequest, new: Any, hooks: list[Webhook], reinvocation: _Reinvocation,
                      *, second_round: bool) -> Any:
        """plugin/webhook/mutating/dispatcher.go ``Dispatch`` (v0.34.0): in order, each webhook sees what the ones
        before it made. In the second round only the webhooks marked for reinvocation are called (a webhook is
        never called there for the first time), yet every webhook's selectors and conditions are evaluated first,
        so their errors still refuse the request. A webhook that changed the object marks every IfNeeded webhook
        called before it; an IfNeeded webhook is remembered after its own call. A call that fails: Ignore goes
        on, Fail refuses with an internal error; a denial refuses with the webhook's status; a patch that does
        not apply refuses whatever the policy."""
        for hook in hooks:
            if not await self.should_call(hook, request, new):
                continue
            if second_round and hook.key not in reinvocation.to_reinvoke:
                continue
            failure: _CallingWebhook | None = None
            try:
                new, changed = await self._call_mutating(hook, request, new)
            except _CallingWebhook as error:
                failure, changed = error, False
            if changed:
                reinvocation.changed()
            if hook.reinvoked_if_needed:
                reinvocation.previously_invoked.add(hook.key)
            if failure is not None and hook.fails_closed:
                raise Rejected(internal_error(str(failure)))
        return new

    async def _call_mutating(self, hook: Webhook, request: AdmissionRequest, new: Any) -> tuple[Any, bool]:
        """``callAttrMutatingHook`` (dispatcher.go, v0.34.0): the webhook's patch is decoded (an undecodable one or
        another patchType is a failed call) and applied to the object as it is now; a patch on a DELETE, or one
        that does not apply, is an internal error that no failurePolicy turns into a pass."""
        answer = await self._post(hook, request, new, mutating=True, reason_prefix="failed to call webhook: ")
        if not answer.get("allowed"):
            raise Rejected(to_status_err(hook.name, answer.get("status")))
        if not answer.get("patch"):
            return new, False
        try:
            operations = json.loads(base64.b64decode(answer["patch"], validate=True))
            if not isinstance(operations, list):
                raise ValueError("a JSON patch is a list of operations")
        except (binascii.Error, ValueError, TypeError) as error:
            raise _CallingWebhook(hook.name, f"received undecodable patch in webhook response: {error}") from None
        if answer.get("patchType") != "JSONPatch":
            raise _CallingWebhook(hook.name, f"unsupported patch type {json.dumps(answer.get('patchType'))}")
        if not operations:
            return new, False
        if new is None:
            raise Rejected(internal_error(f"admission webhook {json.dumps(hook.name)} attempted to modify the "
                                          "object, which is not supported for this operation"))
        try:
            patched = jsonpatch.apply_patch(new, operations)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, KeyError, IndexError,
                TypeError, ValueError) as error:
            raise Rejected(internal_error(str(error) or type(error).__name__)) from None
        if not isinstance(patched, dict):
            raise Rejected(internal_error("the patched object is not a JSON object"))
        return patched, patched != new

    # ----------------------------------------------------------------------------------------- validating

    async def _validate(self, request: AdmissionRequest, new: Any, hooks: list[Webhook]) -> None:
        """plugin/webhook/validating/dispatcher.go ``Dispatch`` (v0.34.0): which webhooks to call is settled first
        (an error there refuses before any call), then all are called at once; of their refusals the client gets
        the first to arrive (``errs[0]`` of the channel, in order of completion), the others only logged."""
        chosen = [hook for hook in hooks if await self.should_call(hook, request, new)]
        refusals: list[dict[str, Any]] = []

        async def call(hook: Webhook) -> None:
            try:
                answer = await self._post(hook, request, new, mutating=False, reason_prefix="")
            except _CallingWebhook as error:
                if hook.fails_closed:
                    refusals.append(internal_error(str(error)))
                return
            if not answer.get("allowed"):
                refusals.append(to_status_err(hook.name, answer.get("status")))

        await asyncio.gather(*(call(hook) for hook in chosen))
        if refusals:
            raise Rejected(refusals[0])

    # ----------------------------------------------------------------------------------------- the call

    async def _post(self, hook: Webhook, request: AdmissionRequest, new: Any, *, mutating: bool,
                    reason_prefix: str) -> Mapping[str, Any]:
        """Sends the AdmissionReview (plugin/webhook/request/admissionreview.go ``CreateAdmissionObjects``) and
        checks the answer (``VerifyAdmissionResponse``, v0.34.0): the same uid, an ``admission.k8s.io/v1``
        AdmissionReview, patch and patchType together (a validating webhook sends neither). What fails is a failed
        call; the webhook's warnings are kept."""
        assert self.session is not None
        uid = str(uuid.uuid4())
        kind = request.kind(new)
        group_version = {"group": request.group, "version": request.version}
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": uid, "kind": {**group_version, "kind": kind},
            "resource": {**group_version, "resource": request.resource}, "subResource": request.subresource,
            "requestKind": {**group_version, "kind": kind},
            "requestResource": {**group_version, "resource": request.resource},
            "requestSubResource": request.subresource,
            "operation": request.operation, "name": request.name, "namespace": request.namespace,
            "object": new, "oldObject": request.old, "dryRun": False, "userInfo": {"username": request.user}}}
        client = hook.spec.get("clientConfig") or {}
        url = client.get("url") or self.webhook_url() + str((client.get("service") or {}).get("path", ""))
        context = ssl.create_default_context(cafile=str(self.ca_file)) if url.startswith("https:") else None
        try:
            async with self.session.post(url, data=_encoded(review), ssl=context if context is not None else True,
                                         headers={"Content-Type": "application/json"},
                                         timeout=aiohttp.ClientTimeout(total=hook.timeout)) as answer:
                if answer.status != 200:
                    raise _CallingWebhook(hook.name, f"{reason_prefix}the server responded with HTTP "
                                                     f"{answer.status}")
                document = await answer.json(content_type=None)
        except _CallingWebhook:
            self.calls.append((hook.name, request.user, False))
            raise
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as error:
            self.calls.append((hook.name, request.user, False))
            raise _CallingWebhook(hook.name, f"{reason_prefix}{type(error).__name__}: {error}") from None
        try:
            response = _verified(document, uid, mutating=mutating)
        except ValueError as error:
            self.calls.append((hook.name, request.user, False))
            prefix = "received invalid webhook response: " if mutating else ""
            raise _CallingWebhook(hook.name, f"{prefix}{error}") from None
        self.calls.append((hook.name, request.user, bool(response.get("allowed"))))
        request.warnings.extend(str(warning) for warning in response.get("warnings") or [])
        return response


def _verified(document: Any, uid: str, *, mutating: bool) -> Mapping[str, Any]:
    if not isinstance(document, Mapping) or not isinstance(document.get("response"), Mapping):
        raise ValueError("webhook response was absent")
    response = document["response"]
    if response.get("uid") != uid:
        raise ValueError(f"expected response.uid={json.dumps(uid)}, got {json.dumps(response.get('uid'))}")
    if document.get("apiVersion") != "admission.k8s.io/v1" or document.get("kind") != "AdmissionReview":
        raise ValueError(f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got "
                         f"{document.get('apiVersion')}, Kind={document.get('kind')}")
    has_patch, has_type = bool(response.get("patch")), response.get("patchType") is not None
    if mutating and has_patch and not has_type:
        raise ValueError("webhook returned response.patch but not response.patchType")
    if mutating and has_type and not has_patch:
        raise ValueError("webhook returned response.patchType but not response.patch")
    if not mutating and has_patch:
        raise ValueError("validating webhook may not return response.patch")
    if not mutating and has_type:
        raise ValueError("validating webhook may not return response.patchType")
    return dict(response)


def _operation(method: str, parsed: re.Match[str] | None) -> str | None:
    if parsed is None:
        return None
    if method == "POST" and parsed["name"] is None:
        return "CREATE"
    if method in ("PUT", "PATCH") and parsed["name"] is not None:
        return "UPDATE"
    if method == "DELETE" and parsed["name"] is not None and parsed["subresource"] is None:
        return "DELETE"
    return None


def _requested(request: web.Request, sent: Any, old: Any) -> Any:
    """The object the request asks for: the body of a create or replace, the current object patched otherwise
    (a JSON patch as such, a merge or strategic merge patch as a merge patch)."""
    if request.method != "PATCH":
        return sent
    if request.content_type == "application/json-patch+json":
        try:
            return jsonpatch.apply_patch(old or {}, sent)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as error:
            raise Rejected(status(422, "Invalid", f"the JSON patch does not apply: {error}")) from None
    return merge_patch(old or {}, sent)


def _encoded(document: Any) -> bytes:
    """JSON, for objects as deep as the API server takes (10,000 levels): json.dumps on a deep stack when the
    caller's is too shallow."""
    try:
        return json.dumps(document).encode()
    except RecursionError:
        return on_deep_stack(lambda: json.dumps(document).encode())


def _warning_headers(warnings: list[str]) -> dict[str, str]:
    """Webhooks' warnings as the API server returns them (``Warning: 299 - "text"``; k8s.io/apiserver
    pkg/endpoints/filters/warning.go). One header carries them all here, comma-separated, as RFC 7234 allows."""
    if not warnings:
        return {}
    return {"Warning": ", ".join(f"299 - {json.dumps(warning)}" for warning in warnings)}
