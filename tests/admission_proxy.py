"""The API server's admission step, in front of kmock: writes to the kinds our webhook configurations name go through
them before kmock stores them, so the operator's writes meet the real webhooks.

What it does as the API server does (k8s.io/apiserver/pkg/admission/plugin/webhook, v1.31): it picks the webhooks
whose rules match the request (API group, resource, operation), evaluates their ``matchConditions`` (CEL over
``object``, ``oldObject`` and ``request.userInfo``; all must hold), sends an AdmissionReview to each validating
webhook that matches, and refuses the write with 403 and the webhook's message when one denies ("admission webhook
"<name>" denied the request: ..."); a webhook it cannot call refuses per ``failurePolicy`` (Fail: 500). Mutating
webhooks are left out: the writes tested here are patches of annotations, which ours do not mutate. The user is
told by the bearer token (``users``: token -> user name).
"""

from __future__ import annotations

import copy
import json
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
from aiohttp import web
from webhook_conditions import Decision, decide, validating_webhooks

REPO = Path(__file__).resolve().parents[1]
_PATH = re.compile(r"^/(?:api|apis/(?P<group>[^/]+))/(?P<version>[^/]+)(?:/namespaces/(?P<namespace>[^/]+))?"
                   r"/(?P<resource>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<subresource>[^/]+))?$")

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


@dataclass
class AdmissionProxy:
    upstream: str
    webhook_url: Callable[[], str]
    """Where the webhook server listens (``https://localhost:PORT``), asked at each call."""
    ca_file: Path
    users: Mapping[str, str]
    hooks: list[dict[str, Any]] = field(default_factory=validating_webhooks)
    calls: list[tuple[str, str, bool]] = field(default_factory=list)
    """(webhook name, user, allowed) per webhook call."""
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
        operation = {"POST": "CREATE", "PUT": "UPDATE", "PATCH": "UPDATE"}.get(request.method)
        parsed = _PATH.match(request.path)
        if operation is not None and parsed is not None and parsed["subresource"] is None:
            refusal = await self._admit(request, parsed, operation, body)
            if refusal is not None:
                return refusal
        headers = {key: value for key, value in request.headers.items()
                   if key.lower() in ("content-type", "authorization", "accept")}
        async with self.session.request(request.method, self.upstream + request.path_qs, data=body or None,
                                        headers=headers) as upstream:
            response = web.StreamResponse(status=upstream.status,
                                          headers={"Content-Type": upstream.headers.get("Content-Type", "")})
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                pass  # the client went away (a watch stopped): nothing more to send
            return response

    async def _admit(self, request: web.Request, parsed: re.Match[str], operation: str,
                     body: bytes) -> web.Response | None:
        assert self.session is not None
        group, resource = parsed["group"] or "", parsed["resource"]
        hooks = [hook for hook in self.hooks if any(
            group in rule["apiGroups"] and resource in rule["resources"] and operation in rule["operations"]
            for rule in hook["rules"])]
        if not hooks:
            return None
        user = self.users.get(request.headers.get("Authorization", "").removeprefix("Bearer "), "anonymous")
        old = None
        if operation == "UPDATE":
            async with self.session.get(self.upstream + request.path) as current:
                old = await current.json() if current.status == 200 else None
        sent = json.loads(body) if body else {}
        if request.content_type == "application/json-patch+json":
            new = jsonpatch.apply_patch(old or {}, sent)
        elif request.method == "PATCH":
            new = merge_patch(old or {}, sent)
        else:
            new = sent
        for hook in hooks:
            decision = decide(hook, new, old, operation=operation, user=user)
            if decision is Decision.REFUSE:
                message = f'failed calling webhook "{hook["name"]}": a matchCondition could not be evaluated'
                self.refused.append((request.method, request.path, message))
                return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                          "message": message, "code": 500}, status=500)
            if decision is Decision.SKIP:
                continue
            allowed, message = await self._call(hook, parsed, operation, new, old, user)
            self.calls.append((hook["name"], user, allowed))
            if not allowed:
                self.refused.append((request.method, request.path, message))
                return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                          "message": message, "reason": "Forbidden", "code": 403}, status=403)
        return None

    async def _call(self, hook: Mapping[str, Any], parsed: re.Match[str], operation: str, new: Any, old: Any,
                    user: str) -> tuple[bool, str]:
        assert self.session is not None
        group, version = parsed["group"] or "", parsed["version"]
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": f"proxy-{len(self.calls)}",
            "kind": {"group": group, "version": version, "kind": new.get("kind", "")},
            "resource": {"group": group, "version": version, "resource": parsed["resource"]},
            "operation": operation, "name": parsed["name"] or new.get("metadata", {}).get("name", ""),
            "namespace": parsed["namespace"] or "", "object": new, "oldObject": old, "dryRun": False,
            "userInfo": {"username": user}}}
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            async with self.session.post(self.webhook_url() + hook["clientConfig"]["service"]["path"], json=review,
                                         ssl=context) as answer:
                response = (await answer.json())["response"]
        except (aiohttp.ClientError, OSError, KeyError, ValueError) as error:
            if hook["failurePolicy"] == "Ignore":
                return True, ""
            return False, f'Internal error occurred: failed calling webhook "{hook["name"]}": {error}'
        if response["allowed"]:
            return True, ""
        return False, f'admission webhook "{hook["name"]}" denied the request: {response["status"]["message"]}'
