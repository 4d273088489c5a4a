"""mGPU allocation: the design's multi-card "2,1,3" example, binpack and spread, the filter rules."""

from __future__ import annotations

from typing import Any

import pytest

from cardquota.core.scheduling.mgpu import (
    MGPUConfig,
    allocate,
    filter_refusal,
    node_model,
    pod_shares,
    result_annotations,
)
from cardquota.core.scheduling.refusal import Refusal


def mgpu_node(cards: int = 4, *, policy: str | None = None, multiple: bool = False,
              memory_per_card: int = 24576) -> dict[str, Any]:
    labels = {}
    if policy:
        labels["vke.volcengine.com/mgpu-compute-policy"] = policy
    if multiple:
        labels["vke.volcengine.com/mgpu-multiple-gpu"] = "true"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "m1", "labels": labels},
            "status": {"allocatable": {"vke.volcengine.com/mgpu-core": str(100 * cards),
                                       "vke.volcengine.com/mgpu-memory": str(memory_per_card * cards)}}}


def mgpu_pod(*containers: tuple[str, int, int | None], multiple: str | None = None, policy: str | None = None,
             indexes: dict[str, str] | None = None) -> dict[str, Any]:
    annotations = dict(indexes or {})
    if multiple is not None:
        annotations["vke.volcengine.com/container-multiple-gpu"] = multiple
    if policy is not None:
        annotations["vke.volcengine.com/mgpu-compute-policy"] = policy
    specs = []
    for name, core, memory in containers:
        requests = {"vke.volcengine.com/mgpu-core": str(core)}
        if memory is not None:
            requests["vke.volcengine.com/mgpu-memory"] = str(memory)
        specs.append({"name": name, "resources": {"requests": requests}})
    return {"metadata": {"name": "p", "annotations": annotations}, "spec": {"containers": specs}}


def test_the_design_example_2_1_3_gives_each_container_distinct_cards() -> None:
    """``"2,1,3"``: container 0 shares two cards, container 1 one, container 2 three (a 4-card node)."""
    pod = mgpu_pod(("c0", 100, 4096), ("c1", 50, 2048), ("c2", 150, 6144), multiple="2,1,3",
                   policy="native-burst-share")
    shares = pod_shares(pod)
    assert not isinstance(shares, Refusal)
    assert [(s.container, s.cards, s.core, s.memory) for s in shares] == [
        ("c0", 2, 50, 2048), ("c1", 1, 50, 2048), ("c2", 3, 50, 2048)]
    node = node_model(mgpu_node(4, policy="native-burst-share", multiple=True), [])
    assert node is not None
    assert filter_refusal(pod, shares, node) is None
    allocation = allocate(shares, node, MGPUConfig(enabled=True))
    assert allocation is not None
    assert {name: len(set(cards)) for name, cards in allocation.indexes.items()} == {"c0": 2, "c1": 1, "c2": 3}
    load = [0] * 4
    for share in shares:
        for index in allocation.indexes[share.container]:
            load[index] += share.core
    assert max(load) <= 100


def test_binpack_fills_the_used_card_and_spread_picks_an_empty_one() -> None:
    busy = mgpu_pod(("old", 50, 4096), indexes={"vke.volcengine.com/gpu-index-container-old": "2"})
    shares = pod_shares(mgpu_pod(("new", 30, 2048)))
    assert not isinstance(shares, Refusal)
    binpack = allocate(shares, node_model(mgpu_node(4), [busy]), MGPUConfig(enabled=True, policy="binpack"))
    spread = allocate(shares, node_model(mgpu_node(4), [busy]), MGPUConfig(enabled=True, policy="spread"))
    assert binpack is not None
    assert spread is not None
    assert binpack.indexes == {"new": (2,)}
    assert spread.indexes == {"new": (0,)}


def test_weight_of_core_balances_core_against_memory() -> None:
    """Card 0 is core-heavy, card 1 memory-heavy: the weight decides which one binpack fills."""
    node_manifest = mgpu_node(2)
    pods = [mgpu_pod(("a", 80, 1024), indexes={"vke.volcengine.com/gpu-index-container-a": "0"}),
            mgpu_pod(("b", 10, 20000), indexes={"vke.volcengine.com/gpu-index-container-b": "1"})]
    shares = pod_shares(mgpu_pod(("new", 10, 1024)))
    assert not isinstance(shares, Refusal)
    core_heavy = allocate(shares, node_model(node_manifest, pods), MGPUConfig(enabled=True, weight_of_core=1.0))
    memory_heavy = allocate(shares, node_model(node_manifest, pods), MGPUConfig(enabled=True, weight_of_core=0.0))
    assert core_heavy is not None
    assert memory_heavy is not None
    assert (core_heavy.indexes["new"], memory_heavy.indexes["new"]) == ((0,), (1,))


