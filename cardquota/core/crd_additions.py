"""What cardquota adds to Volcano's own CRDs, as a patch over the CRD that is installed — never a whole CRD.

Volcano owns the Queue, PodGroup and Job CRDs: their schemas, defaults, validations, subresources and printer
columns change with every Volcano release, and Volcano's scheduler and controllers depend on them (a PodGroup
status subresource, for one, would stop every Volcano job: the scheduler writes PodGroup status with a plain
update). cardquota only adds:

- Queue: the ``spec.dra`` schema of dra-queue-quota-design.md (without it the API server prunes ``spec.dra``) and
  the CARD-QUOTA / CARD-USAGE printer columns;
- PodGroup and Job: a CARD-REQUEST printer column.

:func:`install_patch` computes the RFC 6902 patch that adds exactly what is missing from the installed CRD (nothing
when all is there: re-runnable after a Volcano upgrade); :func:`uninstall_patch` the one that removes exactly what we
added, and only where it is still ours (equal to what we add); :func:`inspect` says, per addition, whether it is
present, missing or held by something else — the operator's drift check and ``kubectl cardquota doctor`` read it.
Every patch starts with ``test`` operations on the resourceVersion and on the items it addresses by index, so a
CRD changed between read and patch is refused by the API server instead of being patched in the wrong place.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.verdict import PatchOperation

QUEUE_CRD = "queues.scheduling.volcano.sh"
PODGROUP_CRD = "podgroups.scheduling.volcano.sh"
JOB_CRD = "jobs.batch.volcano.sh"
CRD_NAMES = (QUEUE_CRD, PODGROUP_CRD, JOB_CRD)

_QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+"
                     r"(\.[0-9]*)?)|(\.[0-9]+))))?$")


def _device_quota(purpose: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": f"{purpose} per DeviceClass name.",
        "additionalProperties": {
            "type": "object",
            "required": ["count"],
            "properties": {
                "count": {"type": "integer", "format": "int64", "minimum": 0,
                          "description": "Number of devices of the DeviceClass."},
                "capacity": {
                    "type": "object",
                    "description": "Consumable capacity per dimension (for example cores, memory).",
                    "additionalProperties": {"anyOf": [{"type": "integer"}, {"type": "string"}],
                                             "pattern": _QUANTITY_PATTERN, "x-kubernetes-int-or-string": True},
                },
            },
        },
    }


DRA_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "description": "DRA device quotas per DeviceClass (added by cardquota).",
    "properties": {
        "capability": _device_quota("Hard limit"),
        "deserved": _device_quota("Deserved share"),
        "guarantee": _device_quota("Guaranteed share"),
    },
}


@dataclass(frozen=True)
class SchemaAddition:
    """A property added to a version's schema: ``parent`` is the property path (``("spec",)``) it goes under."""

    parent: tuple[str, ...]
    name: str
    schema: Mapping[str, Any]

    @property
    def label(self) -> str:
        return "schema " + ".".join((*self.parent, self.name))


@dataclass(frozen=True)
class ColumnAddition:
    """A printer column appended to a version's ``additionalPrinterColumns``."""

    column: Mapping[str, Any]

    @property
    def label(self) -> str:
        return f"column {self.column['name']}"


Addition = SchemaAddition | ColumnAddition

DRA_ADDITION = SchemaAddition(("spec",), "dra", DRA_SCHEMA)
"""The Queue schema's ``spec.dra``: without it the API server prunes every queue's DRA quotas."""
_CARD_REQUEST_COLUMN = ColumnAddition({"name": "CARD-REQUEST", "type": "string", "priority": 1,
                                       "description": "volcano.sh/card.request (cardquota)",
                                       "jsonPath": ".metadata.annotations.volcano\\.sh/card\\.request"})

ADDITIONS: Mapping[str, tuple[Addition, ...]] = {
    QUEUE_CRD: (
        DRA_ADDITION,
        ColumnAddition({"name": "CARD-QUOTA", "type": "string", "description": "volcano.sh/card.quota (cardquota)",
                        "jsonPath": ".metadata.annotations.volcano\\.sh/card\\.quota"}),
        ColumnAddition({"name": "CARD-USAGE", "type": "string",
                        "description": "allocated/quota per card type (volcano.sh/card.usage, written by cardquota)",
                        "jsonPath": ".metadata.annotations.volcano\\.sh/card\\.usage"}),
    ),
    PODGROUP_CRD: (_CARD_REQUEST_COLUMN,),
    JOB_CRD: (_CARD_REQUEST_COLUMN,),
}
"""Per CRD, what cardquota adds to every version it serves."""


