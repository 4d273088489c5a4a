"""The ``cardquota`` command line: discover and usage, JSON and table output, and one-line errors (exit 2)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
import yaml
from builders import container, gpu_labels, gpu_node, node, pod, podgroup, queue
from hypothesis import given
from hypothesis import strategies as st

from cardquota import __version__
from cardquota.cli.main import run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "cluster.yaml"
ERROR_PREFIX = "cardquota: error: "


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


def cardquota(*argv: str, stdout: io.StringIO | None = None) -> Result:
    out = stdout if stdout is not None else io.StringIO()
    err = io.StringIO()
    code = run("cardquota", list(argv), stdout=out, stderr=err)
    return Result(code, out.getvalue(), err.getvalue())


def write(path: Path, *manifests: object) -> str:
    path.write_bytes(yaml.safe_dump_all(manifests, sort_keys=False).encode())
    return str(path)


def assert_one_error_line(result: Result, *fragments: str) -> str:
    """Exit 2, nothing on stdout, exactly one ``cardquota: error: ...`` line on stderr holding every fragment."""
    assert result.code == 2, result
    assert result.out == ""
    assert "Traceback" not in result.err
    assert result.err.endswith("\n")
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith(ERROR_PREFIX)
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def mps_node(name: str) -> dict:
    labels = {**gpu_labels("NVIDIA-A100", count=4, memory=81920, replicas=8), "nvidia.com/gpu.sharing-strategy": "mps"}
    return node(name, labels=labels, allocatable={"nvidia.com/gpu.shared": "32"})


def mig_node(name: str) -> dict:
    labels = {**gpu_labels("NVIDIA-A100", count=8), "nvidia.com/mig.strategy": "mixed"}
    return node(name, labels=labels, allocatable={"nvidia.com/gpu": "2", "nvidia.com/mig-1g.5gb": "7"})


# -------------------------------------------------------------------------------------------------- discover

DISCOVERY = {
    "nodes": {
        "a100-1": {"NVIDIA-A100": {"resource": "nvidia.com/gpu", "count": 8, "kind": "whole"}},
        "cpu-1": {},
        "mig-1": {
            "NVIDIA-A100": {"resource": "nvidia.com/gpu", "count": 2, "kind": "whole"},
            "NVIDIA-A100/mig-1g.5gb-mixed": {"resource": "nvidia.com/mig-1g.5gb", "count": 7, "kind": "mig"},
        },
        "mps-1": {"NVIDIA-A100/mps-80g*1/8": {"resource": "nvidia.com/gpu.shared", "count": 32, "kind": "mps",
                                              "cards": 4, "replicas": 8}},
    },
    "totals": {"NVIDIA-A100": 10, "NVIDIA-A100/mig-1g.5gb-mixed": 7, "NVIDIA-A100/mps-80g*1/8": 32},
}


@pytest.fixture
def nodes_file(tmp_path) -> str:
    return write(tmp_path / "nodes.yaml", mps_node("mps-1"), queue("team-a", {"NVIDIA-A100": 4}),
                 gpu_node("a100-1", "NVIDIA-A100", 8), node("cpu-1"), mig_node("mig-1"), pod("p", gpus=1))


def test_discover_json_lists_every_node_and_totals(nodes_file):
    result = cardquota("discover", "-f", nodes_file, "-o", "json")
    assert (result.code, result.err) == (0, "")
    assert result.json() == DISCOVERY
    assert list(result.json()["nodes"]) == sorted(DISCOVERY["nodes"])


def test_discover_of_a_file_without_nodes_is_empty(tmp_path):
    result = cardquota("discover", "-f", write(tmp_path / "q.yaml", queue("q"), pod("p")), "-o", "json")
    assert (result.code, result.json()) == (0, {"nodes": {}, "totals": {}})


UNLABELLED_EXAMPLE_WARNING = (
    "warning: Node gpu-unlabeled-01: 2 nvidia.com/gpu allocatable, no nvidia.com/<type>.product label (e.g. "
    "nvidia.com/gpu.product=<product>): the node offers no card type; label it: kubectl label node gpu-unlabeled-01 "
    "nvidia.com/gpu.product=<product> (docs/cards.md: Card types discovered from a node)\n")
"""What ``discover`` says of the bundled example (as ``doctor`` does): its one GPU node without a product label."""
EXAMPLE_ARGUMENTS_NOTE = (
    "assumed: cardUnlimitedCpuMemory=false, predicate.MGPUEnable=false, crossquota off (the plugins' defaults: no "
    "ConfigMap cardquota-extender-conf or volcano-scheduler-configmap in the input)\n")
"""What ``usage`` says of the bundled example, whose queues with a cpu/memory capability are counted as the
scheduler's arguments say, and which holds neither ConfigMap they are read from."""


