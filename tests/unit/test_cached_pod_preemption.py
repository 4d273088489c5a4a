"""What preemption reads of a held pod (core/preemption.py): a pod the ledger caches from a list or a watch event
keeps ``volcano.sh/preemptable`` from its annotations and labels (read as Volcano's ``api.GetPodPreemptable``), its
``spec.priority`` and when it was bound, as the pod's own whole view says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from builders import gpu_node, pod, podgroup, queue

from cardquota.core import keys
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Pod
from cardquota.core.preemption import pod_preemptable, unit_admitted

A100 = "NVIDIA-A100"
BOUND = "2026-12-07T10:15:00Z"
CREATED = "2026-12-07T10:00:00Z"


@dataclass(frozen=True)
class Marked:
    name: str
    annotations: dict[str, str]
    labels: dict[str, str]
    preemptable: bool
    """As Volcano reads it: the annotation, else the label, parsed as strconv.ParseBool; neither: preemptable."""


MARKED = [
    Marked("annotation false", {keys.PREEMPTABLE: "false"}, {}, False),
    Marked("annotation true", {keys.PREEMPTABLE: "true"}, {}, True),
    Marked("label false", {}, {keys.PREEMPTABLE: "false"}, False),
    Marked("label 0", {}, {keys.PREEMPTABLE: "0"}, False),
    Marked("label true", {}, {keys.PREEMPTABLE: "True"}, True),
    Marked("annotation before label", {keys.PREEMPTABLE: "true"}, {keys.PREEMPTABLE: "false"}, True),
    Marked("annotation false before label true", {keys.PREEMPTABLE: "F"}, {keys.PREEMPTABLE: "true"}, False),
    Marked("unparsable label", {}, {keys.PREEMPTABLE: "yes"}, False),
    Marked("neither", {}, {"app": "sweep"}, True),
    Marked("no labels at all", {}, {}, True),
]


def marked_pod(case: Marked, name: str = "p") -> dict[str, Any]:
    return pod(name, node_name="a100-1", gpus=1, card=A100, group="g", priority=100, scheduled_at=BOUND,
               annotations={"volcano.sh/job-name": "sweep", **case.annotations},
               labels={"volcano.sh/job-name": "sweep", **case.labels})


CLUSTER = [gpu_node("a100-1", A100, 8), queue("q", {A100: 8}), podgroup("g", queue="q", request={A100: 1})]


def held_after(fed: str, manifest: dict[str, Any]) -> Pod:
    """The pod as the ledger holds it, fed by a full list, a watch event, or a view the webhook built."""
    if fed == "listed":
        ledger = Ledger.build([*CLUSTER, manifest])
    else:
        ledger = Ledger.build(CLUSTER)
        if fed == "watched":
            ledger.upsert(manifest)
        else:
            ledger.upsert_pod(Pod.from_manifest(manifest))
    return ledger.snapshot.pods[("default", "p")]


FEDS = ["listed", "watched", "upserted as a view"]


@pytest.mark.parametrize("fed", FEDS)
@pytest.mark.parametrize("case", MARKED, ids=[case.name for case in MARKED])
def test_a_held_pod_reads_as_preemptable_as_volcano_reads_it(case: Marked, fed: str) -> None:
    manifest = marked_pod(case)
    held = held_after(fed, manifest)
    assert pod_preemptable(held) is case.preemptable
    assert pod_preemptable(Pod.from_manifest(manifest)) is case.preemptable
    assert "volcano.sh/job-name" not in held.labels
    assert "volcano.sh/job-name" not in held.annotations


@dataclass(frozen=True)
class Ordered:
    """A pod and what preemption orders it by: priority, binding."""

    name: str
    manifest: dict[str, Any]
    priority: int
    admitted: str


ORDERED = [
    Ordered("bound, with a priority", pod("p", node_name="a100-1", card=A100, gpus=1, priority=1000,
                                          created=CREATED, scheduled_at=BOUND), 1000, BOUND),
    Ordered("bound, negative priority", pod("p", node_name="a100-1", card=A100, gpus=1, priority=-5,
                                            scheduled_at=BOUND), -5, BOUND),
    Ordered("bound, no priority", pod("p", node_name="a100-1", card=A100, gpus=1, scheduled_at=BOUND), 0, BOUND),
    Ordered("bound, no condition written", pod("p", node_name="a100-1", card=A100, gpus=1, priority=7), 7, ""),
    Ordered("past the gate, not bound", pod("p", card=A100, gpus=1, priority=1000, created=CREATED), 1000, ""),
    Ordered("gated", pod("p", card=A100, gpus=1, priority=1000, gated=True, created=CREATED), 1000, ""),
    Ordered("nothing", pod("p", card=A100, gpus=1), 0, ""),
]


def unscheduled(manifest: dict[str, Any]) -> dict[str, Any]:
    """The pod with the condition an unbound pod carries (``PodScheduled: False``): no admission time."""
    manifest["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                         "lastTransitionTime": "2026-12-07T09:00:00Z"}]
    return manifest


@pytest.mark.parametrize("fed", FEDS)
@pytest.mark.parametrize("case", ORDERED, ids=[case.name for case in ORDERED])
def test_a_held_pod_keeps_its_priority_and_when_it_was_bound(case: Ordered, fed: str) -> None:
    held = held_after(fed, case.manifest)
    assert (held.priority, held.admitted) == (case.priority, case.admitted)
    assert held == Pod.from_manifest(case.manifest).cached()
    whole = Pod.from_manifest(case.manifest)
    assert (whole.priority, whole.admitted) == (case.priority, case.admitted)
    assert (held.gate is not None) == ("gated" in case.name)


def test_a_pod_not_scheduled_yet_has_no_admission_time() -> None:
    held = held_after("watched", unscheduled(pod("p", card=A100, gpus=1, priority=3)))
    assert (held.priority, held.admitted) == (3, "")


def test_a_pod_bound_by_a_later_event_takes_its_admission_time_from_it() -> None:
    ledger = Ledger.build([*CLUSTER, unscheduled(pod("p", card=A100, gpus=1, priority=3))])
    ledger.upsert(pod("p", card=A100, gpus=1, priority=3, node_name="a100-1", scheduled_at=BOUND))
    assert ledger.snapshot.pods[("default", "p")].admitted == BOUND


def test_the_pods_of_a_gang_bound_together_share_one_standing() -> None:
    one, two = (Pod.from_manifest(pod(name, node_name="a100-1", group="g", priority=1000, scheduled_at=BOUND),
                                  cached=True) for name in ("w0", "w1"))
    assert one.standing is two.standing is not None
    lone = Pod.from_manifest(pod("w9", node_name="a100-1", priority=1000, scheduled_at="2026-12-07T11:00:00Z"),
                             cached=True)
    assert lone.standing is not one.standing
    assert lone.priority == one.priority == 1000  # (shared as one int object when interpreted; compiled, unboxed)
    plain = Pod.from_manifest(pod("w2", node_name="a100-1", group="g"), cached=True)
    assert plain.standing is None
    assert (plain.priority, plain.admitted) == (0, "")


NOW = "2026-12-07T12:00:00Z"


def bound(name: str, at: str | None) -> Pod:
    return Pod.from_manifest(pod(name, group="g", node_name="a100-1" if at else None, scheduled_at=at), cached=True)


@pytest.mark.parametrize(("pods", "admitted"), [
    ([bound("w0", "2026-12-07T10:15:00Z"), bound("w1", "2026-12-07T10:15:02Z")], "2026-12-07T10:15:02Z"),
    ([bound("w0", BOUND)], BOUND),
    ([bound("w0", BOUND), bound("w1", None)], NOW),
    ([bound("w0", None)], NOW),
], ids=["the last of a gang to be bound", "a lone pod", "a gang still being placed", "a pod not bound yet"])
def test_a_unit_was_admitted_when_its_last_pod_was_bound_or_now_while_one_is_not(pods: list[Pod], admitted: str
                                                                                   ) -> None:
    assert unit_admitted(pods, NOW) == admitted
