"""Discovery says what a card is: shared GPUs are slices with their replica factor, NPU nodes without a product label
are named with the label to write — in ``cardquota discover`` (table, JSON, warnings) and ``doctor`` alike.

Upstream facts the cases rely on (each node builder cites its own):

* NVIDIA/k8s-device-plugin v0.20.0 — ``internal/lm/resource.go`` ``baseLabeler`` writes ``<resource>.product``,
  ``.count``, ``.replicas`` and ``.sharing-strategy``; ``getProductName`` appends ``-SHARED`` when a resource is
  replicated and not renamed; ``api/config/v1/sharing.go`` names the strategies ``mps``, ``time-slicing``,
  ``none``; ``api/config/v1/replicas.go`` renames to ``<resource>.shared`` only with ``renameByDefault``;
  ``internal/lm/strategy.go`` ``migStrategyLabeler`` writes ``nvidia.com/mig.strategy``, and with ``single``
  ``NewMIGResourceLabeler`` names the product ``<model>-MIG-<profile>`` under ``nvidia.com/gpu``.
* Project-HAMi/HAMi v2.10.0 — ``pkg/device/nvidia/device.go`` ``RegisterAnnos`` (``hami.io/node-nvidia-register``)
  read by ``device.UnMarshalNodeDevices`` (JSON; ``DecodeNodeDevices`` before v2.8.0); the device plugin
  advertises ``deviceSplitCount`` (10, ``charts/hami/values.yaml``) devices per card (``rm/devices.go``
  ``GetPluginDevices``).
* Ascend — ``ascend-device-plugin`` ``build/ascendplugin-910.yaml`` (nodeSelector ``accelerator: huawei-Ascend910``),
  ``pkg/common/constants.go`` (``huawei.com/`` + ``Ascend910``); Ascend/mind-cluster v26.1.0
  ``component/ascend-device-plugin/pkg/common/constants.go`` ``ChipNameLabel`` = ``node.kubernetes.io/npu.chip.name``.
* volcano-sh/volcano 61a5f00 (capacity-card plugin) ``capacity_card_node.go`` ``getCardInfoFromNode`` reads card
  types only from ``^((.+?)/(\\w+))\\.product$`` labels: why discovery does not name NPUs from the Ascend labels.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from builders import ascend_node, gpu_labels, gpu_node, hami_node, node, shared_gpu_node
from hypothesis import given
from hypothesis import strategies as st

from cardquota.cli.main import run
from cardquota.core import doctor
from cardquota.core.cards import (
    CardKind,
    CardType,
    discover_card_types,
    hami_cards,
    sharing_warnings,
    unlabelled_accelerators,
)
from cardquota.core.objects import Node
from cardquota.core.snapshot import CardCatalog

CORPUS = Path(__file__).resolve().parents[1] / "data" / "upstream_shaped"
NODES = CORPUS / "accelerator-nodes.yaml"
CLUSTER = CORPUS / "cluster.yaml"


def the_card(manifest: dict[str, Any]) -> CardType:
    (card,) = discover_card_types(Node.from_manifest(manifest)).types.values()
    return card


def described(card: CardType) -> tuple[str, str, int, str, int | None, int | None]:
    return card.name, card.resource, card.count, card.kind.value, card.cards, card.replicas


# ------------------------------------------------------------------------------------------------ the card types


@pytest.mark.parametrize(("manifest", "expected"), [
    pytest.param(shared_gpu_node("n", "NVIDIA-A100-SXM4-80GB", 8, 4),
                 ("NVIDIA-A100-SXM4-80GB-SHARED", "nvidia.com/gpu", 32, "mps", 8, 4), id="mps-default-naming"),
    pytest.param(shared_gpu_node("n", "Tesla-T4", 2, 4, strategy="time-slicing"),
                 ("Tesla-T4-SHARED", "nvidia.com/gpu", 8, "time-slicing", 2, 4), id="time-slicing-default-naming"),
    pytest.param(shared_gpu_node("n", "NVIDIA-L4", 4, 2, strategy="time-slicing", renamed=True, memory=23034),
                 ("NVIDIA-L4/mps-22g*1/2", "nvidia.com/gpu.shared", 8, "time-slicing", 4, 2),
                 id="time-slicing-renamed-keeps-the-mps-name"),
    pytest.param(shared_gpu_node("n", "NVIDIA-A100", 4, 8, renamed=True),
                 ("NVIDIA-A100/mps-80g*1/8", "nvidia.com/gpu.shared", 32, "mps", 4, 8), id="mps-renamed-seed-type"),
    pytest.param(shared_gpu_node("n", "Tesla-T4", 2, 4, strategy=None),
                 ("Tesla-T4-SHARED", "nvidia.com/gpu", 8, "shared", 2, 4), id="replicas-without-a-strategy"),
    pytest.param(hami_node("n", "A100-SXM4-80GB", 8),
                 ("A100-SXM4-80GB", "nvidia.com/gpu", 80, "vgpu", 8, 10), id="hami-json-registration"),
    pytest.param(hami_node("n", "A100-SXM4-80GB", 4, 5, legacy=True),
                 ("A100-SXM4-80GB", "nvidia.com/gpu", 20, "vgpu", 4, 5), id="hami-legacy-registration"),
    pytest.param(node("n", labels=gpu_labels("NVIDIA-H100", count=8), allocatable={"nvidia.com/gpu": "16"}),
                 ("NVIDIA-H100", "nvidia.com/gpu", 16, "shared", 8, 2), id="allocatable-over-gpu-count"),
    pytest.param(node("n", labels=gpu_labels("NVIDIA-H100", count=8), allocatable={"nvidia.com/gpu": "20"}),
                 ("NVIDIA-H100", "nvidia.com/gpu", 20, "shared", 8, None), id="uneven-slices-replicas-unknown"),
    pytest.param(node("n", labels=gpu_labels("NVIDIA-H100", count=8), allocatable={"nvidia.com/gpu": "7"}),
                 ("NVIDIA-H100", "nvidia.com/gpu", 7, "whole", 7, None), id="an-unhealthy-card-is-still-whole"),
    pytest.param(node("n", labels={**gpu_labels("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", count=56),
                                   "nvidia.com/mig.strategy": "single"}, allocatable={"nvidia.com/gpu": "56"}),
                 ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "nvidia.com/gpu", 56, "mig", None, None), id="mig-single"),
    pytest.param(gpu_node("n", "NVIDIA-A100", 8),
                 ("NVIDIA-A100", "nvidia.com/gpu", 8, "whole", 8, None), id="whole"),
    pytest.param(node("n", labels={**gpu_labels("NVIDIA-A100-SXM4-40GB", count=8), "nvidia.com/mig.strategy": "mixed",
                                   "nvidia.com/mig-1g.5gb.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED",
                                   "nvidia.com/mig-1g.5gb.count": "14", "nvidia.com/mig-1g.5gb.replicas": "2",
                                   "nvidia.com/mig-1g.5gb.sharing-strategy": "time-slicing"},
                      allocatable={"nvidia.com/mig-1g.5gb": "28"}),
                 ("NVIDIA-A100-SXM4-40GB/mig-1g.5gb-mixed", "nvidia.com/mig-1g.5gb", 28, "time-slicing", 14, 2),
                 id="time-sliced-mig-profile"),
    pytest.param(node("n", labels={**gpu_labels("NVIDIA-A100-SXM4-40GB", count=8),
                                   "nvidia.com/mig-1g.5gb.count": "14", "nvidia.com/mig-1g.5gb.replicas": "1"},
                      allocatable={"nvidia.com/mig-1g.5gb": "14"}),
                 ("NVIDIA-A100-SXM4-40GB/mig-1g.5gb-mixed", "nvidia.com/mig-1g.5gb", 14, "mig", None, None),
                 id="mig-profile-with-one-replica"),
])
def test_discovery_reports_the_kind_cards_and_replicas(manifest: dict[str, Any],
                                                      expected: tuple[Any, ...]) -> None:
    """The name is the seed's (quotas keep working); kind, cards and replicas say what one counted unit is."""
    assert described(the_card(manifest)) == expected


