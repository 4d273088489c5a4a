"""Parsing of volcano.sh/card.quota, volcano.sh/card.request and volcano.sh/card.name."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cardquota.core.quota import card_alternatives, card_quota, card_request, parse_card_amounts

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
        ('{"A": 1, "A": 2}', {"A": 1}, "card type 'A' appears more than once"),
        ('{" ": 1}', {}, "card type names must not be empty"),
        ('{"A": 10000000000}', {}, "A: 10000000000 exceeds 1000000000"),
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


def test_zero_is_a_valid_quota() -> None:
    assert dict(parse_card_amounts('{"A": 0}', "volcano.sh/card.quota").values) == {"A": 0}


@given(st.text(max_size=200))
def test_parser_never_raises_on_any_text(text: str) -> None:
    parsed = parse_card_amounts(text, "volcano.sh/card.quota")
    assert all(isinstance(v, int) and v >= 0 for v in parsed.values.values())
    assert parsed.ok or all(v.message for v in parsed.violations)


@given(st.dictionaries(st.text(min_size=1).filter(str.strip), st.integers(min_value=0, max_value=10**9)))
def test_every_valid_object_round_trips(quota: dict[str, int]) -> None:
    parsed = parse_card_amounts(json.dumps(quota), "volcano.sh/card.quota")
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
