"""Card-type discovery from node labels and allocatable resources (capacity-card-design.md, card type sections)."""

from __future__ import annotations

import pytest
from builders import gpu_labels, node

from cardquota.core.cards import (
    PRODUCT_LABEL,
    CardKind,
    card_families,
    cluster_totals,
    discover_card_types,
    mps_card_name,
)
from cardquota.core.objects import Node


def cards_of(manifest: dict) -> dict[str, tuple[str, int, str]]:
    found = discover_card_types(Node.from_manifest(manifest))
    return {name: (card.resource, card.count, card.kind.value) for name, card in found.types.items()}


def test_whole_cards_take_the_product_name_and_allocatable_count() -> None:
    manifest = node(labels=gpu_labels("NVIDIA-A100", count=8, memory=81920), allocatable={"nvidia.com/gpu": "8"})
    assert cards_of(manifest) == {"NVIDIA-A100": ("nvidia.com/gpu", 8, "whole")}


def test_seed_mps_example_8_cards_8_replicas() -> None:
    manifest = node(labels=gpu_labels("NVIDIA-A100", count=8, memory=81920, replicas=8),
                    allocatable={"nvidia.com/gpu.shared": "64"})
    assert cards_of(manifest) == {"NVIDIA-A100/mps-80g*1/8": ("nvidia.com/gpu.shared", 64, "mps")}


def test_seed_mps_example_4_cards_gives_32() -> None:
    manifest = node(labels=gpu_labels("NVIDIA-A100", count=4, memory=81920, replicas=8),
                    allocatable={"nvidia.com/gpu.shared": "32"})
    assert cards_of(manifest) == {"NVIDIA-A100/mps-80g*1/8": ("nvidia.com/gpu.shared", 32, "mps")}


@pytest.mark.parametrize(
    ("memory_mib", "replicas", "name"),
    [
        (81920, 8, "NVIDIA-H100/mps-80g*1/8"),
        (143771, 2, "NVIDIA-H100/mps-140g*1/2"),  # 140.4 GiB rounds down
        (1536, 4, "NVIDIA-H100/mps-2g*1/4"),  # exactly 1.5 GiB rounds half up (as Go's math.Round)
        (2560, 4, "NVIDIA-H100/mps-3g*1/4"),  # 2.5 GiB → 3, not banker's rounding to 2
        (500, 1, "NVIDIA-H100/mps-0g*1/1"),
    ],
)
def test_mps_name_rounds_memory_to_whole_gib(memory_mib: int, replicas: int, name: str) -> None:
    assert mps_card_name("NVIDIA-H100", memory_mib, replicas) == name


def test_seed_mig_example_mixed_profiles() -> None:
    labels = gpu_labels("NVIDIA-A100", count=8, memory=81920) | {
        "nvidia.com/mig-1g.5gb.count": "7",
        "nvidia.com/mig-2g.10gb.count": "4",
    }
    manifest = node(labels=labels, allocatable={"nvidia.com/mig-1g.5gb": "7", "nvidia.com/mig-2g.10gb": "4"})
    assert cards_of(manifest) == {
        "NVIDIA-A100/mig-1g.5gb-mixed": ("nvidia.com/mig-1g.5gb", 7, "mig"),
        "NVIDIA-A100/mig-2g.10gb-mixed": ("nvidia.com/mig-2g.10gb", 4, "mig"),
    }


def test_mig_mixed_strategy_lists_whole_cards_alongside_slices() -> None:
    manifest = node(labels=gpu_labels("NVIDIA-H200", count=8),
                    allocatable={"nvidia.com/gpu": "6", "nvidia.com/mig-1g.18gb": "14"})
    assert cards_of(manifest) == {
        "NVIDIA-H200": ("nvidia.com/gpu", 6, "whole"),
        "NVIDIA-H200/mig-1g.18gb-mixed": ("nvidia.com/mig-1g.18gb", 14, "mig"),
    }


