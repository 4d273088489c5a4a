"""Reading Kubernetes manifests from files and stdin: multi-document YAML or JSON, ``kind: List`` unwrapped.

Whatever the bytes, the only exception that leaves this module is :class:`InputError`, located by file and
document number, in one line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from cardquota.core.errors import InputError

STDIN = "-"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_NESTING = 500
"""Deeper than any real manifest; guards the YAML composer, which recurses on the C stack."""

_Loader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Document:
    """One Kubernetes object and where it came from (``cluster.yaml: document 3``)."""

    manifest: Mapping[str, Any]
    source: str


def load_paths(paths: Sequence[str], stdin: BinaryIO | None = None) -> list[Document]:
    """Every object in the given files (``-`` is stdin; a directory contributes its manifest files, sorted)."""
    documents: list[Document] = []
    for path in paths:
        for name, data in _read(path, stdin):
            documents.extend(parse_documents(data, name))
    return documents


def parse_documents(data: bytes, name: str) -> list[Document]:
    """The objects in one file's bytes; ``name`` is used in error messages and sources."""
    text = _decode(data, name)
    documents: list[Document] = []
    for index, value in enumerate(_values(text, name), start=1):
        where = f"{name}: document {index}"
        if value is None:
            continue
        documents.extend(_objects(value, where))
    return documents


def _read(path: str, stdin: BinaryIO | None) -> Iterator[tuple[str, bytes]]:
    if path == STDIN:
        stream = stdin if stdin is not None else sys.stdin.buffer
        try:
            yield "<stdin>", stream.read()
        except OSError as error:
            raise InputError(f"cannot read: {error.strerror or error}", where="<stdin>") from None
        return
    if not path:
        raise InputError("an empty file name was given", where="''")
    target = Path(path)
    try:
        if target.is_dir():
            files = sorted(p for p in target.iterdir() if p.suffix in MANIFEST_SUFFIXES and p.is_file())
            if not files:
                raise InputError("directory holds no .yaml, .yml or .json file", where=path)
            for file in files:
                yield str(file), file.read_bytes()
        else:
            yield path, target.read_bytes()
    except FileNotFoundError:
        raise InputError("no such file or directory", where=path) from None
    except PermissionError:
        raise InputError("permission denied", where=path) from None
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror or error}", where=path) from None
    except ValueError as error:  # e.g. an embedded NUL byte in the path
        raise InputError(f"is not a usable path: {error}", where=repr(path)) from None


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(
            f"is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})", where=name
        ) from None


def _values(text: str, name: str) -> Iterator[Any]:
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            value = json.loads(text)
        except RecursionError:
            raise InputError(f"is nested more than {MAX_NESTING} levels deep", where=f"{name}: document 1") from None
        except ValueError:
            pass  # not JSON after all (YAML flow style, several documents): read it as YAML
        else:
            if _depth(value) > MAX_NESTING:
                raise InputError(f"is nested more than {MAX_NESTING} levels deep", where=f"{name}: document 1")
            yield value
            return
    _check_nesting(text, name)
    index = 0
    try:
        for index, value in enumerate(yaml.load_all(text, Loader=_Loader), start=1):  # noqa: B007
            yield value
    except yaml.YAMLError as error:
        raise InputError(_yaml_problem(error), where=f"{name}: document {index + 1}") from None
    except Exception as error:  # PyYAML's constructors raise KeyError, IndexError, … on badly tagged values
        raise InputError(f"has a value that cannot be read ({type(error).__name__}: {error})",
                         where=f"{name}: document {index + 1}") from None


def _depth(value: object) -> int:
    """How deeply lists and maps nest in a loaded value (iteratively: no recursion on hostile input)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _check_nesting(text: str, name: str) -> None:
    """Reject absurd nesting before composing (the C composer would overflow the stack, not raise)."""
    depth = 0
    document = 1
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_NESTING:
                    where = f"{name}: document {document}"
                    raise InputError(f"is nested more than {MAX_NESTING} levels deep", where=where)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.DocumentEndEvent):
                document += 1
    except yaml.YAMLError as error:
        raise InputError(_yaml_problem(error), where=f"{name}: document {document}") from None


def _yaml_problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        problem = error.problem or error.context or "syntax error"
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {_one_line(problem)}"
    if isinstance(error, yaml.reader.ReaderError):
        return f"invalid character #x{error.character:04x} at position {error.position}: {error.reason}"
    return f"invalid YAML: {_one_line(str(error))}"


def _objects(value: object, where: str) -> list[Document]:
    if not isinstance(value, Mapping):
        raise InputError(f"is not a Kubernetes object (a {_shape(value)}, not a map)", where=where)
    api_version, kind = value.get("apiVersion"), value.get("kind")
    if not isinstance(api_version, str) or not api_version or not isinstance(kind, str) or not kind:
        raise InputError("is not a Kubernetes object (it needs string apiVersion and kind)", where=where)
    if not kind.endswith("List") or "items" not in value:
        _check_metadata(value, where)
        return [Document(manifest=value, source=where)]
    items = value.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise InputError(f"items must be a list, not a {_shape(items)}", where=where)
    item_kind = kind.removesuffix("List")
    documents: list[Document] = []
    for position, item in enumerate(items):
        item_where = f"{where}: items[{position}]"
        if isinstance(item, Mapping) and "kind" not in item and item_kind:
            # Lists straight from the API server (PodList, NodeList) leave out the items' apiVersion and kind.
            item = {"apiVersion": api_version, "kind": item_kind, **item}
        documents.extend(_objects(item, item_where))
    return documents


def _check_metadata(value: Mapping[str, Any], where: str) -> None:
    metadata = value.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise InputError(f"{value['kind']} has no metadata.name", where=where)


def _shape(value: object) -> str:
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def _one_line(text: str) -> str:
    return " ".join(text.split())
