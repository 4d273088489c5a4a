"""A kmock emulator that refuses objects whose annotations outgrow the API server's limit, as the API server does.

The API server validates every create and update of an object's metadata with ``ValidateAnnotations``
(k8s.io/apimachinery ``pkg/api/validation/objectmeta.go``): keys and values, in bytes, may add up to
``TotalAnnotationSizeLimitB`` (256 KiB); beyond, the request fails with 422 ``Invalid`` whose message
(``errors.NewInvalid``, ``pkg/api/errors/errors.go``) reads ``<Kind>.<group> "<name>" is invalid:
metadata.annotations: Too long: may not be more than 262144 bytes`` and whose details carry one cause of type
``FieldValueTooLong`` on field ``metadata.annotations`` (``field.TooLong``, ``pkg/util/validation/field/errors.go``).
kmock alone stores anything."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kmock

LIMIT = 256 * 1024
"""apimachinery ``TotalAnnotationSizeLimitB``."""
KINDS = {"queues": "Queue", "podgroups": "PodGroup", "nodes": "Node", "pods": "Pod"}


def annotations_size(annotations: Mapping[str, Any]) -> int:
    """What ``ValidateAnnotationsSize`` sums: ``len(key) + len(value)`` in bytes."""
    return sum(len(key.encode()) + len(str(value).encode()) for key, value in annotations.items())


def too_long(kind: str, group: str, name: str) -> kmock.KubernetesError:
    qualified = f"{kind}.{group}" if group else kind
    detail = f"Too long: may not be more than {LIMIT} bytes"
    return kmock.KubernetesError(
        status=422, reason="Invalid",
        message=f'{qualified} "{name}" is invalid: metadata.annotations: {detail}',
        details={"name": name, "group": group, "kind": kind,
                 "causes": [{"reason": "FieldValueTooLong", "message": detail, "field": "metadata.annotations"}]})


class AnnotationLimits(kmock.KubernetesEmulator):
    """kmock that refuses a create or a (merge) patch leaving an object with more than :data:`LIMIT` bytes of
    annotations; the object is left as it was."""

    async def _handle(self, request: Any) -> Any:
        resource = request.resource
        if resource is not None and isinstance(request.data, dict) \
                and request.action in (kmock.action.CREATE, kmock.action.UPDATE):
            metadata = request.data.get("metadata") or {}
            name: str = request.name or metadata.get("name") or ""
            annotations: dict[str, Any] = {}
            if request.action == kmock.action.UPDATE:
                key = (resource, request.namespace, name)
                stored = self._objects[key] if key in self._objects else None  # noqa: SIM401 - no .get there
                if stored is not None and not stored.deleted:
                    annotations = dict((stored.get("metadata") or {}).get("annotations") or {})
            for annotation, value in (metadata.get("annotations") or {}).items():
                if value is None:
                    annotations.pop(annotation, None)
                else:
                    annotations[annotation] = value
            if annotations_size(annotations) > LIMIT:
                kind = KINDS.get(resource.plural, resource.plural)
                raise too_long(kind, resource.group or "", name)
        return await super()._handle(request)
