"""Every offline example of the README and docs/ prints what it shows: each ``$ cardquota …`` or
``$ kubectl cardquota … --cluster …`` line of a ``console`` block whose files are all in the repository is run again,
and its output compared with the lines shown under it (stdout, or stderr then stdout where the example shows a
warning). Examples on files the reader supplies (``nodes.yaml``) or on a live cluster are left to their own tests."""

from __future__ import annotations

import io
import re
import shlex

from user_docs import REPO, user_docs

from cardquota.cli.main import run

CONSOLE_BLOCK = re.compile(r"^```console\n(.*?)^```$", re.MULTILINE | re.DOTALL)
SHELL_OPERATORS = {"|", ">", "<", ";", "&&", "||"}


def examples() -> list[tuple[str, str, list[str], str]]:
    """(file, program, arguments, what is shown) of each example that can run offline from the repository."""
    found = []
    for name, text in user_docs().items():
        for block in CONSOLE_BLOCK.findall(text):
            for chunk in re.split(r"^\$ ", block, flags=re.MULTILINE)[1:]:
                command, _, shown = chunk.partition("\n")
                words = shlex.split(command, comments=True)
                if words[:1] == ["cardquota"]:
                    program, argv = "cardquota", words[1:]
                elif words[:2] == ["kubectl", "cardquota"] and "--cluster" in words:
                    program, argv = "kubectl cardquota", words[2:]
                else:
                    continue
                if SHELL_OPERATORS & set(argv):
                    continue
                files = [word for word in argv if word.endswith((".yaml", ".yml", ".json"))]
                if not files or not all((REPO / word).exists() for word in files):
                    continue
                found.append((name, program, [str(REPO / word) if word in files else word for word in argv], shown))
    return found


def test_every_offline_example_prints_what_it_shows() -> None:
    ran = []
    for name, program, argv, shown in examples():
        out, err = io.StringIO(), io.StringIO()
        run(program, argv, stdout=out, stderr=err)
        printed = {out.getvalue().rstrip(), (err.getvalue() + out.getvalue()).rstrip()}
        assert shown.rstrip() in printed, f"{name}: $ {program} {' '.join(argv)}"
        ran.append(name)
    assert len(ran) >= 4, ran
