"""The crossquota annotations: a pod's scoring strategy, and a node's absolute and percentage quota overrides."""

from __future__ import annotations

from typing import Any

import pytest
from builders import node
from hypothesis import given
from hypothesis import strategies as st
from strategies import manifest_values

from cardquota.core.keys import (
    ANNOTATION_QUOTA_PERCENTAGE_PREFIX,
    ANNOTATION_QUOTA_PREFIX,
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    SCORING_STRATEGY_ANNOTATION,
)
from cardquota.core.policies.crossquota import (
    node_annotation_violations,
    percentage_resource,
    quota_resource,
    scoring_strategy_violations,
)
from cardquota.core.violations import Violation

STRATEGY_PATH = f'metadata.annotations["{SCORING_STRATEGY_ANNOTATION}"]'


def annotated_node(annotations: Any, allocatable: dict[str, Any] | None = None) -> dict[str, Any]:
    """The builders' node (cpu 64, memory 512Gi, pods 110 allocatable, plus ``allocatable``) with annotations."""
    manifest = node("gpu-node-1", allocatable=allocatable)
    manifest["metadata"]["annotations"] = annotations
    return manifest


def path(annotation: str) -> str:
    return f'metadata.annotations["{annotation}"]'


# --- constants and classification ---------------------------------------------------------------------------------

def test_the_annotation_names_are_the_plugins() -> None:
    assert ANNOTATION_QUOTA_PREFIX == "volcano.sh/crossquota-"
    assert ANNOTATION_QUOTA_PERCENTAGE_PREFIX == "volcano.sh/crossquota-percentage-"
    assert SCORING_STRATEGY_ANNOTATION == "volcano.sh/crossquota-scoring-strategy"
    assert (MOST_ALLOCATED, LEAST_ALLOCATED) == ("most-allocated", "least-allocated")


@pytest.mark.parametrize(
    ("annotation", "quota", "percentage"),
    [
        ("volcano.sh/crossquota-cpu", "cpu", None),
        ("volcano.sh/crossquota-memory", "memory", None),
        ("volcano.sh/crossquota-hugepages-2Mi", "hugepages-2Mi", None),
        ("volcano.sh/crossquota-percentage-memory", None, "memory"),
        ("volcano.sh/crossquota-percentage-", None, ""),
        ("volcano.sh/crossquota-percentage", "percentage", None),  # no dash: a resource named "percentage"
        ("volcano.sh/crossquota-scoring-strategy", None, None),
        ("volcano.sh/crossquota-", "", None),
        ("volcano.sh/crossquota", None, None),
        ("example.com/crossquota-cpu", None, None),
        ("volcano.sh/card.quota", None, None),
    ],
)
def test_annotations_are_told_apart(annotation: str, quota: str | None, percentage: str | None) -> None:
    assert quota_resource(annotation) == quota
    assert percentage_resource(annotation) == percentage


# --- scoring strategy ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("annotations", [{}, {"other": "x"}, {SCORING_STRATEGY_ANNOTATION: "most-allocated"},
                                         {SCORING_STRATEGY_ANNOTATION: "least-allocated"}])
def test_valid_or_absent_strategy_is_accepted(annotations: dict[str, str]) -> None:
    assert scoring_strategy_violations(annotations) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("binpack", '"binpack" is not a scoring strategy; use most-allocated or least-allocated'),
        ("Most-Allocated", '"Most-Allocated" is not a scoring strategy; use most-allocated or least-allocated'),
        ("most-allocated ", '"most-allocated " is not a scoring strategy; use most-allocated or least-allocated'),
        ("", '"" is not a scoring strategy; use most-allocated or least-allocated'),
        ("spread\nx", '"spread\\nx" is not a scoring strategy; use most-allocated or least-allocated'),
        ("x" * 100, f'"{"x" * 37}..." is not a scoring strategy; use most-allocated or least-allocated'),
        (1, "a number is not a scoring strategy; use most-allocated or least-allocated"),
    ],
)
def test_other_strategies_are_violations_listing_both(value: Any, message: str) -> None:
    assert scoring_strategy_violations({SCORING_STRATEGY_ANNOTATION: value}) == [Violation(STRATEGY_PATH, message)]


# --- node annotations ---------------------------------------------------------------------------------------------

