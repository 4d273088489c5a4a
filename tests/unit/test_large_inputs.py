"""Large inputs (issue 18, item 10): JSON read by json, YAML by libyaml's events in one pass (values built as they
come, no node graph), PyYAML's C loader where available, and a one-line refusal above the input-size limit with
never more than the limit plus one byte read — ``check -f /dev/zero`` ends at once with exit 2."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from builders import gpu_node, pod, podgroup, queue
from hypothesis import given, settings
from hypothesis import strategies as st

import cardquota.loader as loader
from cardquota.core import yamltext
from cardquota.core.errors import InputError
from cardquota.loader import MAX_INPUT_BYTES, load_paths, parse_documents

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from large_input import realistic_cluster  # noqa: E402

LIMIT_MESSAGE = ("is larger than 1 GiB (1,073,741,824 bytes), the most cardquota reads from one input: split it "
                 "(one kubectl get per kind, each file given to its own -f/--cluster)")


class Endless(io.RawIOBase):
    """Zero bytes for ever, counting what was read."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        buffer[:] = bytes(len(buffer))
        self.read_bytes += len(buffer)
        return len(buffer)


def test_an_endless_stdin_is_refused_after_reading_the_limit_and_one_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "MAX_INPUT_BYTES", 1000)
    endless = Endless()
    with pytest.raises(InputError) as caught:
        load_paths(["-"], io.BufferedReader(endless))  # type: ignore[arg-type]
    assert str(caught.value).startswith("<stdin>: is larger than 0 GiB (1,000 bytes)")
    assert endless.read_bytes <= 1001 + io.DEFAULT_BUFFER_SIZE


