"""Issue 40, item 4: an offline verdict that rests on the scheduler's arguments says which it applied and where they
came from (``read: … from ConfigMap …`` or ``assumed: … (the plugins' defaults: …)``), once on stderr; and a card
queue whose ``spec.capability`` gives its card jobs no cpu/memory is warned about at admission, naming
``cardUnlimitedCpuMemory``."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import gpu_node, queue

from cardquota.cli.main import run
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.scheduling.session import read_scheduler_config
from cardquota.core.snapshot import ClusterSnapshot

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "examples" / "cluster.yaml")
WORKLOAD = str(REPO / "examples" / "simulate" / "workload.yaml")
SCHEDULER = "volcano-scheduler-configmap"
DEFAULTS = ("assumed: cardUnlimitedCpuMemory=false, predicate.MGPUEnable=false, crossquota off (the plugins' "
            "defaults: no ConfigMap cardquota-extender-conf or volcano-scheduler-configmap in the input)")
ROOM = {"cpu": "8", "memory": "32Gi"}


def configmap(name: str, namespace: str, conf: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": {"volcano-scheduler.conf": conf}}


UNLIMITED = "tiers:\n- plugins:\n  - name: capacity-card\n    arguments: {cardUnlimitedCpuMemory: true}\n"
LIMITED_WITH_MGPU = ("tiers:\n- plugins:\n  - name: capacity-card\n    arguments: {cardUnlimitedCpuMemory: false}\n"
                     "  - name: predicates\n    arguments: {predicate.MGPUEnable: true}\n  - name: crossquota\n")
EXTENDER_CONF = configmap("cardquota-extender-conf", "cardquota-system", UNLIMITED)
SCHEDULER_CONF = configmap(SCHEDULER, "volcano-system", LIMITED_WITH_MGPU)


@pytest.mark.parametrize(("manifests", "note"), [
    ([], DEFAULTS),
    ([SCHEDULER_CONF], "read: cardUnlimitedCpuMemory=false, predicate.MGPUEnable=true, crossquota on from ConfigMap "
                       "volcano-system/volcano-scheduler-configmap"),
    # the extender's conf first, as the extender reads it; what it does not write is said to be the default
    ([SCHEDULER_CONF, EXTENDER_CONF], "read: cardUnlimitedCpuMemory=true, predicate.MGPUEnable=false, crossquota off "
                                      "from ConfigMap cardquota-system/cardquota-extender-conf "
                                      "(predicate.MGPUEnable not written there: the default)"),
])
def test_the_note_names_each_argument_and_where_it_came_from(manifests: list[dict[str, Any]], note: str) -> None:
    assert read_scheduler_config(manifests, SCHEDULER).note == note


def run_cli(program: str, *argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(program, list(argv), stdout=out, stderr=err)
    return code, err.getvalue()


def dump(tmp_path: Path, *extra: dict[str, Any]) -> str:
    """The bundled example with ``extra`` objects added (as a dump made with the README's command would hold)."""
    path = tmp_path / "cluster.yaml"
    path.write_text(Path(EXAMPLE).read_text() + "\n---\n" + yaml.safe_dump_all(extra))
    return str(path)


@pytest.mark.parametrize("command", [
    ("cardquota", "simulate", "--cluster", "{cluster}", "-f", WORKLOAD, "-o", "json"),
    ("cardquota", "usage", "--cluster", "{cluster}", "-o", "json"),
    ("kubectl cardquota", "usage", "--cluster", "{cluster}", "-o", "json"),
    ("kubectl cardquota", "explain", "pod/diffusion-train-0", "-n", "team-b", "--cluster", "{cluster}"),
    ("kubectl cardquota", "explain", "-f", WORKLOAD, "--cluster", "{cluster}"),
])
def test_offline_commands_say_once_what_they_assumed_or_read(tmp_path: Path, command: tuple[str, ...]) -> None:
    program, *argv = command
    _, err = run_cli(program, *(word.format(cluster=EXAMPLE) for word in argv))
    assert err.splitlines().count(DEFAULTS) == 1, err
    _, err = run_cli(program, *(word.format(cluster=dump(tmp_path, EXTENDER_CONF)) for word in argv))
    read = [line for line in err.splitlines() if line.startswith(("read: ", "assumed: "))]
    assert read == ["read: cardUnlimitedCpuMemory=true, predicate.MGPUEnable=false, crossquota off from ConfigMap "
                    "cardquota-system/cardquota-extender-conf (predicate.MGPUEnable not written there: the default)"]


def warnings_of(manifest: dict[str, Any], snapshot: ClusterSnapshot | None = None) -> list[str]:
    verdict = admit(manifest, None, snapshot or ClusterSnapshot(), PolicyConfig())
    assert verdict.allowed
    return [warning for warning in verdict.warnings if "spec.capability" in warning]


@pytest.mark.parametrize(("capability", "missing"), [
    (None, "cpu or memory"),
    ({"cpu": "8"}, "memory"),
    ({"memory": "8Gi"}, "cpu"),
])
def test_a_card_queue_without_cpu_or_memory_capability_is_warned_naming_the_argument(
        capability: dict[str, str] | None, missing: str) -> None:
    [warning] = warnings_of(queue("team-a", {"NVIDIA-A100": 4}, capability=capability))
    assert warning.startswith(f"queue team-a has a card quota but spec.capability sets no {missing}: ")
    assert "cardUnlimitedCpuMemory" in warning


@pytest.mark.parametrize("manifest", [
    queue("team-a", {"NVIDIA-A100": 4}, capability=ROOM),
    queue("cpu-only", capability=None),
    queue("zero", {"NVIDIA-A100": 0}),
])
def test_no_warning_when_the_queue_gives_cpu_and_memory_or_has_no_cards(manifest: dict[str, Any]) -> None:
    assert warnings_of(manifest) == []


def test_no_warning_when_the_argument_is_known_to_be_on() -> None:
    assert warnings_of(queue("team-a", {"NVIDIA-A100": 4}), ClusterSnapshot(card_unlimited_cpu_memory=True)) == []
    assert warnings_of(queue("team-a", {"NVIDIA-A100": 4}), ClusterSnapshot(card_unlimited_cpu_memory=False))


def test_check_reads_the_argument_from_the_configmap_in_its_input(tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(yaml.safe_dump(queue("team-a", {"NVIDIA-A100": 4})))
    nodes = [gpu_node("a1", "NVIDIA-A100", 8)]
    without = tmp_path / "without.yaml"
    without.write_text(yaml.safe_dump_all(nodes))
    code, err = run_cli("cardquota", "check", "-f", str(queues), "--cluster", str(without), "-o", "json", "--strict")
    assert code == 1  # the warning, and what it rests on
    assert DEFAULTS in err.splitlines()
    on = tmp_path / "on.yaml"
    on.write_text(yaml.safe_dump_all([*nodes, EXTENDER_CONF]))
    assert run_cli("cardquota", "check", "-f", str(queues), "--cluster", str(on), "-o", "json", "--strict") == (0, "")
