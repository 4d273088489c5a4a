"""One way to say each thing across ``cardquota`` and ``kubectl cardquota`` (issue 18 item 15): ``usage`` takes
``--cluster`` as the README says, every command with a JSON document also prints it as YAML, ``-n``/``-A`` are
refused where they do nothing, "not found" says where else to look, and a mistyped command or value gets the
closest one suggested."""

from __future__ import annotations

import argparse
import io
import itertools
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from cardquota.cli.main import KUBECTL_PROG, build_kubectl_parser, build_parser, run

REPO = Path(__file__).resolve().parents[2]
CLUSTER = str(REPO / "examples" / "cluster.yaml")


def call(prog: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(prog, list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_usage_takes_cluster_as_the_readme_says_and_its_help_shows_that() -> None:
    _, help_text, _ = call("cardquota", "usage", "--help")
    assert "--cluster CLUSTER" in help_text
    assert "-f" not in help_text.split("options:", 1)[1].replace("-f,", "")  # -f stays an undocumented alias
    assert call("cardquota", "usage", "--cluster", CLUSTER, "-o", "json")[1] == call(
        "cardquota", "usage", "-f", CLUSTER, "-o", "json")[1]
    code, _, err = call("cardquota", "usage")
    assert code == 2
    assert "name the cluster to read: --cluster FILE" in err


@pytest.mark.parametrize(("prog", "argv"), [
    ("cardquota", ["discover", "-f", CLUSTER]),
    ("cardquota", ["usage", "--cluster", CLUSTER]),
    ("cardquota", ["check", "-f", str(REPO / "examples" / "check" / "good.yaml"), "--cluster", CLUSTER]),
    ("cardquota", ["simulate", "--cluster", CLUSTER, "-f", str(REPO / "examples" / "simulate" / "workload.yaml")]),
    ("kubectl cardquota", ["usage", "--cluster", CLUSTER]),
    ("kubectl cardquota", ["nodes", "--cluster", CLUSTER]),
    ("kubectl cardquota", ["explain", "pod/diffusion-train-0", "-n", "team-b", "--cluster", CLUSTER]),
    ("kubectl cardquota", ["crd", "--cluster", CLUSTER]),
    ("kubectl cardquota", ["doctor", "--cluster", CLUSTER]),
])
def test_every_json_document_is_also_yaml(prog: str, argv: list[str]) -> None:
    _, as_json, _ = call(prog, *argv, "-o", "json")
    _, as_yaml, _ = call(prog, *argv, "-o", "yaml")
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


@pytest.mark.parametrize(("argv", "message"), [
    (["usage", "-n", "ml"], "usage: -n/--namespace does nothing here: queues are cluster-wide; leave it out"),
    (["usage", "-A"], "usage: -A/--all-namespaces does nothing here: queues are cluster-wide; leave it out"),
    (["nodes", "-n", "ml"], "nodes: -n/--namespace does nothing here: nodes are cluster-wide; leave it out"),
    (["crd", "-A"], "crd: -A/--all-namespaces does nothing here: CRDs are cluster-wide; leave it out"),
    (["doctor", "-A"], "doctor: -A/--all-namespaces does nothing here: -n names cardquota's namespace"),
    (["check", "-A", "-f", CLUSTER], "check: -A/--all-namespaces does nothing here: -n alone places the objects"),
])
def test_namespace_options_are_refused_where_they_do_nothing(argv: list[str], message: str) -> None:
    code, out, err = call("kubectl cardquota", *argv, "--cluster", CLUSTER)
    assert (code, out) == (2, "")
    assert message in err
    assert err.count("\n") == 1


def test_not_found_says_where_else_to_look() -> None:
    _, _, err = call("kubectl cardquota", "explain", "pod/nope", "-n", "team-a", "--cluster", CLUSTER)
    assert err.rstrip().endswith("pod team-a/nope not found in " + CLUSTER
                                 + " (another namespace: -n NAMESPACE; every namespace: -A)")
    _, _, err = call("kubectl cardquota", "explain", "pod/nope", "-A", "--cluster", CLUSTER)
    assert err.rstrip().endswith(f"pod nope not found in any namespace in {CLUSTER}")


@pytest.mark.parametrize(("prog", "argv", "suggestion"), [
    ("cardquota", ["usge"], "did you mean 'usage'?"),
    ("cardquota", ["simulte"], "did you mean 'simulate'?"),
    ("kubectl cardquota", ["nodse"], "did you mean 'nodes'?"),
    ("kubectl cardquota", ["explian"], "did you mean 'explain'?"),
    ("kubectl cardquota", ["usage", "-o", "tabel"], "did you mean 'table'?"),
])
def test_a_mistyped_command_gets_the_closest_suggested(prog: str, argv: list[str], suggestion: str) -> None:
    code, _, err = call(prog, *argv)
    assert code == 2
    assert err.rstrip().endswith(suggestion)


# ---------------------------------------------------------------------------------------------------------- --help
# Issue 43: every plugin command shared one -n/-A text ("explain: …; check: …; doctor: …"), no command had an
# example, and `cardquota --help` did not mention `kubectl cardquota`.

SHELL_OPERATORS = {"|", ">", "<", ";", "&&", "||"}


def subcommands(prog: str) -> list[str]:
    parser = build_kubectl_parser(prog) if prog == KUBECTL_PROG else build_parser(prog)
    (commands,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return list(commands.choices)


def help_of(prog: str, command: str) -> str:
    code, text, err = call(prog, command, "--help")
    assert (code, err) == (0, "")
    return text


EVERY_COMMAND = [(prog, command) for prog in ("cardquota", KUBECTL_PROG) for command in subcommands(prog)]


@pytest.mark.parametrize(("prog", "command"), EVERY_COMMAND)
def test_every_command_shows_examples_that_parse(prog: str, command: str) -> None:
    """Each command's help ends with examples, printed as written (one command a line, not re-wrapped); each one is
    a command line its parser accepts (the shell around it left out)."""
    text = help_of(prog, command)
    assert "\nexamples:\n" in text
    lines = text.split("\nexamples:\n", 1)[1].splitlines()
    assert lines
    parser = build_kubectl_parser(prog) if prog == KUBECTL_PROG else build_parser(prog)
    for line in lines:
        assert line.startswith("  "), line
        assert f"{prog} {command}" in line, line
        words = shlex.split(line, comments=True)
        start = next(i for i in range(len(words)) if words[i:i + len(prog.split()) + 1] == [*prog.split(), command])
        argv = list(itertools.takewhile(lambda word: word not in SHELL_OPERATORS, words[start + len(prog.split()):]))
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{line.strip()!r} does not parse")


def namespace_help(text: str) -> dict[str, str]:
    """-n's and -A's help text in a command's --help ('' when the option is not shown)."""
    options = text.split("\noptions:\n", 1)[1].split("\nexamples:\n", 1)[0]
    found = {}
    for flag, spelled in (("-n", "-n NAMESPACE, --namespace NAMESPACE"), ("-A", "-A, --all-namespaces")):
        match = re.search(rf"^  {re.escape(spelled)}(.*?)(?=^  -|\Z)", options, re.MULTILINE | re.DOTALL)
        found[flag] = " ".join(match.group(1).split()) if match else ""
    return found


@pytest.mark.parametrize(("command", "namespace", "all_namespaces"), [
    ("explain", "the object's namespace", "find the object in any namespace"),
    ("check", "objects that name no namespace", ""),
    ("doctor", "cardquota's namespace (default cardquota-system)", ""),
    ("usage", "", ""),  # (accepted, to be refused saying why: test_namespace_options_are_refused_where_…)
    ("nodes", "", ""),
    ("crd", "", ""),
    ("scheduler-conf", "", ""),
])
def test_each_command_says_what_its_namespace_options_mean_to_it(command: str, namespace: str,
                                                                 all_namespaces: str) -> None:
    shown = namespace_help(help_of(KUBECTL_PROG, command))
    for flag, expected in (("-n", namespace), ("-A", all_namespaces)):
        assert expected in shown[flag], shown
        assert bool(shown[flag]) == bool(expected), shown
    for text in shown.values():
        assert not re.search(r"\b(explain|check|doctor): ", text), text  # its own text, not every command's


def test_cardquota_help_points_to_the_kubectl_plugin_and_back() -> None:
    _, offline, _ = call("cardquota", "--help")
    epilog = " ".join(offline.split("\ncommands:\n", 1)[1].split())
    assert "On the live cluster: kubectl cardquota, the kubectl plugin" in epilog
    assert "'kubectl cardquota --help'" in epilog
    for command in subcommands(KUBECTL_PROG):
        assert command in epilog
    _, plugin, _ = call(KUBECTL_PROG, "--help")
    assert "'cardquota --help'" in " ".join(plugin.split())