def test_discover_on_the_bundled_example():
    result = cardquota("discover", "-f", str(EXAMPLE), "-o", "json")
    assert (result.code, result.err) == (0, UNLABELLED_EXAMPLE_WARNING)
    document = result.json()
    assert document["totals"]["NVIDIA-A100"] == 20
    assert document["totals"]["NVIDIA-A100/mps-80g*1/8"] == 32
    assert document["nodes"]["cpu-01"] == {}
    assert document["nodes"]["gpu-unlabeled-01"] == {}
    assert document["nodes"]["gpu-a100-mig-01"]["NVIDIA-A100/mig-1g.5gb-mixed"] == {
        "resource": "nvidia.com/mig-1g.5gb", "count": 7, "kind": "mig"}
    assert len(document["nodes"]) == 10


# ----------------------------------------------------------------------------------------------------- usage


@pytest.fixture
def cluster_file(tmp_path) -> str:
    return write(
        tmp_path / "cluster.yaml",
        gpu_node("a100-1", "NVIDIA-A100", 8),
        gpu_node("h100-1", "NVIDIA-H100", 8),
        queue("team-a", {"NVIDIA-A100": 4, "NVIDIA-H100": 2}),
        queue("plain"),
        podgroup("train", namespace="ml", queue="team-a", phase="Inqueue", request={"NVIDIA-A100": 3}),
        pod("train-0", namespace="ml", card="NVIDIA-A100", group="train", node_name="a100-1", gpus=1),
        pod("train-1", namespace="ml", card="NVIDIA-A100", group="train", gpus=1),
        pod("plain-0", queue="plain", card="NVIDIA-H100", node_name="h100-1", gpus=2),
        pod("done", queue="team-a", card="NVIDIA-A100", node_name="a100-1", gpus=4, phase="Succeeded"),
    )


EXAMPLE_UNQUOTED_WARNING = ("warning: queue default has no volcano.sh/card.quota and its pods hold 1 card: a queue "
                            "without a card quota holds 0 cards (--unquoted-queues=zero), so new card work there is "
                            "refused; give it a quota\n")
"""(the bundled example's debug-shell pod names no card type and holds one in queue default, which has no quota)"""
UNQUOTED_PLAIN = "warning: queue plain has no volcano.sh/card.quota and its pods hold 2 cards: {}\n"


def test_usage_says_which_queues_without_a_card_quota_hold_cards_and_what_the_setting_does(cluster_file):
    zero = cardquota("usage", "--cluster", cluster_file, "-o", "json")
    assert zero.err == UNQUOTED_PLAIN.format("a queue without a card quota holds 0 cards (--unquoted-queues=zero), "
                                             "so new card work there is refused; give it a quota")
    unlimited = cardquota("usage", "--cluster", cluster_file, "-o", "json", "--unquoted-queues", "unlimited")
    assert unlimited.err == UNQUOTED_PLAIN.format("pods naming no card type are not limited there "
                                                  "(--unquoted-queues=unlimited)")
    assert unlimited.json() == zero.json()  # (what is held is counted alike)


def test_usage_json_exact_values(cluster_file):
    result = cardquota("usage", "--cluster", cluster_file, "-o", "json")
    assert result.code == 0
    assert result.err.startswith("warning: queue plain has no volcano.sh/card.quota")
    assert result.json() == {
        "queues": {
            "plain": {"quota": {}, "allocated": {"NVIDIA-H100": 2}, "inqueue": {}, "pending": {},
                      "preemption": "Never"},
            "team-a": {
                "quota": {"NVIDIA-A100": 4, "NVIDIA-H100": 2},
                # the unused quota'd type is listed with 0; the Succeeded pod holds nothing
                "allocated": {"NVIDIA-A100": 1, "NVIDIA-H100": 0},
                # the group asked for 3 and its bound pod holds 1
                "inqueue": {"NVIDIA-A100": 2},
                "pending": {"NVIDIA-A100": 1},
                "preemption": "Never",  # (no cardquota.io/preemption: the default)
            },
        }
    }


def test_usage_lists_every_queue_even_unused(tmp_path):
    path = write(tmp_path / "q.yaml", queue("idle", {"NVIDIA-A100": 2}), queue("empty"))
    result = cardquota("usage", "-f", path, "-o", "json")
    assert result.json() == {"queues": {
        "empty": {"quota": {}, "allocated": {}, "inqueue": {}, "pending": {}, "preemption": "Never"},
        "idle": {"quota": {"NVIDIA-A100": 2}, "allocated": {"NVIDIA-A100": 0}, "inqueue": {}, "pending": {},
                 "preemption": "Never"},
    }}


