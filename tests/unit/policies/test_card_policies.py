"""Queue, PodGroup, Volcano Job and Pod policies: card quotas, card requests and card names."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest
from builders import container, gpu_labels, gpu_node, node, pod, podgroup, queue
from verdicts import denied_at

from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.snapshot import CardPolicy, ClusterSnapshot, UnquotedQueues
from cardquota.core.verdict import Verdict
from cardquota.core.violations import Reason

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
MPS = "NVIDIA-A100/mps-80g*1/8"
MIG = "NVIDIA-A100/mig-1g.5gb-mixed"
QUOTA = 'metadata.annotations["volcano.sh/card.quota"]'
REQUEST = 'metadata.annotations["volcano.sh/card.request"]'
CARD_NAME = 'metadata.annotations["volcano.sh/card.name"]'
TASK_CARD_NAME = f"spec.tasks[0].template.{CARD_NAME}"
CONFIG = PolicyConfig()

NODES = [
    gpu_node("a100-1", A100, 8, memory=81920),
    gpu_node("a100-2", A100, 8, memory=81920),
    gpu_node("h100-1", H100, 8),
    node("mps-1", labels=gpu_labels(A100, memory=81920, replicas=8), allocatable={"nvidia.com/gpu.shared": "32"}),
    node("mig-1", labels=gpu_labels(A100), allocatable={"nvidia.com/mig-1g.5gb": "7"}),
]


def cluster(*objects: dict[str, Any], complete: bool = True, nodes: bool = True) -> ClusterSnapshot:
    snapshot = Ledger.build([*(NODES if nodes else []), *objects]).snapshot
    snapshot.complete = complete
    return snapshot


def unlimited(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot of a cluster run with ``--unquoted-queues=unlimited``."""
    snapshot.card_policy = CardPolicy(unquoted_queues=UnquotedQueues.UNLIMITED)
    return snapshot


def team_a(**quota: int) -> dict[str, Any]:
    return queue("team-a", quota or {A100: 10, H100: 5, MPS: 16})


def check(manifest: dict[str, Any], snapshot: ClusterSnapshot, old: dict[str, Any] | None = None,
          config: PolicyConfig = CONFIG) -> Verdict:
    verdict = admit(manifest, old, snapshot, config)
    assert "\n" not in verdict.message
    if not verdict.allowed:
        assert verdict.message
        assert not verdict.patch
    return verdict


def denied_with(verdict: Verdict, *fragments: str) -> None:
    """The message test of a rule (one per rule; the others compare :func:`denied_at`)."""
    assert not verdict.allowed, verdict
    for fragment in fragments:
        assert fragment in verdict.message, (fragment, verdict.message)


def patched(manifest: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    return jsonpatch.apply_patch(manifest, [dict(op) for op in verdict.patch])


# ---------------------------------------------------------------------------------------------------- Queue


ROOM = {"cpu": "64", "memory": "256Gi"}
"""A capability with cpu and memory: a card queue without it is warned about (its card jobs would get none)."""


def test_canonical_quota_is_allowed_without_patch_or_warning() -> None:
    verdict = check(queue("q", '{"NVIDIA-A100":4,"NVIDIA-H100":2}', capability=ROOM), cluster())
    assert verdict == Verdict(allowed=True)


def test_quota_is_rewritten_in_canonical_form() -> None:
    manifest = queue("q", '{ "NVIDIA-H100": 2,\n  "NVIDIA-A100": 4 }')
    verdict = check(manifest, cluster())
    assert verdict.allowed
    assert [dict(op) for op in verdict.patch] == [{
        "op": "replace", "path": "/metadata/annotations/volcano.sh~1card.quota",
        "value": '{"NVIDIA-A100":4,"NVIDIA-H100":2}',
    }]
    assert check(patched(manifest, verdict), cluster()).patch == ()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{oops", Reason.INVALID),
        ("[]", Reason.INVALID),
        ('{"NVIDIA-A100": 1, "NVIDIA-A100": 2}', Reason.DUPLICATE),
        ('{"NVIDIA-A100": NaN}', Reason.INVALID),
        ('{"NVIDIA-A100": Infinity}', Reason.INVALID),
        ('{"NVIDIA-A100": 1.5}', Reason.INVALID),
        ('{"NVIDIA-A100": "4"}', Reason.INVALID),
        ('{"NVIDIA-A100": true}', Reason.INVALID),
        ('{"NVIDIA-A100": null}', Reason.INVALID),
        ('{"NVIDIA-A100": 99999999999999999999}', Reason.INVALID),
        ('{"NVIDIA-A100": ' + "[" * 2000 + "]" * 2000 + "}", Reason.INVALID),
        ('{"NVIDIA-A100": -1}', Reason.INVALID),
        ('{"": 1}', Reason.REQUIRED),
        ('{"NVIDIA-A100|NVIDIA-H100": 4}', Reason.INVALID),
    ],
)
def test_invalid_quota_is_denied_naming_the_annotation_and_type(text: str, reason: Reason) -> None:
    """The messages are the parser's (tests/unit/test_quota.py)."""
    denied_at(check(queue("q", text), cluster()), (QUOTA, reason))


