"""A namespace's queue: a PodGroup created with queue ``default`` in a namespace annotated
``scheduling.volcano.sh/queue-name: Q`` is stored with queue Q when the cluster's Volcano maps namespaces to queues.

Volcano v1.15.1: the ``/podgroups/mutate`` webhook (``createPodGroupPatch``,
pkg/webhooks/admission/podgroups/mutate/mutate_podgroup.go; CREATE only, ``Spec.Queue == "default"`` only, the
namespace's annotation when it has one) or the MutatingAdmissionPolicy ``volcano-podgroup-mutation-policy``
(installer/helm/chart/volcano/policy/podgroups-mutating.yaml, ``custom.map_enable``, off by default). Every
PodGroup-to-be goes through it: a plain pod's (``buildPodGroupFromPod``, pkg/controllers/podgroup/
pg_controller_handler.go: the pod's queue-name annotation, else ``default``), a Volcano Job's (created with the
Job's queue, ``default`` when unset: ``patchDefaultQueue``, pkg/webhooks/admission/jobs/mutate/mutate_job.go)."""

from __future__ import annotations

import argparse
import copy
import io
import json
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from builders import gpu_node, pod, podgroup, queue

from cardquota.cli.main import run
from cardquota.core.doctor import Status, Unreadable, check_namespace_queues
from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.kube import NAMESPACE_RESOURCES
from cardquota.operator import watch
from cardquota.operator.settings import ENV_MAP_NAMESPACE_QUEUES, add_arguments, from_arguments
from cardquota.runtime.cache import ClusterCache

REPO = Path(__file__).resolve().parents[2]

A100 = "NVIDIA-A100"
QUEUE_NAME = "scheduling.volcano.sh/queue-name"


