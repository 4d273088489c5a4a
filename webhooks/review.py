"""AdmissionReview (``admission.k8s.io/v1``) in and out: the translation between the API server and a Verdict.

Pure functions: :func:`read_review` turns a request body into an :class:`AdmissionRequest` (or raises
:class:`MalformedReview`, answered with HTTP 400), :func:`response` turns a Verdict into the response body.
"""

from __future__ import annotations

import binascii
import json
import json.scanner
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, cast

from cardquota.core.errors import one_line
from cardquota.core.objects import completed
from cardquota.core.verdict import (
    MAX_MESSAGE_VIOLATIONS,
    MAX_WARNING_RUNES,
    PatchOperation,
    Verdict,
    operation_json,
)
from cardquota.webhooks.deep_json import TooDeep, loads_deep

API_VERSION = "admission.k8s.io/v1"
MAX_WARNING_LENGTH = MAX_WARNING_RUNES
"""What the API server keeps of each warning once a request's warnings pass 4,096 runes: the Verdict keeps its
warnings whole when they fit that total, else cuts each to this (see :func:`cardquota.core.verdict.within_budget`)."""
MAX_MESSAGE_LENGTH = 2048
_FEW_BRACKETS = 400
"""A body with at most this many opening brackets cannot nest deeper than that: json.loads reads it in place."""
_SAFE_RECURSION_LIMIT = 5_000
"""json.loads recurses once per level on the C stack, stopped at the recursion limit (Python ≤ 3.11) or at a fixed
C limit (3.12: ~1,500 levels; 3.13: ~10,000): up to this limit any thread's stack (≥ 2 MiB) holds the attempt."""


MAX_UID = 128
"""The longest ``request.uid`` answered. The API server sends a UUID, 36 characters (k8s.io/apiserver
pkg/admission/plugin/webhook/request/admissionreview.go, ``CreateV1AdmissionReview``: ``uid := uuid.NewUUID()``);
the answer echoes it, so a caller sending a megabyte of uid made each answer a megabyte, three with escaping."""


class MalformedReview(ValueError):
    """A body that is not an AdmissionReview request (answered with HTTP 400 and a JSON error)."""


class NotInPlace(Exception):
    """Raised by ``read_review(..., in_place=True)`` for a body json.loads cannot read in place (nested deeper than
    the recursion limit lets it go): the caller reads it again, in full, where time is not scarce."""


class AdmissionRequest(NamedTuple):
    """One review's request (a named tuple: one is built per review, in ~0.1 µs against ~2 µs for a frozen
    dataclass; :func:`read_review` builds it with ``tuple.__new__``, every field in order)."""

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


def read_review(body: bytes, *, in_place: bool = False) -> AdmissionRequest:
    """The request in ``body``. ``in_place``: read by json.loads alone, in time linear in the body's size, or raise
    :class:`NotInPlace` (the slower reader of deep bodies is not tried)."""
    try:
        review = loads(body, in_place=in_place)
    except (MalformedReview, NotInPlace):
        raise
    except ValueError as error:
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
    if len(uid) > MAX_UID or not uid.isascii() or not uid.isprintable():
        raise MalformedReview(f"request.uid is not a UID as the API server sends (printable ASCII, at most {MAX_UID} "
                              "characters)")
    kind = request.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str):
        raise MalformedReview("request.kind is missing")
    operation = request.get("operation")
    if not isinstance(operation, str):
        raise MalformedReview("request.operation is missing")
    for field in ("object", "oldObject"):
        if request.get(field) is not None and not isinstance(request.get(field), dict):
            raise MalformedReview(f"request.{field} is not an object")
    user_info = request.get("userInfo")
    return tuple.__new__(AdmissionRequest, (  # (as core.objects builds its named tuples: no Python frame)
        uid,
        str(kind.get("group") or ""),
        kind["kind"],
        operation,
        _text(request.get("namespace")),
        _text(request.get("name")),
        request.get("object"),
        request.get("oldObject"),
        request.get("dryRun") is True,
        _text(user_info.get("username") if isinstance(user_info, dict) else None),
    ))


def loads(body: bytes, *, in_place: bool = False) -> Any:
    """The body's JSON, nested as deep as the API server's decoder allows (``deep_json.MAX_REVIEW_NESTING``), in
    time linear in its size and without RecursionError on any Python: json.loads' own reader in place when it can
    (:func:`json_document`; the body cannot be deep, or the attempt succeeds), else :func:`loads_deep` — or,
    ``in_place``, :class:`NotInPlace`. Raises MalformedReview when it is deeper, ValueError when it is not JSON."""
    if sys.getrecursionlimit() <= _SAFE_RECURSION_LIMIT or body.count(b"[") + body.count(b"{") <= _FEW_BRACKETS:
        try:
            return json_document(body)
        except RecursionError:  # deeper than json.loads can go here
            pass
    if in_place:
        raise NotInPlace
    try:
        return loads_deep(body.decode(json.detect_encoding(body)))
    except TooDeep as error:
        raise MalformedReview(str(error)) from None


