"""capacity-card's enqueue check of a job's CPU and memory (capacity-card-design.md, "Job Enqueueable Check", steps
2-3, and "CPU/Memory Quotas: set in capability; if not set, the default quota is also 0"), with the seed's numbers.

One decision, :func:`capacity_card.podgroup_enqueue_refusal`, is asked everywhere the enqueue is decided; each case
below is run through all four of its callers — ``simulate``, the extender's ``jobEnqueueable``, the controller's
events and ``explain`` — and must come out the same.

Where the seed is silent these tests follow Volcano's capacity plugin (and the capacity-card plugin built on it):
the total is ``allocated + inqueue - elastic + minResources`` per resource the job asks for
(``LessEqualWithDimension``); a PodGroup's *inqueue* is its ``minResources`` minus what its bound pods hold
(Volcano deducts what is already allocated), its *elastic* what it holds beyond ``minResources``; with
``cardUnlimitedCpuMemory`` a card job's minResources cpu/memory are dropped (``GetMinResources``) and a card task's
cpu/memory are not counted (``GetTaskRequestResources``); a Volcano Job's PodGroup gets the requests of its first
``minAvailable`` pods as ``minResources`` (the job controller's ``calcPGMinResources``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pytest
from builders import container, gpu_labels, node, pod, podgroup, queue
from volcano_payloads import job_info, session_open

from cardquota.core.events import podgroup_event
from cardquota.core.explain import explain
from cardquota.core.ledger import Ledger
from cardquota.core.objects import PodGroup
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.podgroup import admit
from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import Extender
from cardquota.core.scheduling.session import SchedulerConfig, Session
from cardquota.core.scheduling.simulate import expand_volcano_jobs, simulate

A100 = "NVIDIA-A100"
FLAG_OFF = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=False))
FLAG_ON = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True))


def capped_queue(name: str, quota: dict[str, int], **capability: str) -> dict[str, Any]:
    """The seed's queue-a: card quota in the annotation, cpu/memory in spec.capability (none given: no capability)."""
    manifest = queue(name, quota)
    if capability:
        manifest["spec"]["capability"] = dict(capability)
    return manifest


def job(name: str, queue_name: str, *, phase: str = "Pending", request: dict[str, int] | None = None,
        gpus: int = 0, **minimum: str) -> dict[str, Any]:
    """A PodGroup as Volcano's job controller leaves it: minResources (cpu, memory, and ``gpus`` nvidia.com/gpu),
    and a card.request for a card job."""
    manifest = podgroup(name, namespace="ml", queue=queue_name, phase=phase, request=request)
    if gpus:
        minimum["nvidia.com/gpu"] = str(gpus)
    if minimum:
        manifest["spec"]["minResources"] = minimum
    return manifest


def member(name: str, group: str, *, node_name: str | None = None, **requests: str) -> dict[str, Any]:
    return pod(name, namespace="ml", group=group, node_name=node_name, containers=[container(requests=requests)])


# The seed's queue-a: 10 A100, 5 H100, capability cpu 100, memory 200Gi. Another job already holds 90 cpu and
# 100Gi (bound, Running, minResources = what it holds); queue-b has the same card quota but no spec.capability.
CPU_NODE = node("cpu-1", allocatable={"cpu": "256", "memory": "1Ti"})
GPU_NODE = node("a1", labels=gpu_labels(A100, count=8), allocatable={"nvidia.com/gpu": "8"})
HELD = job("held", "queue-a", phase="Running", cpu="90", memory="100Gi")
HELD_POD = member("held-0", "held", node_name="cpu-1", cpu="90", memory="100Gi")
CLUSTER = [CPU_NODE, GPU_NODE, capped_queue("queue-a", {A100: 10, "NVIDIA-H100": 5}, cpu="100", memory="200Gi"),
           capped_queue("queue-b", {A100: 10}), HELD, HELD_POD]


@dataclass(frozen=True)
class Case:
    group: dict[str, Any]
    config: SchedulerConfig
    reason: str | None
    """The event reason when the job stays Pending; None when it is enqueued."""
    message: str | None = None
    unblock: str | None = None
    """explain's sentence on what would unblock it."""
    without_flag: str | None = None
    """For a job the flag lets in: the message the same job gets with cardUnlimitedCpuMemory off."""


