"""Every command the README and docs/ tell a user to type exists (issue 43: docs/install.md listed ``explain`` among
the offline ``cardquota`` commands; only ``kubectl cardquota explain`` exists).

A command is ``cardquota SUB`` or ``kubectl cardquota SUB`` at the start of a command: a line of a ``sh`` or
``console`` block (after ``$ ``, ``|``, ``&&``, ``;``), an inline code span, or a parenthesised list of spans that
starts with one (`` (`kubectl cardquota usage`, `nodes`, `explain`) ``: each later span is a SUB of the same program).
Each SUB must be a subcommand of that program's own parser, the one its console script runs."""

from __future__ import annotations

import argparse
import re

import pytest
from user_docs import FENCE, user_docs

from cardquota.cli.main import KUBECTL_PROG, build_kubectl_parser, build_parser

SHELL_BLOCK = re.compile(r"^```(?:sh|console)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
COMMAND = re.compile(r"(?:^|[|;&(]\s*|\$ )(kubectl cardquota|cardquota) ([a-z][a-z-]*)")
SPAN = re.compile(r"`((?:kubectl )?cardquota) ([a-z][a-z-]*)[^`]*`")
LISTED = re.compile(r"\(`((?:kubectl )?cardquota) ([a-z][a-z-]*)`((?:,? (?:and |or )?`[a-z][a-z-]*`)+)")


def subcommands(prog: str) -> set[str]:
    parser = build_kubectl_parser(prog) if prog == KUBECTL_PROG else build_parser(prog)
    (commands,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return set(commands.choices)


def commands_named() -> list[tuple[str, str, str]]:
    """(file, program, subcommand) of every command the README and docs/ name."""
    found = []
    for name, text in user_docs().items():
        for block in SHELL_BLOCK.findall(text):
            for line in block.splitlines():
                command = line.split(" # ")[0]  # (a comment may say anything)
                found += [(name, prog, sub) for prog, sub in COMMAND.findall(command)]
        prose = FENCE.sub("", text)
        found += [(name, prog, sub) for prog, sub in SPAN.findall(prose)]
        for prog, first, rest in LISTED.findall(prose):
            found += [(name, prog, sub) for sub in [first, *re.findall(r"`([a-z][a-z-]*)`", rest)]]
    return found


def test_every_command_the_docs_name_exists() -> None:
    known = {prog: subcommands(prog) for prog in ("cardquota", KUBECTL_PROG)}
    named = commands_named()
    assert len(named) > 50, named  # (the walk finds the docs' commands at all)
    missing = sorted({(name, f"{prog} {sub}") for name, prog, sub in named if sub not in known[prog]})
    assert missing == []


@pytest.mark.parametrize(("text", "expected"), [
    ("```sh\ncardquota explain job/x\n```\n", [("cardquota", "explain")]),
    ("```console\n$ kubectl cardquota usage -o wide\n```\n", [("kubectl cardquota", "usage")]),
    ("```sh\nkubectl get nodes -o yaml | cardquota usage --cluster -   # kubectl-cardquota on PATH\n```\n",
     [("cardquota", "usage")]),
    ("```sh\nhelm install cardquota charts/cardquota\n```\n", []),  # (a release name, not the command)
    ("```text\n API server ─▶ cardquota webhooks\n```\n", []),  # (a diagram)
    ("run `cardquota explain pod/x` offline\n", [("cardquota", "explain")]),
    ("the plugin (`kubectl cardquota usage`, `nodes`, `explain` and `doctor`)\n",
     [("kubectl cardquota", "usage"), ("kubectl cardquota", "nodes"), ("kubectl cardquota", "explain"),
      ("kubectl cardquota", "doctor")]),
])
def test_the_walk_finds_commands_and_only_commands(monkeypatch: pytest.MonkeyPatch, text: str,
                                                   expected: list[tuple[str, str]]) -> None:
    monkeypatch.setattr(f"{__name__}.user_docs", lambda: {"page.md": text})
    assert sorted({(prog, sub) for _, prog, sub in commands_named()}) == sorted(expected)
