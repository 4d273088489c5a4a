"""Tables and text that fit 80 columns (issue 18 item 15: at 80 columns every ``usage``/``nodes`` row wrapped — 95
and 102 wide, ``simulate`` 138 — and ``explain`` broke words mid-line). ``-o table`` fits; ``-o wide`` has every
column; a name too long to fit is cut in the middle, never a number."""

from __future__ import annotations

import io
import json
import re
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


def mig_node_file(tmp_path: Path, product: str) -> Path:
    """A file holding a node with a long name offering two MIG profiles of ``product`` (mixed strategy)."""
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-node-with-a-long-name-in-rack-17", "labels": {
                "nvidia.com/gpu.product": product, "nvidia.com/mig.strategy": "mixed"}},
            "status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"}}}
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump(node))
    return path


def test_names_too_long_for_80_columns_are_cut_in_the_middle_and_wide_keeps_them(tmp_path: Path) -> None:
    product = "NVIDIA-A100-SXM4-80GB"
    path = mig_node_file(tmp_path, product)
    table = output("kubectl cardquota", "nodes", "--cluster", str(path), "-o", "table")
    assert widest(table) <= 80
    assert "…" in table
    assert "mig-1g.10gb-mixed" in table  # both ends of a cut name stay
    assert "names cut: -o wide shows them whole" in table.splitlines()  # (under the table it cut)
    wide = output("kubectl cardquota", "nodes", "--cluster", str(path), "-o", "wide")
    assert f"{product}/mig-1g.10gb-mixed" in wide
    assert "…" not in wide
    assert "names cut" not in wide


def test_discover_never_cuts_a_card_type_name(tmp_path: Path) -> None:
    """The names discover prints are what users copy into quotas: whole at 80 columns (the other columns fold,
    a node name may be cut), where other tables would cut them (issue 40, item 10)."""
    product = "NVIDIA-A100-SXM4-80GB-WITH-A-VERY-LONG-VENDOR-SUFFIX-AND-MORE"  # (+ a profile: 79 characters)
    path = mig_node_file(tmp_path, product)
    table = output("cardquota", "discover", "-f", str(path), "-o", "table")
    for profile in ("mig-1g.10gb-mixed", "mig-3g.40gb-mixed"):
        assert sum(f"{product}/{profile}" in line for line in table.splitlines()) == 2  # its row and its total
    assert "…" not in table.split("\n\n")[1]  # (the totals: names only)


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


# ------------------------------------------------------------------------------------ any width, any names

from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cardquota.cli.check import CheckResult  # noqa: E402
from cardquota.cli.output import MIN_ELIDED, check_table, fit_names  # noqa: E402
from cardquota.core.verdict import PatchOperation, Verdict  # noqa: E402
from cardquota.loader import Document  # noqa: E402

cell_text = st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=120)
name_text = st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp", "Zs")), min_size=1, max_size=80)
widths = st.integers(40, 200)


@settings(max_examples=200)
@given(st.data(), widths)
def test_no_table_line_is_wider_than_the_width(data: st.DataObject, width: int) -> None:
    columns = data.draw(st.integers(1, 10))
    headers = data.draw(st.lists(st.from_regex(r"[A-Z][A-Z-]{0,11}", fullmatch=True), min_size=columns,
                                 max_size=columns))
    rows = data.draw(st.lists(st.lists(st.one_of(cell_text, st.integers(-(2**63), 2**63)), min_size=columns,
                                       max_size=columns), max_size=8))
    elide = data.draw(st.sets(st.integers(0, columns - 1)))
    table = render_table(headers, rows, width=width, elide=elide)
    assert widest(table) <= width, table


@settings(max_examples=300)
@given(st.lists(name_text, min_size=1, max_size=12, unique=True), st.integers(MIN_ELIDED, 80))
@example(["NVIDIA-A100-SXM4-40GB/mig-1g.10gb-mixed", "NVIDIA-A100-SXM4-80GB/mig-1g.10gb-mixed"], MIN_ELIDED)
def test_two_distinct_names_never_show_the_same(names: list[str], size: int) -> None:
    fitted = fit_names(names, size)
    assert len(set(fitted.values())) == len(names)
    assert all(len(shown) <= size for shown in fitted.values())
    assert all(fitted[name] == name for name in names if len(name) <= size)


