"""The end-to-end suite's guard and undo log, without a cluster or Docker: which cluster ``make e2e`` may change
(:mod:`e2e.guard`), that it names that context on every call, and that what it changed is put back, newest first, on
success, failure, Ctrl-C and SIGTERM (:mod:`e2e.undo`).

The tests that run the real e2e fixtures (``pytest tests/e2e`` in a subprocess, ``CARDQUOTA_E2E=1``) put fakes of
``kubectl``, ``kind`` and ``docker`` first on ``PATH``; each records its arguments, so "no API call" is what the
record shows, and the kubeconfig's server is a port that refuses connections besides.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from e2e.cluster import Kubectl, node_restore_ops, reverse_spec_patch
from e2e.guard import (
    CONTEXT_VARIABLE,
    CreatedKind,
    Kubeconfig,
    Refused,
    Target,
    created_target,
    named_target,
    refuse_ambient,
)
from e2e.undo import UndoLog, restoring
from kubeconfigs import write_kubeconfig
from volcano_crds import every_crd_and_release, patched_crd, upstream_crd

REPO = Path(__file__).resolve().parents[2]
ONE_TEST = "tests/e2e/test_deployed.py::test_an_invalid_queue_is_refused_with_the_policy_message"

FAKE = """\
#!{python}
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(json.dumps({{"argv": [os.path.basename(sys.argv[0]), *args],
                            "kubeconfig": os.environ.get("KUBECONFIG")}}) + "\\n")
if os.path.basename(sys.argv[0]) == "docker" and os.environ.get("FAKE_DOCKER") == "down":
    sys.exit(1)
if os.path.basename(sys.argv[0]) != "kubectl" or "version" in args:
    sys.exit(0)
verb = next((a for a in args if not a.startswith("-") and a != os.environ.get("FAKE_CONTEXT")), "")
if verb == "get" and "nodes" in args:
    print(json.dumps({{"items": [{{"metadata": {{"name": "node-1"}}}}]}}))
elif verb in ("get", "cluster-info"):
    pass  # reachable; nothing found (--ignore-not-found prints nothing)
elif verb == "apply" and os.environ.get("FAKE_APPLY") == "hang":
    time.sleep(120)
else:
    print("fake kubectl: " + verb + " refused", file=sys.stderr)
    sys.exit(1)
