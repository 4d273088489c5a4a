"""Label selectors, as the API machinery matches them (pure): a node selector term's expressions, and a
``metav1.LabelSelector`` (a PodDisruptionBudget's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cardquota.core.jsontypes import MAPPING_TYPES

LABEL_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
"""What a ``metav1.LabelSelector``'s ``matchExpressions`` may use (``Gt``/``Lt`` are for node selectors only)."""


def expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One selector requirement (``key``, ``operator``, ``values``) against ``labels``: ``In``, ``NotIn``, ``Exists``,
    ``DoesNotExist``, and the node selectors' ``Gt``/``Lt`` (integers); an unknown operator matches nothing."""
    key, operator = expression.get("key"), expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    value = labels.get(str(key))
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def label_selector_matches(selector: object, labels: Mapping[str, str]) -> bool:
    """Whether a ``metav1.LabelSelector`` selects ``labels``, as ``metav1.LabelSelectorAsSelector`` makes one: none
    (null) selects nothing, an empty one everything (what a ``policy/v1`` PodDisruptionBudget's selector means: the
    lister ``GetPodPodDisruptionBudgets``, client-go listers/policy/v1/expansion_generated.go); ``matchLabels`` and
    ``matchExpressions`` all hold; a selector it cannot read (an unknown operator) selects nothing, as the lister
    skips an invalid one."""
    if not isinstance(selector, MAPPING_TYPES):
        return False
    match = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match, MAPPING_TYPES) or not isinstance(expressions, list):
        return False
    if not all(labels.get(str(key)) == value for key, value in match.items()):
        return False
    return all(isinstance(expression, MAPPING_TYPES) and expression.get("operator") in LABEL_SELECTOR_OPERATORS
               and expression_matches(expression, labels) for expression in expressions)