CASES = {
    "cpu over": Case(
        job("train", "queue-a", cpu="20"), FLAG_OFF, "InsufficientCPUQuota",
        "Queue queue-a has insufficient cpu quota: requested 20, total would be 110, but capability is 100",
        "It is 10 cpu over: it can be enqueued when 10 cpu are released (allocated or reserved in queue queue-a), "
        "or when queue queue-a's spec.capability cpu is raised to 110 (by 10)."),
    "memory over": Case(
        job("train", "queue-a", cpu="1", memory="150Gi"), FLAG_OFF, "InsufficientMemoryQuota",
        "Queue queue-a has insufficient memory quota: requested 150Gi, total would be 250Gi, but capability is "
        "200Gi",
        "It is 50Gi of memory over: it can be enqueued when 50Gi of memory is released (allocated or reserved in "
        "queue queue-a), or when queue queue-a's spec.capability memory is raised to 250Gi (by 50Gi)."),
    "cards fit, cpu over": Case(
        job("train", "queue-a", request={A100: 8}, cpu="20", gpus=8), FLAG_OFF,
        "InsufficientCPUQuota",
        "Queue queue-a has insufficient cpu quota: requested 20, total would be 110, but capability is 100",
        "It is 10 cpu over: it can be enqueued when 10 cpu are released (allocated or reserved in queue queue-a), "
        "or when queue queue-a's spec.capability cpu is raised to 110 (by 10), or when the scheduler's "
        "capacity-card argument cardUnlimitedCpuMemory is true (it uses cards)."),
    "cpu-only job under cardUnlimitedCpuMemory": Case(
        job("train", "queue-a", cpu="20"), FLAG_ON, "InsufficientCPUQuota",
        "Queue queue-a has insufficient cpu quota: requested 20, total would be 110, but capability is 100",
        "It is 10 cpu over: it can be enqueued when 10 cpu are released (allocated or reserved in queue queue-a), "
        "or when queue queue-a's spec.capability cpu is raised to 110 (by 10)."),
    "queue without capability": Case(
        job("train", "queue-b", cpu="2"), FLAG_OFF, "EmptyQueueCapability",
        "Queue queue-b has no cpu/memory capability (spec.capability), so its cpu quota is 0: requested 2, total "
        "would be 2, but capability is 0",
        "Queue queue-b sets no spec.capability, so its cpu and memory quotas are 0: it can be enqueued when the "
        "queue's spec.capability sets cpu to at least 2."),
    "card job, cardUnlimitedCpuMemory on": Case(
        job("train", "queue-a", request={A100: 8}, cpu="500", memory="1Ti", gpus=8), FLAG_ON, None,
        without_flag="Queue queue-a has insufficient cpu quota: requested 500, total would be 590, but capability is "
                     "100"),
    "card job in a queue without capability, flag on": Case(
        job("train", "queue-b", request={A100: 8}, cpu="20", gpus=8), FLAG_ON, None,
        without_flag="Queue queue-b has no cpu/memory capability (spec.capability), so its cpu quota is 0: requested "
                     "20, total would be 20, but capability is 0"),
}


def _flag_off(case: Case) -> Case:
    """A job the flag lets in, judged with the flag off: then its cpu is what keeps it Pending."""
    assert case.without_flag is not None
    reason = "EmptyQueueCapability" if "no cpu/memory capability" in case.without_flag else "InsufficientCPUQuota"
    return Case(case.group, FLAG_OFF, reason, case.without_flag)


def _simulated(case: Case) -> tuple[str, str | None]:
    outcome = simulate(CLUSTER, [case.group], case.config).podgroups["ml/train"]
    return outcome.phase, outcome.reason


@pytest.mark.parametrize("name", CASES)
def test_simulate_keeps_the_job_pending_with_the_reason_or_enqueues_it(name: str) -> None:
    case = CASES[name]
    phase, reason = _simulated(case)
    if case.reason is None:
        assert phase == "Inqueue"  # enqueued (it has no pods to place in this workload)
        assert reason == "0/1 pods could be placed; no pods"
        assert _simulated(_flag_off(case)) == ("Pending", case.without_flag)
    else:
        assert (phase, reason) == ("Pending", case.message)


def _enqueueable(case: Case) -> dict[str, Any]:
    extender = Extender(case.config)
    pods_by_node = {"cpu-1": [HELD_POD]}
    nodes = [m for m in CLUSTER if m["kind"] == "Node"]
    queues = [m for m in CLUSTER if m["kind"] == "Queue"]
    # (the session holds the job: Volcano's onSessionOpen sends every job, and only those are judged)
    extender.on_session_open(json.loads(json.dumps(session_open(nodes, queues, [HELD, case.group], pods_by_node))))
    return extender.job_enqueueable({"job": job_info(case.group)})