VALID_NODE_ANNOTATIONS = [
    ("none", None),
    ("empty", {}),
    ("unrelated", {"volcano.sh/card.quota": "{", "node.alpha.kubernetes.io/ttl": "0"}),
    ("cpu-below-allocatable", {"volcano.sh/crossquota-cpu": "32"}),
    ("cpu-equal-to-allocatable", {"volcano.sh/crossquota-cpu": "64"}),
    ("cpu-milli", {"volcano.sh/crossquota-cpu": "32000m"}),
    ("cpu-zero", {"volcano.sh/crossquota-cpu": "0"}),
    ("memory-binary-suffix", {"volcano.sh/crossquota-memory": "64Gi"}),
    ("memory-equal-in-other-unit", {"volcano.sh/crossquota-memory": "524288Mi"}),
    ("percentage-integer", {"volcano.sh/crossquota-percentage-memory": "50"}),
    ("percentage-decimal", {"volcano.sh/crossquota-percentage-cpu": "12.5"}),
    ("percentage-bounds", {"volcano.sh/crossquota-percentage-cpu": "0",
                           "volcano.sh/crossquota-percentage-pods": "100"}),
    ("percentage-exponent", {"volcano.sh/crossquota-percentage-cpu": "5e1"}),
    ("percentage-of-a-resource-not-allocatable", {"volcano.sh/crossquota-percentage-example.com/foo": "10"}),
    ("strategy-on-a-node-is-not-examined", {SCORING_STRATEGY_ANNOTATION: "anything"}),
    ("annotations-not-a-map", ["volcano.sh/crossquota-cpu"]),
]


@pytest.mark.parametrize("annotations", [pytest.param(a, id=i) for i, a in VALID_NODE_ANNOTATIONS])
def test_valid_node_annotations_pass(annotations: Any) -> None:
    assert node_annotation_violations(annotated_node(annotations)) == []


def test_extended_resource_within_allocatable_passes() -> None:
    manifest = annotated_node({"volcano.sh/crossquota-ephemeral-storage": "100Gi"},
                              allocatable={"ephemeral-storage": "200Gi"})
    assert node_annotation_violations(manifest) == []


CPU = "volcano.sh/crossquota-cpu"
MEMORY = "volcano.sh/crossquota-memory"
PERCENT_CPU = "volcano.sh/crossquota-percentage-cpu"

