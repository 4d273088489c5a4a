"""What the ledger keeps of a pod (issue 20, bounded memory): the annotations and labels its rules read from a held
pod, and everything else a view says; the incoming object's own view is left whole for the policies."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from builders import container, gpu_node, pod, podgroup, queue

from cardquota.core import keys
from cardquota.core.errors import InputError
from cardquota.core.ledger import Ledger
from cardquota.core.objects import CACHED_POD_ANNOTATIONS, CACHED_POD_LABELS, Pod

A100 = "NVIDIA-A100"
READ = {keys.CARD_NAME: A100, keys.GROUP_NAME: "g", keys.QUEUE_NAME: "q",
        keys.SCORING_STRATEGY_ANNOTATION: keys.LEAST_ALLOCATED, keys.PREEMPTABLE: "false",
        keys.ADMITTED_BY_PREEMPTION: "true"}
READ_LABELS = {keys.PREEMPTABLE: "true"}
UNREAD_LABELS = {"app": "train", "volcano.sh/queue-name": "q"}
UNREAD = {"volcano.sh/job-name": "train", "volcano.sh/task-index": "3", "kubectl.kubernetes.io/restartedAt": "x"}


def labelled_pod(name: str = "p", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    kept = READ if annotations is None else annotations
    manifest: dict[str, Any] = pod(name, node_name="a100-1", gpus=2, annotations={**UNREAD, **kept})
    manifest["metadata"]["labels"] = {**UNREAD_LABELS, **READ_LABELS}
    return manifest


def held(ledger: Ledger, name: str = "p") -> Pod:
    return ledger.snapshot.pods[("default", name)]


@pytest.mark.parametrize("fed", ["built", "upserted", "upserted as a view"])
def test_a_held_pod_keeps_the_annotations_and_labels_rules_read_and_drops_the_rest(fed: str) -> None:
    manifest = labelled_pod()
    cluster = [gpu_node("a100-1", A100, 8), queue("q", {A100: 8}), podgroup("g", queue="q", request={A100: 2})]
    if fed == "built":
        ledger = Ledger.build([*cluster, manifest])
    else:
        ledger = Ledger.build(cluster)
        if fed == "upserted":
            ledger.upsert(manifest)
        else:
            ledger.upsert_pod(Pod.from_manifest(manifest))
    view = held(ledger)
    assert dict(view.meta.annotations) == READ
    assert set(CACHED_POD_ANNOTATIONS) == set(READ)
    assert dict(view.meta.labels) == READ_LABELS
    assert set(CACHED_POD_LABELS) == set(READ_LABELS)
    whole = Pod.from_manifest(manifest)
    assert (view.meta.kind, view.meta.name, view.meta.namespace, view.key) == ("Pod", "p", "default", ("default", "p"))
    assert (view.node_name, view.phase, dict(view.requests)) == (whole.node_name, whole.phase, dict(whole.requests))
    assert (view.card_name, view.group_key, view.queue_annotation) == (A100, ("default", "g"), "q")
    assert ledger.usage("q").allocated == {A100: 2}


def test_the_view_of_an_incoming_pod_keeps_all_its_labels_and_annotations() -> None:
    view = Pod.from_manifest(labelled_pod())
    assert dict(view.meta.annotations) == {**UNREAD, **READ}
    assert dict(view.meta.labels) == {**UNREAD_LABELS, **READ_LABELS}


def test_a_pod_with_none_of_the_read_annotations_keeps_none() -> None:
    manifest = pod("p", annotations=dict(UNREAD))
    view = Pod.from_manifest(manifest, cached=True)
    assert dict(view.meta.annotations) == {}
    assert (view.card_name, view.group_key, view.queue_annotation) == (None, None, None)
    assert view.cached() is view


@pytest.mark.parametrize(("where", "value"), [("labels", {"app": 1}), ("annotations", {"a": ["b"]}), ("labels", "x")])
def test_a_cached_view_still_refuses_malformed_labels_and_annotations(where: str, value: object) -> None:
    manifest = labelled_pod()
    manifest["metadata"][where] = value
    with pytest.raises(InputError):
        Pod.from_manifest(manifest)
    with pytest.raises(InputError):
        Pod.from_manifest(manifest, cached=True)
    with pytest.raises(InputError):
        Ledger.build([manifest])


def test_pods_of_a_job_share_equal_requests_and_their_podgroup_key_without_mixing_them_up() -> None:
    one, two = (Pod.from_manifest(labelled_pod(name), cached=True) for name in ("p1", "p2"))
    other = Pod.from_manifest(pod("p3", group="g", containers=[container(requests={"cpu": "3"})]), cached=True)
    assert one.requests == two.requests
    assert one.requests is two.requests  # one object, not equal copies (the compiled core too)
    assert one.group_key == two.group_key == other.group_key == ("default", "g")
    assert one.group_key is two.group_key is other.group_key
    assert dict(other.requests) == {"cpu": Fraction(3)}
    assert dict(one.requests) == {"cpu": Fraction(1), "nvidia.com/gpu": Fraction(2)}


def test_a_changed_pod_is_held_as_its_latest_view() -> None:
    ledger = Ledger.build([gpu_node("a100-1", A100, 8), queue("q", {A100: 8}), labelled_pod()])
    changed = labelled_pod(annotations={keys.CARD_NAME: A100, keys.QUEUE_NAME: "q"})
    changed["metadata"]["annotations"][keys.SCORING_STRATEGY_ANNOTATION] = keys.MOST_ALLOCATED
    ledger.upsert(changed)
    view = held(ledger)
    assert dict(view.meta.annotations) == {keys.CARD_NAME: A100, keys.QUEUE_NAME: "q",
                                           keys.SCORING_STRATEGY_ANNOTATION: keys.MOST_ALLOCATED}
    assert view.group_key is None


@pytest.mark.parametrize("fed", ["built", "upserted"])
def test_a_held_pods_key_is_one_object_in_every_table_that_holds_it(fed: str) -> None:
    """Each table keyed by the pod holds the view's own key, not an equal copy (~60 bytes a table a pod): checked
    because the compiled core copies a tuple whose type is a fixed-length tuple each time it stores it."""
    cluster = [gpu_node("a100-1", A100, 8), queue("q", {A100: 8}), podgroup("g", queue="q", request={A100: 2})]
    ledger = Ledger.build([*cluster, labelled_pod()]) if fed == "built" else Ledger.build(cluster)
    if fed == "upserted":
        ledger.upsert(labelled_pod())
    [(key, view)] = ledger.snapshot.pods.items()
    assert view.key is key
    tables = {"charges": ledger._pod_charges, "cpu/memory": ledger._pod_cpu_memory}
    for name, table in tables.items():
        [held_key] = [candidate for candidate in table if candidate == key]
        assert held_key is key, name
