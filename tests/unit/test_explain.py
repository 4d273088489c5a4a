"""The explain engine: one test per blocking reason, each with its exact sentence, and what would unblock it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import container, gpu_labels, node, pod, podgroup, queue

from cardquota.core.errors import InputError
from cardquota.core.explain import explain, explain_submitted
from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.crossquota import CrossQuotaConfig
from cardquota.core.scheduling.session import SchedulerConfig

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
UNLIMITED = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True))


def gpu_node(name: str, product: str, gpus: int) -> dict[str, Any]:
    return node(name, labels=gpu_labels(product, count=gpus), allocatable={"nvidia.com/gpu": str(gpus)})


def card_pod(name: str, card: str, *, gpus: int = 1, node_name: str | None = None, group: str | None = None,
             queue_name: str | None = "team-a") -> dict[str, Any]:
    manifest = pod(name, namespace="ml", card=card, gpus=gpus, node_name=node_name, group=group, queue=queue_name)
    manifest["spec"]["containers"][0]["resources"].pop("requests")
    return manifest


CLUSTER = [gpu_node("a1", A100, 4), queue("team-a", {A100: 4})]


def test_a_pod_that_can_start_says_where() -> None:
    result = explain(CLUSTER, card_pod("p", A100), UNLIMITED)
    assert result.lines() == [
        "Pod ml/p:",
        "  It is in queue team-a (its annotation scheduling.volcano.sh/queue-name).",
        "  It asks for 1 card of NVIDIA-A100.",
        "  Node a1 can take it now (NVIDIA-A100).",
        "Nothing in cardquota's rules blocks it.",
    ]
    assert not result.blocked


def test_a_scheduler_that_does_not_enforce_card_quotas() -> None:
    manifest = card_pod("p", A100)
    manifest["spec"]["schedulerName"] = "default-scheduler"
    assert explain(CLUSTER, manifest, UNLIMITED).blockers == [
        "It uses scheduler default-scheduler, which does not enforce card quotas: set spec.schedulerName to "
        "volcano."]


def test_a_card_request_that_cannot_be_read() -> None:
    assert explain(CLUSTER, card_pod("p", "NVIDIA-A100|"), UNLIMITED).blockers == [
        "Its volcano.sh/card.name 'NVIDIA-A100|' cannot be used: \"NVIDIA-A100|\" has an empty alternative "
        "(GetTaskRequestResourceFailed)."]


def test_no_quota_for_the_type_in_the_queue() -> None:
    assert explain(CLUSTER, card_pod("p", f"{H100}|NVIDIA-T4"), UNLIMITED).blockers == [
        "Queue team-a has no quota for NVIDIA-H100 or NVIDIA-T4 (volcano.sh/card.quota): a quota for one of them "
        "must be added to the queue."]


def test_no_node_offers_the_type() -> None:
    cluster = [gpu_node("a1", A100, 4), queue("team-a", {H100: 4})]
    assert explain(cluster, card_pod("p", H100), UNLIMITED).blockers == [
        "No node offers NVIDIA-H100: nodes need the product label and the card resource (see cardquota discover); "
        "the quota for it cannot be used until then."]


def test_a_spent_quota_names_who_holds_it_and_what_would_unblock() -> None:
    cluster = [gpu_node("a1", A100, 8), queue("team-a", {A100: 4}),
               podgroup("big", namespace="ml", queue="team-a", phase="Running"),
               *[card_pod(f"big-{i}", A100, node_name="a1", group="big", queue_name=None) for i in range(3)],
               card_pod("solo", A100, node_name="a1")]
    result = explain(cluster, card_pod("p", A100, gpus=2), UNLIMITED)
    assert result.blockers == [
        "Queue team-a has insufficient NVIDIA-A100 quota: requested 2, total would be 6, but capability is 4 "
        "(InsufficientScalarQuota).",
        "NVIDIA-A100: 4 of 4 in use. Held by PodGroup ml/big (3), pod ml/solo (1). It can start when 2 NVIDIA-A100 "
        "are released, or when the quota is raised to 6.",
    ]


def test_no_node_can_take_it_now_gives_the_scheduler_style_summary() -> None:
    cluster = [gpu_node("a1", A100, 1), gpu_node("a2", A100, 1), queue("team-a", {A100: 8})]
    assert explain(cluster, card_pod("p", A100, gpus=2), UNLIMITED).blockers == [
        "No node can take it now: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."]


def test_crossquota_limits_show_in_the_node_summary() -> None:
    gpu = gpu_node("g1", A100, 8)
    gpu["status"]["allocatable"]["cpu"] = "10"
    cpu_pod = pod("web", namespace="ml", queue="team-a", containers=[container(requests={"cpu": "4"})])
    config = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True),
                             crossquota=CrossQuotaConfig.from_arguments({"quota.cpu": "2"}))
    team = queue("team-a", {A100: 8})
    team["spec"]["capability"] = {"cpu": "100"}
    assert explain([gpu, team], cpu_pod, config).blockers == [
        "No node can take it now: 0/1 nodes are available: 1 cpu quota exceeded on GPU node g1: pods without GPUs "
        "would use 4 of 2."]


def test_a_bound_pod_is_where_it_is() -> None:
    result = explain(CLUSTER, card_pod("p", A100, node_name="a1"), UNLIMITED)
    assert result.facts[-1] == "It is bound to node a1 (NVIDIA-A100)."
    assert not result.blocked


def test_a_podgroup_refused_at_enqueue_names_the_holders() -> None:
    cluster = [*CLUSTER, podgroup("old", namespace="ml", queue="team-a", phase="Running"),
               *[card_pod(f"old-{i}", A100, node_name="a1", group="old", queue_name=None) for i in range(3)]]
    group = podgroup("new", namespace="ml", queue="team-a", phase="Pending", request={A100: 2})
    result = explain(cluster, group, UNLIMITED)
    assert result.facts[:2] == ["It is in queue team-a, phase Pending.",
                                "Its volcano.sh/card.request asks for 2 cards of NVIDIA-A100."]
    assert result.blockers == [
        "Queue team-a has insufficient NVIDIA-A100 quota: requested 2, total would be 5, but capability is 4 "
        "(InsufficientScalarQuota).",
        "It can be enqueued when 1 NVIDIA-A100 is released (held or reserved in queue team-a), or when the quota is "
        "raised by 1.",
        "NVIDIA-A100 in queue team-a is held by PodGroup ml/old (3).",
    ]


def test_a_volcano_job_is_read_from_its_templates_when_it_has_no_pods_yet() -> None:
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "ml", "annotations": {"volcano.sh/card.request":
                                                                          json.dumps({H100: 2})}},
           "spec": {"queue": "team-a", "minAvailable": 2, "tasks": [{"name": "w", "replicas": 2, "template": {
               "metadata": {"annotations": {"volcano.sh/card.name": H100}},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}]}}
    result = explain(CLUSTER, job, UNLIMITED)
    assert result.subject == "Job ml/train"
    assert "Its pods do not exist yet: they were read from its task templates." in result.facts
    assert result.blockers == [
        "Queue team-a has insufficient NVIDIA-H100 quota: requested 2, total would be 2, but capability is 0 "
        "(InsufficientScalarQuota).",
        "Releasing cannot help: it asks for 2 NVIDIA-H100 on its own, above queue team-a's quota of 0 NVIDIA-H100; "
        "it can be enqueued when the quota is raised to 2 (by 2)."]


def test_other_kinds_cannot_be_explained() -> None:
    with pytest.raises(InputError, match=r"explain needs a Pod, a PodGroup, a Volcano Job or a workload of a "
                                         r"registered kind .*, not Queue"):
        explain(CLUSTER, queue("q"), UNLIMITED)


def test_a_running_volcano_job_is_explained_from_its_real_podgroup_and_pods() -> None:
    """The job controller names the PodGroup <job>-<uid> (owned by the job) and labels the pods with the job name."""
    group = podgroup("train-6f1c", namespace="ml", queue="team-a", phase="Running", request={A100: 4})
    group["metadata"]["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                             "name": "train", "uid": "u"}]
    pods = []
    for index in range(4):
        member = card_pod(f"train-worker-{index}", A100, node_name="a1", group="train-6f1c", queue_name=None)
        member["metadata"]["labels"] = {"volcano.sh/job-name": "train"}
        pods.append(member)
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "ml", "annotations": {"volcano.sh/card.request":
                                                                          json.dumps({A100: 4})}},
           "spec": {"queue": "team-a", "minAvailable": 4, "tasks": [{"name": "worker", "replicas": 4, "template": {
               "metadata": {"annotations": {"volcano.sh/card.name": A100}},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}]}}
    result = explain([*CLUSTER, group, *pods], job, UNLIMITED)
    assert "It is in queue team-a, phase Running." in result.facts
    assert "4 of its 4 pods are bound." in result.facts
    assert not result.blocked


def test_a_pod_whose_podgroup_is_missing_is_told_so() -> None:
    result = explain(CLUSTER, card_pod("p", A100, group="ghost", queue_name=None), UNLIMITED)
    assert result.facts[0] == "It is in queue default (the default queue, until its PodGroup ml/ghost exists)."
    assert result.blockers[0] == ("Its PodGroup ml/ghost (scheduling.k8s.io/group-name) does not exist: Volcano "
                                  "schedules a pod only with its PodGroup; create it, or fix the annotation.")


# ------------------------------------------------------------------------------------------ issue 18 item 12

def pending_group(name: str, request: dict[str, int], *, queue_name: str = "team-a",
                  conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    group = podgroup(name, namespace="ml", queue=queue_name, phase="Pending", request=request)
    if conditions is not None:
        group["status"]["conditions"] = conditions
    return group


def test_a_pod_whose_podgroup_cannot_be_enqueued_is_blocked_by_it() -> None:
    """Issue 18 item 12: ``explain pod/X`` said "Nothing in cardquota's rules blocks it" (exit 0) for a pod whose
    PodGroup is Pending on InsufficientScalarQuota; the PodGroup's phase, the scheduler's last condition and the
    enqueue refusal are part of the pod's answer now, and nothing about nodes is said before it is enqueued."""
    condition = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                 "message": "1/1 tasks in gang unschedulable: pod group is not ready"}
    cluster = [*CLUSTER, pending_group("big", {A100: 5}, conditions=[condition])]
    result = explain(cluster, card_pod("big-0", A100, group="big", queue_name=None), UNLIMITED)
    assert result.blocked
    assert ("Its PodGroup ml/big is in phase Pending. The scheduler's last word on it: Unschedulable "
            "(NotEnoughResources: 1/1 tasks in gang unschedulable: pod group is not ready).") in result.facts
    assert result.blockers == [
        "Its PodGroup ml/big cannot be enqueued: Queue team-a has insufficient NVIDIA-A100 quota: requested 5, total "
        "would be 5, but capability is 4 (InsufficientScalarQuota).",
        "Releasing cannot help: it asks for 5 NVIDIA-A100 on its own, above queue team-a's quota of 4 NVIDIA-A100; "
        "it can be enqueued when the quota is raised to 5 (by 1)."]
    assert "Nothing in cardquota's rules blocks it." not in result.lines()
    assert not any(fact.startswith("Node ") for fact in result.facts)


