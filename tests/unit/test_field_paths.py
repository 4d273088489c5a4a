"""Field paths and reasons of violations (cardquota.core.violations): what a path renders to, how keys from the input
are escaped so a path stays on one line, and the reasons' Kubernetes spelling."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cardquota.core
from cardquota.core.verdict import deny
from cardquota.core.violations import (
    ANNOTATIONS,
    FieldPath,
    Reason,
    Violation,
    duplicate,
    forbidden,
    invalid,
    not_found,
    not_supported,
    required,
    too_long,
    too_many,
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
