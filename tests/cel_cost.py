"""The runtime cost of a CEL expression as the Kubernetes v1.34 API server counts it for matchConditions.

Kubernetes v1.34 (k8s.io/apiserver v0.34.0, go.mod) vendors github.com/google/cel-go v0.26.0. Its cost tracker
(interpreter/runtimecost.go, ``costTrackerFactory.Observe`` and ``CostTracker.costCall``, v0.26.0) charges each
evaluated step of the program the planner built (interpreter/planner.go), and Kubernetes builds that program with
``cel.EvalOptions(cel.OptOptimize, cel.OptTrackCost)``, ``cel.CostLimit(celconfig.PerCallLimit)`` and
``interpreter.PresenceTestHasCost(false)`` (k8s.io/apiserver pkg/cel/environment/base.go, ``baseOptsWithoutStrictCost``,
v0.34.0). Its own estimator (pkg/cel/library/cost.go ``CostEstimator.CallCost``) prices only Kubernetes' library
functions; the standard ones below fall through to cel-go's defaults.

This module walks cel-python's parse tree the way cel-go's interpreter walks its plan — left to right, ``&&`` and
``||`` stopping at the first decisive side, a comprehension stopping when its loop condition turns false — and
charges what the tracker charges. Values are computed here only to take those decisions and measure sizes; what a
condition evaluates to is still cel-python's answer (tests/webhook_conditions.py). One thing cel-go leaves to
chance: it iterates a map in Go's random order (common/types/map.go, ``stringIfaceMapAccessor.Iterator``, over the
``map[string]any`` of k8s.io/apiserver pkg/admission/plugin/cel/condition.go ``objectToResolveVal``), so an
``exists`` that finds a key costs what it costs to reach it; here the keys come in the object's own order, which is
one of the orders cel-go may take.

What the walker does not model (a function other than those below, message construction, ``.``-qualified names,
two-variable comprehensions) raises :class:`Unmetered`: the caller then applies no cost limit to that expression
rather than a wrong one."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import celbytes, celstr

_CEL = celpy.Environment()

# ------------------------------------------------------------------------------------------------- constants

SELECT_AND_IDENT_COST = 1
"""An identifier or a field selection (cel-go common/cost.go ``SelectAndIdentCost``, v0.26.0); charged once per
attribute and once per qualifier applied (interpreter/runtimecost.go ``Observe``: ``InterpretableAttribute``,
``ConstantQualifier`` and ``Qualifier`` cases)."""
LIST_CREATE_BASE_COST = 10
"""A list literal that is not constant (common/cost.go ``ListCreateBaseCost``); a constant one is folded into a
constant by ``OptOptimize`` (interpreter/decorators.go ``maybeBuildListLiteral``) and costs nothing."""
MAP_CREATE_BASE_COST = 30
"""A map literal that is not constant (common/cost.go ``MapCreateBaseCost``; decorators.go
``maybeBuildMapLiteral``)."""
STRING_TRAVERSAL_COST_FACTOR = 0.1
"""Per rune or byte of a string traversed (common/cost.go ``StringTraversalCostFactor``)."""
REGEX_STRING_LENGTH_COST_FACTOR = 0.25
"""Per character of a regular expression (common/cost.go ``RegexStringLengthCostFactor``)."""
CALL_COST = 1
"""Any other call, operator or function of the standard library (runtimecost.go ``costCall``, ``default``)."""
EXISTS_LOOP_CONDITION_COST = 3
"""``exists`` checks ``@not_strictly_false(!__result__)`` before each element (parser/macro.go ``makeQuantifier``,
v0.26.0; interpreter/interpretable.go ``folder.foldIterable``): the accumulator (1), ``!`` (1) and
``@not_strictly_false`` (1)."""
ALL_LOOP_CONDITION_COST = 2
"""``all`` checks ``@not_strictly_false(__result__)``: the accumulator (1) and the call (1)."""
ACCUMULATOR_COST = 1
"""The accumulator ``__result__`` read in a step or the result (an identifier)."""


class OverLimit(Exception):
    """The expression spent more than its limit: cel-go stops it (runtimecost.go ``Observe``: ``EvalCancelledError``
    "operation cancelled: actual cost limit exceeded")."""


class Unmetered(Exception):
    """The expression uses something this model does not cost as cel-go does."""


@dataclass
class Meter:
    limit: int | None = None
    cost: int = 0

    def charge(self, units: int) -> None:
        self.cost += units
        if self.limit is not None and self.cost > self.limit:
            raise OverLimit


# ------------------------------------------------------------------------------------------------- syntax


@dataclass(frozen=True)
class Lit:
    value: Any


@dataclass(frozen=True)
class Ident:
    name: str


@dataclass(frozen=True)
class Select:
    operand: Node
    field: str


@dataclass(frozen=True)
class Index:
    operand: Node
    index: Node


@dataclass(frozen=True)
class Has:
    operand: Node
    field: str


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Node, ...]
    """The target first for a method call (``k.startsWith(p)``: ``(k, p)``), as cel-go passes it."""


@dataclass(frozen=True)
class And:
    left: Node
    right: Node


@dataclass(frozen=True)
class Or:
    left: Node
    right: Node


@dataclass(frozen=True)
class Conditional:
    condition: Node
    truthy: Node
    falsy: Node


@dataclass(frozen=True)
class ListLit:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class MapLit:
    entries: tuple[tuple[Node, Node], ...]


@dataclass(frozen=True)
class Fold:
    macro: str
    range: Node
    variable: str
    args: tuple[Node, ...]


Node = Lit | Ident | Select | Index | Has | Call | And | Or | Conditional | ListLit | MapLit | Fold
_ATTRIBUTES = (Ident, Select, Index)
"""What cel-go plans as an attribute: observed once (the root) plus once per qualifier."""
_MACROS = {"all", "exists", "exists_one", "map", "filter"}
_OPERATORS = {"relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_", "relation_ge": "_>=_",
              "relation_eq": "_==_", "relation_ne": "_!=_", "relation_in": "@in", "addition_add": "_+_",
              "addition_sub": "_-_", "multiplication_mul": "_*_", "multiplication_div": "_/_",
              "multiplication_mod": "_%_", "unary_not": "!_", "unary_neg": "-_"}


@cache
def syntax(expression: str) -> Node:
    """The expression as cel-go's parser would give it (macros expanded to folds, ``has`` a presence test)."""
    tree = _node(_CEL.compile(expression))
    _check_modelled(tree)
    return tree


