"""``cardquota simulate``: the seeds' examples end to end, gang semantics, reasons, determinism, the CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import gpu_labels, node, pod, podgroup, queue, train_job, trainer_runtime
from hypothesis import given, settings
from hypothesis import strategies as st
from user_docs import all_user_docs

from cardquota.cli.main import run
from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.session import SchedulerConfig, Session
from cardquota.core.scheduling.simulate import RefusalMemo, simulate

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
REPO = Path(__file__).resolve().parents[3]
UNLIMITED = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True))


def gpu_node(name: str, product: str, gpus: int, *, resource: str = "nvidia.com/gpu", **labels: Any) -> dict:
    return node(name, labels=gpu_labels(product, count=gpus, **labels), allocatable={resource: str(gpus)})


def volcano_job(name: str, card_name: str, replicas: int, *, request: dict[str, int], queue_name: str,
                min_available: int, resource: str = "nvidia.com/gpu") -> dict:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ml", "annotations": {"volcano.sh/card.request":
                                                                          json.dumps(request)}},
            "spec": {"schedulerName": "volcano", "queue": queue_name, "minAvailable": min_available,
                     "tasks": [{"name": "worker", "replicas": replicas, "template": {
                         "metadata": {"annotations": {"volcano.sh/card.name": card_name}},
                         "spec": {"containers": [{"name": "w", "resources": {"limits": {resource: "1"}}}]}}}]}}


def test_example_1_four_a100_tasks_on_two_nodes_of_four() -> None:
    cluster = [gpu_node("a1", A100, 4), gpu_node("a2", A100, 4), queue("team-a", {A100: 5})]
    result = simulate(cluster, [volcano_job("training", A100, 4, request={A100: 4}, queue_name="team-a",
                                            min_available=4)], UNLIMITED)
    assert result.podgroups["ml/training"].phase == "Running"
    assert all(outcome.node in {"a1", "a2"} for outcome in result.placements.values())
    assert len(result.placements) == 4
    assert result.queues["team-a"]["allocated"] == {A100: 4}


def test_an_unnamed_task_is_named_as_volcano_names_it() -> None:
    """Volcano's Job mutation names an unnamed task ``default<index>`` (``DefaultTaskSpec`` "default",
    staging/src/volcano.sh/apis/pkg/apis/batch/v1alpha1/labels.go; ``mutateSpec`` in mutate_job.go, v1.15.1) and its
    pods are ``<job>-<task>-<index>`` (``MakePodName``): the names simulate reports are the pods' real names."""
    job = volcano_job("training", A100, 2, request={A100: 2}, queue_name="team-a", min_available=2)
    del job["spec"]["tasks"][0]["name"]
    result = simulate([gpu_node("a1", A100, 4), queue("team-a", {A100: 2})], [job], UNLIMITED)
    assert sorted(result.placements) == ["ml/training-default0-0", "ml/training-default0-1"]


def test_example_2_multi_card_prefers_a100_then_takes_h100_when_its_quota_is_spent() -> None:
    cluster = [gpu_node("a1", A100, 8), gpu_node("h1", H100, 8), queue("team-a", {A100: 2, H100: 4})]
    result = simulate(cluster, [volcano_job("flex", f"{A100}|{H100}", 4, request={f"{A100}|{H100}": 4},
                                            queue_name="team-a", min_available=1)], UNLIMITED)
    types = [outcome.card_type for outcome in result.placements.values()]
    assert types == [A100, A100, H100, H100]
    assert result.queues["team-a"]["allocated"] == {A100: 2, H100: 2}


