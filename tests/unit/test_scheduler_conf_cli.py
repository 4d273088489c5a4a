"""``kubectl cardquota scheduler-conf`` (and ``cardquota scheduler-conf``): the user's scheduler ConfigMap with the
extender's entry merged in, the entry alone, and the card resources the nodes offer."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from cardquota.cli.main import run
from cardquota.core.ledger import Ledger
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.schedconf import admit
from cardquota.loader import load_paths

REPO = Path(__file__).resolve().parents[2]
CLUSTER = str(REPO / "examples" / "cluster.yaml")
USERS_CONF = """actions: "enqueue, allocate, preempt, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
- plugins:
  - name: drf
  - name: predicates
    arguments:
      predicate.GPUSharingEnable: true
  - name: proportion
  - name: extender
    arguments:
      extender.urlPrefix: http://old-extender:8713
      extender.managedResources: [nvidia.com/gpu]
  - name: nodeorder
    arguments:
      nodeaffinity.weight: 2
configurations:
- name: enqueue
  arguments:
    overcommit-factor: 1.5
"""
USERS: dict[str, Any] = {
    "apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system", "resourceVersion": "42",
                 "labels": {"team": "platform"}},
    "data": {"volcano-scheduler.conf": USERS_CONF, "other": "kept"}}


def cli(*argv: str, prog: str = "kubectl cardquota") -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    assert run(prog, list(argv), out, err) == 0, err.getvalue()
    return out.getvalue(), err.getvalue()


@pytest.fixture
def users_configmap(tmp_path: Path) -> str:
    path = tmp_path / "scheduler.yaml"
    path.write_text(yaml.safe_dump(USERS))
    return str(path)


def _plugins(conf: dict[str, Any]) -> list[list[str]]:
    return [[plugin["name"] for plugin in tier["plugins"]] for tier in conf["tiers"]]


@pytest.mark.parametrize("prog", ["kubectl cardquota", "cardquota"])
def test_with_the_gate_the_merged_entry_keeps_the_enqueue_check_only_and_leaks_nothing(users_configmap: str,
                                                                                     prog: str) -> None:
    """The example cluster offers no mGPU and configures no crossquota: with the card-quota gate (the default, as
    shipped) the extender is asked once per job and never per node, and a down extender stops nothing else."""
    out, err = cli("scheduler-conf", "--cluster", CLUSTER, "--cluster", users_configmap, prog=prog)
    conf = yaml.safe_load(yaml.safe_load(out)["data"]["volcano-scheduler.conf"])
    assert _plugins(conf) == [["priority", "gang"], ["drf", "predicates", "proportion", "nodeorder", "extender"]]
    extender = conf["tiers"][1]["plugins"][4]["arguments"]
    assert extender == {"extender.urlPrefix": "http://cardquota-extender.cardquota-system.svc:8713",
                        "extender.httpTimeout": "500ms", "extender.jobEnqueueableVerb": "jobEnqueueable",
                        "extender.jobEnqueuedVerb": "jobEnqueued", "extender.ignorable": True}
    assert "the extender keeps the enqueue check only" in err
    assert "warning" not in err
    snapshot = Ledger.build(d.manifest for d in load_paths([CLUSTER])).snapshot
    assert admit(yaml.safe_load(out), None, snapshot, PolicyConfig(card_gate=True)).warnings == ()
    # Without the gate the same entry leaves every card quota unchecked at placement: said, not silent.
    assert any("card quotas are not checked when pods are placed" in warning
               for warning in admit(yaml.safe_load(out), None, snapshot, PolicyConfig()).warnings)


def test_managed_resources_is_for_the_stanza_without_the_gate() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert run("kubectl cardquota", ["scheduler-conf", "--cluster", CLUSTER, "--managed-resources", "offered"],
               out, err) == 2
    assert "--managed-resources applies with --card-gate off only" in err.getvalue()
    assert out.getvalue() == ""


@pytest.mark.parametrize("prog", ["kubectl cardquota", "cardquota"])
def test_the_merged_configmap_keeps_the_users_plugins_and_leaks_nothing(users_configmap: str, prog: str) -> None:
    out, err = cli("scheduler-conf", "--cluster", CLUSTER, "--cluster", users_configmap, "--card-gate", "off",
                   prog=prog)
    configmap = yaml.safe_load(out)
    assert configmap["metadata"] == {"name": "volcano-scheduler-configmap", "namespace": "volcano-system",
                                     "labels": {"team": "platform"}}  # not the server's bookkeeping
    assert configmap["data"]["other"] == "kept"
    conf = yaml.safe_load(configmap["data"]["volcano-scheduler.conf"])
    users = yaml.safe_load(USERS_CONF)
    assert conf["actions"] == users["actions"]
    assert conf["configurations"] == users["configurations"]
    assert _plugins(conf) == [["priority", "gang"], ["drf", "predicates", "proportion", "nodeorder", "extender"]]
    assert conf["tiers"][1]["plugins"][:4] == [p for p in users["tiers"][1]["plugins"] if p["name"] != "extender"]
    extender = conf["tiers"][1]["plugins"][4]["arguments"]
    assert extender["extender.urlPrefix"] == "http://cardquota-extender.cardquota-system.svc:8713"
    # The example cluster has queues with a cpu/memory capability: every task must reach the extender.
    assert "extender.managedResources" not in extender
    assert "left out" in err
    assert "warning" not in err
    snapshot = Ledger.build(d.manifest for d in load_paths([CLUSTER])).snapshot
    verdict = admit(configmap, None, snapshot, PolicyConfig())
    assert verdict.allowed
    assert verdict.warnings == ()
    before = admit(USERS, None, snapshot, PolicyConfig())  # what the user had: NPU and MIG pods never checked
    assert any("huawei.com/Ascend910" in warning for warning in before.warnings)


def test_the_offered_card_resources_are_listed_and_written_on_request() -> None:
    out, _ = cli("scheduler-conf", "--cluster", CLUSTER, "--print", "managed-resources")
    offered = out.splitlines()
    assert {"nvidia.com/gpu", "nvidia.com/gpu.shared", "huawei.com/Ascend910", "nvidia.com/mig-1g.5gb"} <= set(offered)
    assert offered == sorted(offered)
    out, _ = cli("scheduler-conf", "--cluster", CLUSTER, "--print", "fragment", "--managed-resources", "offered",
                 "--card-gate", "off")
    (entry,) = yaml.safe_load(out)
    assert entry["name"] == "extender"
    assert entry["arguments"]["extender.managedResources"] == offered


def test_without_a_configmap_volcanos_default_is_merged(tmp_path: Path) -> None:
    nodes_only = tmp_path / "nodes.yaml"
    nodes_only.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "g"},
                                          "status": {"allocatable": {"nvidia.com/gpu": "8"}}}))
    out, err = cli("scheduler-conf", "--cluster", str(nodes_only), "--print", "conf", "--card-gate", "off")
    conf = yaml.safe_load(out)
    assert _plugins(conf)[1][-1] == "extender"
    assert "overcommit" in _plugins(conf)[1]
    assert conf["tiers"][1]["plugins"][-1]["arguments"]["extender.managedResources"] == ["nvidia.com/gpu"]
    assert "default configuration" in err
    gated, _ = cli("scheduler-conf", "--cluster", str(nodes_only), "--print", "conf")
    assert "extender.predicateVerb" not in yaml.safe_load(gated)["tiers"][1]["plugins"][-1]["arguments"]


def test_an_unreadable_conf_is_one_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({**USERS, "data": {"volcano-scheduler.conf": "tiers: ["}}))
    out, err = io.StringIO(), io.StringIO()
    assert run("kubectl cardquota", ["scheduler-conf", "--cluster", str(broken)], out, err) == 2
    assert "volcano-scheduler-configmap" in err.getvalue()
    assert "Traceback" not in err.getvalue()


def test_the_extender_url_can_be_named() -> None:
    url = "http://cardquota-extender.gpu-quotas.svc:8713"
    out, _ = cli("scheduler-conf", "--cluster", CLUSTER, "--print", "fragment", "--extender-url", url)
    (entry,) = yaml.safe_load(out)
    assert entry["arguments"]["extender.urlPrefix"] == url
