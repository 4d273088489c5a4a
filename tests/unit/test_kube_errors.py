"""Errors that name the fix when the cluster cannot be read (issue 18 item 14): the plugin without a kubeconfig names
``--kubeconfig`` and ``--cluster FILE``, a missing ``--kubeconfig`` file says "no such file", a broken one is one line
without a literal ``\\n``; and urllib3's retry chatter never precedes the one-line error of an unreachable API."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import pytest
from kubeconfigs import write_kubeconfig

from cardquota.cli.main import run
from cardquota.kube import KubeError, _get, api_client, api_error


@pytest.fixture
def no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A home without ~/.kube/config, no $KUBECONFIG, not in a pod."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return tmp_path


def plugin_error(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    assert run("kubectl cardquota", list(argv), stdout=out, stderr=err) == 2
    assert out.getvalue() == ""
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, err.getvalue()
    assert "\\n" not in lines[0]
    return lines[0]


@pytest.mark.parametrize("command", [["usage"], ["nodes"], ["explain", "pod/p"], ["doctor"]])
def test_without_a_kubeconfig_the_error_names_both_ways_out(no_kubeconfig: Path, command: list[str]) -> None:
    assert plugin_error(*command) == (
        "kubectl cardquota: error: cluster: no kubeconfig (~/.kube/config: no such file) and not in a pod: pass "
        "--kubeconfig FILE, or read the objects offline with --cluster FILE")


def test_a_kubeconfig_variable_naming_no_file_is_said(no_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/config")
    assert "no kubeconfig (KUBECONFIG=/nonexistent/config: no such file)" in plugin_error("usage")


def test_a_missing_kubeconfig_file_is_no_such_file(no_kubeconfig: Path) -> None:
    assert plugin_error("usage", "--kubeconfig", "/nonexistent") == (
        "kubectl cardquota: error: cluster: --kubeconfig /nonexistent: no such file")


def test_a_broken_kubeconfig_is_one_line_with_the_place(no_kubeconfig: Path) -> None:
    broken = no_kubeconfig / "broken"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: [\n  {name: c\n")
    assert plugin_error("usage", "--kubeconfig", str(broken)) == (
        f"kubectl cardquota: error: cluster: the kubeconfig {broken} is not YAML: document 1: invalid YAML at line 5, "
        "column 1: did not find expected ',' or '}'")
    not_a_map = no_kubeconfig / "list"
    not_a_map.write_text("- a\n")
    assert plugin_error("usage", "--kubeconfig", str(not_a_map)).endswith(
        "is not a kubeconfig (a YAML map with clusters, contexts and users)")


def test_a_context_the_kubeconfig_lacks_is_one_line(no_kubeconfig: Path) -> None:
    config = write_kubeconfig(no_kubeconfig, "http://127.0.0.1:9")
    line = plugin_error("usage", "--kubeconfig", config, "--context", "elsewhere")
    assert line.startswith(f"kubectl cardquota: error: cluster: cannot use the kubeconfig {config} (context "
                           "elsewhere): ")


def test_an_unreachable_api_logs_no_retry_lines_before_the_error(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """``cardquota operator`` against an unreachable API printed ~20 urllib3 "Retrying (Retry(total=…))" warnings
    before its one-line error; clients made by kube.api_client drop them (urllib3 still retries)."""
    api = api_client(kubeconfig=write_kubeconfig(tmp_path, "http://127.0.0.1:9"))
    with caplog.at_level(logging.DEBUG), pytest.raises(KubeError, match="no Kubernetes API reachable at"):
        _get(api, "/api/v1/nodes")
    assert not [record for record in caplog.records if "Retrying" in record.getMessage()]
    logging.getLogger("urllib3.connectionpool").warning("Connection pool is full, discarding connection: %s", "x")
    assert "Connection pool is full" in caplog.text  # urllib3's other warnings still pass


@pytest.mark.parametrize(("status", "kind"), [
    (-1, "Unreachable"), (401, "Unauthorized"), (403, "Forbidden"), (404, "NotFound"), (409, "Conflict"),
    (410, "Gone"), (422, "Invalid"), (429, "Throttled"), (500, "ServerError"), (503, "ServerError"),
    (400, "KubeError")])
def test_each_api_status_is_raised_as_its_class(status: int, kind: str) -> None:
    """Callers catch the class (issue 21: no status comparisons outside kube.py); the status stays for messages."""
    error = api_error("GET /x: HTTP …", status)
    assert type(error).__name__ == kind
    assert isinstance(error, KubeError)
    assert error.status == status


def test_a_workload_kind_whose_crd_is_not_installed_is_said_not_served(monkeypatch: Any) -> None:
    """A 404 for a registered kind's object: the discovery document says whether its CRD is installed (MPIJob:
    either of its two versions), so explain says "not installed" rather than "not found"."""
    import cardquota.kube as kube

    served = {"/apis/kubeflow.org/v1": {"resources": [{"name": "mpijobs"}, {"name": "pytorchjobs"}]}}
    objects = {"/apis/kubeflow.org/v1/namespaces/ml/mpijobs/m": {"metadata": {"name": "m"}}}

    def get(_api: object, path: str) -> Any:
        if path in served:
            return served[path]
        if path in objects:
            return objects[path]
        raise kube.NotFound(f"GET {path}: HTTP 404", 404)

    monkeypatch.setattr(kube, "_get", get)
    with pytest.raises(kube.NotServed, match="does not serve RayJob"):
        kube.read_namespaced(None, "rayjob", "ml", "r")  # type: ignore[arg-type]
    assert kube.read_namespaced(None, "pytorchjob", "ml", "absent") is None  # type: ignore[arg-type]
    assert kube.read_namespaced(None, "mpijob", "ml", "m") == {  # type: ignore[arg-type]
        "apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "m"}}
