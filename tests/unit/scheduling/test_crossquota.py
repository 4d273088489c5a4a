"""crossquota rules with the numbers of crossquota-design.md."""

from __future__ import annotations

from fractions import Fraction

import pytest

from cardquota.core.scheduling.crossquota import (
    CrossQuotaConfig,
    is_cpu_pod,
    is_gpu_node,
    node_quota,
    predicate_refusal,
    score,
    scoring_strategy,
)

GI = 2**30
CONFIG = CrossQuotaConfig.from_arguments({
    "gpu-resource-names": "nvidia.com/gpu,amd.com/gpu", "quota-resources": "cpu,memory",
    "quota.cpu": "32", "quota-percentage.memory": "50", "crossQuotaWeight": 10, "weight.cpu": 10, "weight.memory": 1,
})
QUOTA = {"cpu": Fraction(32), "memory": Fraction(64 * GI)}


def test_the_predicate_example_rejects_on_cpu() -> None:
    """Quota 32 cores / 64Gi, used 28 / 50Gi, request 6 / 10Gi: 34 > 32."""
    used = {"cpu": Fraction(28), "memory": Fraction(50 * GI)}
    refusal = predicate_refusal("gpu-node-1", {"cpu": Fraction(6), "memory": Fraction(10 * GI)}, used, QUOTA, CONFIG)
    assert refusal is not None
    assert refusal.message.startswith("cpu quota exceeded on GPU node gpu-node-1")
    assert predicate_refusal("gpu-node-1", {"cpu": Fraction(4), "memory": Fraction(10 * GI)}, used, QUOTA,
                             CONFIG) is None


def test_most_allocated_example_scores_8_64() -> None:
    used = {"cpu": Fraction(24), "memory": Fraction(40 * GI)}
    request = {"cpu": Fraction(4), "memory": Fraction(8 * GI)}
    assert score("most-allocated", request, used, QUOTA, CONFIG) == pytest.approx((8.75 + 0.75) / 11 * 10)
    assert round(score("most-allocated", request, used, QUOTA, CONFIG), 2) == 8.64


def test_least_allocated_example_scores_6_25() -> None:
    used = {"cpu": Fraction(8), "memory": Fraction(16 * GI)}
    request = {"cpu": Fraction(4), "memory": Fraction(8 * GI)}
    assert score("least-allocated", request, used, QUOTA, CONFIG) == pytest.approx(6.25)


def test_the_strategy_comes_from_the_pod_annotation_with_most_allocated_by_default() -> None:
    key = "volcano.sh/crossquota-scoring-strategy"
    assert scoring_strategy({}) == "most-allocated"
    assert scoring_strategy({key: "least-allocated"}) == "least-allocated"
    assert scoring_strategy({key: "bogus"}) == "most-allocated"


def test_gpu_nodes_and_cpu_pods_are_told_by_the_configured_patterns() -> None:
    assert is_gpu_node({"cpu": 1, "amd.com/gpu": 1}, CONFIG)
    assert not is_gpu_node({"cpu": 1, "memory": 1}, CONFIG)
    assert is_cpu_pod({"cpu": Fraction(1)}, CONFIG)
    assert not is_cpu_pod({"cpu": Fraction(1), "nvidia.com/gpu": Fraction(1)}, CONFIG)
    regex = CrossQuotaConfig.from_arguments({"gpu-resource-names": r"nvidia\.com/mig-.*"})
    assert is_gpu_node({"nvidia.com/mig-1g.5gb": 7}, regex)
    assert not is_gpu_node({"nvidia.com/gpu": 8}, regex)


ALLOCATABLE = {"cpu": Fraction(96), "memory": Fraction(512 * GI)}


@pytest.mark.parametrize(("annotations", "arguments", "expected_cpu"), [
    ({"volcano.sh/crossquota-cpu": "8", "volcano.sh/crossquota-percentage-cpu": "50"}, {"quota.cpu": "16"}, 8),
    ({"volcano.sh/crossquota-percentage-cpu": "50"}, {"quota.cpu": "16"}, 48),
    ({}, {"quota.cpu": "16", "quota-percentage.cpu": "25"}, 16),
    ({}, {"quota-percentage.cpu": "25"}, 24),
    ({}, {}, 96),
], ids=["node-absolute", "node-percentage", "plugin-absolute", "plugin-percentage", "allocatable"])
def test_quota_resolution_follows_the_seeds_priority(annotations: dict[str, str], arguments: dict[str, str],
                                                     expected_cpu: int) -> None:
    config = CrossQuotaConfig.from_arguments({"quota-resources": "cpu", **arguments})
    assert node_quota(annotations, ALLOCATABLE, config) == {"cpu": expected_cpu}