def _check_modelled(node: Any) -> None:
    """Raises :class:`Unmetered` before anything is charged when a call is not one the meter prices."""
    if isinstance(node, Call) and node.function not in _FUNCTIONS:
        raise Unmetered(f"the function {node.function} is not modelled")
    if isinstance(node, tuple):
        for item in node:
            _check_modelled(item)
    elif isinstance(node, Node):
        for value in vars(node).values():
            _check_modelled(value)


def _children(tree: lark.Tree) -> list[Any]:
    return list(tree.children)


def _node(tree: Any) -> Node:
    kind = tree.data
    children = _children(tree)
    if kind == "expr":
        return _node(children[0]) if len(children) == 1 else Conditional(*(_node(c) for c in children))
    if kind in ("conditionalor", "conditionaland"):
        if len(children) == 1:
            return _node(children[0])
        return (Or if kind == "conditionalor" else And)(_node(children[0]), _node(children[1]))
    if kind in ("relation", "addition", "multiplication"):
        if len(children) == 1:
            return _node(children[0])
        operator, right = children
        return Call(_OPERATORS[operator.data], (_node(operator.children[0]), _node(right)))
    if kind == "unary":
        if len(children) == 1:
            return _node(children[0])
        return Call(_OPERATORS[children[0].data], (_node(children[1]),))
    if kind in ("member", "primary", "paren_expr"):
        return _node(children[0])
    if kind == "member_dot":
        return Select(_node(children[0]), str(children[1]))
    if kind == "member_index":
        return Index(_node(children[0]), _node(children[1]))
    if kind == "member_dot_arg":
        target, name = _node(children[0]), str(children[1])
        args = _arguments(children[2] if len(children) > 2 else None)
        if name in _MACROS:
            return _fold(name, target, args)
        return Call(name, (target, *args))
    if kind == "ident":
        return Ident(str(children[0]))
    if kind == "ident_arg":
        name = str(children[0])
        args = _arguments(children[1] if len(children) > 1 else None)
        if name == "has":
            (argument,) = args
            if not isinstance(argument, Select):
                raise Unmetered("has() of something other than a field selection")
            return Has(argument.operand, argument.field)
        return Call(name, args)
    if kind == "list_lit":
        return ListLit(_arguments(children[0] if children else None))
    if kind == "map_lit":
        values = _arguments(children[0]) if children else ()
        return MapLit(tuple(zip(values[::2], values[1::2], strict=True)))
    if kind == "literal":
        return Lit(_literal(children[0]))
    raise Unmetered(f"{kind} is not modelled")