def test_example_3_sixteen_mps_pods_share_four_cards() -> None:
    mps = "NVIDIA-A100/mps-80g*1/8"
    cluster = [gpu_node("mps1", A100, 32, resource="nvidia.com/gpu.shared", memory=81920, replicas=8),
               queue("inference", {mps: 32})]
    result = simulate(cluster, [volcano_job("serve", mps, 16, request={mps: 16}, queue_name="inference",
                                            min_available=16, resource="nvidia.com/gpu.shared")], UNLIMITED)
    assert result.podgroups["ml/serve"].phase == "Running"
    assert {outcome.card_type for outcome in result.placements.values()} == {mps}
    assert result.queues["inference"]["allocated"] == {mps: 16}


def test_a_job_beyond_its_queue_is_refused_at_enqueue_with_the_event_sentence() -> None:
    cluster = [gpu_node("a1", A100, 8), queue("team-a", {A100: 5})]
    result = simulate(cluster, [volcano_job("big", A100, 6, request={A100: 6}, queue_name="team-a",
                                            min_available=6)], UNLIMITED)
    reason = "Queue team-a has insufficient NVIDIA-A100 quota: requested 6, total would be 6, but capability is 5"
    assert result.podgroups["ml/big"].as_json() == {"phase": "Pending", "reason": reason}
    assert all(outcome.node is None for outcome in result.placements.values())


def test_a_gang_that_cannot_start_keeps_nothing() -> None:
    """minMember 3 but only 2 cards exist: the 2 placements are undone, the group stays Inqueue."""
    cluster = [gpu_node("a1", A100, 2), queue("q", {A100: 8})]
    workload = [podgroup("g", namespace="ml", queue="q", phase="Pending", request={A100: 3}),
                *[pod(f"p{i}", namespace="ml", card=A100, gpus=1, group="g") for i in range(3)]]
    workload[0]["spec"]["minMember"] = 3
    for manifest in workload[1:]:
        manifest["spec"]["containers"][0]["resources"].pop("requests")
    result = simulate(cluster, workload, UNLIMITED)
    outcome = result.podgroups["ml/g"]
    assert outcome.phase == "Inqueue"
    assert outcome.reason is not None
    assert outcome.reason.startswith("2/3 pods could be placed; pod ml/p2: 0/1 nodes are available: 1 Insufficient "
                                     "nvidia.com/gpu")
    assert result.queues["q"]["allocated"] == {A100: 0}
    assert result.queues["q"]["inqueue"] == {A100: 3}


def test_pods_that_fit_nowhere_get_the_scheduler_style_summary() -> None:
    cluster = [gpu_node("a1", A100, 1), gpu_node("h1", H100, 4), node("cpu1"), queue("q", {A100: 4})]
    workload = [pod("p", namespace="ml", card=A100, gpus=2, queue="q")]
    workload[0]["spec"]["containers"][0]["resources"].pop("requests")
    result = simulate(cluster, workload, UNLIMITED)
    assert result.placements["ml/p"].reason == (
        "0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 node h1 offers NVIDIA-H100, not one of NVIDIA-A100")


def test_cpu_and_memory_quota_apply_unless_card_tasks_are_unlimited() -> None:
    cluster = [gpu_node("a1", A100, 8), queue("q", {A100: 4})]
    workload = [pod("p", namespace="ml", card=A100, gpus=1, queue="q")]  # requests 1 cpu; the queue sets none
    refused = simulate(cluster, workload, SchedulerConfig())
    assert refused.placements["ml/p"].reason == ("Queue q has no cpu/memory capability (spec.capability), so tasks "
                                                 "requesting cpu or memory in it cannot be allocated")
    assert simulate(cluster, workload, UNLIMITED).placements["ml/p"].node == "a1"


