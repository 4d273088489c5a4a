"""Card annotations the JSON parser refuses: one line naming what is wrong, where, and the form expected."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cardquota.core.keys import CARD_QUOTA, CARD_REQUEST
from cardquota.core.quota import EXPECTED_FORM, parse_card_amounts


def message(text: str, annotation: str = CARD_QUOTA) -> str:
    [violation] = parse_card_amounts(text, annotation).violations
    assert "\n" not in violation.message
    return violation.message


@pytest.mark.parametrize(("text", "expected"), [
    ('{"NVIDIA-A100": 2,}', "a trailing comma at line 1, column 18"),
    ('{"NVIDIA-A100": 2 ,  }', "a trailing comma at line 1, column 19"),
    ('{\n  "NVIDIA-A100": 2,\n}', "a trailing comma at line 2, column 19"),
    ("[1,]", "a trailing comma at line 1, column 3"),
    ("{not json", "expecting property name enclosed in double quotes at line 1, column 2"),
    ('{"NVIDIA-A100" 2}', "expecting ':' delimiter at line 1, column 16"),
    ('{"NVIDIA-A100": 2', "expecting ',' delimiter at line 1, column 18"),
    ('{"A": 1}\n{"B": 2}', "extra data at line 2, column 1"),
    ("", "expecting value at line 1, column 1"),
])
def test_the_error_names_what_where_and_the_form_expected(text: str, expected: str) -> None:
    assert message(text) == f"is not valid JSON: {expected} {EXPECTED_FORM}"
    assert message(text, CARD_REQUEST) == message(text)  # one message for every card annotation


names = st.text(st.characters(codec="ascii", exclude_characters='"\\'), min_size=1, max_size=20)


@given(st.dictionaries(names, st.integers(0, 1000), min_size=1, max_size=5), st.sampled_from(["", " ", "\n", "\n  "]))
def test_a_comma_before_the_closing_brace_is_called_a_trailing_comma_at_the_comma(
        quota: dict[str, int], space: str) -> None:
    text = json.dumps(quota, indent=2 if space.startswith("\n") else None)
    written = text[:-1].rstrip() + "," + space + "}"
    comma = written.rindex(",")
    line = written.count("\n", 0, comma) + 1
    column = comma - written.rfind("\n", 0, comma)
    assert message(written) == f"is not valid JSON: a trailing comma at line {line}, column {column} {EXPECTED_FORM}"