def _arguments(tree: Any) -> tuple[Node, ...]:
    return () if tree is None else tuple(_node(child) for child in tree.children)


def _fold(macro: str, target: Node, args: tuple[Node, ...]) -> Fold:
    variable = args[0] if args else None
    if not isinstance(variable, Ident) or len(args) not in ((2, 3) if macro == "map" else (2,)):
        raise Unmetered(f"{macro} with these arguments is not modelled")
    return Fold(macro, target, variable.name, args[1:])


def _literal(token: lark.Token) -> Any:
    kind = token.type
    if kind == "FLOAT_LIT":
        return celtypes.DoubleType(token.value)
    if kind == "INT_LIT":
        return celtypes.IntType(token.value)
    if kind == "UINT_LIT":
        return celtypes.UintType(token.value[:-1])
    if kind in ("MLSTRING_LIT", "STRING_LIT"):
        return celstr(token)
    if kind == "BYTES_LIT":
        return celbytes(token)
    if kind == "BOOL_LIT":
        return celtypes.BoolType(token.value == "true")
    if kind == "NULL_LIT":
        return None
    raise Unmetered(f"literal {token.type} is not modelled")


def _constant(node: Node) -> bool:
    """Folded into a constant by ``OptOptimize``: a literal, or a list or map literal of constants."""
    if isinstance(node, Lit):
        return True
    if isinstance(node, ListLit):
        return all(_constant(item) for item in node.items)
    if isinstance(node, MapLit):
        return all(_constant(key) and _constant(value) for key, value in node.entries)
    return False


# ------------------------------------------------------------------------------------------------- values


class Error:
    """An evaluation error (its text does not matter here: cel-python gives the condition's own)."""

    def __repr__(self) -> str:
        return "Error"


ERROR = Error()
_NUMBERS = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


def size(value: Any) -> int:
    """cel-go's ``actualSize`` (runtimecost.go): the size of a string (runes), bytes, list or map; 1 for anything
    else, errors included."""
    return len(value) if isinstance(value, str | bytes | list | dict) else 1


def _traversal(length: float) -> int:
    return math.ceil(length * STRING_TRAVERSAL_COST_FACTOR)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, celtypes.BoolType):
        return "bool"
    for kind, types in (("int", celtypes.IntType), ("uint", celtypes.UintType), ("double", celtypes.DoubleType),
                        ("string", str), ("bytes", bytes), ("list", list), ("map", dict)):
        if isinstance(value, types):
            return kind
    return "other"


TYPED_VARIABLES = frozenset({"request"})
"""Variables declared with a type (k8s.io/apiserver pkg/admission/plugin/cel/compile.go ``createEnvForOpts``:
``request`` is ``BuildRequestType()``); ``object`` and ``oldObject`` are ``dyn``. The checker picks an overload
from declared types: over a typed value it is the value's own, over ``dyn`` every overload that fits stays a
candidate, and a call left with several has no overload id, so ``costCall`` charges its default."""


@dataclass
class _Scope:
    values: Mapping[str, Any]
    typed: frozenset[str]
    bound: dict[str, tuple[Any, str]] = field(default_factory=dict)
    """Comprehension variables: value and declared kind ("dyn" or a kind)."""


# ------------------------------------------------------------------------------------------------- walker


@dataclass(frozen=True)
class Evaluation:
    value: Any
    cost: int


def evaluate(expression: str, variables: Mapping[str, Any], *, limit: int | None = None,
             meter: Meter | None = None) -> Evaluation:
    """The value (cel-python's types, :data:`ERROR` for an error) and runtime cost of the expression over the
    variables (already converted with ``celpy.adapter.json_to_cel``). Raises :class:`OverLimit` past ``limit``
    (``meter.cost`` then holds the cost cel-go had counted when it stopped) and :class:`Unmetered` for what is not
    modelled."""
    meter = meter if meter is not None else Meter(limit=limit)
    walker = _Walker(meter)
    value = walker.eval(syntax(expression), _Scope(variables, TYPED_VARIABLES))
    return Evaluation(value, meter.cost)


