"""Parsing of volcano.sh/card.quota, volcano.sh/card.request and volcano.sh/card.name."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from verdicts import violations_of

from cardquota.core.cards import MAX_CARD_NAME_LENGTH
from cardquota.core.quota import (
    card_alternatives,
    card_name_problem,
    card_name_violation,
    card_quota,
    card_request,
    parse_card_amounts,
)
from cardquota.core.violations import Reason

QUOTA_PATH = 'metadata.annotations["volcano.sh/card.quota"]'
REQUEST_PATH = 'metadata.annotations["volcano.sh/card.request"]'
CARD_NAME_PATH = 'metadata.annotations["volcano.sh/card.name"]'
INV, REQ, DUP = Reason.INVALID, Reason.REQUIRED, Reason.DUPLICATE


def test_valid_quota_keeps_order_and_values() -> None:
    text = '{"NVIDIA-A100": 10, "NVIDIA-H100": 5, "NVIDIA-A100/mps-80g*1/8": 16}'
    parsed = card_quota({"volcano.sh/card.quota": text})
    assert parsed.ok
    assert parsed.present
    assert list(parsed.values.items()) == [("NVIDIA-A100", 10), ("NVIDIA-H100", 5), ("NVIDIA-A100/mps-80g*1/8", 16)]


def test_absent_annotation_is_an_empty_quota() -> None:
    parsed = card_quota({})
    assert (parsed.values, parsed.violations, parsed.present) == ({}, (), False)


def test_request_keeps_multi_card_keys_whole() -> None:
    parsed = card_request({"volcano.sh/card.request": '{"NVIDIA-A100|NVIDIA-H100": 8}'})
    assert dict(parsed.values) == {"NVIDIA-A100|NVIDIA-H100": 8}


@pytest.mark.parametrize(
    ("text", "kept", "reason", "message"),  # the message of the first case of each rule
    [
        ("{", {}, INV, "is not valid JSON"),
        ("", {}, INV, None),
        ("[1, 2]", {}, INV, "must be a JSON object"),
        ('"A100"', {}, INV, None),
        ('{"A": -1, "B": 2}', {"B": 2}, INV, "A: -1 is negative"),
        ('{"A": 1.5}', {}, INV, "A: 1.5 is not a whole number of cards"),
        ('{"A": "4"}', {}, INV, None),
        ('{"A": true}', {}, INV, None),
        ('{"A": null}', {}, INV, None),
        ('{"A": {"n": 1}}', {}, INV, None),
        ('{"A": 1, "A": 2}', {"A": 1}, DUP, "card type A appears more than once"),
        ('{" ": 1}', {}, REQ, "card type names must not be empty"),
        ('{"A": 9223372036854775808}', {}, INV,
         "A: 9223372036854775808 is too large (the limit is 9223372036854775807)"),
        ('{"A": NaN}', {}, INV, "NaN is not a number JSON allows"),
        ('{"A": Infinity}', {}, INV, None),
        ('{"A": -Infinity}', {}, INV, None),
        ('{"A": 4.0}', {}, INV, None),
        ('{"A": 1e2}', {}, INV, None),
        ('{"": 1}', {}, REQ, None),
        ("[" * 100_000, {}, INV, None),
        ('{"A": 1' + "0" * 5000 + "}", {}, INV, None),
    ],
)
def test_bad_entries_become_violations_and_good_ones_are_kept(text: str, kept: dict, reason: Reason,
                                                              message: str | None) -> None:
    parsed = parse_card_amounts(text, "volcano.sh/card.quota")
    assert dict(parsed.values) == kept
    assert parsed.present
    assert violations_of(parsed.violations) == [(QUOTA_PATH, reason)]
    if message is not None:
        assert message in parsed.violations[0].message


def test_int64_maximum_is_accepted() -> None:
    assert dict(parse_card_amounts('{"A": 9223372036854775807}', "q").values) == {"A": 2**63 - 1}


@pytest.mark.parametrize(
    ("text", "message"),  # the message of the first case of each rule
    [
        ('{"A": 0}', "A: 0 is below 1"),
        ('{"A": -2}', None),
        ('{"A||B": 2}', "A||B has an empty alternative"),
        ('{"A|": 2}', None),
        ('{"|B": 2}', None),
    ],
)
def test_request_amounts_start_at_one_and_alternatives_are_not_empty(text: str, message: str | None) -> None:
    parsed = card_request({"volcano.sh/card.request": text})
    assert violations_of(parsed.violations) == [(REQUEST_PATH, Reason.INVALID)]
    if message is not None:
        assert parsed.violations[0].message == message


def test_request_allows_alternatives_and_quota_does_not() -> None:
    text = '{"A|B": 2, "C": 1}'
    assert dict(card_request({"volcano.sh/card.request": text}).values) == {"A|B": 2, "C": 1}
    quota = card_quota({"volcano.sh/card.quota": text})
    assert dict(quota.values) == {"C": 1}
    assert violations_of(quota.violations) == [(QUOTA_PATH, Reason.INVALID)]
    assert [v.message for v in quota.violations] == [
        "A|B lists alternatives; a quota names one card type per key (alternatives belong in volcano.sh/card.request)"
    ]


def test_names_with_control_characters_are_escaped_in_messages() -> None:
    parsed = card_quota({"volcano.sh/card.quota": '{"A\\n": -1}'})
    assert [v.message for v in parsed.violations] == ['"A\\n": -1 is negative']


@pytest.mark.parametrize(
    ("card_name", "reason", "problem"),  # the message of the first case of each rule
    [
        ("", REQ, "must name a card type, such as NVIDIA-A100, or alternatives such as NVIDIA-A100|NVIDIA-H100"),
        ("  ", REQ, None),
        ("A||B", INV, '"A||B" has an empty alternative'),
        ("A|", INV, None),
        ("A | B", INV, '"A | B" has spaces or control characters around a card type'),
        ("A\nB", INV, None),
        ("A|A", DUP, '"A|A" lists a card type twice'),
    ],
)
def test_card_name_violations(card_name: str, reason: Reason, problem: str | None) -> None:
    violation = card_name_violation(card_name, CARD_NAME_PATH)
    assert violation is not None
    assert violations_of([violation]) == [(CARD_NAME_PATH, reason)]
    assert card_name_problem(card_name) == violation.message
    if problem is not None:
        assert violation.message == problem


@pytest.mark.parametrize("card_name", ["NVIDIA-A100", "NVIDIA-A100|NVIDIA-H100",
                                       "NVIDIA-A100/mps-80g*1/8|NVIDIA-H800/mps-80g*1/2"])
def test_valid_card_names(card_name: str) -> None:
    assert card_name_violation(card_name, CARD_NAME_PATH) is None
    assert card_name_problem(card_name) is None


def test_a_card_name_violation_is_said_in_its_context() -> None:
    violation = card_name_violation("A|", "spec.x", 'task "w": ')
    assert violation is not None
    assert (violation.path, violation.reason, violation.message) == (
        "spec.x", Reason.INVALID, 'task "w": "A|" has an empty alternative')


def test_zero_is_a_valid_quota() -> None:
    assert dict(parse_card_amounts('{"A": 0}', "volcano.sh/card.quota").values) == {"A": 0}


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10,
)


@pytest.mark.parametrize("parse", [card_quota, card_request], ids=["quota", "request"])
@given(text=st.one_of(st.text(max_size=200), json_like.map(json.dumps),
                      st.dictionaries(st.text(max_size=12), json_like, max_size=4).map(json.dumps)))
def test_parsers_never_raise_and_keep_only_valid_amounts(parse, text: str) -> None:
    parsed = parse({"volcano.sh/card.quota": text, "volcano.sh/card.request": text})
    assert all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 for v in parsed.values.values())
    assert all(v.message.strip() and "\n" not in v.message for v in parsed.violations)


@given(st.dictionaries(st.text(min_size=1, max_size=MAX_CARD_NAME_LENGTH).filter(
    lambda name: name.strip() and "|" not in name),
                       st.integers(min_value=0, max_value=2**63 - 1)))
def test_every_valid_quota_round_trips(quota: dict[str, int]) -> None:
    parsed = card_quota({"volcano.sh/card.quota": json.dumps(quota)})
    assert parsed.ok
    assert dict(parsed.values) == quota


@pytest.mark.parametrize(
    ("name", "alternatives"),
    [
        ("NVIDIA-A100", ("NVIDIA-A100",)),
        ("NVIDIA-A100|NVIDIA-H100", ("NVIDIA-A100", "NVIDIA-H100")),
        ("A | B |C", ("A", "B", "C")),
        ("A||B|", ("A", "B")),
        ("NVIDIA-H200/mig-1g.18gb-mixed|NVIDIA-H200/mig-2g.36gb-mixed",
         ("NVIDIA-H200/mig-1g.18gb-mixed", "NVIDIA-H200/mig-2g.36gb-mixed")),
        ("", ()),
    ],
)
def test_card_alternatives_in_preference_order(name: str, alternatives: tuple[str, ...]) -> None:
    assert card_alternatives(name) == alternatives
