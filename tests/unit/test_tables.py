"""Tables and text that fit 80 columns (issue 18 item 15: at 80 columns every ``usage``/``nodes`` row wrapped — 95
and 102 wide, ``simulate`` 138 — and ``explain`` broke words mid-line). ``-o table`` fits; ``-o wide`` has every
column; a name too long to fit is cut in the middle, never a number."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from cardquota.cli.main import run
from cardquota.cli.output import elided, render_table, wrapped

REPO = Path(__file__).resolve().parents[2]
CLUSTER = str(REPO / "examples" / "cluster.yaml")
WORKLOAD = str(REPO / "examples" / "simulate" / "workload.yaml")


def output(prog: str, *argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    assert run(prog, list(argv), stdout=out, stderr=err) in (0, 1), err.getvalue()
    return out.getvalue()


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize(("prog", "argv"), [
    ("cardquota", ["usage", "--cluster", CLUSTER]),
    ("cardquota", ["discover", "-f", CLUSTER]),
    ("cardquota", ["simulate", "--cluster", CLUSTER, "-f", WORKLOAD]),
    ("kubectl cardquota", ["usage", "--cluster", CLUSTER]),
    ("kubectl cardquota", ["nodes", "--cluster", CLUSTER]),
])
def test_every_table_of_the_bundled_example_fits_80_columns_and_wide_shows_more(prog: str, argv: list[str]) -> None:
    table, wide = output(prog, *argv, "-o", "table"), output(prog, *argv, "-o", "wide")
    assert widest(table) <= 80, table
    assert len(wide.splitlines()[0].split()) > len(table.splitlines()[0].split())


def test_usage_is_the_same_table_in_both_commands() -> None:
    """One table (cli.output.usage_table) for ``cardquota usage`` and ``kubectl cardquota usage``, -o wide in both."""
    for fmt in ("table", "wide"):
        assert output("cardquota", "usage", "--cluster", CLUSTER, "-o", fmt) == output(
            "kubectl cardquota", "usage", "--cluster", CLUSTER, "-o", fmt)
    assert yaml.safe_load(output("cardquota", "usage", "--cluster", CLUSTER, "-o", "yaml")) == json.loads(
        output("kubectl cardquota", "usage", "--cluster", CLUSTER, "-o", "json"))


def test_names_too_long_for_80_columns_are_cut_in_the_middle_and_wide_keeps_them(tmp_path: Path) -> None:
    product = "NVIDIA-A100-SXM4-80GB"
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-node-with-a-long-name-in-rack-17", "labels": {
                "nvidia.com/gpu.product": product, "nvidia.com/mig.strategy": "mixed"}},
            "status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"}}}
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump(node))
    table = output("kubectl cardquota", "nodes", "--cluster", str(path), "-o", "table")
    assert widest(table) <= 80
    assert "…" in table
    assert "mig-1g.10gb-mixed" in table  # both ends of a cut name stay
    wide = output("kubectl cardquota", "nodes", "--cluster", str(path), "-o", "wide")
    assert f"{product}/mig-1g.10gb-mixed" in wide
    assert "…" not in wide


def test_render_table_cuts_only_the_named_columns_and_folds_what_still_does_not_fit() -> None:
    rows = [["a" * 50, "b" * 50, 12345]]
    table = render_table(["X", "Y", "N"], rows, width=60, elide=(1,)).splitlines()
    assert table[1] == "a" * 50  # not a name column: whole; the others do not fit beside it
    assert table[2] == "  Y=" + "b" * 4 + "…" + "b" * 11 + "  N=12345"  # under the row: the name cut, the number whole
    assert max(map(len, table)) <= 60
    assert elided("abcdefghij", 5) == "ab…ij"  # alone, a short cut keeps both ends
    assert elided("abc", 5) == "abc"


def test_explain_wraps_at_word_boundaries_under_its_bullet() -> None:
    good = str(REPO / "examples" / "check" / "good.yaml")
    text = output("kubectl cardquota", "explain", "job/training-job", "-n", "team-a", "--cluster", CLUSTER,
                  "--cluster", good)
    assert widest(text) <= 80
    assert "  - Queue team-a has insufficient NVIDIA-A100 quota: requested 8, total would be\n    16, but" in text
    assert wrapped("  - alpha beta gamma delta epsilon", 24) == ["  - alpha beta gamma", "    delta epsilon"]
    assert wrapped("  https://example.com/a-very-long-word-that-is-not-broken", 20) == [
        "  https://example.com/a-very-long-word-that-is-not-broken"]