def test_a_pod_whose_podgroup_fits_says_its_phase_and_is_not_blocked() -> None:
    result = explain([*CLUSTER, pending_group("small", {A100: 1})],
                     card_pod("small-0", A100, group="small", queue_name=None), UNLIMITED)
    assert "Its PodGroup ml/small is in phase Pending." in result.facts
    assert not result.blocked


@pytest.mark.parametrize(("held", "asked", "expected"), [
    pytest.param(0, 5, "Releasing cannot help: it asks for 5 NVIDIA-A100 on its own, above queue team-a's quota of 4 "
                       "NVIDIA-A100; it can be enqueued when the quota is raised to 5 (by 1).", id="above-the-quota"),
    pytest.param(3, 2, "It can be enqueued when 1 NVIDIA-A100 is released (held or reserved in queue team-a), or "
                       "when the quota is raised by 1.", id="held-by-others"),
])
def test_what_would_unblock_a_podgroup_is_true(held: int, asked: int, expected: str) -> None:
    """Issue 18 item 12: "can be enqueued when 1 NVIDIA-A100 is released" was said when the queue holds none and the
    request exceeds the quota on its own — only raising the quota helps then."""
    cluster = [*CLUSTER, podgroup("old", namespace="ml", queue="team-a", phase="Running"),
               *[card_pod(f"old-{i}", A100, node_name="a1", group="old", queue_name=None) for i in range(held)]]
    result = explain(cluster, pending_group("new", {A100: asked}), UNLIMITED)
    assert result.blockers[1] == expected


