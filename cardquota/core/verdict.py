"""The answer of an admission policy: allowed or not, why, warnings, and the JSON Patch that mutates the object."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from cardquota.core import keys
from cardquota.core.errors import one_line
from cardquota.core.jsontypes import MAPPING_TYPES, SEQUENCE_TYPES
from cardquota.core.violations import Violation

MAX_MESSAGE_VIOLATIONS = 5
"""A denial message lists at most this many violations, then says how many more there are."""
MAX_WARNINGS_RUNES = 4096
"""What the API server shows whole: the warnings of one request, all of them together, up to this many runes.

Its recorder (``recorder.AddWarning`` in k8s.io/apiserver/pkg/endpoints/filters/warning.go, v0.32 / Kubernetes
1.32; ``truncateAtTotalRunes``) writes each new warning whole, repeats dropped, while the request's total stays
within 4,096 runes. The first warning that would pass it switches the request to truncating: every warning recorded
so far is written again cut to :data:`MAX_WARNING_RUNES` runes (cut, with no mark), later ones are cut too, and once
the total has reached 4,096 the rest are dropped. The total is the request's, not a webhook's: the API server's
own warnings (deprecated API versions, unknown fields) and every other webhook's (the admission dispatchers add
each response's warnings to the same recorder: ``warning.AddWarning`` in
k8s.io/apiserver/pkg/admission/plugin/webhook/validating/dispatcher.go and mutating/dispatcher.go) count in it."""
MAX_WARNING_RUNES = 256
"""What the API server keeps of each warning once a request's warnings pass :data:`MAX_WARNINGS_RUNES`
(``truncateItemRunes``, same file): when ours alone would pass it, we cut each to this ourselves, visibly (``…``)."""


class PatchOperation(TypedDict, total=False):
    """One RFC 6902 operation. ``value`` is absent for ``remove``."""

    op: str
    path: str
    value: Any


def operation_json(operation: PatchOperation) -> str:
    """The operation as compact JSON: remembered for a shared operation (:class:`SharedOperations`), else encoded
    now (what ``json.dumps`` gives, with no spaces)."""
    remembered = SHARED_OPERATIONS.json_of(operation)
    return remembered if remembered is not None else _compact_json(operation)


def _compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


class SharedOperations:
    """Patch operations that many verdicts carry, each built once per key and never changed afterwards, with its
    JSON text (encoding a node-affinity operation costs ~10 µs, more than the rest of a Pod's answer).

    A bounded table (emptied when full): an operation handed out stays valid after that, it is only no longer
    shared. The JSON of an operation is found by its identity, which is sound because the table holds the
    operation itself: no other object can have its id while it is in the table."""

    __slots__ = ("_by_key", "_json_by_id", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_key: dict[Hashable, PatchOperation] = {}
        self._json_by_id: dict[int, tuple[PatchOperation, str]] = {}

    def get(self, key: Hashable, build: Callable[[], PatchOperation]) -> PatchOperation:
        """The operation for ``key``, built by ``build`` the first time (``key`` must say everything it depends
        on). Callers never change it."""
        found = self._by_key.get(key)
        if found is not None:
            return found
        if len(self._by_key) >= self.limit:
            self._by_key.clear()
            self._json_by_id.clear()
        operation = build()
        self._by_key[key] = operation
        self._json_by_id[id(operation)] = (operation, _compact_json(operation))
        return operation

    def json_of(self, operation: PatchOperation) -> str | None:
        entry = self._json_by_id.get(id(operation))
        return entry[1] if entry is not None and entry[0] is operation else None

    def __len__(self) -> int:
        return len(self._by_key)


SHARED_OPERATIONS = SharedOperations(1_024)
"""The shared operations of every policy (keys name their policy): a few per card name and catalog."""


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""
    """One readable line: empty when allowed, every violation (up to a few) when denied."""
    violations: tuple[Violation, ...] = ()
    warnings: tuple[str, ...] = ()
    """Within the API server's budget, whoever builds the verdict: see :func:`within_budget`."""
    patch: tuple[PatchOperation, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "warnings", within_budget(self.warnings))

    def as_json(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "message": self.message,
            "violations": [{"path": v.path, "reason": str(v.reason), "message": v.message} for v in self.violations],
            "warnings": list(self.warnings),
            "patch": [dict(op) for op in self.patch],
        }


def allow(warnings: Iterable[str] = (), patch: Iterable[PatchOperation] = ()) -> Verdict:
    if type(warnings) in SEQUENCE_TYPES and type(patch) in SEQUENCE_TYPES and not warnings and not patch:
        return _ALLOWED  # most verdicts (a Verdict is immutable: one serves them all)
    return Verdict(allowed=True, warnings=tuple(one_line(w) for w in warnings), patch=tuple(patch))


def deny(violations: Sequence[Violation], warnings: Iterable[str] = ()) -> Verdict:
    """A denial whose message lists the violations, each as ``field path: message``; the API server's budget for
    a message is small, so after :data:`MAX_MESSAGE_VIOLATIONS` it counts the rest ("and 3 more problems")."""
    shown = [str(violation) for violation in violations[:MAX_MESSAGE_VIOLATIONS]]
    more = len(violations) - len(shown)
    if more > 0:
        shown.append(f"and {more} more problem{'s' if more > 1 else ''}")
    return Verdict(
        allowed=False,
        message=one_line("; ".join(shown)),
        violations=tuple(violations),
        warnings=tuple(one_line(w) for w in warnings),
    )


def decide(violations: Sequence[Violation], warnings: Iterable[str] = (),
           patch: Iterable[PatchOperation] = ()) -> Verdict:
    """Denied when there is any violation (then no patch), else allowed with the warnings and patch."""
    return deny(violations, warnings) if violations else allow(warnings, patch)


def pointer(*segments: str | int) -> str:
    """An RFC 6901 JSON Pointer: ``pointer("metadata", "annotations", "volcano.sh/card.quota")``."""
    return "".join("/" + str(segment).replace("~", "~0").replace("/", "~1") for segment in segments)


def set_annotation(manifest: dict[str, Any] | Any, name: str, value: str) -> list[PatchOperation]:
    """Operations that set one annotation, creating ``metadata.annotations`` when the object has none."""
    metadata = manifest.get("metadata") or {}
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        return [PatchOperation(op="add", path=pointer("metadata", "annotations"), value={name: value})]
    op = "replace" if name in annotations else "add"
    return [PatchOperation(op=op, path=pointer("metadata", "annotations", name), value=value)]


def describe_operation(operation: PatchOperation) -> str:
    """What a patch operation of the policies adds, for people (``cardquota check``'s table; ``-o json`` keeps the
    RFC 6902 operation): ``node affinity → nodes whose nvidia.com/gpu.product is NVIDIA-H100-80GB-HBM3`` (``is A or
    B, preferring A`` for alternatives), ``scheduling gate cardquota.io/card-quota``, ``volcano.sh/card.request
    {"A100":8} (derived from the tasks)``, ``volcano.sh/card.quota in canonical form``; any other operation as
    ``<op> <path>``."""
    steps = [step.replace("~1", "/").replace("~0", "~") for step in str(operation.get("path", "")).split("/")[1:]]
    value = operation.get("value")
    if steps == ["spec", "affinity"] and isinstance(value, MAPPING_TYPES):
        said = _affinity_said(value)
        if said:
            return f"node affinity → {said}"
    if steps[:2] == ["spec", "schedulingGates"]:
        gates = value if isinstance(value, SEQUENCE_TYPES) else [value]
        names = [str(gate.get("name")) for gate in gates if isinstance(gate, MAPPING_TYPES)]
        if names:
            return f"scheduling gate{'s' if len(names) > 1 else ''} {', '.join(names)}"
    annotations: dict[str, object] = {}
    if steps == ["metadata", "annotations"] and isinstance(value, MAPPING_TYPES):
        annotations = {str(name): text for name, text in value.items()}
    elif steps[:2] == ["metadata", "annotations"] and len(steps) == 3:
        annotations = {steps[2]: value}
    if annotations and operation.get("op") in ("add", "replace"):
        return "; ".join(_annotation_said(name, text) for name, text in annotations.items())
    return f"{operation.get('op')} {operation.get('path')}"


def _annotation_said(name: str, value: object) -> str:
    if name == keys.CARD_REQUEST:
        return f"{name} {value} (derived from the tasks)"
    if name == keys.CARD_QUOTA:
        return f"{name} in canonical form"
    return f"annotation {name}: {value}"


def _affinity_said(affinity: Any) -> str:
    """``nodes whose <label> is A or B, preferring A``: the product term a card pod's affinity requires, and the
    preferred one of highest weight."""
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, MAPPING_TYPES) else None
    if not isinstance(node_affinity, MAPPING_TYPES):
        return ""
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms") if isinstance(required, MAPPING_TYPES) else None
    products = [expression for term in (terms if isinstance(terms, SEQUENCE_TYPES) else [])
                if isinstance(term, MAPPING_TYPES)
                for expression in term.get("matchExpressions") or []
                if isinstance(expression, MAPPING_TYPES) and str(expression.get("key", "")).endswith(".product")
                and expression.get("operator") == "In"]
    if not products:
        return ""
    label, values = str(products[-1].get("key")), [str(value) for value in products[-1].get("values") or []]
    said = f"nodes whose {label} is {' or '.join(values)}"
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    weighted = sorted(((term.get("weight", 0), expression.get("values") or [])
                       for term in (preferred if isinstance(preferred, SEQUENCE_TYPES) else [])
                       if isinstance(term, MAPPING_TYPES) and isinstance(term.get("preference"), MAPPING_TYPES)
                       for expression in term["preference"].get("matchExpressions") or []
                       if isinstance(expression, MAPPING_TYPES) and expression.get("key") == label),
                      key=lambda pair: -pair[0] if isinstance(pair[0], int) else 0)
    if len(values) > 1 and weighted and weighted[0][1]:
        said += f", preferring {weighted[0][1][0]}"
    return said


