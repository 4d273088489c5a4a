"""The crossquota annotations: a pod's scoring strategy, and a node's absolute and percentage quota overrides."""

from __future__ import annotations

from typing import Any

import pytest
from builders import node
from hypothesis import given
from hypothesis import strategies as st
from strategies import manifest_values
from verdicts import violations_of

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
from cardquota.core.violations import Reason, Violation

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


def test_other_strategies_are_violations_listing_both() -> None:
    assert scoring_strategy_violations({SCORING_STRATEGY_ANNOTATION: "binpack"}) == [Violation(
        STRATEGY_PATH, '"binpack" is not a scoring strategy; use most-allocated or least-allocated',
        Reason.NOT_SUPPORTED)]


@pytest.mark.parametrize("value", ["Most-Allocated", "most-allocated ", "", "spread\nx", "x" * 100, 1])
def test_other_strategies_are_not_supported(value: Any) -> None:
    assert violations_of(scoring_strategy_violations({SCORING_STRATEGY_ANNOTATION: value})) == [
        (STRATEGY_PATH, Reason.NOT_SUPPORTED)]


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

INVALID_NODE_ANNOTATIONS = [  # (id, annotations, allocatable, reason, message of the rule's first case)
    ("cpu-above-allocatable", {CPU: "80"}, None, Reason.INVALID,
     "volcano.sh/crossquota-cpu 80 is above the node's allocatable cpu 64"),
    ("memory-above-allocatable", {MEMORY: "600Gi"}, None, Reason.INVALID, None),
    ("just-above-allocatable", {CPU: "64001m"}, None, Reason.INVALID, None),
    ("numeric-allocatable", {"volcano.sh/crossquota-example.com/foo": "5"}, {"example.com/foo": 4}, Reason.INVALID,
     None),
    ("negative", {CPU: "-1"}, None, Reason.INVALID, "volcano.sh/crossquota-cpu -1 is negative; a quota is 0 or more"),
    ("not-a-quantity", {CPU: "32 cores"}, None, Reason.INVALID,
     'volcano.sh/crossquota-cpu "32 cores" is not a Kubernetes quantity (such as 32, 500m or 64Gi)'),
    ("empty-value", {CPU: ""}, None, Reason.INVALID, None),
    ("value-with-line-break", {CPU: "1\n"}, None, Reason.INVALID, None),
    ("not-a-string", {CPU: 32}, None, Reason.INVALID, "must be a string, not a number (quote the value)"),
    ("resource-the-node-lacks", {"volcano.sh/crossquota-nvidia.com/gpu": "1"}, None, Reason.INVALID,
     "volcano.sh/crossquota-nvidia.com/gpu 1 limits nvidia.com/gpu, which the node does not have "
     "(it is not in status.allocatable)"),
    ("no-resource", {"volcano.sh/crossquota-": "1"}, None, Reason.REQUIRED,
     "volcano.sh/crossquota- names no resource; write volcano.sh/crossquota-<resource>, "
     "such as volcano.sh/crossquota-cpu"),
    ("percentage-above-100", {PERCENT_CPU: "150"}, None, Reason.INVALID,
     "volcano.sh/crossquota-percentage-cpu 150 is not a percentage from 0 to 100"),
    ("percentage-just-above-100", {PERCENT_CPU: "100.0001"}, None, Reason.INVALID, None),
    ("percentage-negative", {PERCENT_CPU: "-5"}, None, Reason.INVALID, None),
    ("percentage-huge-exponent", {PERCENT_CPU: "1e9999"}, None, Reason.INVALID, None),
    ("percentage-nan", {PERCENT_CPU: "NaN"}, None, Reason.INVALID,
     'volcano.sh/crossquota-percentage-cpu "NaN" is not a number; write a percentage from 0 to 100, '
     'such as "50" or "12.5"'),
    ("percentage-inf", {PERCENT_CPU: "inf"}, None, Reason.INVALID, None),
    ("percentage-sign", {PERCENT_CPU: "50%"}, None, Reason.INVALID, None),
    ("percentage-quantity-suffix", {PERCENT_CPU: "50m"}, None, Reason.INVALID, None),
    ("percentage-underscore", {PERCENT_CPU: "1_0"}, None, Reason.INVALID, None),
    ("percentage-unicode-digits", {PERCENT_CPU: "٥"}, None, Reason.INVALID, None),
    ("percentage-no-resource", {"volcano.sh/crossquota-percentage-": "5"}, None, Reason.REQUIRED, None),
    ("percentage-not-a-string", {PERCENT_CPU: None}, None, Reason.INVALID, None),
]


@pytest.mark.parametrize(("annotations", "allocatable", "reason", "message"),
                         [pytest.param(a, al, r, m, id=i) for i, a, al, r, m in INVALID_NODE_ANNOTATIONS])
def test_invalid_node_annotations_are_violations(annotations: dict[str, Any], allocatable: dict[str, Any] | None,
                                                 reason: Reason, message: str | None) -> None:
    """Structure for every case; the message for the first case of each rule."""
    found = node_annotation_violations(annotated_node(annotations, allocatable))
    assert violations_of(found) == [(path(next(iter(annotations))), reason)]
    if message is not None:
        assert found[0].message.startswith(message), found[0].message


def test_every_bad_annotation_is_reported_and_good_ones_are_not() -> None:
    annotations = {CPU: "80", MEMORY: "64Gi", PERCENT_CPU: "101", SCORING_STRATEGY_ANNOTATION: "x", "other": "y"}
    assert [v.path for v in node_annotation_violations(annotated_node(annotations))] == [path(CPU), path(PERCENT_CPU)]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (None, "volcano.sh/crossquota-cpu 8 limits cpu, but the node reports no status.allocatable to limit"),
        ({}, None),
        ("Ready", None),
        ({"allocatable": ["cpu"]},
         "volcano.sh/crossquota-cpu 8 cannot be checked: the node's status.allocatable is not a map"),
        ({"allocatable": {"cpu": "sixty-four"}},
         "volcano.sh/crossquota-cpu 8 cannot be checked: the node's allocatable cpu \"sixty-four\" is not a "
         "Kubernetes quantity"),
        ({"allocatable": {"cpu": None}}, None),
        ({"allocatable": {"cpu": float("nan")}}, None),
        ({"allocatable": {"cpu": [64]}}, None),
        ({"allocatable": {"memory": "1Gi"}}, None),
    ],
)
def test_unreadable_allocatable_is_a_violation_naming_it(status: Any, message: str | None) -> None:
    """Structure for every case; the message for the first case of each rule."""
    manifest = annotated_node({CPU: "8"})
    if status is None:
        del manifest["status"]
    else:
        manifest["status"] = status
    found = node_annotation_violations(manifest)
    assert violations_of(found) == [(path(CPU), Reason.INVALID)]
    if message is not None:
        assert found[0].message == message


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
