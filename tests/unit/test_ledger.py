"""The queue ledger: quota, allocated, inqueue and pending per queue, built whole or fed event by event."""

from __future__ import annotations

from typing import Any

import pytest
from builders import container, gpu_labels, gpu_node, node, pod, podgroup, queue
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from cardquota.core.errors import InputError
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Pod

A100 = "NVIDIA-A100"
H100 = "NVIDIA-H100"
A100_NODE = gpu_node("a100-1", A100, 8)
H100_NODE = gpu_node("h100-1", H100, 8)
MPS_NODE = node("mps-1", labels=gpu_labels(A100, memory=81920, replicas=8),
                allocatable={"nvidia.com/gpu.shared": "32"})
MIG_NODE = node("mig-1", labels=gpu_labels(A100),
                allocatable={"nvidia.com/mig-1g.5gb": "7", "nvidia.com/mig-2g.10gb": "4"})


def usage(*manifests: dict[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    ledger = Ledger.build(manifests)
    return {name: entry.as_json() for name, entry in ledger.all_usage().items()}


def queue_usage(name: str, *manifests: dict[str, Any]) -> dict[str, dict[str, int]]:
    return usage(*manifests)[name]


# ---------------------------------------------------------------------------------------------------- quota


def test_quota_comes_from_the_queue_annotation_and_every_quota_type_is_allocated_zero() -> None:
    assert queue_usage("team-a", queue("team-a", {A100: 10, H100: 5})) == {
        "quota": {A100: 10, H100: 5}, "allocated": {A100: 0, H100: 0}, "inqueue": {}, "pending": {},
    }


def test_queue_without_card_quota_has_empty_quota() -> None:
    assert queue_usage("cpu", queue("cpu")) == {"quota": {}, "allocated": {}, "inqueue": {}, "pending": {}}


def test_invalid_quota_is_treated_as_none_and_kept_as_a_violation() -> None:
    ledger = Ledger.build([queue("bad", "{not json")])
    assert ledger.usage("bad").quota == {}
    assert ledger.snapshot.queues["bad"].quota.violations


def test_every_queue_object_is_listed_and_so_is_a_queue_charged_without_one() -> None:
    result = usage(queue("team-a"), A100_NODE, pod("p", node_name="a100-1", gpus=1, queue="ghost"))
    assert sorted(result) == ["ghost", "team-a"]
    assert result["ghost"]["allocated"] == {A100: 1}


# ---------------------------------------------------------------------------------------------- queue of a pod


@pytest.mark.parametrize(
    ("objects", "expected_queue"),
    [
        # Volcano's scheduler charges a task to its job's queue, the PodGroup's spec.queue (JobInfo.Queue,
        # pkg/scheduler/api/job_info.go, v1.15.1 and master); the pod's scheduling.volcano.sh/queue-name is read only
        # by the PodGroup controller to build a PodGroup for a pod without one (buildPodGroupFromPod,
        # pkg/controllers/podgroup/pg_controller_handler.go): once the PodGroup exists, its queue wins.
        ([pod("p", queue="direct", group="pg"), podgroup("pg", queue="via-group")], "via-group"),
        ([pod("p", queue="direct", group="missing")], "direct"),
        ([pod("p", queue="direct", group="pg"), podgroup("pg", namespace="elsewhere", queue="via-group")], "direct"),
        ([pod("p", group="pg"), podgroup("pg", queue="via-group")], "via-group"),
        ([pod("p", group="pg"), podgroup("pg", queue=None)], "default"),
        ([pod("p", group="pg"), podgroup("pg", namespace="elsewhere", queue="via-group")], "default"),
        ([pod("p", group="missing")], "default"),
        ([pod("p")], "default"),
        ([pod("p", annotations={"scheduling.volcano.sh/queue-name": ""}), ], "default"),
    ],
)
def test_queue_of_a_pod(objects: list[dict[str, Any]], expected_queue: str) -> None:
    ledger = Ledger.build(objects)
    assert ledger.queue_of(ledger.snapshot.pods[("default", "p")]) == expected_queue


# ------------------------------------------------------------------------------------------- effective requests


@pytest.mark.parametrize(
    ("spec_containers", "init_containers", "expected_gpus"),
    [
        ([container(limits={"nvidia.com/gpu": "1"}), container("b", limits={"nvidia.com/gpu": "2"})], None, 3),
        ([container(requests={"nvidia.com/gpu": "2"}, limits={"nvidia.com/gpu": "2"})], None, 2),
        # an init container running alone needs more than the regular containers together: max wins
        ([container(limits={"nvidia.com/gpu": "1"})], [container("init", limits={"nvidia.com/gpu": "4"})], 4),
        ([container(limits={"nvidia.com/gpu": "3"})], [container("init", limits={"nvidia.com/gpu": "1"})], 3),
        # several init containers run one after another: the largest, not the sum
        ([container(limits={"nvidia.com/gpu": "1"})],
         [container("i1", limits={"nvidia.com/gpu": "2"}), container("i2", limits={"nvidia.com/gpu": "2"})], 2),
        # a restartable (sidecar) init container keeps running beside the regular containers
        ([container(limits={"nvidia.com/gpu": "1"})],
         [container("sidecar", limits={"nvidia.com/gpu": "1"}, restart_policy="Always")], 2),
    ],
)
def test_effective_request_is_max_of_init_and_sum_of_containers(
    spec_containers: list, init_containers: list | None, expected_gpus: int
) -> None:
    manifest = pod("p", node_name="a100-1", containers=spec_containers, init_containers=init_containers)
    assert queue_usage("default", A100_NODE, manifest)["allocated"] == {A100: expected_gpus}


def test_requests_fall_back_to_limits_and_requests_win_when_both_are_set() -> None:
    parsed = Pod.from_manifest(pod("p", containers=[
        container(requests={"cpu": "500m"}, limits={"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}),
    ]))
    assert {k: float(v) for k, v in parsed.requests.items()} == {"cpu": 0.5, "memory": 2.0**30, "nvidia.com/gpu": 1}


def test_pod_overhead_is_added() -> None:
    manifest = pod("p", containers=[container(requests={"cpu": "1"})])
    manifest["spec"]["overhead"] = {"cpu": "250m"}
    assert float(Pod.from_manifest(manifest).requests["cpu"]) == 1.25


def test_invalid_quantity_raises_input_error_with_the_field_path() -> None:
    manifest = pod("p", containers=[container(limits={"nvidia.com/gpu": "lots"})])
    with pytest.raises(InputError) as caught:
        Ledger.build([manifest])
    assert caught.value.where == 'spec.containers[0].resources.limits["nvidia.com/gpu"]'


# ---------------------------------------------------------------------------------------------------- allocated


def test_bound_pods_are_charged_to_their_nodes_card_type() -> None:
    objects = [queue("q", {A100: 10, H100: 5}), A100_NODE, H100_NODE,
               pod("a", node_name="a100-1", gpus=2, queue="q", card=A100),
               pod("h", node_name="h100-1", gpus=1, queue="q", card=H100)]
    assert queue_usage("q", *objects)["allocated"] == {A100: 2, H100: 1}


def test_multi_card_pods_are_charged_to_the_type_they_landed_on() -> None:
    objects = [queue("q", {A100: 4, H100: 4}), A100_NODE, H100_NODE,
               pod("p1", node_name="h100-1", gpus=1, queue="q", card=f"{A100}|{H100}"),
               pod("p2", node_name="a100-1", gpus=1, queue="q", card=f"{A100}|{H100}")]
    assert queue_usage("q", *objects)["allocated"] == {A100: 1, H100: 1}


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_hold_nothing(phase: str) -> None:
    objects = [queue("q", {A100: 4}), A100_NODE, pod("done", node_name="a100-1", gpus=4, queue="q", phase=phase)]
    assert queue_usage("q", *objects)["allocated"] == {A100: 0}


def test_sub_cards_are_charged_to_their_mps_and_mig_types() -> None:
    mps_type = f"{A100}/mps-80g*1/8"
    objects = [queue("q"), MPS_NODE, MIG_NODE,
               pod("mps", node_name="mps-1", gpus=2, resource="nvidia.com/gpu.shared", queue="q"),
               pod("mig", node_name="mig-1", gpus=1, resource="nvidia.com/mig-1g.5gb", queue="q"),
               pod("mig2", node_name="mig-1", queue="q", containers=[
                   container(limits={"nvidia.com/mig-1g.5gb": "1", "nvidia.com/mig-2g.10gb": "2"})])]
    assert queue_usage("q", *objects)["allocated"] == {
        f"{A100}/mig-1g.5gb-mixed": 2, f"{A100}/mig-2g.10gb-mixed": 2, mps_type: 2,
    }


def test_gpu_pod_without_card_name_is_charged_by_its_node() -> None:
    assert queue_usage("default", A100_NODE, pod("p", node_name="a100-1", gpus=3))["allocated"] == {A100: 3}


def test_cpu_pod_holds_no_card() -> None:
    assert usage(A100_NODE, pod("cpu", node_name="a100-1", card=A100)) == {}


def test_pod_on_an_unknown_node_is_charged_to_its_card_name() -> None:
    objects = [queue("q", {A100: 2}), A100_NODE, pod("p", node_name="gone", gpus=2, queue="q", card=A100)]
    assert queue_usage("q", *objects)["allocated"] == {A100: 2}


def test_pod_on_a_node_without_that_card_resource_is_charged_to_its_card_name() -> None:
    unlabeled = node("plain", allocatable={"nvidia.com/gpu": "4"})
    objects = [A100_NODE, unlabeled, pod("p", node_name="plain", gpus=1, card=A100),
               pod("q", node_name="plain", gpus=1)]
    assert queue_usage("default", *objects)["allocated"] == {A100: 1}


# ------------------------------------------------------------------------------------------------------ inqueue


def test_inqueue_is_the_request_of_inqueue_podgroups() -> None:
    objects = [queue("q", {A100: 8}), podgroup("pg", queue="q", request={A100: 4})]
    assert queue_usage("q", *objects)["inqueue"] == {A100: 4}


@pytest.mark.parametrize("phase", ["Pending", "Running", "Completed", "Unknown", ""])
def test_only_inqueue_podgroups_reserve(phase: str) -> None:
    objects = [queue("q", {A100: 8}), podgroup("pg", queue="q", phase=phase, request={A100: 4})]
    assert queue_usage("q", *objects)["inqueue"] == {}


def test_inqueue_minus_what_pods_already_hold() -> None:
    objects = [queue("q", {A100: 8}), A100_NODE, podgroup("pg", queue="q", request={A100: 4}),
               pod("w0", group="pg", node_name="a100-1", gpus=1, card=A100),
               pod("w1", group="pg", node_name="a100-1", gpus=1, card=A100),
               pod("w2", group="pg", gpus=1, card=A100),
               pod("done", group="pg", node_name="a100-1", gpus=1, card=A100, phase="Succeeded")]
    result = queue_usage("q", *objects)
    assert result["inqueue"] == {A100: 2}
    assert result["allocated"] == {A100: 2}
    assert result["pending"] == {A100: 1}


def test_multi_card_request_key_stays_one_key() -> None:
    key = f"{A100}|{H100}"
    objects = [queue("q", {A100: 4, H100: 4}), A100_NODE, H100_NODE, podgroup("pg", queue="q", request={key: 6}),
               pod("w0", group="pg", node_name="h100-1", gpus=1, card=key),
               pod("w1", group="pg", node_name="a100-1", gpus=1, card=key)]
    assert queue_usage("q", *objects)["inqueue"] == {key: 4}


def test_fully_held_request_reserves_nothing_more() -> None:
    objects = [queue("q", {A100: 8}), A100_NODE, podgroup("pg", queue="q", request={A100: 2}),
               pod("w0", group="pg", node_name="a100-1", gpus=3, card=A100)]
    assert queue_usage("q", *objects)["inqueue"] == {}


def test_held_cards_count_against_the_pods_own_key_first_then_the_first_matching_key() -> None:
    key = f"{A100}|{H100}"
    objects = [queue("q"), A100_NODE, podgroup("pg", queue="q", request={A100: 2, key: 2}),
               pod("flex", group="pg", node_name="a100-1", gpus=1, card=key),
               pod("plain", group="pg", node_name="a100-1", gpus=1)]
    assert queue_usage("q", *objects)["inqueue"] == {A100: 1, key: 1}


def test_podgroup_in_another_namespace_does_not_see_the_pods() -> None:
    objects = [A100_NODE, podgroup("pg", namespace="ns-b", request={A100: 2}),
               pod("w0", namespace="ns-a", group="pg", node_name="a100-1", gpus=1, card=A100)]
    result = usage(*objects)
    assert result["default"]["inqueue"] == {A100: 2}


def test_malformed_request_reserves_nothing() -> None:
    assert usage(podgroup("pg", request="{oops")) == {}


# ------------------------------------------------------------------------------------------------------ pending


def test_pending_is_keyed_by_card_name_as_written() -> None:
    key = f"{A100}|{H100}"
    objects = [queue("q"), A100_NODE, pod("p1", queue="q", card=key, gpus=2), pod("p2", queue="q", card=A100, gpus=1),
               pod("p3", queue="q", card=A100, gpus=1, phase="Failed"), pod("p4", queue="q", gpus=1)]
    assert queue_usage("q", *objects)["pending"] == {A100: 1, key: 2}


def test_pending_counts_only_card_resources_the_cluster_knows() -> None:
    manifest = pod("p", card=A100, containers=[
        container(limits={"nvidia.com/gpu": "2", "rdma/hca": "1", "cpu": "4"})])
    assert queue_usage("default", A100_NODE, manifest)["pending"] == {A100: 2}


def test_pending_before_any_node_offers_the_card_counts_extended_resources() -> None:
    manifest = pod("p", card=A100, containers=[container(limits={"nvidia.com/gpu": "2", "cpu": "4"})])
    assert queue_usage("default", manifest)["pending"] == {A100: 2}


# ---------------------------------------------------------------------------------------------- incremental


def test_node_relabel_moves_the_charge_to_the_new_card_type() -> None:
    ledger = Ledger.build([queue("q"), A100_NODE, pod("p", node_name="a100-1", gpus=2, queue="q")])
    assert ledger.usage("q").allocated == {A100: 2}
    ledger.upsert(gpu_node("a100-1", H100, 8))
    assert ledger.usage("q").allocated == {H100: 2}
    ledger.delete(A100_NODE)
    assert ledger.usage("q").allocated == {}


def test_podgroup_arriving_after_its_pods_moves_them_to_its_queue() -> None:
    ledger = Ledger.build([A100_NODE, pod("p", group="pg", node_name="a100-1", gpus=1)])
    assert ledger.usage("default").allocated == {A100: 1}
    ledger.upsert(podgroup("pg", queue="team", phase="Running"))
    assert "default" not in ledger.queue_names()
    assert ledger.usage("team").allocated == {A100: 1}
    ledger.upsert(podgroup("pg", queue="other", phase="Running"))
    assert ledger.usage("other").allocated == {A100: 1}
    ledger.delete(podgroup("pg", queue="other"))
    assert ledger.queue_names() == ["default"]


def test_pod_binding_moves_cards_from_pending_and_inqueue_to_allocated() -> None:
    ledger = Ledger.build([queue("q"), A100_NODE, podgroup("pg", queue="q", request={A100: 1}),
                           pod("p", group="pg", gpus=1, card=A100)])
    assert (ledger.usage("q").inqueue, ledger.usage("q").pending) == ({A100: 1}, {A100: 1})
    ledger.upsert(pod("p", group="pg", gpus=1, card=A100, node_name="a100-1"))
    assert (ledger.usage("q").allocated, ledger.usage("q").inqueue, ledger.usage("q").pending) == ({A100: 1}, {}, {})
    ledger.upsert(pod("p", group="pg", gpus=1, card=A100, node_name="a100-1", phase="Succeeded"))
    assert ledger.usage("q").inqueue == {A100: 1}
    ledger.delete(pod("p"))
    assert ledger.usage("q").allocated == {}


def test_the_first_card_node_turns_extended_resources_into_known_card_resources() -> None:
    manifest = pod("p", card=A100, containers=[container(limits={"nvidia.com/gpu": "2", "example.com/fpga": "1"})])
    ledger = Ledger.build([manifest])
    assert ledger.usage("default").pending == {A100: 3}
    ledger.upsert(A100_NODE)
    assert ledger.usage("default").pending == {A100: 2}
    ledger.delete(A100_NODE)
    assert ledger.usage("default").pending == {A100: 3}


def test_deleting_unknown_objects_and_other_kinds_is_harmless() -> None:
    ledger = Ledger.build([queue("q", {A100: 1})])
    for manifest in (pod("nope"), node("nope"), podgroup("nope"), queue("nope"),
                     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}):
        ledger.delete(manifest)
    ledger.upsert({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}})
    assert {n: u.as_json() for n, u in ledger.all_usage().items()} == {
        "q": {"quota": {A100: 1}, "allocated": {A100: 0}, "inqueue": {}, "pending": {}}
    }


def test_kinds_from_other_api_groups_are_ignored() -> None:
    foreign = queue("q", {A100: 1})
    foreign["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    assert usage(foreign) == {}


# ------------------------------------------------------------------------ property: incremental == rebuild

NAMESPACES = ["ns-a", "ns-a", "ns-a", "ns-b"]  # weighted: dependent objects must meet often
QUEUES = ["q1", "q2", "default"]
CARDS = [A100, H100, f"{A100}|{H100}", f"{A100}/mps-80g*1/8"]

node_manifests = st.one_of(
    st.builds(gpu_node, st.sampled_from(["n1", "n2"]), st.sampled_from([A100, H100]), st.integers(0, 8)),
    st.builds(lambda name: node(name, labels=gpu_labels(A100, memory=81920, replicas=4),
                                allocatable={"nvidia.com/gpu.shared": "16"}), st.sampled_from(["n1", "n2"])),
    st.builds(node, st.sampled_from(["n1", "n2"])),
)
queue_manifests = st.builds(
    queue, st.sampled_from(QUEUES),
    st.one_of(st.none(), st.dictionaries(st.sampled_from(CARDS), st.integers(0, 10), max_size=3), st.just("{bad")),
)
def _with(manifest: dict[str, Any], path: tuple[str, str], value: object) -> dict[str, Any]:
    """``manifest`` with ``manifest[path[0]][path[1]] = value`` (nothing when ``value`` is None)."""
    if value is not None:
        manifest[path[0]][path[1]] = value
    return manifest


podgroup_manifests = st.builds(
    _with, st.builds(
        podgroup, st.sampled_from(["g1", "g1", "g1", "g2"]), namespace=st.sampled_from(NAMESPACES),
        queue=st.sampled_from([*QUEUES, None]), phase=st.sampled_from(["Inqueue", "Running", "Pending"]),
        request=st.one_of(st.none(), st.dictionaries(st.sampled_from(CARDS), st.integers(0, 6), max_size=3)),
    ), st.just(("spec", "minResources")), st.sampled_from([None, {"nvidia.com/gpu": "1"}]),
)
pod_manifests = st.builds(
    _with, st.builds(
        pod, st.sampled_from(["p1", "p2"]), namespace=st.sampled_from(NAMESPACES),
        card=st.one_of(st.none(), st.sampled_from([*CARDS, f"{H100}|{A100}"])),
        node_name=st.sampled_from([None, "n1", "n1", "n2", "n9"]),
        phase=st.sampled_from([None, "Running", "Succeeded", "Failed"]),
        group=st.sampled_from([None, "g1", "g1", "g2"]),
        queue=st.sampled_from([None, None, None, "q1"]), gpus=st.integers(0, 3),
        resource=st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "example.com/fpga"]),
    ), st.just(("metadata", "deletionTimestamp")), st.sampled_from([None, None, None, "2026-01-01T00:00:00Z"]),
)
two_resource_pods = st.builds(
    lambda name, node_name, card: pod(name, namespace="ns-a", card=card, node_name=node_name, group="g1",
                                      containers=[container(limits={"nvidia.com/gpu": "1", "example.com/fpga": "1"})]),
    st.sampled_from(["p1", "p2"]), st.sampled_from([None, "n1", "n9"]), st.sampled_from(CARDS),
)
any_manifest = st.one_of(node_manifests, queue_manifests, podgroup_manifests, pod_manifests, two_resource_pods)


def _identity(manifest: dict[str, Any]) -> tuple[str, str, str]:
    return (manifest["kind"], manifest["metadata"].get("namespace", ""), manifest["metadata"]["name"])


def _state(ledger: Ledger) -> dict[str, Any]:
    return {name: entry.as_json() for name, entry in ledger.all_usage().items()}


class IncrementalLedger(RuleBasedStateMachine):
    """Watch events in any order: after every one, the ledger equals a full rebuild of the live objects."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger()
        self.live: dict[tuple[str, str, str], dict[str, Any]] = {}

    @rule(manifest=any_manifest)
    def upsert(self, manifest: dict[str, Any]) -> None:
        self.ledger.upsert(manifest)
        self.live[_identity(manifest)] = manifest

    @rule(manifest=any_manifest)
    def delete(self, manifest: dict[str, Any]) -> None:
        self.ledger.delete(manifest)
        self.live.pop(_identity(manifest), None)

    @invariant()
    def equals_full_rebuild(self) -> None:
        rebuilt = Ledger.build(self.live.values())
        assert _state(self.ledger) == _state(rebuilt)
        assert self.ledger._totals == rebuilt._totals  # internal counters too: nothing left behind at zero
        assert self.ledger._group_holdings == rebuilt._group_holdings
        assert self.ledger._group_pending == rebuilt._group_pending
        assert self.ledger._group_charges == rebuilt._group_charges
        assert self.ledger._pending_by_queue == rebuilt._pending_by_queue
        assert self.ledger._pod_charges == rebuilt._pod_charges
        assert self.ledger._cluster_resource_dependents == rebuilt._cluster_resource_dependents


IncrementalLedger.TestCase.settings = settings(
    max_examples=max(150, settings().max_examples // 2), stateful_step_count=40, deadline=None
)
test_any_event_sequence_matches_a_full_rebuild = IncrementalLedger.TestCase


@given(st.lists(st.one_of(node_manifests, queue_manifests, podgroup_manifests, pod_manifests), max_size=25,
                unique_by=_identity), st.randoms(use_true_random=False))
def test_build_order_does_not_matter(objects: list, random: Any) -> None:
    shuffled = list(objects)
    random.shuffle(shuffled)
    assert _state(Ledger.build(objects)) == _state(Ledger.build(shuffled))


@given(st.lists(any_manifest, max_size=25))
def test_build_of_a_list_with_repeated_objects_keeps_the_last_of_each(objects: list) -> None:
    last = {_identity(manifest): manifest for manifest in objects}
    built = Ledger.build(objects)
    assert _state(built) == _state(Ledger.build(last.values()))
    assert built._pod_charges == Ledger.build(last.values())._pod_charges


# ------------------------------------------------------------------------------------------- releasing pods


def _deleting(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return manifest


@pytest.mark.parametrize(("node_name", "phase"), [("a100-1", "Running"), ("a100-1", "Pending"), (None, "Pending")])
def test_a_pod_being_deleted_is_releasing_and_charges_its_queue_nothing(node_name: str | None, phase: str) -> None:
    """Volcano v1.15.1 pkg/scheduler/api/helpers.go: ``getTaskStatus`` gives a Pending or Running pod with a
    deletionTimestamp the status Releasing, which ``AllocatedStatus`` excludes (and which is not Pending): the
    capacity-card plugin counts it in neither its queue's allocated nor its request."""
    objects = [queue("q", {A100: 4}), A100_NODE,
               _deleting(pod("p", node_name=node_name, phase=phase, gpus=4, queue="q", card=A100))]
    usage_of_q = queue_usage("q", *objects)
    assert usage_of_q["allocated"] == {A100: 0}
    assert usage_of_q["pending"] == {}
    assert Pod.from_manifest(objects[-1]).releasing


def test_a_pod_marked_for_deletion_gives_its_cards_back_at_once_incrementally() -> None:
    running = pod("p", node_name="a100-1", gpus=3, queue="q", card=A100, group="pg")
    ledger = Ledger.build([queue("q", {A100: 4}), A100_NODE, podgroup("pg", queue="q", phase="Running"), running])
    assert ledger.usage("q").allocated == {A100: 3}
    ledger.upsert(_deleting(pod("p", node_name="a100-1", gpus=3, queue="q", card=A100, group="pg")))
    assert ledger.usage("q").allocated == {A100: 0}
    assert Ledger.build([queue("q", {A100: 4}), A100_NODE, podgroup("pg", queue="q", phase="Running"),
                         _deleting(running)]).usage("q") == ledger.usage("q")


def test_a_succeeded_pod_being_deleted_is_still_just_finished() -> None:
    done = _deleting(pod("p", node_name="a100-1", phase="Succeeded", gpus=1, queue="q", card=A100))
    assert not Pod.from_manifest(done).releasing


@pytest.mark.parametrize(("request_text", "inqueue"), [
    (f'{{"{A100}|{A100}": 3}}', {A100: 3}),
    (f'{{"{A100}| {H100}": 2, "{A100}|{H100}": 1}}', {f"{A100}|{H100}": 3}),
])
def test_a_stored_request_naming_a_type_twice_is_reserved_once(request_text: str, inqueue: dict[str, int]) -> None:
    """Admission refuses such keys; one stored anyway (written before the webhook) reserves each type once."""
    objects = [queue("q", {A100: 10, H100: 5}), A100_NODE, podgroup("g", queue="q", request=request_text)]
    assert queue_usage("q", *objects)["inqueue"] == inqueue


def _notebook(scheduler: str | None, group: str | None = None) -> dict[str, Any]:
    """A GPU pod bound to the A100 node, no card.name; ``scheduler``: its spec.schedulerName (None: unset)."""
    manifest = pod("notebook", namespace="ml", node_name="a100-1", gpus=2, group=group)
    if scheduler is None:
        manifest["spec"].pop("schedulerName", None)
    else:
        manifest["spec"]["schedulerName"] = scheduler
    return manifest


@pytest.mark.parametrize(("scheduler", "group", "charged"), [
    ("default-scheduler", None, {}),  # in no Volcano job: Volcano charges no queue for it (cache addTask)
    ("default-scheduler", "nb", {"default": {A100: 2}}),  # it names a PodGroup: that job's queue
    ("volcano", None, {"default": {A100: 2}}),  # Volcano's: its PodGroup-to-be's queue
    (None, None, {"default": {A100: 2}}),  # (a manifest the API server has not defaulted)
])
def test_a_pod_of_another_scheduler_without_a_podgroup_charges_no_queue(
        scheduler: str | None, group: str | None, charged: dict[str, dict[str, int]]) -> None:
    objects = [A100_NODE, queue("default", {A100: 2}), _notebook(scheduler, group)]
    if group is not None:
        objects.append(podgroup(group, namespace="ml", queue="default"))
    ledger = Ledger.build(objects)
    assert {name: dict(held) for name in ledger.queue_names()
            if (held := {card: n for card, n in ledger.usage(name).allocated.items() if n})} == charged


def test_the_schedulers_volcano_runs_are_configurable() -> None:
    from cardquota.core.snapshot import ClusterSnapshot

    ledger = Ledger(ClusterSnapshot(volcano_schedulers=frozenset({"volcano", "volcano-gpu"})))
    for manifest in (A100_NODE, queue("default", {A100: 2}), _notebook("volcano-gpu")):
        ledger.upsert(manifest)
    assert ledger.usage("default").allocated == {A100: 2}
    built = Ledger.build([A100_NODE, queue("default", {A100: 2}), _notebook("volcano-gpu")],
                         volcano_schedulers=frozenset({"volcano-gpu"}))
    assert built.usage("default").allocated == {A100: 2}
    assert not any(Ledger.build([A100_NODE, queue("default", {A100: 2}), _notebook("volcano-gpu")]).usage(
        "default").allocated.values())


def test_a_replay_session_reads_the_schedulers_it_is_told_volcano_runs() -> None:
    from cardquota.core.scheduling.session import SchedulerConfig, Session

    objects = [A100_NODE, queue("default", {A100: 2}), _notebook("volcano-gpu")]
    told = Session(objects, SchedulerConfig(scheduler_names=frozenset({"volcano-gpu"})))
    assert told.ledger.usage("default").allocated == {A100: 2}
    assert not any(Session(objects, SchedulerConfig()).ledger.usage("default").allocated.values())
