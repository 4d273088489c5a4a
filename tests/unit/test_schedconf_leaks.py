"""Where the scheduler's configuration lets work past the rules (cardquota.core.schedconf.extender), the merged
configuration (fragment) and the one source of the plugins' arguments (source).

Volcano facts relied on (v1.15.1):
* pkg/scheduler/plugins/extender/extender.go, ``IsInterested``: with ``extender.managedResources`` non-empty, only
  tasks with one of them in a container's or init container's requests or limits reach the task verbs.
* pkg/scheduler/framework/session_plugins.go, ``JobEnqueueable``: the first reject rejects; a tier in which a voter
  permitted decides, later tiers are not asked; ``isEnabled(EnabledJobEnqueued)`` gates each voter.
* pkg/scheduler/plugins/{capacity,overcommit,proportion,resourcequota}: permit or reject; sla: permit or abstain.
* installer/helm/chart/volcano/config/volcano-scheduler.conf: the default configuration.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.schedconf import admit
from cardquota.core.schedconf.extender import (
    argument_disagreements,
    conf_leaks,
    enqueue_leaks,
    managed_resource_leaks,
    offered_resources,
    placement_needs,
    plugin_entries,
)
from cardquota.core.schedconf.fragment import DEFAULT_CONF, extender_stanza, merged_conf
from cardquota.core.schedconf.source import EXTENDER_CONFIGMAP, arguments_text
from cardquota.core.snapshot import ClusterSnapshot, node_record, queue_record

EXT = {"name": "extender", "arguments": {"extender.jobEnqueueableVerb": "jobEnqueueable",
                                         "extender.predicateVerb": "predicate",
                                         "extender.allocateFuncVerb": "allocateFunc"}}


def conf(*tiers: list[Any]) -> dict[str, Any]:
    return {"actions": "enqueue, allocate", "tiers": [{"plugins": [p if isinstance(p, dict) else {"name": p}
                                                                    for p in tier]} for tier in tiers]}


def managed(*names: str) -> dict[str, Any]:
    return {"name": "extender", "arguments": {**EXT["arguments"], "extender.managedResources": list(names)}}


@pytest.mark.parametrize(("tiers", "expected"), [
    # The extender last among its tier's voters, no voter in an earlier tier: its vote counts.
    ([["priority", "gang"], ["overcommit", "proportion", EXT]], []),
    # A voter in an earlier tier that may permit decides without asking the extender.
    ([["overcommit"], [EXT]], ["tiers[0].plugins[0]"]),
    ([["sla", "gang"], ["proportion", EXT]], ["tiers[0].plugins[0]"]),
    # ... unless its enqueue vote is switched off.
    ([[{"name": "overcommit", "enableJobEnqueued": False}], [EXT]], []),
    # A voter after the extender in its tier that may reject overrules a permit the extender reserved for.
    ([["gang"], [EXT, "drf", "proportion"]], ["tiers[1].plugins[2]"]),
    # sla never rejects: after the extender it is harmless.
    ([["gang"], [EXT, "sla"]], []),
    # Voters in later tiers are not asked once the extender's tier permitted: not a leak of the extender's vote.
    ([[EXT], ["proportion"]], []),
])
def test_the_enqueue_vote_counts_only_where_session_plugins_asks_it_last(tiers: list[Any], expected: list[str]
                                                                         ) -> None:
    assert [leak.path for leak in enqueue_leaks(plugin_entries(conf(*tiers)))] == expected


def test_an_extender_without_its_enqueue_verb_or_switched_off_is_a_leak() -> None:
    without = {"name": "extender", "arguments": {"extender.predicateVerb": "predicate"}}
    (leak,) = enqueue_leaks(plugin_entries(conf([without])))
    assert "jobEnqueueableVerb" in leak.message
    (leak,) = enqueue_leaks(plugin_entries(conf([{**EXT, "enableJobEnqueued": "false"}])))
    assert "enableJobEnqueued" in leak.message


NODE_ALLOCATABLE = [{"cpu": "64", "nvidia.com/gpu": "8"}, {"cpu": "64", "nvidia.com/mig-1g.5gb": "14"},
                    {"huawei.com/Ascend910": "8", "memory": "1Ti"}, {"vke.volcengine.com/mgpu-core": "400",
                                                                      "vke.volcengine.com/mgpu-memory": "98304"},
                    {"nvidia.com/gpumem": "81920", "nvidia.com/gpu": "0", "rdma/hca": "1"}]


def test_offered_resources_are_the_card_and_mgpu_resources_nodes_have() -> None:
    assert offered_resources(NODE_ALLOCATABLE, ["example.com/discovered"]) == {
        "nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "huawei.com/Ascend910", "vke.volcengine.com/mgpu-core",
        "vke.volcengine.com/mgpu-memory", "example.com/discovered"}


@pytest.mark.parametrize(("stanza", "crossquota", "capability", "expected"), [
    (EXT, True, ["team-a"], 0),  # no managedResources: every task reaches the extender
    (managed("nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "huawei.com/Ascend910"), False, [], 0),
    (managed("nvidia.com/gpu"), False, [], 1),  # MIG and NPU pods never checked
    (managed("nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "huawei.com/Ascend910"), True, [], 1),
    (managed("nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "huawei.com/Ascend910"), False, ["team-a"], 1),
    (managed("nvidia.com/gpu"), True, ["team-a"], 2),
])
def test_managed_resources_leaks(stanza: dict[str, Any], crossquota: bool, capability: list[str],
                                 expected: int) -> None:
    (entry,) = plugin_entries(conf([stanza]))
    offered = {"nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "huawei.com/Ascend910"}
    leaks = managed_resource_leaks(entry, offered, crossquota=crossquota, capability_queues=capability)
    assert len(leaks) == expected
    if expected and not crossquota and not capability:
        assert "huawei.com/Ascend910, nvidia.com/mig-1g.5gb" in leaks[0].message


def test_dra_quotas_need_every_task_at_the_extender_without_the_gate_and_none_with_it() -> None:
    """Without the gate the extender checks a queue's DRA quota per task: managedResources would keep pods without
    cards (the usual DRA pods) from it. With the gate the gate holds the DRA quotas: only mGPU tasks must reach it,
    and the gated stanza asks no task verb for DRA quotas."""
    (entry,) = plugin_entries(conf([managed("nvidia.com/gpu")]))
    offered = {"nvidia.com/gpu"}
    [leak] = managed_resource_leaks(entry, offered, crossquota=False, capability_queues=[], dra_queues=["team-a"])
    assert "the DRA quotas of team-a not checked for them" in leak.message
    assert managed_resource_leaks(entry, offered, crossquota=False, capability_queues=[], dra_queues=["team-a"],
                                  card_gate=True) == []
    assert placement_needs(offered, crossquota=False) == []


def test_arguments_written_twice_and_differently_are_named() -> None:
    scheduler = plugin_entries(conf([EXT, {"name": "capacity-card", "arguments": {"cardUnlimitedCpuMemory": False}},
                                     {"name": "predicates", "arguments": {"predicate.GPUSharingEnable": True,
                                                                          "predicate.MGPUEnable": "true"}}]))
    extender_conf = plugin_entries(conf([{"name": "capacity-card", "arguments": {"cardUnlimitedCpuMemory": True}},
                                         {"name": "predicates", "arguments": {"predicate.MGPUEnable": True}}]))
    (leak,) = argument_disagreements(scheduler, extender_conf)
    assert leak.path == "tiers[0].plugins[1]"
    assert "cardUnlimitedCpuMemory" in leak.message
    # "true" and true are the same; Volcano's own predicates arguments are not compared
    assert argument_disagreements(scheduler[2:], extender_conf) == []


def test_merging_keeps_the_users_plugins_and_puts_the_extender_after_the_voters() -> None:
    users = conf(["priority", "gang"], [{"name": "drf", "enablePreemptable": False}, "proportion",
                                        {"name": "extender", "arguments": {"extender.urlPrefix": "http://old"}},
                                        "nodeorder"], ["binpack"])
    users["configurations"] = [{"name": "enqueue", "arguments": {"overcommit-factor": 1.2}}]
    merged = merged_conf(users, extender_stanza(["nvidia.com/gpu"]))
    assert merged["configurations"] == users["configurations"]
    assert [[p["name"] for p in tier["plugins"]] for tier in merged["tiers"]] == [
        ["priority", "gang"], ["drf", "proportion", "nodeorder", "extender"], ["binpack"]]
    assert merged["tiers"][1]["plugins"][0] == {"name": "drf", "enablePreemptable": False}
    assert merged["tiers"][1]["plugins"][3]["arguments"]["extender.managedResources"] == ["nvidia.com/gpu"]
    assert enqueue_leaks(plugin_entries(merged)) == []
    assert users["tiers"][1]["plugins"][2]["arguments"] == {"extender.urlPrefix": "http://old"}  # not changed


def test_merging_into_nothing_is_volcanos_default_with_the_extender() -> None:
    merged = merged_conf(None, extender_stanza())
    assert merged["tiers"][0] == DEFAULT_CONF["tiers"][0]
    assert merged["tiers"][1]["plugins"][-1] == extender_stanza()
    assert "extender.managedResources" not in merged["tiers"][1]["plugins"][-1]["arguments"]
    assert conf_leaks(plugin_entries(merged), offered={"nvidia.com/mig-1g.5gb"}, capability_queues=["q"]) == []


def _configmap(name: str, text: str, namespace: str = "volcano-system") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": {"volcano-scheduler.conf": text}}


def test_the_plugins_arguments_come_from_the_extenders_conf_first() -> None:
    scheduler = _configmap("volcano-scheduler-configmap", "tiers: []\n")
    extender = _configmap(EXTENDER_CONFIGMAP, "tiers: [{plugins: [{name: capacity-card}]}]\n", "cardquota-system")
    assert arguments_text([scheduler, extender], "volcano-scheduler-configmap").text == extender["data"][
        "volcano-scheduler.conf"]
    assert arguments_text([scheduler], "volcano-scheduler-configmap").text == "tiers: []\n"
    assert arguments_text([], "volcano-scheduler-configmap").text is None


def test_the_configmap_policy_warns_where_the_conf_leaks() -> None:
    """Allowed (a valid configuration), with a warning per leak: MIG and NPU resources nodes offer left out of
    managedResources, the cpu/memory capability of a queue made unreachable, a voter after the extender."""
    nodes = {name: node_record({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                                "status": {"allocatable": allocatable}})
             for name, allocatable in (("a", {"nvidia.com/gpu": "8"}), ("m", {"nvidia.com/mig-1g.5gb": "7"}),
                                       ("n", {"huawei.com/Ascend910": "8"}))}
    queues = {"team-a": queue_record({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                      "metadata": {"name": "team-a"}, "spec": {"capability": {"cpu": "10"}}})}
    snapshot = ClusterSnapshot(nodes=nodes, queues=queues)
    text = yaml.safe_dump(conf(["gang"], [managed("nvidia.com/gpu"), "proportion"]))
    verdict = admit(_configmap("volcano-scheduler-configmap", text), None, snapshot, PolicyConfig())
    assert verdict.allowed
    assert len(verdict.warnings) == 3
    assert any("huawei.com/Ascend910, nvidia.com/mig-1g.5gb" in warning for warning in verdict.warnings)
    assert any("capability of team-a" in warning for warning in verdict.warnings)
    assert any(warning.startswith("tiers[1].plugins[1]: proportion") for warning in verdict.warnings)
    fixed = yaml.safe_dump(merged_conf(yaml.safe_load(text), extender_stanza()))
    assert admit(_configmap("volcano-scheduler-configmap", fixed), None, snapshot, PolicyConfig()).warnings == ()


def test_the_stanza_registers_no_queue_overuse() -> None:
    """Volcano's allocate skips every job of a queue its Overused vote names (actions/allocate/allocate.go,
    ``if ssn.Overused(queue)``), and the extender plugin answers overused for every queue when it cannot reach the
    service and ignorable is false (plugins/extender/extender.go, ``return !ep.config.ignorable``), v1.15.1: card
    quotas are checked per card type and per task instead."""
    arguments = extender_stanza()["arguments"]
    assert "extender.queueOverusedVerb" not in arguments
    assert arguments["extender.ignorable"] is False
    assert {"extender.predicateVerb", "extender.allocateFuncVerb", "extender.deallocateFuncVerb",
            "extender.jobEnqueueableVerb", "extender.onSessionCloseVerb"} <= set(arguments)


PLUGIN_NAMES = st.sampled_from(["priority", "gang", "conformance", "drf", "predicates", "nodeorder", "binpack",
                                "overcommit", "proportion", "capacity", "resourcequota", "sla", "extender"])


@given(st.lists(st.lists(PLUGIN_NAMES, max_size=6), max_size=4))
def test_merging_any_configuration_leaves_the_vote_where_it_counts(tiers: list[list[str]]) -> None:
    """Whatever the user's tiers, the merged configuration has one extender, every other plugin in its tier and order,
    and no enqueue leak (no voter that may permit in an earlier tier, none that may reject after it)."""
    users = conf(*tiers)
    merged = merged_conf(users, extender_stanza())
    names = _names(merged)
    assert sum(name == "extender" for tier in names for name in tier) == 1
    others = [[name for name in tier if name != "extender"] for tier in names]
    assert others[:len(tiers)] == [[name for name in tier if name != "extender"] for tier in tiers]
    assert enqueue_leaks(plugin_entries(merged)) == []


def _names(configuration: dict[str, Any]) -> list[list[str]]:
    return [[plugin["name"] for plugin in tier["plugins"]] for tier in configuration["tiers"]]