class State(enum.StrEnum):
    PRESENT = "present"
    """Installed and equal to what cardquota adds."""
    MISSING = "missing"
    """Not there: ``install_patch`` adds it."""
    FOREIGN = "foreign"
    """Something else holds that place (Volcano's own field or column of that name): left alone."""
    UNREACHABLE = "unreachable"
    """The CRD's version has no place for it (no ``spec`` property of type object): cannot be added."""


WORDING: Mapping[State, str] = {
    State.PRESENT: "in place",
    State.FOREIGN: "defined by someone else (Volcano's own?): left alone",
    State.MISSING: "missing",
    State.UNREACHABLE: "cannot be added: the CRD's schema has no spec object to put it in",
}
"""How ``kubectl cardquota crd status`` and ``kubectl cardquota doctor`` say each state."""


@dataclass(frozen=True)
class AdditionState:
    crd: str
    version: str
    label: str
    state: State

    def __str__(self) -> str:
        return f"{self.crd} {self.version}: {self.label} {self.state.value}"


def _pointer(*parts: str | int) -> str:
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def _schema_parent(version: Mapping[str, Any], addition: SchemaAddition) -> tuple[list[str | int], Any]:
    """The JSON-pointer parts of the object schema the addition goes under (``.../properties/spec``), and that
    schema: None when the version has no such object (no schema, no ``spec``, or ``spec`` is a map or scalar)."""
    parts: list[str | int] = ["schema", "openAPIV3Schema"]
    schema = version.get("schema")
    node: Any = schema.get("openAPIV3Schema") if isinstance(schema, MAPPING_TYPES) else None
    for name in addition.parent:
        properties = node.get("properties") if isinstance(node, MAPPING_TYPES) else None
        node = properties.get(name) if isinstance(properties, MAPPING_TYPES) else None
        parts += ["properties", name]
    if not isinstance(node, MAPPING_TYPES) or node.get("type", "object") != "object" or "additionalProperties" in node:
        return parts, None
    return parts, node


def _properties(node: Mapping[str, Any]) -> Mapping[str, Any]:
    properties = node.get("properties")
    return properties if isinstance(properties, MAPPING_TYPES) else {}


