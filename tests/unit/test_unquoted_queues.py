"""Queues without a card quota, and card pods Volcano does not schedule (issue 40, item 1).

* capacity-card-design.md, "Card Type Quotas": "Card types without quotas default to 0, and must have a quota to use
  that card type" — cardquota's default (``--unquoted-queues=zero``) holds pods that name no card type to it too,
  which the seed's plugin never charges (``getCardResourceFromTask`` returns an empty resource for a task without
  ``volcano.sh/card.name``: volcano-sh/volcano 61a5f00, pkg/scheduler/plugins/capacity-card/capacity_card.go);
* Volcano charges no queue for a pod another scheduler places (pkg/scheduler/cache/event_handlers.go ``addTask``,
  v1.15.1): ``--card-pods-outside-volcano`` says what cardquota does with those.
"""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

import pytest
import yaml
from builders import ascend_node, container, gpu_node, pod, queue
from verdicts import denied_at

from cardquota.cli import doctor as doctor_cli
from cardquota.cli.main import run
from cardquota.core import doctor
from cardquota.core.doctor import Status
from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.core.scheduling.simulate import simulate
from cardquota.core.snapshot import CardPolicy, ClusterSnapshot, OutsideVolcano, UnquotedQueues
from cardquota.core.verdict import Verdict
from cardquota.core.violations import Reason
from cardquota.operator import settings

A100 = "NVIDIA-A100"
CARD_NAME = 'metadata.annotations["volcano.sh/card.name"]'
SCHEDULER = "spec.schedulerName"
ZERO = CardPolicy()
UNLIMITED = CardPolicy(unquoted_queues=UnquotedQueues.UNLIMITED)
GATED = PolicyConfig(card_gate=True)
PLAIN = PolicyConfig()


def cluster(policy: CardPolicy = ZERO, *objects: dict[str, Any]) -> ClusterSnapshot:
    snapshot = Ledger.build([gpu_node("a100-1", A100, 8), queue("default"), queue("team-a", {A100: 4}), *objects],
                            card_policy=policy).snapshot
    snapshot.complete = True
    return snapshot


def check(manifest: dict[str, Any], snapshot: ClusterSnapshot, config: PolicyConfig = PLAIN,
          old: dict[str, Any] | None = None) -> Verdict:
    return admit(manifest, old, snapshot, config)


def elsewhere(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["spec"]["schedulerName"] = "default-scheduler"
    return manifest


# ------------------------------------------------------------------------------------------- unquoted queues


@pytest.mark.parametrize("config", [PLAIN, GATED], ids=["extender", "gate"])
def test_an_unnamed_card_pod_in_a_queue_without_a_quota_is_refused_naming_the_setting(config: PolicyConfig) -> None:
    verdict = check(pod("p", gpus=2), cluster(), config)
    denied_at(verdict, (CARD_NAME, Reason.INVALID))
    assert verdict.violations[0].message == (
        "the pod requests nvidia.com/gpu in queue default, which has no card quota (volcano.sh/card.quota): a queue "
        "without one holds 0 cards (--unquoted-queues=zero, as the capacity-card design says), so it can never run; "
        "give queue default a card quota for the card type (nodes offer NVIDIA-A100 through nvidia.com/gpu) and name "
        "it in volcano.sh/card.name, or run cardquota with --unquoted-queues=unlimited")


def test_with_unquoted_queues_unlimited_the_same_pod_is_allowed_without_a_word() -> None:
    assert check(pod("p", gpus=2), cluster(UNLIMITED)) == Verdict(allowed=True)


def test_an_update_of_a_pod_already_there_is_not_refused_but_warned() -> None:
    """A running pod created before the setting (or before its queue lost its quota) keeps running."""
    running = pod("p", gpus=2, annotations={"team": "a"})
    changed = pod("p", gpus=2, annotations={"team": "a", "volcano.sh/card.note": "x"})
    verdict = check(changed, cluster(), old=running)
    assert verdict.allowed
    assert any("holds 0 cards (--unquoted-queues=zero" in warning for warning in verdict.warnings)


def test_a_volcano_job_with_no_queue_and_no_card_name_asking_for_gpus_is_refused() -> None:
    """The issue's case: ALLOWED before, though its pods could never be admitted under the seed's rule."""
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"schedulerName": "volcano", "minAvailable": 1, "tasks": [
               {"name": "worker", "replicas": 1,
                "template": {"spec": {"containers": [container(limits={"nvidia.com/gpu": "8"})]}}}]}}
    verdict = check(job, cluster())
    denied_at(verdict, ('spec.tasks[0].template.metadata.annotations["volcano.sh/card.name"]', Reason.INVALID))
    assert "in queue default, which has no card quota" in verdict.message
    assert check(job, cluster(UNLIMITED)).allowed