def test_whole_cards_take_idle_cards_only_and_nothing_fits_when_none_is_idle() -> None:
    shares = pod_shares(mgpu_pod(("w", 200, None)))
    assert not isinstance(shares, Refusal)
    assert [(s.cards, s.core) for s in shares] == [(2, 100)]
    busy = [mgpu_pod(("x", 10, 512), indexes={"vke.volcengine.com/gpu-index-container-x": "0"})]
    allocation = allocate(shares, node_model(mgpu_node(3), busy), MGPUConfig(enabled=True))
    assert allocation is not None
    assert allocation.indexes == {"w": (1, 2)}
    busier = [*busy, mgpu_pod(("y", 10, 512), indexes={"vke.volcengine.com/gpu-index-container-y": "1"})]
    assert allocate(shares, node_model(mgpu_node(3), busier), MGPUConfig(enabled=True)) is None


def test_max_containers_per_card_is_respected() -> None:
    on_card_0 = [mgpu_pod((f"c{i}", 1, 256), indexes={f"vke.volcengine.com/gpu-index-container-c{i}": "0"})
                 for i in range(2)]
    shares = pod_shares(mgpu_pod(("new", 1, 256)))
    assert not isinstance(shares, Refusal)
    node = node_model(mgpu_node(1), on_card_0)
    assert node is not None
    assert allocate(shares, node, MGPUConfig(enabled=True, max_containers_per_card=2)) is None
    assert allocate(shares, node, MGPUConfig(enabled=True, max_containers_per_card=3)) is not None


@pytest.mark.parametrize(("pod", "node", "fragment"), [
    (mgpu_pod(("c", 30, 1024), policy="guaranteed-burst-share"), mgpu_node(2), "runs mGPU policy fixed-share"),
    (mgpu_pod(("c", 100, 1024), multiple="2", policy="native-burst-share"), mgpu_node(2, policy="native-burst-share"),
     "does not enable multiple-mGPU pods"),
    (mgpu_pod(("c", 300, None)), mgpu_node(2), "asks for 3 cards, node m1 has 2"),
])
def test_filter_rules(pod: dict[str, Any], node: dict[str, Any], fragment: str) -> None:
    shares = pod_shares(pod)
    assert not isinstance(shares, Refusal)
    model = node_model(node, [])
    assert model is not None
    refusal = filter_refusal(pod, shares, model)
    assert refusal is not None
    assert fragment in refusal.message


def test_result_annotations_and_schedule_modes() -> None:
    shares = pod_shares(mgpu_pod(("c1", 100, 2048), ("c2", 100, 2048), multiple="1,2", policy="native-burst-share"))
    assert not isinstance(shares, Refusal)
    node_manifest = mgpu_node(3, policy="native-burst-share", multiple=True)
    node_manifest["metadata"]["annotations"] = {"vke.volcengine.com/mgpu-card-ids": "GPU-a,GPU-b,GPU-c"}
    model = node_model(node_manifest, [])
    assert model is not None
    allocation = allocate(shares, model, MGPUConfig(enabled=True))
    assert allocation is not None
    by_index = result_annotations(allocation, model, MGPUConfig(enabled=True))
    assert by_index == {"vke.volcengine.com/gpu-index-container-c1": "0",
                        "vke.volcengine.com/gpu-index-container-c2": "1,2", "vke.volcengine.com/assumed": "true"}
    by_id = result_annotations(allocation, model, MGPUConfig(enabled=True, schedule_mode="id"))
    assert by_id["vke.volcengine.com/gpu-index-container-c2"] == "GPU-b,GPU-c"


def test_config_from_the_predicates_plugin_arguments() -> None:
    config = MGPUConfig.from_arguments({"predicate.MGPUEnable": True, "predicate.MGPUPolicy": "Spread",
                                        "predicate.MGPUWeightOfCore": 20, "predicate.MGPUScheduleMode": "id",
                                        "predicate.MGPUMaxContainersPerCard": 8})
    assert config == MGPUConfig(True, "spread", 0.2, "id", 8)
    assert MGPUConfig.from_arguments({}) == MGPUConfig()


def test_a_node_without_mgpu_has_no_model_and_unreadable_pods_are_refused() -> None:
    assert node_model({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "8"}}}, []) is None
    assert isinstance(pod_shares(mgpu_pod(("c", 50, 1024), multiple="1,1")), Refusal)
    assert pod_shares({"spec": {"containers": [{"name": "plain"}]}}) == []


def test_multiple_mgpu_pods_need_no_policy_annotation() -> None:
    pod = mgpu_pod(("c", 100, 2048), multiple="2")
    shares = pod_shares(pod)
    assert not isinstance(shares, Refusal)
    model = node_model(mgpu_node(2, policy="native-burst-share", multiple=True), [])
    assert model is not None
    assert filter_refusal(pod, shares, model) is None


def test_a_search_without_any_allocation_ends_at_once() -> None:
    """Nine containers of 60 % on eight cards: no allocation exists; the search must not try them all."""
    shares = pod_shares(mgpu_pod(*[(f"c{i}", 60, 1024) for i in range(9)]))
    assert not isinstance(shares, Refusal)
    model = node_model(mgpu_node(8), [])
    assert model is not None
    assert allocate(shares, model, MGPUConfig(enabled=True)) is None
    fits = pod_shares(mgpu_pod(*[(f"c{i}", 60, 1024) for i in range(8)]))
    assert not isinstance(fits, Refusal)
    allocation = allocate(fits, model, MGPUConfig(enabled=True))
    assert allocation is not None
    assert sorted(cards[0] for cards in allocation.indexes.values()) == list(range(8))
