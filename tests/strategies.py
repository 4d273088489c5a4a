"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st


def manifest_values(samples: Sequence[str] = ()) -> st.SearchStrategy[Any]:
    """Anything a YAML/JSON manifest could hold where a quantity or number is expected, with likely-tricky
    ``samples`` mixed in: text, huge and negative numbers, NaN/inf, booleans, null, lists and maps."""
    return st.one_of(
        st.sampled_from(list(samples) or [""]),
        st.text(max_size=12),
        st.integers(min_value=-(10**40), max_value=10**40),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.none(),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )
