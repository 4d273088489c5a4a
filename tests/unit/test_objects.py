"""The named tuples built with ``tuple.__new__`` on every admission and watch event (ObjectMeta, Pod, the webhook's
AdmissionRequest; see the note above ``core.objects.ObjectMeta``) are the tuples their own constructors build: every
field, in order, none missing."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import pytest
from builders import pod

from cardquota.core import keys
from cardquota.core.objects import ObjectMeta, Pod, read_meta
from cardquota.webhooks.review import AdmissionRequest, read_review

A100 = "NVIDIA-A100"


def labelled(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"]["labels"] = {"app": "train"}
    return manifest


@pytest.mark.parametrize("cached", [False, True])
def test_a_pod_view_is_what_its_constructor_builds(cached: bool) -> None:
    manifest = labelled(pod("p", namespace="ml", node_name="a100-1", phase="Running", gpus=2,
                            annotations={keys.CARD_NAME: A100, keys.GROUP_NAME: "g", keys.QUEUE_NAME: "q"}))
    view = Pod.from_manifest(manifest, cached=cached)
    assert type(view) is Pod
    assert len(view) == len(Pod._fields)
    annotations = {keys.CARD_NAME: A100, keys.GROUP_NAME: "g", keys.QUEUE_NAME: "q"}
    expected = Pod(key=("ml", "p"), node_name="a100-1", phase="Running",
                   requests={"nvidia.com/gpu": Fraction(2), "cpu": Fraction(1)}, card_name=A100,
                   group_key=("ml", "g"), queue_annotation="q", kind="Pod",
                   labels={} if cached else {"app": "train"}, annotations=annotations, scheduler="volcano")
    assert view == expected
    assert view._asdict() == expected._asdict()
    assert view.meta == ObjectMeta(kind="Pod", name="p", namespace="ml", labels=expected.labels,
                                   annotations=annotations)


@pytest.mark.parametrize("kept", [None, (keys.CARD_NAME,)])
def test_an_object_meta_is_what_its_constructor_builds(kept: tuple[str, ...] | None) -> None:
    manifest = labelled(pod("p", namespace="ml", annotations={keys.CARD_NAME: A100, "other": "x"}))
    meta = read_meta(manifest, namespaced=True, kept_annotations=kept)
    assert type(meta) is ObjectMeta
    annotations = {keys.CARD_NAME: A100, "other": "x"} if kept is None else {keys.CARD_NAME: A100}
    assert meta == ObjectMeta(kind="Pod", name="p", namespace="ml", labels={"app": "train"} if kept is None else {},
                              annotations=annotations)
    assert meta.key == ("ml", "p")


def test_a_review_request_is_what_its_constructor_builds() -> None:
    body = json.dumps({"kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "batch.volcano.sh", "version": "v1alpha1", "kind": "Job"},
        "operation": "UPDATE", "namespace": "ml", "name": "train", "object": {"kind": "Job"},
        "oldObject": {"kind": "Job", "spec": {}}, "dryRun": True, "userInfo": {"username": "alice"}}}).encode()
    request = read_review(body)
    assert type(request) is AdmissionRequest
    assert request == AdmissionRequest(uid="u-1", group="batch.volcano.sh", kind="Job", operation="UPDATE",
                                       namespace="ml", name="train", object={"kind": "Job"},
                                       old_object={"kind": "Job", "spec": {}}, dry_run=True, user="alice")
    assert request._asdict()["user"] == "alice"
    bare = read_review(json.dumps({"kind": "AdmissionReview", "request": {
        "uid": "u-2", "kind": {"kind": "Pod"}, "operation": "CREATE"}}).encode())
    assert bare == AdmissionRequest(uid="u-2", group="", kind="Pod", operation="CREATE", namespace="", name="",
                                    object=None, old_object=None, dry_run=False)
