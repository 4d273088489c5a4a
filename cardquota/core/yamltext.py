"""YAML (and JSON) text to Python values, safely: the only YAML parsing in cardquota.

Pure: it reads a string, never a file. Whatever the text, the only exception that leaves is :class:`InputError`,
located by document number; absurd nesting is refused before the C composer (which recurses on the C stack and
would crash the process instead of raising) ever sees it.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import yaml

from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES

MAX_NESTING = 500
"""The CLI's limit on files (YAML or JSON): deeper than any real manifest or scheduler configuration, and safely
below what libyaml's composer and json.loads handle on the main thread's stack and recursion limit. The admission
webhooks accept what the API server accepts instead (webhooks/review.py: 10,000 levels)."""

YAML_LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader on libyaml (C) where PyYAML was built with it, else the pure-Python one."""
_Loader = YAML_LOADER


def load_documents(text: str, *, as_kubectl: bool = False) -> Iterator[tuple[int, Any]]:
    """(document number, value) for each document of a multi-document YAML or JSON text; empty documents are None.
    ``as_kubectl``: a text that starts with ``{`` is JSON, strictly (:func:`_json_stream`), as kubectl reads manifests
    (a scheduler configuration is YAML, flow style included, as Volcano reads it).

    Raises InputError located as ``document N``.
    """
    if text.lstrip()[:1] in ("{", "["):
        value = _json(text)
        if value is not _NOT_JSON:
            yield 1, value
            return
        if as_kubectl and text.lstrip()[:1] == "{" and not _YAML_MARKER.search(text) and not json_nesting_exceeds(text):
            yield from _json_stream(text)  # (as kubectl reads it: strictly, JSON after JSON)
            return
    try:
        yield from _built_documents(text)
        return
    except _Unusual:
        pass  # (nothing was yielded: a value the fast reader leaves to PyYAML's constructors is seen first)
    _check_nesting(text)
    index = 0
    try:
        for index, value in enumerate(yaml.load_all(text, Loader=_Loader), start=1):
            yield index, value
    except yaml.YAMLError as error:
        raise InputError(_yaml_problem(error, text), where=f"document {index + 1}") from None
    except Exception as failure:  # PyYAML's constructors raise KeyError, IndexError, … on badly tagged values
        raise InputError(f"has a value that cannot be read ({type(failure).__name__}: {failure})",
                         where=f"document {index + 1}") from None


class _Unusual(Exception):
    """The text holds what :func:`_built_documents` leaves to PyYAML's composer and constructors."""


_RESOLVER: Any = yaml.resolver.Resolver()  # (untyped)
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "timestamp"))
_STR_TAG = "tag:yaml.org,2002:str"
MAX_REMEMBERED_SCALARS = 65_536
"""Plain scalars whose value :func:`_built_documents` remembers (a cluster dump repeats a few thousand)."""


