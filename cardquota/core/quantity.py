"""Kubernetes resource quantities (``500m``, ``8``, ``80Gi``, ``1e3``) as exact fractions.

The grammar follows the API server's: an optionally signed decimal number followed by a binary-SI suffix
(``Ki`` … ``Ei``), a decimal-SI suffix (``n u m k M G T P E``) or a decimal exponent (``e3``, ``E-2``).
Values are exact :class:`fractions.Fraction` so that sums of milli-quantities never drift.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from cardquota.core.errors import InputError
from cardquota.core.violations import written

_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"(?P<sign>[+-])?(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
# Far beyond any real resource amount, small enough that arithmetic on parsed values stays cheap.
MAX_QUANTITY_LENGTH = 64
MAX_EXPONENT = 30


class QuantityError(InputError):
    """A value that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity as written in a manifest (a string, or a plain YAML/JSON number).

    Raises :class:`QuantityError` (an :class:`InputError`) for anything else; never another exception.
    """
    if type(value) is str:  # the common case first
        return _parse_text(value)
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        if abs(value) >= 10**MAX_EXPONENT:
            raise QuantityError(f"quantity {written(value)} is out of range")
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) >= 10**MAX_EXPONENT:
            raise QuantityError(f"quantity {value!r} is out of range")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{written(value)} is not a quantity (expected a string such as \"2\" or \"500m\")")
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    """Quantities repeat endlessly ("1", "500m", "8Gi") and Fractions are immutable: parse each text once."""
    if len(value) > MAX_QUANTITY_LENGTH:
        raise QuantityError(f"quantity {written(value)} is too long")
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise QuantityError(f"{written(value)} is not a quantity (expected e.g. \"2\", \"500m\", \"80Gi\", \"1e3\")")
    number = Fraction(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY_SUFFIXES:
        scaled = number * _BINARY_SUFFIXES[suffix]
    elif suffix in _DECIMAL_SUFFIXES:
        scaled = number * _DECIMAL_SUFFIXES[suffix]
    else:
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(f"quantity {written(value)} is out of range")
        scaled = number * Fraction(10) ** exponent
    if abs(scaled) >= 10**MAX_EXPONENT:
        raise QuantityError(f"quantity {written(value)} is out of range")
    return -scaled if match["sign"] == "-" else scaled


def whole_units(amount: Fraction) -> int:
    """Round a countable amount (cards, pods) up to whole units, as the scheduler does for extended resources."""
    return -(-amount.numerator // amount.denominator)  # math.ceil, without Fraction's slower generic protocol


def format_quantity(amount: Fraction, *, binary: bool = False) -> str:
    """An amount written back as a quantity the API server accepts and a person reads: whole numbers as they are
    (``binary``: with the largest binary suffix that divides them, ``200Gi``), else in thousandths (``1500m``),
    else a decimal rounded to thousandths (amounts no manifest writes)."""
    sign = "-" if amount < 0 else ""
    amount = abs(amount)
    if amount.denominator == 1:
        whole = amount.numerator
        if binary and whole:
            for suffix, factor in reversed(_BINARY_SUFFIXES.items()):
                if whole % factor == 0:
                    return f"{sign}{whole // factor}{suffix}"
        return f"{sign}{whole}"
    milli = amount * 1000
    if milli.denominator == 1:
        return f"{sign}{milli.numerator}m"
    return f"{sign}{float(amount):.3f}".rstrip("0").rstrip(".")