def test_a_missing_queue_is_said_not_to_exist() -> None:
    """Issue 18 item 12: with the queue absent, explain said "has no card capability" instead of "does not
    exist"."""
    missing = ("Queue ghost does not exist: Volcano schedules nothing of a queue that does not exist; create it (with "
               "a volcano.sh/card.quota for the cards it needs), or name an existing queue.")
    group_result = explain(CLUSTER, pending_group("g", {A100: 1}, queue_name="ghost"), UNLIMITED)
    assert group_result.blockers == [missing]
    pod_result = explain(CLUSTER, card_pod("p", A100, queue_name="ghost"), UNLIMITED)
    assert pod_result.blockers == [missing]
    member = explain([*CLUSTER, pending_group("g", {A100: 1}, queue_name="ghost")],
                     card_pod("g-0", A100, group="g", queue_name=None), UNLIMITED)
    assert member.blockers == [f"Its PodGroup ml/g: {missing}"]
    assert not any("card capability" in line for line in [*group_result.lines(), *pod_result.lines()])


def test_a_pod_of_another_scheduler_is_in_no_volcano_queue() -> None:
    """Issue 18 item 11: explain said a DaemonSet pod on default-scheduler "is in queue default"."""
    daemon = pod("nvidia-device-plugin-x7k2p", namespace="kube-system", containers=[container(requests={"cpu": "50m"})])
    daemon["spec"]["schedulerName"] = "default-scheduler"
    result = explain(CLUSTER, daemon, UNLIMITED)
    assert result.facts[0] == ("It uses scheduler default-scheduler, not volcano: no Volcano queue or card quota "
                               "applies to it.")
    assert not any("queue default" in fact for fact in result.facts)
    assert not result.blocked