class _Walker:
    def __init__(self, meter: Meter) -> None:
        self.charge = meter.charge

    # -- nodes

    def eval(self, node: Node, scope: _Scope) -> Any:
        if isinstance(node, Lit):
            return node.value  # a constant costs nothing (common/cost.go ConstCost)
        if isinstance(node, _ATTRIBUTES):
            return self.attribute(node, scope, observed=True)
        if isinstance(node, Has):
            return self.has(node, scope)
        if isinstance(node, And | Or):
            return self.logical(node, scope)
        if isinstance(node, Conditional):
            return self.conditional(node, scope)
        if isinstance(node, ListLit):
            items = [self.eval(item, scope) for item in node.items]
            if not _constant(node):
                self.charge(LIST_CREATE_BASE_COST)
            return next((item for item in items if item is ERROR), celtypes.ListType(items))
        if isinstance(node, MapLit):
            entries = [(self.eval(key, scope), self.eval(value, scope)) for key, value in node.entries]
            if not _constant(node):
                self.charge(MAP_CREATE_BASE_COST)
            if any(key is ERROR or value is ERROR for key, value in entries):
                return ERROR
            return celtypes.MapType(dict(entries))
        if isinstance(node, Fold):
            return self.fold(node, scope)
        return self.call(node, scope)

    def attribute(self, node: Node, scope: _Scope, *, observed: bool) -> Any:
        """An identifier with its selections and indexes: the attribute is observed once when evaluated
        (``observed``; not when resolved as a presence test's operand or a ternary's branch,
        interpreter/interpretable.go ``evalTestOnly.Eval``, attributes.go ``conditionalAttribute.Resolve``), each
        qualifier once when applied; qualifiers after one that failed are not applied (attributes.go
        ``applyQualifiers``)."""
        if isinstance(node, Ident):
            if observed:
                self.charge(SELECT_AND_IDENT_COST)
            return self.variable(node.name, scope)
        if not isinstance(node, Select | Index):
            # A selection on a computed value: a relative attribute, observed like any attribute (planner.go
            # planSelect, relativeAttr).
            value = self.eval(node, scope)
            if observed:
                self.charge(SELECT_AND_IDENT_COST)
            return value
        target = self.attribute(node.operand, scope, observed=observed)
        if target is ERROR:
            return ERROR
        if isinstance(node, Select):
            self.charge(SELECT_AND_IDENT_COST)
            return _select(target, node.field)
        if isinstance(node.index, Lit):
            self.charge(SELECT_AND_IDENT_COST)  # a constant qualifier
            key = node.index.value
        elif isinstance(node.index, _ATTRIBUTES):
            # An attribute qualifier: observed once as it qualifies (decorators.go evalWatchAttrQual), in place
            # of its own observation; its qualifiers as usual.
            key = self.attribute(node.index, scope, observed=True)
        else:
            key = self.eval(node.index, scope)  # a computed qualifier, observed as a relative attribute
            self.charge(SELECT_AND_IDENT_COST)
        return ERROR if key is ERROR else _index(target, key)

    def variable(self, name: str, scope: _Scope) -> Any:
        if name in scope.bound:
            return scope.bound[name][0]
        if name in scope.values:
            return scope.values[name]
        return ERROR

    def has(self, node: Has, scope: _Scope) -> Any:
        """``has(e.f)``: the operand resolved (not observed), then the presence test, a qualifier (1); the test
        itself costs nothing under ``PresenceTestHasCost(false)`` (runtimecost.go ``Observe``, ``evalTestOnly``)."""
        target = self.attribute(node.operand, scope, observed=False) if isinstance(node.operand, _ATTRIBUTES) \
            else self.eval(node.operand, scope)
        if target is ERROR:
            return ERROR
        self.charge(SELECT_AND_IDENT_COST)
        return celtypes.BoolType(node.field in target) if isinstance(target, dict) else ERROR

    def logical(self, node: And | Or, scope: _Scope) -> Any:
        """``&&`` and ``||`` cost nothing; the right side is evaluated only when the left does not decide
        (interpretable.go ``evalAnd.Eval``, ``evalOr.Eval``): errors are absorbed by a decisive side."""
        decisive = isinstance(node, Or)
        left = self.eval(node.left, scope)
        if _is_bool(left) and bool(left) is decisive:
            return left
        right = self.eval(node.right, scope)
        if _is_bool(right) and bool(right) is decisive:
            return right
        if _is_bool(left) and _is_bool(right):
            return celtypes.BoolType(not decisive)
        return ERROR

    def conditional(self, node: Conditional, scope: _Scope) -> Any:
        """``c ? t : f`` costs nothing itself; the branch taken is resolved as an attribute, so one that is an
        attribute is not observed as a whole, only its qualifiers (planner.go ``planCallConditional``,
        attributes.go ``conditionalAttribute.Resolve``)."""
        condition = self.eval(node.condition, scope)
        if not _is_bool(condition):
            return ERROR
        branch = node.truthy if condition else node.falsy
        if isinstance(branch, _ATTRIBUTES):
            return self.attribute(branch, scope, observed=False)
        return self.eval(branch, scope)

    # -- comprehensions

    def fold(self, node: Fold, scope: _Scope) -> Any:
        """A macro's comprehension (parser/macro.go, v0.26.0), evaluated as interpretable.go
        ``folder.foldIterable`` does: the loop condition before each element (stopping when it is false), the
        step, then the result. Per element: ``exists`` 3 + 1 + the predicate, ``all`` 2 + 1 + the predicate,
        ``exists_one`` the predicate (+ 2 when it holds), ``map`` 1 + 10 + the transform + 1, ``filter`` the
        predicate (+ 13 when it holds); the result 1 (``exists_one``: 2). The empty list a ``map`` or ``filter``
        starts from is a constant under ``OptOptimize``."""
        iterated = self.eval(node.range, scope)
        if isinstance(iterated, dict):
            elements: list[Any] = list(iterated.keys())
        elif isinstance(iterated, list):
            elements = list(iterated)
        else:
            return ERROR
        declared = "dyn" if self.kind_of(node.range, iterated, scope) == "dyn" else "typed"
        inner = _Scope(scope.values, scope.typed, dict(scope.bound))
        step = getattr(self, f"_step_{node.macro}")
        result: Any = {"all": celtypes.BoolType(True), "exists": celtypes.BoolType(False), "exists_one": 0,
                       "map": [], "filter": []}[node.macro]
        for element in elements:
            inner.bound[node.variable] = (element, declared if declared == "dyn" else _kind(element))
            go_on, result = step(node, inner, element, result)
            if not go_on:
                break
        if node.macro == "exists_one":
            self.charge(ACCUMULATOR_COST + CALL_COST)  # __result__ == 1
            return ERROR if result is ERROR else celtypes.BoolType(result == 1)
        self.charge(ACCUMULATOR_COST)
        if node.macro in ("map", "filter") and result is not ERROR:
            return celtypes.ListType(result)
        return result

    def _step_exists(self, node: Fold, scope: _Scope, _: Any, result: Any) -> tuple[bool, Any]:
        self.charge(EXISTS_LOOP_CONDITION_COST)
        if result is not ERROR and bool(result):
            return False, result
        self.charge(ACCUMULATOR_COST)  # __result__ || predicate: __result__ is not true here
        predicate = self.eval(node.args[0], scope)
        if _is_bool(predicate) and predicate:
            return True, predicate
        return True, ERROR if result is ERROR or not _is_bool(predicate) else result

    def _step_all(self, node: Fold, scope: _Scope, _: Any, result: Any) -> tuple[bool, Any]:
        self.charge(ALL_LOOP_CONDITION_COST)
        if result is not ERROR and not bool(result):
            return False, result
        self.charge(ACCUMULATOR_COST)  # __result__ && predicate: __result__ is not false here
        predicate = self.eval(node.args[0], scope)
        if _is_bool(predicate) and not predicate:
            return True, predicate
        return True, ERROR if result is ERROR or not _is_bool(predicate) else result

    def _step_exists_one(self, node: Fold, scope: _Scope, _: Any, result: Any) -> tuple[bool, Any]:
        # Loop condition ``true`` (a constant); step ``predicate ? __result__ + 1 : __result__``.
        predicate = self.eval(node.args[0], scope)
        if not _is_bool(predicate):
            return True, ERROR
        if predicate:
            self.charge(ACCUMULATOR_COST + CALL_COST)
            return True, ERROR if result is ERROR else result + 1
        return True, result

    def _step_map(self, node: Fold, scope: _Scope, element: Any, result: Any) -> tuple[bool, Any]:
        # Loop condition ``true``; step ``__result__ + [transform]``, behind ``filter ? ... : __result__`` when
        # the map has a filter.
        if len(node.args) == 2:
            kept = self.eval(node.args[0], scope)
            if not _is_bool(kept):
                return True, ERROR
            if not kept:
                return True, result
        return True, self._append(node.args[-1], scope, result)

    def _step_filter(self, node: Fold, scope: _Scope, element: Any, result: Any) -> tuple[bool, Any]:
        kept = self.eval(node.args[0], scope)
        if not _is_bool(kept):
            return True, ERROR
        if not kept:
            return True, result
        return True, self._append(Ident(node.variable), scope, result)

    def _append(self, item: Node, scope: _Scope, result: Any) -> Any:
        """``__result__ + [item]``: the accumulator (1), the list literal (10 unless constant) with its item, the
        concatenation (1)."""
        self.charge(ACCUMULATOR_COST)
        value = self.eval(ListLit((item,)), scope)
        self.charge(CALL_COST)
        return ERROR if result is ERROR or value is ERROR else [*result, *value]

    # -- calls

    def kind_of(self, node: Node, value: Any, scope: _Scope) -> str:
        """The kind the checker gives ``node``: "dyn" for what is read from a ``dyn`` variable, else the kind of
        its value (a literal, a typed variable's field, a call's result)."""
        root: Node = node
        while isinstance(root, Select | Index):
            root = root.operand
        if isinstance(root, Ident):
            declared = scope.bound[root.name][1] if root.name in scope.bound else \
                ("typed" if root.name in scope.typed else "dyn")
            return "dyn" if declared == "dyn" else _kind(value)
        if root is not node:
            return "dyn"  # a selection on a computed value
        if isinstance(node, ListLit):
            return "list"
        if isinstance(node, MapLit):
            return "map"
        if isinstance(node, Call) and node.function not in _BOOLEAN_CALLS and node.function != "size":
            return "dyn"  # arithmetic over dyn operands stays dyn; the cases below are all we need
        return "dyn" if isinstance(node, Conditional) else _kind(value)

    def call(self, node: Call, scope: _Scope) -> Any:
        if node.function == "@in" and isinstance(node.args[1], ListLit) and _constant(node.args[1]) \
                and node.args[1].items and all(_primitive(item) for item in node.args[1].items):
            # ``x in [constants]`` becomes a set membership test that is not a call (decorators.go
            # ``maybeOptimizeSetMembership``; ``Observe`` charges no case for it): the operand's cost only.
            needle = self.eval(node.args[0], scope)
            if needle is ERROR:
                return ERROR
            return celtypes.BoolType(any(cel_equal(needle, item.value) for item in node.args[1].items
                                         if isinstance(item, Lit)))
        args = [self.eval(arg, scope) for arg in node.args]
        kinds = [self.kind_of(arg, value, scope) for arg, value in zip(node.args, args, strict=True)]
        self.charge(self.call_cost(node.function, args, kinds))
        if any(arg is ERROR for arg in args):
            return ERROR
        try:
            return _FUNCTIONS[node.function](*args)
        except (TypeError, ValueError, ZeroDivisionError, IndexError, KeyError, re.error):
            return ERROR

    def call_cost(self, function: str, args: list[Any], kinds: list[str]) -> int:
        """runtimecost.go ``costCall`` (v0.26.0) for the overload the checker resolved."""
        if function in ("startsWith", "endsWith"):  # StartsWithString, EndsWithString: the receiver traversed
            return _traversal(size(args[0]))
        if function == "contains":  # ContainsString: receiver traversal times argument traversal
            return _traversal(size(args[0])) * _traversal(size(args[1]))
        if function == "matches":  # MatchesString: (1 + string) traversal times the regex length / 4
            return math.ceil((1 + size(args[0])) * STRING_TRAVERSAL_COST_FACTOR) * \
                math.ceil(size(args[1]) * REGEX_STRING_LENGTH_COST_FACTOR)
        if function in ("_==_", "_!=_"):  # Equals, NotEquals: the shorter side traversed
            return _traversal(min(size(args[0]), size(args[1])))
        if function == "@in":  # InList: the list's size; InMap (or no single overload over dyn): the default
            return size(args[1]) if kinds[1] == "list" else CALL_COST
        overload = _string_overload(kinds)
        if function in ("_<_", "_<=_", "_>_", "_>=_") and overload:  # LessString...: the shorter side
            return _traversal(min(size(args[0]), size(args[1])))
        if function == "_+_" and overload:  # AddString, AddBytes: both sides
            return _traversal(size(args[0]) + size(args[1]))
        return CALL_COST