@pytest.mark.parametrize("name", CASES)
def test_the_extender_job_enqueueable_decides_the_same(name: str) -> None:
    case = CASES[name]
    assert _enqueueable(case) == {"status": 1 if case.reason is None else -1}
    if case.reason is None:
        assert _enqueueable(_flag_off(case)) == {"status": -1}


@pytest.mark.parametrize("name", CASES)
def test_the_controller_event_carries_the_seed_reason_and_numbers(name: str) -> None:
    case = CASES[name]
    for judged in ([case] if case.reason is not None else [case, _flag_off(case)]):
        ledger = Ledger.build([*CLUSTER, judged.group])
        event = podgroup_event(PodGroup.from_manifest(judged.group), ledger, judged.config.capacity_card)
        if judged.reason is None:
            assert event is None
        else:
            assert event is not None
            assert (event.kind, event.name, event.reason, event.message) == ("PodGroup", "train", judged.reason,
                                                                              judged.message)


@pytest.mark.parametrize("name", CASES)
def test_explain_names_the_resource_how_much_over_and_what_unblocks_it(name: str) -> None:
    case = CASES[name]
    result = explain(CLUSTER, case.group, case.config)
    if case.reason is None:
        assert not result.blocked, result.lines()
        off = explain(CLUSTER, case.group, FLAG_OFF)
        assert off.blockers[0] == f"{case.without_flag} ({_flag_off(case).reason})."
        assert off.blockers[1].endswith(", or when the scheduler's capacity-card argument cardUnlimitedCpuMemory is "
                                        "true (it uses cards).")
        return
    assert result.blockers[:2] == [f"{case.message} ({case.reason}).", case.unblock]
    if case.reason != "EmptyQueueCapability":
        resource = "cpu" if case.reason == "InsufficientCPUQuota" else "memory"
        held = "90" if resource == "cpu" else "100Gi"
        holders = f"{resource} in queue queue-a is allocated or reserved by PodGroup ml/held ({held})."
        assert result.blockers[2] == holders


def test_explain_states_the_minimum_and_says_when_releasing_cannot_help() -> None:
    result = explain(CLUSTER, job("train", "queue-a", cpu="120", memory="500Mi"), FLAG_OFF)
    assert "Its spec.minResources ask for cpu 120 and memory 500Mi." in result.facts
    assert result.blockers[1] == (
        "It is 110 cpu over, and releasing cannot help: it asks for 120 on its own, above the capability of 100; "
        "it can be enqueued when queue queue-a's spec.capability cpu is raised to 210 (by 110).")


def test_without_the_plugin_arguments_the_controller_never_blames_cpu_for_a_card_job() -> None:
    """The controller does not read the scheduler's ConfigMap: cardUnlimitedCpuMemory is read as on, so a card job
    gets no cpu event it may not deserve; a CPU-only job's check does not depend on the flag and still gets one."""
    ledger = Ledger.build([*CLUSTER, CASES["cards fit, cpu over"].group, CASES["cpu over"].group])
    card_job = PodGroup.from_manifest(CASES["cards fit, cpu over"].group)
    assert podgroup_event(card_job, ledger) is None
    assert podgroup_event(card_job, ledger, FLAG_OFF.capacity_card) is not None
    cpu_job = podgroup_event(PodGroup.from_manifest(job("other", "queue-a", cpu="20")), ledger)
    assert cpu_job is not None
    assert cpu_job.reason == "InsufficientCPUQuota"


# ------------------------------------------------------------------------------ two jobs, room for one


def test_simulate_enqueues_only_the_first_of_two_jobs_that_do_not_fit_together() -> None:
    """10 cpu are left in queue-a; each job needs 10: the first is enqueued and reserves them (inqueue), the second
    stays Pending — before this check both were enqueued into capacity only one fits."""
    first, second = job("first", "queue-a", cpu="10"), job("second", "queue-a", cpu="10")
    result = simulate(CLUSTER, [first, second], FLAG_OFF)
    assert result.podgroups["ml/first"].phase == "Inqueue"
    assert result.podgroups["ml/second"].as_json() == {
        "phase": "Pending",
        "reason": "Queue queue-a has insufficient cpu quota: requested 10, total would be 110, but capability is 100"}
    assert result.queues["queue-a"]["cpuMemory"]["inqueue"] == {"cpu": "10", "memory": "0"}
    assert result.queues["queue-a"]["cpuMemory"]["allocated"] == {"cpu": "90", "memory": "100Gi"}


