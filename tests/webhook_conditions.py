"""Which of cardquota's webhooks the API server calls for a write, as it decides it: the webhook configurations of
manifests/base/webhooks.yaml, their ``rules`` (scope, API group, version, resource, subresource, operation) and
their ``matchConditions`` (CEL, evaluated here with cel-python, their runtime cost counted as cel-go counts it by
tests/cel_cost.py). One reading for the unit tests and the admission
stand-in of the integration tests (tests/admission_proxy.py).

What the API server does (k8s.io/apiserver pkg/admission/plugin/webhook/matchconditions/matcher.go, ``Match``,
Kubernetes v1.34): every condition is evaluated over ``object`` (null on DELETE), ``oldObject`` (null on CREATE) and
``request``, each within a cost limit and all within a budget; a condition that is false skips the webhook whatever
the others gave; when none is false but one failed to evaluate (a missing field, its cost limit), the request is
refused under ``failurePolicy: Fail`` and the webhook skipped under ``Ignore``; the budget running out is such a
failure whatever the other conditions gave. A rule that names ``queues`` matches the resource, never its
``queues/status`` subresource (k8s.io/apiserver pkg/admission/plugin/webhook/predicates/rules/rules.go,
``resource``)."""

from __future__ import annotations

import enum
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import cel_cost
import celpy
import celpy.evaluation
import yaml
from cel_cost import Meter, OverLimit, Unmetered, cel_equal
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

REPO = Path(__file__).resolve().parents[1]
WEBHOOKS_FILE = REPO / "manifests" / "base" / "webhooks.yaml"
_CEL = celpy.Environment()
T = TypeVar("T")


class Decision(enum.Enum):
    CALL = "call"
    """Every condition held: the webhook is called."""
    SKIP = "skip"
    """A condition was false (or one failed under failurePolicy Ignore): the write goes on without the webhook."""
    REFUSE = "refuse"
    """A condition failed to evaluate under failurePolicy Fail: the API server refuses the write."""


def configuration_documents() -> list[dict[str, Any]]:
    """The webhook configurations as shipped (kind, metadata.name, webhooks)."""
    return [d for d in yaml.safe_load_all(WEBHOOKS_FILE.read_text()) if d]


def configurations() -> dict[str, list[dict[str, Any]]]:
    """The webhooks of each configuration kind (Validating..., Mutating...) as shipped."""
    return {document["kind"]: list(document["webhooks"]) for document in configuration_documents()}


def validating_webhooks() -> list[dict[str, Any]]:
    return configurations()["ValidatingWebhookConfiguration"]


def mutating_webhooks() -> list[dict[str, Any]]:
    return configurations()["MutatingWebhookConfiguration"]


def all_webhooks() -> list[dict[str, Any]]:
    found = configurations()
    return [*found["ValidatingWebhookConfiguration"], *found["MutatingWebhookConfiguration"]]


def matching_rules(hook: Mapping[str, Any], group: str, resource: str, operation: str,
                   subresource: str = "", *, version: str | None = None, namespace: str | None = None) -> bool:
    """Whether one of the hook's rules matches the request (k8s.io/apiserver
    pkg/admission/plugin/webhook/predicates/rules/rules.go, ``Matcher.Matches``, v1.34): its scope, operation,
    group, version and resource (``*`` matching any; ``queues`` never ``queues/status``, ``queues/*`` both's
    subresources). ``version``/``namespace`` None: not checked (the request's version, or whether it is namespaced,
    is not known to the caller)."""
    return any(_rule_matches(rule, group, resource, operation, subresource, version, namespace)
               for rule in hook["rules"])


def _rule_matches(rule: Mapping[str, Any], group: str, resource: str, operation: str, subresource: str,
                  version: str | None, namespace: str | None) -> bool:
    def listed(items: Any, wanted: str) -> bool:
        return "*" in (items or []) or wanted in (items or [])
    if not (listed(rule.get("operations"), operation) and listed(rule.get("apiGroups"), group)):
        return False
    if version is not None and not listed(rule.get("apiVersions"), version):
        return False
    scope = rule.get("scope", "*")
    if namespace is not None and scope != "*":
        is_namespace = group == "" and resource == "namespaces"
        if scope == "Namespaced" and (is_namespace or not namespace):
            return False
        if scope == "Cluster" and not (is_namespace or not namespace):
            return False
    for named in rule.get("resources") or []:
        name, _, sub = named.partition("/")
        if name in ("*", resource) and sub in ("*", subresource):
            return True
    return False