@pytest.mark.parametrize(("queue_name", "field", "expected"), [
    ("team-a", "allocated", {"NVIDIA-A100": 8, "NVIDIA-A100/mps-80g*1/8": 3, "NVIDIA-H100": 2}),
    ("team-a", "inqueue", {"NVIDIA-A100|NVIDIA-H100": 4}),
    ("team-a", "quota", {"NVIDIA-A100": 10, "NVIDIA-H100": 5, "NVIDIA-A100/mps-80g*1/8": 16}),
    ("team-b", "pending", {"NVIDIA-A100": 4}),
    ("team-b", "allocated", {"NVIDIA-A100": 0, "NVIDIA-GeForce-RTX-4090": 6}),  # init containers: max(2, 1) x 3
    ("cpu-batch", "quota", {}),
    ("cpu-batch", "allocated", {}),
    ("default", "allocated", {"NVIDIA-A100": 1}),
    ("research", "allocated", {"Ascend-910B": 4}),  # the Failed pod holds nothing
])
def test_usage_on_the_bundled_example(queue_name, field, expected):
    result = cardquota("usage", "--cluster", str(EXAMPLE), "-o", "json")
    assert (result.code, result.err) == (0, EXAMPLE_UNQUOTED_WARNING + EXAMPLE_ARGUMENTS_NOTE)
    assert result.json()["queues"][queue_name][field] == expected


def test_usage_on_the_bundled_example_lists_every_queue():
    queues = cardquota("usage", "--cluster", str(EXAMPLE), "-o", "json").json()["queues"]
    assert list(queues) == ["cpu-batch", "default", "inference", "research", "team-a", "team-b"]
    cards = {"quota", "allocated", "inqueue", "pending", "preemption"}
    # cpuMemory only for the queues whose spec.capability sets cpu/memory (the capacity-card plugin's quota)
    assert {name: set(entry) - cards for name, entry in queues.items()} == {
        "cpu-batch": {"cpuMemory"}, "default": set(), "inference": set(), "research": set(),
        "team-a": {"cpuMemory"}, "team-b": {"cpuMemory"}}
    assert queues["team-a"]["cpuMemory"]["capability"] == {"cpu": "100", "memory": "200Gi"}


def test_invalid_card_quota_warns_and_gives_empty_quota(tmp_path):
    path = write(tmp_path / "q.yaml", gpu_node("n1", "A", 1), queue("broken", "{not json"), queue("ok", {"A": 1}))
    result = cardquota("usage", "-f", path, "-o", "json")
    assert result.code == 0
    assert result.err == ('warning: Queue broken: metadata.annotations["volcano.sh/card.quota"]: is not valid JSON: '
                          "expecting property name enclosed in double quotes at line 1, column 2 "
                          '(expected {"<card type>": <cards>, ...}) (ignored)\n')
    assert result.json()["queues"]["broken"] == {"quota": {}, "allocated": {}, "inqueue": {}, "pending": {},
                                                 "preemption": "Never"}
    assert result.json()["queues"]["ok"]["quota"] == {"A": 1}


@pytest.mark.parametrize("annotation", ["[1, 2]", '"A"', '{"A": -1}', '{"A": 1.5}', '{"A": "2"}', '{"A": true}', ""])
def test_card_quota_of_the_wrong_shape_warns_once_and_gives_empty_quota(tmp_path, annotation):
    result = cardquota("usage", "-f", write(tmp_path / "q.yaml", gpu_node("n1", "A", 1), queue("q", annotation)),
                       "-o", "json")
    assert result.code == 0
    lines = result.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith('warning: Queue q: metadata.annotations["volcano.sh/card.quota"]: ')
    assert lines[0].endswith(" (ignored)")
    assert result.json()["queues"]["q"]["quota"] == {}


def test_usage_charged_to_a_queue_without_queue_object_is_listed_and_warned(tmp_path):
    path = write(tmp_path / "c.yaml", gpu_node("n1", "NVIDIA-A100", 8), queue("known"),
                 pod("p", queue="ghost", card="NVIDIA-A100", node_name="n1", gpus=2),
                 pod("w", queue="ghost", card="NVIDIA-A100", gpus=1))
    result = cardquota("usage", "-f", path, "-o", "json")
    assert result.code == 0
    assert result.err == "warning: queue ghost has card usage but no Queue object in the input\n"
    assert result.json()["queues"]["ghost"] == {
        "quota": {}, "allocated": {"NVIDIA-A100": 2}, "inqueue": {}, "pending": {"NVIDIA-A100": 1}}
    assert "known" in result.json()["queues"]


# --------------------------------------------------------------------------------------------- duplicates


def test_duplicate_node_warns_and_the_later_one_wins(tmp_path):
    path = write(tmp_path / "n.yaml", gpu_node("n1", "NVIDIA-A100", 8), gpu_node("n1", "NVIDIA-H100", 4))
    result = cardquota("discover", "-f", path, "-o", "json")
    assert result.code == 0
    assert result.err == (f"warning: Node n1 appears again in {path}: document 2; "
                          f"it replaces the one in {path}: document 1\n")
    assert result.json() == {
        "nodes": {"n1": {"NVIDIA-H100": {"resource": "nvidia.com/gpu", "count": 4, "kind": "whole"}}},
        "totals": {"NVIDIA-H100": 4},
    }


