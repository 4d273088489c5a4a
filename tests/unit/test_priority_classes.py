"""PriorityClasses followed into the snapshot, so that a PodGroup's priority is known before its pods exist
(:meth:`ClusterSnapshot.job_priority`): read from a full list (the operator's start, ``--cluster`` files), kept by
watch events in the cluster cache and in the extender's session, and held empty where they may not be listed.

Volcano's scheduler cache is the reference (volcano-sh/volcano v1.15.1, pkg/scheduler/cache/event_handlers.go
``addPriorityClass``/``deletePriorityClass``/``UpdatePriorityClass``; cache.go ``cloneJob``): the named class's
value, else the global default's, else 0; with several classes marked ``globalDefault``, the last one added;
deleting one marked ``globalDefault`` sets the default back to 0."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import podgroup, priority_class
from polling import eventually

from cardquota.cli.kubectl import Cluster
from cardquota.core.errors import InputError
from cardquota.core.ledger import Ledger
from cardquota.core.objects import PodGroup
from cardquota.core.scheduling.session import Session
from cardquota.core.snapshot import ClusterSnapshot, Kind, kind_of
from cardquota.kube import PRIORITY_CLASS_RESOURCES, Forbidden, ListPage, ListProgress, WatchEvent
from cardquota.operator.reflector import NOT_SERVED_RETRY_SECONDS, Reflector, resource_reflector
from cardquota.runtime.cache import DELETED, ClusterCache

HIGH, LOW, DEFAULT = priority_class("high", 1000), priority_class("low", 10), priority_class("base", 5,
                                                                                               global_default=True)


def priority(snapshot: ClusterSnapshot, class_name: str | None) -> int:
    return snapshot.job_priority(PodGroup.from_manifest(podgroup("pg", priority_class=class_name)))


@pytest.mark.parametrize(("listed", "class_name", "expected"), [
    pytest.param([HIGH, LOW], "high", 1000, id="named"),
    pytest.param([HIGH, LOW], "low", 10, id="named-low"),
    pytest.param([HIGH, LOW], "missing", 0, id="missing-no-default"),
    pytest.param([HIGH, LOW], None, 0, id="unnamed-no-default"),
    pytest.param([HIGH, DEFAULT], "missing", 5, id="missing-global-default"),
    pytest.param([HIGH, DEFAULT], None, 5, id="unnamed-global-default"),
    pytest.param([HIGH, DEFAULT], "high", 1000, id="named-beats-default"),
    pytest.param([priority_class("a", 7, global_default=True), priority_class("b", 3, global_default=True)], None,
                 3, id="several-defaults-last-listed"),
    pytest.param([priority_class("b", 3, global_default=True), priority_class("a", 7, global_default=True)], None,
                 7, id="several-defaults-last-listed-other-order"),
    pytest.param([], "high", 0, id="none-listed"),
])
def test_a_listed_cluster_gives_each_job_its_class_value(listed: Sequence[Mapping[str, Any]], class_name: str | None,
                                                         expected: int) -> None:
    ledger = Ledger.build([*listed, podgroup("other")])
    assert priority(ledger.snapshot, class_name) == expected
    one_by_one = Ledger()
    for manifest in listed:
        one_by_one.upsert(manifest)
    assert priority(one_by_one.snapshot, class_name) == expected


def events(*steps: tuple[str, Mapping[str, Any]]) -> ClusterCache:
    cache = ClusterCache()
    for event_type, manifest in steps:
        assert cache.apply(event_type, manifest)
    return cache


@pytest.mark.parametrize(("steps", "expected"), [
    pytest.param([("ADDED", HIGH)], {"high": 1000, None: 0}, id="added"),
    pytest.param([("ADDED", HIGH), ("MODIFIED", priority_class("high", 2000))], {"high": 2000}, id="modified"),
    pytest.param([("ADDED", HIGH), ("ADDED", DEFAULT), (DELETED, HIGH)], {"high": 5, None: 5}, id="deleted"),
    pytest.param([("ADDED", DEFAULT), (DELETED, {**DEFAULT, "globalDefault": None})], {None: 0, "base": 0},
                 id="default-deleted"),
    pytest.param([("ADDED", DEFAULT), ("MODIFIED", priority_class("base", 5))], {None: 0, "base": 5},
                 id="default-unmarked"),
    pytest.param([("ADDED", priority_class("a", 7, global_default=True)),
                  ("ADDED", priority_class("b", 3, global_default=True)), (DELETED, priority_class("a", 7))],
                 {None: 0, "b": 3}, id="deleting-either-default-resets"),
    pytest.param([("ADDED", LOW), ("MODIFIED", priority_class("low", 10, global_default=True))],
                 {None: 10, "missing": 10}, id="marked-default-later"),
])
def test_the_cache_follows_watch_events(steps: Sequence[tuple[str, Mapping[str, Any]]],
                                        expected: Mapping[str | None, int]) -> None:
    cache = events(*steps)
    assert {name: priority(cache.ledger.snapshot, name) for name in expected} == expected


def test_the_cache_holds_a_class_by_its_cluster_scoped_name() -> None:
    cache = events(("ADDED", HIGH))
    assert cache.held == {("PriorityClass", "", "high")}
    cache.apply(DELETED, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}})
    assert cache.held == set()
    assert cache.ledger.snapshot.priority_classes == {}


@pytest.mark.parametrize("api_version", ["scheduling.k8s.io/v1", "scheduling.k8s.io/v1beta1"])
def test_the_kind_is_accounted_in_its_group_only(api_version: str) -> None:
    assert kind_of({**HIGH, "apiVersion": api_version}) is Kind.PRIORITY_CLASS
    assert kind_of({**HIGH, "apiVersion": "example.com/v1"}) is None


@pytest.mark.parametrize(("manifest", "where"), [
    pytest.param({**HIGH, "value": "1000"}, "value", id="value-string"),
    pytest.param({key: value for key, value in HIGH.items() if key != "value"}, "value", id="value-missing"),
    pytest.param({**HIGH, "globalDefault": "yes"}, "globalDefault", id="default-string"),
])
def test_a_malformed_class_is_refused_naming_the_field(manifest: Mapping[str, Any], where: str) -> None:
    with pytest.raises(InputError) as raised:
        Ledger().upsert(manifest)
    assert raised.value.where == where
    cache = ClusterCache()
    assert not cache.apply("ADDED", manifest)
    assert cache.rejected == 1


def test_the_extenders_session_follows_classes() -> None:
    """The extender feeds its scheduling session the cache's events (runtime.cache.CacheSink)."""
    session = Session([HIGH, DEFAULT])
    assert priority(session.ledger.snapshot, "high") == 1000
    session.upsert(priority_class("high", 50))
    assert priority(session.ledger.snapshot, "high") == 50
    session.delete(DEFAULT)
    assert priority(session.ledger.snapshot, None) == 0
    session.delete(HIGH)
    assert session.ledger.snapshot.priority_classes == {}