def test_unknown_card_type_warns_with_the_closest_discovered_type() -> None:
    verdict = check(queue("q", {"NVIDIA-A10O": 2}, capability=ROOM), cluster())
    assert verdict.allowed
    assert verdict.warnings == ("card type NVIDIA-A10O is not offered by any node (did you mean NVIDIA-A100?)",)


def test_unknown_types_are_not_judged_without_the_cluster() -> None:
    assert check(queue("q", {"NVIDIA-A10O": 2}, capability=ROOM), cluster(complete=False, nodes=False)).warnings == ()


def test_overcommit_warns_naming_type_and_both_numbers() -> None:
    snapshot = cluster(queue("team-b", {H100: 5}))
    verdict = check(queue("team-a", {H100: 5}, capability=ROOM), snapshot)
    assert verdict.allowed
    assert verdict.warnings == ("NVIDIA-H100 is over-committed: top-level queues' quotas add up to 10 but the nodes "
                                "offer 8",)


def test_updating_a_queue_does_not_count_its_old_quota_twice() -> None:
    snapshot = cluster(queue("team-a", {H100: 8}))
    assert check(queue("team-a", {H100: 8}, capability=ROOM), snapshot,
                 old=queue("team-a", {H100: 8}, capability=ROOM)).warnings == ()


def test_child_quota_above_parent_is_denied() -> None:
    snapshot = cluster(queue("org", {A100: 8}))
    verdict = check(queue("team", {A100: 10, H100: 1}, parent="org"), snapshot)
    denied_at(verdict, (QUOTA, Reason.INVALID), (QUOTA, Reason.INVALID))
    denied_with(verdict, "NVIDIA-A100 quota 10 exceeds parent queue org's quota of 8",
                "NVIDIA-H100 quota 1 exceeds parent queue org's quota of 0")


def test_parent_without_card_quota_limits_nothing() -> None:
    assert check(queue("team", {A100: 10}, parent="org"), cluster(queue("org"))).allowed


def test_missing_parent_is_denied_on_a_full_snapshot_and_skipped_otherwise() -> None:
    denied = check(queue("team", {A100: 1}, parent="ghost"), cluster())
    denied_at(denied, ("spec.parent", Reason.NOT_FOUND))
    denied_with(denied, "parent queue ghost does not exist")
    verdict = check(queue("team", {A100: 1}, parent="ghost"), cluster(complete=False))
    assert verdict.allowed
    assert any("parent queue ghost" in warning and "not checked" in warning for warning in verdict.warnings)


def test_children_adding_up_to_more_than_their_parent_are_allowed_and_said() -> None:
    """Overcommitting a parent is a choice (the children share it, first through the gate first served), but said
    when a child or the parent is written (issue 40, item 9)."""
    shared = "NVIDIA-A100 quotas of parent queue org's children add up to 8, above its 4: they share it (a child may " \
             "wait while its own quota has room)"
    snapshot = cluster(queue("org", {A100: 4}), queue("team-a", {A100: 4}, parent="org"))
    child = check(queue("team-b", {A100: 4}, parent="org"), snapshot)
    assert child.allowed
    assert shared in child.warnings
    both = cluster(queue("org", {A100: 8}), queue("team-a", {A100: 4}, parent="org"),
                   queue("team-b", {A100: 4}, parent="org"))
    parent = check(queue("org", {A100: 4}), both, old=queue("org", {A100: 8}))
    assert parent.allowed
    assert shared in parent.warnings
    assert not any("add up" in warning for warning in check(queue("team-b", {A100: 4}, parent="org"), both,
                                                             old=queue("team-b", {A100: 4}, parent="org")).warnings)


def test_parent_must_not_drop_below_a_child() -> None:
    snapshot = cluster(queue("org", {A100: 8}), queue("team", {A100: 6}, parent="org"))
    verdict = check(queue("org", {A100: 4}), snapshot, old=queue("org", {A100: 8}))
    denied_at(verdict, (QUOTA, Reason.INVALID))
    denied_with(verdict, "NVIDIA-A100 quota 4 is below child queue team's quota of 6")