def test_a_queue_with_a_quota_is_judged_as_before() -> None:
    verdict = check(pod("p", gpus=2, queue="team-a"), cluster())
    assert verdict.allowed
    assert verdict.warnings == ("the pod requests nvidia.com/gpu without volcano.sh/card.name: queue team-a's card "
                                "quota cannot check it before it is scheduled",)


@pytest.mark.parametrize(("policy", "placed"), [(ZERO, False), (UNLIMITED, True)])
def test_simulate_holds_an_unnamed_card_pod_in_an_unquoted_queue_to_0(policy: CardPolicy, placed: bool) -> None:
    nodes = [gpu_node("a100-1", A100, 8), {**queue("default", capability={"cpu": "100", "memory": "1Ti"}),
                                           "status": {"state": "Open"}}]
    result = simulate(nodes, [pod("p", gpus=2)], SchedulerConfig(card_policy=policy), card_gate=False)
    outcome = result.placements["default/p"]
    assert (outcome.node is not None) is placed
    if not placed:
        assert "holds 0 cards: --unquoted-queues=zero" in (outcome.reason or "")


# --------------------------------------------------------------------------------------- outside Volcano


def test_by_default_a_card_pod_of_another_scheduler_is_warned_about() -> None:
    verdict = check(elsewhere(pod("p", gpus=1, queue="team-a")), cluster())
    assert verdict.allowed
    assert verdict.warnings == (
        "the pod requests nvidia.com/gpu with scheduler default-scheduler: Volcano charges no queue for it, so no card "
        "quota holds it (--card-pods-outside-volcano=warn); with spec.schedulerName volcano it would be charged to "
        "queue team-a",)