INVALID_NODE_ANNOTATIONS = [
    ("cpu-above-allocatable", {CPU: "80"}, None,
     "volcano.sh/crossquota-cpu 80 is above the node's allocatable cpu 64"),
    ("memory-above-allocatable", {MEMORY: "600Gi"}, None,
     "volcano.sh/crossquota-memory 600Gi is above the node's allocatable memory 512Gi"),
    ("just-above-allocatable", {CPU: "64001m"}, None,
     "volcano.sh/crossquota-cpu 64001m is above the node's allocatable cpu 64"),
    ("numeric-allocatable", {"volcano.sh/crossquota-example.com/foo": "5"}, {"example.com/foo": 4},
     "volcano.sh/crossquota-example.com/foo 5 is above the node's allocatable example.com/foo 4"),
    ("negative", {CPU: "-1"}, None, "volcano.sh/crossquota-cpu -1 is negative; a quota is 0 or more"),
    ("not-a-quantity", {CPU: "32 cores"}, None,
     'volcano.sh/crossquota-cpu "32 cores" is not a Kubernetes quantity (such as 32, 500m or 64Gi)'),
    ("empty-value", {CPU: ""}, None,
     'volcano.sh/crossquota-cpu "" is not a Kubernetes quantity (such as 32, 500m or 64Gi)'),
    ("value-with-line-break", {CPU: "1\n"}, None,
     'volcano.sh/crossquota-cpu "1\\n" is not a Kubernetes quantity (such as 32, 500m or 64Gi)'),
    ("not-a-string", {CPU: 32}, None, "must be a string, not a number (quote the value)"),
    ("resource-the-node-lacks", {"volcano.sh/crossquota-nvidia.com/gpu": "1"}, None,
     "volcano.sh/crossquota-nvidia.com/gpu 1 limits nvidia.com/gpu, which the node does not have "
     "(it is not in status.allocatable)"),
    ("no-resource", {"volcano.sh/crossquota-": "1"}, None,
     "volcano.sh/crossquota- names no resource; write volcano.sh/crossquota-<resource>, "
     "such as volcano.sh/crossquota-cpu"),
    ("percentage-above-100", {PERCENT_CPU: "150"}, None,
     "volcano.sh/crossquota-percentage-cpu 150 is not a percentage from 0 to 100"),
    ("percentage-just-above-100", {PERCENT_CPU: "100.0001"}, None,
     "volcano.sh/crossquota-percentage-cpu 100.0001 is not a percentage from 0 to 100"),
    ("percentage-negative", {PERCENT_CPU: "-5"}, None,
     "volcano.sh/crossquota-percentage-cpu -5 is not a percentage from 0 to 100"),
    ("percentage-huge-exponent", {PERCENT_CPU: "1e9999"}, None,
     "volcano.sh/crossquota-percentage-cpu 1e9999 is not a percentage from 0 to 100"),
    ("percentage-nan", {PERCENT_CPU: "NaN"}, None,
     'volcano.sh/crossquota-percentage-cpu "NaN" is not a number; write a percentage from 0 to 100, '
     'such as "50" or "12.5"'),
    ("percentage-inf", {PERCENT_CPU: "inf"}, None,
     'volcano.sh/crossquota-percentage-cpu "inf" is not a number; write a percentage from 0 to 100, '
     'such as "50" or "12.5"'),
    ("percentage-sign", {PERCENT_CPU: "50%"}, None, f'{PERCENT_CPU} "50%" is not a number'),
    ("percentage-quantity-suffix", {PERCENT_CPU: "50m"}, None, f'{PERCENT_CPU} "50m" is not a number'),
    ("percentage-underscore", {PERCENT_CPU: "1_0"}, None, f'{PERCENT_CPU} "1_0" is not a number'),
    ("percentage-unicode-digits", {PERCENT_CPU: "٥"}, None, f'{PERCENT_CPU} "٥" is not a number'),
    ("percentage-no-resource", {"volcano.sh/crossquota-percentage-": "5"}, None,
     "volcano.sh/crossquota-percentage- names no resource"),
    ("percentage-not-a-string", {PERCENT_CPU: None}, None, "must be a string, not null (quote the value)"),
]


@pytest.mark.parametrize(("annotations", "allocatable", "message"),
                         [pytest.param(a, al, m, id=i) for i, a, al, m in INVALID_NODE_ANNOTATIONS])
def test_invalid_node_annotations_are_violations(annotations: dict[str, Any], allocatable: dict[str, Any] | None,
                                                 message: str) -> None:
    [violation] = node_annotation_violations(annotated_node(annotations, allocatable))
    assert violation.path == path(next(iter(annotations)))
    assert violation.message.startswith(message), violation.message


def test_every_bad_annotation_is_reported_and_good_ones_are_not() -> None:
    annotations = {CPU: "80", MEMORY: "64Gi", PERCENT_CPU: "101", SCORING_STRATEGY_ANNOTATION: "x", "other": "y"}
    assert [v.path for v in node_annotation_violations(annotated_node(annotations))] == [path(CPU), path(PERCENT_CPU)]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (None, "volcano.sh/crossquota-cpu 8 limits cpu, but the node reports no status.allocatable to limit"),
        ({}, "volcano.sh/crossquota-cpu 8 limits cpu, but the node reports no status.allocatable to limit"),
        ("Ready", "volcano.sh/crossquota-cpu 8 limits cpu, but the node reports no status.allocatable to limit"),
        ({"allocatable": ["cpu"]},
         "volcano.sh/crossquota-cpu 8 cannot be checked: the node's status.allocatable is not a map"),
        ({"allocatable": {"cpu": "sixty-four"}},
         "volcano.sh/crossquota-cpu 8 cannot be checked: the node's allocatable cpu \"sixty-four\" is not a "
         "Kubernetes quantity"),
        ({"allocatable": {"cpu": None}},
         "volcano.sh/crossquota-cpu 8 cannot be checked: the node's allocatable cpu null is not a Kubernetes "
         "quantity"),
        ({"allocatable": {"cpu": float("nan")}},
         "volcano.sh/crossquota-cpu 8 cannot be checked: the node's allocatable cpu NaN is not a Kubernetes "
         "quantity"),
        ({"allocatable": {"cpu": [64]}},
         "volcano.sh/crossquota-cpu 8 cannot be checked: the node's allocatable cpu a list is not a Kubernetes "
         "quantity"),
        ({"allocatable": {"memory": "1Gi"}},
         "volcano.sh/crossquota-cpu 8 limits cpu, which the node does not have (it is not in status.allocatable)"),
    ],
)
def test_unreadable_allocatable_is_a_violation_naming_it(status: Any, message: str) -> None:
    manifest = annotated_node({CPU: "8"})
    if status is None:
        del manifest["status"]
    else:
        manifest["status"] = status
    assert node_annotation_violations(manifest) == [Violation(path(CPU), message)]