def test_mig_product_labels_are_not_product_labels() -> None:
    labels = {"nvidia.com/mig-1g.5gb.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.5gb", "nvidia.com/mig-1g.5gb.count": "7"}
    manifest = node(labels=labels, allocatable={"nvidia.com/mig-1g.5gb": "7"})
    assert cards_of(manifest) == {}


@pytest.mark.parametrize(
    ("key", "matches", "prefix"),
    [
        ("nvidia.com/gpu.product", True, "nvidia.com"),
        ("huawei.com/npu.product", True, "huawei.com"),
        ("amd.com/gpu.product", True, "amd.com"),
        ("nvidia.com/mig-1g.5gb.product", False, None),
        ("nvidia.com/gpu.product.name", False, None),
        ("gpu.product", False, None),
        ("nvidia.com/.product", False, None),
        ("nvidia.com/gpü.product", False, None),  # \w is ASCII, as in Go
    ],
)
def test_product_label_pattern(key: str, matches: bool, prefix: str | None) -> None:
    match = PRODUCT_LABEL.match(key)
    assert (match is not None) is matches
    if match is not None:
        assert match.group(2) == prefix


def test_gpus_without_a_product_label_have_no_card_type() -> None:
    assert cards_of(node(allocatable={"nvidia.com/gpu": "8"})) == {}


def test_cpu_node_has_no_card_type() -> None:
    assert cards_of(node(labels={"kubernetes.io/os": "linux"})) == {}


def test_product_label_without_card_resources_has_no_card_type() -> None:
    assert cards_of(node(labels=gpu_labels("NVIDIA-A100"))) == {}