def test_duplicate_queue_across_files_warns_and_the_later_one_wins(tmp_path):
    first = write(tmp_path / "a.yaml", queue("q", {"A": 1}), gpu_node("n1", "A", 1))
    second = write(tmp_path / "b.yaml", queue("q", {"B": 2}))
    result = cardquota("usage", "-f", first, "-f", second, "-o", "json")
    assert result.code == 0
    assert result.err == (f"warning: Queue q appears again in {second}: document 1; "
                          f"it replaces the one in {first}: document 1\n")
    assert result.json()["queues"]["q"]["quota"] == {"B": 2}


def test_duplicate_pod_is_counted_once(tmp_path):
    running = pod("p", queue="q", card="NVIDIA-A100", node_name="n1", gpus=2)
    path = write(tmp_path / "c.yaml", gpu_node("n1", "NVIDIA-A100", 8), queue("q"), running, running)
    result = cardquota("usage", "-f", path, "-o", "json")
    assert "warning: Pod default/p appears again" in result.err
    assert result.json()["queues"]["q"]["allocated"] == {"NVIDIA-A100": 2}


def test_same_name_in_different_namespaces_is_not_a_duplicate(tmp_path):
    path = write(tmp_path / "c.yaml", gpu_node("n1", "NVIDIA-A100", 8), queue("q"),
                 pod("p", namespace="a", queue="q", card="NVIDIA-A100", node_name="n1", gpus=1),
                 pod("p", namespace="b", queue="q", card="NVIDIA-A100", node_name="n1", gpus=1))
    result = cardquota("usage", "-f", path, "-o", "json")
    assert "appears again" not in result.err
    assert result.json()["queues"]["q"]["allocated"] == {"NVIDIA-A100": 2}


# -------------------------------------------------------------------------------------------------- tables


def column_starts(line: str) -> list[int]:
    """Where each cell starts: cells are separated by two or more spaces (a header such as "CARD TYPE" has one)."""
    return [match.start() for match in re.finditer(r"\S+(?: \S+)*", line)]


def assert_aligned(block: str, headers: list[str]) -> list[str]:
    lines = block.splitlines()
    assert column_starts(lines[0]) == [lines[0].index(h) for h in headers]
    assert [lines[0][start:].split("  ")[0] for start in column_starts(lines[0])] == headers
    starts = column_starts(lines[0])
    for line in lines[1:]:
        assert column_starts(line) == starts, f"misaligned: {line!r}"
        assert line == line.rstrip()
    return lines[1:]


DISCOVER_HEADERS = ["NODE", "CARD TYPE", "KIND", "CARDS", "COUNT"]
WIDE_DISCOVER_HEADERS = ["NODE", "CARD TYPE", "KIND", "RESOURCE", "CARDS", "COUNT"]
USAGE_HEADERS = ["QUEUE", "CARD", "QUOTA", "ALLOCATED", "INQUEUE", "PENDING"]


def test_discover_table_is_aligned_with_a_totals_section(nodes_file):
    result = cardquota("discover", "-f", nodes_file, "-o", "wide")
    assert (result.code, result.err) == (0, "")
    nodes_block, totals_block = result.out.split("\n\n")
    rows = assert_aligned(nodes_block, WIDE_DISCOVER_HEADERS)
    assert [row.split() for row in rows] == [
        ["a100-1", "NVIDIA-A100", "whole", "nvidia.com/gpu", "8", "8"],
        ["cpu-1", "-", "-", "-", "-", "-"],
        ["mig-1", "NVIDIA-A100", "whole", "nvidia.com/gpu", "2", "2"],
        ["mig-1", "NVIDIA-A100/mig-1g.5gb-mixed", "mig", "nvidia.com/mig-1g.5gb", "-", "7"],
        ["mps-1", "NVIDIA-A100/mps-80g*1/8", "mps×8", "nvidia.com/gpu.shared", "4", "32"],
    ]
    totals = assert_aligned(totals_block, ["CARD TYPE", "TOTAL"])
    assert [row.split() for row in totals] == [
        ["NVIDIA-A100", "10"], ["NVIDIA-A100/mig-1g.5gb-mixed", "7"], ["NVIDIA-A100/mps-80g*1/8", "32"]]


def test_usage_table_is_aligned(cluster_file):
    result = cardquota("usage", "--cluster", cluster_file, "-o", "table")
    assert result.code == 0
    assert result.err.startswith("warning: queue plain has no volcano.sh/card.quota")
    rows = assert_aligned(result.out, USAGE_HEADERS)
    assert [row.split() for row in rows] == [
        ["plain", "NVIDIA-H100", "-", "2", "0", "0"],
        ["team-a", "NVIDIA-A100", "4", "1", "2", "1"],
        ["team-a", "NVIDIA-H100", "2", "0", "0", "0"],
    ]


