"""capacity-card rules, one test per worked example of capacity-card-design.md, plus the edges around them."""

from __future__ import annotations

from fractions import Fraction

import pytest

from cardquota.core.scheduling.capacity_card import (
    EMPTY_CAPABILITY,
    INSUFFICIENT_CPU,
    INSUFFICIENT_MEMORY,
    INSUFFICIENT_SCALAR,
    CapacityCardConfig,
    cpu_memory_refusal,
    fitting_alternatives,
    job_enqueue_refusal,
    node_order_score,
    queue_capability,
    task_allocate_refusal,
)

A100, H100, T4 = "NVIDIA-A100", "NVIDIA-H100", "NVIDIA-T4"


def test_example_1_a_job_of_4_a100_enqueues_in_a_queue_of_5() -> None:
    assert job_enqueue_refusal("team-a", {A100: 4}, {A100: 5}, {}, {}) is None
    refusal = job_enqueue_refusal("team-a", {A100: 6}, {A100: 5}, {}, {})
    assert refusal is not None
    assert refusal.reason == INSUFFICIENT_SCALAR
    assert refusal.message == ("Queue team-a has insufficient NVIDIA-A100 quota: requested 6, total would be 6, "
                               "but capability is 5")


def test_job_mode_sums_the_alternatives_the_seeds_a100_5_h100_3_example() -> None:
    """Queue A100=5, H100=3; allocated A100=2, H100=1; A100|H100 4 more: (2+1+4) = 7 <= 8."""
    capability, allocated = {A100: 5, H100: 3}, {A100: 2, H100: 1}
    assert job_enqueue_refusal("q", {f"{A100}|{H100}": 4}, capability, allocated, {}) is None
    refusal = job_enqueue_refusal("q", {f"{A100}|{H100}": 6}, capability, allocated, {})
    assert refusal is not None
    assert "requested 6, total would be 9, but capability is 8" in refusal.message


def test_job_mode_consideration_6_cards_over_two_types_of_4() -> None:
    assert job_enqueue_refusal("q", {f"{A100}|{H100}": 6}, {A100: 4, H100: 4}, {}, {}) is None


def test_job_mode_counts_inqueue_reservations_and_gives_elastic_cards_back() -> None:
    allocated, inqueue = {A100: 2}, {A100: 3}
    assert job_enqueue_refusal("q", {A100: 1}, {A100: 5}, allocated, inqueue) is not None  # 2 + 3 + 1 > 5
    assert job_enqueue_refusal("q", {A100: 1}, {A100: 5}, allocated, inqueue, {A100: 1}) is None  # 2 + 3 - 1 + 1
    both = f"{A100}|{H100}"
    refusal = job_enqueue_refusal("q", {both: 1}, {A100: 3, H100: 2}, allocated, {both: 3})  # kept under A|B
    assert refusal is not None
    assert "requested 1, total would be 6, but capability is 5" in refusal.message


def test_a_queue_without_card_capability_cannot_enqueue_card_requests() -> None:
    refusal = job_enqueue_refusal("q", {A100: 1}, {}, {}, {})
    assert refusal is not None
    assert refusal.reason == EMPTY_CAPABILITY
    assert job_enqueue_refusal("q", {}, {}, {}, {}) is None


def test_example_2_task_mode_any_single_alternative_fits() -> None:
    """A100 quota exhausted: the A100|H100 task still fits H100."""
    capability, allocated = {A100: 4, H100: 4}, {A100: 4, H100: 1}
    assert task_allocate_refusal("q", f"{A100}|{H100}", 1, capability, allocated) is None
    assert fitting_alternatives(f"{A100}|{H100}", 1, capability, allocated) == (H100,)
    refusal = task_allocate_refusal("q", f"{A100}|{H100}", 4, capability, allocated)
    assert refusal is not None
    assert refusal.message == ("Queue q has insufficient quota for every alternative of NVIDIA-A100|NVIDIA-H100 "
                               "(a task uses one of them): requested 4; NVIDIA-A100 total would be 8, but capability "
                               "is 4; NVIDIA-H100 total would be 5, but capability is 4")


def test_task_mode_never_adds_alternatives_up() -> None:
    """Job mode would allow 3 over A100=2 + H100=2; one task uses one type, so 3 cards fit neither."""
    assert task_allocate_refusal("q", f"{A100}|{H100}", 3, {A100: 2, H100: 2}, {}) is not None


def test_example_3_mps_cards_are_counted_like_any_card_type() -> None:
    mps = "NVIDIA-A100/mps-80g*1/8"
    assert job_enqueue_refusal("q", {mps: 16}, {mps: 32}, {}, {}) is None
    assert task_allocate_refusal("q", mps, 1, {mps: 32}, {mps: 31}) is None
    assert task_allocate_refusal("q", mps, 1, {mps: 32}, {mps: 32}) is not None


