"""``kubectl cardquota nodes -l``: the label selector grammar kubectl takes (issue 18 item 13: ``!=`` and ``==``
matched nothing and exited 0; now every form is read as kubectl reads it, or refused saying what was expected)."""

from __future__ import annotations

import pytest

from cardquota.cli.selector import Requirement, parse_selector
from cardquota.core.errors import InputError

LABELS = {"gpu": "a100", "zone": "eu-1", "count": "8", "empty": ""}


@pytest.mark.parametrize(("text", "matches"), [
    ("", True),
    ("gpu=a100", True), ("gpu==a100", True), ("gpu=h100", False),
    ("gpu!=h100", True), ("gpu!=a100", False), ("missing!=x", True),
    ("gpu in (a100,h100)", True), ("gpu in (h100)", False), ("missing in (x)", False),
    ("gpu notin (h100, t4)", True), ("gpu notin (a100)", False), ("missing notin (x)", True),
    ("gpu", True), ("missing", False), ("!missing", True), ("!gpu", False),
    ("count>4", True), ("count<4", False), ("gpu>1", False), ("missing<9", False),
    ("empty=", True), ("gpu=", False),
    ("gpu=a100,zone in (eu-1),!missing,count>7", True), ("gpu=a100, zone=us-1", False),
    ("example.com/key=v", False),
])
def test_each_form_matches_as_kubectl_does(text: str, matches: bool) -> None:
    assert parse_selector(text).matches(LABELS) is matches


def test_the_requirements_are_read() -> None:
    assert parse_selector("a==b, c notin (d,e), !f").requirements == (
        Requirement("a", "=", ("b",)), Requirement("c", "notin", ("d", "e")), Requirement("f", "!"))


@pytest.mark.parametrize(("text", "message"), [
    ("a in (b", "expected ',' or ')' in the values, found the end"),
    ("a in b", "expected '(' after 'in', found 'b'"),
    ("a in ()", "expected a value, found ')'"),
    ("a=b=c", "expected ',' between requirements, found '='"),
    ("a b", "expected ',' between requirements, found 'b'"),
    (",a", "expected a label key, found ','"),
    ("a,", "expected a label key, found the end"),
    ("count>x", "count>x: > compares with an integer, not 'x'"),
    ("-a=b", "'-a' is not a label key"),
    ("a=b c", "expected ',' between requirements, found 'c'"),
    ("a=" + "v" * 64, "is not a label value"),
])
def test_anything_else_is_refused_saying_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_selector(text)
    assert message in str(raised.value)
    assert str(raised.value).startswith("--selector: ")