def test_zero_allocatable_is_listed_with_count_zero() -> None:
    manifest = node(labels=gpu_labels("NVIDIA-A100", memory=81920, replicas=4),
                    allocatable={"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "0", "nvidia.com/mig-3g.40gb": "0"})
    assert cards_of(manifest) == {
        "NVIDIA-A100": ("nvidia.com/gpu", 0, "whole"),
        "NVIDIA-A100/mps-80g*1/4": ("nvidia.com/gpu.shared", 0, "mps"),
        "NVIDIA-A100/mig-3g.40gb-mixed": ("nvidia.com/mig-3g.40gb", 0, "mig"),
    }


def test_other_vendor_prefixes_and_their_resources() -> None:
    labels = gpu_labels("Ascend-910B", prefix="huawei.com", family="npu", count=8)
    manifest = node(labels=labels, allocatable={"huawei.com/Ascend910": "8", "nvidia.com/gpu": "2"})
    assert cards_of(manifest) == {"Ascend-910B": ("huawei.com/Ascend910", 8, "whole")}


def test_two_vendors_on_one_node_each_claim_their_own_resources() -> None:
    labels = gpu_labels("NVIDIA-L4", count=2) | gpu_labels("Ascend-310P", prefix="huawei.com", family="npu")
    manifest = node(labels=labels, allocatable={"nvidia.com/gpu": "2", "huawei.com/Ascend310P": "4"})
    assert cards_of(manifest) == {
        "NVIDIA-L4": ("nvidia.com/gpu", 2, "whole"),
        "Ascend-310P": ("huawei.com/Ascend310P", 4, "whole"),
    }


def test_mps_without_memory_or_replicas_label_is_skipped_with_a_note() -> None:
    manifest = node(labels=gpu_labels("NVIDIA-A100", memory=81920), allocatable={"nvidia.com/gpu.shared": "16"})
    found = discover_card_types(Node.from_manifest(manifest))
    assert found.types == {}
    assert len(found.notes) == 1
    assert "nvidia.com/gpu.shared" in found.notes[0]


@pytest.mark.parametrize(("labels", "note"), [
    (gpu_labels("NVIDIA-A100", replicas=8), "nvidia.com/gpu.shared is allocatable but the label nvidia.com/gpu.memory "
     "is missing, so it names no MPS card type; skipped"),
    (gpu_labels("NVIDIA-A100"), "nvidia.com/gpu.shared is allocatable but the label nvidia.com/gpu.memory is missing "
     "and the label nvidia.com/gpu.replicas is missing, so it names no MPS card type; skipped"),
    ({**gpu_labels("NVIDIA-A100", memory=81920), "nvidia.com/gpu.replicas": "eight"}, "nvidia.com/gpu.shared is "
     "allocatable but nvidia.com/gpu.replicas='eight' is not a positive whole number, so it names no MPS card type; "
     "skipped"),
])
def test_the_mps_note_names_the_missing_or_unreadable_label_never_none(labels: dict[str, str], note: str) -> None:
    """Issue 18 item 11: the discover warning printed ``nvidia.com/gpu.memory=None`` for a missing label."""
    found = discover_card_types(Node.from_manifest(node(labels=labels, allocatable={"nvidia.com/gpu.shared": "16"})))
    assert found.notes == (note,)
    assert "None" not in note


def test_several_whole_resources_prefer_the_family_resource_and_note_the_rest() -> None:
    manifest = node(labels=gpu_labels("NVIDIA-A100"), allocatable={"nvidia.com/gpu": "8", "nvidia.com/pgpu": "8"})
    found = discover_card_types(Node.from_manifest(manifest))
    assert {n: c.resource for n, c in found.types.items()} == {"NVIDIA-A100": "nvidia.com/gpu"}
    assert any("nvidia.com/pgpu" in note for note in found.notes)


def test_other_shared_resources_are_neither_mps_nor_whole() -> None:
    manifest = node(labels=gpu_labels("NVIDIA-A100", memory=81920),
                    allocatable={"nvidia.com/gpu": "8", "nvidia.com/vgpu.shared": "16"})
    assert cards_of(manifest) == {"NVIDIA-A100": ("nvidia.com/gpu", 8, "whole")}


def test_fractional_allocatable_counts_whole_cards_only() -> None:
    manifest = node(labels=gpu_labels("NVIDIA-A100"), allocatable={"nvidia.com/gpu": "7500m"})
    assert cards_of(manifest) == {"NVIDIA-A100": ("nvidia.com/gpu", 7, "whole")}


def test_empty_product_value_is_ignored() -> None:
    manifest = node(labels={"nvidia.com/gpu.product": ""}, allocatable={"nvidia.com/gpu": "8"})
    assert cards_of(manifest) == {}


def test_family_reads_sibling_labels() -> None:
    [family] = card_families(gpu_labels("NVIDIA-A100", count=8, memory=81920, replicas=4))
    assert (family.base, family.prefix, family.product, family.memory_mib, family.replicas) == (
        "nvidia.com/gpu", "nvidia.com", "NVIDIA-A100", "81920", "4"
    )


def test_type_for_resource_and_json_shape() -> None:
    manifest = node(labels=gpu_labels("NVIDIA-A100"), allocatable={"nvidia.com/gpu": "8", "nvidia.com/mig-1g.5gb": "7"})
    found = discover_card_types(Node.from_manifest(manifest))
    assert found.type_for_resource("nvidia.com/mig-1g.5gb").name == "NVIDIA-A100/mig-1g.5gb-mixed"
    assert found.type_for_resource("cpu") is None
    assert found.as_json() == {
        "NVIDIA-A100": {"resource": "nvidia.com/gpu", "count": 8, "kind": "whole"},
        "NVIDIA-A100/mig-1g.5gb-mixed": {"resource": "nvidia.com/mig-1g.5gb", "count": 7, "kind": "mig"},
    }
    assert found.types["NVIDIA-A100"].kind is CardKind.WHOLE


def test_cluster_totals_add_up_per_type() -> None:
    nodes = [
        discover_card_types(Node.from_manifest(node(f"a{i}", labels=gpu_labels("NVIDIA-A100"),
                                                    allocatable={"nvidia.com/gpu": "8"})))
        for i in range(3)
    ] + [discover_card_types(Node.from_manifest(node("cpu")))]
    assert cluster_totals(nodes) == {"NVIDIA-A100": 24}
