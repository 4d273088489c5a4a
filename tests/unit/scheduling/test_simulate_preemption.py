"""``cardquota simulate`` with preemption at the card-quota gate (issue 42, item 4): the evictions a preemptor would
make are printed (victim, priority, cards freed, pods) and made — the victims' pods leave the simulated cluster —
and the preemptor is judged again and placed; under Never (the default) the output is what it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import gpu_labels, node, pod, podgroup, queue

from cardquota.cli import output
from cardquota.cli.main import run
from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.core.scheduling.simulate import Simulation, simulate

H100 = "NVIDIA-H100"
UNLIMITED = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True))
LOW, HIGH = 10, 1000
NODES = [node(name, labels=gpu_labels(H100, count=8), allocatable={"nvidia.com/gpu": "8"}) for name in ("h1", "h2")]


def research(policy: str | None) -> dict[str, Any]:
    return queue("research", {H100: 8}, annotations={"cardquota.io/preemption": policy} if policy else None)


def job(name: str, replicas: int, priority: int, *, gpus: int = 4) -> dict[str, Any]:
    """A Volcano Job of ``replicas`` workers with ``gpus`` H100 each, all of its gang (no card.request: its
    PodGroup is enqueued and its pods judged at the gate)."""
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"schedulerName": "volcano", "queue": "research", "minAvailable": replicas,
                     "tasks": [{"name": "worker", "replicas": replicas, "template": {
                         "metadata": {"annotations": {"volcano.sh/card.name": H100}},
                         "spec": {"priority": priority, "containers": [
                             {"name": "w", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}]}}


def run_both(policy: str | None, *workload: dict[str, Any]) -> Simulation:
    return simulate([*NODES, research(policy)], list(workload), UNLIMITED, card_gate=True)


NEVER_TABLE = """\
POD                NODE  CARD-TYPE
ml/sweep-worker-0  h1    NVIDIA-H100
ml/sweep-worker-1  h1    NVIDIA-H100
ml/llama-worker-0  -     -
  waiting at the card-quota gate: queue research has 0 of 8 NVIDIA-H100 free; 0
  pods ahead
ml/llama-worker-1  -     -
  waiting at the card-quota gate: queue research has 0 of 8 NVIDIA-H100 free; 0
  pods ahead

PODGROUP  PHASE
ml/sweep  Running
ml/llama  Inqueue
  waiting at the card-quota gate: queue research has 0 of 8 NVIDIA-H100 free; 0
  pods ahead

