"""AdmissionReview (``admission.k8s.io/v1``) in and out: the translation between the API server and a Verdict.

Pure functions: :func:`read_review` turns a request body into an :class:`AdmissionRequest` (or raises
:class:`MalformedReview`, answered with HTTP 400), :func:`response` turns a Verdict into the response body.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cardquota.core.verdict import PatchOperation, Verdict
from cardquota.core.yamltext import MAX_NESTING, json_nesting_exceeds

API_VERSION = "admission.k8s.io/v1"
MAX_WARNING_LENGTH = 256
"""The API server truncates longer warnings; cut them ourselves, visibly."""
MAX_MESSAGE_LENGTH = 2048


class MalformedReview(ValueError):
    """A body that is not an AdmissionReview request (answered with HTTP 400 and a JSON error)."""


@dataclass(frozen=True)
class AdmissionRequest:
    uid: str
    group: str
    kind: str
    operation: str
    namespace: str
    name: str
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    dry_run: bool
    user: str = ""
    """``request.userInfo.username``: who is writing (cardquota's own service account is never refused)."""

    @property
    def identity(self) -> str:
        """``Pod ml/web-*`` for messages and logs (a generated name shows its prefix)."""
        completed = self.policy_object() or self.policy_old_object() or {}
        name = completed.get("metadata", {}).get("name") or self.name or "(unnamed)"
        return f"{self.kind} {self.namespace}/{name}" if self.namespace else f"{self.kind} {name}"

    def policy_object(self) -> Mapping[str, Any] | None:
        """The object as a policy reads it: the name and namespace filled from the request (pods created by
        controllers have only ``generateName`` at admission, and the body may leave the namespace out)."""
        return _completed(self.object, self.name, self.namespace)

    def policy_old_object(self) -> Mapping[str, Any] | None:
        return _completed(self.old_object, self.name, self.namespace)


def read_review(body: bytes) -> AdmissionRequest:
    if json_nesting_exceeds(body):
        raise MalformedReview(f"the body nests more than {MAX_NESTING} levels deep")
    try:
        review = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise MalformedReview(f"the body is not JSON: {error}") from None
    if not isinstance(review, dict):
        raise MalformedReview("the body is not a JSON object")
    if review.get("kind") != "AdmissionReview":
        raise MalformedReview(f"expected kind AdmissionReview, got {str(review.get('kind'))[:40]!r}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("the AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request.uid is missing")
    kind = request.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str):
        raise MalformedReview("request.kind is missing")
    operation = request.get("operation")
    if not isinstance(operation, str):
        raise MalformedReview("request.operation is missing")
    for field in ("object", "oldObject"):
        if request.get(field) is not None and not isinstance(request.get(field), dict):
            raise MalformedReview(f"request.{field} is not an object")
    return AdmissionRequest(
        uid=uid,
        group=str(kind.get("group") or ""),
        kind=kind["kind"],
        operation=operation,
        namespace=_text(request.get("namespace")),
        name=_text(request.get("name")),
        object=request.get("object"),
        old_object=request.get("oldObject"),
        dry_run=request.get("dryRun") is True,
        user=_text((request.get("userInfo") or {}).get("username") if isinstance(request.get("userInfo"), dict)
                   else None),
    )


def response(uid: str, verdict: Verdict, *, with_patch: bool) -> dict[str, Any]:
    """The AdmissionReview answering ``uid``: 403 and the message on denial, warnings, and the JSON patch."""
    answer: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        answer["status"] = {"code": 403, "reason": "Forbidden", "message": _clip(verdict.message, MAX_MESSAGE_LENGTH)}
    if verdict.warnings:
        answer["warnings"] = [_clip(warning, MAX_WARNING_LENGTH) for warning in verdict.warnings]
    if with_patch and verdict.allowed and verdict.patch:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = encode_patch(verdict.patch)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": answer}


def encode_patch(patch: Sequence[PatchOperation]) -> str:
    return base64.b64encode(json.dumps([dict(op) for op in patch], separators=(",", ":")).encode()).decode("ascii")


def _completed(manifest: Mapping[str, Any] | None, name: str, namespace: str) -> Mapping[str, Any] | None:
    if manifest is None:
        return None
    metadata = manifest.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, Mapping) else {}
    if not metadata.get("name"):
        generated = metadata.get("generateName")
        metadata["name"] = name or (f"{generated}*" if isinstance(generated, str) and generated else "(unnamed)")
    if namespace and not metadata.get("namespace"):
        metadata["namespace"] = namespace
    return {**manifest, "metadata": metadata}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
