"""``cardquota check``: admission of documents in order, as kubectl apply would send them."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import gpu_node, pod, podgroup, queue

from cardquota.cli.main import run

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "examples" / "cluster.yaml"
A100 = "NVIDIA-A100"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def write(path: Path, *manifests: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump_all(manifests, sort_keys=False))
    return str(path)


def check(*argv: str, out: io.StringIO | None = None) -> tuple[int, Any, str]:
    stdout = out if out is not None else io.StringIO()
    stderr = io.StringIO()
    code = run("cardquota", ["check", *argv], stdout=stdout, stderr=stderr)
    text = stdout.getvalue()
    return code, (json.loads(text) if text.startswith("[") else text), stderr.getvalue()


def test_json_has_one_verdict_per_document_with_the_contract_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "in.yaml", queue("q", '{ "NVIDIA-A100": 2 }', capability={"cpu": "8", "memory": "8Gi"}),
                 {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}})
    code, verdicts, err = check("-f", path, "-o", "json")
    assert code == 0
    assert all(line.startswith("warning: not checked without --cluster: ") for line in err.splitlines())
    assert [{k: v[k] for k in ("kind", "name", "namespace", "allowed", "message", "warnings", "patch")}
            for v in verdicts] == [
        {"kind": "Queue", "name": "q", "namespace": "", "allowed": True, "message": "", "warnings": [],
         "patch": [{"op": "replace", "path": "/metadata/annotations/volcano.sh~1card.quota",
                    "value": '{"NVIDIA-A100":2}'}]},
        {"kind": "Deployment", "name": "web", "namespace": "shop", "allowed": True, "message": "", "warnings": [],
         "patch": []},
    ]


def test_any_denial_exits_1_and_says_why(tmp_path: Path) -> None:
    path = write(tmp_path / "in.yaml", queue("ok", {A100: 1}), queue("bad", "{nope"))
    code, verdicts, _ = check("-f", path, "-o", "json")
    assert code == 1
    assert [v["allowed"] for v in verdicts] == [True, False]
    assert verdicts[1]["message"].startswith('metadata.annotations["volcano.sh/card.quota"]: is not valid JSON')
    assert verdicts[1]["violations"][0]["path"] == 'metadata.annotations["volcano.sh/card.quota"]'


def test_unreadable_input_exits_2(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("kind: [")
    code, _, err = check("-f", str(tmp_path / "bad.yaml"))
    assert code == 2
    assert err.count("\n") == 1
    assert "bad.yaml: document 1: invalid YAML" in err


def test_each_allowed_object_joins_the_snapshot_for_the_documents_after_it(tmp_path: Path) -> None:
    path = write(tmp_path / "in.yaml",
                 podgroup("early", queue="team-z", request={A100: 2}),
                 queue("team-z", {A100: 4}),
                 podgroup("fits", queue="team-z", request={A100: 4}),
                 podgroup("too-big", queue="team-z", request={A100: 5}))
    code, verdicts, _ = check("-f", path, "--cluster", str(CLUSTER), "-o", "json")
    assert code == 1
    assert [v["allowed"] for v in verdicts] == [False, True, True, False]
    assert "queue team-z does not exist" in verdicts[0]["message"]
    assert "requests 5 NVIDIA-A100 but queue team-z allows at most 4" in verdicts[3]["message"]


def test_an_object_already_in_the_snapshot_is_an_update_with_the_old_object(tmp_path: Path) -> None:
    cluster = write(tmp_path / "cluster.yaml", gpu_node("n1", A100, 8), queue("org", {A100: 8}),
                    queue("team", {A100: 6}, parent="org"))
    path = write(tmp_path / "in.yaml", queue("org", {A100: 4}))
    code, verdicts, _ = check("-f", path, "--cluster", cluster, "-o", "json")
    assert code == 1
    assert "NVIDIA-A100 quota 4 is below child queue team's quota of 6" in verdicts[0]["message"]


def test_applying_the_same_manifest_again_keeps_the_mutation(tmp_path: Path) -> None:
    """Issue 18 item 4: kubectl apply merges the manifest onto the live object, which holds the card.request the
    first admission added (it is not in the last-applied configuration, so apply keeps it): the webhook sees it."""
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"queue": "team-a", "tasks": [{"name": "w", "replicas": 2, "template": {
               "metadata": {"annotations": {"volcano.sh/card.name": A100}},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}]}}
    path = write(tmp_path / "in.yaml", job, job)
    code, verdicts, _ = check("-f", path, "--cluster", str(CLUSTER), "-o", "json")
    assert code == 0
    assert verdicts[0]["patch"] == [{"op": "add", "path": "/metadata/annotations",
                                     "value": {"volcano.sh/card.request": '{"NVIDIA-A100":2}'}}]
    assert (verdicts[1]["allowed"], verdicts[1]["patch"]) == (True, [])


def test_without_cluster_the_rules_that_need_it_are_skipped_with_a_warning(tmp_path: Path) -> None:
    pod_ok = pod("p", card=A100, gpus=1, queue="team-z", namespace="ml")
    code, verdicts, _ = check("-f", write(tmp_path / "ok.yaml", pod_ok), "-o", "json")
    assert code == 0
    assert verdicts[0]["warnings"] == [
        "quota of queue team-z for NVIDIA-A100 not checked: no cluster snapshot (pass --cluster, or wait for the "
        "webhook's first full list)"
    ]
    code, verdicts, _ = check("-f", write(tmp_path / "ok.yaml", pod_ok), "--cluster", str(CLUSTER), "-o", "json")
    assert code == 1
    assert "queue team-z does not exist" in verdicts[0]["message"]


def test_card_aware_schedulers_and_configmap_name_are_configurable(tmp_path: Path) -> None:
    manifest = pod("p", card=A100, gpus=1, queue="team-a", namespace="ml")
    manifest["spec"]["schedulerName"] = "volcano-gpu"
    path = write(tmp_path / "in.yaml", manifest)
    assert check("-f", path, "--cluster", str(CLUSTER), "-o", "json")[0] == 1
    assert check("-f", path, "--cluster", str(CLUSTER), "--card-aware-scheduler", "volcano-gpu", "-o", "json")[0] == 0
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "my-scheduler", "namespace": "vs"},
              "data": {"volcano-scheduler.conf": "tiers: nope"}}
    path = write(tmp_path / "cm.yaml", config)
    assert check("-f", path, "-o", "json")[0] == 0
    assert check("-f", path, "--scheduler-configmap", "my-scheduler", "-o", "json")[0] == 1


@pytest.mark.parametrize(("no_color", "colored"), [(None, True), ("1", False)])
def test_table_is_coloured_on_a_terminal_unless_no_color(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          no_color: str | None, colored: bool) -> None:
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    path = write(tmp_path / "in.yaml", queue("ok", {A100: 1}), queue("bad", "{"))
    code, text, _ = check("-f", path, out=Terminal())
    assert code == 1
    assert ("\033[31m" in text) is colored
    rows = [line for line in text.splitlines() if "Queue " in line]
    assert len(rows) == 2
    assert "ALLOWED" in rows[0]
    assert "Queue ok" in rows[0]
    assert "DENIED" in rows[1]
    assert "is not valid JSON" in text.split("Queue bad")[1]  # on its row, or wrapped under it
    assert "patch: volcano.sh/card.quota in canonical form" in text
    assert text.splitlines()[-1] == "1 allowed, 1 denied"


def test_bundled_examples_good_are_all_allowed_and_bad_all_denied() -> None:
    good = check("-f", str(REPO / "examples/check/good.yaml"), "--cluster", str(CLUSTER), "-o", "json")
    bad = check("-f", str(REPO / "examples/check/bad.yaml"), "--cluster", str(CLUSTER), "-o", "json")
    assert good[0] == 0
    assert all(v["allowed"] for v in good[1])
    assert bad[0] == 1
    assert not any(v["allowed"] for v in bad[1])
    assert len(bad[1]) == 11
    assert all(v["message"] for v in bad[1])


def test_an_internal_error_is_one_line_and_exit_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cardquota.cli.main as cli

    def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "admit", broken)
    monkeypatch.delenv("CARDQUOTA_DEBUG", raising=False)
    code, out, err = check("-f", write(tmp_path / "in.yaml", queue("q")))
    assert code == 3
    assert out == ""
    assert err == "cardquota: internal error: RuntimeError: boom (set CARDQUOTA_DEBUG=1 for details)\n"
