"""One source of the plugins' arguments: the extender (its mounted conf), ``kubectl cardquota usage``/``explain`` and
the controller's events read ``cardUnlimitedCpuMemory`` from the same place — the extender's conf,
manifests/components/extender/volcano-scheduler.conf shipped as ConfigMap cardquota-extender-conf — and so give the
same cpu/memory numbers and the same reasons for the example cluster."""

from __future__ import annotations

import io
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from cardquota.cli.main import run
from cardquota.core.events import podgroup_event
from cardquota.core.explain import explain
from cardquota.core.ledger import Ledger
from cardquota.core.objects import CPU_MEMORY, PodGroup
from cardquota.core.policies.config import DEFAULT_SCHEDULER_CONFIGMAP
from cardquota.core.quantity import parse_quantity
from cardquota.core.schedconf.source import EXTENDER_CONFIGMAP
from cardquota.core.scheduling.session import SchedulerConfig, Session
from cardquota.loader import load_paths
from cardquota.operator import controller

REPO = Path(__file__).resolve().parents[2]
MOUNTED = REPO / "manifests" / "components" / "extender" / "volcano-scheduler.conf"
CLUSTER = [document.manifest for document in load_paths([str(REPO / "examples" / "cluster.yaml")])]
EXTENDER_CONF: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": EXTENDER_CONFIGMAP, "namespace": "cardquota-system"},
                                 "data": {"volcano-scheduler.conf": MOUNTED.read_text()}}


@pytest.fixture
def cluster_files(tmp_path: Path) -> list[str]:
    conf = tmp_path / "extender-conf.yaml"
    conf.write_text(yaml.safe_dump(EXTENDER_CONF))
    return ["--cluster", str(REPO / "examples" / "cluster.yaml"), "--cluster", str(conf)]


def _plugin(*argv: str, prog: str = "kubectl cardquota") -> str:
    out, err = io.StringIO(), io.StringIO()
    assert run(prog, list(argv), out, err) in (0, 1), err.getvalue()
    return out.getvalue()


QUEUES = ("team-a", "team-b", "cpu-batch")
"""The queues with a cpu/memory capability: team-a and team-b have card pods (where cardUnlimitedCpuMemory changes
the numbers); cpu-batch has etl-nightly-0, running without a PodGroup: in no job of Volcano's, so counted by neither
(``getOrCreateJob`` in Volcano's scheduler cache)."""


@pytest.mark.parametrize("prog", ["kubectl cardquota", "cardquota"])
def test_usage_counts_cpu_memory_as_the_extender_does(cluster_files: list[str], prog: str) -> None:
    """The extender applies its mounted conf (cardUnlimitedCpuMemory: true, a card pod's cpu/memory not charged to
    its queue); ``usage`` over the same cluster, reading the arguments where the extender does, shows the same
    allocated cpu/memory per queue (before, it read only the scheduler ConfigMap: team-a's memory 384Gi)."""
    extender = Session(CLUSTER, SchedulerConfig.from_conf(MOUNTED.read_text()))
    assert extender.config.capacity_card.card_unlimited_cpu_memory
    usage = json.loads(_plugin("usage", *cluster_files, "-o", "json", prog=prog))["queues"]
    for name in QUEUES:
        entry = usage[name]
        shown = {resource: parse_quantity(entry["cpuMemory"]["allocated"][resource]) for resource in CPU_MEMORY}
        counted = {resource: extender.queue_used.get(name, {}).get(resource, Fraction(0)) for resource in CPU_MEMORY}
        assert shown == counted, name


def test_the_events_and_explain_read_the_same_arguments_and_give_the_same_reasons(
        cluster_files: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller reads the extender's conf through the API (stubbed here with the same ConfigMap) into the same
    SchedulerConfig the CLI builds; each waiting PodGroup's event is one of ``explain``'s blockers, word for word."""
    monkeypatch.setattr("cardquota.kube.read_namespaced",
                        lambda api, kind, namespace, name: EXTENDER_CONF if name == EXTENDER_CONFIGMAP else None)
    events_config = controller.plugin_arguments(object(), "cardquota-system")
    cli_config = SchedulerConfig.from_manifests([*CLUSTER, EXTENDER_CONF], DEFAULT_SCHEDULER_CONFIGMAP)
    assert events_config == cli_config.capacity_card == SchedulerConfig.from_conf(MOUNTED.read_text()).capacity_card
    ledger = Ledger.build(CLUSTER)
    said = 0
    for manifest in CLUSTER:
        if manifest.get("kind") != "PodGroup":
            continue
        event = podgroup_event(PodGroup.from_manifest(manifest), ledger, events_config)
        explained = explain([*CLUSTER, EXTENDER_CONF], manifest, cli_config)
        if event is None:
            continue
        said += 1
        assert f"{event.message} ({event.reason})." in explained.blockers
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        text = _plugin("explain", f"podgroup/{name}", "-n", namespace, *cluster_files)
        assert event.reason in text
    assert said  # the example cluster has a waiting PodGroup (team-b/eval-sweep)


def test_the_controller_takes_the_unknown_reading_when_the_conf_cannot_be_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from cardquota.kube import KubeError

    def refused(*_: object) -> None:
        raise KubeError("configmaps is forbidden: HTTP 403")

    monkeypatch.setattr("cardquota.kube.read_namespaced", refused)
    assert controller.plugin_arguments(object(), "cardquota-system") is None
    monkeypatch.setattr("cardquota.kube.read_namespaced", lambda *_: None)
    assert controller.plugin_arguments(object(), "cardquota-system") is None