@settings(max_examples=100)
@given(st.lists(st.tuples(name_text, st.booleans(), cell_text, st.lists(cell_text, max_size=2),
                          st.lists(name_text, max_size=2)), min_size=1, max_size=6), widths)
def test_no_check_table_line_is_wider_than_the_width(documents: list[tuple[str, bool, str, list[str], list[str]]],
                                                     width: int) -> None:
    results = [CheckResult(Document({}, "in.yaml"), ("", "Queue", "", name),
                           Verdict(allowed, "" if allowed else message or "x", (), tuple(warnings),
                                   tuple(PatchOperation(op="add", path=path) for path in paths)))
               for name, allowed, message, warnings, paths in documents]
    assert widest(check_table(results, color=False, width=width)) <= width


# --------------------------------------------------------------------------------------- the commands

class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


ANSI = re.compile(r"\033\[[0-9;]*m")


def test_check_table_fits_80_columns_with_messages_wrapped_under_their_row() -> None:
    """The bundled bad examples' messages made lines of up to 407 characters."""
    bad = str(REPO / "examples" / "check" / "bad.yaml")
    table = output("cardquota", "check", "-f", bad, "--cluster", CLUSTER, "-o", "table")
    assert widest(table) <= 80
    lines = table.splitlines()
    row = next(index for index, line in enumerate(lines) if line.startswith("DENIED   Job team-a/too-big"))
    under = " ".join(line.strip() for line in lines[row + 1:row + 3])
    assert lines[row + 1].startswith(" " * 9)
    assert "requests 12 NVIDIA-A100 but queue team-a allows at most 10: it can never run" in under


@pytest.mark.parametrize("columns", [40, 57, 100])
def test_tables_fit_the_terminal_s_width(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))  # read first by shutil.get_terminal_size
    bad = str(REPO / "examples" / "check" / "bad.yaml")
    for prog, argv in [("cardquota", ["check", "-f", bad, "--cluster", CLUSTER]),
                       ("cardquota", ["usage", "--cluster", CLUSTER]),
                       ("kubectl cardquota", ["nodes", "--cluster", CLUSTER]),
                       ("cardquota", ["simulate", "--cluster", CLUSTER, "-f", WORKLOAD])]:
        out = Terminal()
        run(prog, [*argv, "-o", "table"], stdout=out, stderr=io.StringIO())
        assert widest(ANSI.sub("", out.getvalue())) <= columns, (prog, argv)


def mig_node(name: str, product: str, profiles: dict[str, int]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "nvidia.com/gpu.product": product, "nvidia.com/mig.strategy": "mixed"}},
        "status": {"allocatable": {f"nvidia.com/mig-{profile}": str(count) for profile, count in profiles.items()}}}


@pytest.mark.parametrize("command", [["kubectl cardquota", "nodes"], ["kubectl cardquota", "usage"]])
def test_cut_card_names_keep_the_memory_size_and_mig_profile_that_tell_them_apart(tmp_path: Path,
                                                                                 command: list[str]) -> None:
    """``NVIDIA-A100-SXM4-40GB/mi…`` was cut exactly where a 40 GB MIG slice differs from an 80 GB one."""
    nodes = [mig_node("gpu-node-with-a-long-name-in-rack-17", "NVIDIA-A100-SXM4-40GB", {"1g.5gb": 7, "3g.20gb": 2}),
             mig_node("gpu-node-with-a-long-name-in-rack-18", "NVIDIA-A100-SXM4-80GB", {"1g.10gb": 7, "3g.40gb": 2})]
    cards = ["NVIDIA-A100-SXM4-40GB/mig-1g.5gb-mixed", "NVIDIA-A100-SXM4-40GB/mig-3g.20gb-mixed",
             "NVIDIA-A100-SXM4-80GB/mig-1g.10gb-mixed", "NVIDIA-A100-SXM4-80GB/mig-3g.40gb-mixed"]
    queues = [{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
               "metadata": {"name": f"research-team-{index}", "annotations": {
                   "volcano.sh/card.quota": json.dumps(dict.fromkeys(cards, 123456))}}}
              for index in range(2)]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*nodes, *queues]))
    table = output(command[0], command[1], "--cluster", str(path), "-o", "table")
    assert widest(table) <= 80
    assert "…" in table
    card_column = [line.split()[1] for line in table.splitlines()[1:] if line.startswith(("gpu-", "resear"))]
    for card in cards:
        memory, profile = card.split("/")[0][-4:], card.split("/mig-")[1].split("-")[0]
        assert any(memory in shown and profile in shown for shown in card_column), (card, table)