# ------------------------------------------------------------------------------------------------- PodGroup


def group(request: dict[str, int] | str | None, queue_name: str | None = "team-a") -> dict[str, Any]:
    return podgroup("pg", queue=queue_name, request=request)


def test_request_that_fits_the_quota_is_allowed_whatever_the_current_usage() -> None:
    busy = [pod(f"p{i}", node_name="a100-1", gpus=1, queue="team-a", card=A100) for i in range(10)]
    assert check(group({A100: 8}), cluster(team_a(), *busy)) == Verdict(allowed=True)


def test_podgroup_without_card_request_is_untouched() -> None:
    assert check(group(None, queue_name="ghost"), cluster()) == Verdict(allowed=True)


@pytest.mark.parametrize(
    "request_text",
    ["{", '{"NVIDIA-A100": 0}', '{"NVIDIA-A100||NVIDIA-H100": 2}', '{"NVIDIA-A100": 2.5}'],
)
def test_request_syntax_errors_are_denied_naming_the_annotation(request_text: str) -> None:
    """The messages are the parser's (tests/unit/test_quota.py)."""
    denied_at(check(group(request_text), cluster(team_a())), (REQUEST, Reason.INVALID))


def test_request_above_quota_can_never_fit() -> None:
    verdict = check(group({A100: 12}), cluster(team_a()))
    denied_at(verdict, (REQUEST, Reason.INVALID))
    denied_with(verdict, "requests 12 NVIDIA-A100 but queue team-a allows at most 10: it can never run")


def test_multi_card_request_is_judged_against_the_sum_of_the_alternatives() -> None:
    snapshot = cluster(queue("team-a", {A100: 5, H100: 3}))
    assert check(group({f"{A100}|{H100}": 8}), snapshot).allowed
    verdict = check(group({f"{A100}|{H100}": 9}), snapshot)
    denied_at(verdict, (REQUEST, Reason.INVALID))
    denied_with(verdict, "requests 9 of NVIDIA-A100|NVIDIA-H100 but queue team-a allows at most 8 across them "
                         "(NVIDIA-A100 5 + NVIDIA-H100 3)")


def test_alternative_without_quota_warns_and_all_without_quota_denies() -> None:
    snapshot = cluster(queue("team-a", {A100: 5}))
    verdict = check(group({f"{A100}|{H100}": 2}), snapshot)
    assert verdict.allowed
    assert verdict.warnings == ("queue team-a has no quota for NVIDIA-H100: only NVIDIA-A100 of "
                                "NVIDIA-A100|NVIDIA-H100 can be used",)
    denied = check(group({H100: 1}), snapshot)
    denied_at(denied, (REQUEST, Reason.INVALID))
    denied_with(denied, "queue team-a has no quota for NVIDIA-H100")


def test_queue_without_any_card_quota_is_denied() -> None:
    verdict = check(group({A100: 1}, "plain"), cluster(queue("plain")))
    denied_at(verdict, (REQUEST, Reason.INVALID))
    denied_with(verdict, "queue plain has no card quota (volcano.sh/card.quota)")


def test_missing_queue_is_denied_on_a_full_snapshot_and_skipped_otherwise() -> None:
    denied = check(group({A100: 1}, "ghost"), cluster())
    denied_at(denied, ("spec.queue", Reason.NOT_FOUND))
    denied_with(denied, "spec.queue: queue ghost does not exist")
    verdict = check(group({A100: 1}, "ghost"), cluster(complete=False))
    assert verdict.allowed
    assert "not checked" in verdict.warnings[0]


def test_default_queue_is_used_when_spec_queue_is_unset() -> None:
    denied_at(check(group({A100: 1}, None), cluster(queue("default"))), (REQUEST, Reason.INVALID))
    assert check(group({A100: 1}, None), cluster(queue("default", {A100: 1}))).allowed


def test_alternatives_on_different_resources_are_denied() -> None:
    verdict = check(group({f"{A100}|{MPS}": 2}), cluster(team_a()))
    denied_at(verdict, (REQUEST, Reason.INVALID))
    denied_with(verdict, "alternatives must share one Kubernetes resource",
                "NVIDIA-A100 uses nvidia.com/gpu", "NVIDIA-A100/mps-80g*1/8 uses nvidia.com/gpu.shared")


# ---------------------------------------------------------------------------------------------- Volcano Job