def test_default_weights_and_plugin_weight() -> None:
    config = CrossQuotaConfig.from_arguments({})
    assert (config.plugin_weight, config.weight("cpu"), config.weight("memory")) == (10, 10, 1)
    assert config.quota_resources == ("cpu",)


def test_a_node_already_over_its_quota_takes_no_more_cpu_pods_even_without_that_request() -> None:
    over = {"cpu": Fraction(1), "memory": Fraction(70 * GI)}
    refusal = predicate_refusal("n", {"cpu": Fraction(1)}, over, QUOTA, CONFIG)
    assert refusal is not None
    assert refusal.message.startswith("memory quota exceeded on GPU node n")
    assert CrossQuotaConfig.from_arguments({"crossQuotaWeight": "1e400"}).plugin_weight == 10


OFFERED = CrossQuotaConfig.from_arguments({"quota-percentage.cpu": "20"})
"""Without ``gpu-resource-names``: the card resources nodes offer (issue 40, item 6)."""


@pytest.mark.parametrize(("allocatable", "discovered", "gpu_node"), [
    ({"cpu": 96, "nvidia.com/gpu": 8}, (), True),
    ({"cpu": 192, "huawei.com/Ascend910": 8}, (), True),  # an NPU node is capped as a GPU node is
    ({"cpu": 96, "nvidia.com/mig-1g.10gb": 7}, (), True),
    ({"cpu": 96, "vke.volcengine.com/mgpu-core": 800}, (), True),
    ({"cpu": 96, "example.com/accel": 4}, ("example.com/accel",), True),  # a card discovery named, whatever its name
    ({"cpu": 96, "huawei.com/Ascend910": 0}, (), False),  # none offered
    ({"cpu": 96, "memory": 1, "hugepages-1Gi": 4, "rdma/hca": 1}, (), False),
])
def test_without_gpu_resource_names_gpu_nodes_are_those_offering_a_card_resource(
        allocatable: dict[str, int], discovered: tuple[str, ...], gpu_node: bool) -> None:
    assert is_gpu_node(allocatable, OFFERED, discovered) is gpu_node


@pytest.mark.parametrize(("requests", "discovered", "cpu_pod"), [
    ({"cpu": Fraction(4)}, (), True),
    ({"cpu": Fraction(4), "huawei.com/Ascend910": Fraction(1)}, (), False),
    ({"cpu": Fraction(4), "nvidia.com/gpu": Fraction(0)}, (), True),
    ({"cpu": Fraction(4), "example.com/accel": Fraction(1)}, ("example.com/accel",), False),
    ({"cpu": Fraction(4), "rdma/hca": Fraction(1)}, (), True),
])
def test_without_gpu_resource_names_cpu_pods_are_those_requesting_no_card_resource(
        requests: dict[str, Fraction], discovered: tuple[str, ...], cpu_pod: bool) -> None:
    assert is_cpu_pod(requests, OFFERED, discovered) is cpu_pod


def test_written_gpu_resource_names_are_kept_as_the_plugin_reads_them() -> None:
    nvidia = CrossQuotaConfig.from_arguments({"gpu-resource-names": "nvidia.com/gpu"})
    assert not is_gpu_node({"cpu": 192, "huawei.com/Ascend910": 8}, nvidia)
    assert is_cpu_pod({"cpu": Fraction(4), "huawei.com/Ascend910": Fraction(1)}, nvidia)


def test_the_cap_holds_on_an_npu_node_when_the_names_are_derived() -> None:
    """A CPU-only pod asking 64 of an Ascend node's 192 cpu (over its 20 %) is kept off it with the derived names; with
    ``gpu-resource-names: nvidia.com/gpu`` it went there (CPU work moved onto the NPU nodes)."""
    from builders import node, pod

    from cardquota.core.scheduling.session import SchedulerConfig
    from cardquota.core.scheduling.simulate import simulate

    npu = node("ascend-1", allocatable={"cpu": "192", "huawei.com/Ascend910": "8"})
    cpu_pod = pod("etl", namespace="ml", containers=[{"name": "c", "resources": {"requests": {"cpu": "64"}}}])
    cpu_pod["spec"]["schedulerName"] = "volcano"
    derived = SchedulerConfig(crossquota=OFFERED)
    result = simulate([npu], [cpu_pod], derived)
    assert result.placements["ml/etl"].node is None
    assert "cpu quota exceeded on GPU node ascend-1" in str(result.placements["ml/etl"].reason)
    nvidia = SchedulerConfig(crossquota=CrossQuotaConfig.from_arguments({"gpu-resource-names": "nvidia.com/gpu",
                                                                         "quota-percentage.cpu": "20"}))
    assert simulate([npu], [cpu_pod], nvidia).placements["ml/etl"].node == "ascend-1"