def namespace(name: str, queue_name: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if queue_name is not None:
        metadata["annotations"] = {QUEUE_NAME: queue_name}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


# team-a and team-b have A100 quota; default has none (the Deployment of the brief is denied there)
CLUSTER = [gpu_node("a1", A100, 8), queue("default"), queue("team-a", {A100: 4}), queue("team-b", {A100: 4}),
           namespace("ml", "team-a"), namespace("plain")]


def snapshot(*extra: dict[str, Any], mapping: bool = True) -> ClusterSnapshot:
    built = Ledger.build(copy.deepcopy([*CLUSTER, *extra]), map_namespace_queues=mapping).snapshot
    built.complete = True
    return built


def deployment(ns: str, queue_name: str | None = None, replicas: int = 1) -> dict[str, Any]:
    annotations = {"volcano.sh/card.name": A100, **({QUEUE_NAME: queue_name} if queue_name is not None else {})}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "serve", "namespace": ns},
            "spec": {"replicas": replicas, "template": {
                "metadata": {"annotations": annotations},
                "spec": {"schedulerName": "volcano", "containers": [
                    {"name": "main", "image": "serve:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


def vcjob(ns: str, queue_name: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minAvailable": 1, "schedulerName": "volcano", "tasks": [{
        "name": "worker", "replicas": 1, "template": {
            "metadata": {"annotations": {"volcano.sh/card.name": A100}},
            "spec": {"containers": [{"name": "main", "image": "train:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}]}
    if queue_name is not None:
        spec["queue"] = queue_name
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train", "namespace": ns},
            "spec": spec}


def card_pod(ns: str, **args: Any) -> dict[str, Any]:
    return pod("p", namespace=ns, card=A100, gpus=1, **args)


# ------------------------------------------------------------------------------------------- the one rule

# (what, the manifest, the PodGroup it names if one exists, mapping on, the queue its PodGroup is or will be in)
QUEUES = [
    ("pod without queue, annotated namespace", card_pod("ml"), None, True, "team-a"),
    ("the same with the mapping off", card_pod("ml"), None, False, "default"),
    ("pod naming default, annotated namespace", card_pod("ml", queue="default"), None, True, "team-a"),
    ("pod naming its own queue", card_pod("ml", queue="team-b"), None, True, "team-b"),
    ("pod without queue, namespace without annotation", card_pod("plain"), None, True, "default"),
    ("pod without queue, namespace not in the snapshot", card_pod("gone"), None, True, "default"),
    ("pod of an existing PodGroup of queue default", card_pod("ml", group="pg"),
     podgroup("pg", namespace="ml", queue="default"), True, "default"),
    ("pod of a PodGroup not created yet", card_pod("ml", group="pg"), None, True, "team-a"),
]


@pytest.mark.parametrize(("manifest", "group", "mapping", "expected"),
                         [case[1:] for case in QUEUES], ids=[case[0] for case in QUEUES])
def test_a_pod_s_queue_is_its_podgroup_s_or_the_one_volcano_will_give_it(
        manifest: dict[str, Any], group: dict[str, Any] | None, mapping: bool, expected: str) -> None:
    ledger = Ledger.build(copy.deepcopy([*CLUSTER, *([group] if group else []), manifest]),
                          map_namespace_queues=mapping)
    only = next(iter(ledger.snapshot.pods.values()))
    assert ledger.queue_of(only) == expected


# ---------------------------------------------------------------------------------------------- admission

# (what, the object, old, mapping on, allowed, a text the denial must hold)
VERDICTS = [
    ("Deployment without queue in an annotated namespace", deployment("ml"), None, True, True, ""),
    ("the same with the mapping off", deployment("ml"), None, False, False, "queue default has no"),
    ("Deployment in a namespace without annotation", deployment("plain"), None, True, False,
     "queue default has no"),
    ("Deployment naming a queue without quota", deployment("ml", "default2"), None, True, False,
     "queue default2 does not exist"),
    ("pod without queue in an annotated namespace", card_pod("ml"), None, True, True, ""),
    ("Volcano Job without queue in an annotated namespace", vcjob("ml"), None, True, True, ""),
    ("Volcano Job with queue default in an annotated namespace", vcjob("ml", "default"), None, True, True, ""),
    ("the same with the mapping off", vcjob("ml", "default"), None, False, False, "queue default has no"),
    ("PodGroup created with queue default in an annotated namespace",
     podgroup("pg", namespace="ml", queue="default", request={A100: 2}), None, True, True, ""),
    ("PodGroup created without queue in an annotated namespace",
     podgroup("pg", namespace="ml", queue=None, request={A100: 2}), None, True, True, ""),
    ("PodGroup updated with queue default keeps it (the mutation is on CREATE only)",
     podgroup("pg", namespace="ml", queue="default", request={A100: 2}),
     podgroup("pg", namespace="ml", queue="default", request={A100: 1}), True, False, "queue default"),
]


@pytest.mark.parametrize(("manifest", "old", "mapping", "allowed", "reason"),
                         [case[1:] for case in VERDICTS], ids=[case[0] for case in VERDICTS])
def test_admission_checks_the_queue_volcano_will_store(manifest: dict[str, Any], old: dict[str, Any] | None,
                                                       mapping: bool, allowed: bool, reason: str) -> None:
    verdict = admit(manifest, old, snapshot(mapping=mapping), PolicyConfig(map_namespace_queues=mapping))
    assert verdict.allowed is allowed, verdict.message
    assert reason in (verdict.message or "")


def test_the_replicas_warning_names_the_namespace_s_queue() -> None:
    verdict = admit(deployment("ml", replicas=6), None, snapshot(), PolicyConfig(map_namespace_queues=True))
    assert verdict.allowed
    assert verdict.warnings == ("6 replicas need 6 NVIDIA-A100, queue team-a allows 4",)


# ------------------------------------------------------------------------------------------------- ledger


def test_a_pending_pod_of_an_annotated_namespace_is_charged_to_the_namespace_s_queue() -> None:
    ledger = Ledger.build(copy.deepcopy([*CLUSTER, pod("p", namespace="ml", card=A100, gpus=2)]),
                          map_namespace_queues=True)
    assert ledger.usage("team-a").pending == {A100: 2}
    assert ledger.usage("default").pending == {}


def test_a_namespace_s_annotation_changing_moves_its_pods_without_a_podgroup() -> None:
    manifests = copy.deepcopy([*CLUSTER, pod("p", namespace="ml", card=A100, gpus=2),
                               podgroup("pg", namespace="ml", queue="team-b", phase="Pending"),
                               pod("q", namespace="ml", card=A100, gpus=1, group="pg")])
    ledger = Ledger(ClusterSnapshot(map_namespace_queues=True))
    for manifest in manifests:
        ledger.upsert(manifest)
    assert (ledger.usage("team-a").pending, ledger.usage("team-b").pending) == ({A100: 2}, {A100: 1})
    ledger.upsert(namespace("ml", "default"))
    assert ledger.usage("team-a").pending == {}
    assert (ledger.usage("default").pending, ledger.usage("team-b").pending) == ({A100: 2}, {A100: 1})
    ledger.upsert(namespace("ml", "team-a"))
    assert ledger.usage("team-a").pending == {A100: 2}
    ledger.delete(namespace("ml"))
    assert (ledger.usage("team-a").pending, ledger.usage("default").pending) == ({}, {A100: 2})
    rebuilt = Ledger.build([*manifests[:-3], namespace("ml", "team-a"), *manifests[-3:]], map_namespace_queues=True)
    ledger.upsert(namespace("ml", "team-a"))
    assert ledger.all_usage() == rebuilt.all_usage()


# ---------------------------------------------------------------------------------------------------- CLI


def check(tmp_path: Path, workload: list[dict[str, Any]], *flags: str) -> tuple[int, str, str]:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(CLUSTER))
    (tmp_path / "workload.yaml").write_text(yaml.safe_dump_all(workload))
    out, err = io.StringIO(), io.StringIO()
    code = run("cardquota", ["check", "--cluster", str(tmp_path / "cluster.yaml"), "-f",
                             str(tmp_path / "workload.yaml"), "-o", "json", *flags], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_check_reads_the_namespace_s_queue_from_the_cluster_file_with_the_mapping_on(tmp_path: Path) -> None:
    workload = [deployment("ml")]
    code, out, _ = check(tmp_path, workload)
    assert code == 1
    assert "queue default has no" in out
    code, out, _ = check(tmp_path, workload, "--map-namespace-queues")
    assert code == 0, out


def test_check_stores_a_created_podgroup_in_the_namespace_s_queue_for_its_pods(tmp_path: Path) -> None:
    """A PodGroup then its pod, in one file: the pod is checked against the queue the PodGroup was stored with."""
    workload = [podgroup("pg", namespace="ml", queue="default", phase="Pending", request={A100: 1}),
                card_pod("ml", group="pg")]
    code, out, _ = check(tmp_path, workload, "--map-namespace-queues")
    assert code == 0, out


# ----------------------------------------------------------------------------------------------- operator


def test_the_operator_s_setting_reaches_the_policies_from_its_option_or_variable() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert from_arguments(parser.parse_args([]), {}).policy.map_namespace_queues is False
    assert from_arguments(parser.parse_args([]), {ENV_MAP_NAMESPACE_QUEUES: "1"}).policy.map_namespace_queues
    assert from_arguments(parser.parse_args(["--map-namespace-queues"]), {}).policy.map_namespace_queues


@pytest.mark.parametrize("namespaces", [False, True])
async def test_namespaces_are_listed_and_watched_only_with_the_mapping_on(namespaces: bool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    listed: list[tuple[str, ...]] = []

    async def list_all_async(api: Any, resources: Any) -> list[Any]:
        listed.extend(resource[1] for resource in resources)
        return []

    monkeypatch.setattr(watch, "list_all_async", list_all_async)
    assert await watch.first_list(object(), None, namespaces=namespaces) == []
    registry = kopf.OperatorRegistry()
    watch.register(registry, ClusterCache(), namespaces=namespaces)
    watched = {(handler.selector.group, handler.selector.any_name)
               for handler in registry._watching.get_all_handlers()}
    assert (("namespaces" in listed), (("", "namespaces") in watched)) == (namespaces, namespaces)
    assert "queues" in listed


def test_a_namespace_event_reaches_the_ledger_through_the_cache() -> None:
    cache = ClusterCache(ledger=Ledger(ClusterSnapshot(map_namespace_queues=True)))
    cache.load(copy.deepcopy([*CLUSTER, pod("p", namespace="ml", card=A100, gpus=1)]))
    assert cache.ledger.usage("team-a").pending == {A100: 1}
    assert cache.apply("MODIFIED", namespace("ml", "team-b"))
    assert (cache.ledger.usage("team-a").pending, cache.ledger.usage("team-b").pending) == ({}, {A100: 1})
    assert cache.apply("DELETED", namespace("ml", "team-b"))
    assert cache.ledger.usage("default").pending == {A100: 1}


def test_the_component_grants_exactly_the_namespaces_the_operator_lists() -> None:
    component = yaml.safe_load((REPO / "manifests" / "components" / "namespace-queues" / "kustomization.yaml")
                               .read_text())
    granted = [yaml.safe_load(patch["patch"])[0]["value"] for patch in component["patches"]
               if patch["target"]["kind"] == "ClusterRole"]
    assert granted == [{"apiGroups": [""], "resources": [plural for _, plural, _, _ in NAMESPACE_RESOURCES],
                        "verbs": ["list", "watch"]}]


# ------------------------------------------------------------------------------------------ simulate, explain


def with_capability(manifest: dict[str, Any]) -> dict[str, Any]:
    """A Queue with cpu/memory capability (the capacity-card plugin allocates no cpu in a queue without one)."""
    if manifest["kind"] != "Queue":
        return manifest
    return {**manifest, "spec": {**manifest["spec"], "capability": {"cpu": "64", "memory": "256Gi"}}}


def replay(tmp_path: Path, command: list[str], workload: list[dict[str, Any]], *flags: str) -> tuple[int, Any]:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([with_capability(m) for m in CLUSTER]))
    (tmp_path / "workload.yaml").write_text(yaml.safe_dump_all(workload))
    out, err = io.StringIO(), io.StringIO()
    code = run(command[0], [*command[1:], "--cluster", str(tmp_path / "cluster.yaml"), "-f",
                            str(tmp_path / "workload.yaml"), "-o", "json", *flags], stdout=out, stderr=err)
    return code, json.loads(out.getvalue()) if out.getvalue() else err.getvalue()


@pytest.mark.parametrize("workload", [[vcjob("ml")], [card_pod("ml")],
                                      [podgroup("pg", namespace="ml", phase="Pending", request={A100: 1}),
                                       card_pod("ml", group="pg")]],
                         ids=["Volcano Job", "pod without PodGroup", "PodGroup and its pod"])
def test_simulate_runs_the_workload_in_the_namespace_s_queue(tmp_path: Path, workload: list[dict[str, Any]]) -> None:
    code, result = replay(tmp_path, ["cardquota", "simulate"], workload, "--map-namespace-queues")
    assert code == 0, result
    assert result["queues"]["team-a"]["allocated"][A100] >= 1
    code, result = replay(tmp_path, ["cardquota", "simulate"], workload)
    assert code == 1
    assert result["queues"]["team-a"]["allocated"].get(A100, 0) == 0


def test_explain_says_the_pod_s_queue_is_its_namespace_s(tmp_path: Path) -> None:
    code, result = replay(tmp_path, ["kubectl cardquota", "explain"], [card_pod("ml")], "--map-namespace-queues")
    assert code == 0, result
    assert any("team-a" in fact and "its namespace ml's annotation" in fact for fact in result[0]["facts"]), result


def _operator(env: list[dict[str, str]] | None = None, args: list[str] | None = None) -> dict[str, Any]:
    return {"spec": {"template": {"spec": {"containers": [{"name": "operator", "env": env or [],
                                                            "args": args or []}]}}}}


ON = [{"name": "CARDQUOTA_MAP_NAMESPACE_QUEUES", "value": "1"}]


@pytest.mark.parametrize(("webhook", "policy", "operator", "expected"), [
    (Unreadable("not allowed (HTTP 403)"), None, _operator(ON), [Status.UNKNOWN]),
    (Unreadable("not allowed (HTTP 403)"), None, _operator(), []),  # off, as most clusters: nothing to tell
    (Unreadable("not allowed (HTTP 403)"), {"metadata": {}}, _operator(ON), [Status.OK]),
    ({"metadata": {}}, None, _operator(args=["--map-namespace-queues"]), [Status.OK]),
    ({"metadata": {}}, None, _operator([{"name": "CARDQUOTA_MAP_NAMESPACE_QUEUES", "value": "0"}]), [Status.WARN]),
    ({"metadata": {}}, None, Unreadable("not allowed (HTTP 403)"), []),  # the Operator check says it
    (None, None, _operator(), []),
])
def test_doctor_compares_volcano_s_mapping_with_the_operator_s(webhook: Any, policy: Any, operator: Any,
                                                               expected: list[Status]) -> None:
    assert [result.status for result in check_namespace_queues(webhook, policy, operator)] == expected


def test_a_denial_says_the_queue_is_the_namespace_s() -> None:
    ledger = Ledger.build(copy.deepcopy([*CLUSTER, namespace("ml", "team-c")]), map_namespace_queues=True)
    ledger.snapshot.complete = True
    verdict = admit(card_pod("ml"), None, ledger.snapshot, PolicyConfig(map_namespace_queues=True))
    assert not verdict.allowed
    assert verdict.message == ('metadata.annotations["scheduling.volcano.sh/queue-name"]: queue team-c (namespace '
                               "ml's scheduling.volcano.sh/queue-name) does not exist (did you mean team-b or team-a?)")
