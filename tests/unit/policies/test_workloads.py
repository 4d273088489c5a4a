"""Workloads whose pods come later: the pod rules on the template (with its path), replica feasibility warnings,
and HPAs that will stall — per kind, plus `cardquota check` with a Deployment followed by its HPA."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import gpu_node, queue
from user_docs import section
from verdicts import violations_of

from cardquota.cli.main import run
from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.violations import Reason

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
SNAPSHOT_OBJECTS = [gpu_node("a1", A100, 8), gpu_node("h1", H100, 8), queue("cr-queue1", {A100: 1, H100: 1})]


def snapshot() -> Any:
    built = Ledger.build(copy.deepcopy(SNAPSHOT_OBJECTS)).snapshot
    built.complete = True
    return built


def template(card: str = A100, *, gpus: int = 1, scheduler: str = "volcano") -> dict[str, Any]:
    annotations = {"volcano.sh/card.name": card, "scheduling.volcano.sh/queue-name": "cr-queue1"}
    return {"metadata": {"labels": {"app": "inference"}, "annotations": annotations},
            "spec": {"schedulerName": scheduler,
                     "containers": [{"name": "inference", "image": "inference:latest",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def workload(kind: str, replicas: int = 1, **template_args: Any) -> dict[str, Any]:
    pod_template = template(**template_args)
    if kind == "CronJob":
        return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "w", "namespace": "ml"},
                "spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"parallelism": replicas,
                                                                         "template": pod_template}}}}
    api = "batch/v1" if kind == "Job" else "apps/v1"
    count = {"Job": {"parallelism": replicas}, "DaemonSet": {}}.get(kind, {"replicas": replicas})
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "w", "namespace": "ml"},
            "spec": {**count, "template": pod_template}}


KINDS = ["Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "CronJob"]
PATHS = {"CronJob": "spec.jobTemplate.spec.template", **dict.fromkeys(KINDS[:-1], "spec.template")}


@pytest.mark.parametrize("kind", KINDS)
def test_a_valid_card_workload_is_allowed_without_a_warning(kind: str) -> None:
    verdict = admit(workload(kind), None, snapshot(), PolicyConfig())
    assert (verdict.allowed, verdict.warnings, verdict.patch) == (True, (), ())


@pytest.mark.parametrize("kind", KINDS)
def test_the_pod_rule_denies_with_the_template_path(kind: str) -> None:
    verdict = admit(workload(kind, scheduler="default-scheduler"), None, snapshot(), PolicyConfig())
    assert not verdict.allowed
    assert violations_of(verdict) == [(f"{PATHS[kind]}.spec.schedulerName", Reason.NOT_SUPPORTED)]
    typo = admit(workload(kind, card="NVIDIA-A100|"), None, snapshot(), PolicyConfig())
    assert violations_of(typo) == [(f'{PATHS[kind]}.metadata.annotations["volcano.sh/card.name"]', Reason.INVALID)]


@pytest.mark.parametrize("kind", KINDS)
def test_with_the_gate_an_unnamed_gpu_template_in_a_card_queue_is_refused_at_apply_time(kind: str) -> None:
    """Its pods would each be refused at creation (the gate admits card pods by card.name): the workload is refused
    first, at the template's path, with the card.name that would admit it."""
    manifest = workload(kind)
    del PodTemplate.of(manifest, kind)["metadata"]["annotations"]["volcano.sh/card.name"]
    verdict = admit(manifest, None, snapshot(), PolicyConfig(card_gate=True))
    assert violations_of(verdict) == [(f'{PATHS[kind]}.metadata.annotations["volcano.sh/card.name"]',
                                       Reason.REQUIRED)]
    assert f"volcano.sh/card.name: {A100}|{H100}" in verdict.violations[0].message
    assert admit(manifest, None, snapshot(), PolicyConfig()).allowed  # without the gate: a warning, as before


class PodTemplate:
    @staticmethod
    def of(manifest: dict[str, Any], kind: str) -> dict[str, Any]:
        spec = manifest["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else manifest["spec"]
        template: dict[str, Any] = spec["template"]
        return template


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet", "Job", "CronJob"])
def test_more_replicas_than_the_quota_holds_is_a_warning_with_the_numbers(kind: str) -> None:
    verdict = admit(workload(kind, replicas=2), None, snapshot(), PolicyConfig())
    assert verdict.allowed
    noun = "pods" if kind in ("Job", "CronJob") else "replicas"
    assert verdict.warnings == (f"2 {noun} need 2 NVIDIA-A100, queue cr-queue1 allows 1",)


def test_a_job_runs_no_more_pods_at_once_than_its_completions() -> None:
    job = workload("Job", replicas=4)
    job["spec"]["completions"] = 1
    assert admit(job, None, snapshot(), PolicyConfig()).warnings == ()


def test_an_update_that_keeps_an_admitted_template_is_not_denied_when_the_queue_changed() -> None:
    before = workload("Deployment", card=H100)
    cluster = snapshot()
    cluster.queues["cr-queue1"] = Ledger.build([queue("cr-queue1", {A100: 1})]).snapshot.queues["cr-queue1"]
    scaled = copy.deepcopy(before)
    scaled["spec"]["replicas"] = 0
    verdict = admit(scaled, before, cluster, PolicyConfig())
    assert verdict.allowed
    assert verdict.warnings[0].endswith("(already in the template before this update, so not denied)")
    assert not admit(scaled, None, cluster, PolicyConfig()).allowed  # a new one is still refused
    changed = copy.deepcopy(scaled)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "inference:2"
    assert not admit(changed, before, cluster, PolicyConfig()).allowed  # so is a new template


def test_a_template_whose_metadata_is_not_a_map_is_refused_not_a_crash() -> None:
    broken = workload("Deployment")
    broken["spec"]["template"]["metadata"] = ["a", "b"]
    verdict = admit(broken, None, snapshot(), PolicyConfig())
    assert [(v.path, v.reason, v.message) for v in verdict.violations] == [
        ("spec.template.metadata", Reason.INVALID, "must be a map")]


def test_alternatives_add_up_per_pod_and_daemonsets_are_not_counted() -> None:
    assert admit(workload("Deployment", replicas=2, card=f"{A100}|{H100}"), None, snapshot(),
                 PolicyConfig()).warnings == ()
    three = admit(workload("Deployment", replicas=3, card=f"{A100}|{H100}"), None, snapshot(), PolicyConfig())
    assert three.warnings == ("3 replicas need 3 NVIDIA-A100|NVIDIA-H100, queue cr-queue1 allows 1 NVIDIA-A100, "
                              "1 NVIDIA-H100",)
    assert admit(workload("DaemonSet"), None, snapshot(), PolicyConfig()).warnings == ()


def hpa(maximum: int, target: str = "w") -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h",
                                                                                            "namespace": "ml"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "minReplicas": 1, "maxReplicas": maximum}}


