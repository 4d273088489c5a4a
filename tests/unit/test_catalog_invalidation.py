"""The card catalog survives node events that change no card type (issue 20: every kubelet heartbeat threw it away,
and the next admission rebuilt it from all nodes — 3.3 to 4.0 ms at 5,000 nodes); it is rebuilt when a node's card
types or counts change, or a node offering cards goes."""

from __future__ import annotations

import copy
from typing import Any

from builders import gpu_node, node

from cardquota.core.snapshot import ClusterSnapshot, node_record


def snapshot_of_nodes() -> ClusterSnapshot:
    snapshot = ClusterSnapshot()
    for manifest in (gpu_node("a100-1", "NVIDIA-A100-SXM4-80GB", 8), gpu_node("h100-1", "NVIDIA-H100-80GB-HBM3", 8),
                     node("cpu-1")):
        snapshot.put_node(node_record(manifest))
    return snapshot


def heartbeat(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a kubelet status update changes: conditions, heartbeat times, the resource version."""
    beat = copy.deepcopy(manifest)
    beat["metadata"]["resourceVersion"] = "424242"
    beat["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-24T13:00:00Z"}]
    return beat


def test_a_heartbeat_keeps_the_catalog() -> None:
    snapshot = snapshot_of_nodes()
    catalog = snapshot.catalog()
    snapshot.put_node(node_record(heartbeat(gpu_node("a100-1", "NVIDIA-A100-SXM4-80GB", 8))))
    snapshot.put_node(node_record(heartbeat(node("cpu-1"))))
    assert snapshot.catalog() is catalog


def test_a_change_of_card_types_or_counts_rebuilds_it() -> None:
    snapshot = snapshot_of_nodes()
    before = snapshot.catalog()
    snapshot.put_node(node_record(gpu_node("a100-1", "NVIDIA-A100-SXM4-80GB", 4)))  # 4 of 8 cards left
    after = snapshot.catalog()
    assert after.entries["NVIDIA-A100-SXM4-80GB"].total == 4
    assert before.entries["NVIDIA-A100-SXM4-80GB"].total == 8
    snapshot.put_node(node_record(gpu_node("a100-1", "NVIDIA-L40S", 4)))
    assert "NVIDIA-A100-SXM4-80GB" not in snapshot.catalog().entries
    assert "NVIDIA-L40S" in snapshot.catalog().entries


def test_a_new_node_or_a_card_node_gone_rebuilds_it_a_cpu_node_gone_does_not() -> None:
    snapshot = snapshot_of_nodes()
    catalog = snapshot.catalog()
    snapshot.remove_node("cpu-1")
    assert snapshot.catalog() is catalog
    snapshot.remove_node("h100-1")
    assert "NVIDIA-H100-80GB-HBM3" not in snapshot.catalog().entries
    snapshot.put_node(node_record(gpu_node("h100-2", "NVIDIA-H100-80GB-HBM3", 8)))
    assert "NVIDIA-H100-80GB-HBM3" in snapshot.catalog().entries
