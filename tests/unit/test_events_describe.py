"""Events are found by ``kubectl describe``: the Event the controller writes names its object's uid (and
resourceVersion), which kubectl's field selector requires (see tests/kubectl_events.py for kubectl's rule). Before,
``involvedObject`` had no uid, and ``kubectl describe pod|podgroup|queue`` listed none of the controller's events."""

from __future__ import annotations

from typing import Any

import pytest
from builders import gpu_node, pod, podgroup, queue
from kubectl_events import describe_selector, described_events, field_selector

from cardquota.core.events import CardEvent, pod_event, podgroup_event, queue_event
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Pod, read_meta
from cardquota.operator.controller import EVENT_NAMESPACE, kubernetes_event

A100 = "NVIDIA-A100"


def created(manifest: dict[str, Any], uid: str, resource_version: str) -> dict[str, Any]:
    """The object as the API server returns it once created: with a uid and a resourceVersion."""
    manifest["metadata"].update(uid=uid, resourceVersion=resource_version)
    return manifest


def _cluster() -> tuple[Ledger, dict[str, dict[str, Any]]]:
    objects = {
        "queue": created(queue("team-a", {A100: 4}), "0b6f1c1e-8f0a-4a51-9a57-0f1c2d3e4f50", "101"),
        "broken": created(queue("broken", "{not json"), "1c7a2d2f-9a1b-4b62-8b68-1a2b3c4d5e61", "102"),
        "podgroup": created(podgroup("big", namespace="ml", queue="team-a", phase="Pending", request={A100: 6}),
                            "2d8b3e3a-0b2c-4c73-9c79-2b3c4d5e6f72", "103"),
        "pod": created(pod("stuck", namespace="ml", card=A100, gpus=5, queue="team-a"),
                       "3e9c4f4b-1c3d-4d84-8d8a-3c4d5e6f7a83", "104"),
    }
    return Ledger.build([gpu_node("a100-1", A100, 8), *objects.values()]), objects


def _events(ledger: Ledger) -> dict[str, CardEvent | None]:
    snapshot = ledger.snapshot
    return {"broken": queue_event(snapshot.queues["broken"]),
            "podgroup": podgroup_event(snapshot.podgroups[("ml", "big")], ledger),
            "pod": pod_event(snapshot.pods[("ml", "stuck")], ledger)}


@pytest.mark.parametrize("subject", ["broken", "podgroup", "pod"])
def test_kubectl_describe_selects_the_event_of_a_queue_a_podgroup_and_a_pod(subject: str) -> None:
    ledger, objects = _cluster()
    event = _events(ledger)[subject]
    assert event is not None
    body = kubernetes_event(event, "cardquota")
    body["metadata"]["namespace"] = event.namespace or EVENT_NAMESPACE  # where the publisher creates it
    obj = objects[subject]
    assert described_events([body], obj) == [body], (field_selector(describe_selector(obj)[1]),
                                                     body["involvedObject"])
    metadata = obj["metadata"]
    assert body["involvedObject"]["uid"] == metadata["uid"]
    assert body["involvedObject"]["resourceVersion"] == metadata["resourceVersion"]


def test_an_event_about_another_object_of_that_name_is_not_selected() -> None:
    """A pod deleted and created again under its name is another object: kubectl shows the new one's events only."""
    ledger, _ = _cluster()
    event = _events(ledger)["pod"]
    assert event is not None
    body = kubernetes_event(event, "cardquota")
    body["metadata"]["namespace"] = "ml"
    again = created(pod("stuck", namespace="ml", card=A100, gpus=5, queue="team-a"),
                    "4fad5a5c-2d4e-4e95-9e9b-4d5e6f7a8b94", "205")
    assert described_events([body], again) == []


def test_the_selector_is_kubectls() -> None:
    """kubectl's terms for a namespaced object with a uid, and for a cluster-scoped one (every namespace)."""
    _, objects = _cluster()
    assert describe_selector(objects["pod"]) == ("ml", {
        "involvedObject.name": "stuck", "involvedObject.namespace": "ml", "involvedObject.kind": "Pod",
        "involvedObject.uid": "3e9c4f4b-1c3d-4d84-8d8a-3c4d5e6f7a83"})
    assert field_selector(describe_selector(objects["queue"])[1]) == (
        "involvedObject.kind=Queue,involvedObject.name=team-a,involvedObject.namespace=,"
        "involvedObject.uid=0b6f1c1e-8f0a-4a51-9a57-0f1c2d3e4f50")


@pytest.mark.parametrize("node_name", [None, "a100-1"])
def test_a_cached_pod_keeps_its_uid_while_it_can_be_the_subject_of_an_event(node_name: str | None) -> None:
    """Only an unbound pod gets events: a bound pod's cached view keeps no uid or resourceVersion (memory), however
    it was built."""
    manifest = created(pod("p", namespace="ml", card=A100, gpus=1, node_name=node_name), "u-1", "7")
    full = Pod.from_manifest(manifest)
    assert (full.uid, full.resource_version) == ("u-1", "7")
    assert full.meta == read_meta(manifest, namespaced=True)
    kept = ("", "") if node_name else ("u-1", "7")
    for cached in (Pod.from_manifest(manifest, cached=True), full.cached()):
        assert (cached.uid, cached.resource_version) == kept
        assert cached == Pod.from_manifest(manifest, cached=True)