def gated_pod(name: str, gpus: int, second: int) -> dict[str, Any]:
    return pod(name, namespace="ml", card=A100, gpus=gpus, queue="team-a", gated=True,
                   created=f"2026-12-07T10:00:{second:02d}Z", uid=f"uid-{name}")


def test_a_pod_at_the_card_quota_gate_says_what_the_gate_keeper_would() -> None:
    """The same decision the controller's leader makes (core.gate): behind two gated pods that take the queue's 4
    A100, a third waits with the gate's sentence; the first, whose cards fit, goes through next round."""
    cluster = [*CLUSTER, gated_pod("first", 2, 0), gated_pod("second", 2, 1)]
    waiting = explain(cluster, gated_pod("third", 2, 2), UNLIMITED)
    assert waiting.blockers == [
        "Waiting at the card-quota gate: queue team-a has 0 of 4 NVIDIA-A100 free; 2 pods ahead (cardquota's "
        "controller lets it through when what it asks fits its queue and every ancestor)."]
    first = explain(cluster, gated_pod("first", 2, 0), UNLIMITED)
    assert not first.blocked
    assert first.facts[-1].startswith("It carries the card-quota gate (cardquota.io/card-quota) and its cards fit")


POLICY_NEVER = ("Queue team-a's preemption policy is Never (the default: no cardquota.io/preemption): it displaces "
                "no admitted workload.")