def _equality(negated: bool) -> Any:
    def compare(a: Any, b: Any) -> Any:
        for value in (a, b):
            if isinstance(value, CELEvalError):
                return value  # an operand that failed (a missing field) fails the comparison, as in cel-go
        return celtypes.BoolType(cel_equal(a, b) is not negated)
    return compare


_EQUALITY = {"_==_": _equality(negated=False), "_!=_": _equality(negated=True)}


@cache
def _program(expression: str) -> Any:
    """The expression compiled once. An expression cel-python cannot compile is a fault of the test setup, raised
    as is: the API server refuses a webhook configuration whose condition does not compile
    (k8s.io/kubernetes pkg/apis/admissionregistration/validation, ``validateMatchConditions``)."""
    return _CEL.program(_CEL.compile(expression), functions=_EQUALITY)


# ------------------------------------------------------------------------------------------------- cost

PER_CALL_LIMIT = 1_000_000
"""What one expression may spend: ``cel.CostLimit(celconfig.PerCallLimit)`` (k8s.io/apiserver
pkg/cel/environment/base.go, pkg/apis/cel/config.go ``PerCallLimit``, v1.34)."""
MATCH_CONDITIONS_BUDGET = 2_500_000
"""What a webhook's conditions may spend together for one request (``RuntimeCELCostBudgetMatchConditions``,
k8s.io/apiserver pkg/apis/cel/config.go, v1.34)."""
COST_LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"
"""cel-go's error when an expression passes its limit (interpreter/runtimecost.go ``Observe``, v0.26.0)."""
OUT_OF_BUDGET_MESSAGE = "validation failed due to running out of cost budget, no further validation rules will be run"
"""The API server's error when the conditions together pass the budget (k8s.io/apiserver
pkg/admission/plugin/cel/activation.go, ``Evaluate``, v1.34)."""


# ------------------------------------------------------------------------------------------------- conditions


@dataclass(frozen=True)
class Outcome:
    """What the dispatcher makes of a webhook's matchConditions (k8s.io/apiserver
    pkg/admission/plugin/webhook/matchconditions/matcher.go, ``Match``, v1.34)."""

    matches: bool
    error: str = ""
    """Set when the request is to be refused (failurePolicy Fail): the conditions' errors as the API server
    aggregates them (k8s.io/apimachinery pkg/util/errors ``aggregate.Error``: one error as is, several as
    ``[a, b]``)."""


def review_request(*, operation: str, user: str, name: str = "", namespace: str = "", group: str = "",
                   version: str = "", resource: str = "", kind: str = "", subresource: str = "",
                   dry_run: bool = False) -> dict[str, Any]:
    """``request`` as a condition sees it: the AdmissionRequest the webhook would be sent, without the objects
    (k8s.io/apiserver pkg/admission/plugin/cel/activation.go, ``CreateAdmissionRequest``)."""
    return {"kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource}, "subResource": subresource,
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "requestSubResource": subresource, "name": name, "namespace": namespace, "operation": operation,
            "userInfo": {"username": user}, "dryRun": dry_run}


def evaluate_conditions(hook: Mapping[str, Any], new: Any, old: Any, request: Mapping[str, Any], *,
                        per_call_limit: int = PER_CALL_LIMIT, budget: int = MATCH_CONDITIONS_BUDGET) -> Outcome:
    """:func:`conditions_outcome`, again on a thread with a deep stack when the caller's is too shallow: cel-python
    converts and compares objects recursively, and an object nested as deep as the API server accepts (its JSON
    decoder stops at 10,000 levels, sigs.k8s.io/json) raises RecursionError on an ordinary stack, where cel-go,
    which converts lazily, just evaluates. What still fails there is an evaluation error, through failurePolicy."""
    try:
        return conditions_outcome(hook, new, old, request, per_call_limit=per_call_limit, budget=budget)
    except RecursionError:
        pass
    return on_deep_stack(lambda: conditions_outcome(hook, new, old, request, per_call_limit=per_call_limit,
                                                    budget=budget, deep_stack=True))


def on_deep_stack(function: Callable[[], T]) -> T:
    """``function()`` on a thread whose stack and recursion limit hold what Python's recursive converters (json,
    cel-python) need for an object 10,000 levels deep; its exception, if any, raised here."""
    found: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            found.append(function())
        except BaseException as error:  # handed to the caller's thread below
            failed.append(error)

    with _DEEP:
        previous_stack, previous_limit = threading.stack_size(_DEEP_STACK), sys.getrecursionlimit()
        try:
            sys.setrecursionlimit(max(previous_limit, _DEEP_RECURSION))
            worker = threading.Thread(target=run, name="deep-stack")
            worker.start()
            worker.join()
        finally:
            threading.stack_size(previous_stack)
            sys.setrecursionlimit(previous_limit)
    if failed:
        raise failed[0]
    return found[0]