@pytest.mark.parametrize(("command", "headers"), [("discover", DISCOVER_HEADERS), ("usage", USAGE_HEADERS)])
def test_tables_of_the_bundled_example_are_aligned(command, headers):
    result = cardquota(command, "-f", str(EXAMPLE), "-o", "table")
    assert (result.code, result.err) == (0, UNLABELLED_EXAMPLE_WARNING if command == "discover" else
                                         EXAMPLE_UNQUOTED_WARNING + EXAMPLE_ARGUMENTS_NOTE)
    rows = assert_aligned(result.out.split("\n\n")[0], headers)
    if command == "usage":
        assert ["cpu-batch", "-", "-", "0", "0", "0"] in [row.split() for row in rows]
        assert ["team-b", "NVIDIA-GeForce-RTX-4090", "8", "6", "0", "0"] in [row.split() for row in rows]
    else:
        assert ["gpu-a100-mps-01", "NVIDIA-A100/mps-80g*1/8", "mps×8", "4", "32"] in [row.split() for row in rows]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("command", ["discover", "usage"])
def test_default_output_is_json_when_not_a_terminal(command, cluster_file):
    default = cardquota(command, "-f", cluster_file)
    assert default.code == 0
    assert default.out == cardquota(command, "-f", cluster_file, "-o", "json").out
    assert isinstance(default.json(), dict)


@pytest.mark.parametrize(("command", "header"), [("discover", "NODE"), ("usage", "QUEUE")])
def test_default_output_is_a_table_on_a_terminal(command, header, cluster_file):
    result = cardquota(command, "-f", cluster_file, stdout=_Terminal())
    assert result.code == 0
    assert result.out.split()[0] == header
    uncoloured = re.sub(r"\033\[[0-9;]*m", "", result.out)  # usage is coloured on a terminal
    assert uncoloured == cardquota(command, "-f", cluster_file, "-o", "table").out


def test_explicit_json_on_a_terminal_is_json(cluster_file):
    result = cardquota("usage", "-f", cluster_file, "-o", "json", stdout=_Terminal())
    assert "team-a" in result.json()["queues"]


# --------------------------------------------------------------------------------------------------- stdin


def fake_stdin(data: bytes) -> types.SimpleNamespace:
    return types.SimpleNamespace(buffer=io.BytesIO(data))


def test_discover_reads_stdin(monkeypatch):
    as_list = {"apiVersion": "v1", "kind": "NodeList", "items": [gpu_node("n1", "NVIDIA-A100", 4)]}
    monkeypatch.setattr(sys, "stdin", fake_stdin(json.dumps(as_list).encode()))
    result = cardquota("discover", "-f", "-", "-o", "json")
    assert result.code == 0
    assert result.json()["totals"] == {"NVIDIA-A100": 4}


def test_usage_reads_stdin_together_with_a_file(monkeypatch, tmp_path):
    nodes = write(tmp_path / "nodes.yaml", gpu_node("n1", "NVIDIA-A100", 8))
    rest = yaml.safe_dump_all([queue("q", {"NVIDIA-A100": 2}),
                               pod("p", queue="q", card="NVIDIA-A100", node_name="n1", gpus=1)]).encode()
    monkeypatch.setattr(sys, "stdin", fake_stdin(rest))
    result = cardquota("usage", "--cluster", nodes, "--cluster", "-", "-o", "json")
    assert result.json()["queues"]["q"]["allocated"] == {"NVIDIA-A100": 1}


def test_stdin_errors_name_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", fake_stdin(b"apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n[1]\n"))
    assert_one_error_line(cardquota("discover", "-f", "-"),
                          "<stdin>: document 2: is not a Kubernetes object (a list, not a map)")


# -------------------------------------------------------------------------------------------------- errors

BAD_FILES = [
    # (id, file bytes, fragments the error line must hold besides the file name)
    ("invalid-yaml", b"apiVersion: v1\nkind: [Node\n", ["document 1: invalid YAML at line 3, column 1"]),
    ("binary-garbage", bytes(range(256)) * 4, ["is not UTF-8 text (byte 0x80 at offset 128)"]),
    ("nul-bytes", b"\x00" * 64, ["document 1: invalid character #x0000"]),
    ("deep-flow", b"[" * 100_000, ["document 1: is nested more than 500 levels deep"]),
    ("deep-json", b'{"a": ' * 100_000 + b"1" + b"}" * 100_000, ["document 1: is nested more than 500 levels deep"]),
    ("deep-block", b"- " * 100_000 + b"x\n", ["document 1: is nested more than 500 levels deep"]),
    ("scalar", b"just text\n", ["document 1: is not a Kubernetes object (a string, not a map)"]),
    ("list-in-document-3", yaml.safe_dump_all([node("a"), node("b"), ["x"]]).encode(),
     ["document 3: is not a Kubernetes object (a list, not a map)"]),
    ("no-apiversion", b"kind: Node\nmetadata: {name: a}\n", ["document 1: is not a Kubernetes object"]),
    ("node-label-not-a-string", yaml.safe_dump(node("n1", labels={"nvidia.com/gpu.count": 8})).encode(),
     ['document 1: metadata.labels["nvidia.com/gpu.count"]: must be a string, not a number']),
    ("node-bad-allocatable", yaml.safe_dump(node("n1", allocatable={"nvidia.com/gpu": "lots"})).encode(),
     ['document 1: status.allocatable["nvidia.com/gpu"]: ', '"lots" is not a quantity']),
]
# A Queue whose card.quota annotation is a map rather than a (JSON) string: malformed metadata, not a bad quota.
QUEUE_WITH_MAP_ANNOTATION = yaml.safe_dump(
    {**queue("q"), "metadata": {"name": "q", "annotations": {"volcano.sh/card.quota": {"A": 1}}}}).encode()