_SCAN = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))  # (typeshed types the decoder it reads oddly)
"""json's own scanner (its C one), made as json.loads' decoder makes it."""
_JSON_WHITESPACE = " \t\n\r"


def json_document(body: bytes) -> Any:
    """``json.loads(body)``: the same value, or the same error, without json.loads' Python layers (the encoding's
    detection, the decoder's whitespace patterns: ~2 µs of a review, more when the server's other work has left the
    CPU's caches cold; ``bench/webhook.py``) for the bodies the API server sends — UTF-8 JSON objects. Any other
    body (a byte-order mark, UTF-16 or UTF-32, leading whitespace, no object) is read by json.loads itself. One
    difference: without json.loads' three Python frames on the stack it nests two levels deeper before the
    recursion limit stops it (:func:`loads` reads deeper bodies another way in any case)."""
    if body[:1] != b"{" or body[1:2] == b"\x00":  # (json.detect_encoding: a NUL second byte is UTF-16/32-LE)
        return json.loads(body)
    text = body.decode("utf-8", "surrogatepass")  # (as json.loads decodes UTF-8)
    try:
        value, end = _SCAN(text, 0)
    except StopIteration as error:
        raise json.JSONDecodeError("Expecting value", text, error.value) from None
    if end != len(text):
        rest = text[end:].lstrip(_JSON_WHITESPACE)
        if rest:
            raise json.JSONDecodeError("Extra data", text, len(text) - len(rest))
    return value


def response(uid: str, verdict: Verdict, *, with_patch: bool) -> dict[str, Any]:
    """The AdmissionReview answering ``uid``: 403, the message and its causes on denial, warnings (already within
    the API server's budget: see :func:`cardquota.core.verdict.within_budget`), and the JSON patch."""
    answer: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        answer["status"] = {"code": 403, "reason": "Forbidden", "message": _clip(verdict.message, MAX_MESSAGE_LENGTH)}
        if verdict.violations:
            answer["status"]["details"] = {"causes": causes(verdict)}
    if verdict.warnings:
        answer["warnings"] = list(verdict.warnings)
    if with_patch and verdict.allowed and verdict.patch:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = encode_patch(verdict.patch)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": answer}


_PLAIN_ANSWERS = (["uid", "allowed"], ["uid", "allowed", "patchType", "patch"])
"""The keys of an allowed answer with nothing to say, with or without a patch: most answers."""
_escaped = json.encoder.encode_basestring_ascii
"""A string as ``json.dumps`` writes it (quoted, escaped, ASCII)."""


def encoded(answer: Mapping[str, Any]) -> bytes:
    """``json.dumps(answer).encode()`` for an answer from :func:`response`: the same bytes, written directly for an
    allowed answer with nothing to say (~0.6 µs against ~3.5 µs, on every admission's path), else by json.dumps."""
    body = answer["response"]
    if (answer.get("apiVersion") == API_VERSION and answer.get("kind") == "AdmissionReview" and len(answer) == 3
            and body["allowed"] is True and list(body) in _PLAIN_ANSWERS and type(body["uid"]) is str):
        patch = f', "patchType": "JSONPatch", "patch": {_escaped(body["patch"])}' if "patch" in body else ""
        return (f'{{"apiVersion": "{API_VERSION}", "kind": "AdmissionReview", "response": {{"uid": '
                f'{_escaped(body["uid"])}, "allowed": true{patch}}}}}').encode()
    return json.dumps(answer).encode()


def causes(verdict: Verdict) -> list[dict[str, str]]:
    """The denial's violations as the API server's own validation errors list them (``metav1.StatusCause``: the
    reason as ``type``, the path as ``field``), so a client reads ours as it reads a Kubernetes field error. The
    API server passes a webhook's status through: the first :data:`MAX_MESSAGE_VIOLATIONS` violations (those the
    message shows), each message clipped as the status message is."""
    return [{"type": str(violation.reason), "field": one_line(violation.path),
             "message": _clip(one_line(violation.message), MAX_MESSAGE_LENGTH)}
            for violation in verdict.violations[:MAX_MESSAGE_VIOLATIONS]]


def encode_patch(patch: Sequence[PatchOperation]) -> str:
    """The patch as the API server takes it: base64 of its JSON (an operation a policy shares is encoded once).
    binascii's encoder is base64.b64encode's own, called without that Python function around it."""
    return binascii.b2a_base64(f"[{','.join(map(operation_json, patch))}]".encode(), newline=False).decode("ascii")


def _completed(manifest: Mapping[str, Any] | None, name: str, namespace: str) -> Mapping[str, Any] | None:
    return None if manifest is None else completed(manifest, name, namespace)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