def test_usage_splits_pending_into_admitted_and_waiting_at_the_card_quota_gate() -> None:
    """Two A100 pods of team-b unbound: one past the gate (admitted, held against the quota), one gated (waiting):
    PENDING counts both, WAITING (shown only when some pod waits at the gate) the gated one; the JSON has
    ``waiting`` for that queue only."""
    from builders import pod, queue

    from cardquota.cli.output import usage_json, usage_table
    from cardquota.core.ledger import Ledger

    objects = [queue("team-b", {"NVIDIA-A100": 3}), queue("team-c", {"NVIDIA-A100": 1}),
               pod("admitted", namespace="ml", card="NVIDIA-A100", gpus=1, queue="team-b"),
               pod("gated", namespace="ml", card="NVIDIA-A100", gpus=2, queue="team-b", gated=True)]
    usage = Ledger.build(objects).all_usage()
    assert usage["team-b"].pending == {"NVIDIA-A100": 3}
    assert usage["team-b"].waiting == {"NVIDIA-A100": 2}
    document = usage_json(usage)["queues"]
    assert document["team-b"]["waiting"] == {"NVIDIA-A100": 2}
    assert "waiting" not in document["team-c"]
    lines = usage_table(usage, wide=True).splitlines()
    assert lines[0].split() == ["QUEUE", "CARD", "QUOTA", "ALLOCATED", "INQUEUE", "PENDING", "WAITING", "FREE",
                                "USED", "BAR"]
    assert lines[1].split()[:7] == ["team-b", "NVIDIA-A100", "3", "0", "0", "3", "2"]
    assert lines[2].split()[:7] == ["team-c", "NVIDIA-A100", "1", "0", "0", "0", "0"]
    without = Ledger.build(objects[:3]).all_usage()
    assert "WAITING" not in usage_table(without, wide=True).splitlines()[0]


def test_a_parent_queue_shows_its_quota_against_its_whole_subtree() -> None:
    """org's 4 A100 hold product and research together (the gate checks every ancestor): a subtree row sums them
    — 3 allocated in product, 2 waiting at the gate in research — and so does the JSON's ``subtree``; a queue
    without children has none."""
    from builders import pod, queue

    from cardquota.cli.output import usage_json, usage_table
    from cardquota.core.ledger import Ledger

    objects = [queue("org", {"NVIDIA-A100": 4}), queue("product", {"NVIDIA-A100": 4}, parent="org"),
               queue("research", {"NVIDIA-A100": 4}, parent="org"),
               pod("p1", namespace="ml", card="NVIDIA-A100", gpus=3, queue="product", node_name="a1"),
               pod("p2", namespace="ml", card="NVIDIA-A100", gpus=2, queue="research", gated=True)]
    from builders import gpu_node
    usage = Ledger.build([gpu_node("a1", "NVIDIA-A100", 8), *objects]).all_usage()
    assert usage_json(usage)["queues"]["org"]["subtree"] == {
        "queues": ["org", "product", "research"], "allocated": {"NVIDIA-A100": 3}, "inqueue": {},
        "pending": {"NVIDIA-A100": 2}, "waiting": {"NVIDIA-A100": 2}}
    assert "subtree" not in usage_json(usage)["queues"]["product"]
    rows = [line.split() for line in usage_table(usage, wide=True).splitlines()]
    assert rows[2][:10] == ["org", "(subtree)", "NVIDIA-A100", "4", "3", "0", "2", "2", "1", "75%"]


