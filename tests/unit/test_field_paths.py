"""Field paths and reasons of violations (cardquota.core.violations): what a path renders to, how keys from the input
are escaped so a path stays on one line, and the reasons' Kubernetes spelling."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cardquota.core
from cardquota.core.verdict import deny
from cardquota.core.violations import (
    ABSENT,
    ANNOTATIONS,
    FieldPath,
    Reason,
    Violation,
    duplicate,
    forbidden,
    invalid,
    merge_violations,
    not_found,
    not_supported,
    required,
    same_value,
    too_long,
    too_many,
    value_at,
)


def annotation_path_before(name: str) -> str:
    """An annotation's path as it was written before the builder: the rendering every existing path keeps."""
    return f'metadata.annotations["{name}"]' if name.isprintable() else f"metadata.annotations[{json.dumps(name)}]"


def escaped_key_before(key: object) -> str:
    """The DeviceClass-map key of ``spec.dra`` paths as it was written before the builder."""
    return f"[{json.dumps(key if isinstance(key, str) else str(key))}]"


def test_a_path_is_built_one_step_at_a_time() -> None:
    task = FieldPath.of("spec", "tasks").index(0)
    assert str(task.child("template", "metadata", "annotations").key("volcano.sh/card.name")) == (
        'spec.tasks[0].template.metadata.annotations["volcano.sh/card.name"]')
    assert str(task.child("replicas")) == "spec.tasks[0].replicas"
    assert str(FieldPath.of("data").escaped_key("volcano-scheduler.conf").child("tiers").index(1)) == (
        'data["volcano-scheduler.conf"].tiers[1]')
    assert str(FieldPath().child("spec")) == "spec"
    assert str(FieldPath.of()) == ""


def test_a_path_is_immutable_and_a_step_returns_a_new_one() -> None:
    spec = FieldPath.of("spec")
    tasks = spec.child("tasks")
    assert (str(spec), str(tasks)) == ("spec", "spec.tasks")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.text = "status"  # type: ignore[misc]
    assert spec == FieldPath.of("spec")
    assert hash(spec) == hash(FieldPath.of("spec"))


@pytest.mark.parametrize(("key", "rendered"), [
    ("volcano.sh/card.quota", 'metadata.annotations["volcano.sh/card.quota"]'),
    ("ü-é", 'metadata.annotations["ü-é"]'),
    ("a\nb", 'metadata.annotations["a\\nb"]'),
    ("tab\there", 'metadata.annotations["tab\\there"]'),
    ("\u2028", 'metadata.annotations["\\u2028"]'),
    ("", 'metadata.annotations[""]'),
])
def test_a_key_reads_as_written_when_printable_and_escaped_otherwise(key: str, rendered: str) -> None:
    assert str(ANNOTATIONS.key(key)) == rendered == annotation_path_before(key)


@pytest.mark.parametrize(("key", "rendered"), [
    ("nvidia-h100", 'spec.dra.capability["nvidia-h100"]'),
    ("ǵpu", 'spec.dra.capability["\\u01f5pu"]'),
    ('say "hi"', 'spec.dra.capability["say \\"hi\\""]'),
    ("gpu\nx", 'spec.dra.capability["gpu\\nx"]'),
    (7, 'spec.dra.capability["7"]'),
    (None, 'spec.dra.capability["None"]'),
])
def test_an_escaped_key_is_always_json(key: object, rendered: str) -> None:
    assert str(FieldPath.of("spec", "dra", "capability").escaped_key(key)) == rendered


@pytest.mark.parametrize(("name", "rendered"), [
    ("count", "spec.dra.count"),
    ("_private2", "spec.dra._private2"),
    ("bad\tfield", 'spec.dra["bad\\tfield"]'),
    ("with.dot", 'spec.dra["with.dot"]'),
    ("ünïcode", 'spec.dra["\\u00fcn\\u00efcode"]'),
    ("2x", 'spec.dra["2x"]'),
    (3, 'spec.dra["3"]'),
])
def test_a_field_the_input_names_is_a_child_when_it_is_an_identifier(name: object, rendered: str) -> None:
    assert str(FieldPath.of("spec", "dra").field(name)) == rendered


