"""Card-name suggestions that know real product names (issue 18, item 3): GPU feature discovery names products
``NVIDIA-A100-SXM4-80GB``, ``NVIDIA-H100-80GB-HBM3``, ``Tesla-T4``; people (and the docs) write ``NVIDIA-A100``. A
quota keyed ``NVIDIA-A100`` on such a cluster is pointed at every A100 the nodes offer — not at ``NVIDIA-H200``,
the closest by edit distance — and edit distance is the fallback for typos only."""

from __future__ import annotations

import difflib
import operator

import pytest
from builders import gpu_node, queue
from measuring import counting

from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.cards import unknown_type_warnings
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.snapshot import MAX_CLOSEST_CANDIDATES, CardCatalog, ClusterSnapshot, Suggestion

GFD_PRODUCTS = [  # nvidia.com/gpu.product as GPU feature discovery writes it (and Ascend's)
    "NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-PCIE-40GB", "NVIDIA-A100-80GB-PCIe",
    "NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H100-NVL", "NVIDIA-H200", "NVIDIA-L40S", "Tesla-T4",
    "NVIDIA-GeForce-RTX-4090"]
A100S = "NVIDIA-A100-80GB-PCIe, NVIDIA-A100-PCIE-40GB, NVIDIA-A100-SXM4-40GB or NVIDIA-A100-SXM4-80GB"
H100S = "NVIDIA-H100-80GB-HBM3, NVIDIA-H100-NVL or NVIDIA-H100-PCIe"


def gfd_cluster() -> ClusterSnapshot:
    nodes = [gpu_node(f"gpu-{index}", product, 8) for index, product in enumerate(GFD_PRODUCTS)]
    nodes.append(gpu_node("npu-0", "Ascend910B", 8, resource="huawei.com/Ascend910B", prefix="huawei.com",
                          family="Ascend910B"))
    nodes.append(gpu_node("mig-0", "NVIDIA-A100-SXM4-40GB", 7, resource="nvidia.com/mig-1g.5gb"))
    snapshot = Ledger.build(nodes).snapshot
    snapshot.complete = True
    return snapshot


@pytest.mark.parametrize(("written", "hint"), [
    # the docs' short names: every discovered product extending them, word by word
    ("NVIDIA-A100", f"did you mean {A100S}?"),
    ("NVIDIA-H100", f"did you mean {H100S}?"),
    ("nvidia-a100-sxm4", "did you mean NVIDIA-A100-SXM4-40GB or NVIDIA-A100-SXM4-80GB?"),
    ("NVIDIA-A100-80GB", "did you mean NVIDIA-A100-80GB-PCIe?"),
    ("NVIDIA-A100/mig-1g.5gb-mixed", "did you mean NVIDIA-A100-SXM4-40GB/mig-1g.5gb-mixed?"),
    # the model alone, or with a vendor GFD does not write
    ("A100", f"did you mean {A100S}?"),
    ("H100", f"did you mean {H100S}?"),
    ("T4", "did you mean Tesla-T4?"),
    ("NVIDIA-T4", "did you mean Tesla-T4?"),
    ("NVIDIA-Tesla-T4", "did you mean Tesla-T4?"),
    ("RTX-4090", "did you mean NVIDIA-GeForce-RTX-4090?"),
    ("NVIDIA-RTX-4090", "did you mean NVIDIA-GeForce-RTX-4090?"),
    ("nvidia-h200", "did you mean NVIDIA-H200?"),
    ("NVIDIA-L40S", None),  # offered
    # then edit distance, for typos
    ("Ascend910", "did you mean Ascend910B?"),
    ("NVIDIA-H20O", "did you mean NVIDIA-H200?"),
    ("NVIDIA-L40", "did you mean NVIDIA-L40S?"),
    ("AMD-Instinct-MI300X", None),
])
def test_a_short_product_name_is_pointed_at_the_discovered_products(written: str, hint: str | None) -> None:
    warnings = unknown_type_warnings([written], gfd_cluster())
    if written == "NVIDIA-L40S":
        assert warnings == []
    elif hint is None:
        assert warnings == [f"card type {written} is not offered by any node"]
    else:
        assert warnings == [f"card type {written} is not offered by any node ({hint})"]


@pytest.mark.parametrize("written", ["NVIDIA-A10", "NVIDIA-A1000", "NVIDIA-A100X"])
def test_only_whole_words_extend_a_name(written: str) -> None:
    """The A10 is another card than the A100: a name extends another word by word, not character by character."""
    catalog = gfd_cluster().catalog()
    assert not any(name.startswith("NVIDIA-A100-") for name in catalog.suggest(written).names)


def test_a_quota_keyed_by_the_docs_name_is_told_the_real_products() -> None:
    verdict = admit(queue("team-a", {"NVIDIA-A100": 8}, capability={"cpu": "8", "memory": "8Gi"}), None,
                    gfd_cluster(), PolicyConfig())
    assert verdict.allowed
    assert verdict.warnings == (f"card type NVIDIA-A100 is not offered by any node (did you mean {A100S}?)",)


def test_many_matches_are_counted_past_the_limit() -> None:
    products = [f"NVIDIA-A100-VARIANT-{index}" for index in range(10)]
    snapshot = Ledger.build([gpu_node(f"n{index}", product, 1) for index, product in enumerate(products)]).snapshot
    snapshot.complete = True
    assert unknown_type_warnings(["NVIDIA-A100"], snapshot) == [
        "card type NVIDIA-A100 is not offered by any node (did you mean one of NVIDIA-A100-VARIANT-0, "
        "NVIDIA-A100-VARIANT-1, NVIDIA-A100-VARIANT-2, NVIDIA-A100-VARIANT-3 and 6 more?)"]
    assert unknown_type_warnings(["NVIDIA-A100", "H100", "T4"], gfd_cluster()) == [
        "3 card types are not offered by any node: NVIDIA-A100 (did you mean one of NVIDIA-A100-80GB-PCIe, "
        "NVIDIA-A100-PCIE-40GB and 2 more?), H100 (did you mean one of NVIDIA-H100-80GB-HBM3, NVIDIA-H100-NVL and "
        "1 more?), T4 (did you mean Tesla-T4?)"]


def test_the_word_index_is_built_once_and_the_edit_distance_stays_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = CardCatalog(dict(gfd_cluster().catalog().entries))
    assert catalog.suggest("NVIDIA-A100").total == 4
    index = catalog._word_indexes
    ratios = counting(monkeypatch, difflib.SequenceMatcher, "ratio")
    assert catalog.suggest("H100").total == 3
    assert ratios() == 0  # found by the index: no edit distance computed
    assert catalog.suggest("NVIDIA-H20O") == Suggestion(("NVIDIA-H200",), 1)
    assert 0 < ratios() <= MAX_CLOSEST_CANDIDATES
    assert all(map(operator.is_, catalog._word_indexes, index))  # the same indexes, not built again
    assert catalog.suggest("-" * 100_000) == Suggestion()
    assert catalog.suggest("A-" * 50_000) == Suggestion()  # more words than a product has: not indexed