@pytest.mark.parametrize(("annotations", "said"), [
    ({}, POLICY_NEVER),
    ({"cardquota.io/preemption": "Never"},
     "Queue team-a's preemption policy is Never (cardquota.io/preemption): it displaces no admitted workload."),
    ({"cardquota.io/preemption": "LowerPriority"},
     "Queue team-a's preemption policy is LowerPriority (cardquota.io/preemption): card work waiting at its gate "
     "displaces admitted workloads of the queue of lower priority."),
    ({"cardquota.io/preemption": "LowerOrNewerEqualPriority"},
     "Queue team-a's preemption policy is LowerOrNewerEqualPriority (cardquota.io/preemption): card work waiting at "
     "its gate displaces admitted workloads of the queue of lower priority, or of equal priority and queued after it."),
    ({"cardquota.io/preemption": "Lower"},
     "Queue team-a's cardquota.io/preemption 'Lower' is not a preemption policy: write one of Never, LowerPriority, "
     "LowerOrNewerEqualPriority; it is read as Never: nothing is preempted."),
])
@pytest.mark.parametrize("subject", ["gated pod", "pod over quota", "podgroup not enqueued"])
def test_a_waiting_card_pod_or_podgroup_names_its_queue_s_preemption_policy(
        annotations: dict[str, str], said: str, subject: str) -> None:
    """Issue 42, items 1 and 4: a blocked card pod (at the gate, or over its quota in Volcano) or PodGroup names its
    queue's policy, once; at the gate, under a policy other than Never, it also says why it preempts nothing (the
    one pod held has its priority); nothing else it says changes."""
    policy_queue = queue("team-a", {A100: 4}, annotations=annotations)
    cluster = [gpu_node("a1", A100, 8), policy_queue, card_pod("held", A100, gpus=4, node_name="a1")]
    if subject == "gated pod":
        target = gated_pod("third", 2, 2)
    elif subject == "pod over quota":
        target = card_pod("p", A100, gpus=2)
    else:
        target = podgroup("pg", namespace="ml", queue="team-a", phase="Pending", request={A100: 2})
    result = explain(cluster, target, UNLIMITED)
    assert result.blocked
    assert [fact for fact in result.facts if "preemption" in fact] == [said]
    before = explain([cluster[0], queue("team-a", {A100: 4}), *cluster[2:]], target, UNLIMITED).blockers
    acting = subject == "gated pod" and annotations.get("cardquota.io/preemption", "Never").startswith("Lower")
    if acting:
        assert [blocker.replace("; not preempting: no workload admitted in queue team-a with lower priority than "
                                "ml/third (0) holds the cards it asks: it waits for cards to be released", "")
                for blocker in result.blockers] == before
    else:
        assert result.blockers == before


@pytest.mark.parametrize("target", [
    card_pod("fits", A100, gpus=2),  # (not waiting: a node takes it now)
    card_pod("bound", A100, gpus=2, node_name="a1"),
    pod("plain", namespace="ml", queue="team-a"),  # (no card: the card quota's policy is not its business)
])
def test_a_pod_that_does_not_wait_for_cards_says_nothing_of_preemption(target: dict[str, Any]) -> None:
    cluster = [gpu_node("a1", A100, 8), queue("team-a", {A100: 4}, annotations={"cardquota.io/preemption":
                                                                               "LowerPriority"})]
    assert not any("preemption" in fact for fact in explain(cluster, target, UNLIMITED).facts)


LOW_GANG = [podgroup("sweep", namespace="ml", queue="team-a", phase="Running", min_member=2),
            *(pod(f"sweep-{index}", namespace="ml", card=A100, gpus=2, group="sweep", node_name="a1", priority=10)
              for index in range(2))]
URGENT = pod("urgent", namespace="ml", card=A100, gpus=2, queue="team-a", gated=True, priority=1000,
             created="2026-12-07T10:00:00Z", uid="uid-urgent")
VICTIM = ("It would be preempted by ml/urgent (priority 1000) to free 4 NVIDIA-A100 in queue team-a: cardquota's "
          "controller evicts podgroup ml/sweep (priority 10) through the Eviction API in its next round.")