@given(st.text())
def test_any_annotation_name_renders_on_one_line_as_annotation_path_always_did(name: str) -> None:
    rendered = str(ANNOTATIONS.key(name))
    assert rendered == annotation_path_before(name)
    assert rendered.isprintable()
    assert len(rendered.splitlines()) == 1
    inner = rendered.removeprefix("metadata.annotations[").removesuffix("]")
    assert (inner[1:-1] if name.isprintable() else json.loads(inner)) == name


@given(st.one_of(st.text(), st.integers(), st.booleans(), st.none()))
def test_any_escaped_key_renders_on_one_ascii_line_and_reads_back(key: object) -> None:
    path = FieldPath.of("spec", "dra", "capability")
    rendered = str(path.escaped_key(key))
    assert rendered == f"spec.dra.capability{escaped_key_before(key)}"
    assert rendered.isascii()
    assert rendered.isprintable()
    assert json.loads(rendered.removeprefix("spec.dra.capability[").removesuffix("]")) == (
        key if isinstance(key, str) else str(key))


def test_reasons_are_spelled_as_the_api_servers_field_errors() -> None:
    assert {reason.name: str(reason) for reason in Reason} == {
        "INVALID": "FieldValueInvalid", "REQUIRED": "FieldValueRequired", "NOT_SUPPORTED": "FieldValueNotSupported",
        "FORBIDDEN": "FieldValueForbidden", "DUPLICATE": "FieldValueDuplicate", "NOT_FOUND": "FieldValueNotFound",
        "TOO_MANY": "FieldValueTooMany", "TOO_LONG": "FieldValueTooLong"}


@pytest.mark.parametrize(("build", "reason"), [
    (invalid, Reason.INVALID), (required, Reason.REQUIRED), (not_supported, Reason.NOT_SUPPORTED),
    (forbidden, Reason.FORBIDDEN), (duplicate, Reason.DUPLICATE), (not_found, Reason.NOT_FOUND),
    (too_many, Reason.TOO_MANY), (too_long, Reason.TOO_LONG),
])
def test_each_constructor_gives_its_reason_and_renders_the_path(build: Callable[[FieldPath | str, str], Violation],
                                                                 reason: Reason) -> None:
    violation = build(FieldPath.of("spec").child("queue"), "is wrong")
    assert violation == Violation("spec.queue", "is wrong", reason)
    assert str(violation) == "spec.queue: is wrong"
    assert build("spec.queue", "is wrong") == violation


def test_a_violation_reads_as_before_and_moves_under_an_embedding_object() -> None:
    violation = required(FieldPath.of("spec", "schedulerName"), "is required")
    assert deny([violation]).message == "spec.schedulerName: is required"
    moved = violation.under(FieldPath.of("spec", "template"))
    assert (moved.path, moved.reason, moved.message) == ("spec.template.spec.schedulerName", Reason.REQUIRED,
                                                         "is required")
    assert violation.under("spec.jobTemplate").path == "spec.jobTemplate.spec.schedulerName"
    assert Violation("", "m").under(FieldPath.of("spec", "jobTemplate")).path == "spec.jobTemplate"
    assert violation.with_message("x") == Violation("spec.schedulerName", "x", Reason.REQUIRED)


def test_the_reason_is_in_a_verdicts_json() -> None:
    verdict = deny([not_found(FieldPath.of("spec", "queue"), "queue q does not exist")])
    assert verdict.as_json()["violations"] == [
        {"path": "spec.queue", "reason": "FieldValueNotFound", "message": "queue q does not exist"}]


CORE = Path(cardquota.core.__file__).parent


