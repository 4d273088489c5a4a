"""YAML (and JSON) text to Python values, safely: the only YAML parsing in cardquota.

Pure: it reads a string, never a file. Whatever the text, the only exception that leaves is :class:`InputError`,
located by document number; absurd nesting is refused before the C composer (which recurses on the C stack and
would crash the process instead of raising) ever sees it.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import yaml

from cardquota.core.errors import InputError

MAX_NESTING = 500
"""The CLI's limit on files (YAML or JSON): deeper than any real manifest or scheduler configuration, and safely
below what libyaml's composer and json.loads handle on the main thread's stack and recursion limit. The admission
webhooks accept what the API server accepts instead (webhooks/review.py: 10,000 levels)."""

_Loader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_documents(text: str) -> Iterator[tuple[int, Any]]:
    """(document number, value) for each document of a multi-document YAML or JSON text; empty documents are None.

    Raises InputError located as ``document N``.
    """
    if text.lstrip()[:1] in ("{", "["):
        value = _json(text)
        if value is not _NOT_JSON:
            yield 1, value
            return
    _check_nesting(text)
    index = 0
    try:
        for index, value in enumerate(yaml.load_all(text, Loader=_Loader), start=1):
            yield index, value
    except yaml.YAMLError as error:
        raise InputError(_yaml_problem(error), where=f"document {index + 1}") from None
    except Exception as error:  # PyYAML's constructors raise KeyError, IndexError, … on badly tagged values
        raise InputError(f"has a value that cannot be read ({type(error).__name__}: {error})",
                         where=f"document {index + 1}") from None


def load_one(text: str) -> Any:
    """The single document of a YAML text (None when empty); more than one document is an error."""
    documents = list(load_documents(text))
    if len(documents) > 1:
        raise InputError(f"holds {len(documents)} YAML documents where one is expected")
    return documents[0][1] if documents else None


_NOT_JSON = object()


def _json(text: str) -> Any:
    if json_nesting_exceeds(text):
        return _NOT_JSON  # (or YAML flow style with brackets in single-quoted strings): the YAML reader decides
    try:
        value = json.loads(text)
    except RecursionError:
        raise InputError(f"is nested more than {MAX_NESTING} levels deep", where="document 1") from None
    except ValueError:
        return _NOT_JSON  # not JSON after all (YAML flow style, several documents): read it as YAML
    if depth(value) > MAX_NESTING:
        raise InputError(f"is nested more than {MAX_NESTING} levels deep", where="document 1")
    return value


_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
_NOT_STRUCTURE = bytes(set(range(256)) - set(b'"[]{}'))
_SIGNED = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
"""Opening brackets to +1 and closing ones to -1, as signed bytes."""


def json_nesting_exceeds(text: str | bytes, limit: int = MAX_NESTING) -> bool:
    """Whether JSON text nests arrays/objects more than ``limit`` levels deep (brackets inside strings do not count).

    Checked on the text, before parsing: json.loads recurses once per level, so whether it fails on deep input
    depends on the interpreter's recursion limit, which any imported library may have raised. Large bodies are
    checked in one pass at C speed: escapes dropped, everything but quotes and brackets dropped, strings dropped,
    then the running sum of +1 (open) and -1 (close) compared with the limit.
    """
    if isinstance(text, str):
        data = text.encode("utf-8", errors="surrogatepass")
    else:
        encoding = json.detect_encoding(text)  # json.loads reads UTF-16/32 too: measure what it will read
        data = text if encoding == "utf-8" else text.decode(encoding, errors="replace").encode("utf-8")
    if data.count(b"[") + data.count(b"{") <= limit:  # the common case
        return False
    compact = _ESCAPE.sub(b"", data).translate(None, _NOT_STRUCTURE)
    brackets = _STRING.sub(b"", compact).replace(b'"', b"")
    steps = memoryview(brackets.translate(_SIGNED)).cast("b")
    return max(itertools.accumulate(steps), default=0) > limit


def depth(value: object) -> int:
    """How deeply lists and maps nest in a loaded value (iteratively: no recursion on hostile input)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in children)
    return deepest


def _check_nesting(text: str) -> None:
    level = 0
    document = 1
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.CollectionStartEvent):
                level += 1
                if level > MAX_NESTING:
                    raise InputError(f"is nested more than {MAX_NESTING} levels deep", where=f"document {document}")
            elif isinstance(event, yaml.CollectionEndEvent):
                level -= 1
            elif isinstance(event, yaml.DocumentEndEvent):
                document += 1
    except yaml.YAMLError as error:
        raise InputError(_yaml_problem(error), where=f"document {document}") from None


def _yaml_problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        problem = error.problem or error.context or "syntax error"
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {' '.join(problem.split())}"
    if isinstance(error, yaml.reader.ReaderError):
        return f"invalid character #x{error.character:04x} at position {error.position}: {error.reason}"
    return f"invalid YAML: {' '.join(str(error).split())}"