@pytest.mark.parametrize("prog", ["cardquota", "kubectl cardquota"])
def test_usage_wide_names_each_queue_s_parent_beside_its_own_and_its_subtree_s_rows(tmp_path: Path, prog: str) -> None:
    """Issue 40, item 9: ``usage -o wide`` has PARENT (``-`` under Volcano's root); a parent's own row counts its own
    pods, its ``(subtree)`` row those of every queue below it too, at any depth. The 80-column table stays as it was."""
    from builders import gpu_node, pod, queue

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([
        gpu_node("a1", "NVIDIA-A100", 8), queue("org", {"NVIDIA-A100": 6}),
        queue("product", {"NVIDIA-A100": 4}, parent="org"), queue("serving", {"NVIDIA-A100": 2}, parent="product"),
        pod("own", namespace="ml", card="NVIDIA-A100", gpus=1, queue="org", node_name="a1"),
        pod("p1", namespace="ml", card="NVIDIA-A100", gpus=2, queue="product", node_name="a1"),
        pod("s1", namespace="ml", card="NVIDIA-A100", gpus=1, queue="serving", node_name="a1")]))
    rows = [line.split() for line in output(prog, "usage", "--cluster", str(cluster), "-o", "wide").splitlines()]
    assert rows[0][:5] == ["QUEUE", "PARENT", "PREEMPTION", "CARD", "QUOTA"]
    assert [row[:7] for row in rows[1:]] == [
        ["org", "-", "Never", "NVIDIA-A100", "6", "1", "0"],
        ["org", "(subtree)", "-", "Never", "NVIDIA-A100", "6", "4"],  # (the label is two words: org (subtree))
        ["product", "org", "Never", "NVIDIA-A100", "4", "2", "0"],
        ["product", "(subtree)", "org", "Never", "NVIDIA-A100", "4", "3"],
        ["serving", "product", "Never", "NVIDIA-A100", "2", "1", "0"],
    ]
    assert "PARENT" not in output(prog, "usage", "--cluster", str(cluster), "-o", "table")


@pytest.mark.parametrize("prog", ["cardquota", "kubectl cardquota"])
@pytest.mark.parametrize(("annotations", "shown", "warning"), [
    ({}, "Never", None),
    ({"cardquota.io/preemption": "Never"}, "Never", None),
    ({"cardquota.io/preemption": "LowerPriority"}, "LowerPriority", None),
    ({"cardquota.io/preemption": "LowerOrNewerEqualPriority"}, "LowerOrNewerEqualPriority", None),
    ({"cardquota.io/preemption": "lowerpriority"}, "Never",
     "warning: Queue research: cardquota.io/preemption 'lowerpriority' is not a preemption policy: write one of "
     "Never, LowerPriority, LowerOrNewerEqualPriority (read as Never)"),
])
def test_usage_wide_json_and_yaml_show_each_queue_s_preemption_policy(
        tmp_path: Path, prog: str, annotations: dict[str, str], shown: str, warning: str | None) -> None:
    """Issue 42, item 1: PREEMPTION after PARENT in ``usage -o wide`` (a subtree row: its queue's; ``-`` for a queue
    charged without a Queue object), ``preemption`` in the JSON and YAML; a value that is no policy is read as
    ``Never``, as the gate reads it, and warned. The 80-column table does not have it."""
    from builders import gpu_node, pod, queue

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([
        gpu_node("a1", "NVIDIA-A100", 8), queue("research", {"NVIDIA-A100": 4}, annotations=annotations),
        queue("team", {"NVIDIA-A100": 2}, parent="research"),
        pod("ghost", namespace="ml", card="NVIDIA-A100", gpus=1, queue="nowhere", node_name="a1")]))
    out, err = io.StringIO(), io.StringIO()
    assert run(prog, ["usage", "--cluster", str(cluster), "-o", "wide"], stdout=out, stderr=err) == 0
    rows = [line.split() for line in out.getvalue().splitlines()]
    assert rows[0][:4] == ["QUEUE", "PARENT", "PREEMPTION", "CARD"]
    assert [row[:3] for row in rows[1:]] == [
        ["nowhere", "-", "-"], ["research", "-", shown], ["research", "(subtree)", "-"], ["team", "research", "Never"]]
    assert rows[3][3] == shown  # (the subtree row: its queue's policy)
    assert (warning in err.getvalue().splitlines()) if warning else "preemption" not in err.getvalue()
    document = json.loads(output(prog, "usage", "--cluster", str(cluster), "-o", "json"))["queues"]
    assert {name: entry.get("preemption") for name, entry in document.items()} == {
        "nowhere": None, "research": shown, "team": "Never"}
    assert yaml.safe_load(output(prog, "usage", "--cluster", str(cluster), "-o", "yaml"))["queues"] == document
    assert "PREEMPTION" not in output(prog, "usage", "--cluster", str(cluster), "-o", "table")