def within_budget(warnings: Iterable[str]) -> tuple[str, ...]:
    """The warnings as the API server will show them all (see :data:`MAX_WARNINGS_RUNES`): each on one line,
    repeats dropped (the API server drops them too). When they fit in :data:`MAX_WARNINGS_RUNES` together they are
    kept whole, however long one is: so does the API server, unless other warnings of the request fill its budget
    (then it cuts each of them to :data:`MAX_WARNING_RUNES`, with no mark). Else each is cut to
    :data:`MAX_WARNING_RUNES` (with "…"), as the API server would, and they are :data:`MAX_WARNINGS_RUNES` in all:
    policies list the most useful first, those that fit are kept in order and a last warning says how many were left
    out. Linear in the warnings' length; idempotent."""
    if not warnings:  # most verdicts: nothing to check
        return ()
    warnings = warnings if isinstance(warnings, tuple) else tuple(warnings)  # (read twice when too long)
    whole = list(dict.fromkeys(text for text in map(_line, warnings) if text))
    if sum(map(len, whole)) <= MAX_WARNINGS_RUNES:
        return tuple(whole)
    texts = list(dict.fromkeys(text for text in map(_cut, warnings) if text))
    kept, left_out = _fill(texts, MAX_WARNINGS_RUNES)
    if not left_out:
        return tuple(kept)
    kept, left_out = _fill(texts, MAX_WARNINGS_RUNES - _LEFT_OUT_ROOM)
    return (*kept, f"{left_out} more warning{'s' if left_out > 1 else ''} left out: the API server shows at most "
                   f"{MAX_WARNINGS_RUNES:,} characters of warnings")


_LEFT_OUT_ROOM = 100
"""Room kept for the last warning, the one that counts those left out."""


def _fill(texts: list[str], budget: int) -> tuple[list[str], int]:
    kept = []
    for text in texts:
        if len(text) <= budget:
            kept.append(text)
            budget -= len(text)
    return kept, len(texts) - len(kept)


def _line(text: str) -> str:
    """One line; a text longer than :data:`MAX_WARNINGS_RUNES` only in part (escaping only lengthens it: it cannot
    be kept whole either way)."""
    return one_line(text[: MAX_WARNINGS_RUNES + 1]) if len(text) > MAX_WARNINGS_RUNES else one_line(text)


def _cut(text: str) -> str:
    """One line (escapes are at most 10 characters for one) of at most :data:`MAX_WARNING_RUNES`."""
    text = one_line(text[: 4 * MAX_WARNING_RUNES]) if len(text) > MAX_WARNING_RUNES else one_line(text)
    return text if len(text) <= MAX_WARNING_RUNES else text[: MAX_WARNING_RUNES - 1] + "…"


_ALLOWED = Verdict(allowed=True)
"""What :func:`allow` gives with no warnings and no patch."""