def test_node_affinity_taints_and_selectors_are_respected() -> None:
    tainted = gpu_node("a0", A100, 8)
    tainted["spec"] = {"taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]}
    cluster = [tainted, gpu_node("a1", A100, 8), queue("q", {A100: 4})]
    workload = [pod("p", namespace="ml", card=A100, gpus=1, queue="q")]
    workload[0]["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                                     "values": [A100]}]}]}}}
    assert simulate(cluster, workload, UNLIMITED).placements["ml/p"].node == "a1"
    workload[0]["spec"]["nodeSelector"] = {"zone": "nowhere"}
    assert "didn't match Pod's node selector" in (simulate(cluster, workload, UNLIMITED).placements["ml/p"].reason
                                                   or "")


def test_mgpu_pods_get_gpu_indexes_when_enabled() -> None:
    mgpu_node = node("m1", allocatable={"vke.volcengine.com/mgpu-core": "400",
                                        "vke.volcengine.com/mgpu-memory": "98304"})
    workload = [pod("p", namespace="ml", containers=[{"name": "c", "resources": {"requests": {
        "vke.volcengine.com/mgpu-core": "30", "vke.volcengine.com/mgpu-memory": "4096"}}}])]
    conf = yaml.safe_dump({"actions": "allocate", "tiers": [{"plugins": [
        {"name": "capacity-card", "arguments": {"cardUnlimitedCpuMemory": True}},
        {"name": "predicates", "arguments": {"predicate.MGPUEnable": True}}]}]})
    result = simulate([mgpu_node, queue("default", {})], workload, SchedulerConfig.from_conf(conf))
    assert result.placements["ml/p"].node == "m1"
    assert result.placements["ml/p"].gpu_indexes == {"c": ["0"]}


def test_simulation_is_deterministic_and_the_cli_prints_the_contract(tmp_path: Path) -> None:
    cluster, workload = REPO / "examples" / "cluster.yaml", REPO / "examples" / "simulate" / "workload.yaml"
    outputs = []
    for _ in range(2):
        out = tmp_path / "out.json"
        with out.open("w") as stream:
            code = run("cardquota", ["simulate", "--cluster", str(cluster), "-f", str(workload), "-o", "json"],
                       stdout=stream)
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1]
    document = json.loads(outputs[0])
    assert set(document) == {"placements", "podgroups", "queues"}
    # With the gate (the default, as shipped): team-a's 4 pending pods named A100|H100, past the gate without being
    # narrowed (the example predates the gate), count against both types until bound: A100 8 + 4 of 10, H100 2 + 4
    # of 5 — the gate waits where the extender alone would have placed it.
    assert document["placements"]["team-a/flexible-training-worker-0"] == {
        "node": None, "cardType": None,
        "reason": "waiting at the card-quota gate: queue team-a has 0 of 10 NVIDIA-A100 free; 0 pods ahead"}
    assert document["podgroups"]["team-b/too-big"]["phase"] == "Pending"
    assert document["queues"]["team-a"]["waiting"] == {A100 + "|" + H100: 1}
    assert code == 1
    with out.open("w") as stream:
        code = run("cardquota", ["simulate", "--card-gate", "off", "--cluster", str(cluster), "-f", str(workload),
                                 "-o", "json"], stdout=stream)
    document = json.loads(out.read_text())
    assert document["placements"]["team-a/flexible-training-worker-0"] == {"node": "gpu-a100-01",
                                                                           "cardType": A100}
    assert code == 0  # the refused PodGroup has no pods; every pod was placed


def org(child_quota: int, parent_quota: int) -> list[dict[str, Any]]:
    return [gpu_node("a1", A100, 8), gpu_node("a2", A100, 8), queue("org", {A100: parent_quota}),
            queue("team-a", {A100: child_quota}, parent="org"), queue("team-b", {A100: child_quota}, parent="org")]


def test_with_the_gate_a_parent_queues_quota_holds_across_its_children() -> None:
    """Children of 4 under a parent of 4: the gate lets one child's gang through and holds the other's with the
    parent's sentence; without the gate (the extender's per-task check reads each queue alone) both run."""
    workload = [volcano_job(name, A100, 4, request={A100: 4}, queue_name=team, min_available=4)
                for name, team in (("a", "team-a"), ("b", "team-b"))]
    gated = simulate(org(4, 4), workload, UNLIMITED, card_gate=True)
    assert gated.podgroups["ml/a"].phase == "Running"
    assert gated.podgroups["ml/b"] == type(gated.podgroups["ml/b"])(
        "Inqueue", "waiting at the card-quota gate: queue team-b (parent org) has 0 of 4 NVIDIA-A100 free; "
                   "0 pods ahead")
    assert {name: outcome.reason for name, outcome in gated.placements.items() if outcome.node is None} == {
        f"ml/b-worker-{index}": gated.podgroups["ml/b"].reason for index in range(4)}
    assert gated.queues["team-b"]["waiting"] == {A100: 4}
    ungated = simulate(org(4, 4), workload, UNLIMITED)
    assert {outcome.phase for outcome in ungated.podgroups.values()} == {"Running"}


def test_with_the_gate_a_gang_of_a_launcher_and_card_workers_held_at_the_gate_says_why() -> None:
    """The launcher (no cards, never gated) could be placed, but the gang cannot start without its workers, which
    wait at the gate: the PodGroup gives the gate's sentence, not a count of pods placed."""
    job = volcano_job("mpi", A100, 2, request={A100: 2}, queue_name="team-a", min_available=3)
    job["metadata"]["annotations"] = {}
    job["spec"]["tasks"].insert(0, {"name": "launcher", "replicas": 1, "template": {"spec": {"containers": [
        {"name": "l", "resources": {"requests": {"cpu": "1"}}}]}}})
    team = queue("team-a", {A100: 1})
    team["spec"]["capability"] = {"cpu": "8", "memory": "8Gi"}
    result = simulate([gpu_node("a1", A100, 4), team], [job], UNLIMITED, card_gate=True)
    assert result.podgroups["ml/mpi"] == type(result.podgroups["ml/mpi"])(
        "Inqueue", "waiting at the card-quota gate: queue team-a has 0 of 1 NVIDIA-A100 free; 0 pods ahead")
    assert result.placements["ml/mpi-launcher-0"].reason == "gang of 3 not satisfied (1 placed)"


def test_with_the_gate_the_head_of_line_order_is_the_operators() -> None:
    """org allows 6, team-b (under org) 6. After team-a's 4, team-b's gang of 4 cannot pass org (it passes the
    enqueue check, which reads team-b alone), its later gang of 2 could: BestEffortFIFO lets the 2 go first,
    StrictFIFO holds it behind the 4."""
    from cardquota.core.gate import HeadOfLine

    workload = [volcano_job(name, A100, size, request={A100: size}, queue_name=team, min_available=size)
                for name, team, size in (("a4", "team-a", 4), ("b4", "team-b", 4), ("b2", "team-b", 2))]
    children = [queue("team-a", {A100: 4}, parent="org"), queue("team-b", {A100: 6}, parent="org")]
    cluster = [gpu_node("a1", A100, 8), gpu_node("a2", A100, 8), queue("org", {A100: 6}), *children]
    best = simulate(cluster, workload, UNLIMITED, card_gate=True)
    assert {name: outcome.phase for name, outcome in best.podgroups.items()} == {
        "ml/a4": "Running", "ml/b4": "Inqueue", "ml/b2": "Running"}
    strict = simulate(cluster, workload, UNLIMITED, card_gate=True, gate_order=HeadOfLine.STRICT_FIFO)
    assert {name: outcome.phase for name, outcome in strict.podgroups.items()} == {
        "ml/a4": "Running", "ml/b4": "Inqueue", "ml/b2": "Inqueue"}
    assert strict.podgroups["ml/b2"].reason == "waiting at the card-quota gate behind podgroup ml/b4 (StrictFIFO)"


def test_with_the_gate_an_alternative_is_chosen_and_narrowed_before_placement() -> None:
    cluster = [gpu_node("a1", A100, 4), gpu_node("h1", H100, 4), queue("team-a", {A100: 2, H100: 4})]
    workload = [volcano_job(name, f"{A100}|{H100}", 2, request={f"{A100}|{H100}": 2}, queue_name="team-a",
                            min_available=2) for name in ("first", "second")]
    result = simulate(cluster, workload, UNLIMITED, card_gate=True)
    assert {name: (outcome.node, outcome.card_type) for name, outcome in result.placements.items()} == {
        "ml/first-worker-0": ("a1", A100), "ml/first-worker-1": ("a1", A100),
        "ml/second-worker-0": ("h1", H100), "ml/second-worker-1": ("h1", H100)}
    assert result.queues["team-a"]["allocated"] == {A100: 2, H100: 2}


_products = st.sampled_from([A100, H100])
_workload = st.lists(st.tuples(st.sampled_from([A100, H100, f"{A100}|{H100}", f"{H100}|{A100}"]),
                               st.integers(1, 3), st.sampled_from(["q1", "q2"]), st.booleans(),
                               st.sampled_from([None, "g0", "g1"])),
                     min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(nodes=st.lists(st.tuples(_products, st.integers(0, 4)), min_size=1, max_size=5), workload=_workload,
       quotas=st.tuples(st.integers(0, 8), st.integers(0, 8)), gangs=st.tuples(st.integers(1, 4), st.integers(1, 4)))
def test_the_shortcuts_choose_what_a_full_scan_would(nodes: list[tuple[str, int]],
                                                     workload: list[tuple[str, int, str, bool, str | None]],
                                                     quotas: tuple[int, int], gangs: tuple[int, int]) -> None:
    """Preference groups (first fitting node of the best card type) and the refusal memo give exactly the result
    of scoring every node for every pod."""
    cluster = [gpu_node(f"n{index}", product, gpus) for index, (product, gpus) in enumerate(nodes)]
    cluster += [queue("q1", {A100: quotas[0], H100: quotas[1]}), queue("q2", {A100: quotas[1]})]
    pods: list[dict[str, Any]] = []
    for name, minimum in zip(("g0", "g1"), gangs, strict=True):  # gangs that may not start: their pods are given back
        group = podgroup(name, namespace="ml", queue="q1", phase="Pending")
        group["spec"]["minMember"] = minimum
        pods.append(group)
    for index, (card, gpus, queue_name, with_affinity, group_name) in enumerate(workload):
        manifest = pod(f"p{index}", namespace="ml", card=card, gpus=gpus, queue=queue_name, group=group_name)
        manifest["spec"]["containers"][0]["resources"].pop("requests")
        if with_affinity:
            manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n0"}
        pods.append(manifest)
    fast = simulate(cluster, pods, UNLIMITED).as_json()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Session, "preference_groups", lambda self, key: None)
        patch.setattr(RefusalMemo, "refused", lambda self, session, shape: set())
        patch.setattr(RefusalMemo, "reason", lambda self, session, shape: None)
        full = simulate(cluster, pods, UNLIMITED).as_json()
    assert fast == full


def test_the_refusal_memo_is_shared_by_pods_of_one_shape_and_forgotten_when_it_could_be_wrong() -> None:
    session = Session([gpu_node("a1", A100, 1), queue("q", {A100: 4})], UNLIMITED)
    first = session.add_pending(pod("first", namespace="ml", card=A100, gpus=1, queue="q"))
    twin = session.add_pending(pod("twin", namespace="ml", card=A100, gpus=1, queue="q"))
    other = session.add_pending(pod("other", namespace="ml", card=A100, gpus=2, queue="q"))
    memo = RefusalMemo()
    shape, twin_shape = memo.shape(session, first), memo.shape(session, twin)
    assert shape == twin_shape != memo.shape(session, other)
    memo.refused(session, shape).add("a1")
    memo.remember_reason(session, shape, "0/1 nodes are available: 1 Insufficient nvidia.com/gpu")
    assert memo.refused(session, twin_shape) == {"a1"}
    assert memo.reason(session, twin_shape) is not None
    session.allocate(first, "a1")  # any change: the reason may differ now; a node that refused still refuses
    assert memo.reason(session, twin_shape) is None
    assert memo.refused(session, twin_shape) == {"a1"}
    session.deallocate(first)  # a release: a node that refused may fit now
    assert memo.refused(session, twin_shape) == set()


def test_an_inqueue_group_is_not_enqueued_again_and_match_fields_pick_the_node() -> None:
    cluster = [gpu_node("a1", A100, 4), gpu_node("a2", A100, 4), queue("q", {A100: 4})]
    group = podgroup("g", namespace="ml", queue="q", phase="Inqueue", request={A100: 3})
    members = [pod(f"p{i}", namespace="ml", card=A100, gpus=1, group="g") for i in range(3)]
    for member in members:
        member["spec"]["containers"][0]["resources"].pop("requests")
        member["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a2"]}]}]}}}
    result = simulate(cluster, [group, *members], UNLIMITED)
    assert result.podgroups["ml/g"].phase == "Running"
    assert {outcome.node for outcome in result.placements.values()} == {"a2"}