def test_a_gpu_deployment_naming_no_scheduler_is_the_default_schedulers_and_warned_about() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "vllm", "namespace": "ml"},
                  "spec": {"replicas": 2, "template": {"spec": {"containers": [
                      {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
    verdict = check(deployment, cluster())
    assert verdict.allowed
    assert len(verdict.warnings) == 1
    assert "with scheduler default-scheduler: Volcano charges no queue for it" in verdict.warnings[0]


def test_off_says_nothing_and_a_bound_pod_is_never_concerned() -> None:
    off = CardPolicy(outside_volcano=OutsideVolcano.OFF)
    assert check(elsewhere(pod("p", gpus=1, queue="team-a")), cluster(off)) == Verdict(allowed=True)
    bound = elsewhere(pod("p", gpus=1, queue="team-a", node_name="a100-1"))
    assert check(bound, cluster()).warnings == ()


def test_enforce_without_the_gate_refuses_what_nothing_could_hold() -> None:
    enforce = CardPolicy(outside_volcano=OutsideVolcano.ENFORCE)
    verdict = check(elsewhere(pod("p", gpus=1, queue="team-a")), cluster(enforce))
    denied_at(verdict, (SCHEDULER, Reason.INVALID))
    assert verdict.violations[0].message == (
        "the pod requests nvidia.com/gpu with scheduler default-scheduler, which no card quota holds: card pods must "
        "be scheduled by volcano (--card-pods-outside-volcano=enforce; without the card-quota gate nothing else can "
        "hold them)")


def test_enforce_with_the_gate_gates_a_named_card_pod_of_another_scheduler_and_charges_its_queue() -> None:
    enforce = CardPolicy(outside_volcano=OutsideVolcano.ENFORCE)
    named = elsewhere(pod("p", card=A100, gpus=1, queue="team-a"))
    verdict = check(named, cluster(enforce), GATED)
    assert verdict.allowed, verdict.message
    assert any(operation["path"] == "/spec/schedulingGates" for operation in verdict.patch)
    # the same pod under warn is refused: a card name needs a card-aware scheduler without enforcement
    assert not check(named, cluster(), GATED).allowed
    # charged to its queue like Volcano's pods (the ledger counts it)
    ledger = Ledger.build([gpu_node("a100-1", A100, 8), queue("team-a", {A100: 4}),
                           elsewhere(pod("q", card=A100, gpus=1, queue="team-a", node_name="a100-1"))],
                          card_policy=enforce)
    assert ledger.usage("team-a").allocated == {A100: 1}
    assert Ledger.build([gpu_node("a100-1", A100, 8), queue("team-a", {A100: 4}),
                         elsewhere(pod("q", card=A100, gpus=1, queue="team-a", node_name="a100-1"))]
                        ).usage("team-a").allocated == {A100: 0}


def test_enforce_with_the_gate_refuses_an_unnamed_card_pod_of_another_scheduler_as_volcanos() -> None:
    enforce = CardPolicy(outside_volcano=OutsideVolcano.ENFORCE)
    denied_at(check(elsewhere(pod("p", gpus=1, queue="team-a")), cluster(enforce), GATED),
              (CARD_NAME, Reason.REQUIRED))


# ------------------------------------------------------------------------------------------------- settings


def _operator(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_operator_reads_the_settings_from_options_then_variables_then_defaults() -> None:
    assert settings.from_arguments(_operator(), {}).card_policy == ZERO
    from_env = settings.from_arguments(_operator(), {"CARDQUOTA_UNQUOTED_QUEUES": "unlimited",
                                                     "CARDQUOTA_CARD_PODS_OUTSIDE_VOLCANO": "enforce"})
    assert from_env.card_policy == CardPolicy(UnquotedQueues.UNLIMITED, OutsideVolcano.ENFORCE)
    given = settings.from_arguments(_operator("--unquoted-queues", "zero"), {"CARDQUOTA_UNQUOTED_QUEUES": "unlimited"})
    assert given.card_policy.unquoted_queues is UnquotedQueues.ZERO
    with pytest.raises(Exception, match="expected zero or unlimited") as raised:
        settings.from_arguments(_operator(), {"CARDQUOTA_UNQUOTED_QUEUES": "none"})
    assert raised.value.where == "CARDQUOTA_UNQUOTED_QUEUES"  # type: ignore[attr-defined]


def test_doctor_reads_the_operators_settings_from_its_deployment() -> None:
    def deployment(args: list[str], env: list[dict[str, str]]) -> dict[str, Any]:
        return {"spec": {"template": {"spec": {"containers": [{"name": "operator", "args": args, "env": env}]}}}}

    assert doctor.operator_card_policy(deployment([], [])) == ZERO
    assert doctor.operator_card_policy(deployment(["operator", "--unquoted-queues=unlimited"], [])) == UNLIMITED
    assert doctor.operator_card_policy(deployment([], [{"name": "CARDQUOTA_CARD_PODS_OUTSIDE_VOLCANO",
                                                        "value": "off"}])).outside_volcano is OutsideVolcano.OFF
    assert doctor.operator_card_policy(deployment(["--unquoted-queues", "bogus"], [])) == ZERO


@pytest.mark.parametrize(("policy", "status", "said"), [
    (ZERO, Status.WARN, "the operator runs with --unquoted-queues=zero, so new card work there is refused"),
    (UNLIMITED, Status.OK, "the operator runs with --unquoted-queues=unlimited"),
])
def test_doctor_names_the_queues_without_a_quota_whose_pods_hold_cards(policy: CardPolicy, status: Status,
                                                                        said: str) -> None:
    nodes = [gpu_node("a100-1", A100, 8)]
    queues = [queue("default"), queue("team-a", {A100: 4})]
    pods = [pod("shell", gpus=1, node_name="a100-1")]
    args = argparse.Namespace(namespace=None, service="cardquota", tls_secret="cardquota-webhook-tls",
                              deployment="cardquota")
    results = doctor.check_queues(nodes, queues, [], pods, doctor_cli.target_of(args), card_policy=policy)
    found = [result for result in results if "without a volcano.sh/card.quota" in result.message]
    assert len(found) == 1
    assert found[0].status is status
    assert found[0].message.startswith("1 queue without a volcano.sh/card.quota holds cards: default (1); ")
    assert said in found[0].message


# ------------------------------------------------------------------------------------------------------ CLI


def check_cli(tmp_path: Any, cluster_objects: list[dict[str, Any]], manifest: dict[str, Any],
              *options: str) -> tuple[int, dict[str, Any]]:
    """``cardquota check -o json`` of ``manifest`` against ``cluster_objects``: the exit code and its verdict."""
    cluster_file, workload = tmp_path / "cluster.yaml", tmp_path / "pod.yaml"
    cluster_file.write_text(yaml.safe_dump_all(cluster_objects))
    workload.write_text(yaml.safe_dump(manifest))
    out = io.StringIO()
    code = run("cardquota", ["check", "-f", str(workload), "--cluster", str(cluster_file), "-o", "json", *options],
               stdout=out, stderr=io.StringIO())
    return code, json.loads(out.getvalue())[0]


def test_check_takes_the_setting(tmp_path: Any) -> None:
    objects = [gpu_node("a100-1", A100, 8), queue("default")]
    codes = [check_cli(tmp_path, objects, pod("p", gpus=1), "--unquoted-queues", setting)[0]
             for setting in ("zero", "unlimited")]
    assert codes == [1, 0]


def test_named_card_requests_in_a_queue_without_a_quota_say_why_they_can_never_run_and_what_to_do() -> None:
    """Named requests are held to 0 by Volcano's plugin itself, whatever --unquoted-queues says: the message says so."""
    for policy in (ZERO, UNLIMITED):
        named = check(pod("p", card=A100, gpus=1), cluster(policy))
        denied_at(named, (CARD_NAME, Reason.INVALID))
        assert named.violations[0].message == (
            "queue default has no quota for NVIDIA-A100: a queue holds 0 of a card type its volcano.sh/card.quota "
            "does not list (Volcano's capacity-card plugin holds a named card request so, whatever cardquota's "
            "--unquoted-queues says); add the type to it")
        group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                 "metadata": {"name": "g", "namespace": "ml",
                              "annotations": {"volcano.sh/card.request": json.dumps({A100: 1})}},
                 "spec": {"queue": "default", "minMember": 1}}
        verdict = check(group, cluster(policy))
        assert not verdict.allowed
        assert verdict.violations[0].message.endswith(
            "queue default has no card quota (volcano.sh/card.quota), so no card request in it can ever run: a queue "
            "holds 0 of a card type its volcano.sh/card.quota does not list (Volcano's capacity-card plugin holds a "
            "named card request so, whatever cardquota's --unquoted-queues says); add the type to it")


# ------------------------------------------------------------------- what review found (each failed before)


def test_a_queue_with_a_quota_for_other_types_only_holds_an_unnamed_pod_to_0_and_says_so() -> None:
    snapshot = cluster(ZERO, ascend_node("npu-1", product="Ascend910B3"))
    verdict = check(pod("p", gpus=1, resource="huawei.com/Ascend910", queue="team-a"), snapshot)
    denied_at(verdict, (CARD_NAME, Reason.INVALID))
    assert verdict.violations[0].message == (
        "the pod requests huawei.com/Ascend910 in queue team-a, whose card quota lists no card type offered through "
        "huawei.com/Ascend910 (Ascend910B3): a card type without a quota is held to 0, so it can never run; add the "
        "type to the queue's volcano.sh/card.quota and name it in volcano.sh/card.name")


def test_an_unnamed_card_pod_in_a_queue_that_does_not_exist_is_refused_with_the_queues_there() -> None:
    verdict = check(pod("p", gpus=1, queue="team-b"), cluster())
    denied_at(verdict, ('metadata.annotations["scheduling.volcano.sh/queue-name"]', Reason.NOT_FOUND))
    assert verdict.violations[0].message.startswith("queue team-b does not exist (did you mean team-a?)")


def test_check_reads_a_bare_pod_naming_no_scheduler_as_the_api_server_stores_it(tmp_path: Any) -> None:
    bare = pod("p", gpus=1)
    bare["spec"].pop("schedulerName", None)
    code, verdict = check_cli(tmp_path, [gpu_node("a100-1", A100, 8), queue("default")], bare)
    assert code == 0  # the default scheduler's: warned (--card-pods-outside-volcano=warn), as the webhook would
    assert verdict["warnings"][0].startswith("the pod requests nvidia.com/gpu with scheduler default-scheduler")


def test_simulate_reads_templates_naming_no_scheduler_as_the_default_schedulers() -> None:
    nodes = [gpu_node("a100-1", A100, 8), {**queue("default", capability={"cpu": "100", "memory": "1Ti"}),
                                           "status": {"state": "Open"}}]
    template = {"spec": {"containers": [container(limits={"nvidia.com/gpu": "1"})]}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "vllm", "namespace": "ml"},
                  "spec": {"replicas": 1, "template": template}}
    result = simulate(nodes, [deployment], SchedulerConfig(), card_gate=False)
    assert result.placements["ml/vllm-0"].node == "a100-1"  # not held to 0 in queue default: Volcano charges none


def test_simulate_names_a_workload_of_more_pods_than_it_expands_rather_than_building_them() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "huge", "namespace": "ml"},
                  "spec": {"replicas": 2_000_000_000, "template": {"spec": {"containers": [container()]}}}}
    result = simulate([gpu_node("a100-1", A100, 8)], [deployment], SchedulerConfig(), card_gate=False)
    assert result.not_simulated == ["Deployment ml/huge (2,000,000,000 pods: simulate expands at most 10,000 per "
                                    "workload)"]


def test_check_judges_as_the_shipped_webhooks_run_with_the_card_gate_unless_told_otherwise(tmp_path: Any) -> None:
    """The manifests and the chart run the webhooks with the card-quota gate: ``check`` does too (``--card-gate``)."""
    objects = [gpu_node("a100-1", A100, 8), queue("team-a", {A100: 4})]
    manifest = pod("p", gpus=1, queue="team-a")

    def checked(*options: str) -> tuple[int, dict[str, Any]]:
        return check_cli(tmp_path, objects, manifest, *options)

    code, gated = checked()
    assert code == 1
    assert gated["violations"][0]["reason"] == "FieldValueRequired"  # (the gate admits card pods by card.name)
    code, plain = checked("--card-gate", "off")
    assert code == 0
    assert plain["warnings"] == ["the pod requests nvidia.com/gpu without volcano.sh/card.name: queue team-a's card "
                                 "quota cannot check it before it is scheduled"]
