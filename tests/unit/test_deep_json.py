"""The deep JSON reader (webhooks/deep_json.py) reads what json.loads reads and refuses what it refuses, at every
depth and in each of its three paths: the token loop, the shallow runs handed to json's C scanner, and the skipper
of containers deeper than what is kept. Nesting is bounded as the API server bounds it (``maxNestingDepth = 10000``
in sigs.k8s.io/json internal/golang/encoding/json/scanner.go; a review adds two levels)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cardquota.webhooks.deep_json import MAX_REVIEW_NESTING, SHALLOW_LEVELS, TooDeep, loads_deep

scalars = (st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=False)
           | st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)
           | st.sampled_from(['q"uote', "back\\slash", "[{", "]}", "\x00\x1f", "é", ",:"]))
values = st.recursive(scalars, lambda children: st.lists(children, max_size=5)
                      | st.dictionaries(st.text(max_size=4) | st.sampled_from(["[", "}", '"']), children, max_size=5),
                      max_leaves=60)
chains = st.lists(st.sampled_from(["array", "object"]), min_size=1, max_size=30)
KEPT = [0, 1, 2, 3, SHALLOW_LEVELS + 1, 100]


def kept_part(value: Any, kept: int, level: int = 1) -> Any:
    """json.loads' value with containers nested deeper than ``kept`` as None (what the reader promises)."""
    if not isinstance(value, (list, dict)):
        return value
    if level > kept:
        return None
    if isinstance(value, list):
        return [kept_part(item, kept, level + 1) for item in value]
    return {key: kept_part(item, kept, level + 1) for key, item in value.items()}


def wrapped(value: Any, chain: list[str], scalars_beside: bool) -> Any:
    """``value`` at the bottom of a chain of arrays and objects (with scalars beside each link when asked)."""
    for link in reversed(chain):
        if link == "array":
            value = [1, "x", value] if scalars_beside else [value]
        else:
            value = {"a": None, "deep": value, "z": 2.5} if scalars_beside else {"deep": value}
    return value


@settings(max_examples=300)
@given(values, chains, st.booleans(), st.sampled_from([None, 1, "\t", " \r\n"]), st.sampled_from(KEPT))
def test_the_reader_reads_what_json_loads_reads_keeping_what_it_promises(
        value: Any, chain: list[str], scalars_beside: bool, indent: int | str | None, kept: int) -> None:
    text = json.dumps(wrapped(value, chain, scalars_beside), indent=indent)
    assert loads_deep(text, kept) == kept_part(json.loads(text), kept)


MUTATIONS = [*'[]{}",:0 -\\e', "", "tru", "nul", '"\\u12"', "1.", ".5", "01", "NaN", "-Infinity", "\x01"]


@settings(max_examples=500)
@given(values, chains, st.booleans(), st.data(), st.sampled_from(KEPT))
def test_the_reader_refuses_what_json_loads_refuses(
        value: Any, chain: list[str], scalars_beside: bool, data: st.DataObject, kept: int) -> None:
    text = json.dumps(wrapped(value, chain, scalars_beside))
    at = data.draw(st.integers(0, len(text)))
    cut = data.draw(st.integers(0, 2))
    text = text[:at] + data.draw(st.sampled_from(MUTATIONS)) + text[at + cut :]
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):  # noqa: PT011 (json's own errors are plain ValueErrors)
            loads_deep(text, kept)
    else:
        assert loads_deep(text, kept) == kept_part(expected, kept)


def chain_text(levels: int, bottom: str = "1", *, beside: bool = False) -> str:
    """``levels`` containers, arrays and objects alternating, around ``bottom``."""
    openings = ['{"k":' if level % 2 else ("[0," if beside else "[") for level in range(levels)]
    closings = ["}" if level % 2 else "]" for level in reversed(range(levels))]
    return "".join(openings) + bottom + "".join(closings)


@pytest.mark.parametrize("kept", [0, 50, MAX_REVIEW_NESTING])
@pytest.mark.parametrize("beside", [False, True])
@pytest.mark.parametrize("bottom", ["1", "[]", "[[1]]", "[[[[1]]]]", '{"a":{"b":[]}}'])
def test_nesting_up_to_the_limit_is_read_and_beyond_refused(kept: int, beside: bool, bottom: str) -> None:
    bottom_levels = bottom.count("[") + bottom.count("{")
    at_limit = chain_text(MAX_REVIEW_NESTING - bottom_levels, bottom, beside=beside)
    assert loads_deep(at_limit, kept) is not None or kept == 0
    with pytest.raises(TooDeep):
        loads_deep(chain_text(MAX_REVIEW_NESTING - bottom_levels + 1, bottom, beside=beside), kept)


def test_a_chain_of_containers_is_kept_to_the_promised_depth() -> None:
    value = loads_deep(chain_text(5_000, beside=True), 10)
    for level in range(10):
        value = value[1] if level % 2 == 0 else value["k"]
    assert value is None


@pytest.mark.parametrize("text", ["[1]]", "[[1]", '{"a":[1}', "[1,]", '{"a":1,}', "[[1] [2]]", "[1 2]",
                                  '{"a" 1}', '{"a":1 "b":2}', "[,1]", "[1,,2]", '{1:2}', '["a\x01"]',
                                  '[[[[[[1}],2]', '[{"a":[[[[[1]]]]]],2]', '[[[[[[1]]]]]],2}]'])
@pytest.mark.parametrize("depth", [0, 1, 200, 5_000])
def test_malformed_json_is_refused_at_any_depth(text: str, depth: int) -> None:
    body = "[" * depth + text + "]" * depth
    with pytest.raises(ValueError):  # noqa: PT011
        json.loads(text)
    for kept in (0, 100):
        with pytest.raises(ValueError):  # noqa: PT011
            loads_deep(body, kept)