# ------------------------------------------------------------------------------------------ the reflector


class QuietWatch:
    """A watch with no event, open until closed."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def events(self) -> Iterator[WatchEvent]:
        self.closed.wait(10)
        yield from ()

    def close(self) -> None:
        self.closed.set()


@dataclass
class ClassesServer:
    """PriorityClasses in one page; 403 while ``allowed`` is False (RBAC predating them)."""

    classes: list[Mapping[str, Any]]
    allowed: bool = True
    lists: int = 0

    def lister(self, progress: ListProgress) -> Iterator[ListPage]:
        self.lists += 1
        if not self.allowed:
            raise Forbidden('priorityclasses.scheduling.k8s.io is forbidden: User "system:serviceaccount:'
                            'cardquota-system:cardquota" cannot list resource "priorityclasses"', 403)
        yield ListPage([{**item, "metadata": {**item["metadata"], "resourceVersion": "5"}} for item in self.classes],
                       "100", True)

    def watcher(self, version: str) -> QuietWatch:
        return QuietWatch()


def test_the_operator_reflects_priority_classes_as_optional() -> None:
    reflector = resource_reflector(ClusterCache(), None, PRIORITY_CLASS_RESOURCES[0])  # type: ignore[arg-type]
    assert (reflector.kind, reflector.api_version, reflector.optional) == ("PriorityClass", "scheduling.k8s.io/v1",
                                                                           True)


@pytest.mark.asyncio
async def test_classes_that_may_not_be_listed_are_held_empty_and_listed_again_until_allowed() -> None:
    """An install whose RBAC predates PriorityClasses: start-up completes with none (every job of priority 0), the
    process is not reported lagging, and once the ClusterRole allows them they arrive without a restart."""
    server = ClassesServer([HIGH], allowed=False)
    cache = ClusterCache()
    sleeps: list[float] = []

    async def sleep(delay: float) -> None:
        sleeps.append(delay)
        await asyncio.sleep(0)

    reflector = Reflector(cache, "scheduling.k8s.io/v1", "PriorityClass", lister=server.lister,
                          watcher=server.watcher, sleep=sleep, optional=True)
    task = asyncio.create_task(reflector.run())
    await asyncio.wait_for(reflector.synced.wait(), 5)
    assert cache.ledger.snapshot.priority_classes == {}
    await eventually(lambda: server.lists >= 3)
    assert set(sleeps) == {NOT_SERVED_RETRY_SECONDS}
    assert reflector.failing_since is None
    server.allowed = True
    await eventually(lambda: "high" in cache.ledger.snapshot.priority_classes)
    assert priority(cache.ledger.snapshot, "high") == 1000
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.asyncio
async def test_a_required_kind_that_may_not_be_listed_still_fails() -> None:
    """Only an optional kind reads a 403 as none: for pods or PodGroups it is an error to report (and retry)."""
    reflector = Reflector(ClusterCache(), "scheduling.k8s.io/v1", "PriorityClass",
                          lister=ClassesServer([HIGH], allowed=False).lister, watcher=ClassesServer([]).watcher)
    with pytest.raises(Forbidden):
        await reflector.relist()


# ------------------------------------------------------------------------------------------ offline input


def test_a_cluster_file_gives_jobs_their_class_values(tmp_path: Path) -> None:
    """``--cluster FILE`` (``usage``, ``explain``, ``check``, ``simulate``): the dump's PriorityClasses are read."""
    dump = tmp_path / "cluster.yaml"
    dump.write_text(yaml.safe_dump_all([HIGH, DEFAULT, podgroup("pg", priority_class="high")]))
    ledger = Ledger.build(Cluster([str(dump)], None, None).objects())
    assert priority(ledger.snapshot, "high") == 1000
    assert priority(ledger.snapshot, None) == 5


def test_a_malformed_class_in_a_cluster_file_is_reported_where_it_is(tmp_path: Path) -> None:
    dump = tmp_path / "cluster.yaml"
    dump.write_text(yaml.safe_dump_all([HIGH, {**LOW, "value": "ten"}]))
    with pytest.raises(InputError) as raised:
        Cluster([str(dump)], None, None).objects()
    assert "cluster.yaml" in str(raised.value)
    assert "value" in str(raised.value)