def test_a_file_over_the_limit_is_refused_and_one_at_the_limit_is_read(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    data = yaml.safe_dump(gpu_node("a", "NVIDIA-A100", 8)).encode()
    path = tmp_path / "nodes.yaml"
    path.write_bytes(data)
    monkeypatch.setattr(loader, "MAX_INPUT_BYTES", len(data))
    assert len(load_paths([str(path)])) == 1
    monkeypatch.setattr(loader, "MAX_INPUT_BYTES", len(data) - 1)
    with pytest.raises(InputError, match=f"^{path}: is larger than"):
        load_paths([str(path)])


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
@pytest.mark.parametrize("argv", [["check", "-f", "/dev/zero"], ["usage", "--cluster", "/dev/zero"],
                                  ["usage", "--cluster", "-"]])
def test_dev_zero_is_refused_quickly_with_exit_2(argv: list[str]) -> None:
    started = time.monotonic()
    with open("/dev/zero", "rb") as zeros:
        done = subprocess.run([sys.executable, "-m", "cardquota", *argv], stdin=zeros, capture_output=True,
                              text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2
    where = "<stdin>" if argv[-1] == "-" else "/dev/zero"
    assert done.stderr == f"cardquota: error: {where}: {LIMIT_MESSAGE}\n"
    assert time.monotonic() - started < 30
    assert MAX_INPUT_BYTES == 1 << 30


def test_the_c_loader_is_used_when_pyyaml_has_it() -> None:
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML built without libyaml")
    assert yamltext.YAML_LOADER is yaml.CSafeLoader


def cluster_list() -> dict[str, object]:
    return realistic_cluster(6, 40)


def test_a_json_list_and_a_yaml_list_give_the_same_objects() -> None:
    value = cluster_list()
    from_json = parse_documents(json.dumps(value, indent=4).encode(), "cluster.json")
    from_yaml = parse_documents(yaml.safe_dump(value).encode(), "cluster.yaml")
    assert [document.manifest for document in from_json] == [document.manifest for document in from_yaml]
    assert len(from_json) == 6 + 20 + 5 + 40


def test_json_is_read_by_json_not_by_the_yaml_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the YAML parser was used")

    monkeypatch.setattr(yamltext, "_Loader", refused)
    monkeypatch.setattr(yaml, "load_all", refused)
    assert len(parse_documents(json.dumps(cluster_list(), indent=4).encode(), "cluster.json")) == 71


def test_yaml_is_read_in_one_pass_over_the_events_without_a_node_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast reader: no composition (yaml.load_all) and no second pass (_check_nesting) on a cluster dump."""
    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the slow path was taken")

    monkeypatch.setattr(yaml, "load_all", refused)
    monkeypatch.setattr(yamltext, "_check_nesting", refused)
    documents = parse_documents(yaml.safe_dump_all([gpu_node("a", "NVIDIA-A100", 8), queue("q", {"A": 1}),
                                                    podgroup("pg"), pod("p", gpus=1)]).encode(), "c.yaml")
    assert [document.manifest["kind"] for document in documents] == ["Node", "Queue", "PodGroup", "Pod"]


@pytest.mark.parametrize(("text", "message"), [
    ("a: [1, 2\nb: 3\n", "c.yaml: document 1: invalid YAML at line 2, column 2: did not find expected ',' or ']'"),
    ("apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\nkey: value: other\n",
     "c.yaml: document 2: invalid YAML at line 5, column 11: mapping values are not allowed in this context"),
    ("a: *missing\n", "c.yaml: document 1: invalid YAML at line 1, column 4: found undefined alias"),
    ("a: !!python/object:os.system x\n", "c.yaml: document 1: invalid YAML at line 1, column 4: could not determine "
                                        "a constructor for the tag 'tag:yaml.org,2002:python/object:os.system'"),
    ("a: " + "[" * 501 + "]" * 501 + "\n", "c.yaml: document 1: is nested more than 500 levels deep"),
])
def test_errors_stay_one_line_with_the_location(text: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_documents(text.encode(), "c.yaml")
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("text", [
    "base: &b {x: 1}\nother: *b\n",          # anchors and aliases
    "base: &b {x: 1}\nmerged: {<<: *b, y: 2}\n",  # merge keys
    "a: !!str 1\nb: !!binary aGk=\nc: !!set {x, y}\n",  # explicit tags
    "? [1, 2]\n: x\n",                       # a collection as a key (PyYAML refuses it)
    "a: 2026-11-24\nb: 2026-11-24T10:00:00Z\nc: 0x1f\nd: 1_000\ne: .inf\nf: ~\ng: yes\nh: '1'\n",
    "a: 2026-13-45\n",                       # a timestamp PyYAML's constructor refuses
    "a: =\n",                                # the value tag
    "a: 1\na: 2\n",                          # a duplicate key: the later wins, as PyYAML has it
])
def test_the_one_pass_reader_gives_pyyamls_answer(text: str) -> None:
    assert_same_as_pyyaml(text)


def assert_same_as_pyyaml(text: str) -> None:
    try:
        expected: object = list(enumerate(yaml.load_all(text, Loader=yamltext.YAML_LOADER), start=1))
    except Exception:
        expected = InputError
    try:
        got: object = list(yamltext.load_documents(text))
    except InputError:
        got = InputError
    if expected is InputError or got is InputError:
        assert got is expected or (got is InputError and isinstance(expected, list)
                                   and any(yamltext.depth(value) > yamltext.MAX_NESTING for _, value in expected))
    else:
        assert got == expected


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda children: st.lists(children, max_size=4)
                    | st.dictionaries(st.text(max_size=6) | st.integers(), children, max_size=4), max_leaves=20),
       st.sampled_from([{}, {"default_flow_style": True}, {"default_style": '"'}, {"default_style": "|"}]))
def test_the_one_pass_reader_agrees_with_pyyaml_on_any_value(value: object, style: dict[str, object]) -> None:
    text = yaml.safe_dump_all([value, value], **style)  # type: ignore[call-overload]
    assert_same_as_pyyaml(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab:-[]{},'\"&*!?|>#\n 01.~", max_size=40))
def test_the_one_pass_reader_agrees_with_pyyaml_on_any_text(text: str) -> None:
    assert_same_as_pyyaml(text)
