"""A closed output pipe (``cardquota … -o json | head -1``) ends the command quietly with 141, in a real process.

141 is 128 + SIGPIPE, what a shell reports for kubectl (Go: ``epipecheck`` in ``src/os/file_unix.go`` raises SIGPIPE on
EPIPE to stdout/stderr) and for coreutils there; the choice is explained at ``EXIT_CLOSED_PIPE``. Each case runs the
real entry point in a subprocess whose stdout is an OS pipe: closed before the command writes anything, or after one
line while the command is still writing (its output is larger than a pipe's buffer, so it is blocked mid-stream).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import gpu_node, queue

from cardquota.cli.main import EXIT_CLOSED_PIPE

REPO = Path(__file__).resolve().parents[2]
CLUSTER = str(REPO / "examples" / "cluster.yaml")
NODES = 2_000
"""Enough nodes and queues that every output below is more than twice a pipe's 64 KiB buffer."""


@pytest.fixture(scope="module")
def many_nodes(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("pipes") / "nodes.json"
    nodes = [gpu_node(f"gpu-node-{index:05d}", "NVIDIA-A100-SXM4-80GB", 8) for index in range(NODES)]
    queues = [queue(f"team-{index:05d}", {"NVIDIA-A100-SXM4-80GB": 8}) for index in range(NODES)]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*nodes, *queues]}))
    return str(path)


def started(entry: str, argv: list[str], *, unbuffered: bool = False) -> subprocess.Popen[bytes]:
    """The entry point (as the installed script calls it) in a process; ``unbuffered``: as ``PYTHONUNBUFFERED=1``
    (the image sets it) runs it."""
    code = f"import sys; from cardquota.cli.main import {entry}; sys.exit({entry}(sys.argv[1:]))"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    for variable in ("CARDQUOTA_DEBUG", "PYTHONUNBUFFERED"):
        environment.pop(variable, None)
    if unbuffered:
        environment["PYTHONUNBUFFERED"] = "1"
    return subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, cwd=REPO, env=environment)


COMMANDS = [
    ("main", ["discover", "-f", "{nodes}", "-o", "json"]),
    ("main", ["discover", "-f", "{nodes}", "-o", "wide"]),
    ("main", ["usage", "--cluster", "{nodes}", "-o", "table"]),
    ("kubectl_main", ["nodes", "--cluster", "{nodes}", "-o", "table"]),
    ("kubectl_main", ["usage", "--cluster", "{nodes}", "-o", "yaml"]),
]


@pytest.mark.parametrize(("entry", "argv"), COMMANDS, ids=[" ".join(argv[:1] + argv[-1:]) for _, argv in COMMANDS])
def test_a_pipe_closed_mid_stream_ends_quietly_with_141(entry: str, argv: list[str], many_nodes: str) -> None:
    assert_quiet_141(started(entry, [word.format(nodes=many_nodes) for word in argv]))


@pytest.mark.parametrize("output", ["wide", "yaml"])
def test_unbuffered_a_pipe_closed_mid_stream_is_seen(output: str, many_nodes: str) -> None:
    """Unbuffered, one write of a whole table was cut short without an error: exit 0, the rest lost unsaid."""
    assert_quiet_141(started("main", ["discover", "-f", many_nodes, "-o", output], unbuffered=True))


def assert_quiet_141(process: subprocess.Popen[bytes]) -> None:
    assert process.stdout is not None
    assert process.stderr is not None
    first = process.stdout.readline()  # what `head -1` reads, then it exits
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == EXIT_CLOSED_PIPE, stderr
    assert first.strip()
    assert stderr == ""  # no "internal error", no "Exception ignored … BrokenPipeError"


@pytest.mark.parametrize(("entry", "argv"), [
    ("main", ["--help"]),
    ("main", ["check", "-f", str(REPO / "examples" / "check" / "good.yaml"), "--cluster", CLUSTER, "-o", "json"]),
    ("kubectl_main", ["explain", "job/training-job", "-n", "team-a", "--cluster", CLUSTER,
                      "--cluster", str(REPO / "examples" / "check" / "good.yaml"), "-o", "yaml"]),
], ids=["help", "check json", "explain yaml"])
def test_a_pipe_closed_before_any_output_ends_quietly_with_141(entry: str, argv: list[str]) -> None:
    """Small outputs: the reader is gone before the first write (or the flush at the end)."""
    process = started(entry, argv)
    assert process.stdout is not None
    process.stdout.close()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_CLOSED_PIPE, stderr.decode()
    # nothing but what explain says of the scheduler arguments it read (stderr is still open)
    assert all(line.startswith(("read: ", "assumed: ")) for line in stderr.decode().splitlines()), stderr.decode()