def test_counts_that_cannot_be_read_fall_back_instead_of_failing() -> None:
    cluster = [gpu_node("a1", A100, 4), queue("q", {A100: 4})]
    group = podgroup("g", namespace="ml", queue="q", phase="Pending")
    group["spec"]["minMember"] = "two"
    member = pod("p", namespace="ml", card=A100, gpus=1, group="g")
    member["spec"]["containers"][0]["resources"].pop("requests")
    assert simulate(cluster, [group, member], UNLIMITED).podgroups["ml/g"].phase == "Running"


def test_an_alternatives_pod_refused_in_task_mode_quotes_each_alternative_not_the_first() -> None:
    """Issue 18 item 7: simulate's allocation message for an ``A|B`` pod quoted the first alternative's capability
    under the ``A|B`` name (``capability is 2`` while the enqueue check, in job mode, weighs 2 + 1 = 3). A task
    uses one type, so the message gives each alternative its own numbers and never a sum."""
    cluster = [gpu_node("a1", A100, 8), gpu_node("h1", H100, 8), queue("team-a", {A100: 2, H100: 1}),
               pod("held-a", namespace="ml", card=A100, gpus=2, queue="team-a", node_name="a1")]
    lone = pod("flex", namespace="ml", card=f"{A100}|{H100}", gpus=2, queue="team-a")
    result = simulate(cluster, [lone], UNLIMITED)
    reason = result.placements["ml/flex"].reason
    assert reason == ("Queue team-a has insufficient quota for every alternative of NVIDIA-A100|NVIDIA-H100 (a task "
                      "uses one of them): requested 2; NVIDIA-A100 total would be 4, but capability is 2; "
                      "NVIDIA-H100 total would be 2, but capability is 1")
    assert "capability is 3" not in reason