@pytest.mark.parametrize("command", ["usage", "discover"])
@pytest.mark.parametrize(("data", "fragments"), [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES])
def test_bad_input_is_one_error_line_naming_the_file(tmp_path, command, data, fragments):
    path = tmp_path / "input.yaml"
    path.write_bytes(data)
    line = assert_one_error_line(cardquota(command, "-f", str(path), "-o", "json"), *fragments)
    assert line.startswith(f"{ERROR_PREFIX}{path}: ")


def test_queue_annotation_that_is_not_a_string_fails_usage(tmp_path):
    path = tmp_path / "input.yaml"
    path.write_bytes(QUEUE_WITH_MAP_ANNOTATION)
    assert_one_error_line(cardquota("usage", "-f", str(path)), f"{path}: document 1: "
                          'metadata.annotations["volcano.sh/card.quota"]: must be a string, not a map')


@pytest.mark.parametrize("command", ["usage", "discover"])
def test_missing_file(tmp_path, command):
    missing = tmp_path / "missing.yaml"
    line = assert_one_error_line(cardquota(command, "-f", str(missing)))
    assert line == f"{ERROR_PREFIX}{missing}: no such file or directory"


def test_missing_second_file_fails_without_output(tmp_path, cluster_file):
    result = cardquota("usage", "-f", cluster_file, "-f", str(tmp_path / "gone.yaml"), "-o", "json")
    assert_one_error_line(result, "gone.yaml: no such file or directory")


def test_empty_directory(tmp_path):
    line = assert_one_error_line(cardquota("discover", "-f", str(tmp_path)))
    assert line == f"{ERROR_PREFIX}{tmp_path}: directory holds no .yaml, .yml or .json file"


@pytest.mark.parametrize(("quantity", "shown"), [("abc", '"abc"'), ("1.5.3", '"1.5.3"'), ("-", '"-"'), (True, "True")])
def test_pod_with_an_invalid_quantity_names_the_field(tmp_path, quantity, shown):
    bad = pod("p", containers=[container(requests={"cpu": "1"}), container("gpu", limits={"nvidia.com/gpu": quantity})])
    path = write(tmp_path / "c.yaml", queue("q"), bad)
    assert_one_error_line(
        cardquota("usage", "--cluster", path, "-o", "json"),
        f'{path}: document 2: spec.containers[1].resources.limits["nvidia.com/gpu"]: {shown} is not a quantity',
    )


def test_init_container_invalid_quantity_names_the_field(tmp_path):
    bad = pod("p", gpus=1, init_containers=[container("init", requests={"nvidia.com/gpu": "x"})])
    path = write(tmp_path / "c.yaml", bad)
    assert_one_error_line(cardquota("usage", "-f", path),
                          f'{path}: document 1: spec.initContainers[0].resources.requests["nvidia.com/gpu"]: ')


def test_invalid_quantity_inside_a_list_names_the_item(tmp_path):
    bad = pod("p", containers=[container(limits={"nvidia.com/gpu": "abc"})])
    path = write(tmp_path / "c.yaml", {"apiVersion": "v1", "kind": "PodList", "items": [pod("ok", gpus=1), bad]})
    assert_one_error_line(cardquota("usage", "-f", path),
                          f'{path}: document 1: items[1]: spec.containers[0].resources.limits["nvidia.com/gpu"]: ')


def test_discover_ignores_pods_even_with_bad_quantities(tmp_path):
    bad = pod("p", containers=[container(limits={"nvidia.com/gpu": "abc"})])
    path = write(tmp_path / "c.yaml", gpu_node("n1", "NVIDIA-A100", 2), bad)
    result = cardquota("discover", "-f", path, "-o", "json")
    assert (result.code, result.err) == (0, "")
    assert result.json()["totals"] == {"NVIDIA-A100": 2}


def test_objects_of_other_kinds_are_ignored(tmp_path):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"x": "1"}}
    not_volcano_queue = {"apiVersion": "example.com/v1", "kind": "Queue", "metadata": {"name": "other"}}
    path = write(tmp_path / "c.yaml", config_map, not_volcano_queue, gpu_node("n1", "NVIDIA-A100", 2), queue("q"))
    assert cardquota("discover", "-f", path, "-o", "json").json()["totals"] == {"NVIDIA-A100": 2}
    assert list(cardquota("usage", "-f", path, "-o", "json").json()["queues"]) == ["q"]


# -------------------------------------------------------------------------------------------- argument parsing