@pytest.mark.parametrize(("target", "facts", "blockers"), [
    (URGENT,
     ["Planned evictions for it: podgroup ml/sweep (priority 10, 4 NVIDIA-A100; pods ml/sweep-0, ml/sweep-1)."],
     ["Waiting at the card-quota gate: queue team-a has 0 of 4 NVIDIA-A100 free; 0 pods ahead; preempting 1 "
      "workload of queue team-a to free 4 NVIDIA-A100: ml/sweep (cardquota's controller evicts it through the "
      "Eviction API, so PodDisruptionBudgets hold, and lets this pod through once the cards are released)."]),
    (LOW_GANG[0], [VICTIM], []),  # (the PodGroup chosen)
    (LOW_GANG[1], [VICTIM], []),  # (a pod of it)
])
def test_a_planned_preemption_names_the_victims_and_each_victim_says_by_whom(
        target: dict[str, Any], facts: list[str], blockers: list[str]) -> None:
    """Issue 42, item 4: the preemptor's blocker names the victims and a fact lists the evictions with their
    priorities, cards and pods; a victim (its PodGroup, or any pod of it) says it would be preempted, by whom."""
    policy = queue("team-a", {A100: 4}, annotations={"cardquota.io/preemption": "LowerPriority"})
    result = explain([gpu_node("a1", A100, 8), policy, *LOW_GANG, URGENT], target, UNLIMITED)
    assert [fact for fact in result.facts if fact.startswith(("Planned evictions", "It would be"))] == facts
    assert result.blockers == blockers


@pytest.mark.parametrize("annotations", [{}, {"cardquota.io/preemption": "Never"}])
@pytest.mark.parametrize("target", [URGENT, LOW_GANG[0], LOW_GANG[1]])
def test_under_never_no_victim_or_eviction_is_said(annotations: dict[str, str], target: dict[str, Any]) -> None:
    result = explain([gpu_node("a1", A100, 8), queue("team-a", {A100: 4}, annotations=annotations), *LOW_GANG,
                      URGENT], target, UNLIMITED)
    assert not any(fact.startswith(("Planned evictions", "It would be")) for fact in result.facts)
    assert not any("preempting" in blocker for blocker in result.blockers)


def test_a_higher_priority_or_unchosen_workload_is_no_victim() -> None:
    """Two lone pods hold the quota: the urgent one needs 2 cards, so the lower-priority pod of 2 is chosen and the
    one of higher priority than the preemptor is not."""
    policy = queue("team-a", {A100: 4}, annotations={"cardquota.io/preemption": "LowerPriority"})
    low = pod("low", namespace="ml", card=A100, gpus=2, node_name="a1", queue="team-a", priority=5)
    high = pod("high", namespace="ml", card=A100, gpus=2, node_name="a1", queue="team-a", priority=2000)
    cluster = [gpu_node("a1", A100, 8), policy, low, high, URGENT]
    assert [fact for fact in explain(cluster, low, UNLIMITED).facts if fact.startswith("It would be")] == [
        "It would be preempted by ml/urgent (priority 1000) to free 2 NVIDIA-A100 in queue team-a: cardquota's "
        "controller evicts pod ml/low (priority 5) through the Eviction API in its next round."]
    assert not any(fact.startswith("It would be") for fact in explain(cluster, high, UNLIMITED).facts)


@pytest.mark.parametrize(("annotations", "said"), [
    ({"cardquota.io/preemption": "LowerPriority"},
     ["simulate evicts for it, by preemption: podgroup ml/sweep (priority 10, 4 NVIDIA-A100; pods ml/sweep-0, "
      "ml/sweep-1).", "simulate places it: ml/urgent on a1 (NVIDIA-A100)."]),
    ({}, []),
])
def test_explain_f_says_what_simulate_evicts_for_the_workload(annotations: dict[str, str], said: list[str]) -> None:
    """``explain -f``: simulate's evictions for the submitted workload are a fact, with its placement after them."""
    cluster = [gpu_node("a1", A100, 8), queue("team-a", {A100: 4}, annotations=annotations), *LOW_GANG]
    [result] = explain_submitted(cluster, [URGENT], [URGENT], UNLIMITED)
    assert [fact for fact in result.facts if fact.startswith("simulate")] == said