TWO_JOBS_CLUSTER = """\
apiVersion: v1
kind: Node
metadata: {name: cpu-1}
status: {allocatable: {cpu: "256", memory: 1Ti, pods: "110"}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: queue-a}
spec: {weight: 1, capability: {cpu: "100", memory: 200Gi}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: held, namespace: ml}
spec: {queue: queue-a, minMember: 1, minResources: {cpu: "90"}}
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: held-0, namespace: ml, annotations: {scheduling.k8s.io/group-name: held}}
spec: {schedulerName: volcano, nodeName: cpu-1, containers: [{name: c, resources: {requests: {cpu: "90"}}}]}
status: {phase: Running}
"""
TWO_JOBS = "\n---\n".join(f"""\
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {{name: {name}, namespace: ml}}
spec: {{queue: queue-a, minMember: 1, minResources: {{cpu: "10"}}}}
status: {{phase: Pending}}
""" for name in ("first", "second"))


def test_the_readme_two_jobs_example_prints_what_the_readme_shows(tmp_path: Path) -> None:
    """The documentation's ``cardquota simulate --cluster cluster.yaml -f two-jobs.yaml -o table`` example (README or
    docs/), run again (queue-a
    has cpu 100, a running job holds 90, two PodGroups of minResources cpu 10); the table fits 80 columns, each
    reason on its own wrapped line (issue 18 item 15)."""
    readme = all_user_docs()
    command = "$ cardquota simulate --cluster cluster.yaml -f two-jobs.yaml -o table\n"
    shown = readme.split(command, 1)[1].split("```", 1)[0]
    (tmp_path / "cluster.yaml").write_text(TWO_JOBS_CLUSTER)
    (tmp_path / "two-jobs.yaml").write_text(TWO_JOBS)
    out, err = io.StringIO(), io.StringIO()
    argv = ["simulate", "--cluster", str(tmp_path / "cluster.yaml"), "-f", str(tmp_path / "two-jobs.yaml"), "-o",
            "table"]
    run("cardquota", argv, stdout=out, stderr=err)
    assert out.getvalue() == shown
    assert max(map(len, shown.splitlines())) <= 80


