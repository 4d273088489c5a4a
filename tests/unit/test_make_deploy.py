"""``make deploy``'s first step (``make cluster-check``) tells a cluster that cannot be reached from one that runs no
Volcano, driven through the Makefile with a fake ``kubectl`` first on PATH (as tests/unit/test_e2e_guard.py fakes
it): each answers as kubectl does (``get --raw /version`` fails with kubectl's connection error when the API server
cannot be reached; ``get crd NAME`` of a missing CRD says ``Error from server (NotFound)``) and records its calls,
so "nothing was applied" is what the record shows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")

FAKE = """\
#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(json.dumps(args) + "\\n")
cluster = os.environ["FAKE_CLUSTER"]
if args[:2] == ["config", "current-context"]:
    print("kind-cardquota")
elif args[:2] == ["get", "--raw"]:
    if cluster == "unreachable":
        print("The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?",
              file=sys.stderr)
        sys.exit(1)
    print('{{"major": "1", "minor": "33"}}')
elif args[:3] == ["get", "crd", "queues.scheduling.volcano.sh"]:
    if cluster == "no-volcano":
        print('Error from server (NotFound): customresourcedefinitions.apiextensions.k8s.io '
              '"queues.scheduling.volcano.sh" not found', file=sys.stderr)
        sys.exit(1)
    if cluster == "forbidden":
        print('Error from server (Forbidden): customresourcedefinitions.apiextensions.k8s.io '
              '"queues.scheduling.volcano.sh" is forbidden: User "dev" cannot get resource', file=sys.stderr)
        sys.exit(1)
    print("customresourcedefinition.apiextensions.k8s.io/queues.scheduling.volcano.sh")
else:
    print("fake kubectl: unexpected call " + " ".join(args), file=sys.stderr)
    sys.exit(1)
"""


def run_make(tmp_path: Path, target: str, cluster: str) -> tuple[int, str, list[list[str]]]:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    kubectl = folder / "kubectl"
    kubectl.write_text(FAKE.format(python=sys.executable))
    kubectl.chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    calls.write_text("")
    environ = {key: value for key, value in os.environ.items() if not key.startswith("MAKE")}
    environ.update(FAKE_CALLS=str(calls), FAKE_CLUSTER=cluster, PATH=f"{folder}{os.pathsep}{environ['PATH']}")
    # VENV points at a folder that does not exist: deploy must stop before it would create one.
    completed = subprocess.run(["make", "--no-print-directory", target, f"KUBECTL={kubectl}",
                                f"VENV={tmp_path / 'no-venv'}"], cwd=REPO, env=environ, capture_output=True,
                               text=True, timeout=120, check=False)
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    return completed.returncode, completed.stdout + completed.stderr, recorded


def test_deploy_to_a_cluster_that_cannot_be_reached_says_so_and_does_not_suggest_installing_volcano(
    tmp_path: Path,
) -> None:
    status, output, calls = run_make(tmp_path, "deploy", "unreachable")
    assert status != 0
    assert "the cluster of kubectl's current context (kind-cardquota) cannot be reached: The connection to the " \
           "server 127.0.0.1:6443 was refused" in output
    assert "make kind-up" in output
    assert "Volcano" not in output
    assert "make volcano" not in output
    assert [call[:2] for call in calls] == [["get", "--raw"], ["config", "current-context"]]  # nothing written
    assert not (tmp_path / "no-venv").exists()


def test_deploy_to_a_cluster_without_volcano_suggests_make_volcano(tmp_path: Path) -> None:
    status, output, calls = run_make(tmp_path, "deploy", "no-volcano")
    assert status != 0
    assert "Volcano is not installed on this cluster (no queues.scheduling.volcano.sh CRD)" in output
    assert "make volcano" in output
    assert "cannot be reached" not in output
    assert [call[:3] for call in calls] == [["get", "--raw", "/version"],
                                            ["get", "crd", "queues.scheduling.volcano.sh"]]
    assert not (tmp_path / "no-venv").exists()


def test_a_crd_read_refused_for_another_reason_is_shown_as_kubectl_said_it(tmp_path: Path) -> None:
    status, output, _ = run_make(tmp_path, "cluster-check", "forbidden")
    assert status != 0
    assert "cannot read Volcano's Queue CRD: Error from server (Forbidden)" in output
    assert "not installed" not in output


def test_a_reachable_cluster_running_volcano_passes_the_check(tmp_path: Path) -> None:
    status, output, calls = run_make(tmp_path, "cluster-check", "volcano")
    assert (status, output) == (0, "")
    assert len(calls) == 2


def test_make_volcano_on_a_cluster_that_cannot_be_reached_applies_nothing(tmp_path: Path) -> None:
    status, output, calls = run_make(tmp_path, "volcano", "unreachable")
    assert status != 0
    assert "cannot be reached" in output
    assert all(call[0] != "apply" for call in calls)