def test_version():
    out = io.StringIO()
    assert run("cardquota", ["--version"], stdout=out, stderr=io.StringIO()) == 0
    assert out.getvalue() == f"cardquota {__version__}\n"


@pytest.mark.parametrize(("argv", "message"), [
    (["discover"], "the following arguments are required: -f/--filename"),
    (["usage"], "name the cluster to read: --cluster FILE"),
    (["discover", "-f", "x.yaml", "-o", "xml"], "invalid choice: 'xml'"),
    ([], "the following arguments are required: COMMAND"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_usage_errors_exit_2(argv, message):
    out, errors = io.StringIO(), io.StringIO()
    assert run("cardquota", argv, stdout=out, stderr=errors) == 2
    err = errors.getvalue()
    assert out.getvalue() == ""
    assert message in err
    assert "Traceback" not in err


# ---------------------------------------------------------------------------------------------- properties

json_leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10) | st.sampled_from(
    ["1", "500m", "nvidia.com/gpu", "NVIDIA-A100", "Inqueue", "Running", "n1", '{"NVIDIA-A100": 2}'])
json_keys = st.text(max_size=8) | st.sampled_from([
    "nvidia.com/gpu", "nvidia.com/gpu.product", "nvidia.com/gpu.shared", "containers", "initContainers",
    "resources", "limits", "requests", "nodeName", "phase", "queue", "allocatable", "volcano.sh/card.quota",
    "volcano.sh/card.request", "volcano.sh/card.name", "scheduling.volcano.sh/queue-name", "overhead"])
json_values = st.recursive(json_leaves, lambda c: st.lists(c, max_size=3) | st.dictionaries(json_keys, c, max_size=4),
                           max_leaves=20)
accounted_kinds = st.sampled_from([("v1", "Node"), ("v1", "Pod"), ("scheduling.volcano.sh/v1beta1", "Queue"),
                                   ("scheduling.volcano.sh/v1beta1", "PodGroup")])
objects = st.builds(
    lambda kind, metadata, spec, status: {"apiVersion": kind[0], "kind": kind[1], "metadata": metadata,
                                          "spec": spec, "status": status},
    accounted_kinds,
    st.fixed_dictionaries({"name": st.sampled_from(["a", "b"])},
                          optional={"namespace": json_values, "labels": json_values, "annotations": json_values}),
    json_values,
    json_values,
)


@given(st.lists(objects, max_size=4), st.sampled_from(["discover", "usage"]), st.sampled_from(["json", "table"]))
def test_malformed_objects_give_exit_0_or_one_error_line(manifests, command, output):
    data = json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}).encode()
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(sys, "stdin", fake_stdin(data)):
        code = run("cardquota", [command, "-f", "-", "-o", output], stdout=out, stderr=err)
    not_warnings = [line for line in err.getvalue().splitlines()
                    if not line.startswith("warning: ") and line != "No resources found"]  # (no Queue: no row)
    assert code in (0, 2), err.getvalue()
    if code == 0:
        assert not_warnings == []
        if output == "json":
            json.loads(out.getvalue())
    else:
        assert len(not_warnings) == 1
        assert not_warnings[0].startswith(f"{ERROR_PREFIX}<stdin>: document 1: items[")


@given(st.binary(max_size=200))
def test_arbitrary_bytes_give_exit_0_or_one_error_line(data):
    err = io.StringIO()
    with mock.patch.object(sys, "stdin", fake_stdin(data)):
        code = run("cardquota", ["usage", "-f", "-", "-o", "json"], stdout=io.StringIO(), stderr=err)
    assert code in (0, 2)
    if code == 2:
        assert err.getvalue().count("\n") == 1
        assert err.getvalue().startswith(f"{ERROR_PREFIX}<stdin>")


# --------------------------------------------------------------------------------------- regressions ---


def test_bad_explicit_yaml_tag_is_an_input_error(tmp_path):
    path = tmp_path / "tagged.yaml"
    path.write_bytes(b"apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nspec: {unschedulable: !!bool maybe}\n")
    assert_one_error_line(cardquota("discover", "-f", str(path)), str(path), "document 1")


def test_discover_ignores_queues_with_malformed_metadata(tmp_path):
    path = tmp_path / "input.yaml"
    path.write_bytes(yaml.safe_dump(gpu_node("n1", "NVIDIA-A100", 2)).encode() + b"---\n" + QUEUE_WITH_MAP_ANNOTATION)
    result = cardquota("discover", "-f", str(path), "-o", "json")
    assert result.code == 0
    assert result.json()["totals"] == {"NVIDIA-A100": 2}


def test_error_stays_one_line_when_a_key_holds_a_newline(tmp_path):
    path = write(tmp_path / "n.yaml", node("n1", labels={"bad\nkey": 1}))
    assert_one_error_line(cardquota("discover", "-f", path))