def test_example_4_node_order_with_weight_2() -> None:
    config = CapacityCardConfig(node_order_weight=2.0)
    card_name = f"{A100}|{H100}|{T4}"
    assert node_order_score(card_name, {A100}, config) == 200
    assert node_order_score(card_name, {H100}, config) == 100
    assert node_order_score(card_name, {T4}, config) == 50
    assert node_order_score(card_name, {"NVIDIA-V100"}, config) == 0
    assert node_order_score(card_name, {H100, T4}, config) == 100  # the first alternative found decides


def test_single_type_tasks_do_not_take_part_in_node_order() -> None:
    assert node_order_score(A100, {A100}, CapacityCardConfig()) == 0
    assert node_order_score(None, {A100}, CapacityCardConfig()) == 0


def test_default_node_order_weight_is_1() -> None:
    assert node_order_score(f"{A100}|{H100}", {H100}, CapacityCardConfig()) == 50


@pytest.mark.parametrize(("arguments", "expected"), [
    ({}, CapacityCardConfig(False, 1.0)),
    ({"cardUnlimitedCpuMemory": True, "nodeOrderWeight": 2.0}, CapacityCardConfig(True, 2.0)),
    ({"cardUnlimitedCpuMemory": "true", "nodeOrderWeight": "0.5"}, CapacityCardConfig(True, 0.5)),
    ({"nodeOrderWeight": -1}, CapacityCardConfig(False, 1.0)),  # must be positive: the default
])
def test_plugin_arguments(arguments: dict[str, object], expected: CapacityCardConfig) -> None:
    assert CapacityCardConfig.from_arguments(arguments) == expected


def test_cpu_memory_quota_applies_unless_card_tasks_are_unlimited() -> None:
    capability = queue_capability({"capability": {"cpu": "100", "memory": "200Gi"}})
    assert capability == {"cpu": 100, "memory": 200 * 2**30}
    request = {"cpu": Fraction(8), "nvidia.com/gpu": Fraction(1)}
    allocated = {"cpu": Fraction(95)}
    refusal = cpu_memory_refusal("q", request, capability, allocated, uses_cards=True, config=CapacityCardConfig())
    assert refusal is not None
    assert refusal.reason == INSUFFICIENT_CPU
    assert refusal.message == ("Queue q has insufficient cpu quota: requested 8, total would be 103, but capability "
                               "is 100")
    unlimited = CapacityCardConfig(card_unlimited_cpu_memory=True)
    assert cpu_memory_refusal("q", request, capability, allocated, uses_cards=True, config=unlimited) is None
    # A task without cards is always checked.
    assert cpu_memory_refusal("q", {"cpu": Fraction(8)}, capability, allocated, uses_cards=False,
                              config=unlimited) is not None


def test_memory_quota_and_a_queue_without_capability() -> None:
    capability = queue_capability({"capability": {"memory": "1Gi"}})
    refusal = cpu_memory_refusal("q", {"memory": Fraction(2 * 2**30)}, capability, {}, uses_cards=False,
                                 config=CapacityCardConfig())
    assert refusal is not None
    assert refusal.reason == INSUFFICIENT_MEMORY
    assert "requested 2Gi, total would be 2Gi, but capability is 1Gi" in refusal.message
    none = cpu_memory_refusal("q", {"cpu": Fraction(1)}, None, {}, uses_cards=False, config=CapacityCardConfig())
    assert none is not None
    assert none.reason == EMPTY_CAPABILITY
    assert cpu_memory_refusal("q", {}, None, {}, uses_cards=False, config=CapacityCardConfig()) is None


def test_job_mode_counts_the_jobs_own_single_type_keys_inside_an_alternatives_key() -> None:
    """{"A": 3, "A|B": 3} against A=4, B=0: the scheduler adds the whole request first, so A|B sees 3 + 3 > 4."""
    refusal = job_enqueue_refusal("q", {A100: 3, f"{A100}|{H100}": 3}, {A100: 4}, {}, {})
    assert refusal is not None
    # the job's 6 cards can only land on NVIDIA-A100 and NVIDIA-H100, which allow 4 together
    assert "insufficient NVIDIA-A100|NVIDIA-H100 quota: requested 6, total would be 6, but capability is 4" in \
        refusal.message


def test_arguments_beyond_a_float_fall_back_to_the_default() -> None:
    assert CapacityCardConfig.from_arguments({"nodeOrderWeight": "1e400"}).node_order_weight == 1.0
