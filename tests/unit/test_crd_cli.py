"""``kubectl cardquota crd`` offline (``--cluster FILE``: the CRDs as ``kubectl get crd -o yaml`` prints them): status
lines and exit codes, the patches ``install``/``uninstall`` would send, bad arguments as one line; and the Queue
policy's warning while the installed CRD lacks our ``spec.dra`` schema."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from builders import queue
from volcano_crds import patched_crd, upstream_crd

from cardquota.cli.main import run
from cardquota.core.crd_additions import CRD_NAMES, DRA_ADDITION, PODGROUP_CRD, QUEUE_CRD
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.queue import admit
from cardquota.core.snapshot import ClusterSnapshot


def plugin(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run("kubectl cardquota", list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def crd_file(tmp_path: Path, crds: list[dict[str, Any]]) -> str:
    path = tmp_path / "crds.yaml"
    path.write_text(yaml.safe_dump_all([{"apiVersion": "apiextensions.k8s.io/v1",
                                         "kind": "CustomResourceDefinition", **crd} for crd in crds]))
    return str(path)


def test_status_of_a_volcano_without_our_additions(tmp_path: Path) -> None:
    path = crd_file(tmp_path, [upstream_crd(name, "v1.14.4") for name in CRD_NAMES])
    code, text, err = plugin("crd", "--cluster", path)
    assert (code, err) == (1, "")
    assert text.splitlines() == [
        "✗ queues.scheduling.volcano.sh v1beta1: schema spec.dra missing — run: kubectl cardquota crd install",
        "✗ queues.scheduling.volcano.sh v1beta1: column CARD-QUOTA missing — run: kubectl cardquota crd install",
        "✗ queues.scheduling.volcano.sh v1beta1: column CARD-USAGE missing — run: kubectl cardquota crd install",
        "✗ podgroups.scheduling.volcano.sh v1beta1: column CARD-REQUEST missing — run: kubectl cardquota crd install",
        "✗ jobs.batch.volcano.sh v1alpha1: column CARD-REQUEST missing — run: kubectl cardquota crd install",
    ]


def test_status_all_in_place_and_json(tmp_path: Path) -> None:
    path = crd_file(tmp_path, [patched_crd(name, "master") for name in CRD_NAMES])
    code, text, _ = plugin("crd", "status", "--cluster", path, "-o", "json")
    assert code == 0
    report = json.loads(text)
    assert [entry["crd"] for entry in report] == list(CRD_NAMES)
    assert {state["state"] for entry in report for state in entry["states"]} == {"present"}


def test_install_with_cluster_files_prints_the_patch_that_makes_the_patched_crd(tmp_path: Path) -> None:
    installed = upstream_crd(QUEUE_CRD, "v1.13.0", resource_version="7")
    code, text, _ = plugin("crd", "install", "queue", "--cluster", crd_file(tmp_path, [installed]), "-o", "json")
    assert code == 0
    (result,) = json.loads(text)
    assert result["changed"] == ["column CARD-QUOTA", "column CARD-USAGE", "schema spec.dra"]
    patched = jsonpatch.apply_patch(installed, result["patch"])
    assert patched == patched_crd(QUEUE_CRD, "v1.13.0") | {"metadata": patched["metadata"]}
    assert patched["metadata"]["resourceVersion"] == "7"


def test_uninstall_dry_run_and_nothing_to_do(tmp_path: Path) -> None:
    path = crd_file(tmp_path, [patched_crd(PODGROUP_CRD, "v1.15.1")])
    code, text, _ = plugin("crd", "uninstall", "podgroup", "--dry-run", "--cluster", path)
    assert code == 0
    assert text.startswith("--- # podgroups.scheduling.volcano.sh: the JSON patch uninstall would send (")
    path = crd_file(tmp_path, [upstream_crd(PODGROUP_CRD, "v1.15.1")])
    assert plugin("crd", "uninstall", "podgroup", "--cluster", path)[1] == (
        "--- # podgroups.scheduling.volcano.sh: nothing to uninstall\n")


@pytest.mark.parametrize(("action", "installed", "crds"), [
    ("install", upstream_crd, list(CRD_NAMES)),
    ("install", upstream_crd, [QUEUE_CRD]),
    ("uninstall", patched_crd, list(CRD_NAMES)),
    ("install", patched_crd, list(CRD_NAMES)),  # nothing to send: one comment per CRD
])
def test_dry_run_prints_each_patch_readably_as_a_yaml_stream(tmp_path: Path, action: str, installed: Any,
                                                             crds: list[str]) -> None:
    """Issue 43: ``crd install --dry-run`` printed each CRD's patch as one JSON line of several KB. As text it is a
    YAML stream: one document per CRD, opened by a comment naming it, one operation per list item, no line wider than
    the schema's own longest string; it reads back as exactly the patches ``-o json`` prints."""
    path = crd_file(tmp_path, [installed(name, "v1.15.1") for name in CRD_NAMES])
    code, text, err = plugin("crd", action, *crds, "--dry-run", "--cluster", path)
    assert (code, err) == (0, "")
    documents = list(yaml.safe_load_all(text))
    results = json.loads(plugin("crd", action, *crds, "--dry-run", "--cluster", path, "-o", "json")[1])
    assert documents == [result["patch"] or None for result in results]
    comments = [line for line in text.splitlines() if line.startswith("--- # ")]
    assert [comment.split(":")[0] for comment in comments] == [f"--- # {name}" for name in crds]
    assert max(len(line) for line in text.splitlines()) < 150  # (the longest: a quantity pattern in the schema)
    for comment, result in zip(comments, results, strict=True):
        assert comment.endswith(f"the JSON patch {action} would send ({len(result['patch'])} operations)"
                                if result["patch"] else f"nothing to {action}")