def test_unreadable_allocatable_does_not_matter_to_percentages() -> None:
    manifest = annotated_node({PERCENT_CPU: "50"})
    manifest["status"] = {"allocatable": "broken"}
    assert node_annotation_violations(manifest) == []


@pytest.mark.parametrize("manifest", [{}, {"metadata": None}, {"metadata": "x"}, {"metadata": {"annotations": 3}}])
def test_nodes_without_readable_annotations_have_no_violations(manifest: dict[str, Any]) -> None:
    assert node_annotation_violations(manifest) == []


# --- properties ---------------------------------------------------------------------------------------------------

RESOURCES = ["cpu", "memory", "pods", "nvidia.com/gpu", "ephemeral-storage", "", "hugepages-1Gi"]
anything = manifest_values(["1", "0", "-1", "64", "100", "100.5", "1e9999", "NaN", "inf", "512Gi", "1e40", "5e1",
                            " 1"])
annotation_names = st.one_of(
    st.builds(lambda prefix, resource: prefix + resource,
              st.sampled_from([ANNOTATION_QUOTA_PREFIX, ANNOTATION_QUOTA_PERCENTAGE_PREFIX]),
              st.one_of(st.sampled_from(RESOURCES), st.text(max_size=6))),
    st.just(SCORING_STRATEGY_ANNOTATION),
    st.text(max_size=12),
)
annotation_maps = st.one_of(st.dictionaries(annotation_names, anything, max_size=4), anything)
allocatable_maps = st.one_of(
    st.dictionaries(st.one_of(st.sampled_from(RESOURCES), st.text(max_size=6)), anything, max_size=4),
    anything,
)
nodes = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.one_of(st.fixed_dictionaries({}, optional={"annotations": annotation_maps}), anything),
        "status": st.one_of(st.fixed_dictionaries({}, optional={"allocatable": allocatable_maps}), anything),
    },
)


def assert_one_line_violations(found: object) -> None:
    assert isinstance(found, list)
    for violation in found:
        assert isinstance(violation, Violation)
        for text in (violation.path, violation.message):
            assert text
            assert len(text.splitlines()) == 1
        assert violation.message.isprintable(), violation.message


@given(nodes)
def test_any_node_gives_one_line_violations_and_never_raises(manifest: dict[str, Any]) -> None:
    assert_one_line_violations(node_annotation_violations(manifest))


@given(st.dictionaries(annotation_names, st.text(), max_size=4))
def test_any_annotation_text_gives_one_line_violations(annotations: dict[str, str]) -> None:
    assert_one_line_violations(node_annotation_violations(annotated_node(annotations)))


@given(st.one_of(st.dictionaries(st.sampled_from([SCORING_STRATEGY_ANNOTATION, "other"]), anything), anything))
def test_any_strategy_annotation_gives_one_line_violations_and_never_raises(annotations: Any) -> None:
    found = scoring_strategy_violations(annotations)
    assert_one_line_violations(found)
    assert len(found) <= 1


@given(st.integers(min_value=0, max_value=64_000), st.integers(min_value=0, max_value=10_000))
def test_cpu_quota_is_accepted_exactly_up_to_allocatable(milli: int, percent_hundredths: int) -> None:
    annotations = {CPU: f"{milli}m", PERCENT_CPU: f"{percent_hundredths / 100:.2f}"}
    assert node_annotation_violations(annotated_node(annotations)) == []
    over = annotated_node({CPU: f"{64_000 + 1 + milli}m"})
    assert [v.path for v in node_annotation_violations(over)] == [path(CPU)]