def test_the_core_builds_every_violation_from_a_path_and_a_reason() -> None:
    """No path written by hand as text (``Violation("spec.x", …)``, ``Violation(f"{path}.x", …)``) outside the
    builder itself: a new rule uses FieldPath and a constructor, so its path renders like every other."""
    by_hand = re.compile(r"Violation\(\s*f?[\"']")
    offenders = [f"{source.relative_to(CORE)}:{number}"
                 for source in sorted(CORE.rglob("*.py")) if source.name != "violations.py"
                 for number, line in enumerate(source.read_text().splitlines(), start=1) if by_hand.search(line)]
    assert offenders == []


# --- reading a path back: the value it names (what ratcheting compares between the old and the new object) ---------

DOCUMENT: dict[str, Any] = {
    "metadata": {"annotations": {"volcano.sh/card.quota": '{"NVIDIA-A100": 4}', 'odd"]key': "odd", "ü": "u",
                                 "a\nb": "escaped"}},
    "spec": {"parent": "org", "tasks": [{"template": {"spec": {"containers": []}}}], "dra": {"capability": {
        "gpu.example.com": {"count": 4}}}, "replicas": 3},
    "data": {"volcano-scheduler.conf": "actions: enqueue"},
    "yaml": {7: "seven", "x": 1},  # a map read from YAML: a key need not be text
}


@pytest.mark.parametrize(("path", "value"), [
    ('metadata.annotations["volcano.sh/card.quota"]', '{"NVIDIA-A100": 4}'),
    ('metadata.annotations["volcano.sh/card.quota"]["NVIDIA-A100"]', '{"NVIDIA-A100": 4}'),  # inside text: the text
    ('data["volcano-scheduler.conf"].tiers[0].plugins[1]', "actions: enqueue"),
    ('metadata.annotations["odd"]key"]', "odd"),  # a key holding "] as written
    ('metadata.annotations["\\u00fc"]', "u"),  # JSON-escaped (escaped_key)
    ('metadata.annotations["ü"]', "u"),
    ('metadata.annotations["a\\nb"]', "escaped"),
    ('spec.dra.capability["gpu.example.com"].count', 4),
    ("spec.tasks[0].template.spec.containers", []),
    ("spec.parent", "org"),
    ('yaml["7"]', "seven"),
    ('yaml["8"]', ABSENT),
    ('metadata.annotations["volcano.sh/card.request"]', ABSENT),
    ("spec.queue", ABSENT),
    ("spec.tasks[3].template", ABSENT),
    ("status.phase", ABSENT),
    ("spec.replicas.count", 3),  # a field of a number: the number holds it
    ("spec.tasks.name", DOCUMENT["spec"]["tasks"]),  # a step that does not fit the list: the list
    ('spec.tasks["0"]', DOCUMENT["spec"]["tasks"]),
    ("spec.dra[0]", DOCUMENT["spec"]["dra"]),
    ("", DOCUMENT),  # the whole object
    ("spec..parent", DOCUMENT),  # unreadable: the whole object, so any change counts
    ("spec.tasks[x]", DOCUMENT),
    ("spec.tasks[0", DOCUMENT),
    ('metadata.annotations["unterminated', ABSENT),
])
def test_the_value_a_path_names(path: str, value: object) -> None:
    assert value_at(DOCUMENT, path) == value  # (ABSENT equals only itself)


@pytest.mark.parametrize("document", [None, "text", 7, [], {}, {"metadata": None}, {"metadata": {"annotations": 5}},
                                      {"spec": {"tasks": "many"}}, {"spec": {"tasks": [None]}}])
def test_a_path_into_an_odd_shape_never_raises(document: object) -> None:
    for path in ('metadata.annotations["volcano.sh/card.quota"]', "spec.tasks[0].template.spec", "spec.parent", ""):
        value_at(document, path)


Step = tuple[str, Any]
steps = st.lists(st.one_of(st.tuples(st.just("key"), st.text(max_size=8)),
                           st.tuples(st.just("escaped"), st.one_of(st.text(max_size=8), st.integers(0, 99))),
                           st.tuples(st.just("field"), st.sampled_from(["spec", "count", "_x2"])),
                           st.tuples(st.just("index"), st.integers(0, 3))), max_size=6)