"""


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound but not listening: a connection to it is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("kubectl", "kind", "docker"):
        (folder / name).write_text(FAKE.format(python=sys.executable))
        (folder / name).chmod(0o755)
    return folder


def run_e2e(tmp_path: Path, fake_bin: Path, *, extra: dict[str, str], on_start: Any = None,
            tests: str = ONE_TEST) -> tuple[str, list[dict[str, Any]]]:
    """``pytest`` over one e2e test (or ``tests``) with ``CARDQUOTA_E2E=1`` and the fakes first on PATH; what it
    printed and the commands the fakes were called with."""
    calls = tmp_path / "calls.jsonl"
    calls.touch()
    environ = {key: value for key, value in os.environ.items() if key not in ("KUBECONFIG", CONTEXT_VARIABLE)}
    environ.update(CARDQUOTA_E2E="1", FAKE_CALLS=str(calls), PATH=f"{fake_bin}{os.pathsep}{environ['PATH']}",
                   PYTHONPATH=str(REPO), HOME=str(tmp_path), **extra)
    process = subprocess.Popen([sys.executable, "-m", "pytest", tests, "-q", "-p", "no:cacheprovider",
                                "-o", "addopts=--import-mode=importlib"],
                               cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if on_start is not None:
        on_start(process, calls)
    output, _ = process.communicate(timeout=240)
    return output, [json.loads(line) for line in calls.read_text().splitlines()]


def api_calls(calls: list[dict[str, Any]]) -> list[list[str]]:
    """Every command but the client-only probes (``kubectl version --client``, ``docker info``, ``kind version``)."""
    local = (["kubectl", "version", "--client"], ["docker", "info"], ["kind", "version"])
    return [call["argv"] for call in calls if call["argv"] not in local]


# --------------------------------------------------------------------------------------------- the real fixtures


def test_a_kubeconfig_whose_current_context_we_did_not_create_is_refused_before_any_api_call(
    tmp_path: Path, fake_bin: Path, closed_port: int,
) -> None:
    # Named like a kind cluster on purpose: a name proves nothing, only a cluster this run created is accepted.
    kubeconfig = write_kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port}", context_name="kind-prod")
    output, calls = run_e2e(tmp_path, fake_bin, extra={"KUBECONFIG": kubeconfig}, tests="tests/e2e")
    refusal = refused_once(output)
    assert refusal.startswith("ERROR: refusing to run the end-to-end tests on KUBECONFIG=")
    assert f"'kind-prod' (server https://127.0.0.1:{closed_port})" in refusal
    assert f"{CONTEXT_VARIABLE}=kind-prod make e2e" in refusal
    assert api_calls(calls) == []


def test_a_named_context_missing_from_the_kubeconfig_is_refused(
    tmp_path: Path, fake_bin: Path, closed_port: int,
) -> None:
    kubeconfig = write_kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port}", context_name="staging")
    output, calls = run_e2e(tmp_path, fake_bin, extra={"KUBECONFIG": kubeconfig, CONTEXT_VARIABLE: "prod"},
                            tests="tests/e2e")
    assert refused_once(output) == (f"ERROR: {CONTEXT_VARIABLE}=prod: no such context in the kubeconfig {kubeconfig} "
                                    "(its contexts: staging)")
    assert api_calls(calls) == []


def refused_once(output: str) -> str:
    """The refusal of the whole run (every e2e test collected): one line, printed once, with no traceback and no
    test run (issue 43: it was printed once per test, 14 times, each with "During handling of the above
    exception")."""
    lines = [line for line in output.splitlines() if "refusing to run" in line or "no such context" in line]
    assert len(lines) == 1, output
    assert "Traceback" not in output, output
    assert "During handling" not in output, output
    assert not re.search(r"\d+ (passed|failed|errors?)\b", output), output
    return lines[0]


def test_a_named_context_is_used_on_every_call_the_plan_printed_first_and_a_failed_change_undone(
    tmp_path: Path, fake_bin: Path, closed_port: int,
) -> None:
    """The named context is not the current one: every call must name it (a call that relied on the current
    context would reach "other"). The fake kubectl refuses the first change (installing Volcano): the plan was printed
    before it, and its inverse ran after it."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "other",
        "clusters": [{"name": "t", "cluster": {"server": f"https://127.0.0.1:{closed_port}"}},
                     {"name": "o", "cluster": {"server": "https://192.0.2.1:6443"}}],
        "contexts": [{"name": "test-cluster", "context": {"cluster": "t", "user": "u"}},
                     {"name": "other", "context": {"cluster": "o", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    output, calls = run_e2e(tmp_path, fake_bin, extra={"KUBECONFIG": str(kubeconfig), "FAKE_CONTEXT": "test-cluster",
                                                       CONTEXT_VARIABLE: "test-cluster"})
    made = api_calls(calls)
    assert made, output
    assert all(argv[:3] == ["kubectl", "--context", "test-cluster"] for argv in made), made
    assert all(call["kubeconfig"] == str(kubeconfig) for call in calls if call["argv"] in made)
    plan = output.index(f"will change context 'test-cluster' (server https://127.0.0.1:{closed_port}")
    verbs = [argv[3] for argv in made]
    assert set(verbs[:verbs.index("apply")]) == {"get"}  # read-only until the first change
    assert plan < output.index("changing: install Volcano") < output.index("restoring: install Volcano")
    assert verbs[verbs.index("apply") + 1] == "delete"  # the inverse, recorded before the change, ran
    assert "fake kubectl: apply refused" in output


def test_sigterm_during_a_change_runs_the_undo_log(tmp_path: Path, fake_bin: Path, closed_port: int) -> None:
    kubeconfig = write_kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port}", context_name="test-cluster")

    def terminate_once_applying(process: subprocess.Popen[str], calls: Path) -> None:
        deadline = time.monotonic() + 120
        while '"apply"' not in calls.read_text():
            assert process.poll() is None, "the run ended before the fixture started a change"
            assert time.monotonic() < deadline, "the fixture never started a change"
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)

    output, calls = run_e2e(tmp_path, fake_bin, on_start=terminate_once_applying, extra={
        "KUBECONFIG": kubeconfig, CONTEXT_VARIABLE: "test-cluster", "FAKE_CONTEXT": "test-cluster",
        "FAKE_APPLY": "hang"})
    verbs = [argv[3] for argv in api_calls(calls)]
    assert verbs[verbs.index("apply"):] == ["apply", "delete"], output
    assert "restoring: install Volcano" in output


def test_without_docker_and_without_a_named_context_the_suite_is_skipped_with_the_reason(
    tmp_path: Path, fake_bin: Path,
) -> None:
    """(Kept from before the guard: no kubeconfig anywhere, so the run would create a kind cluster, and cannot.)"""
    output, calls = run_e2e(tmp_path, fake_bin, extra={"FAKE_DOCKER": "down", "PYTEST_ADDOPTS": "-rs"})
    assert "1 skipped" in output
    assert "no usable Docker daemon (`docker info` failed) to create a kind cluster" in output
    assert ["docker", "info"] in [call["argv"] for call in calls]
    assert api_calls(calls) == []


# --------------------------------------------------------------------------------------------- the guard itself


def test_kubeconfig_files_merge_as_kubectl_merges_them_first_wins(tmp_path: Path) -> None:
    first = {"current-context": "a", "contexts": [{"name": "a", "context": {"cluster": "x"}}],
             "clusters": [{"name": "x", "cluster": {"server": "https://first"}}]}
    second = {"current-context": "b", "contexts": [{"name": "a", "context": {"cluster": "y"}},
                                                   {"name": "b", "context": {"cluster": "y"}}],
              "clusters": [{"name": "x", "cluster": {"server": "https://second"}},
                           {"name": "y", "cluster": {"server": "https://y"}}]}
    config = Kubeconfig.merge(("1", "2"), [first, second])
    assert config.current == "a"
    assert config.server("a") == "https://first"
    assert config.server("b") == "https://y"
    assert config.server("missing") == "?"


@pytest.mark.parametrize("environ", [{}, {CONTEXT_VARIABLE: " "}])
def test_no_named_context_is_no_named_target(environ: dict[str, str]) -> None:
    assert named_target(environ) is None


def test_the_named_context_is_looked_up_across_kubeconfig_files(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = write_kubeconfig(tmp_path / "one", "https://one:6443", context_name="one")
    two = write_kubeconfig(tmp_path / "two", "https://two:6443", context_name="two")
    files = os.pathsep.join([one, str(tmp_path / "absent"), two])
    target = named_target({"KUBECONFIG": files, CONTEXT_VARIABLE: "two"})
    assert target == Target(files, "two", "https://one:6443", f"named by {CONTEXT_VARIABLE}")
    # (both files name their cluster "c": the first file's wins, as with kubectl)


def test_without_kubeconfig_the_named_context_comes_from_home(tmp_path: Path) -> None:
    (tmp_path / ".kube").mkdir()
    write_kubeconfig(tmp_path / ".kube", "https://home:6443", context_name="home")
    (tmp_path / ".kube" / "kubeconfig").rename(tmp_path / ".kube" / "config")
    target = named_target({"HOME": str(tmp_path), CONTEXT_VARIABLE: "home"})
    assert target is not None
    assert target.server == "https://home:6443"


def test_an_unreadable_kubeconfig_is_refused_with_its_problem(tmp_path: Path) -> None:
    (tmp_path / "kubeconfig").write_text("clusters: [")
    with pytest.raises(Refused, match="is not YAML"):
        named_target({"KUBECONFIG": str(tmp_path / "kubeconfig"), CONTEXT_VARIABLE: "x"})


def test_a_kubeconfig_without_a_current_context_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(Refused, match="it has no current context is not a kind cluster this run created"):
        refuse_ambient({"KUBECONFIG": str(tmp_path / "kubeconfig")})


def test_no_kubeconfig_set_is_not_refused_the_suite_creates_its_own_cluster() -> None:
    refuse_ambient({})


def test_the_created_kind_cluster_is_accepted_only_as_recorded(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path, "https://127.0.0.1:41234", context_name="kind-cardquota-e2e-1a2b3c4d")
    created = CreatedKind("cardquota-e2e-1a2b3c4d", path, "https://127.0.0.1:41234")
    target = created_target(created)
    assert (target.kubeconfig, target.context, target.created) == (path, "kind-cardquota-e2e-1a2b3c4d", created)
    for other in (CreatedKind("cardquota-e2e-ffffffff", path, "https://127.0.0.1:41234"),
                  CreatedKind("cardquota-e2e-1a2b3c4d", path, "https://127.0.0.1:1")):
        with pytest.raises(Refused, match="no longer shows the kind cluster this run created"):
            created_target(other)


def test_kubectl_names_the_targets_context_and_kubeconfig_on_every_call() -> None:
    kubectl = Kubectl(Target("/tmp/kc", "test-cluster", "https://x", "named"))
    assert kubectl.command("get", "nodes") == ["kubectl", "--context", "test-cluster", "get", "nodes"]
    assert kubectl.env["KUBECONFIG"] == "/tmp/kc"


@pytest.mark.parametrize(("saved", "now", "expected"), [
    ({}, {"nvidia.com/gpu": "8"}, [{"op": "remove", "path": "/status/{}/nvidia.com~1gpu"}]),
    ({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "8"},
     [{"op": "add", "path": "/status/{}/nvidia.com~1gpu", "value": "2"}]),
    ({}, {}, []),
])
def test_a_node_status_is_put_back_as_saved(saved: dict[str, str], now: dict[str, str],
                                            expected: list[dict[str, str]]) -> None:
    def node(resources: dict[str, str]) -> dict[str, Any]:
        return {"status": {"capacity": {"cpu": "2", **resources}, "allocatable": {"cpu": "2", **resources}}}

    ops = node_restore_ops(node(now), node(saved), ["nvidia.com/gpu"])
    assert ops == [{**op, "path": op["path"].format(field)} for field in ("capacity", "allocatable")
                   for op in expected]


@pytest.mark.parametrize(("crd", "release"), list(every_crd_and_release()))
def test_the_reverse_patch_takes_cardquotas_crd_additions_back_out_exactly(crd: str, release: str) -> None:
    before, after = upstream_crd(crd, release), patched_crd(crd, release)
    assert after["spec"] != before["spec"]
    restored = jsonpatch.apply_patch(after, reverse_spec_patch(after["spec"], before["spec"]))
    assert restored["spec"] == before["spec"]


# --------------------------------------------------------------------------------------------- the undo log


def logged() -> tuple[UndoLog, list[str]]:
    lines: list[str] = []
    return UndoLog(lines.append), lines


def test_the_undo_log_restores_newest_first_each_once() -> None:
    log, _ = logged()
    done: list[str] = []
    with restoring(log):
        for name in ("volcano", "crds", "cardquota"):
            log.change(name, functools.partial(done.append, name), lambda: None)
    assert done == ["cardquota", "crds", "volcano"]
    assert log.undo() == []
    assert done == ["cardquota", "crds", "volcano"]


@pytest.mark.parametrize("error", [AssertionError("a test failed"), KeyboardInterrupt()])
def test_the_undo_log_runs_on_failure_and_interrupt(error: BaseException) -> None:
    log, lines = logged()
    done: list[str] = []

    def fail() -> None:
        raise error

    def run() -> None:
        with restoring(log):
            log.change("first", lambda: done.append("first"), lambda: None)
            log.change("second, which fails half-way", lambda: done.append("second"), fail)

    with pytest.raises(type(error)):
        run()
    assert done == ["second", "first"]
    assert lines[-2:] == ["restoring: second, which fails half-way", "restoring: first"]


def test_a_failed_inverse_is_reported_and_the_others_still_run() -> None:
    log, lines = logged()
    done: list[str] = []

    def broken() -> None:
        raise AssertionError("kubectl patch failed")

    log.record("first", lambda: done.append("first"))
    log.record("second", broken)
    log.record("third", lambda: done.append("third"))
    assert log.undo() == ["second"]
    assert done == ["third", "first"]
    assert "could NOT restore: second: kubectl patch failed" in lines


def test_an_interrupt_while_restoring_says_what_is_left() -> None:
    log, lines = logged()

    def interrupted() -> None:
        raise KeyboardInterrupt

    log.record("first", lambda: None)
    log.record("second", interrupted)
    with pytest.raises(KeyboardInterrupt):
        log.undo()
    assert lines[-1] == "interrupted while restoring; NOT restored: second; first"
    assert log.steps == []


def test_sigterm_runs_the_undo_log_newest_first(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import time
        from e2e.undo import UndoLog, restoring
        log = UndoLog(lambda line: print(line, flush=True))
        with restoring(log):
            log.change("one", lambda: print("undid one", flush=True), lambda: None)
            log.change("two", lambda: print("undid two", flush=True), lambda: None)
            print("ready", flush=True)
            time.sleep(60)
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": str(REPO / "tests")})
    assert process.stdout is not None
    lines = []
    while (line := process.stdout.readline().strip()) != "ready":
        assert line, process.stderr.read() if process.stderr else ""
        lines.append(line)
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=30)
    assert rest.split("\n")[:4] == ["restoring: two", "undid two", "restoring: one", "undid one"]
    assert process.returncode != 0