QUEUE     CARD         QUOTA  ALLOCATED  INQUEUE  PENDING  WAITING
research  NVIDIA-H100  8      8          0        8        8
"""
"""(INQUEUE 0: llama's reservation less its pods waiting at the gate, which the gate holds to the quota itself, as
Volcano's capacity plugin deducts scheduling-gated pods; cardquota.core.usage.group_charge.)"""


@pytest.mark.parametrize("policy", [None, "Never", "never"])  # (unset, Never, a value that is no policy)
def test_under_never_simulate_prints_what_it_printed_before(policy: str | None) -> None:
    """The urgent job waits behind the sweep, as without preemption: the same table (pods in their gang's order,
    whatever the hash seed) and the same JSON, with no evictions."""
    result = run_both(policy, job("sweep", 2, LOW), job("llama", 2, HIGH))
    assert output.simulation_table(result) == NEVER_TABLE
    assert result.evictions == []
    assert set(result.as_json()) == {"placements", "podgroups", "queues"}
    assert result.as_json()["placements"]["ml/llama-worker-0"] == {
        "node": None, "cardType": None,
        "reason": "waiting at the card-quota gate: queue research has 0 of 8 NVIDIA-H100 free; 0 pods ahead"}


def test_lower_priority_prints_the_evictions_makes_them_and_places_the_preemptor() -> None:
    result = run_both("LowerPriority", job("sweep", 2, LOW), job("llama", 2, HIGH))
    said = "evicted: preempted by ml/llama (priority 1000) to free 8 NVIDIA-H100 in queue research"
    assert {name: (outcome.node, outcome.reason) for name, outcome in result.placements.items()} == {
        "ml/sweep-worker-0": (None, said), "ml/sweep-worker-1": (None, said),
        "ml/llama-worker-0": ("h1", None), "ml/llama-worker-1": ("h1", None)}
    assert {name: (outcome.phase, outcome.reason) for name, outcome in result.podgroups.items()} == {
        "ml/sweep": ("Pending", said), "ml/llama": ("Running", None)}
    assert result.as_json()["evictions"] == [{
        "kind": "PodGroup", "name": "ml/sweep", "priority": LOW, "queue": "research", "cards": {H100: 8},
        "pods": ["ml/sweep-worker-0", "ml/sweep-worker-1"], "preemptor": "ml/llama", "preemptorPriority": HIGH}]
    assert result.queues["research"]["allocated"] == {H100: 8}  # (the sweep's cards went to the preemptor)
    table = output.simulation_table(result)
    assert ("EVICTED            PRIORITY  CARDS          FOR\n"
            "podgroup ml/sweep  10        8 NVIDIA-H100  ml/llama (priority 1000)\n"
            "  pods: ml/sweep-worker-0, ml/sweep-worker-1\n") in table
    wide = output.simulation_table(result, wide=True)
    assert "podgroup ml/sweep  10        8 NVIDIA-H100  ml/llama (priority 1000)  ml/sweep-worker-0, " \
           "ml/sweep-worker-1" in wide


def test_only_the_needed_victims_are_evicted_the_most_recently_admitted_first() -> None:
    """Two sweeps of 4 fill the quota; a job of 4 evicts one of them, the one admitted last (the preempted-by
    mark lets the preemptor's pods through once)."""
    result = run_both("LowerPriority", job("old", 1, LOW), job("new", 1, LOW), job("llama", 1, HIGH))
    assert [(eviction.name, eviction.priority) for eviction in result.evictions] == [("podgroup ml/new", LOW)]
    assert result.podgroups["ml/old"].phase == "Running"
    assert result.placements["ml/llama-worker-0"].node is not None


def test_a_pod_of_the_cluster_is_evicted_and_its_cards_and_node_freed() -> None:
    """A lone pod of the cluster input (no PodGroup) is the victim: it leaves the simulation, its node's cards
    with it, and the preemptor lands where it was."""
    notebook = pod("notebook", namespace="ml", card=H100, gpus=8, node_name="h1", queue="research", priority=LOW)
    cluster = [NODES[0], research("LowerPriority"), notebook]
    result = simulate(cluster, [job("llama", 2, HIGH)], UNLIMITED, card_gate=True)
    assert [eviction.summary() for eviction in result.evictions] == [
        "pod ml/notebook (priority 10, 8 NVIDIA-H100; pod ml/notebook)"]
    assert {outcome.node for outcome in result.placements.values()} == {"h1"}
    assert "ml/notebook" not in result.placements  # (not of the workload: the evictions table names it)


@pytest.mark.parametrize(("admitted", "why"), [
    (job("peer", 2, HIGH), "no workload admitted in queue research with lower priority than ml/llama (1000)"),
    (job("sweep", 2, LOW, gpus=3), "free even with every lower-priority workload of queue research evicted"),
])
def test_nothing_is_evicted_when_no_set_of_victims_fits(admitted: dict[str, Any], why: str) -> None:
    """An equal-priority job is no victim; a set that would not free enough is not evicted (all or nothing: the
    quota of 8 cannot hold two pods of 5 cards even empty)."""
    result = run_both("LowerPriority", admitted, job("llama", 2, HIGH, gpus=5))
    assert result.evictions == []
    assert result.podgroups["ml/llama"].phase == "Inqueue"
    assert why in str(result.podgroups["ml/llama"].reason)
    assert "not preempting" in str(result.podgroups["ml/llama"].reason)


def test_the_cli_prints_the_evictions_as_text_and_json(tmp_path: Path) -> None:
    cluster, workload = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    cluster.write_text(yaml.safe_dump_all([*NODES, research("LowerPriority")]))
    workload.write_text(yaml.safe_dump_all([job("sweep", 2, LOW), job("llama", 2, HIGH)]))
    text = tmp_path / "out.txt"
    with text.open("w") as stream:
        run("cardquota", ["simulate", "--cluster", str(cluster), "-f", str(workload), "-o", "table"], stdout=stream)
    assert "podgroup ml/sweep  10        8 NVIDIA-H100  ml/llama (priority 1000)" in text.read_text()
    document = tmp_path / "out.json"
    with document.open("w") as stream:
        code = run("cardquota", ["simulate", "--cluster", str(cluster), "-f", str(workload), "-o", "json"],
                   stdout=stream)
    assert [eviction["name"] for eviction in json.loads(document.read_text())["evictions"]] == ["ml/sweep"]
    assert code == 1  # (the evicted pods of the workload are not placed)


def test_a_podgroup_of_the_input_is_a_victim_as_a_whole() -> None:
    """A gang of the cluster input (PodGroup and its bound pods) is evicted whole; its PodGroup goes Pending."""
    gang = [podgroup("sweep", namespace="ml", queue="research", min_member=2, phase="Running"),
            *(pod(f"sweep-{index}", namespace="ml", card=H100, gpus=4, group="sweep", node_name="h1",
                  priority=LOW) for index in range(2))]
    result = simulate([*NODES, research("LowerPriority"), *gang], [job("llama", 1, HIGH)], UNLIMITED,
                      card_gate=True)
    assert [eviction.summary() for eviction in result.evictions] == [
        "podgroup ml/sweep (priority 10, 8 NVIDIA-H100; pods ml/sweep-0, ml/sweep-1)"]
    assert result.placements["ml/llama-worker-0"].node is not None


def test_pods_naming_only_a_priority_class_get_its_value_as_the_api_server_gives_it() -> None:
    """A template with ``priorityClassName`` and no ``priority``: simulate gives the pods the class's value from its
    input (the Priority admission plugin does so at creation), so the urgent job preempts."""
    classes = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value} for name, value in (("urgent", HIGH), ("batch", LOW))]
    urgent, batch = job("llama", 2, HIGH), job("sweep", 2, LOW)
    for manifest, name in ((urgent, "urgent"), (batch, "batch")):
        for task in manifest["spec"]["tasks"]:
            del task["template"]["spec"]["priority"]
            task["template"]["spec"]["priorityClassName"] = name
    result = simulate([*NODES, research("LowerPriority"), *classes], [batch, urgent], UNLIMITED, card_gate=True)
    assert [eviction.victim for eviction in result.evictions] == [("ml", "sweep")]
    assert [eviction.preemptor_priority for eviction in result.evictions] == [HIGH]
