"""Nesting (issue 17, item 5): the webhook reads what the API server's JSON decoder accepts — 10,000 levels in the
object (``maxNestingDepth = 10000`` in sigs.k8s.io/json internal/golang/encoding/json/scanner.go, the decoder of
k8s.io/apimachinery/pkg/util/json; Go 1.17's encoding/json, unchanged since), two more for the review around it —
without RecursionError on any Python (json.loads recurses on the C stack: ~1,000 levels on 3.11 by default, a fixed
~1,500 on 3.12), and deeper bodies are answered 400. The CLI keeps its own limit of 500 for files (yamltext)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cardquota.webhooks.deep_json import KEPT_NESTING, MAX_REVIEW_NESTING, loads_deep
from cardquota.webhooks.review import MalformedReview, json_document, loads, read_review

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=30,
)


@given(json_values, st.sampled_from([None, 1, "\t"]))
def test_the_deep_reader_reads_what_json_loads_reads(value: Any, indent: int | str | None) -> None:
    text = json.dumps(value, indent=indent)
    assert loads_deep(text) == json.loads(text)


@pytest.mark.parametrize("text", ["", "[", "[1,]", '{"a"}', '{"a":1,}', "[1 2]", "{1:2}", "nul", "[1]]", '"abc',
                                  '{"a":1', "[1,,2]", '{"a" 1}', "]", "[,]", '{"a":1 "b":2}'])
def test_the_deep_reader_refuses_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 (json's own errors are plain ValueErrors)
        json.loads(text)
    with pytest.raises(ValueError):  # noqa: PT011
        loads_deep(text)


def nested(depth: int) -> str:
    return '{"d":' * depth + "1" + "}" * depth


def review_nested(object_depth: int) -> bytes:
    """A review whose object nests ``object_depth`` levels (the object itself is level 1)."""
    head = json.dumps({"kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "batch.volcano.sh", "kind": "Job"}, "operation": "CREATE"}})
    return (head[:-2] + ', "object": {"spec": ' + nested(object_depth - 1) + "}}}").encode()


def test_a_review_nested_as_deep_as_the_api_server_allows_is_read() -> None:
    request = read_review(review_nested(10_000))
    assert request.object is not None
    assert request.object["spec"]["d"]["d"]["d"] is not None
    with pytest.raises(MalformedReview, match="the body nests more than 10,002 levels deep"):
        read_review(review_nested(10_001))


def test_values_deeper_than_any_rule_reads_are_kept_as_none() -> None:
    value = loads_deep(nested(MAX_REVIEW_NESTING))
    for _ in range(KEPT_NESTING - 1):
        value = value["d"]
    assert value == {"d": None}
    assert loads_deep(nested(KEPT_NESTING)) == json.loads(nested(KEPT_NESTING))


def test_a_shallow_body_is_read_by_json_loads_whole() -> None:
    text = nested(300)
    assert loads(text.encode()) == json.loads(text)


def test_no_recursion_error_on_any_thread_whatever_the_recursion_limit() -> None:
    outcome: list[object] = []

    def read() -> None:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(100)
        try:
            outcome.append(loads(("[" * 5000 + "]" * 5000).encode()))
        finally:
            sys.setrecursionlimit(limit)

    worker = threading.Thread(target=read)
    worker.start()
    worker.join()
    assert isinstance(outcome[0], list)
    assert sys.getrecursionlimit() >= 1000


def test_deep_bodies_in_utf16_are_read_and_bad_utf8_refused() -> None:
    text = "[" * 3000 + '"é"' + "]" * 3000
    assert loads(text.encode("utf-16")) == loads_deep(text)
    with pytest.raises(ValueError):  # noqa: PT011
        loads(b"[" * 3000 + b'"\xff"' + b"]" * 3000)


json_texts = st.one_of(
    st.builds(json.dumps, json_values),
    st.builds(lambda value, indent: json.dumps(value, indent=indent), st.dictionaries(st.text(max_size=6), json_values,
                                                                                       max_size=4),
              st.sampled_from([None, 1, "\t"])),
    st.text(alphabet='{}[]":,0123456789.eE+- \t\n\rtruefalsnu\\é\x00', max_size=30),
)
"""JSON documents, objects among them, and text that is mostly almost JSON."""
surroundings = st.sampled_from(["", " ", "\n", " \r\n\t", "x", " 1", "{}", "\ufeff"])


@given(json_texts, surroundings, st.sampled_from(["utf-8", "utf-16", "utf-16-le", "utf-32", "utf-8-sig"]))
def test_the_review_reader_reads_and_refuses_what_json_loads_does(text: str, tail: str, encoding: str) -> None:
    body = (text + tail).encode(encoding, "surrogatepass")
    assert outcome(json_document, body) == outcome(json.loads, body)


@given(st.binary(max_size=24))
def test_the_review_reader_agrees_with_json_loads_on_any_bytes(tail: bytes) -> None:
    for body in (b"{" + tail, b'{"a": 1}' + tail, tail):
        assert outcome(json_document, body) == outcome(json.loads, body)


def outcome(read: Callable[[bytes], object], body: bytes) -> object:
    """What ``read`` gives, or the type and text of the error it raises (UnicodeDecodeError and JSONDecodeError are
    both ValueErrors)."""
    try:
        return read(body)
    except ValueError as error:
        return (type(error), str(error))