def test_the_extender_reserves_a_permitted_jobs_cpu_for_the_rest_of_the_cycle() -> None:
    extender = Extender(FLAG_OFF)
    nodes = [m for m in CLUSTER if m["kind"] == "Node"]
    queues = [m for m in CLUSTER if m["kind"] == "Queue"]
    first, second = job("first", "queue-a", cpu="6"), job("second", "queue-a", cpu="6")
    extender.on_session_open(session_open(nodes, queues, [HELD, first, second], {"cpu-1": [HELD_POD]}))
    assert extender.job_enqueueable({"job": job_info(first)}) == {"status": 1}
    assert extender.job_enqueueable({"job": job_info(second)}) == {"status": -1}
    assert extender.session is not None
    assert extender.session.ledger.cpu_memory("queue-a", False).inqueue == {"cpu": 6}


def test_the_extender_judges_a_cpu_job_and_leaves_a_job_with_nothing_to_judge_to_other_plugins() -> None:
    """A CPU-only job that fits is permitted (and reserves its cpu); one with neither a card request nor
    minResources cpu/memory gets an abstention, as before."""
    extender = Extender(FLAG_OFF)
    cpu, plain = job("cpu", "queue-a", cpu="100"), job("plain", "queue-a")
    extender.on_session_open(session_open([CPU_NODE], [CLUSTER[2]], [cpu, plain]))
    assert extender.job_enqueueable({"job": job_info(cpu)}) == {"status": 1}
    assert extender.job_enqueueable({"job": job_info(plain)}) == {"status": 0}


def test_inqueue_cpu_is_what_the_minimum_still_lacks_and_an_enqueued_job_gets_no_event() -> None:
    """An Inqueue job reserves minResources minus what its bound pods hold (Volcano deducts the allocated part);
    a job already Inqueue is past the check and gets no event, whatever the queue holds."""
    group = job("half", "queue-a", phase="Inqueue", cpu="8", memory="4Gi")
    ledger = Ledger.build([*CLUSTER, group, member("half-0", "half", node_name="cpu-1", cpu="3", memory="1Gi")])
    use = ledger.cpu_memory("queue-a", False)
    assert use.inqueue == {"cpu": 5, "memory": 3 * 2**30}
    assert use.allocated == {"cpu": 93, "memory": 101 * 2**30}
    assert podgroup_event(PodGroup.from_manifest(group), ledger, FLAG_OFF.capacity_card) is None


def test_what_a_job_holds_beyond_its_minimum_is_elastic_and_not_counted_at_enqueue() -> None:
    """A Running job holding 30 cpu with minResources 20 has 10 elastic: allocated + inqueue - elastic is 30 - 10,
    so a job of 80 fits queue-a's 100 exactly (Volcano's ``ExceededPart``)."""
    big = job("big", "queue-a", phase="Running", cpu="20")
    cluster = [CPU_NODE, CLUSTER[2], big, member("big-0", "big", node_name="cpu-1", cpu="30")]
    ledger = Ledger.build(cluster)
    assert ledger.cpu_memory("queue-a", False).elastic == {"cpu": 10}
    assert simulate(cluster, [job("fits", "queue-a", cpu="80")], FLAG_OFF).podgroups["ml/fits"].phase == "Inqueue"
    assert simulate(cluster, [job("over", "queue-a", cpu="81")], FLAG_OFF).podgroups["ml/over"].phase == "Pending"


def test_under_the_flag_a_card_jobs_pods_spend_no_cpu_quota() -> None:
    """A card job's pods hold 60 cpu: with cardUnlimitedCpuMemory they do not count against queue-a's cpu, at enqueue
    nor at allocation (the plugin's GetTaskRequestResources); without it they do."""
    gpu_job = job("gpu", "queue-a", phase="Running", request={A100: 2}, cpu="60", gpus=2)
    gpu_pods = [pod(f"gpu-{i}", namespace="ml", group="gpu", card=A100, gpus=1, node_name="a1",
                    containers=[container(requests={"cpu": "30"}, limits={"nvidia.com/gpu": "1"})]) for i in range(2)]
    cluster = [CPU_NODE, GPU_NODE, capped_queue("queue-a", {A100: 10}, cpu="100", memory="200Gi"), gpu_job, *gpu_pods]
    ledger = Ledger.build(cluster)
    assert ledger.cpu_memory("queue-a", True).allocated == {}
    assert ledger.cpu_memory("queue-a", False).allocated == {"cpu": 60}
    cpu_job = job("cpu", "queue-a", cpu="50")
    assert simulate(cluster, [cpu_job], FLAG_ON).podgroups["ml/cpu"].phase == "Inqueue"
    assert simulate(cluster, [cpu_job], FLAG_OFF).podgroups["ml/cpu"].phase == "Pending"
    session = Session(cluster, FLAG_ON)
    key = session.add_pending(member("cpu-0", "lone", cpu="50"))
    assert session.task_refusal(key) is None  # 50 of 100: the GPU pods' 60 cpu are not the queue's


