"""The Volcano scheduler's configuration (``volcano-scheduler.conf``) read as the scheduler reads it: one YAML
document, and the plugins' argument values as YAML scalars or strings (``2.0`` or ``"2.0"``, ``true`` or
``"true"``). Used by the ConfigMap policy (to check them) and by the scheduling rules (to apply them)."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from cardquota.core.errors import InputError
from cardquota.core.yamltext import load_one

CONF_KEY = "volcano-scheduler.conf"
MAX_NUMBER_TEXT = 64
MAX_INT = 2**63 - 1
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DOCUMENT_END = re.compile(r"\.\.\.(?:[ \t].*)?")
"""A line that is YAML's document end marker ``...`` (at column 0, alone or before spaces or a comment)."""


def read_conf(text: str) -> Any:
    """The configuration as YAML reads it; InputError when it is not one YAML document. Text after a ``...``
    document end marker is refused with what is wrong (Volcano's YAML reader stops at the marker and ignores the
    rest; the parser's own message, "did not find expected <document start>", does not say so)."""
    try:
        return load_one(text)
    except InputError as error:
        problem = document_end_problem(text)
        if problem is not None:
            raise InputError(f"{CONF_KEY} {problem}") from None
        raise error from None


def document_end_problem(text: str) -> str | None:
    """``goes on after the YAML end of document "..." on line 2: …`` when text goes on after a ``...`` line and that
    is what stops the YAML reader (the text up to the marker reads on its own); None otherwise."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not _DOCUMENT_END.fullmatch(line):
            continue
        try:
            load_one("\n".join(lines[:index + 1]) + "\n")
        except InputError:
            return None  # something before the marker is wrong: the parser's message says what
        following = next((number for number, rest in enumerate(lines[index + 1:], start=index + 2)
                          if rest.strip() and not rest.lstrip().startswith("#")), None)
        if following is None or lines[following - 1].startswith(("---", "%")):
            return None
        return (f'goes on after the YAML end of document "..." on line {index + 1}: the scheduler reads only up '
                f'to the "..." and would ignore the rest (from line {following}); remove the "..." line')
    return None


# Value readers: YAML scalars or strings, None when the value is not of the kind.

def read_bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def read_number(value: object) -> Fraction | None:
    """A finite number, exactly: ``2``, ``2.0``, ``"2.0"``, ``"1e3"``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value) if math.isfinite(value) else None
    if isinstance(value, str) and len(value) <= MAX_NUMBER_TEXT and _NUMBER.fullmatch(value):
        return Fraction(value)
    return None


def read_int(value: object) -> int | None:
    """A whole number (``16`` or ``"16"``) that fits int64."""
    if isinstance(value, bool):
        return None
    number: int | None = None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and len(value) <= 20 and _INTEGER.fullmatch(value):
        number = int(value)
    return number if number is not None and abs(number) <= MAX_INT else None