def test_a_missing_crd_fails_install_but_not_uninstall(tmp_path: Path) -> None:
    path = crd_file(tmp_path, [upstream_crd(QUEUE_CRD, "v1.15.1")])
    code, text, _ = plugin("crd", "install", "job", "--cluster", path)
    assert code == 1
    assert "✗ jobs.batch.volcano.sh: not installed — install Volcano first" in text
    assert plugin("crd", "uninstall", "job", "--cluster", path)[0] == 0


@pytest.mark.parametrize(("argv", "message"), [
    (["crd", "install", "queuez"], "crd: unknown CRD queuez (queue, podgroup, job or"),
    (["crd", "statsu"], "crd: unknown CRD statsu"),
])
def test_bad_arguments_are_one_line(tmp_path: Path, argv: list[str], message: str) -> None:
    code, text, err = plugin(*argv, "--cluster", crd_file(tmp_path, []))
    assert (code, text) == (2, "")
    assert message in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(("missing", "with_dra", "expected"), [
    ((), True, None),
    (("column CARD-QUOTA",), True, None),
    ((DRA_ADDITION.label,), True, "spec.dra of this queue is dropped"),
    ((DRA_ADDITION.label,), False, "spec.dra is dropped from every queue written"),
])
def test_queue_writes_are_warned_while_the_crd_lacks_the_dra_schema(missing: tuple[str, ...], with_dra: bool,
                                                                      expected: str | None) -> None:
    manifest = queue("team-a", {"NVIDIA-A100": 2})
    if with_dra:
        manifest["spec"]["dra"] = {"capability": {"gpu.example.com": {"count": 1}}}
    snapshot = ClusterSnapshot(queue_crd_missing=missing)
    verdict = admit(manifest, None, snapshot, PolicyConfig())
    assert verdict.allowed
    pruned = [warning for warning in verdict.warnings if "cardquota crd install" in warning]
    if expected is None:
        assert pruned == []
    else:
        (warning,) = pruned
        assert warning.startswith(expected)
