"""The in-memory cluster cache the webhooks read: a Ledger (nodes' card types, queues, podgroups, pods) kept
current by watch events, so no API call is ever made on the admission hot path.

Events are applied in the order they arrive, and the order is all the cache relies on: one watch stream delivers a
kind's changes in the order they happened, a list is newer than the watch events before it (a list replaces what it
lists, and its reader deletes what it no longer has: operator/reflector.py), and a watch continues from the
resourceVersion of the list or event before it. ``metadata.resourceVersion`` itself is never compared: it is opaque,
and clients may compare two only for equality (Kubernetes documentation, "API concepts", section "Resource
versions"); nor does it grow across an etcd restore, after which a cache that ignored events "older" than what it
held would ignore every update until it restarted.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cardquota.core.dra_claims import is_claim
from cardquota.core.errors import InputError
from cardquota.core.ledger import Ledger
from cardquota.core.objects import read_meta
from cardquota.core.snapshot import ClusterSnapshot, kind_of, object_key
from cardquota.core.workloads import workload_key

DELETED = "DELETED"
Identity = tuple[str, str, str]
"""(kind, namespace, name) of a cached object (see :meth:`ClusterCache.identity`)."""


class CacheSink(Protocol):
    """What the cache can feed instead of its own ledger: the extender's scheduling session reads the same events
    (core.scheduling.extender.Extender)."""

    @property
    def snapshot(self) -> ClusterSnapshot: ...

    def upsert(self, manifest: Mapping[str, Any]) -> None: ...

    def delete(self, manifest: Mapping[str, Any]) -> None: ...


@dataclass
class ClusterCache:
    """The cluster as watch events tell it, applied in the order they arrive to the admission ledger — or to a
    :class:`CacheSink` (the extender's session) when one is given. Changed only on the event loop, where the
    policies read it."""

    ledger: Ledger = field(default_factory=Ledger)
    held: set[Identity] = field(default_factory=set)
    """The identities of the objects held (what a relist that no longer lists one deletes)."""
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
        """Apply one watch event (or a listed object, as ADDED), whatever its resourceVersion: it is the newest the
        cache has seen of the object. False when it was of a kind not cached, or unreadable."""
        try:
            identity = self.identity(manifest)
        except InputError:
            self.rejected += 1
            return False
        if identity is None:
            return False
        try:
            if event_type == DELETED:
                self.target.delete(manifest)
                self.held.discard(identity)
            else:
                self.target.upsert(manifest)
                self.held.add(identity)
        except InputError:
            self.rejected += 1
            return False
        return True

    def identity(self, manifest: Mapping[str, Any]) -> Identity | None:
        """(kind, namespace, name) of an object the cache holds (``apps/ReplicaSet`` for a workload; namespace ""
        for a node or a queue): what :attr:`held` holds. None for a kind it does not hold; raises
        InputError for an object it cannot read."""
        kind = kind_of(manifest)
        if kind is not None:
            namespace, name = object_key(kind, manifest)
            return (kind.value, namespace, name)
        workload = workload_key(manifest)
        if workload is not None:
            return (f"{workload[0]}/{workload[1]}", workload[2], workload[3])
        if is_claim(manifest):  # (DRA claims: the extender's session and the card-quota gate read them)
            meta = read_meta(manifest, namespaced=True)
            return (str(manifest.get("kind")), meta.key[0], meta.key[1])
        return None