def test_simulate_tables_fit_80_columns_and_wide_keeps_every_column() -> None:
    """Issue 18 item 15: ``simulate``'s table was 138 columns on the bundled example."""
    argv = ["simulate", "--cluster", str(REPO / "examples" / "cluster.yaml"), "-f",
            str(REPO / "examples" / "simulate" / "workload.yaml")]
    table, wide = io.StringIO(), io.StringIO()
    run("cardquota", [*argv, "-o", "table"], stdout=table, stderr=io.StringIO())
    run("cardquota", [*argv, "-o", "wide"], stdout=wide, stderr=io.StringIO())
    assert max(map(len, table.getvalue().splitlines())) <= 80
    assert "  Queue team-b has insufficient NVIDIA-A100 quota: requested 64, total would be" in table.getvalue()
    assert wide.getvalue().splitlines()[0].split() == ["POD", "NODE", "CARD-TYPE", "GPU-INDEXES", "REASON"]
    assert "team-b/too-big            Pending  Queue team-b has insufficient NVIDIA-A100 quota: requested 64, " \
           "total would be 64, but capability is 3" in wide.getvalue()


def test_with_the_gate_pods_naming_dra_claims_wait_for_their_queues_dra_quota() -> None:
    """team-a may use 2 devices of the DeviceClass ``gpu.example.com``; three single-pod jobs whose pods name a
    template asking one device each: the gate lets two through, the third waits with the gate's DRA sentence."""
    team = queue("team-a")
    team["spec"]["dra"] = {"capability": {"gpu.example.com": {"count": 2}}}
    team["spec"]["capability"] = {"cpu": "8", "memory": "8Gi"}
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one", "namespace": "ml"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.example.com"}}]}}}}
    workload = []
    for name in ("first", "second", "third"):
        job = volcano_job(name, A100, 1, request={}, queue_name="team-a", min_available=1)
        job["metadata"]["annotations"] = {}
        spec = job["spec"]["tasks"][0]["template"]
        spec["metadata"] = {}
        spec["spec"] = {"containers": [{"name": "w", "resources": {"requests": {"cpu": "1"}}}],
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one"}]}
        workload.append(job)
    result = simulate([node("n1"), team, template], workload, UNLIMITED, card_gate=True)
    assert {name: outcome.phase for name, outcome in result.podgroups.items()} == {
        "ml/first": "Running", "ml/second": "Running", "ml/third": "Inqueue"}
    assert result.podgroups["ml/third"].reason == (
        "waiting at the card-quota gate: queue team-a has 0 of 2 gpu.example.com devices free; 0 pods ahead")


# ------------------------------------------------------------ workloads expanded as their controllers create them

def _simulate_files(tmp_path: Path, cluster: list[dict[str, Any]],
                    workload: list[dict[str, Any]]) -> tuple[int, str, str]:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(cluster))
    (tmp_path / "work.yaml").write_text(yaml.safe_dump_all(workload))
    out, err = io.StringIO(), io.StringIO()
    code = run("cardquota", ["simulate", "--cluster", str(tmp_path / "cluster.yaml"), "-f", str(tmp_path / "work.yaml"),
                             "-o", "json", "--card-gate", "off"], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _gpu_template(gpus: int) -> dict[str, Any]:
    return {"metadata": {"annotations": {"volcano.sh/card.name": "NVIDIA-H100"}},
            "spec": {"containers": [{"name": "m", "image": "m", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


def test_a_deployment_and_a_pytorchjob_are_expanded_and_a_daemonset_is_named(tmp_path: Path) -> None:
    cluster = [gpu_node("h1", "NVIDIA-H100", 8), queue("train", {"NVIDIA-H100": 8})]
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ml"},
                  "spec": {"replicas": 2, "template": {**_gpu_template(1), "spec": {
                      **_gpu_template(1)["spec"], "schedulerName": "volcano"}}}}
    deployment["spec"]["template"]["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] = "train"
    pytorch = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt", "namespace": "ml"},
               "spec": {"runPolicy": {"schedulingPolicy": {"queue": "train"}},
                        "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": _gpu_template(2)},
                                                "Worker": {"replicas": 2, "template": _gpu_template(2)}}}}
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "ml"},
                 "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a"}]}}}}
    code, out, err = _simulate_files(tmp_path, cluster, [deployment, pytorch, daemonset])
    document = json.loads(out)
    assert set(document["placements"]) == {"ml/web-0", "ml/web-1", "ml/pt-master-0", "ml/pt-worker-0",
                                           "ml/pt-worker-1"}
    assert all(outcome["node"] == "h1" for outcome in document["placements"].values())
    assert document["podgroups"] == {"ml/pt": {"phase": "Running"}}
    assert document["notSimulated"] == ["DaemonSet ml/agent (one pod per node)"]
    assert "warning: not simulated: DaemonSet ml/agent (one pod per node)" in err
    assert code == 0