_TOO_DEEP = "the object is nested too deeply for the stand-in's CEL evaluator"
_DEEP = threading.Lock()
_DEEP_STACK = 512 * 1024 * 1024
_DEEP_RECURSION = 200_000


def conditions_outcome(hook: Mapping[str, Any], new: Any, old: Any, request: Mapping[str, Any], *,
                       per_call_limit: int = PER_CALL_LIMIT, budget: int = MATCH_CONDITIONS_BUDGET,
                       deep_stack: bool = False) -> Outcome:
    """The hook's conditions over one request, as the API server evaluates them (matcher.go ``Match``, over
    pkg/admission/plugin/cel/condition.go ``ForInput`` and activation.go ``Evaluate``, v1.34): in order, each
    within its own cost limit and all within the budget. A condition that is false skips the webhook whatever the
    others gave; one that fails to evaluate (a missing field, a type cel-python cannot compare, its cost limit)
    counts as an error; the budget running out stops the evaluation, the conditions already false included. Errors
    with no false condition: Fail refuses the request, Ignore skips the webhook. An expression the meter does not
    model (:class:`cel_cost.Unmetered`) gets no cost limit, and from it on the budget is not counted: what cel-go
    spends there is not known."""
    try:
        activation = {"object": json_to_cel(new), "oldObject": json_to_cel(old),
                      "request": json_to_cel(dict(request))}
    except RecursionError:
        if not deep_stack:
            raise
        return _failed(hook, _TOO_DEEP)
    errors: list[str] = []
    false = False
    remaining: int | None = budget
    for condition in hook.get("matchConditions") or []:
        expression = condition["expression"]
        meter = Meter(limit=per_call_limit)
        result: Any
        try:
            try:
                cel_cost.evaluate(expression, activation, meter=meter)
            except Unmetered:
                remaining = None  # what cel-go spends is not known here: no limit rather than a wrong one
            result = _program(expression).evaluate(activation)
        except OverLimit:
            result = CELEvalError(COST_LIMIT_MESSAGE)
        except CELEvalError as error:
            result = error
        except RecursionError:
            if not deep_stack:
                raise
            result = CELEvalError(_TOO_DEEP)
        except Exception as error:  # any failure inside cel-python is an evaluation error in cel-go
            result = CELEvalError(str(error) or type(error).__name__)
        if remaining is not None:
            if meter.cost > remaining:
                return _failed(hook, OUT_OF_BUDGET_MESSAGE)
            remaining -= meter.cost
        if isinstance(result, CELEvalError):
            errors.append(f"expression '{expression}' resulted in error: {_message(result)}")
        elif not isinstance(result, celtypes.BoolType):
            errors.append(f"expression '{expression}' resulted in error: no such overload")
        elif not bool(result):
            false = True
    if false:
        return Outcome(matches=False)
    if errors:
        return _failed(hook, _aggregate(errors))
    return Outcome(matches=True)


def _failed(hook: Mapping[str, Any], error: str) -> Outcome:
    """Fail (the default, k8s.io/kubernetes pkg/apis/admissionregistration/v1/defaults.go) refuses, Ignore
    skips."""
    return Outcome(matches=False, error=error if hook.get("failurePolicy", "Fail") == "Fail" else "")


_MISSING_KEY = re.compile(r"^no such member in mapping: '(.*)'$")


def _message(error: CELEvalError) -> str:
    """The error as cel-go words the common one (a missing map key: ``no such key: annotations``,
    common/types/map.go), else as cel-python does."""
    text = str(error.args[0]) if error.args else "evaluation error"
    missing = _MISSING_KEY.match(text)
    return f"no such key: {missing.group(1)}" if missing else text


def _aggregate(errors: list[str]) -> str:
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def decide(hook: Mapping[str, Any], new: Any, old: Any, *, operation: str, user: str = "alice") -> Decision:
    """What the API server does with the hook's matchConditions for one write (the rules already matched)."""
    outcome = evaluate_conditions(hook, new, old, review_request(operation=operation, user=user))
    if outcome.error:
        return Decision.REFUSE
    return Decision.CALL if outcome.matches else Decision.SKIP


def conditions_hold(hook: Mapping[str, Any], new: Any, old: Any, user: str) -> bool:
    """Whether the hook is called for the write (CREATE without ``old``, else UPDATE)."""
    return decide(hook, new, old, operation="UPDATE" if old is not None else "CREATE", user=user) is Decision.CALL