def test_lone_surrogate_in_a_name_does_not_crash_table_output(tmp_path):
    path = tmp_path / "n.json"
    path.write_text('{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bad\\ud800"}}')
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.StringIO()
    code = run("cardquota", ["discover", "-f", str(path), "-o", "table"], stdout=out, stderr=err)
    assert code in (0, 2), err.getvalue()


# ------------------------------------------------------------------------------------------ installed entry points


def test_console_script_discover_json():
    script = Path(sys.executable).parent / "cardquota"
    if not script.exists():
        pytest.skip(f"console script not installed at {script}")
    completed = subprocess.run([str(script), "discover", "-f", "examples/cluster.yaml", "-o", "json"],
                               cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert (completed.returncode, completed.stderr) == (0, UNLABELLED_EXAMPLE_WARNING)
    assert json.loads(completed.stdout)["totals"]["NVIDIA-A100"] == 20


def test_python_dash_m_version():
    completed = subprocess.run([sys.executable, "-m", "cardquota", "--version"], cwd=REPO, capture_output=True,
                               text=True, timeout=60, check=False)
    assert (completed.returncode, completed.stdout.strip()) == (0, f"cardquota {__version__}")


def test_console_script_reports_bad_stdin_in_one_line():
    completed = subprocess.run([sys.executable, "-m", "cardquota", "usage", "-f", "-"], input=b"\xff\xfe\x00garbage",
                               cwd=REPO, capture_output=True, timeout=60, check=False)
    assert completed.returncode == 2
    assert completed.stdout == b""
    assert completed.stderr == (b"cardquota: error: <stdin>: is not UTF-8 text: it looks like UTF-16 (a byte-order "
                                b"mark FF FE): save it as UTF-8, e.g. pipe it through iconv -f UTF-16 -t UTF-8\n")


def test_a_cluster_without_nodes_is_warned_about(tmp_path):
    """Issue 18 item 13: a ``--cluster``/``-f`` file without Nodes was accepted silently by discover, check (against
    docs/cli.md: rules that need the nodes are skipped with a warning) and usage."""
    path = write(tmp_path / "c.yaml", queue("team-a", {"NVIDIA-A100": 2}),
                 pod("p", queue="team-a", card="NVIDIA-A100", gpus=1))
    discovered = cardquota("discover", "-f", path, "-o", "json")
    assert (discovered.code, discovered.err) == (0, f"warning: no Node in {path}: nothing to discover\n")
    used = cardquota("usage", "--cluster", path, "-o", "json")
    assert used.code == 0
    assert used.err == (f"warning: no Node in {path}: no card type is known, so bound pods' cards count under their "
                        "volcano.sh/card.name as written and pending pods' extended resources all count as cards\n")
    manifest = write(tmp_path / "m.yaml", pod("q", queue="team-a", card="NVIDIA-A10", gpus=1))
    checked = cardquota("check", "-f", manifest, "--cluster", path, "-o", "json")
    assert checked.err == (f"warning: no Node in {path}: the rules that need the card types nodes offer are skipped "
                           "(card types no node offers, quotas above what the nodes offer)\n")
    cpu_only = write(tmp_path / "cpu.yaml", node("cpu-1"), queue("team-a", {"NVIDIA-A100": 2}))
    assert cardquota("check", "-f", manifest, "--cluster", cpu_only, "-o", "json").err.startswith(
        f"warning: no Node offering a card type (1 Node) in {cpu_only}: the rules that need")
    with_nodes = cardquota("check", "-f", manifest, "--cluster", str(EXAMPLE), "-o", "json")
    assert "no Node" not in with_nodes.err


@pytest.mark.parametrize("argv", [
    ["simulate", "--cluster", "-", "-f", "-"],
    ["check", "-f", "-", "--cluster", "-"],
    ["usage", "--cluster", "-", "--cluster", "-"],
    ["discover", "-f", "-", "-f", "-"],
])
def test_stdin_is_read_at_most_once(argv, monkeypatch):
    """Issue 18 item 13: ``simulate --cluster - -f -`` read nothing the second time and reported success; ``-`` given
    twice is refused before anything is read."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(EXAMPLE.read_text()))
    result = cardquota(*argv, "-o", "json")
    assert_one_error_line(result, "stdin can be read only once, but '-' is given 2 times")
    assert sys.stdin.read() == EXAMPLE.read_text()  # untouched


def test_the_extender_serves_the_schedulers_it_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--schedulers`` reaches the extender's rules: only pending pods of these get mGPU results patched on."""
    import cardquota.operator.extender as served

    seen = []

    async def run_extender(extender, host, port, patch_pod, stop=None, **_):
        seen.append(extender.config.scheduler_names)

    monkeypatch.setattr(served, "run_extender", run_extender)
    assert cardquota("extender", "--no-patch", "--session-from-body", "--schedulers", "vc-a",
                     "--schedulers", "vc-b").code == 0
    assert cardquota("extender", "--no-patch", "--session-from-body").code == 0
    assert seen == [frozenset({"vc-a", "vc-b"}), frozenset({"volcano"})]
