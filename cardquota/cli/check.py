"""What ``cardquota check`` keeps per document: its identity, the verdict, and the JSON it prints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jsonpatch

from cardquota.core.errors import InputError
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Manifest
from cardquota.core.snapshot import kind_of
from cardquota.core.verdict import PatchOperation, Verdict
from cardquota.loader import Document

Identity = tuple[str, str, str, str]
"""(API group, kind, namespace, name)."""

NAMESPACED = frozenset({"Pod", "PodGroup", "Job", "ConfigMap", "Deployment", "StatefulSet", "ReplicaSet",
                        "DaemonSet", "CronJob", "HorizontalPodAutoscaler", "Service", "Secret"})


def identity(manifest: Manifest) -> Identity:
    """Which object a manifest is, as the API server would key it (namespaced kinds default to ``default``)."""
    api_version = str(manifest.get("apiVersion", ""))
    kind = str(manifest.get("kind", ""))
    metadata = manifest.get("metadata") or {}
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    if not isinstance(namespace, str) or not namespace:
        namespace = "default" if kind in NAMESPACED else ""
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return (api_version.rpartition("/")[0], kind, namespace, str(name or ""))


def validate(documents: Sequence[Document]) -> None:
    """Read every accounted object once, so a malformed one is reported naming its file and document (the
    commands that hand the objects on to the core as a whole would lose where it came from)."""
    checker = Ledger()
    for document in documents:
        if kind_of(document.manifest) is not None:
            try:
                checker.upsert(document.manifest)
            except InputError as error:
                raise error.located(document.source) from None


def in_namespace(manifest: Manifest, namespace: str) -> Manifest:
    """A namespaced object that names no namespace, put in ``namespace`` (as ``kubectl apply -n`` would)."""
    metadata = manifest.get("metadata")
    if str(manifest.get("kind", "")) not in NAMESPACED or not isinstance(metadata, dict) or metadata.get("namespace"):
        return manifest
    return {**manifest, "metadata": {**metadata, "namespace": namespace}}


def apply_patch(manifest: Manifest, patch: Sequence[PatchOperation]) -> Manifest:
    """The object as the API server would store it after the mutating webhook's patch."""
    if not patch:
        return manifest
    try:
        patched: Manifest = jsonpatch.apply_patch(manifest, [dict(op) for op in patch])
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
        raise InputError(f"the policy's patch does not apply: {error}") from None
    return patched


@dataclass(frozen=True)
class CheckResult:
    document: Document
    identity: Identity
    verdict: Verdict

    @property
    def kind(self) -> str:
        return self.identity[1]

    @property
    def namespace(self) -> str:
        return self.identity[2]

    @property
    def name(self) -> str:
        return self.identity[3]

    def as_json(self) -> dict[str, Any]:
        verdict = self.verdict.as_json()
        return {
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "allowed": verdict["allowed"],
            "message": verdict["message"],
            "warnings": verdict["warnings"],
            "patch": verdict["patch"],
            "violations": verdict["violations"],
            "source": self.document.source,
        }
