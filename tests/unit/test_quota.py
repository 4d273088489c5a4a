"""Parsing of volcano.sh/card.quota, volcano.sh/card.request and volcano.sh/card.name."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cardquota.core.quota import card_alternatives, card_name_problem, card_quota, card_request, parse_card_amounts

QUOTA_PATH = 'metadata.annotations["volcano.sh/card.quota"]'


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
    ("text", "kept", "message"),
    [
        ("{", {}, "is not valid JSON"),
        ("", {}, "is not valid JSON"),
        ("[1, 2]", {}, "must be a JSON object"),
        ('"A100"', {}, "must be a JSON object"),
        ('{"A": -1, "B": 2}', {"B": 2}, "A: -1 is negative"),
        ('{"A": 1.5}', {}, "A: 1.5 is not a whole number of cards"),
        ('{"A": "4"}', {}, 'A: "4" is not a whole number of cards'),
        ('{"A": true}', {}, "A: true is not a whole number of cards"),
        ('{"A": null}', {}, "A: null is not a whole number of cards"),
        ('{"A": {"n": 1}}', {}, "A: an object is not a whole number of cards"),
        ('{"A": 1, "A": 2}', {"A": 1}, "card type A appears more than once"),
        ('{" ": 1}', {}, "card type names must not be empty"),
        ('{"A": 9223372036854775808}', {}, "A: 9223372036854775808 is too large (the limit is 9223372036854775807)"),
        ('{"A": NaN}', {}, "NaN is not a number JSON allows"),
        ('{"A": Infinity}', {}, "Infinity is not a number JSON allows"),
        ('{"A": -Infinity}', {}, "-Infinity is not a number JSON allows"),
        ('{"A": 4.0}', {}, "A: 4.0 is not a whole number of cards"),
        ('{"A": 1e2}', {}, "A: 100.0 is not a whole number of cards"),
        ('{"": 1}', {}, "card type names must not be empty"),
        ("[" * 100_000, {}, "is not valid JSON"),
        ('{"A": 1' + "0" * 5000 + "}", {}, "is not valid JSON"),
    ],
)
def test_bad_entries_become_violations_and_good_ones_are_kept(text: str, kept: dict, message: str) -> None:
    parsed = parse_card_amounts(text, "volcano.sh/card.quota")
    assert dict(parsed.values) == kept
    assert parsed.present
    assert [v.path for v in parsed.violations] == [QUOTA_PATH]
    assert message in parsed.violations[0].message


def test_int64_maximum_is_accepted() -> None:
    assert dict(parse_card_amounts('{"A": 9223372036854775807}', "q").values) == {"A": 2**63 - 1}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"A": 0}', "A: 0 is below 1"),
        ('{"A": -2}', "A: -2 is below 1"),
        ('{"A||B": 2}', "A||B has an empty alternative"),
        ('{"A|": 2}', "A| has an empty alternative"),
        ('{"|B": 2}', "|B has an empty alternative"),
    ],
)
def test_request_amounts_start_at_one_and_alternatives_are_not_empty(text: str, message: str) -> None:
    parsed = card_request({"volcano.sh/card.request": text})
    assert [v.message for v in parsed.violations] == [message]
    assert parsed.violations[0].path == 'metadata.annotations["volcano.sh/card.request"]'


def test_request_allows_alternatives_and_quota_does_not() -> None:
    text = '{"A|B": 2, "C": 1}'
    assert dict(card_request({"volcano.sh/card.request": text}).values) == {"A|B": 2, "C": 1}
    quota = card_quota({"volcano.sh/card.quota": text})
    assert dict(quota.values) == {"C": 1}
    assert [v.message for v in quota.violations] == [
        "A|B lists alternatives; a quota names one card type per key (alternatives belong in volcano.sh/card.request)"
    ]


def test_names_with_control_characters_are_escaped_in_messages() -> None:
    parsed = card_quota({"volcano.sh/card.quota": '{"A\\n": -1}'})
    assert [v.message for v in parsed.violations] == ['"A\\n": -1 is negative']


@pytest.mark.parametrize(
    ("card_name", "problem"),
    [
        ("NVIDIA-A100", None),
        ("NVIDIA-A100|NVIDIA-H100", None),
        ("NVIDIA-A100/mps-80g*1/8|NVIDIA-H800/mps-80g*1/2", None),
        ("", "must name a card type, such as NVIDIA-A100, or alternatives such as NVIDIA-A100|NVIDIA-H100"),
        ("  ", "must name a card type, such as NVIDIA-A100, or alternatives such as NVIDIA-A100|NVIDIA-H100"),
        ("A||B", '"A||B" has an empty alternative'),
        ("A|", '"A|" has an empty alternative'),
        ("A | B", '"A | B" has spaces or control characters around a card type'),
        ("A\nB", '"A\\nB" has spaces or control characters around a card type'),
        ("A|A", '"A|A" lists a card type twice'),
    ],
)
def test_card_name_problems(card_name: str, problem: str | None) -> None:
    assert card_name_problem(card_name) == problem


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


@given(st.dictionaries(st.text(min_size=1).filter(lambda name: name.strip() and "|" not in name),
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