def _built_documents(text: str) -> Iterator[tuple[int, Any]]:
    """:func:`load_documents` for YAML, in one pass over libyaml's events: values built as the events come (no
    node graph held, so memory is the values'), nesting counted on the way (libyaml's parser does not recurse).
    The values are PyYAML's (SafeConstructor's scalar constructors, the resolver's implicit tags); anything but
    plain maps, lists and scalars — an anchor, an alias, an explicit tag, a merge key, a collection as a key —
    raises :class:`_Unusual` before any document is yielded, and PyYAML's loader reads the text instead.

    Documents are yielded only once the whole text is read (as PyYAML's loader would not have failed on a later
    one before, nor will it here)."""
    parser = _Loader(text)
    documents: list[tuple[int, Any]] = []
    scalars: dict[tuple[str, bool], Any] = {}
    stack: list[list[Any] | dict[Any, Any]] = []
    keys: list[Any] = []  # per open mapping: its pending key (_NO_KEY when the next scalar is a key)
    value: Any = None
    ended = 0
    try:
        while True:
            event = parser.get_event()
            kind = type(event)
            if kind is yaml.ScalarEvent:
                if event.anchor is not None or event.tag not in (None, "!"):
                    raise _Unusual
                plain = event.implicit[0]
                if not plain:
                    value = event.value
                else:
                    key = (event.value, event.tag is None)
                    value = scalars.get(key, _NO_KEY)
                    if value is _NO_KEY:
                        value = _plain_scalar(event.value, event.implicit)
                        if len(scalars) < MAX_REMEMBERED_SCALARS:
                            scalars[key] = value
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                if event.anchor is not None or event.tag not in (None, "!"):
                    raise _Unusual
                if len(stack) >= MAX_NESTING:
                    raise InputError(f"is nested more than {MAX_NESTING} levels deep", where=f"document {ended + 1}")
                if stack and type(stack[-1]) is dict and keys[-1] is _NO_KEY:
                    raise _Unusual  # a collection as a key
                stack.append({} if kind is yaml.MappingStartEvent else [])
                keys.append(_NO_KEY)
                continue
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                value = stack.pop()
                keys.pop()
            elif kind is yaml.DocumentEndEvent:
                ended += 1
                documents.append((ended, value))
                value = None
                continue
            elif kind is yaml.StreamEndEvent:
                break
            elif kind is yaml.AliasEvent:
                raise _Unusual
            else:  # stream and document starts
                continue
            if not stack:
                continue  # a document's root: kept in value until its end
            top = stack[-1]
            if type(top) is list:
                top.append(value)
            elif keys[-1] is _NO_KEY:
                if value == "<<" and event.implicit[0] and type(value) is str:
                    raise _Unusual  # a merge key
                try:
                    hash(value)
                except TypeError:
                    raise _Unusual from None
                keys[-1] = value
            else:
                top[keys[-1]] = value
                keys[-1] = _NO_KEY
    except yaml.YAMLError as error:
        raise InputError(_yaml_problem(error, text), where=f"document {ended + 1}") from None
    except (InputError, _Unusual):
        raise
    except Exception:  # a scalar PyYAML's constructors refuse ("2026-13-45" as a timestamp): its reader says how
        raise _Unusual from None
    finally:
        parser.dispose()
    yield from documents


_NO_KEY = object()


def _plain_scalar(text: str, implicit: tuple[bool, bool]) -> Any:
    tag = _RESOLVER.resolve(yaml.ScalarNode, text, implicit)
    if tag == _STR_TAG:
        return text
    if tag not in _PLAIN_TAGS:
        raise _Unusual  # (the "=" value tag and other resolutions SafeConstructor cannot construct)
    return _CONSTRUCTOR.yaml_constructors[tag](_CONSTRUCTOR, yaml.ScalarNode(tag, text))


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
    return value  # (no deeper than MAX_NESTING: json_nesting_exceeds measured the text json.loads read)


_YAML_MARKER = re.compile(r"^---", re.MULTILINE)
"""A YAML document marker at a line's start: JSON documents between such markers are read as YAML documents."""


def _json_stream(text: str) -> Iterator[tuple[int, Any]]:
    """A text that starts with ``{`` and is not one JSON value: kubectl's YAML-or-JSON decoder reads such a stream as
    JSON values one after the other (k8s.io/apimachinery pkg/util/yaml ``NewYAMLOrJSONDecoder``, ``hasJSONPrefix``),
    so a trailing comma, a comment or an unquoted key is an error there — and here, where YAML would accept them."""
    decoder = json.JSONDecoder()
    position, index = 0, 0
    while True:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        if position >= len(text):
            return
        index += 1
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise InputError(f"is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno}; kubectl "
                             "reads a text that starts with { as JSON)", where=f"document {index}") from None
        yield index, value


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
        if isinstance(item, MAPPING_TYPES):
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
        raise InputError(_yaml_problem(error, text), where=f"document {document}") from None


TAB_HINT = "a tab: YAML does not allow tabs for indentation: indent with spaces"


def _yaml_problem(error: yaml.YAMLError, text: str) -> str:
    """The parser's error in one line, located; ``text`` is what it read (to name the character it stopped at)."""
    if "maximum nesting depth" in str(error):  # libyaml's own limit (1,000 levels in PyYAML 6.0.4's): deeper than ours
        return f"is nested more than {MAX_NESTING} levels deep"
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        problem = " ".join((error.problem or error.context or "syntax error").split())
        # libyaml says only "found character that cannot start any token" (or "found a tab character that violates
        # indentation"); the mark's index counts characters of the text, in both loaders
        if 0 <= mark.index < len(text) and text[mark.index] == "\t":
            problem = f"{problem} ({TAB_HINT})"
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    if isinstance(error, yaml.reader.ReaderError):
        return f"invalid character #x{error.character:04x} at position {error.position}: {error.reason}"
    return f"invalid YAML: {' '.join(str(error).split())}"