def vcjob(request: dict[str, int] | None, *tasks: dict[str, Any], queue_name: str = "team-a",
          min_available: int = 1) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "training-job", "namespace": "ml"}
    if request is not None:
        metadata["annotations"] = {"volcano.sh/card.request": json.dumps(request)}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": metadata,
            "spec": {"schedulerName": "volcano", "queue": queue_name, "minAvailable": min_available,
                     "tasks": list(tasks)}}


def task(name: str, card: str | None, replicas: int = 1, resource: str = "nvidia.com/gpu",
         amount: int = 1) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"containers": [container(limits={resource: str(amount)})]}}
    if card is not None:
        template["metadata"] = {"annotations": {"volcano.sh/card.name": card}}
    return {"name": name, "replicas": replicas, "template": template}


def test_with_the_gate_a_volcano_job_task_asking_for_gpus_unnamed_is_refused_and_without_it_warned() -> None:
    job = vcjob(None, task("worker", None, replicas=2))
    gated = check(job, cluster(team_a()), config=GATED)
    denied_at(gated, ('spec.tasks[0].template.metadata.annotations["volcano.sh/card.name"]', Reason.REQUIRED))
    assert gated.violations[0].message.startswith(
        "task worker's pod template requests nvidia.com/gpu in queue team-a: queue team-a's card quota, which the "
        "card-quota gate enforces by volcano.sh/card.name, would not hold it; add the annotation "
        f"volcano.sh/card.name: "
        f"{A100}|{H100}")
    plain = check(job, cluster(team_a()))
    assert plain.allowed
    assert plain.warnings == ("task worker's pod template requests nvidia.com/gpu without volcano.sh/card.name: "
                              "queue team-a's card quota cannot check it before it is scheduled",)
    in_default = vcjob(None, task("worker", None, replicas=2), queue_name="default")
    # a queue with no card quota holds 0 cards (the seed's default): the task's pods could never run
    denied_at(check(in_default, cluster(team_a(), queue("default", {})), config=GATED),
              ('spec.tasks[0].template.metadata.annotations["volcano.sh/card.name"]', Reason.INVALID))
    assert check(in_default, unlimited(cluster(team_a(), queue("default", {}))), config=GATED).allowed


def test_seed_job_example_is_allowed() -> None:
    assert check(vcjob({A100: 8}, task("worker", A100, replicas=8)), cluster(team_a())) == Verdict(allowed=True)


def test_task_card_not_covered_by_the_jobs_request_is_denied_naming_the_task() -> None:
    verdict = check(vcjob({A100: 8}, task("worker", f"{A100}|{H100}", replicas=8)), cluster(team_a()))
    denied_at(verdict, (TASK_CARD_NAME, Reason.INVALID))
    denied_with(verdict, "task worker uses NVIDIA-H100, which the Job's volcano.sh/card.request does not request")


def test_task_template_must_request_the_card_types_resource() -> None:
    denied_at(check(vcjob({A100: 8}, task("worker", A100, resource="nvidia.com/gpu.shared")), cluster(team_a())),
              (TASK_CARD_NAME, Reason.INVALID))


def test_job_without_request_gets_one_by_mutation() -> None:
    """The gang (minAvailable 6: every pod) needs 4 x 2 + 1 cards (issue 18 item 2: minAvailable's pods)."""
    job = vcjob(None, task("worker", A100, replicas=4, amount=2), task("ps", None), task("eval", A100),
                min_available=6)
    verdict = check(job, cluster(team_a()))
    assert verdict.allowed
    assert [dict(op) for op in verdict.patch] == [{
        "op": "add", "path": "/metadata/annotations", "value": {"volcano.sh/card.request": '{"NVIDIA-A100":9}'},
    }]
    assert check(patched(job, verdict), cluster(team_a())).patch == ()


def test_derived_request_that_can_never_fit_is_denied() -> None:
    """Denied at the tasks it was derived from (nobody wrote the card.request: issue 40 item 8)."""
    denied_at(check(vcjob(None, task("worker", A100, replicas=11), min_available=11), cluster(team_a())),
              ("spec.tasks", Reason.INVALID))
    assert check(vcjob(None, task("worker", A100, replicas=10), min_available=10), cluster(team_a())).allowed


def test_task_card_name_syntax_is_checked() -> None:
    denied_at(check(vcjob({A100: 1}, task("worker", f"{A100}|")), cluster(team_a())), (TASK_CARD_NAME, Reason.INVALID))


# ---------------------------------------------------------------------------------------------------- Pod


