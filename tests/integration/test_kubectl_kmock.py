"""``kubectl cardquota`` against a live API (kmock): it reads the cluster through the kubeconfig and answers with
the same engine as offline."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from builders import claim_template, pod, podgroup, queue
from kubeconfigs import write_kubeconfig
from operator_runs import serve_dra

from cardquota.cli.main import run

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]
A100 = "NVIDIA-A100"


def kubeconfig(tmp_path: Path, url: str) -> str:
    return write_kubeconfig(tmp_path, url, namespace="ml")


async def plugin(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(run, "kubectl cardquota", list(argv), out, err)  # the client blocks
    return code, out.getvalue(), err.getvalue()


def seed(kmock: Any) -> None:
    kmock.resources["batch.volcano.sh/v1alpha1/jobs"] = {
        "namespaced": True, "kind": "Job", "singular": "job", "verbs": ["list", "get", "create"]}
    kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team-a"] = queue("team-a", {A100: 4})
    kmock.objects["scheduling.volcano.sh/v1beta1/podgroups", "ml", "train"] = podgroup(
        "train", namespace="ml", queue="team-a", phase="Running", request={A100: 3})
    for index in range(3):
        held = pod(f"train-{index}", namespace="ml", card=A100, gpus=1, group="train", node_name="a100-1")
        kmock.objects["v1/pods", "ml", f"train-{index}"] = held
    waiting = pod("solo", namespace="ml", card=A100, gpus=2, queue="team-a")
    waiting["spec"]["containers"][0]["resources"].pop("requests")
    kmock.objects["v1/pods", "ml", "solo"] = waiting


async def test_usage_nodes_and_explain_read_the_live_cluster(volcano_kmock: Any, tmp_path: Path) -> None:
    seed(volcano_kmock)
    config = kubeconfig(tmp_path, str(volcano_kmock.url))
    code, text, err = await plugin("usage", "team-a", "--kubeconfig", config, "-o", "json")
    assert (code, err) == (0, "")
    assert json.loads(text)["queues"]["team-a"] == {"quota": {A100: 4}, "allocated": {A100: 3}, "inqueue": {},
                                                    "pending": {A100: 2}, "preemption": "Never"}
    code, text, _ = await plugin("nodes", "--kubeconfig", config, "-o", "json")
    assert json.loads(text)["totals"] == {A100: {"kind": "whole", "resource": "nvidia.com/gpu", "allocatable": 8,
                                                 "used": 3}}
    code, text, err = await plugin("explain", "pod/solo", "--kubeconfig", config)  # the context's namespace: ml
    assert code == 1
    said = " ".join(text.split())  # explain wraps its sentences at 80 columns
    assert ("Queue team-a has insufficient NVIDIA-A100 quota: requested 2, total would be 5, but capability is 4 "
            "(InsufficientScalarQuota).") in said
    assert "Held by PodGroup ml/train (3)." in said


async def test_unknown_objects_and_check_against_the_live_cluster(volcano_kmock: Any, tmp_path: Path) -> None:
    seed(volcano_kmock)
    config = kubeconfig(tmp_path, str(volcano_kmock.url))
    code, _, err = await plugin("explain", "job/missing", "-n", "ml", "--kubeconfig", config)
    assert code == 2
    assert "job ml/missing not found" in err
    volcano_kmock.objects["batch.volcano.sh/v1alpha1/jobs", "ml", "sweep"] = {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "sweep", "namespace": "ml",
                     "annotations": {"volcano.sh/card.request": '{"NVIDIA-A100": 2}'}},
        "spec": {"queue": "team-a", "minAvailable": 1, "tasks": [{"name": "w", "replicas": 1, "template": {
            "metadata": {"annotations": {"volcano.sh/card.name": A100}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}]}}
    code, text, err = await plugin("explain", "job/sweep", "-A", "--kubeconfig", config)
    assert code == 1, err
    assert text.startswith("Job ml/sweep:")
    manifest = tmp_path / "pg.yaml"
    manifest.write_text(yaml.safe_dump(podgroup("big", namespace="ml", queue="team-a", phase="Pending",
                                                request={A100: 5})))
    code, text, _ = await plugin("check", "-f", str(manifest), "--kubeconfig", config, "-o", "json")
    assert code == 1
    (result,) = json.loads(text)
    assert result["allowed"] is False
    assert "NVIDIA-A100" in result["message"]


async def test_explain_job_falls_back_to_the_podgroup_its_controller_made(volcano_kmock: Any, tmp_path: Path) -> None:
    """No Job readable by that name (deleted, its PodGroup and pods left behind): the PodGroup the job controller
    made for it (owner: the Volcano Job) is explained, with one line saying so."""
    seed(volcano_kmock)
    group = podgroup("gone-5f0c1a52", namespace="ml", queue="team-a", phase="Pending", request={A100: 5})
    group["metadata"]["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                             "name": "gone", "uid": "5f0c1a52", "controller": True}]
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/podgroups", "ml", "gone-5f0c1a52"] = group
    config = kubeconfig(tmp_path, str(volcano_kmock.url))
    code, text, err = await plugin("explain", "job/gone", "-n", "ml", "--kubeconfig", config)
    assert code == 1
    assert err == ("note: no Volcano Job ml/gone in the cluster: explaining the PodGroup its job controller made, "
                   "ml/gone-5f0c1a52, and its pods\n")
    assert text.startswith("PodGroup ml/gone-5f0c1a52:\n")


async def test_explain_reads_the_dra_claims_a_gated_pod_names(volcano_kmock: Any, tmp_path: Path) -> None:
    """A pod naming a ResourceClaimTemplate waits at the gate under its queue's DRA quota: explain lists the claims
    through the version the API server serves and gives the gate's sentence (not "not known yet")."""
    team = queue("team-a")
    team["spec"]["dra"] = {"capability": {"gpu.example.com": {"count": 1}}}
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "team-a"] = team
    serve_dra(volcano_kmock)
    volcano_kmock.objects["resource.k8s.io/v1beta1/resourceclaimtemplates", "ml", "two"] = claim_template(
        "two", "gpu.example.com", 2)
    waiting = pod("wants-two", namespace="ml", queue="team-a", gated=True, uid="uid-1")
    waiting["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "two"}]
    volcano_kmock.objects["v1/pods", "ml", "wants-two"] = waiting
    config = kubeconfig(tmp_path, str(volcano_kmock.url))
    code, text, err = await plugin("explain", "pod/wants-two", "--kubeconfig", config)
    said = " ".join(text.split())
    assert "Waiting at the card-quota gate: queue team-a has 1 of 1 gpu.example.com devices free" in said, (said, err)
    assert code == 1


async def test_live_usage_reads_the_card_policy_the_operator_runs_with(volcano_kmock: Any, tmp_path: Path) -> None:
    """``--unquoted-queues`` not given: the operator Deployment's (``CARDQUOTA_UNQUOTED_QUEUES``), as doctor reads it;
    given, the option."""
    volcano_kmock.objects["scheduling.volcano.sh/v1beta1/queues", None, "plain"] = queue("plain")
    volcano_kmock.objects["v1/pods", "ml", "shell"] = pod("shell", namespace="ml", gpus=1, queue="plain",
                                                          node_name="a100-1")
    config = kubeconfig(tmp_path, str(volcano_kmock.url))
    _, _, err = await plugin("usage", "--kubeconfig", config, "-o", "json")
    assert "new card work there is refused" in err  # (no operator Deployment: the default, zero)
    volcano_kmock.objects["apps/v1/deployments", "cardquota-system", "cardquota"] = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "cardquota", "namespace": "cardquota-system"},
        "spec": {"template": {"spec": {"containers": [{"name": "operator", "env": [
            {"name": "CARDQUOTA_UNQUOTED_QUEUES", "value": "unlimited"}]}]}}}}
    _, _, err = await plugin("usage", "--kubeconfig", config, "-o", "json")
    assert "pods naming no card type are not limited there (--unquoted-queues=unlimited)" in err
    _, _, err = await plugin("usage", "--kubeconfig", config, "-o", "json", "--unquoted-queues", "zero")
    assert "new card work there is refused" in err
