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
