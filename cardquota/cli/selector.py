"""Label selectors as ``kubectl -l`` reads them (Kubernetes' ``labels.Parse``), for ``kubectl cardquota nodes -l``.

The whole grammar, requirements separated by commas (all must hold)::

    key=value  key==value  key!=value          equality (!= also holds when the label is absent)
    key in (v1,v2)  key notin (v1,v2)          set-based (notin also holds when the label is absent)
    key  !key                                  the label exists / does not exist
    key>5  key<5                               the label's value, an integer, compared

A value may be empty (``key=``). Anything else is refused with what was expected, never matched as nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from cardquota.core.errors import InputError

_SPECIAL = "=!(),<>"
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INTEGER = re.compile(r"[+-]?[0-9]+")
WHERE = "--selector"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    """``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!``, ``>`` or ``<`` (``==`` is read as ``=``)."""
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator in ("=", "in"):
            return value is not None and value in self.values
        if self.operator in ("!=", "notin"):
            return value is None or value not in self.values
        if self.operator == "exists":
            return value is not None
        if self.operator == "!":
            return value is None
        if value is None or not _INTEGER.fullmatch(value):
            return False
        return int(value) > int(self.values[0]) if self.operator == ">" else int(value) < int(self.values[0])


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)


def parse_selector(text: str | None) -> Selector:
    """The selector ``text`` (None or blank: everything matches); InputError naming what is wrong."""
    if text is None or not text.strip():
        return Selector()
    tokens = _tokens(text)
    requirements: list[Requirement] = []
    position = 0

    def fail(expected: str) -> InputError:
        found = f"found {tokens[position]!r}" if position < len(tokens) else "found the end"
        return InputError(f"{text!r}: expected {expected}, {found} (selectors: key=value, key!=value, "
                          "key in (a,b), key notin (a,b), key, !key, key>N, key<N; comma-separated)", where=WHERE)

    def take(*accepted: str) -> str | None:
        nonlocal position
        if position < len(tokens) and tokens[position] in accepted:
            position += 1
            return tokens[position - 1]
        return None

    def identifier(what: str) -> str:
        nonlocal position
        if position >= len(tokens) or tokens[position] in _SPECIAL or tokens[position] in ("==", "!="):
            raise fail(what)
        position += 1
        return tokens[position - 1]

    while True:
        if take("!"):
            requirements.append(Requirement(_key(identifier("a label key after '!'"), text), "!"))
        else:
            key = _key(identifier("a label key"), text)
            operator = take("=", "==", "!=", ">", "<", "in", "notin")
            if operator is None:
                requirements.append(Requirement(key, "exists"))
            elif operator in ("in", "notin"):
                if not take("("):
                    raise fail(f"'(' after '{operator}'")
                values: list[str] = []
                while True:
                    values.append(_value(identifier("a value"), text))
                    if take(")"):
                        break
                    if not take(","):
                        raise fail("',' or ')' in the values")
                requirements.append(Requirement(key, operator, tuple(values)))
            elif operator in (">", "<"):
                bound = identifier(f"an integer after '{operator}'")
                if not _INTEGER.fullmatch(bound):
                    raise InputError(f"{text!r}: {key}{operator}{bound}: {operator} compares with an integer, not "
                                     f"{bound!r}", where=WHERE)
                requirements.append(Requirement(key, operator, (bound,)))
            else:
                at_end = position >= len(tokens) or tokens[position] == ","
                value = "" if at_end else _value(identifier("a value"), text)
                requirements.append(Requirement(key, "!=" if operator == "!=" else "=", (value,)))
        if position >= len(tokens):
            return Selector(tuple(requirements))
        if not take(","):
            raise fail("',' between requirements")


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char.isspace():
            index += 1
        elif text.startswith(("==", "!="), index):
            tokens.append(text[index:index + 2])
            index += 2
        elif char in _SPECIAL:
            tokens.append(char)
            index += 1
        else:
            end = index
            while end < len(text) and not text[end].isspace() and text[end] not in _SPECIAL:
                end += 1
            tokens.append(text[index:end])
            index = end
    return tokens


def _key(key: str, text: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if (len(name) > 63 or not _NAME.fullmatch(name)
            or (slash and (len(prefix) > 253 or not _PREFIX.fullmatch(prefix)))):
        raise InputError(f"{text!r}: {key!r} is not a label key (an optional DNS prefix and '/', then up to 63 "
                         "letters, digits, '-', '_' or '.')", where=WHERE)
    return key


def _value(value: str, text: str) -> str:
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        raise InputError(f"{text!r}: {value!r} is not a label value (up to 63 letters, digits, '-', '_' or '.', "
                         "beginning and ending with a letter or digit)", where=WHERE)
    return value
