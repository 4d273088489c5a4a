"""Kubernetes quantities: the grammar, exact values, and that nothing but QuantityError escapes the parser."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cardquota.core.errors import InputError
from cardquota.core.quantity import QuantityError, parse_quantity, whole_units


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8", Fraction(8)),
        ("0", Fraction(0)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("+3", Fraction(3)),
        ("-3", Fraction(-3)),
        ("100n", Fraction(1, 10**7)),
        ("2u", Fraction(2, 10**6)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("2E", Fraction(2 * 10**18)),
        ("1Ki", Fraction(1024)),
        ("80Gi", Fraction(80 * 2**30)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1Ei", Fraction(2**60)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("12e-1", Fraction(6, 5)),
        ("1e+2", Fraction(100)),
        (8, Fraction(8)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parses_kubernetes_quantities_exactly(text: object, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", " 1", "1 ", "1KB", "1K", "k", "1.2.3", "1e", "e3", "abc", "1ki", "--1", "1Mi1", "0x10", "١", "1e31", "1e-31",
     "9" * 65, "1" + "0" * 30, True, None, [], {}, float("inf"), float("nan"), 10**40],
)
def test_rejects_what_is_not_a_quantity(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_quantity_error_is_the_projects_input_error() -> None:
    with pytest.raises(InputError, match="not a quantity"):
        parse_quantity("eight")


@given(st.one_of(st.text(max_size=80), st.integers(), st.floats(), st.booleans(), st.none(),
                 st.lists(st.integers(), max_size=2), st.binary(max_size=10)))
def test_never_raises_anything_but_quantity_error(value: object) -> None:
    try:
        result = parse_quantity(value)
    except QuantityError as error:
        message = str(error)
    else:
        message = None
        assert isinstance(result, Fraction)
    assert message is None or message.strip()


_SUFFIX_SCALE = {
    "": Decimal(1), "m": Decimal("1e-3"), "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
    "Ki": Decimal(1024), "Mi": Decimal(1024**2), "Gi": Decimal(1024**3),
}


@given(
    st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False),
    st.sampled_from(sorted(_SUFFIX_SCALE)),
)
def test_value_matches_decimal_arithmetic(number: Decimal, suffix: str) -> None:
    text = f"{number:f}{suffix}"
    assert parse_quantity(text) == Fraction(number * _SUFFIX_SCALE[suffix])


@pytest.mark.parametrize(
    ("amount", "units"), [(Fraction(0), 0), (Fraction(1), 1), (Fraction(1, 2), 1), (Fraction(3, 2), 2)]
)
def test_whole_units_round_up(amount: Fraction, units: int) -> None:
    assert whole_units(amount) == units