def _string_overload(kinds: list[str]) -> bool:
    """Whether the checker resolves an ordering or ``+`` to its string (or bytes) overload: both sides of that
    kind, or one of them and the other ``dyn`` (no other overload takes a string)."""
    concrete = {kind for kind in kinds if kind != "dyn"}
    return len(concrete) == 1 and concrete <= {"string", "bytes"}


def _primitive(node: Node) -> bool:
    """A constant the set membership optimisation takes: a primitive other than bytes (decorators.go)."""
    return isinstance(node, Lit) and _kind(node.value) in ("bool", "int", "uint", "double", "string")


def _is_bool(value: Any) -> bool:
    return isinstance(value, celtypes.BoolType)


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


def _select(target: Any, name: str) -> Any:
    if isinstance(target, dict) and name in target:
        return target[name]
    return ERROR


def _index(target: Any, key: Any) -> Any:
    if isinstance(target, dict):
        return target.get(key, ERROR)
    if isinstance(target, list) and isinstance(key, _NUMBERS) and float(key) == int(key) \
            and 0 <= int(key) < len(target):
        return target[int(key)]
    return ERROR


def _ordered(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    def ordering(a: Any, b: Any) -> Any:
        numbers = isinstance(a, _NUMBERS) and isinstance(b, _NUMBERS)
        if not numbers and _kind(a) != _kind(b):
            return ERROR
        return celtypes.BoolType(compare(a, b))
    return ordering


def _arithmetic(operate: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def arithmetic(a: Any, b: Any) -> Any:
        if type(a) is not type(b) or isinstance(a, celtypes.BoolType):
            return ERROR
        return type(a)(operate(a, b)) if not isinstance(a, list) else celtypes.ListType(operate(a, b))
    return arithmetic


def _membership(needle: Any, haystack: Any) -> Any:
    if isinstance(haystack, dict):
        return celtypes.BoolType(needle in haystack)
    if isinstance(haystack, list):
        return celtypes.BoolType(any(cel_equal(needle, item) for item in haystack))
    return ERROR


def _strings(operate: Callable[[str, str], bool]) -> Callable[[Any, Any], Any]:
    def on_strings(a: Any, b: Any) -> Any:
        return celtypes.BoolType(operate(a, b)) if isinstance(a, str) and isinstance(b, str) else ERROR
    return on_strings


def _not(value: Any) -> Any:
    return celtypes.BoolType(not value) if _is_bool(value) else ERROR


def _negate(value: Any) -> Any:
    return type(value)(-value) if isinstance(value, celtypes.IntType | celtypes.DoubleType) else ERROR


def _size(value: Any) -> Any:
    return celtypes.IntType(len(value)) if isinstance(value, str | bytes | list | dict) else ERROR


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "_==_": lambda a, b: celtypes.BoolType(cel_equal(a, b)),
    "_!=_": lambda a, b: celtypes.BoolType(not cel_equal(a, b)),
    "_<_": _ordered(lambda a, b: a < b), "_<=_": _ordered(lambda a, b: a <= b),
    "_>_": _ordered(lambda a, b: a > b), "_>=_": _ordered(lambda a, b: a >= b),
    "_+_": _arithmetic(lambda a, b: a + b), "_-_": _arithmetic(lambda a, b: a - b),
    "_*_": _arithmetic(lambda a, b: a * b),
    "_/_": _arithmetic(lambda a, b: a / b if isinstance(a, float) else int(a / b)),
    "_%_": _arithmetic(lambda a, b: math.fmod(a, b)),
    "@in": _membership, "!_": _not, "-_": _negate, "size": _size,
    "startsWith": _strings(str.startswith), "endsWith": _strings(str.endswith), "contains": _strings(str.__contains__),
    "matches": _strings(lambda text, pattern: re.search(pattern, text) is not None),
}
_BOOLEAN_CALLS = {"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "@in", "!_", "startsWith", "endsWith", "contains",
                  "matches"}
