"""Volcano's Queue CRD with cardquota's additions (tests/volcano_crds.py: each supported release, patched): its schema
accepts the bundled example queues (validated offline with jsonschema), rejects bad spec.dra shapes, every patched
CRD stays structural, and the printer columns read the annotations the controller writes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from builders import queue
from volcano_crds import every_crd_and_release, patched_crd

from cardquota.core.ledger import Ledger
from cardquota.core.publish import queue_annotations
from cardquota.loader import load_paths

REPO = Path(__file__).resolve().parents[2]
CRD = patched_crd("queues.scheduling.volcano.sh", "v1.15.1")
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]


def errors(manifest: dict[str, Any]) -> list[str]:
    return [error.message for error in jsonschema.Draft7Validator(SCHEMA).iter_errors(manifest)]


def example_queues() -> list[dict[str, Any]]:
    documents = load_paths([str(REPO / "examples" / "cluster.yaml"), str(REPO / "examples" / "check" / "good.yaml")])
    return [dict(d.manifest) for d in documents if d.manifest["kind"] == "Queue"]


def test_the_patched_crd_is_the_volcano_queue() -> None:
    assert CRD["metadata"]["name"] == "queues.scheduling.volcano.sh"
    assert (CRD["spec"]["group"], CRD["spec"]["scope"], VERSION["name"]) == ("scheduling.volcano.sh", "Cluster",
                                                                             "v1beta1")
    assert set(SCHEMA["properties"]["spec"]["properties"]) >= {
        "capability", "deserved", "guarantee", "parent", "reclaimable", "weight", "affinity", "extendClusters", "dra"}


@pytest.mark.parametrize("manifest", example_queues(), ids=lambda q: q["metadata"]["name"])
def test_bundled_example_queues_are_valid(manifest: dict[str, Any]) -> None:
    assert errors(manifest) == []


@pytest.mark.parametrize(
    ("dra", "fragment"),
    [
        ({"capability": {"gpu": {"count": "8"}}}, "'8' is not of type 'integer'"),
        ({"capability": {"gpu": {"count": -1}}}, "-1 is less than the minimum of 0"),
        ({"capability": {"gpu": {"capacity": {"memory": "80Gi"}}}}, "'count' is a required property"),
        ({"capability": {"gpu": {"count": 1, "capacity": {"memory": "80 GB"}}}}, "does not match"),
    ],
)
def test_bad_dra_shapes_are_rejected_by_the_schema(dra: dict[str, Any], fragment: str) -> None:
    manifest = queue("q")
    manifest["spec"]["dra"] = dra
    assert any(fragment in message for message in errors(manifest)), errors(manifest)


def _schemas(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        if "type" in node or "properties" in node:
            found.append((path, node))
        for key, value in node.items():
            found.extend(_schemas(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_schemas(value, f"{path}[{index}]"))
    return found


@pytest.mark.parametrize("case", list(every_crd_and_release()), ids=lambda case: f"{case[0]}-{case[1]}")
def test_patched_crd_schemas_are_structural_as_the_api_server_requires(case: tuple[str, str]) -> None:
    """The API server refuses a CRD whose schema sets both properties and additionalProperties on one object;
    jsonschema would accept it, so the rule is checked here, on every Volcano release's CRD after our patch."""
    crd = patched_crd(*case)
    for version in crd["spec"]["versions"]:
        for where, schema in _schemas(version["schema"]["openAPIV3Schema"]):
            assert not ("properties" in schema and "additionalProperties" in schema), where
            assert "type" in schema or schema.get("x-kubernetes-int-or-string") or "anyOf" in schema, where


def test_unknown_dra_fields_are_left_to_the_policy_and_pruned_by_the_api_server() -> None:
    """No additionalProperties: false (not allowed beside properties); the Queue policy names the field instead."""
    from cardquota.core.policies.dra import dra_violations
    from cardquota.core.snapshot import ClusterSnapshot

    manifest = queue("q")
    manifest["spec"]["dra"] = {"limits": {}}
    violations, _ = dra_violations(manifest, ClusterSnapshot())
    assert [v.message for v in violations] == ["unknown field limits (spec.dra has capability, deserved and guarantee)"]


def column(json_path: str, manifest: dict[str, Any]) -> Any:
    """Evaluate a printer column's simple jsonPath (``.a.b``, with ``\\.`` escaping a dot inside a key)."""
    value: Any = manifest
    for part in re.split(r"(?<!\\)\.", json_path.lstrip(".")):
        value = value.get(part.replace("\\.", ".")) if isinstance(value, dict) else None
    return value


def test_printer_columns_show_quota_usage_parent_and_state() -> None:
    manifest = queue("team-a", '{"NVIDIA-A100":10}', parent="root")
    manifest["status"] = {"state": "Open"}
    ledger = Ledger.build([manifest])
    manifest["metadata"]["annotations"].update(queue_annotations(ledger.usage("team-a")))
    columns = {c["name"]: column(c["jsonPath"], manifest) for c in VERSION["additionalPrinterColumns"]}
    assert columns == {"CARD-QUOTA": '{"NVIDIA-A100":10}', "CARD-USAGE": "NVIDIA-A100 0/10", "PARENT": "root"}