def _columns(version: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    columns = version.get("additionalPrinterColumns")
    return [c for c in columns if isinstance(c, MAPPING_TYPES)] if isinstance(columns, list) else []


def _state(version: Mapping[str, Any], addition: Addition) -> State:
    if isinstance(addition, SchemaAddition):
        _, parent = _schema_parent(version, addition)
        if parent is None:
            return State.UNREACHABLE
        properties = _properties(parent)
        if addition.name not in properties:
            return State.MISSING
        return State.PRESENT if properties[addition.name] == addition.schema else State.FOREIGN
    for column in _columns(version):
        if column.get("name") == addition.column["name"]:
            return State.PRESENT if column == addition.column else State.FOREIGN
    return State.MISSING


def _versions(crd: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    spec = crd.get("spec")
    versions = spec.get("versions") if isinstance(spec, MAPPING_TYPES) else None
    if not isinstance(versions, list):
        return []
    return [(index, version) for index, version in enumerate(versions)
            if isinstance(version, MAPPING_TYPES) and isinstance(version.get("name"), str)]


def crd_name(crd: Mapping[str, Any]) -> str:
    metadata = crd.get("metadata")
    name = metadata.get("name") if isinstance(metadata, MAPPING_TYPES) else None
    return name if isinstance(name, str) else ""


def inspect(crd: Mapping[str, Any]) -> list[AdditionState]:
    """Per served version of ``crd`` and per addition of that CRD, where it stands."""
    name = crd_name(crd)
    return [AdditionState(name, version["name"], addition.label, _state(version, addition))
            for _, version in _versions(crd) if version.get("served", True)
            for addition in ADDITIONS.get(name, ())]


def missing(crd: Mapping[str, Any]) -> list[AdditionState]:
    """The additions ``install_patch`` would add (the drift check's answer: empty when all is in place)."""
    return [state for state in inspect(crd) if state.state is State.MISSING]


def _guards(crd: Mapping[str, Any], indexes: Sequence[int]) -> list[PatchOperation]:
    guards: list[PatchOperation] = []
    metadata = crd.get("metadata")
    resource_version = metadata.get("resourceVersion") if isinstance(metadata, MAPPING_TYPES) else None
    if isinstance(resource_version, str) and resource_version:
        guards.append({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})
    versions = crd["spec"]["versions"] if indexes else []
    guards += [{"op": "test", "path": _pointer("spec", "versions", index, "name"), "value": versions[index]["name"]}
               for index in sorted(set(indexes))]
    return guards


def _in_state(crd: Mapping[str, Any], state: State) -> Iterator[tuple[int, Mapping[str, Any], Addition]]:
    """Each (version index, version, addition) of ``crd`` whose addition is in ``state``; install looks at served
    versions only, removal at every version."""
    for index, version in _versions(crd):
        if state is State.MISSING and not version.get("served", True):
            continue
        for addition in ADDITIONS.get(crd_name(crd), ()):
            if _state(version, addition) is state:
                yield index, version, addition


def install_patch(crd: Mapping[str, Any]) -> list[PatchOperation]:
    """The JSON patch adding what is missing from ``crd``; empty when nothing is (idempotent)."""
    operations: list[PatchOperation] = []
    columns: dict[int, list[dict[str, Any]]] = {}
    versions: dict[int, Mapping[str, Any]] = {}
    for index, version, addition in _in_state(crd, State.MISSING):
        versions[index] = version
        if isinstance(addition, ColumnAddition):
            columns.setdefault(index, []).append(copy.deepcopy(dict(addition.column)))
            continue
        parts, parent = _schema_parent(version, addition)
        base = _pointer("spec", "versions", index, *parts, "properties")
        if "properties" not in parent and not any(op["path"] == base for op in operations):
            operations.append({"op": "add", "path": base, "value": {}})
        operations.append({"op": "add", "path": base + _pointer(addition.name),
                           "value": copy.deepcopy(dict(addition.schema))})
    for index, added in columns.items():
        where = _pointer("spec", "versions", index, "additionalPrinterColumns")
        if "additionalPrinterColumns" not in versions[index]:
            operations.append({"op": "add", "path": where, "value": added})
        else:
            operations += [{"op": "add", "path": f"{where}/-", "value": column} for column in added]
    return [*_guards(crd, list(versions)), *operations] if operations else []


def uninstall_patch(crd: Mapping[str, Any]) -> list[PatchOperation]:
    """The JSON patch removing what cardquota added and is still as cardquota added it; empty when nothing is."""
    operations: list[PatchOperation] = []
    columns: dict[int, list[int]] = {}
    versions: dict[int, Mapping[str, Any]] = {}
    for index, version, addition in _in_state(crd, State.PRESENT):
        versions[index] = version
        if isinstance(addition, ColumnAddition):
            listed = version["additionalPrinterColumns"]  # a list: the column was found in it
            columns.setdefault(index, []).extend(position for position, column in enumerate(listed)
                                                 if column == addition.column)
            continue
        parts, _ = _schema_parent(version, addition)
        operations.append({"op": "remove", "path": _pointer("spec", "versions", index, *parts, "properties",
                                                            addition.name)})
    for index, positions in columns.items():
        for position in sorted(positions, reverse=True):  # later items first: the earlier indexes stay valid
            column = _pointer("spec", "versions", index, "additionalPrinterColumns", position)
            name = versions[index]["additionalPrinterColumns"][position]["name"]
            operations += [{"op": "test", "path": f"{column}/name", "value": name}, {"op": "remove", "path": column}]
    return [*_guards(crd, list(versions)), *operations] if operations else []


def restore_command(names: Sequence[str] = CRD_NAMES) -> str:
    """The one command that (re)applies the additions — said wherever they are found missing."""
    return "kubectl cardquota crd install" + ("" if list(names) == list(CRD_NAMES) else " " + " ".join(names))