def placed_at(steps: list[Step], leaf: object) -> tuple[object, str]:
    """A document holding ``leaf`` where the path built by ``steps`` points (beside a sibling at every level), and
    that path as rendered."""
    document: object = leaf
    for kind, key in reversed(steps):
        if kind == "index":
            document = [*(["sibling"] * key), document]
        else:
            document = {"sibling": "sibling", key if kind != "escaped" else str(key): document}
    path = FieldPath()
    for kind, key in steps:
        path = {"key": path.key, "escaped": path.escaped_key, "field": path.field, "index": path.index}[kind](key)
    return document, str(path)


@given(steps, st.one_of(st.integers(), st.text(max_size=4), st.none()))
def test_every_rendered_path_reads_back_the_value_it_was_built_for(path_steps: list[Step], leaf: object) -> None:
    document, path = placed_at(path_steps, leaf)
    assert value_at(document, path) == leaf


@given(st.text(max_size=40), st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=3)),
                                          lambda inner: st.lists(inner, max_size=2)
                                          | st.dictionaries(st.text(max_size=3), inner, max_size=2)))
def test_any_text_as_a_path_over_any_document_gives_a_value(path: str, document: object) -> None:
    value_at(document, path)  # no exception, whatever the text


@pytest.mark.parametrize(("before", "after", "same"), [
    ({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "x"}]}, True),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}, True),  # a map's order is not its value
    ([1, 2], [2, 1], False),
    (1, 1.0, True),  # one JSON number
    (1, True, False),  # a boolean is not a number
    (0, False, False),
    ("1", 1, False),
    (None, ABSENT, False),  # null written is not the field left out
    (ABSENT, ABSENT, True),
    ({"a": 1}, {"a": 1, "b": None}, False),
    ([1], (1,), True),
    ({"a": {"b": 1}}, {"a": {"b": 2}}, False),
])
def test_values_are_compared_as_json(before: object, after: object, same: bool) -> None:
    assert same_value(before, after) is same
    assert same_value(after, before) is same


def test_values_nested_deeper_than_the_recursion_limit_compare() -> None:
    def deep(leaf: object) -> object:
        value: object = leaf
        for _ in range(20_000):
            value = [value]
        return value
    assert same_value(deep(1), deep(1))
    assert not same_value(deep(1), deep(2))


def test_a_violation_depends_on_its_own_value_and_those_named_and_they_follow_it() -> None:
    violation = not_found(FieldPath.of("spec", "queue"), "queue q does not exist")
    assert violation.inputs == ("spec.queue",)
    both = violation.depending_on(ANNOTATIONS.key("volcano.sh/card.request"), "spec.queue")
    assert both.inputs == ("spec.queue", 'metadata.annotations["volcano.sh/card.request"]')
    assert both == violation  # what it depends on is not what it is
    assert both.with_message("x").inputs == both.inputs
    assert both.under("spec.template").inputs == (
        "spec.template.spec.queue", 'spec.template.metadata.annotations["volcano.sh/card.request"]')
    assert violation.depending_on("spec.queue") is violation


def test_equal_violations_of_two_rules_are_kept_once_depending_on_both() -> None:
    card = not_found("spec.parent", "parent queue p does not exist").depending_on("card.quota")
    dra = not_found("spec.parent", "parent queue p does not exist").depending_on("spec.dra.capability")
    other = invalid("spec.dra", "must be a map")
    merged = merge_violations([card, other], [dra, other])
    assert merged == [card, other]
    assert merged[0].inputs == ("spec.parent", "card.quota", "spec.dra.capability")


def test_the_paths_remembered_stay_bounded() -> None:
    from cardquota.core import violations

    for index in range(1, violations.MAX_PLAIN_PATHS + 10):
        assert value_at(DOCUMENT, f"spec.tasks[{index}]") is ABSENT
    value_at(DOCUMENT, "spec." + "x" * (violations.MAX_PLAIN_PATH + 1))
    assert len(violations._PLAIN_PATHS) <= violations.MAX_PLAIN_PATHS
    assert all(len(path) <= violations.MAX_PLAIN_PATH for path in violations._PLAIN_PATHS)
