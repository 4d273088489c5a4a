"""docs/cli.md's "Output" section gives each command's `-o json` shape (the contract other tools rely on): the keys it
names for `cardquota check` are the keys `check -o json` prints, for the verdict and for each violation (issue 43:
the page said `{"path", "message"}` while every violation also carried `reason`)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import yaml
from builders import queue
from user_docs import section

from cardquota.cli.main import run

BRACKETS = re.compile(r"\[[^\[\]]*\]")
KEY = re.compile(r'"([A-Za-z]+)"')


def documented_check_keys() -> tuple[set[str], set[str]]:
    """(a verdict's keys, a violation's keys) as the `check` bullet of the "Output" section writes them."""
    (shape,) = re.findall(r"^\* `check` → `(.*?)`", section("Output"), flags=re.MULTILINE | re.DOTALL)
    shape = " ".join(shape.split())
    (violation,) = re.findall(r'"violations": \[\{(.*?)\}\]', shape)
    assert (shape[:2], shape[-2:]) == ("[{", "}]"), shape
    verdict = BRACKETS.sub("", shape[2:-2])  # the values' lists ("warnings": […], "violations": [{…}]) left out
    return set(KEY.findall(verdict)), set(KEY.findall(violation))


def test_the_documented_check_json_keys_are_the_printed_ones(tmp_path: Path) -> None:
    path = tmp_path / "queue.yaml"
    path.write_text(yaml.safe_dump(queue("q", '{"NVIDIA-A100": 2,}')))  # denied: one violation
    out, err = io.StringIO(), io.StringIO()
    assert run("cardquota", ["check", "-f", str(path), "-o", "json"], stdout=out, stderr=err) == 1
    (verdict,) = json.loads(out.getvalue())
    (violation,) = verdict["violations"]
    assert documented_check_keys() == (set(verdict), set(violation))