def test_a_stale_whole_resource_beside_a_renamed_shared_one_stays_whole() -> None:
    """After ``renameByDefault`` the kubelet may still list ``nvidia.com/gpu`` at 0: the sharing labels describe
    ``nvidia.com/gpu.shared``, not it."""
    manifest = shared_gpu_node("n", "NVIDIA-A100", 4, 8, renamed=True)
    manifest["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    found = discover_card_types(Node.from_manifest(manifest)).types
    assert (found["NVIDIA-A100"].kind, found["NVIDIA-A100/mps-80g*1/8"].kind) == (CardKind.WHOLE, CardKind.MPS)


def test_a_hami_registration_speaks_only_for_nvidia_gpu() -> None:
    manifest = node("n", labels=gpu_labels("X1", prefix="example.com", family="xpu", count=2),
                    allocatable={"example.com/xpu": "2"})
    manifest["metadata"]["annotations"] = hami_node("h", "A100", 2)["metadata"]["annotations"]
    assert the_card(manifest).kind is CardKind.WHOLE


def test_the_json_of_a_shared_type_carries_cards_and_replicas_and_a_whole_one_does_not() -> None:
    assert the_card(shared_gpu_node("n", "NVIDIA-A100-SXM4-80GB", 8, 4)).as_json() == {
        "resource": "nvidia.com/gpu", "count": 32, "kind": "mps", "cards": 8, "replicas": 4}
    assert the_card(gpu_node("n", "NVIDIA-A100", 8)).as_json() == {
        "resource": "nvidia.com/gpu", "count": 8, "kind": "whole"}


def test_the_catalog_keeps_the_shared_kind_for_the_policies_and_explain() -> None:
    cards = discover_card_types(Node.from_manifest(shared_gpu_node("n", "NVIDIA-A100-SXM4-80GB", 8, 4)))
    entry = CardCatalog.of([cards]).entries["NVIDIA-A100-SXM4-80GB-SHARED"]
    assert (entry.resource, entry.kind, entry.total) == ("nvidia.com/gpu", CardKind.MPS, 32)


# ------------------------------------------------------------------------------------------ HAMi's registration


@pytest.mark.parametrize(("annotation", "expected"), [
    (None, None), ("", None), ("[]", None), ("not json", None), ('{"count": 10}', None), ('[{"count": "10"}]', None),
    ('[{"count": true}]', None), ('[{"count": 10}, {"count": 5}]', (2, None)),
    ("GPU-1,10,81920,100,A100,0,true:", (1, 10)),
    ("GPU-1,10,81920,100,A100,0,true,0,hami-core:GPU-2,10,81920,100,A100,0,true,1,hami-core:", (2, 10)),
    ("GPU-1,ten,81920,100,A100,0,true:", None), ("GPU-1,10,81920:", None),
])
def test_hami_registrations(annotation: str | None, expected: tuple[int, int | None] | None) -> None:
    assert hami_cards(annotation) == expected


def test_a_deeply_nested_registration_is_refused_not_a_crash() -> None:
    """Annotations are bounded only by the API server's 256 KiB: nesting that deep exhausts Python's json."""
    assert hami_cards("[" * 200_000 + "]" * 200_000) is None


@given(st.text(max_size=300))
def test_any_registration_text_is_read_or_refused_never_raises(text: str) -> None:
    found = hami_cards(text)
    assert found is None or (found[0] >= 1 and (found[1] is None or found[1] >= 1))


@given(st.lists(st.integers(min_value=1, max_value=100), min_size=1, max_size=16), st.booleans())
def test_registered_cards_and_splits_are_read_back(splits: list[int], legacy: bool) -> None:
    if legacy:
        text = "".join(f"GPU-{i},{split},81920,100,NVIDIA-A100,0,true:" for i, split in enumerate(splits))
    else:
        text = json.dumps([{"id": f"GPU-{i}", "count": split, "devmem": 81920} for i, split in enumerate(splits)])
    assert hami_cards(text) == (len(splits), splits[0] if len(set(splits)) == 1 else None)


# ------------------------------------------------------------------------------------------------- the warnings


def _cards(*manifests: dict[str, Any]) -> list[Any]:
    return [discover_card_types(Node.from_manifest(manifest)) for manifest in manifests]


def test_the_warning_names_the_mode_the_totals_and_what_a_quota_means() -> None:
    assert sharing_warnings(_cards(shared_gpu_node("a", "NVIDIA-A100-SXM4-80GB", 8, 4),
                                   shared_gpu_node("b", "NVIDIA-A100-SXM4-80GB", 8, 4))) == [
        "card type NVIDIA-A100-SXM4-80GB-SHARED counts slices of cards shared by MPS, not whole cards: "
        "nvidia.com/gpu on 2 nodes (a, b) is 16 cards × 4 replicas = 64 slices; a quota of N for "
        "NVIDIA-A100-SXM4-80GB-SHARED means N slices (N/4 cards)"]


def test_a_type_shared_on_some_nodes_and_whole_on_others_is_called_out() -> None:
    """A HAMi node and a plain node of the same product offer one type: a quota of it counts slices and cards."""
    (warning,) = sharing_warnings(_cards(hami_node("hami-1", "A100-SXM4-80GB", 8),
                                         gpu_node("plain-1", "A100-SXM4-80GB", 8)))
    assert "shared by HAMi vGPU" in warning
    assert "8 cards × 10 replicas = 80 slices" in warning
    assert warning.endswith("while on 1 node (plain-1) the same type counts whole cards: one quota counts both")


def test_the_seeds_named_mps_types_and_whole_and_mig_types_need_no_warning() -> None:
    mig = node("m", labels=gpu_labels("NVIDIA-A100", count=8), allocatable={"nvidia.com/mig-1g.5gb": "7"})
    assert sharing_warnings(_cards(shared_gpu_node("s", "NVIDIA-A100", 4, 8, renamed=True),
                                   gpu_node("w", "NVIDIA-A100", 8), mig)) == []


def test_time_slicing_under_an_mps_name_is_warned_of() -> None:
    (warning,) = sharing_warnings(_cards(shared_gpu_node("t", "NVIDIA-L4", 4, 2, strategy="time-slicing",
                                                         renamed=True, memory=23034)))
    assert warning.startswith("card type NVIDIA-L4/mps-22g*1/2 counts slices of cards shared by time-slicing")


# -------------------------------------------------------------------------------------------------------- NPUs


def test_an_ascend_node_with_its_plugins_labels_offers_no_type_and_is_told_its_own_label() -> None:
    manifest = ascend_node("npu-1")
    assert discover_card_types(Node.from_manifest(manifest)).types == {}
    found = unlabelled_accelerators(Node.from_manifest(manifest))
    assert found is not None
    assert found.describe() == ("npu-1: 8 huawei.com/Ascend910 allocatable, no huawei.com/<type>.product label (e.g. "
                                "huawei.com/npu.product=Ascend-910B3)")
    assert found.command == "kubectl label node npu-1 huawei.com/npu.product=Ascend-910B3"


def test_writing_the_suggested_label_makes_the_npu_a_card_type() -> None:
    found = unlabelled_accelerators(Node.from_manifest(ascend_node("npu-1")))
    assert found is not None
    (label, value), = found.labels
    labelled = ascend_node("npu-1")
    labelled["metadata"]["labels"][label] = value
    assert described(the_card(labelled)) == ("Ascend-910B3", "huawei.com/Ascend910", 8, "whole", 8, None)
    assert unlabelled_accelerators(Node.from_manifest(labelled)) is None


def test_an_ascend_node_without_a_chip_label_gets_a_placeholder_not_an_nvidia_label() -> None:
    manifest = node("npu-2", labels={"accelerator": "huawei-Ascend910"}, allocatable={"huawei.com/Ascend910": "8"})
    found = unlabelled_accelerators(Node.from_manifest(manifest))
    assert found is not None
    assert found.command == "kubectl label node npu-2 huawei.com/npu.product=<product>"


def test_a_hami_node_without_feature_discovery_says_its_gpus_are_vgpu_slices() -> None:
    found = unlabelled_accelerators(Node.from_manifest(hami_node("h", "A100", 8, gfd=False)))
    assert found is not None
    assert found.describe().startswith("h: 80 nvidia.com/gpu (HAMi vGPU slices of 8 cards) allocatable")


# -------------------------------------------------------------------------------------------- discover, doctor


def cardquota(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run("cardquota", list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_discover_json_of_the_upstream_shaped_accelerator_nodes() -> None:
    code, out, _ = cardquota("discover", "-f", str(NODES), "-o", "json")
    assert code == 0
    assert json.loads(out)["nodes"] == {
        "a100-hami": {"NVIDIA-A100-SXM4-80GB": {"resource": "nvidia.com/gpu", "count": 80, "kind": "vgpu",
                                                "cards": 8, "replicas": 10}},
        "a100-mps-default": {"NVIDIA-A100-SXM4-80GB-SHARED": {"resource": "nvidia.com/gpu", "count": 32,
                                                              "kind": "mps", "cards": 8, "replicas": 4}},
        "ascend910b-01": {},
        "h100-oversubscribed": {"NVIDIA-H100-80GB-HBM3": {"resource": "nvidia.com/gpu", "count": 16,
                                                          "kind": "shared", "cards": 8, "replicas": 2}},
        "l4-time-slicing-renamed": {"NVIDIA-L4/mps-22g*1/2": {"resource": "nvidia.com/gpu.shared", "count": 8,
                                                              "kind": "time-slicing", "cards": 4, "replicas": 2}},
    }


def test_discover_warns_of_the_npu_node_with_its_own_label_and_of_each_shared_type() -> None:
    code, _, err = cardquota("discover", "-f", str(NODES), "-o", "json")
    lines = err.splitlines()
    assert code == 0
    assert lines[0] == (
        "warning: Node ascend910b-01: 8 huawei.com/Ascend910 allocatable, no huawei.com/<type>.product label (e.g. "
        "huawei.com/npu.product=Ascend-910B3): the node offers no card type; label it: kubectl label node "
        "ascend910b-01 huawei.com/npu.product=Ascend-910B3 (docs/cards.md: Card types discovered from a node)")
    assert "nvidia" not in lines[0]
    shared = [line.split(" counts ")[0] for line in lines[1:]]
    assert shared == ["warning: card type NVIDIA-A100-SXM4-80GB", "warning: card type NVIDIA-A100-SXM4-80GB-SHARED",
                      "warning: card type NVIDIA-H100-80GB-HBM3", "warning: card type NVIDIA-L4/mps-22g*1/2"]
    assert all("a quota of N for" in line and "means N slices" in line for line in lines[1:])


def test_discover_table_shows_the_kind_with_its_replicas_and_the_cards() -> None:
    code, out, _ = cardquota("discover", "-f", str(NODES), "-o", "table")
    rows = [line.split() for line in out.split("\n\n")[0].splitlines()]
    assert code == 0
    assert rows[0] == ["NODE", "CARD", "TYPE", "KIND", "CARDS", "COUNT"]
    assert ["a100-hami", "NVIDIA-A100-SXM4-80GB", "vgpu×10", "8", "80"] in rows
    assert ["ascend910b-01", "-", "-", "-", "-"] in rows


def test_doctor_warns_of_shared_types_and_names_the_npus_own_label() -> None:
    import yaml

    manifests = list(yaml.safe_load_all(NODES.read_text()))
    results = doctor.check_nodes(manifests)
    by_message = {result.message.split(":")[0]: result for result in results}
    unlabelled = by_message["card discovery finds no card type for the accelerators of 1 GPU/NPU node"]
    assert unlabelled.details == ("ascend910b-01: 8 huawei.com/Ascend910 allocatable, no huawei.com/<type>.product "
                                  "label (e.g. huawei.com/npu.product=Ascend-910B3)",)
    assert "kubectl label node ascend910b-01 huawei.com/npu.product=Ascend-910B3" in unlabelled.fix
    shared = by_message["4 card types count slices of shared cards, not whole cards"]
    assert shared.status is doctor.Status.WARN
    assert [line.split(" counts ")[0] for line in shared.details] == [
        "card type NVIDIA-A100-SXM4-80GB", "card type NVIDIA-A100-SXM4-80GB-SHARED", "card type NVIDIA-H100-80GB-HBM3",
        "card type NVIDIA-L4/mps-22g*1/2"]


def test_doctor_on_an_npu_only_cluster_fixes_with_the_npu_label_not_an_nvidia_one() -> None:
    (failed, unlabelled) = doctor.check_nodes([ascend_node("npu-1"), ascend_node("npu-2", chip="910B4")])
    assert (failed.status, unlabelled.status) == (doctor.Status.FAIL, doctor.Status.WARN)
    for result in (failed, unlabelled):
        assert "kubectl label node npu-1 huawei.com/npu.product=Ascend-910B3" in result.fix
        assert "nvidia" not in result.fix.lower()


def test_the_gfd_cluster_of_the_corpus_reports_its_shared_types() -> None:
    code, out, err = cardquota("discover", "-f", str(CLUSTER), "-o", "json")
    nodes = json.loads(out)["nodes"]
    assert code == 0
    assert nodes["t4-time-slicing"]["Tesla-T4-SHARED"]["kind"] == "time-slicing"
    assert nodes["h100-mig-single"]["NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"]["kind"] == "mig"
    assert "card type Tesla-T4-SHARED counts slices of cards shared by time-slicing" in err


def test_kubectl_cardquota_nodes_shows_the_same_kind_cards_and_replicas_as_discover() -> None:
    from cardquota.cli.kubectl import nodes_json, nodes_table

    cards = {name: discover_card_types(Node.from_manifest(manifest)) for name, manifest in
             (("s", shared_gpu_node("s", "NVIDIA-A100", 8, 4)), ("w", gpu_node("w", "NVIDIA-A100", 8)))}
    document = nodes_json(cards, {"s": {"NVIDIA-A100-SHARED": 3}})
    assert document["nodes"]["s"] == {"NVIDIA-A100-SHARED": {"kind": "mps", "resource": "nvidia.com/gpu",
                                                             "allocatable": 32, "used": 3, "cards": 8, "replicas": 4}}
    assert document["nodes"]["w"]["NVIDIA-A100"]["kind"] == "whole"
    rows = [line.split() for line in nodes_table(cards, {}, limit=None, err=io.StringIO()).splitlines()]
    assert ["s", "NVIDIA-A100-SHARED", "mps×4", "32", "0"] in rows
