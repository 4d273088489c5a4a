"""A PodGroup without ``volcano.sh/card.request`` is judged by its pods' cards, and a Running elastic job keeps what
its waiting pods need reserved — as Volcano and the seed count them.

* Volcano creates one PodGroup per plain pod, or per controlling owner of a Deployment's (ReplicaSet's) pods
  (``podgroup-<owner uid>``, ``GeneratePodgroupName`` in staging/src/volcano.sh/apis/pkg/apis/helpers; and
  ``buildPodGroupFromPod`` in pkg/controllers/podgroup/pg_controller_handler.go, v1.15.1): ``minMember`` from the
  owner's ``scheduling.volcano.sh/group-min-member`` (else 1), ``minResources`` that many times the pod's requests,
  and a card annotation only when the owner carries one (``volcano.sh/`` annotations are inherited). The seed:
  "If Pods have already been created, volcano.sh/card.request will not take effect, deferring to the actual
  resources requested by Pods" (its plugin's ``NewJobInfo`` at 61a5f00).
* The seed's plugin (``buildQueueAttrByJob`` at 61a5f00) adds ``GetInqueueResource`` — ``minResources`` minus what
  is allocated, ``minResources`` being the pods' requests once they exist — to its queue's inqueue for a Running
  PodGroup with ``minResources``: the cards its pods still wait for.
"""

from __future__ import annotations

from typing import Any

from builders import gpu_node, pod, podgroup, queue

from cardquota.core.events import podgroup_event
from cardquota.core.explain import explain
from cardquota.core.ledger import Ledger
from cardquota.core.scheduling.capacity_card import INSUFFICIENT_SCALAR
from cardquota.core.scheduling.session import Session

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"


def _group(name: str, phase: str, request: dict[str, int] | None = None) -> dict[str, Any]:
    manifest = podgroup(name, queue="team-a", phase=phase, request=request)
    manifest["spec"]["minResources"] = {"nvidia.com/gpu": "1"}
    return manifest


def _cluster(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [gpu_node("a100", A100, 8), gpu_node("h100", H100, 8), queue("team-a", {A100: 4, H100: 2}),
            pod("held", card=A100, gpus=3, group="running", queue="team-a", node_name="a100"),
            _group("running", "Running", {A100: 3}), *extra]


def test_a_podgroup_without_card_request_is_judged_by_its_pods_cards() -> None:
    """A Deployment's pod asking for 2 A100 where 1 is left: its PodGroup is not enqueued (it was, holding cpu)."""
    cluster = _cluster(_group("deploy-pod", "Pending"),
                       pod("deploy-pod-0", card=A100, gpus=2, group="deploy-pod", queue="team-a"))
    session = Session(cluster)
    group = session.ledger.snapshot.podgroups[("default", "deploy-pod")]
    assert dict(session.ledger.group_card_request(group)) == {A100: 2}
    refusal = session.enqueue_refusal(group)
    assert refusal is not None
    assert (refusal.reason, refusal.message) == (INSUFFICIENT_SCALAR, "Queue team-a has insufficient NVIDIA-A100 "
                                                 "quota: requested 2, total would be 5, but capability is 4")
    event = podgroup_event(group, session.ledger)
    assert event is not None
    assert event.message == refusal.message
    blockers = explain(cluster, _group("deploy-pod", "Pending")).blockers
    assert blockers[0] == f"{refusal.message} ({INSUFFICIENT_SCALAR})."


def test_alternatives_of_its_pods_count_as_one_set_and_fit() -> None:
    cluster = _cluster(_group("flex", "Pending"),
                       pod("flex-0", card=f"{A100}|{H100}", gpus=2, group="flex", queue="team-a"),
                       pod("flex-1", card=f"{H100}|{A100}", gpus=1, group="flex", queue="team-a"))
    session = Session(cluster)
    group = session.ledger.snapshot.podgroups[("default", "flex")]
    request = {f"{A100}|{H100}": 2, f"{H100}|{A100}": 1}  # (each pod's order of preference kept)
    assert dict(session.ledger.group_card_request(group)) == request
    assert session.enqueue_refusal(group) is None  # 1 A100 + 2 H100 left
    session.ledger.upsert(pod("flex-2", card=f"{H100}|{A100}", gpus=1, group="flex", queue="team-a"))
    refusal = session.enqueue_refusal(group)
    assert refusal is not None
    assert refusal.message == ("Queue team-a has insufficient NVIDIA-A100|NVIDIA-H100 quota: requested 4, total would "
                               "be 7, but capability is 6")
    session.ledger.delete(pod("flex-2", queue="team-a"))
    # enqueued, it reserves what it was judged on
    session.set_phase(_group("flex", "Pending"), "Inqueue")
    assert session.ledger.usage("team-a").inqueue == request


def test_a_podgroup_with_card_request_keeps_it_while_its_pods_are_created() -> None:
    """The seed's plugin takes the pods' requests as soon as one pod exists (a job of 4 with one pod created would
    be judged on 1); the card.request is kept here until its pods hold it."""
    cluster = _cluster(_group("job", "Pending", {A100: 2}), pod("job-0", card=A100, gpus=1, group="job",
                                                                queue="team-a"))
    ledger = Ledger.build(cluster)
    assert dict(ledger.group_card_request(ledger.snapshot.podgroups[("default", "job")])) == {A100: 2}


def test_a_running_elastic_job_keeps_its_waiting_pods_cards_reserved() -> None:
    """minAvailable 1 of 3: Running with one pod placed, two waiting for 1 A100 each — reserved, so another job
    cannot be enqueued into the cards they wait for."""
    cluster = _cluster(pod("held-2", card=A100, gpus=1, group="elastic", queue="team-a"),
                       pod("held-3", card=A100, gpus=1, group="elastic", queue="team-a"))
    cluster[4] = _group("running", "Running", {A100: 3})
    elastic = _group("elastic", "Running", {A100: 3})
    placed = pod("held-1", card=A100, gpus=1, group="elastic", queue="team-a", node_name="a100")
    ledger = Ledger.build([*cluster, elastic, placed])
    usage = ledger.usage("team-a")
    assert usage.allocated == {A100: 4, H100: 0}
    assert usage.inqueue == {A100: 2}
    session = Session([*cluster, elastic, placed, _group("next", "Pending", {H100: 1}),
                       _group("more", "Pending", {A100: 1})])
    more = session.ledger.snapshot.podgroups[("default", "more")]
    assert session.enqueue_refusal(more) is not None
    assert session.enqueue_refusal(session.ledger.snapshot.podgroups[("default", "next")]) is None
    # once its pods are placed (or gone), nothing stays reserved
    gone = Ledger.build([*cluster[:5], elastic, placed])
    assert gone.usage("team-a").inqueue == {}


def test_a_running_job_without_min_resources_reserves_nothing() -> None:
    group = podgroup("plain", queue="team-a", phase="Running")
    ledger = Ledger.build([*_cluster(), group, pod("w", card=A100, gpus=1, group="plain", queue="team-a")])
    assert ledger.usage("team-a").inqueue == {}
