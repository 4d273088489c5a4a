"""The in-memory cluster cache the webhooks read: a Ledger (nodes' card types, queues, podgroups, pods) kept
current by watch events, so no API call is ever made on the admission hot path.

Events can arrive twice or out of order (a full list taken at start-up, then the watch stream's own initial
listing): an event older than what the cache holds (by ``metadata.resourceVersion``) is ignored.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cardquota.core.errors import InputError
from cardquota.core.ledger import Ledger
from cardquota.core.objects import read_meta
from cardquota.core.snapshot import ClusterSnapshot, kind_of, object_key
from cardquota.core.workloads import workload_key

DELETED = "DELETED"
SINK_ONLY_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})
"""Kinds only a sink reads (the extender's DRA quota); the admission ledger has no use for them."""


class CacheSink(Protocol):
    """What the cache can feed instead of its own ledger: the extender's scheduling session reads the same events
    (core.scheduling.extender.Extender)."""

    @property
    def snapshot(self) -> ClusterSnapshot: ...

    def upsert(self, manifest: Mapping[str, Any]) -> None: ...

    def delete(self, manifest: Mapping[str, Any]) -> None: ...


@dataclass
class ClusterCache:
    """The cluster as watch events tell it, applied in order of resourceVersion (a stale event is ignored) to the
    admission ledger — or to a :class:`CacheSink` (the extender's session) when one is given. Changed only on the
    event loop, where the policies read it."""

    ledger: Ledger = field(default_factory=Ledger)
    versions: dict[tuple[str, str, str], int] = field(default_factory=dict)
    rejected: int = 0
    """Events whose object could not be read (logged by the caller; the API server should never send one)."""
    sink: CacheSink | None = None
    """Where the events go instead of :attr:`ledger`, when set."""

    @property
    def target(self) -> CacheSink | Ledger:
        return self.ledger if self.sink is None else self.sink

    @property
    def ready(self) -> bool:
        """True once the first full list has arrived."""
        return self.target.snapshot.complete

    def load(self, manifests: Iterable[Mapping[str, Any]], *, complete: bool = True) -> None:
        """A full list: the cache now reflects the whole cluster (unless ``complete`` is False: more kinds are
        still being listed, and :meth:`mark_complete` follows)."""
        was_enabled = gc.isenabled()
        gc.disable()  # the views hold no cycles: collections during the load would only walk the growing heap
        try:
            for manifest in manifests:
                self.apply("ADDED", manifest)
        finally:
            if was_enabled:
                gc.enable()
        if complete:
            self.mark_complete()

    def mark_complete(self) -> None:
        """Every kind is listed: the cache reflects the whole cluster. The objects loaded are then frozen out of
        the cyclic garbage collector's scans: a full collection over a large cluster's worth of objects would
        otherwise pause admission answers for milliseconds."""
        self.target.snapshot.complete = True
        gc.collect()
        gc.freeze()

    def apply(self, event_type: str | None, manifest: Mapping[str, Any]) -> bool:
        """Apply one watch event; False when it was stale, of a kind not cached, or unreadable."""
        kind = kind_of(manifest)
        workload = workload_key(manifest) if kind is None else None
        if kind is None and workload is None and not (self.sink is not None
                                                      and manifest.get("kind") in SINK_ONLY_KINDS):
            return False
        if kind is None and workload is None:
            try:
                meta = read_meta(manifest, namespaced=True)
            except InputError:
                self.rejected += 1
                return False
            identity = (str(manifest.get("kind")), meta.key[0], meta.key[1])
        elif workload is not None:
            identity = (f"{workload[0]}/{workload[1]}", workload[2], workload[3])
        else:
            assert kind is not None
            try:
                namespace, name = object_key(kind, manifest)
            except InputError:
                self.rejected += 1
                return False
            identity = (kind.value, namespace, name)
        version = _version(manifest)
        known = self.versions.get(identity)
        if version is not None and known is not None and version < known:
            return False
        try:
            if event_type == DELETED:
                self.target.delete(manifest)
                self.versions.pop(identity, None)
            else:
                self.target.upsert(manifest)
                if version is not None:
                    self.versions[identity] = version
        except InputError:
            self.rejected += 1
            return False
        return True


def _version(manifest: Mapping[str, Any]) -> int | None:
    metadata = manifest.get("metadata")
    value = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    return int(value) if isinstance(value, str) and value.isdigit() else None
