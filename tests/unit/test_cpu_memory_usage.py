"""A queue's cpu/memory quota (its ``spec.capability``) and what counts against it, where people read usage:
``kubectl cardquota usage`` (rows after the cards, counted as the scheduler's capacity-card arguments say) and the
operator's metrics (both ways of counting, labelled)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import yaml
from builders import container, gpu_labels, node, pod, podgroup, queue
from hypothesis import given, settings
from hypothesis import strategies as st

from cardquota.cli.main import run
from cardquota.core.ledger import Ledger
from cardquota.operator.metrics import cpu_memory_families

A100 = "NVIDIA-A100"


def objects() -> list[dict[str, Any]]:
    """queue-a (cpu 100, memory 200Gi): a Running card job whose two pods hold 30 cpu each, and a CPU job Inqueue
    with minResources cpu 8, memory 16Gi of which its one bound pod holds 2 cpu, 4Gi; queue-b has no capability."""
    team = queue("queue-a", {A100: 4})
    team["spec"]["capability"] = {"cpu": "100", "memory": "200Gi"}
    gpu_job = podgroup("gpu", namespace="ml", queue="queue-a", phase="Running", request={A100: 2})
    gpu_job["spec"]["minResources"] = {"cpu": "60", "nvidia.com/gpu": "2"}
    cpu_job = podgroup("etl", namespace="ml", queue="queue-a", phase="Inqueue")
    cpu_job["spec"]["minResources"] = {"cpu": "8", "memory": "16Gi"}
    return [node("cpu-1", allocatable={"cpu": "256", "memory": "1Ti"}),
            node("a1", labels=gpu_labels(A100, count=8), allocatable={"nvidia.com/gpu": "8"}),
            team, queue("queue-b", {A100: 1}), gpu_job, cpu_job,
            *[pod(f"gpu-{i}", namespace="ml", group="gpu", card=A100, node_name="a1",
                  containers=[container(requests={"cpu": "30"}, limits={"nvidia.com/gpu": "1"})]) for i in range(2)],
            pod("etl-0", namespace="ml", group="etl", node_name="cpu-1",
                containers=[container(requests={"cpu": "2", "memory": "4Gi"})])]


def scheduler_configmap(unlimited: bool) -> dict[str, Any]:
    conf = {"actions": "enqueue, allocate", "tiers": [{"plugins": [
        {"name": "capacity-card", "arguments": {"cardUnlimitedCpuMemory": unlimited}}]}]}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
            "data": {"volcano-scheduler.conf": yaml.safe_dump(conf)}}


def usage(tmp_path: Path, *extra: dict[str, Any]) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*objects(), *extra]))
    out, err = io.StringIO(), io.StringIO()
    assert run("kubectl cardquota", ["usage", "--cluster", str(path), "-o", "wide"], stdout=out, stderr=err) == 0
    return out.getvalue()


def test_kubectl_usage_adds_cpu_and_memory_rows_for_a_queue_with_a_capability(tmp_path: Path) -> None:
    assert usage(tmp_path).splitlines() == [
        "QUEUE    PARENT  PREEMPTION  CARD         QUOTA  ALLOCATED  INQUEUE  PENDING  FREE   USED  BAR",
        "queue-a  -       Never       NVIDIA-A100  4      2          0        0        2      50%   "
        "[##########..........]",
        "queue-a  -       Never       cpu          100    62         6        -        32     68%   "
        "[##############......]",
        "queue-a  -       Never       memory       200Gi  4Gi        12Gi     -        184Gi  8%    "
        "[##..................]",
        "queue-b  -       Never       NVIDIA-A100  1      0          0        0        1      0%    "
        "[....................]",
    ]


def test_under_card_unlimited_cpu_memory_the_card_jobs_cpu_is_not_the_queues(tmp_path: Path) -> None:
    rows = usage(tmp_path, scheduler_configmap(True)).splitlines()
    assert rows[2] == ("queue-a  -       Never       cpu          100    2          6        -        92     8%    "
                       "[##..................]")


def test_metrics_export_the_capability_and_both_ways_of_counting() -> None:
    families = {family.name: family for family in cpu_memory_families(Ledger.build(objects()))}
    samples = {(name, tuple(sorted(sample.labels.items()))): sample.value
               for name, family in families.items() for sample in family.samples}

    def value(name: str, resource: str, unlimited: str | None = None) -> float:
        labels = {"queue_name": "queue-a", "resource": resource}
        if unlimited is not None:
            labels["card_unlimited_cpu_memory"] = unlimited
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("cardquota_queue_cpu_memory_capability", "memory") == 200 * 2**30
    assert value("cardquota_queue_cpu_memory_allocated", "cpu", "false") == 62
    assert value("cardquota_queue_cpu_memory_allocated", "cpu", "true") == 2
    assert value("cardquota_queue_cpu_memory_inqueue", "memory", "false") == 12 * 2**30
    assert not any(sample.labels["queue_name"] == "queue-b" for family in families.values()
                   for sample in family.samples)


# --------------------------------------------------------------- property: incremental == rebuild, cpu/memory too

CPUS = st.sampled_from([None, "500m", "2", "30"])
capped_queues = st.builds(
    lambda name, cpu: {**queue(name, {A100: 4}), "spec": {"weight": 1, **({"capability": {"cpu": cpu,
                                                                                          "memory": "64Gi"}}
                                                                             if cpu else {})}},
    st.sampled_from(["q1", "q2"]), CPUS)
groups = st.builds(
    lambda name, queue_name, phase, cpu, gpus, request: {
        **podgroup(name, namespace="ml", queue=queue_name, phase=phase, request=request),
        "spec": {"queue": queue_name, "minMember": 1,
                 "minResources": {**({"cpu": cpu} if cpu else {}), "memory": "1Gi",
                                  **({"nvidia.com/gpu": str(gpus)} if gpus else {})}}},
    st.sampled_from(["g1", "g2"]), st.sampled_from(["q1", "q2"]), st.sampled_from(["Inqueue", "Running", "Pending"]),
    CPUS, st.integers(0, 2), st.one_of(st.none(), st.just({A100: 1})))
members = st.builds(
    lambda name, group, node_name, phase, cpu, card: pod(
        name, namespace="ml", group=group, node_name=node_name, phase=phase, card=card,
        containers=[container(requests={"cpu": cpu or "0", "memory": "512Mi"},
                              limits={"nvidia.com/gpu": "1"} if card else None)]),
    st.sampled_from(["p1", "p2", "p3"]), st.sampled_from(["g1", "g2"]), st.sampled_from([None, "a1", "cpu-1"]),
    st.sampled_from([None, "Running", "Succeeded"]), CPUS, st.sampled_from([None, A100]))
nodes = st.sampled_from([node("cpu-1"), node("a1", labels=gpu_labels(A100, count=8),
                                              allocatable={"nvidia.com/gpu": "8"}), node("a1")])
events = st.one_of(capped_queues, groups, members, nodes)


def _identity(manifest: dict[str, Any]) -> tuple[str, str, str]:
    return (manifest["kind"], manifest["metadata"].get("namespace", ""), manifest["metadata"]["name"])


def _cpu_memory_state(ledger: Ledger) -> dict[str, Any]:
    return {(queue_name, unlimited): ledger.cpu_memory(queue_name, unlimited)
            for queue_name in ("q1", "q2") for unlimited in (False, True)}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), events), max_size=30))
def test_cpu_memory_after_any_events_equals_a_full_rebuild(steps: list[tuple[bool, dict[str, Any]]]) -> None:
    ledger = Ledger()
    live: dict[tuple[str, str, str], dict[str, Any]] = {}
    for delete, manifest in steps:
        if delete:
            ledger.delete(manifest)
            live.pop(_identity(manifest), None)
        else:
            ledger.upsert(manifest)
            live[_identity(manifest)] = manifest
        rebuilt = Ledger.build(live.values())
        assert _cpu_memory_state(ledger) == _cpu_memory_state(rebuilt)
        assert ledger._cpu_memory_totals == rebuilt._cpu_memory_totals  # nothing left behind at zero


def test_a_job_becomes_a_card_job_when_a_node_starts_offering_its_minimum_resource_as_cards() -> None:
    """minResources nvidia.com/gpu make a job a card job only once some node offers that resource as a card type
    (the plugin's HasCardResource): the reservation under cardUnlimitedCpuMemory follows the nodes."""
    group = podgroup("g", namespace="ml", queue="q1", phase="Inqueue")
    group["spec"]["minResources"] = {"cpu": "4", "nvidia.com/gpu": "1"}
    capped = queue("q1", {A100: 4})
    capped["spec"]["capability"] = {"cpu": "10"}
    ledger = Ledger.build([capped, group, node("a1")])
    assert ledger.cpu_memory("q1", True).inqueue == {"cpu": 4}
    ledger.upsert(node("a1", labels=gpu_labels(A100, count=8), allocatable={"nvidia.com/gpu": "8"}))
    assert ledger.cpu_memory("q1", True).inqueue == {}
    assert ledger.cpu_memory("q1", False).inqueue == {"cpu": 4}
    ledger.delete(node("a1"))
    assert ledger.cpu_memory("q1", True).inqueue == {"cpu": 4}