# ----------------------------------------------------------------------- Volcano Jobs, usage, admission


def volcano_job(min_available: int, *tasks: tuple[str, int, dict[str, str]]) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "vj", "namespace": "ml"},
            "spec": {"queue": "queue-a", "minAvailable": min_available,
                     "tasks": [{"name": name, "replicas": replicas,
                                "template": {"spec": {"containers": [container(requests=requests)]}}}
                               for name, replicas, requests in tasks]}}


def test_a_volcano_job_gets_the_min_resources_its_job_controller_computes() -> None:
    """minAvailable 3 of a 1-pod launcher (4 cpu) and 4 workers (16 cpu, 64Gi): the launcher and 2 workers."""
    manifest = volcano_job(3, ("launcher", 1, {"cpu": "4"}), ("worker", 4, {"cpu": "16", "memory": "64Gi"}))
    (group,) = [m for m in expand_volcano_jobs([manifest]) if m["kind"] == "PodGroup"]
    assert group["spec"]["minResources"] == {"cpu": "36", "memory": "128Gi"}
    result = simulate(CLUSTER, [manifest], FLAG_OFF)
    assert result.podgroups["ml/vj"].as_json() == {
        "phase": "Pending",
        "reason": "Queue queue-a has insufficient cpu quota: requested 36, total would be 126, but capability is 100"}
    assert all(outcome.node is None for outcome in result.placements.values())


def test_task_min_available_counts_first_then_the_other_replicas() -> None:
    """Job minAvailable 3 with worker minAvailable 1 and ps minAvailable 1 (sum 2 ≤ 3): 1 worker, 1 ps, then one
    more worker (``CalcPGMinResources``)."""
    manifest = volcano_job(3, ("worker", 4, {"cpu": "2"}), ("ps", 2, {"cpu": "1", "memory": "1Gi"}))
    manifest["spec"]["tasks"][0]["minAvailable"] = 1
    manifest["spec"]["tasks"][1]["minAvailable"] = 1
    (group,) = [m for m in expand_volcano_jobs([manifest]) if m["kind"] == "PodGroup"]
    assert group["spec"]["minResources"] == {"cpu": "5", "memory": "1Gi"}


def test_usage_shows_cpu_and_memory_inqueue_where_the_queue_has_a_capability() -> None:
    reserved = job("waiting", "queue-a", phase="Inqueue", cpu="6", memory="512Mi")
    usage = Ledger.build([*CLUSTER, reserved]).all_usage()
    assert usage["queue-b"].cpu_memory is None
    assert usage["queue-a"].as_json()["cpuMemory"] == {
        "capability": {"cpu": "100", "memory": "200Gi"}, "allocated": {"cpu": "90", "memory": "100Gi"},
        "inqueue": {"cpu": "6", "memory": "512Mi"}, "elastic": {"cpu": "0", "memory": "0"}}


def test_the_podgroup_webhook_warns_when_the_minimum_can_never_fit_the_capability() -> None:
    snapshot = Ledger.build(CLUSTER).snapshot
    too_big = admit(job("huge", "queue-a", cpu="120"), None, snapshot, PolicyConfig())
    assert too_big.allowed
    assert list(too_big.warnings) == [
        "spec.minResources cpu 120 can never fit queue queue-a, which has a cpu capability of 100: the PodGroup "
        "stays Pending (InsufficientCPUQuota) until the queue's spec.capability allows it"]
    nothing = admit(job("small", "queue-b", memory="1Gi"), None, snapshot, PolicyConfig())
    assert list(nothing.warnings) == [
        "spec.minResources memory 1Gi can never fit queue queue-b, which sets no spec.capability, so its cpu/memory "
        "quota is 0: the PodGroup stays Pending (EmptyQueueCapability) until the queue's spec.capability allows it"]
    fits = admit(job("ok", "queue-a", cpu="100"), None, snapshot, PolicyConfig())  # busy now, but not forever
    card = admit(job("gpu", "queue-b", request={A100: 1}, cpu="8", gpus=1), None, snapshot,
                 PolicyConfig())  # may run under cardUnlimitedCpuMemory, which admission cannot know
    assert not fits.warnings
    assert not card.warnings


def test_a_pod_group_view_keeps_its_min_resources_and_skips_what_is_not_a_quantity() -> None:
    manifest = copy.deepcopy(job("g", "queue-a", cpu="2"))
    manifest["spec"]["minResources"]["memory"] = "lots"
    assert PodGroup.from_manifest(manifest).min_resources == {"cpu": 2}