def test_an_hpa_says_where_scale_up_will_stall() -> None:
    cluster = snapshot()
    Ledger(cluster).upsert(workload("Deployment", card=f"{A100}|{H100}"))
    verdict = admit(hpa(4), None, cluster, PolicyConfig())
    assert verdict.allowed
    assert verdict.warnings == ("scale-up of Deployment ml/w will stall at 2 replicas: maxReplicas 4 would need "
                                "4 NVIDIA-A100|NVIDIA-H100, queue cr-queue1 allows 1 NVIDIA-A100, 1 NVIDIA-H100",)
    assert admit(hpa(2), None, cluster, PolicyConfig()).warnings == ()
    assert admit(hpa(9, target="unknown"), None, cluster, PolicyConfig()).warnings == ()


def test_check_reads_a_deployment_and_then_its_hpa_in_one_file(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(SNAPSHOT_OBJECTS))
    manifests = tmp_path / "app.yaml"
    manifests.write_text(yaml.safe_dump_all([workload("Deployment", replicas=1), hpa(3)]))
    out = io.StringIO()
    code = run("cardquota", ["check", "-f", str(manifests), "--cluster", str(cluster), "-o", "json"], stdout=out,
               stderr=io.StringIO())
    assert code == 0
    deployment, autoscaler = json.loads(out.getvalue())
    assert deployment["warnings"] == []
    assert autoscaler["warnings"] == ["scale-up of Deployment ml/w will stall at 1 replica: maxReplicas 3 would "
                                      "need 3 NVIDIA-A100, queue cr-queue1 allows 1"]


def test_the_readme_example_is_what_check_prints() -> None:
    repo = Path(__file__).resolve().parents[3]
    block = section("Workloads whose pods come later").split("```console\n", 1)[1].split("```", 1)[0]
    command, _, shown = block.partition("\n")
    argv = [arg.replace("examples/", f"{repo}/examples/") for arg in command.removeprefix("$ cardquota ").split()]
    out = io.StringIO()
    run("cardquota", argv, stdout=out, stderr=io.StringIO())
    assert out.getvalue().rstrip() == shown.rstrip()


def test_volcano_job_task_templates_get_the_pod_rules_that_are_not_about_cards() -> None:
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"queue": "cr-queue1", "tasks": [{"name": "w", "replicas": 1, "template": {
               "metadata": {"annotations": {"volcano.sh/crossquota-scoring-strategy": "bogus"}},
               "spec": {"containers": [{"name": "c", "resources": {
                   "requests": {"vke.volcengine.com/mgpu-core": "-20"}}}]}}}]}}
    verdict = admit(job, None, snapshot(), PolicyConfig())
    assert violations_of(verdict) == [
        ('spec.tasks[0].template.spec.containers[0].resources.requests["vke.volcengine.com/mgpu-core"]',
         Reason.INVALID),
        ('spec.tasks[0].template.metadata.annotations["volcano.sh/crossquota-scoring-strategy"]',
         Reason.NOT_SUPPORTED),
    ]


def test_a_volcano_task_value_the_card_checks_refused_is_reported_once() -> None:
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"queue": "cr-queue1", "tasks": [{"name": "w", "replicas": 1, "template": {
               "metadata": {"annotations": {"volcano.sh/card.name": A100}},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {
                   "nvidia.com/gpu": "1", "vke.volcengine.com/mgpu-core": "abc"}}}]}}}]}}
    paths = [violation.path for violation in admit(job, None, snapshot(), PolicyConfig()).violations]
    assert len(paths) == len(set(paths))


def test_the_operator_cache_keeps_the_last_version_of_a_workload_it_was_given() -> None:
    """Events apply in the order they arrive; a resourceVersion that reads as a smaller number is not older (they
    are opaque: an etcd restore sets them back)."""
    from cardquota.runtime.cache import ClusterCache

    cache = ClusterCache()
    first, then = workload("Deployment", card=H100), workload("Deployment", card=A100)
    first["metadata"]["resourceVersion"], then["metadata"]["resourceVersion"] = "20", "10"
    assert cache.apply("MODIFIED", first)
    assert cache.apply("MODIFIED", then)
    kept = cache.ledger.snapshot.workloads[("apps", "Deployment", "ml", "w")]
    assert kept["spec"] == {"template": then["spec"]["template"]}  # only the template is kept
