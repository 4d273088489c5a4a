"""JSON nested as deep as the API server sends it, read without recursion, in time linear in its size, keeping only
the levels a rule can read.

json.loads recurses once per level on the C stack and stops at the interpreter's recursion limit (~1,000 levels on
CPython 3.11, a fixed ~1,500 on 3.12), while the API server decodes 10,000 (:data:`API_SERVER_JSON_NESTING`). A
Volcano Job keeps unknown fields, so a Job that deep is legal and reaches the webhook. :func:`loads_deep` reads it
with regexes and json's own C scanner doing the work on everything that is shallow, and bytecode only where the
nesting is:

* a *shallow value* (containers at most :data:`SHALLOW_LEVELS` deep) is recognised by one regex match and built by
  json's C scanner (which cannot recurse far on it);
* a run of shallow array elements or object members (``v, v, …,``) is one regex match and one json.loads;
* a container nested deeper than ``kept_nesting`` is skipped (checked, not built) by :func:`_skip_container`, which
  reads a run of openings (``[{"key":[…``) in one match and its closings in another: a chain 10,000 levels deep is a
  handful of matches, and memory stays that of the kept part.

A failed attempt at a shallow value rescans at most :data:`SHALLOW_LEVELS` levels, so each character is matched a
bounded number of times. Bytecode between the matches gives other threads the GIL, where json.loads would hold it
for the whole body.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

API_SERVER_JSON_NESTING = 10_000
"""The deepest JSON the API server decodes: ``maxNestingDepth = 10000`` in sigs.k8s.io/json's
internal/golang/encoding/json/scanner.go (imported from Go 1.17's encoding/json in 2021, unchanged since), the
decoder of k8s.io/apimachinery/pkg/util/json and of the JSON serializer (whose ``maxDepth`` is 10000 too)."""
MAX_REVIEW_NESTING = API_SERVER_JSON_NESTING + 2
"""A review wraps the object in two levels (``{"request": {"object": …}}``): anything deeper than this cannot come
from the API server."""
KEPT_NESTING = 100
"""Values are kept this many levels deep (no rule reads deeper than ~20:
``spec.tasks[0].template.spec.affinity.nodeAffinity…values[0]``); deeper containers are read but kept as None."""
SHALLOW_LEVELS = 4
"""A shallow value nests at most this many containers: recognised by one regex (whose size grows as
2 ** SHALLOW_LEVELS), and the most levels a failed recognition rescans."""


class TooDeep(ValueError):
    """JSON nested deeper than :data:`MAX_REVIEW_NESTING`."""

    def __init__(self) -> None:
        super().__init__(f"the body nests more than {MAX_REVIEW_NESTING:,} levels deep (the API server decodes at "
                         f"most {API_SERVER_JSON_NESTING:,} in the object)")


Matcher = Callable[[str, int], "re.Match[str] | None"]

_SPACE = r"[ \t\n\r]*+"
_STRING = r'"[^"\\\x00-\x1f]*+(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*+)*+"'
"""A JSON string as json.loads reads it (no control characters, only JSON's escapes)."""
_SCALAR = (rf"(?:{_STRING}|-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][-+]?+[0-9]++)?+"
           r"|true|false|null|NaN|Infinity|-Infinity)")
"""A JSON scalar as json.loads reads it (its constants NaN and ±Infinity included)."""


def _value_within(levels: int) -> str:
    """A value nesting at most ``levels`` containers (empty ones included; after a comma, the next element must
    follow)."""
    value = _SCALAR
    for _ in range(levels):
        value = (rf"(?:{_SCALAR}|\[{_SPACE}(?:{value}{_SPACE}(?:,{_SPACE}(?!\])|(?=\])))*+\]"
                 rf"|\{{{_SPACE}(?:{_STRING}{_SPACE}:{_SPACE}{value}{_SPACE}(?:,{_SPACE}(?!\}})|(?=\}})))*+\}})")
    return value


@dataclass(frozen=True)
class _Shallow:
    """Matchers of shallow values at one nesting budget: a value, a run of array elements and a run of object
    members (each of the runs' items followed by its comma)."""

    value: Matcher
    elements: Matcher
    members: Matcher

    @classmethod
    def within(cls, levels: int) -> _Shallow:
        value = _value_within(levels)
        return cls(cast(Matcher, re.compile(value).match),
                   cast(Matcher, re.compile(rf"(?:{value}{_SPACE},{_SPACE})++").match),
                   cast(Matcher, re.compile(rf"(?:{_STRING}{_SPACE}:{_SPACE}{value}{_SPACE},{_SPACE})++").match))


_SHALLOW = [_Shallow.within(levels) for levels in range(SHALLOW_LEVELS + 1)]
"""By the levels a value may still nest (up to SHALLOW_LEVELS: more is the same as that), so that nothing read as
shallow passes MAX_REVIEW_NESTING."""


def _shallow(levels: int) -> _Shallow:
    """The matchers for values that may nest ``levels`` more containers."""
    return _SHALLOW[max(0, min(SHALLOW_LEVELS, levels))]


_openings = cast(Matcher, re.compile(
    rf"(?:\[(?!{_SPACE}\]){_SPACE}(?:(?![\[{{]){_SCALAR}{_SPACE},{_SPACE})*+"
    rf"|\{{{_SPACE}{_STRING}{_SPACE}:{_SPACE}(?:(?![\[{{]){_SCALAR}{_SPACE},{_SPACE}{_STRING}{_SPACE}:{_SPACE})*+)"
    rf"{{1,{MAX_REVIEW_NESTING + 1}}}").match)
"""A run of container openings, each with the scalars before the next (an array's elements, an object's keys and
values, each followed by a comma) and what starts that next value (an object's key and colon)."""
_closings = cast("Callable[[str, int], re.Match[str]]", re.compile(rf"(?:{_SPACE}[\]}}])*+{_SPACE}").match)
_member_name = cast(Matcher, re.compile(rf"{_STRING}{_SPACE}:{_SPACE}").match)
_skip = cast("Callable[[str, int], re.Match[str]]", re.compile(_SPACE).match)
_strings_out = cast("Callable[[str, str], str]", re.compile(_STRING).sub)
_CLOSING_OF = str.maketrans("[{", "]}", " \t\n\r:,0123456789-+.eEtrufalsnNIiy")
"""A run of openings without its strings → the closing characters of its openings (all else a run may hold out of
strings, whitespace, punctuation and scalars, dropped)."""
_NO_SPACE = str.maketrans({" ": None, "\t": None, "\n": None, "\r": None})
_scan = cast("Callable[[str, int], tuple[Any, int]]", json.scanner.make_scanner(cast(Any, json.JSONDecoder())))
"""json's C scanner: one value at a position → (the value, the position after it); StopIteration if there is none.
Used on scalars and shallow values only, where its recursion stays shallow."""
_string = cast("Callable[[str, int], tuple[str, int]]", vars(json.decoder)["scanstring"])
"""json's C string reader: the text after an opening quote → (the string, the position after its closing quote)."""


def loads_deep(text: str, kept_nesting: int = KEPT_NESTING) -> Any:
    """The JSON value of ``text``, read as json.loads reads it (same values, same refusals: ValueError) at any depth
    up to :data:`MAX_REVIEW_NESTING` (deeper raises :class:`TooDeep`); containers nested deeper than ``kept_nesting``
    are checked and kept as None."""
    end = len(text)
    stack: list[tuple[list[Any] | dict[str, Any], str]] = []  # (open container, its closing character)
    key = ""  # the pending key of the innermost container when it is an object
    keys: list[str] = []  # the pending keys of the objects further out
    limit = min(kept_nesting, MAX_REVIEW_NESTING)  # containers opened deeper are skipped
    position = _skip(text, 0).end()
    while True:  # a value is expected at position
        opening = text[position : position + 1]
        if opening == "[" or opening == "{":
            depth = len(stack)
            if depth >= MAX_REVIEW_NESTING:
                raise TooDeep
            if depth >= kept_nesting:
                value, position = None, _skip_container(text, position, depth)
            elif _shallow(limit - depth).value(text, position) is not None:
                value, position = _scan(text, position)
            else:  # a deep container: opened here, its shallow elements or members read in runs
                position = _skip(text, position + 1).end()
                if opening == "[":
                    elements: list[Any] = []
                    stack.append((elements, "]"))
                    if not text.startswith("]", position):
                        position = _read_elements(text, position, elements, limit - depth - 1)
                        continue
                else:
                    members: dict[str, Any] = {}
                    stack.append((members, "}"))
                    if not text.startswith("}", position):
                        keys.append(key)
                        key, position = _read_members(text, position, members, limit - depth - 1)
                        continue
                value, position = stack.pop()[0], position + 1
        else:
            try:
                value, position = _scan(text, position)
            except StopIteration:
                raise ValueError(f"Expecting value: char {position}") from None
        while True:  # a value is complete: into its container, then "," or the container's end
            if not stack:
                if _skip(text, position).end() != end:
                    raise ValueError(f"Extra data: char {position}")
                return value
            container, closing = stack[-1]
            if closing == "]":
                cast("list[Any]", container).append(value)
            else:
                cast("dict[str, Any]", container)[key] = value
            position = _skip(text, position).end()
            if text.startswith(",", position):
                position = _skip(text, position + 1).end()
                if closing == "]":
                    position = _read_elements(text, position, cast("list[Any]", container),
                                              limit - len(stack))
                else:
                    key, position = _read_members(text, position, cast("dict[str, Any]", container),
                                                 limit - len(stack))
                break
            if not text.startswith(closing, position):
                raise ValueError(f"Expecting ',' or {closing!r}: char {position}")
            value, position = container, position + 1
            stack.pop()
            if closing == "}":
                key = keys.pop()


def _read_elements(text: str, position: int, elements: list[Any], levels: int) -> int:
    """Shallow elements from ``position`` on (each followed by a comma, nesting at most ``levels``) appended: the
    position of the next one."""
    run = _shallow(levels).elements(text, position)
    if run is None:
        return position
    elements.extend(json.loads("[" + text[position : run.end()].rstrip(" \t\n\r")[:-1] + "]"))
    return run.end()


def _read_members(text: str, position: int, members: dict[str, Any], levels: int) -> tuple[str, int]:
    """Members with shallow values from ``position`` on (each followed by a comma, nesting at most ``levels``)
    added: the next member's key and the position of its value."""
    run = _shallow(levels).members(text, position)
    if run is not None:
        members.update(json.loads("{" + text[position : run.end()].rstrip(" \t\n\r")[:-1] + "}"))
        position = run.end()
    if not text.startswith('"', position):
        raise ValueError(f"Expecting property name enclosed in double quotes: char {position}")
    key, position = _string(text, position + 1)
    position = _skip(text, position).end()
    if not text.startswith(":", position):
        raise ValueError(f"Expecting ':' delimiter: char {position}")
    return key, _skip(text, position + 1).end()


def _skip_container(text: str, position: int, depth: int) -> int:
    """The position after the container opening at ``position`` (``depth`` containers around it), checked as
    json.loads checks it without building it: shallow values and runs of them in one match each, a run of openings
    in one match (its closing characters pushed on a stack), a run of closings in one (compared with the stack)."""
    closings: list[str] = []  # of the containers open inside the skipped one (itself included), innermost last
    while True:  # a value is expected at position
        levels = MAX_REVIEW_NESTING - depth - len(closings)
        shallow = _shallow(levels).value(text, position)
        if shallow is None:
            if levels <= 0 and text.startswith(("[", "{"), position):
                raise TooDeep
            run = _openings(text, position)
            if run is None:
                raise ValueError(f"Expecting value: char {position}")
            closings.extend(_outside_strings(run.group()).translate(_CLOSING_OF))
            if depth + len(closings) > MAX_REVIEW_NESTING:
                raise TooDeep
            position = run.end()
            if closings[-1] == "]":
                position = _skipped(_shallow(MAX_REVIEW_NESTING - depth - len(closings)).elements, text, position)
            continue
        if not closings:  # the skipped container is shallow
            return shallow.end()
        run = _closings(text, shallow.end())
        shut = run.group().translate(_NO_SPACE)
        if len(shut) >= len(closings):  # the skipped container ends here (what follows is the caller's)
            if shut[: len(closings)] != "".join(reversed(closings)):
                raise ValueError(f"Expecting ',' or a matching closing bracket: char {run.start()}")
            return _after_closings(text, run.start(), len(closings))
        if shut:
            if shut != "".join(reversed(closings[-len(shut) :])):
                raise ValueError(f"Expecting ',' or a matching closing bracket: char {run.start()}")
            del closings[-len(shut) :]
        position = run.end()
        if not text.startswith(",", position):
            raise ValueError(f"Expecting ',' delimiter: char {position}")
        position = _skip(text, position + 1).end()
        inside = _shallow(MAX_REVIEW_NESTING - depth - len(closings))
        if closings[-1] == "]":
            position = _skipped(inside.elements, text, position)
        else:
            name = _member_name(text, _skipped(inside.members, text, position))
            if name is None:
                raise ValueError(f"Expecting property name enclosed in double quotes: char {position}")
            position = name.end()


def _skipped(run: Matcher, text: str, position: int) -> int:
    matched = run(text, position)
    return position if matched is None else matched.end()


def _after_closings(text: str, position: int, count: int) -> int:
    """The position after the ``count``-th closing bracket from ``position`` (only whitespace between them)."""
    return cast("re.Match[str]", re.compile(rf"(?:{_SPACE}[\]}}]){{{count}}}").match(text, position)).end()


def _outside_strings(text: str) -> str:
    """``text`` (whole JSON tokens) without its strings."""
    if "\\" in text:  # an escaped quote may be in a string
        return _strings_out("", text)
    return "".join(text.split('"')[::2])