def test_an_input_with_nothing_to_simulate_exits_2(tmp_path: Path) -> None:
    code, _, err = _simulate_files(tmp_path, [gpu_node("h1", "NVIDIA-H100", 8)],
                                   [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}])
    assert code == 2
    assert "nothing to simulate" in err


@pytest.mark.parametrize(("runtime_in", "placed"), [("work", 2), ("cluster", 2), (None, 0)])
def test_a_trainjob_is_expanded_from_its_runtime_wherever_the_input_holds_it(tmp_path: Path, runtime_in: str | None,
                                                                              placed: int) -> None:
    """kubeflow/trainer v2.3.0: one PodGroup named after the TrainJob, minMember every node, the trainer's pods from
    its runtime's template with resourcesPerNode; without the runtime it is named, not simulated."""
    runtime = trainer_runtime("torch-volcano", queue="train", card=H100)
    train = train_job("tj", {"name": "torch-volcano"})
    cluster = [gpu_node("h1", H100, 8), queue("train", {H100: 8}), *([runtime] if runtime_in == "cluster" else [])]
    code, out, err = _simulate_files(tmp_path, cluster, [train, *([runtime] if runtime_in == "work" else [])])
    if not placed:
        assert code == 2
        assert "not simulated: TrainJob ml/tj (its pods are built from the ClusterTrainingRuntime torch-volcano" in err
        return
    document = json.loads(out)
    assert document["podgroups"] == {"ml/tj": {"phase": "Running"}}
    assert {name: outcome["node"] for name, outcome in document["placements"].items()} == {
        "ml/tj-node-0": "h1", "ml/tj-node-1": "h1"}
    assert document["queues"]["train"]["allocated"] == {H100: 8}
    assert code == 0
