"""Which events ``kubectl describe`` shows for an object, as kubectl and the API server decide it (for tests).

kubectl v1.32 (staging/src/k8s.io/kubectl/pkg/describe/describe.go): ``PodDescriber.Describe`` and, for custom
resources such as PodGroup and Queue, ``genericDescriber.Describe`` get the object, then ``searchEvents`` takes its
reference (``reference.GetReference``, client-go tools/reference/ref.go: the object's own kind, name, namespace and
uid) and lists events in the reference's namespace ("" for a cluster-scoped object: every namespace) with the field
selector ``GetFieldSelector`` builds (client-go kubernetes/typed/core/v1/event_expansion.go): involvedObject.name
and involvedObject.namespace always, involvedObject.kind when the reference has a kind, involvedObject.uid when it
has a uid. Each term is an equality, and all must hold (a ``fields.Set`` as a selector). The API server compares
them with the event's own fields (the event strategy's selectable fields, pkg/registry/core/event/strategy.go): a
field the event leaves out is "".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def describe_selector(obj: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """(the namespace kubectl lists events in, its field selector's terms) for ``obj`` as the API server returns it."""
    metadata = obj.get("metadata") or {}
    kind, uid = str(obj.get("kind") or ""), str(metadata.get("uid") or "")
    namespace = str(metadata.get("namespace") or "")
    terms = {"involvedObject.name": str(metadata.get("name") or ""), "involvedObject.namespace": namespace}
    if kind:
        terms["involvedObject.kind"] = kind
    if uid:
        terms["involvedObject.uid"] = uid
    return namespace, terms


def field_selector(terms: Mapping[str, str]) -> str:
    """The selector's text as kubectl sends it (``key=value`` joined by commas; ``\\``, ``,`` and ``=`` escaped in
    values, as apimachinery's ``fields.EscapeValue``)."""
    def escaped(value: str) -> str:
        return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
    return ",".join(f"{key}={escaped(value)}" for key, value in sorted(terms.items()))


def selectable_fields(event: Mapping[str, Any]) -> dict[str, str]:
    """The involvedObject fields of an event the API server's field selectors read ("" when left out)."""
    involved = event.get("involvedObject") or {}
    return {f"involvedObject.{name}": str(involved.get(name) or "")
            for name in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")}


def described_events(events: Iterable[Mapping[str, Any]], obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The events among ``events`` (of every namespace) that ``kubectl describe`` lists for ``obj``."""
    namespace, terms = describe_selector(obj)
    found = []
    for event in events:
        if namespace and (event.get("metadata") or {}).get("namespace") != namespace:
            continue
        fields = selectable_fields(event)
        if all(fields.get(key) == value for key, value in terms.items()):
            found.append(event)
    return found
