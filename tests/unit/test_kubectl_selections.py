"""What the listing commands print for an empty selection, and the row limit they accept.

An empty table is ``No resources found`` on stderr with nothing on stdout, as ``kubectl get`` says it for
cluster-scoped kinds (``GetOptions.Run``, kubernetes/kubectl ``pkg/cmd/get/get.go``); ``-o json``/``-o yaml`` print the
document with nothing in it and say nothing (``printGeneric`` there prints an empty List). ``--limit`` takes a whole
number, 1 or more: 0 printed bare headers, -1 cut the last row.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from cardquota.cli.main import run

REPO = Path(__file__).resolve().parents[2]
CLUSTER = str(REPO / "examples" / "cluster.yaml")
NO_MATCH = "nvidia.com/gpu.product=NVIDIA-B200"
"""A selector no node of the example cluster matches."""


def command(prog: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(prog, list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("table", ["table", "wide"])
def test_a_selector_matching_no_node_says_no_resources_found(table: str) -> None:
    code, text, err = command("kubectl cardquota", "nodes", "--cluster", CLUSTER, "-l", NO_MATCH, "-o", table)
    assert (code, text, err) == (0, "", "No resources found\n")


def test_a_selector_matching_some_nodes_prints_them_and_says_nothing_more() -> None:
    code, text, err = command("kubectl cardquota", "nodes", "--cluster", CLUSTER, "-l",
                              "nvidia.com/gpu.product=NVIDIA-H100", "-o", "table")
    assert code == 0
    assert text.splitlines()[1].startswith("gpu-h100-01 ")
    assert "No resources found" not in err


@pytest.mark.parametrize(("output", "read"), [("json", json.loads), ("yaml", yaml.safe_load)])
def test_an_empty_selection_as_json_or_yaml_is_the_empty_document(output: str, read: object) -> None:
    code, text, err = command("kubectl cardquota", "nodes", "--cluster", CLUSTER, "-l", NO_MATCH, "-o", output)
    assert code == 0
    assert read(text) == {"nodes": {}, "totals": {}}  # type: ignore[operator]
    assert "No resources found" not in err


@pytest.mark.parametrize(("prog", "argv"), [
    ("kubectl cardquota", ["usage", "-o", "table"]),
    ("kubectl cardquota", ["usage", "-o", "wide"]),
    ("cardquota", ["usage", "-o", "table"]),
])
def test_usage_of_a_cluster_without_queues_says_no_resources_found(prog: str, argv: list[str], tmp_path: Path) -> None:
    nodes_only = tmp_path / "nodes.yaml"
    documents = [d for d in yaml.safe_load_all(Path(CLUSTER).read_text()) if d and d.get("kind") == "Node"]
    nodes_only.write_text(yaml.safe_dump_all(documents))
    code, text, err = command(prog, *argv, "--cluster", str(nodes_only))
    assert (code, text) == (0, "")
    assert err.splitlines()[-1] == "No resources found"
    code, text, err = command(prog, "usage", "--cluster", str(nodes_only), "-o", "json")
    assert json.loads(text) == {"queues": {}}
    assert "No resources found" not in err


def test_usage_watch_says_no_resources_found_once(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n}\n")
    code, _, err = command("kubectl cardquota", "usage", "--cluster", str(empty), "-o", "table", "--watch",
                           "--interval", "0.001", "--refreshes", "3")
    assert code == 0
    assert err.count("No resources found") == 1


@pytest.mark.parametrize("subcommand", ["usage", "nodes"])
@pytest.mark.parametrize("limit", ["0", "-1", "2.5", "ten", ""])
def test_limit_must_be_a_whole_number_one_or_more(subcommand: str, limit: str) -> None:
    code, text, err = command("kubectl cardquota", subcommand, "--cluster", CLUSTER, "-o", "table", f"--limit={limit}")
    assert (code, text) == (2, "")
    assert err.splitlines()[-1] == (f"kubectl cardquota {subcommand}: error: argument --limit: {limit!r}: expected a "
                                    "whole number, 1 or more")


@pytest.mark.parametrize("subcommand", ["usage", "nodes"])
def test_limit_one_prints_one_row_and_says_how_many_more(subcommand: str) -> None:
    code, text, err = command("kubectl cardquota", subcommand, "--cluster", CLUSTER, "-o", "table", "--limit", "1")
    assert code == 0
    assert len(text.split("\n\n")[0].splitlines()) == 2  # the headers and one row
    assert "not shown (raise --limit)" in err


@pytest.mark.parametrize("interval", ["-1", "nan", "inf", "soon"])
def test_watch_interval_must_be_a_number_of_seconds(interval: str) -> None:
    """-1 and nan ended in an internal error (time.sleep's ValueError), inf in an endless first sleep."""
    code, _, err = command("kubectl cardquota", "usage", "--cluster", CLUSTER, "-o", "table", "--watch",
                           f"--interval={interval}", "--refreshes", "2")
    assert code == 2
    assert err.splitlines()[-1].endswith(f"argument --interval: {interval!r}: expected a number of seconds, 0 or more")