def card_pod(card: str = A100, *, gpus: int = 1, resource: str = "nvidia.com/gpu", queue_name: str = "team-a",
             scheduler: str | None = "volcano", **kwargs: Any) -> dict[str, Any]:
    manifest = pod("p", card=card, gpus=gpus, resource=resource, queue=queue_name, **kwargs)
    if scheduler is None:
        del manifest["spec"]["schedulerName"]
    else:
        manifest["spec"]["schedulerName"] = scheduler
    return manifest


def test_plain_pod_is_untouched() -> None:
    assert check(pod("web", containers=[container(requests={"cpu": "1"})]), cluster(team_a())) == Verdict(True)


def test_card_pod_gets_required_product_affinity() -> None:
    verdict = check(card_pod(), cluster(team_a()))
    assert verdict.allowed
    assert verdict.warnings == ()
    assert [dict(op) for op in verdict.patch] == [{"op": "add", "path": "/spec/affinity", "value": {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100]}]}]}}}}]


def test_alternatives_get_preferred_terms_weighted_by_order_and_subcards_use_their_product() -> None:
    manifest = card_pod(f"{A100}|{H100}")
    value = check(manifest, cluster(team_a())).patch[0]["value"]
    node_affinity = value["nodeAffinity"]
    assert node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"] == [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100, H100]}]
    assert [(t["weight"], t["preference"]["matchExpressions"][0]["values"])
            for t in node_affinity["preferredDuringSchedulingIgnoredDuringExecution"]] == [(100, [A100]), (50, [H100])]
    mps_value = check(card_pod(MPS, resource="nvidia.com/gpu.shared"), cluster(team_a())).patch[0]["value"]
    assert mps_value["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"][0]["values"] == [A100]


