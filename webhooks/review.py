"""AdmissionReview (``admission.k8s.io/v1``) in and out: the translation between the API server and a Verdict.

Pure functions: :func:`read_review` turns a request body into an :class:`AdmissionRequest` (or raises
:class:`MalformedReview`, answered with HTTP 400), :func:`response` turns a Verdict into the response body.
"""

from __future__ import annotations

import base64
import json
import json.decoder
import json.scanner
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from cardquota.core.objects import completed
from cardquota.core.verdict import MAX_WARNING_RUNES, PatchOperation, Verdict

API_VERSION = "admission.k8s.io/v1"
MAX_WARNING_LENGTH = MAX_WARNING_RUNES
"""The API server truncates longer warnings: the Verdict cuts them (and keeps the total within budget)."""
MAX_MESSAGE_LENGTH = 2048
API_SERVER_JSON_NESTING = 10_000
"""The deepest JSON the API server decodes: ``maxNestingDepth = 10000`` in sigs.k8s.io/json's
internal/golang/encoding/json/scanner.go (imported from Go 1.17's encoding/json in 2021, unchanged since), the
decoder of k8s.io/apimachinery/pkg/util/json and of the JSON serializer (whose ``maxDepth`` is 10000 too). A
Volcano Job keeps unknown fields, so an object that deep is legal and reaches the webhook."""
MAX_REVIEW_NESTING = API_SERVER_JSON_NESTING + 2
"""A review wraps the object in two levels (``{"request": {"object": …}}``): anything deeper than this cannot come
from the API server and is answered HTTP 400."""
KEPT_NESTING = 100
"""A body too deep for json.loads is read keeping values this many levels deep (no rule reads deeper than ~20:
``spec.tasks[0].template.spec.affinity.nodeAffinity…values[0]``); deeper containers are read but kept as None."""
_SHALLOW = 400
"""A body with at most this many opening brackets cannot nest deeper than that: json.loads reads it in place."""
_SAFE_RECURSION_LIMIT = 5_000
"""json.loads recurses once per level on the C stack, stopped at the recursion limit (Python ≤ 3.11) or at a fixed
C limit (3.12: ~1,500 levels; 3.13: ~10,000): up to this limit any thread's stack (≥ 2 MiB) holds the attempt."""
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_skip = cast("Callable[[str, int], re.Match[str]]", _WHITESPACE.match)  # (it always matches, maybe empty)
_SCALAR = cast("Callable[[str, int], tuple[Any, int]]", json.scanner.make_scanner(cast(Any, json.JSONDecoder())))
"""json's C scanner, used on scalars only (where it does not recurse); StopIteration where there is no value."""
_STRING = cast("Callable[[str, int], tuple[str, int]]", vars(json.decoder)["scanstring"])
"""json's C string reader: the text after an opening quote → (the string, the position after its closing quote)."""


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
    try:
        review = loads(body)
    except MalformedReview:
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


def loads(body: bytes) -> Any:
    """The body's JSON, nested as deep as the API server's decoder allows (:data:`MAX_REVIEW_NESTING`), in time
    linear in its size and without RecursionError on any Python: json.loads in place when it can (the body cannot be
    deep, or the attempt succeeds), else :func:`loads_deep`. Raises MalformedReview when it is deeper than that,
    ValueError when it is not JSON."""
    if sys.getrecursionlimit() <= _SAFE_RECURSION_LIMIT or body.count(b"[") + body.count(b"{") <= _SHALLOW:
        try:
            return json.loads(body)
        except RecursionError:  # deeper than json.loads can go here
            pass
    return loads_deep(body.decode(json.detect_encoding(body)))


def loads_deep(text: str) -> Any:
    """JSON text read without recursion: containers on an explicit stack, scalars by json's own C scanner.
    Values nested deeper than :data:`KEPT_NESTING` are read (and checked) but kept as None, so memory stays that of
    the kept part; nesting beyond :data:`MAX_REVIEW_NESTING` raises MalformedReview. About one microsecond per token
    (a 40 KiB Volcano Job nested 10,000 levels: ~10 ms); bytecode all along, so the event loop's thread gets the GIL
    in between, where json.loads would hold it for the whole body."""
    skip = _skip
    scalar = _SCALAR
    end = len(text)
    stack: list[list[Any]] = []  # [container (None when not kept), pending key, closing character]
    position = skip(text, 0).end()
    while True:
        if position >= end:
            raise ValueError(f"Expecting value: char {position}")
        opening = text[position]
        if opening == "[" or opening == "{":
            if len(stack) >= MAX_REVIEW_NESTING:
                raise MalformedReview(f"the body nests more than {MAX_REVIEW_NESTING:,} levels deep (the API server "
                                      f"decodes at most {API_SERVER_JSON_NESTING:,} in the object)")
            kept = len(stack) < KEPT_NESTING
            frame: list[Any] = [([] if opening == "[" else {}) if kept else None, None, "]" if opening == "[" else "}"]
            stack.append(frame)
            position = skip(text, position + 1).end()
            if text.startswith(frame[2], position):  # empty
                value, position = frame[0], position + 1
                stack.pop()
            elif opening == "[":
                continue
            else:
                frame[1], position = _key(text, position)
                continue
        else:
            try:
                value, position = scalar(text, position)
            except StopIteration:
                raise ValueError(f"Expecting value: char {position}") from None
        while True:  # a value is complete: into its container, then "," or the container's end
            if not stack:
                if skip(text, position).end() != end:
                    raise ValueError(f"Extra data: char {position}")
                return value
            frame = stack[-1]
            container = frame[0]
            if container is not None:
                if frame[2] == "]":
                    container.append(value)
                else:
                    container[frame[1]] = value
            position = skip(text, position).end()
            if text.startswith(",", position):
                position = skip(text, position + 1).end()
                if frame[2] == "}":
                    frame[1], position = _key(text, position)
                break
            if not text.startswith(frame[2], position):
                raise ValueError(f"Expecting ',' or {frame[2]!r}: char {position}")
            value, position = container, position + 1
            stack.pop()


def _key(text: str, position: int) -> tuple[str, int]:
    """An object's key and the position after its colon."""
    if not text.startswith('"', position):
        raise ValueError(f"Expecting property name enclosed in double quotes: char {position}")
    key, position = _STRING(text, position + 1)
    position = _skip(text, position).end()
    if not text.startswith(":", position):
        raise ValueError(f"Expecting ':' delimiter: char {position}")
    return key, _skip(text, position + 1).end()


def response(uid: str, verdict: Verdict, *, with_patch: bool) -> dict[str, Any]:
    """The AdmissionReview answering ``uid``: 403 and the message on denial, warnings (already within the API
    server's budget: see :func:`cardquota.core.verdict.within_budget`), and the JSON patch."""
    answer: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        answer["status"] = {"code": 403, "reason": "Forbidden", "message": _clip(verdict.message, MAX_MESSAGE_LENGTH)}
    if verdict.warnings:
        answer["warnings"] = list(verdict.warnings)
    if with_patch and verdict.allowed and verdict.patch:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = encode_patch(verdict.patch)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": answer}


def encode_patch(patch: Sequence[PatchOperation]) -> str:
    return base64.b64encode(json.dumps([dict(op) for op in patch], separators=(",", ":")).encode()).decode("ascii")


def _completed(manifest: Mapping[str, Any] | None, name: str, namespace: str) -> Mapping[str, Any] | None:
    return None if manifest is None else completed(manifest, name, namespace)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
