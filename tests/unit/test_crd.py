"""The shipped Queue CRD: its schema accepts the bundled example queues (validated offline with jsonschema),
rejects bad spec.dra shapes, and its printer columns read the annotations the controller writes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from builders import queue

from cardquota.core.ledger import Ledger
from cardquota.core.publish import queue_annotations
from cardquota.loader import load_paths

REPO = Path(__file__).resolve().parents[2]
CRD = yaml.safe_load((REPO / "crds" / "queues.scheduling.volcano.sh.yaml").read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]


def errors(manifest: dict[str, Any]) -> list[str]:
    return [error.message for error in jsonschema.Draft7Validator(SCHEMA).iter_errors(manifest)]


def example_queues() -> list[dict[str, Any]]:
    documents = load_paths([str(REPO / "examples" / "cluster.yaml"), str(REPO / "examples" / "check" / "good.yaml")])
    return [dict(d.manifest) for d in documents if d.manifest["kind"] == "Queue"]


def test_the_crd_is_the_volcano_queue() -> None:
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
        ({"limits": {}}, "Additional properties are not allowed ('limits' was unexpected)"),
    ],
)
def test_bad_dra_shapes_are_rejected_by_the_schema(dra: dict[str, Any], fragment: str) -> None:
    manifest = queue("q")
    manifest["spec"]["dra"] = dra
    assert any(fragment in message for message in errors(manifest)), errors(manifest)


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
    assert columns == {"CARD-QUOTA": '{"NVIDIA-A100":10}', "CARD-USAGE": "NVIDIA-A100 0/10", "PARENT": "root",
                       "STATE": "Open"}
