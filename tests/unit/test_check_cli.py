"""``cardquota check`` as a CI gate: no objects is an error, bad quota JSON is located, rules skipped without the
cluster are said once, and mistyped kinds in Volcano's API groups are warned about."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import queue

from cardquota.cli.main import run


def check(*argv: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run("cardquota", ["check", *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def write(path: Path, *manifests: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump_all(manifests, sort_keys=False))
    return str(path)


# ------------------------------------------------------------------------------------------------ no objects


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n", "---\n# a comment\n---\n", "null\n"])
def test_a_file_without_objects_is_an_error_not_a_pass(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    code, out, err = check("-f", str(path), "-o", "table")
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"cardquota: error: no objects passed to check (no object in {path})"]


def test_a_directory_without_objects_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("# nothing yet\n")
    (tmp_path / "b.yml").write_text("---\n")
    code, out, err = check("-f", str(tmp_path))
    assert (code, out) == (2, "")
    assert err == f"cardquota: error: no objects passed to check (no object in {tmp_path})\n"


def test_empty_stdin_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"---\n# none\n")))
    code, out, err = check("-f", "-")
    assert (code, out) == (2, "")
    assert err == "cardquota: error: no objects passed to check (no object in -)\n"


def test_one_object_among_empty_files_is_checked(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("")
    write(tmp_path / "q.yaml", queue("q", '{"NVIDIA-A100": 2}'))
    code, out, _ = check("-f", str(tmp_path / "empty.yaml"), "-f", str(tmp_path / "q.yaml"), "-o", "json")
    assert code == 0
    assert [verdict["name"] for verdict in json.loads(out)] == ["q"]


# ------------------------------------------------------------------------------------------------ quota JSON


def test_a_trailing_comma_in_a_quota_is_named_with_its_position(tmp_path: Path) -> None:
    path = write(tmp_path / "q.yaml", queue("q", '{"NVIDIA-A100": 2,}'))
    code, out, _ = check("-f", path, "-o", "json")
    assert code == 1
    [verdict] = json.loads(out)
    assert verdict["message"] == ('metadata.annotations["volcano.sh/card.quota"]: is not valid JSON: a trailing comma '
                                  'at line 1, column 18 (expected {"<card type>": <cards>, ...})')


# ------------------------------------------------------------------------------------------------ unknown kinds


def manifest(api_version: str, kind: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "ns"}}


@pytest.mark.parametrize(("api_version", "kind", "warning"), [
    ("scheduling.volcano.sh/v1beta1", "Queues", "kind Queues is not a kind of scheduling.volcano.sh (did you mean "
                                                "Queue?): not checked"),
    ("scheduling.volcano.sh/v1beta1", "Podgroup", "kind Podgroup is not a kind of scheduling.volcano.sh (did you "
                                                  "mean PodGroup?): not checked"),
    ("batch.volcano.sh/v1alpha1", "Jobs", "kind Jobs is not a kind of batch.volcano.sh (did you mean Job?): not "
                                          "checked"),
    ("scheduling.volcano.sh/v1beta1", "Widget", "kind Widget is not a kind of scheduling.volcano.sh (its kinds: "
                                                "PodGroup, Queue): not checked"),
    ("schedulling.volcano.sh/v1beta1", "Queue", "API group schedulling.volcano.sh is not one of Volcano's (did you "
                                                "mean scheduling.volcano.sh?): Queue not checked"),
    ("v1", "Pods", "kind Pods is not a kind of the core API group (v1) (did you mean Pod?): not checked"),
    ("apps/v1", "Deploymnet", "kind Deploymnet is not a kind of apps (did you mean Deployment?): not checked"),
])
def test_a_mistyped_kind_is_allowed_with_a_suggestion(tmp_path: Path, api_version: str, kind: str,
                                                      warning: str) -> None:
    code, out, _ = check("-f", write(tmp_path / "x.yaml", manifest(api_version, kind)), "-o", "json")
    assert code == 0
    assert json.loads(out)[0]["warnings"] == [warning]


@pytest.mark.parametrize(("api_version", "kind"), [
    ("scheduling.volcano.sh/v1beta1", "Queue"), ("scheduling.volcano.sh/v1beta1", "QueueList"),
    ("topology.volcano.sh/v1alpha1", "HyperNode"), ("bus.volcano.sh/v1alpha1", "Command"),
    ("flow.volcano.sh/v1alpha1", "JobFlow"), ("v1", "Service"), ("v1", "Secret"), ("apps/v1", "ControllerRevision"),
    ("v1", "Nodes2Widget"), ("example.com/v1", "Queues"), ("kubeflow.org/v1", "PyTorchJob"),
])
def test_a_known_or_foreign_kind_gets_no_warning(tmp_path: Path, api_version: str, kind: str) -> None:
    code, out, _ = check("-f", write(tmp_path / "x.yaml", manifest(api_version, kind)), "-o", "json")
    assert code == 0
    assert [warning for warning in json.loads(out)[0]["warnings"] if "not a kind" in warning or "Volcano's" in warning
            ] == []


# ------------------------------------------------------------------------------------------------ skipped rules

SKIPPED = "warning: not checked without --cluster: "


ROOM = {"cpu": "8", "memory": "32Gi"}
"""A cpu/memory capability (a card queue without one is warned about: its card jobs would get none)."""


def child(name: str, parent: str) -> dict[str, Any]:
    manifest = queue(name, '{"NVIDIA-A100": 1}', capability=ROOM)
    manifest["spec"]["parent"] = parent
    return manifest


def test_every_rule_skipped_without_the_cluster_is_said_once_per_run(tmp_path: Path) -> None:
    path = write(tmp_path / "q.yaml", *(child(f"c{index}", "org") for index in range(5)))
    code, out, err = check("-f", path, "-o", "table")
    assert code == 0
    assert err.splitlines() == [
        SKIPPED + "card types no node offers",
        SKIPPED + "top-level queues' card quotas above the cards the nodes offer",
        SKIPPED + "card quota against parent queue org",
    ]
    assert "not checked" not in out  # said once on stderr, not under each of the five queues


def test_json_keeps_each_verdict_s_warnings_as_the_webhook_says_them(tmp_path: Path) -> None:
    code, out, err = check("-f", write(tmp_path / "q.yaml", child("c", "org"), child("d", "org")), "-o", "json")
    assert code == 0
    assert [len(verdict["warnings"]) for verdict in json.loads(out)] == [1, 1]
    assert err.count("parent queue org") == 1


def test_a_workload_without_the_cluster_says_its_replicas_rule_was_skipped(tmp_path: Path) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ml"},
                  "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}}
    code, _, err = check("-f", write(tmp_path / "d.yaml", deployment), "-o", "json")
    assert code == 0
    assert err.splitlines() == [SKIPPED + "a card workload's replicas against its queue's quota"]


def test_nothing_is_said_skipped_with_the_cluster(tmp_path: Path) -> None:
    cluster = write(tmp_path / "cluster.yaml", queue("org", '{"NVIDIA-A100": 4}'), {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {
            "nvidia.com/gpu.product": "NVIDIA-A100"}}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}})
    code, _, err = check("-f", write(tmp_path / "q.yaml", child("c", "org")), "--cluster", cluster, "-o", "json")
    assert (code, err) == (0, "")


def test_the_plugin_s_check_of_no_objects_fails_before_reading_the_cluster(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("# nothing\n")
    out, err = io.StringIO(), io.StringIO()
    # --cluster names a file that does not exist: the empty input is said first, the cluster never read
    code = run("kubectl cardquota", ["check", "-f", str(tmp_path / "empty.yaml"), "--cluster",
                                     str(tmp_path / "missing.yaml")], stdout=out, stderr=err)
    assert (code, out.getvalue()) == (2, "")
    assert err.getvalue() == (f"kubectl cardquota: error: no objects passed to check (no object in "
                              f"{tmp_path / 'empty.yaml'})\n")


def test_the_table_shows_the_suggestion_under_the_allowed_row(tmp_path: Path) -> None:
    path = write(tmp_path / "x.yaml", manifest("scheduling.volcano.sh/v1beta1", "Queues"))
    code, out, _ = check("-f", path, "-o", "table")
    assert code == 0
    assert out.splitlines()[:3] == [
        "ALLOWED  Queues ns/x  ok",
        "         warning: kind Queues is not a kind of scheduling.volcano.sh (did you",
        "           mean Queue?): not checked"]


# -------------------------------------------------------------------------------------------------- --strict


def test_strict_makes_the_readmes_headline_mistake_fail_the_gate(tmp_path: Path) -> None:
    """A quota keyed by a card type no node offers (…-80G where nodes offer …-80GB) is a warning: exit 0, as the
    webhook admits it; with --strict the CI gate fails (exit 1) and says why (issue: a CI gate that fails)."""
    from builders import gpu_node

    cluster = write(tmp_path / "cluster.yaml", gpu_node("a1", "NVIDIA-A100-SXM4-80GB", 8))
    manifests = write(tmp_path / "queue.yaml", queue("team", '{"NVIDIA-A100-SXM4-80G": 4}', capability=ROOM))
    code, _, err = check("-f", manifests, "--cluster", cluster, "-o", "json")
    assert code == 0
    code, out, err = check("-f", manifests, "--cluster", cluster, "-o", "json", "--strict")
    assert code == 1
    assert json.loads(out)[0]["allowed"] is True  # (the verdict is the webhook's; only the exit status changes)
    assert err.splitlines()[-1] == "check --strict: 1 warning, each a failure here"
    clean = write(tmp_path / "clean.yaml", queue("team", '{"NVIDIA-A100-SXM4-80GB": 4}', capability=ROOM))
    assert check("-f", clean, "--cluster", cluster, "--strict")[0] == 0


def test_strict_fails_on_rules_skipped_for_want_of_a_cluster(tmp_path: Path) -> None:
    manifests = write(tmp_path / "queue.yaml", queue("team", '{"NVIDIA-A100": 4}'))
    code, _, err = check("-f", manifests, "--strict")
    assert code == 1
    assert "warning:" in err
    assert err.splitlines()[-1].startswith("check --strict: ")


def test_a_misspelt_card_annotation_key_is_warned_about_with_the_key_it_resembles(tmp_path: Path) -> None:
    """``volcano.sh/card.quotas`` is ignored (the queue then has no quota at all): the check warns, naming the key
    it resembles, and --strict fails (issue: a fence without holes, item 7)."""
    misspelt = queue("team")
    misspelt["metadata"]["annotations"] = {"volcano.sh/card.quotas": '{"NVIDIA-A100": 4}'}
    manifests = write(tmp_path / "queue.yaml", misspelt)
    code, out, _ = check("-f", manifests, "-o", "json")
    assert code == 0
    assert ("metadata.annotations[volcano.sh/card.quotas]: not an annotation cardquota reads (did you mean "
            "volcano.sh/card.quota?): ignored, so this queue is judged without it") in json.loads(out)[0]["warnings"]
    assert check("-f", manifests, "--strict")[0] == 1


def test_a_fractional_gpu_request_is_refused_offline_as_kubectl_apply_would_meet_it(tmp_path: Path) -> None:
    from builders import pod

    manifest = pod("p", namespace="ml", card="NVIDIA-A100", gpus=None, containers=[
        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "500m"}}}])
    code, out, _ = check("-f", write(tmp_path / "pod.yaml", manifest), "-o", "json")
    assert code == 1
    [verdict] = json.loads(out)
    assert verdict["allowed"] is False
    assert any(v["path"] == 'spec.containers[0].resources.limits["nvidia.com/gpu"]' for v in verdict["violations"])


def test_a_version_the_api_server_does_not_serve_is_refused(tmp_path: Path) -> None:
    """kubectl apply of a scheduling.volcano.sh/v1beta2 Queue fails ("no matches for kind"): so does check, where it
    was checked as if v1beta1 (issue 40, item 7)."""
    beta2 = queue("team", '{"NVIDIA-A100": 2}')
    beta2["apiVersion"] = "scheduling.volcano.sh/v1beta2"
    code, out, _ = check("-f", write(tmp_path / "queue.yaml", beta2), "-o", "json")
    assert code == 1
    [verdict] = json.loads(out)
    assert verdict["violations"][0]["path"] == "apiVersion"
    assert "(use scheduling.volcano.sh/v1beta1)" in verdict["violations"][0]["message"]
    hpa = {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}, "maxReplicas": 2}}
    assert check("-f", write(tmp_path / "hpa.yaml", hpa))[0] == 0  # (served in v1 and v2)


def test_misspelt_card_keys_on_podgroups_pods_and_volcano_jobs_are_warned_about(tmp_path: Path) -> None:
    from builders import pod, podgroup

    group = podgroup("g", namespace="ml", queue="team")
    group["metadata"]["annotations"] = {"volcano.sh/card.requests": '{"NVIDIA-A100": 2}'}
    card_pod = pod("p", namespace="ml", card="NVIDIA-A100", gpus=1)
    card_pod["metadata"]["annotations"]["volcano.sh/card.nmae"] = "NVIDIA-A100"
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": "j", "namespace": "ml", "annotations": {"cardquota.io/card-name-request": "x"}},
           "spec": {"tasks": [{"name": "t", "replicas": 1, "template": {"spec": {"containers": [
               {"name": "c", "image": "x"}]}}}]}}
    code, out, _ = check("-f", write(tmp_path / "objects.yaml", group, card_pod, job), "-o", "json")
    assert code == 0
    said = [warning for verdict in json.loads(out) for warning in verdict["warnings"] if "not an annotation" in warning]
    assert said == [
        "metadata.annotations[volcano.sh/card.requests]: not an annotation cardquota reads (did you mean "
        "volcano.sh/card.request?): ignored, so this PodGroup is judged without it",
        "metadata.annotations[volcano.sh/card.nmae]: not an annotation cardquota reads (did you mean "
        "volcano.sh/card.name?): ignored, so this pod is judged without it",
        "metadata.annotations[cardquota.io/card-name-request]: not an annotation cardquota reads (did you mean "
        "cardquota.io/card-name-requested?): ignored, so this Volcano Job is judged without it"]
