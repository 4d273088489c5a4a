"""Which of cardquota's webhooks the API server calls for a write, as it decides it: the webhook configurations of
manifests/base/webhooks.yaml, their ``rules`` (API group, resource, subresource, operation) and their
``matchConditions`` (CEL, evaluated here with cel-python). One reading for the unit tests and the admission proxy of
the integration tests.

What the API server does (k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions/matcher.go, ``Match``,
Kubernetes v1.31): every condition is evaluated over ``object`` (null on DELETE), ``oldObject`` (null on CREATE) and
``request``; a condition that is false skips the webhook whatever the others gave; when none is false but one failed
to evaluate (a missing field, the cost budget), the request is refused under ``failurePolicy: Fail`` and the webhook
skipped under ``Ignore``. A rule that names ``queues`` matches the resource, never its ``queues/status``
subresource (k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules/rules.go, ``resource``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import yaml
from celpy import celtypes

REPO = Path(__file__).resolve().parents[1]
WEBHOOKS_FILE = REPO / "manifests" / "base" / "webhooks.yaml"
_CEL = celpy.Environment()


class Decision(enum.Enum):
    CALL = "call"
    """Every condition held: the webhook is called."""
    SKIP = "skip"
    """A condition was false (or one failed under failurePolicy Ignore): the write goes on without the webhook."""
    REFUSE = "refuse"
    """A condition failed to evaluate under failurePolicy Fail: the API server refuses the write."""


def configurations() -> dict[str, list[dict[str, Any]]]:
    """The webhooks of each configuration kind (Validating..., Mutating...) as shipped."""
    documents = [d for d in yaml.safe_load_all(WEBHOOKS_FILE.read_text()) if d]
    return {document["kind"]: list(document["webhooks"]) for document in documents}


def validating_webhooks() -> list[dict[str, Any]]:
    return configurations()["ValidatingWebhookConfiguration"]


def all_webhooks() -> list[dict[str, Any]]:
    found = configurations()
    return [*found["ValidatingWebhookConfiguration"], *found["MutatingWebhookConfiguration"]]


def matching_rules(hook: Mapping[str, Any], group: str, resource: str, operation: str,
                   subresource: str = "") -> bool:
    """Whether one of the hook's rules names this group, resource (with its subresource) and operation."""
    wanted = f"{resource}/{subresource}" if subresource else resource
    return any(group in rule["apiGroups"] and wanted in rule["resources"]
               and (operation in rule["operations"] or "*" in rule["operations"]) for rule in hook["rules"])


_NUMBERS = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


def cel_equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality, as the API server evaluates ``==`` and ``!=`` (cel-spec, "Equality"; cel-go
    since v0.10, e.g. common/types/int.go ``Int.Equal``, long before any Kubernetes with matchConditions): values of
    different types are unequal rather than an error, numbers compare by value across int, uint and double, lists
    and maps element by element. cel-python 0.5 raises "no such overload" instead, which would turn a spec whose
    int-or-string field changed form (``2`` to ``"2"``) into a condition that cannot be evaluated."""
    if isinstance(a, celtypes.BoolType) or isinstance(b, celtypes.BoolType):
        return type(a) is type(b) and bool(a) == bool(b)
    if isinstance(a, _NUMBERS) and isinstance(b, _NUMBERS):
        return float(a) == float(b) if isinstance(a, celtypes.DoubleType) or isinstance(b, celtypes.DoubleType) \
            else int(a) == int(b)
    if isinstance(a, celtypes.ListType) and isinstance(b, celtypes.ListType):
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, celtypes.MapType) and isinstance(b, celtypes.MapType):
        return len(a) == len(b) and all(key in b and cel_equal(value, b[key]) for key, value in a.items())
    return type(a) is type(b) and bool(a == b)


def _equality(negated: bool) -> Any:
    def compare(a: Any, b: Any) -> Any:
        for value in (a, b):
            if isinstance(value, celpy.CELEvalError):
                return value  # an operand that failed (a missing field) fails the comparison, as in cel-go
        return celtypes.BoolType(cel_equal(a, b) is not negated)
    return compare


_EQUALITY = {"_==_": _equality(negated=False), "_!=_": _equality(negated=True)}


@cache
def _program(expression: str) -> Any:
    return _CEL.program(_CEL.compile(expression), functions=_EQUALITY)


def decide(hook: Mapping[str, Any], new: Any, old: Any, *, operation: str, user: str = "alice") -> Decision:
    """What the API server does with the hook's matchConditions for one write (the rules already matched)."""
    activation = {"object": celpy.json_to_cel(new), "oldObject": celpy.json_to_cel(old),
                  "request": celpy.json_to_cel({"operation": operation, "userInfo": {"username": user}})}
    failed = False
    for condition in hook.get("matchConditions") or []:
        try:
            result = _program(condition["expression"]).evaluate(activation)
        except celpy.CELEvalError:
            failed = True
            continue
        if isinstance(result, celpy.CELEvalError):
            failed = True
        elif not bool(result):
            return Decision.SKIP
    if failed:
        return Decision.REFUSE if hook["failurePolicy"] == "Fail" else Decision.SKIP
    return Decision.CALL


def conditions_hold(hook: Mapping[str, Any], new: Any, old: Any, user: str) -> bool:
    """Whether the hook is called for the write (CREATE without ``old``, else UPDATE)."""
    return decide(hook, new, old, operation="UPDATE" if old is not None else "CREATE", user=user) is Decision.CALL