def test_affinity_is_merged_into_every_existing_term_without_dropping_anything() -> None:
    manifest = card_pod()
    user_terms = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                  {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    manifest["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": user_terms}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    verdict = check(manifest, cluster(team_a()))
    [op] = verdict.patch
    assert op["op"] == "replace"
    terms = op["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    ours = {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100]}
    assert terms[0]["matchExpressions"] == [user_terms[0]["matchExpressions"][0], ours]
    assert terms[1]["matchFields"] == user_terms[1]["matchFields"]
    assert terms[1]["matchExpressions"] == [ours]
    assert "podAntiAffinity" in op["value"]
    assert check(patched(manifest, verdict), cluster(team_a())).patch == ()


def test_no_mutation_on_update() -> None:
    assert check(card_pod(), cluster(team_a()), old=card_pod()).patch == ()


def test_whole_card_name_on_an_mps_resource_is_denied_naming_the_expected_resource() -> None:
    verdict = check(card_pod(A100, resource="nvidia.com/gpu.shared"), cluster(team_a()))
    denied_at(verdict, (CARD_NAME, Reason.INVALID))
    denied_with(verdict, "NVIDIA-A100 is requested through nvidia.com/gpu, but the pod requests nvidia.com/gpu.shared")


def test_resource_rule_works_from_names_alone_without_the_cluster() -> None:
    denied_at(check(card_pod(A100, resource="nvidia.com/gpu.shared"), cluster(complete=False, nodes=False)),
              (CARD_NAME, Reason.INVALID))
    assert check(card_pod(MIG, resource="nvidia.com/mig-1g.5gb"), cluster(complete=False, nodes=False)).allowed


def test_card_pod_must_use_a_card_aware_scheduler() -> None:
    verdict = check(card_pod(scheduler=None), cluster(team_a()))
    denied_at(verdict, ("spec.schedulerName", Reason.NOT_SUPPORTED))
    denied_with(verdict, 'spec.schedulerName: default-scheduler does not enforce card quotas; a pod with '
                         "volcano.sh/card.name must use volcano")
    custom = PolicyConfig(card_aware_schedulers=frozenset({"volcano", "volcano-gpu"}))
    assert check(card_pod(scheduler="volcano-gpu"), cluster(team_a()), config=custom).allowed


def test_queue_must_have_quota_for_one_alternative() -> None:
    snapshot = cluster(team_a(), queue("cpu-only"))
    denied_at(check(card_pod(queue_name="cpu-only"), snapshot), (CARD_NAME, Reason.INVALID))
    verdict = check(card_pod("NVIDIA-T4|NVIDIA-L4", queue_name="team-a"), snapshot)
    denied_at(verdict, (CARD_NAME, Reason.INVALID))
    denied_with(verdict, "queue team-a has no quota for any of NVIDIA-T4, NVIDIA-L4")
    assert check(card_pod(f"NVIDIA-T4|{A100}"), snapshot).allowed


def test_pod_queue_comes_from_its_podgroup() -> None:
    """Volcano schedules a pod in its PodGroup's queue whatever its own scheduling.volcano.sh/queue-name says
    (``JobInfo.Queue`` is the PodGroup's ``spec.queue``, pkg/scheduler/api/job_info.go, v1.15.1; the annotation is
    read only by ``buildPodGroupFromPod`` in pkg/controllers/podgroup/pg_controller_handler.go to build a missing
    PodGroup): naming a queue with quota does not lift the PodGroup's queue's lack of one."""
    snapshot = cluster(team_a(), queue("cpu-only"), podgroup("pg", queue="cpu-only"))
    denied_at(check(pod("p", card=A100, gpus=1, group="pg"), snapshot), (CARD_NAME, Reason.INVALID))
    denied_at(check(pod("p", card=A100, gpus=1, group="pg", queue="team-a"), snapshot), (CARD_NAME, Reason.INVALID))
    assert check(pod("p", card=A100, gpus=1, group="not-yet", queue="team-a"), snapshot).allowed


@pytest.mark.parametrize(("card", "reason"), [("", Reason.REQUIRED), (f"{A100}||{H100}", Reason.INVALID),
                                             (f"{A100}|", Reason.INVALID), (" NVIDIA-A100", Reason.INVALID),
                                             (f"{A100}|{A100}", Reason.DUPLICATE)])
def test_card_name_syntax_is_denied(card: str, reason: Reason) -> None:
    """The messages are the parser's (tests/unit/test_quota.py)."""
    denied_at(check(card_pod(card), cluster(team_a())), (CARD_NAME, reason))


def test_alternatives_mixing_whole_and_mps_are_denied() -> None:
    denied_at(check(card_pod(f"{A100}|{MPS}"), cluster(team_a())), (CARD_NAME, Reason.INVALID))


def test_seed_affinity_typo_is_pointed_out() -> None:
    manifest = card_pod()
    manifest["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoreDuringExecution": {}}}
    verdict = check(manifest, cluster(team_a()))
    assert verdict.allowed
    assert verdict.warnings == (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoreDuringExecution is not a Kubernetes field and is "
        "ignored (did you mean requiredDuringSchedulingIgnoredDuringExecution?)",
    )


def test_gpu_pod_without_card_name_in_a_card_queue_gets_a_warning() -> None:
    verdict = check(pod("p", gpus=1, queue="team-a"), cluster(team_a()))
    assert verdict.allowed
    assert verdict.warnings == ("the pod requests nvidia.com/gpu without volcano.sh/card.name: queue team-a's card "
                                "quota cannot check it before it is scheduled",)


GATED = PolicyConfig(card_gate=True)


def test_with_the_gate_a_gpu_pod_without_card_name_in_a_card_queue_is_refused_with_the_name_that_admits_it() -> None:
    """The gate admits card pods by their card.name, and Volcano's extender is asked only at enqueue: a pod asking
    for nvidia.com/gpu unnamed would run past its queue's card quota, so it is refused, with the fix."""
    verdict = check(pod("p", gpus=1, queue="team-a"), cluster(team_a()), config=GATED)
    denied_at(verdict, (CARD_NAME, Reason.REQUIRED))
    assert verdict.violations[0].message == (
        "the pod requests nvidia.com/gpu in queue team-a: queue team-a's card quota, which the card-quota gate "
        f"enforces by volcano.sh/card.name, would not hold it; add the annotation volcano.sh/card.name: {A100}|{H100} "
        "(the types of its quota offered through nvidia.com/gpu), or one of them")
    # The name it suggests admits it.
    named = pod("p", gpus=1, queue="team-a")
    named["metadata"].setdefault("annotations", {})["volcano.sh/card.name"] = f"{A100}|{H100}"
    assert check(named, cluster(team_a()), config=GATED).allowed


def other_scheduler(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["spec"]["schedulerName"] = "default-scheduler"
    return manifest


@pytest.mark.parametrize(("manifest", "snapshot", "why"), [
    (pod("p", gpus=1, queue="team-a"), cluster(team_a(**{MPS: 4})), "no type of its quota offers nvidia.com/gpu"),
    (pod("p", gpus=1, queue="team-a", node_name="a100-1"), cluster(team_a()), "bound: skips every scheduler"),
    (other_scheduler(pod("p", gpus=1, queue="team-a")), cluster(team_a()), "charged to no queue"),
    (pod("p", gpus=1, queue="no-quota"), unlimited(cluster(queue("no-quota", {}))),
     "its queue has no card quota, and unquoted queues are unlimited"),
    (pod("p", queue="team-a"), cluster(team_a()), "no card resource"),
])
def test_with_the_gate_which_unnamed_pods_are_refused(manifest: dict[str, Any], snapshot: ClusterSnapshot,
                                                      why: str) -> None:
    verdict = check(manifest, snapshot, config=GATED)
    if why.startswith("no type"):
        assert not verdict.allowed
        assert verdict.violations[0].message.endswith(
            "queue team-a's quota has no card type offered through nvidia.com/gpu (a type without a quota is held to "
            "0)")
    else:
        assert verdict.allowed, why


def test_an_unnamed_gpu_pod_in_a_child_queue_without_a_quota_is_held_to_0_by_default() -> None:
    snapshot = cluster(queue("org", {A100: 1}), queue("team-c", {}, parent="org"))
    for config in (GATED, CONFIG):
        verdict = check(pod("p", gpus=8, queue="team-c"), snapshot, config=config)
        denied_at(verdict, (CARD_NAME, Reason.INVALID))
        assert "queue team-c, which has no card quota (volcano.sh/card.quota): a queue without one holds 0 cards" \
            in verdict.message


def test_with_the_gate_an_unnamed_gpu_pod_in_a_child_queue_without_a_quota_is_refused_for_its_parents() -> None:
    """With unquoted queues unlimited, the parent's card quota still holds its children's pods: one without
    card.name would pass it unchecked."""
    snapshot = unlimited(cluster(queue("org", {A100: 1}), queue("team-c", {}, parent="org")))
    verdict = check(pod("p", gpus=8, queue="team-c"), snapshot, config=GATED)
    denied_at(verdict, (CARD_NAME, Reason.REQUIRED))
    assert verdict.violations[0].message == (
        "the pod requests nvidia.com/gpu in queue team-c: the card quota of queue team-c's ancestor org, which the "
        "card-quota gate enforces by volcano.sh/card.name, would not hold it; queue team-c's quota has no card type "
        "offered through nvidia.com/gpu (a type without a quota is held to 0)")
    assert check(pod("p", gpus=8, queue="team-c"), snapshot).warnings == (
        "the pod requests nvidia.com/gpu without volcano.sh/card.name: the card quota of queue team-c's ancestor org "
        "cannot check it before it is scheduled",)


def test_with_the_gate_an_update_of_an_unnamed_pod_is_not_refused() -> None:
    manifest = pod("p", gpus=1, queue="team-a")
    assert check(manifest, cluster(team_a()), old=manifest, config=GATED).allowed


def test_malformed_pod_is_denied_not_raised() -> None:
    manifest = pod("p", card=A100, containers=[container(limits={"nvidia.com/gpu": "lots"})])
    denied_at(check(manifest, cluster(team_a())), ('spec.containers[0].resources.limits["nvidia.com/gpu"]',
                                                   Reason.INVALID))


def test_kinds_no_rule_concerns_are_allowed_untouched() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    assert check(deployment, cluster()) == Verdict(allowed=True)
    other_queue = queue("q", "{bad")
    other_queue["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    assert check(other_queue, cluster()) == Verdict(allowed=True)


@pytest.mark.parametrize(("key", "reason"), [(f"{A100}|{A100}", Reason.DUPLICATE), (f"{A100}| {A100}", Reason.INVALID),
                                            (f"{A100}| {H100}", Reason.INVALID)])
def test_a_request_key_naming_a_type_twice_or_with_spaces_is_denied(key: str, reason: Reason) -> None:
    """``{"A100|A100": 20}`` was admitted in a queue allowing 10 (each alternative's quota added once per mention)."""
    snapshot = cluster(team_a())
    verdict = check(group({key: 2}), snapshot)
    assert (REQUEST, reason) in [(violation.path, violation.reason) for violation in verdict.violations]
    assert not verdict.allowed
    verdict = check(vcjob({key: 2}, task("worker", A100, replicas=2)), snapshot)
    assert (REQUEST, reason) in [(violation.path, violation.reason) for violation in verdict.violations]
    assert not verdict.allowed
    denied_with(check(group({f"{A100}|{A100}": 20}), snapshot), "NVIDIA-A100|NVIDIA-A100 lists a card type twice")


@pytest.mark.parametrize(("resources", "expected"), [
    ({"limits": {"nvidia.com/gpu": "500m"}},
     [('spec.containers[0].resources.limits["nvidia.com/gpu"]', '"500m": must be an integer (an extended resource '
                                                               'is counted in whole units)')]),
    ({"requests": {"nvidia.com/gpu": "1"}},
     [('spec.containers[0].resources.limits["nvidia.com/gpu"]', "Limit must be set for non overcommitable resources")]),
    ({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
     [('spec.containers[0].resources.requests["nvidia.com/gpu"]', '"1": must be equal to nvidia.com/gpu limit of 2')]),
    ({"requests": {"nvidia.com/gpu": "2", "cpu": "500m"}, "limits": {"nvidia.com/gpu": "2", "cpu": "1"}}, []),
    ({"limits": {"nvidia.com/gpu": "1", "hugepages-2Mi": "1Mi", "example.kubernetes.io/x": "500m"}}, []),
])
def test_extended_resources_are_refused_as_the_api_server_refuses_them(resources: dict[str, Any],
                                                                       expected: list[tuple[str, str]]) -> None:
    """Offline ``check`` meets what ``kubectl apply`` would (issue 40, item 7): extended resources are whole numbers,
    need a limit, and a request equal to it (ValidateResourceRequirements, pkg/apis/core/validation/validation.go,
    Kubernetes v1.35). cpu may be overcommitted; kubernetes.io names and hugepages are not extended resources."""
    manifest = pod("p", namespace="ml", card=A100, containers=[container(**resources)])
    verdict = check(manifest, cluster(queue("default", {A100: 8})))
    assert [(v.path, v.message) for v in verdict.violations] == expected


def test_a_queue_capability_that_is_not_a_quantity_is_refused_as_the_api_server_refuses_it() -> None:
    """``64cores`` and ``4TB`` are no Kubernetes quantities: kubectl apply is refused by the Queue CRD's schema, so
    offline check refuses them too (issue 40, item 7; before, usage then left those rows out without a word)."""
    team = queue("team", {A100: 2})
    team["spec"]["capability"] = {"cpu": "64cores", "memory": "4TB", "nvidia.com/gpu": "8"}
    team["spec"]["deserved"] = {"cpu": "lots"}
    verdict = check(team, cluster())
    assert [v.path for v in verdict.violations] == ['spec.capability["cpu"]', 'spec.capability["memory"]',
                                                    'spec.deserved["cpu"]']
    assert verdict.violations[0].message == ('"64cores" is not a quantity (expected e.g. "2", "500m", "80Gi", '
                                             '"1e3")')
    team["spec"]["capability"] = {"cpu": "64", "memory": "4Ti"}
    team["spec"].pop("deserved")
    assert check(team, cluster()).allowed


NOT_A_POLICY = "lowerpriority is not a preemption policy: write one of Never, LowerPriority, LowerOrNewerEqualPriority"


@pytest.mark.parametrize(("value", "card_gate", "said"), [
    ("LowerPriority", False, "LowerPriority acts at the card-quota gate, which is off (turn it on with "
                             "--card-gate): waiting card work in queue team-a is admitted first come, first "
                             "served, and nothing is preempted"),
    ("LowerPriority", True, None),
    ("LowerOrNewerEqualPriority", True, None),
    ("Never", False, None),
])
def test_a_queues_preemption_policy_is_said_to_do_nothing_while_the_gate_is_off(
        value: str, card_gate: bool, said: str | None) -> None:
    """cardquota.io/preemption is acted on by the card-quota gate's keeper: with the gate off, a policy other than
    Never is told it does nothing."""
    manifest = queue("team-a", {"NVIDIA-A100": 2})
    manifest["metadata"]["annotations"]["cardquota.io/preemption"] = value
    verdict = admit(manifest, None, ClusterSnapshot(), PolicyConfig(card_gate=card_gate))
    assert verdict.allowed
    mentions = [warning for warning in verdict.warnings if "cardquota.io/preemption" in warning]
    assert mentions == ([] if said is None else [f'metadata.annotations["cardquota.io/preemption"]: {said}'])


def test_a_preemption_value_that_is_no_policy_is_refused_when_written_and_warned_when_kept() -> None:
    """Case matters, as in Kueue's enum: the choices are named. A Queue stored with such a value before is not
    refused on updates that leave it as it was."""
    manifest = queue("team-a", {"NVIDIA-A100": 2})
    manifest["metadata"]["annotations"]["cardquota.io/preemption"] = "lowerpriority"
    created = admit(manifest, None, ClusterSnapshot(), PolicyConfig())
    assert [(violation.path, violation.message, violation.reason) for violation in created.violations] == [
        ('metadata.annotations["cardquota.io/preemption"]', NOT_A_POLICY, Reason.NOT_SUPPORTED)]
    kept = admit(manifest, manifest, ClusterSnapshot(), PolicyConfig())
    assert kept.allowed
    assert f'metadata.annotations["cardquota.io/preemption"]: {NOT_A_POLICY}' in kept.warnings
