"""Reading Kubernetes manifests from files and stdin: multi-document YAML or JSON, ``kind: List`` unwrapped.

Whatever the bytes, the only exception that leaves this module is :class:`InputError`, located by file and
document number, in one line.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from cardquota.core.errors import InputError
from cardquota.core.objects import given_name
from cardquota.core.violations import type_name
from cardquota.core.yamltext import load_documents

STDIN = "-"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_INPUT_BYTES = 1 << 30
"""The most read from one file or stdin (1 GiB): ``kubectl get nodes,queues,podgroups,pods -A -o json`` of 1,000
nodes and 40,000 pods is ~570 MB (~240 MB as YAML). At most this plus one byte is ever read, so an endless input
(``/dev/zero``) is refused at once."""


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
    try:
        for index, value in load_documents(text, as_kubectl=True):
            if value is not None:
                documents.extend(_objects(value, f"{name}: document {index}"))
    except InputError as error:
        if error.where.startswith(f"{name}: "):
            raise  # already located by _objects
        raise error.located(name) from None
    return documents


def _read(path: str, stdin: BinaryIO | None) -> Iterator[tuple[str, bytes]]:
    if path == STDIN:
        stream = stdin if stdin is not None else sys.stdin.buffer
        try:
            yield "<stdin>", _bounded(stream, "<stdin>")
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
                yield str(file), _read_file(file, str(file))
        else:
            yield path, _read_file(target, path)
    except FileNotFoundError:
        raise InputError("no such file or directory", where=path) from None
    except PermissionError:
        raise InputError("permission denied", where=path) from None
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror or error}", where=path) from None
    except ValueError as error:  # e.g. an embedded NUL byte in the path
        raise InputError(f"is not a usable path: {error}", where=repr(path)) from None


def _read_file(path: Path, name: str) -> bytes:
    with path.open("rb") as stream:
        return _bounded(stream, name)


def _bounded(stream: BinaryIO, name: str) -> bytes:
    """Everything ``stream`` holds, up to :data:`MAX_INPUT_BYTES`; beyond, a one-line refusal naming the limit."""
    data = stream.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"is larger than {MAX_INPUT_BYTES >> 30} GiB ({MAX_INPUT_BYTES:,} bytes), the most cardquota "
                         "reads from one input: split it (one kubectl get per kind, each file given to its own "
                         "-f/--cluster)", where=name)
    return data


def _decode(data: bytes, name: str) -> str:
    wide = wide_encoding(data)
    if wide is not None:
        encoding, evidence = wide
        fix = (f"iconv -f {encoding} -t UTF-8 {shlex.quote(name)} > {shlex.quote(_utf8_name(name))}"
               if name != "<stdin>" else f"pipe it through iconv -f {encoding} -t UTF-8")
        raise InputError(f"is not UTF-8 text: it looks like {encoding} ({evidence}): save it as UTF-8, e.g. {fix}",
                         where=name)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(
            f"is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})", where=name
        ) from None


# Byte-order marks of the encodings Windows tools save "Unicode" text in (PowerShell 5's `>` and Out-File write
# UTF-16 LE with FF FE), UTF-32's first: its little-endian mark begins with UTF-16's.
_BYTE_ORDER_MARKS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
_SNIFFED_BYTES = 256


def wide_encoding(data: bytes) -> tuple[str, str] | None:
    """(iconv's name of the encoding, what shows it) when ``data`` looks like UTF-16 or UTF-32 text rather than
    UTF-8: it starts with their byte-order mark, or (no mark) in its first bytes every other one is NUL, as ASCII
    characters are in UTF-16 (a NUL is valid UTF-8, so such a file would otherwise reach the YAML reader and be
    refused for its control characters). One stray NUL is not enough; None otherwise."""
    for mark, encoding in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            return encoding, f"a byte-order mark {mark.hex(' ').upper()}"
    head = data[:_SNIFFED_BYTES]
    pairs = len(head) // 2
    if pairs < 2:
        return None
    even_nuls, odd_nuls = head[0:pairs * 2:2].count(0), head[1:pairs * 2:2].count(0)
    if odd_nuls * 2 >= pairs and even_nuls == 0:
        return "UTF-16LE", "NUL bytes at the odd offsets, no byte-order mark"
    if even_nuls * 2 >= pairs and odd_nuls == 0:
        return "UTF-16BE", "NUL bytes at the even offsets, no byte-order mark"
    return None


def _utf8_name(name: str) -> str:
    path = Path(name)
    return str(path.with_name(f"{path.stem}.utf8{path.suffix}"))


def _objects(value: object, where: str) -> list[Document]:
    if not isinstance(value, Mapping):
        raise InputError(f"is not a Kubernetes object ({type_name(value)}, not a map)", where=where)
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
        raise InputError(f"items must be a list, not {type_name(items)}", where=where)
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
    if not given_name(value.get("metadata")):  # generateName is enough, as for kubectl create
        raise InputError(f"{value['kind']} has no metadata.name", where=where)
