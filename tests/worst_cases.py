"""The worst-case admission corpus: the largest and most hostile objects the API server still accepts, as
AdmissionReview request bodies, over a realistic large fleet's card catalog.

Used by tests/reliability/test_worst_case.py (bounded work, warnings within the API server's budget) and by
bench/worst_case.py (time and memory per review). The API server's own limits set the sizes:

* all annotations of an object together: 256 KiB (``TotalAnnotationSizeLimitB`` in
  k8s.io/apimachinery/pkg/api/validation/objectmeta.go, keys and values counted);
* a request body: 3 MiB (``MaxRequestBodyBytes`` of k8s.io/apiserver's server config);
* JSON nesting: 10,000 levels (``maxNestingDepth`` in sigs.k8s.io/json internal/golang/encoding/json/scanner.go,
  the decoder of k8s.io/apimachinery/pkg/util/json and the JSON serializer); the review wraps the object in two
  more levels (``{"request": {"object": …}}``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from admission_reviews import A100, CLUSTER
from builders import gpu_labels, node, queue

ANNOTATIONS_LIMIT = 256 * 1024
BODY_LIMIT = 3 * 1024 * 1024
JSON_DEPTH_LIMIT = 10_000
INLINE_BYTES = 32 * 1024
"""The largest body the admission server reads on its event loop (cardquota.webhooks.server), when json.loads
reads it in place."""
BEYOND_IN_PLACE = 6_000
"""Deeper than json.loads is let read in place at any recursion limit: up to cardquota.webhooks.review's
_SAFE_RECURSION_LIMIT (5,000) it stops at the limit; above it, a body with this many brackets is not tried."""

T = TypeVar("T", str, bytes)
MIG_PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


def fleet(products: int = 40) -> list[dict[str, Any]]:
    """CLUSTER plus ``products`` more products, each with whole cards, six MIG slice types and an MPS type: a
    catalog of ~300 card types, a very large heterogeneous fleet (the "did you mean" search runs over it)."""
    objects = list(CLUSTER)
    for index in range(products):
        product = f"NVIDIA-GPU-MODEL-{index:02d}"
        objects.append(node(f"whole-{index}", labels=gpu_labels(product, count=8),
                            allocatable={"nvidia.com/gpu": "8"}))
        objects.append(node(f"mig-{index}", labels=gpu_labels(product, count=8),
                            allocatable={"nvidia.com/gpu": "0",
                                         **{f"nvidia.com/mig-{profile}": "4" for profile in MIG_PROFILES}}))
        objects.append(node(f"mps-{index}", labels=gpu_labels(product, memory=81920, replicas=4),
                            allocatable={"nvidia.com/gpu.shared": "32"}))
    return objects


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    body: bytes
    """The AdmissionReview request, as the API server would send it."""
    note: str


def review_body(obj: dict[str, Any] | str, *, kind: str, group: str, version: str, namespace: str = "",
                name: str = "x", operation: str = "CREATE", old: dict[str, Any] | str | None = None) -> bytes:
    """The review as bytes; ``obj``/``old`` may be JSON text already (deep objects cannot go through json.dumps)."""
    head = {"uid": str(uuid.uuid4()), "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
            "operation": operation, "name": name, "namespace": namespace, "dryRun": False,
            "userInfo": {"username": "mallory"}}
    request = json.dumps(head)[:-1] + f', "object": {_text(obj)}, "oldObject": {_text(old)}}}'
    return ('{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": ' + request + "}").encode()


def _text(value: dict[str, Any] | str | None) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def podgroup_object(request: str, name: str = "pg") -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml", "annotations": {"volcano.sh/card.request": request}},
            "spec": {"minMember": 1, "queue": "team-a"}}


def queue_object(quota: str, name: str = "q-hostile") -> dict[str, Any]:
    return queue(name, quota)


def job_object(request: str | None, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "job", "namespace": "ml"}
    if request is not None:
        metadata["annotations"] = {"volcano.sh/card.request": request}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": metadata,
            "spec": {"queue": "team-a", "schedulerName": "volcano", "minAvailable": 1, "tasks": tasks}}


def task_object(name: str, card: str | None, gpus: int = 1, replicas: int = 1, padding: int = 0) -> dict[str, Any]:
    annotations = {"volcano.sh/card.name": card} if card is not None else {}
    env = [{"name": f"VAR_{index}", "value": "x" * 64} for index in range(padding)]
    return {"name": name, "replicas": replicas, "template": {
        "metadata": {"annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "trainer:1", "env": env,
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}


def pod_object(card: str | None, containers: int = 1, padding: int = 0,
               annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata_annotations = dict(annotations or {})
    if card is not None:
        metadata_annotations["volcano.sh/card.name"] = card
    metadata_annotations["scheduling.volcano.sh/queue-name"] = "team-a"
    env = [{"name": f"VAR_{index}", "value": "x" * 64} for index in range(padding)]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml", "annotations": metadata_annotations},
            "spec": {"schedulerName": "volcano", "containers": [
                {"name": f"c{index}", "image": "trainer:1", "env": env,
                 "resources": {"limits": {"nvidia.com/gpu": "1"} if index == 0 else {"cpu": "1"}}}
                for index in range(containers)]}}


def _with_spec_field(manifest: dict[str, Any], value: object) -> dict[str, Any]:
    """``manifest`` with an unknown ``spec`` field holding ``value`` (the API server keeps unknown fields of a
    review's object only for CRDs that preserve them, but a webhook is sent what it is sent)."""
    return manifest | {"spec": {**manifest["spec"], "extra": value}}


def alternatives(count: int, prefix: str = "A") -> str:
    return "|".join(f"{prefix}{index}" for index in range(1, count + 1))


def _unknown_quota(types: int) -> str:
    return json.dumps({f"NVIDIA-UNKNOWN-{index:05d}": 1 for index in range(types)})


def _largest(make: Callable[[int], T], limit: int = ANNOTATIONS_LIMIT - 100) -> T:
    """The largest ``make(n)`` (text or bytes) within ``limit`` bytes (binary search on n)."""
    def size(n: int) -> int:
        made = make(n)
        return len(made.encode() if isinstance(made, str) else made)

    low, high = 1, 1
    while size(high) <= limit:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if size(middle) <= limit else (low, middle)
    return make(low)


def deep_value(depth: int, leaf: str = "1", *, beside: bool = False) -> str:
    """A JSON value nested ``depth`` levels (objects and arrays alternating), with a scalar beside each level's
    next one when ``beside``."""
    opening = "".join(('{"a":0,"d":' if beside else '{"d":') if level % 2 == 0 else ("[0," if beside else "[")
                      for level in range(depth))
    closing = "".join("}" if level % 2 == 0 else "]" for level in reversed(range(depth)))
    return opening + leaf + closing


FIVE_LEVELS = "[[[[[1]]]]]"
"""A value one level deeper than the reader's shallow runs take whole (deep_json.SHALLOW_LEVELS)."""


def deep_job(object_depth: int, chains: int = 1, *, beside: bool = False, wide: int = 0) -> str:
    """A Volcano Job nesting ``object_depth`` levels in all (the Job is level 1), under an unknown spec field
    (the Job CRD keeps unknown fields); ``chains`` such values side by side, and ``wide`` values of FIVE_LEVELS in
    another unknown field."""
    job = job_object(f'{{"{A100}": 1}}', [task_object("t", A100)])
    job["spec"]["deep"] = "DEEP"  # Job (1) > spec (2) > the "deep" list (3) > each chain
    job["spec"]["wide"] = "WIDE"
    chain = deep_value(object_depth - 3, beside=beside)
    return (json.dumps(job).replace('"DEEP"', "[" + ", ".join([chain] * chains) + "]")
            .replace('"WIDE"', "[" + ",".join([FIVE_LEVELS] * wide) + "]"))


def _deployment(card: str, padding: int) -> dict[str, Any]:
    pod = pod_object(card, containers=60, padding=padding)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ml"},
            "spec": {"replicas": 3, "template": {"metadata": pod["metadata"], "spec": pod["spec"]}}}


PODGROUP: dict[str, Any] = {"kind": "PodGroup", "group": "scheduling.volcano.sh", "version": "v1beta1",
                            "namespace": "ml", "name": "pg"}
QUEUE: dict[str, Any] = {"kind": "Queue", "group": "scheduling.volcano.sh", "version": "v1beta1", "name": "q-hostile"}
JOB: dict[str, Any] = {"kind": "Job", "group": "batch.volcano.sh", "version": "v1alpha1", "namespace": "ml",
                       "name": "job"}
POD: dict[str, Any] = {"kind": "Pod", "group": "", "version": "v1", "namespace": "ml", "name": "p"}
DEPLOYMENT: dict[str, Any] = {"kind": "Deployment", "group": "apps", "version": "v1", "namespace": "ml", "name": "d"}
ALTERNATIVES_41 = "|".join([A100, *(f"NVIDIA-H100-VARIANT-{index:02d}" for index in range(1, 41))])


def cases() -> list[Case]:
    """Every worst case (built in about a second)."""
    huge_key = f"{A100}|{alternatives(16_000)}"  # the queue has quota for the first alternative only
    many_keys = _largest(lambda n: json.dumps({f"NVIDIA-UNKNOWN-{index:05d}": 1 for index in range(n)}))
    big_card_name = _largest(lambda n: alternatives(n, "NVIDIA-X"))
    many_annotations = {f"example.com/note-{index:05d}": "v" * 200 for index in range(1200)}
    chain = len(deep_value(JSON_DEPTH_LIMIT - 3)) + 2
    chain_beside = len(deep_value(JSON_DEPTH_LIMIT - 3, beside=True)) + 2
    return [
        Case("podgroup-16k-alternatives", "PodGroup",
             review_body(podgroup_object(json.dumps({huge_key: 1})), **PODGROUP),
             f"one card.request key of 16,001 alternatives ({len(huge_key) // 1024} KiB)"),
        Case("podgroup-41-alternatives", "PodGroup",
             review_body(podgroup_object(json.dumps({ALTERNATIVES_41: 1})), **PODGROUP),
             "one key of 41 alternatives, 40 of them unknown and without quota"),
        Case("podgroup-many-keys", "PodGroup", review_body(podgroup_object(many_keys), **PODGROUP),
             f"{len(json.loads(many_keys)):,} unknown card types in one card.request (256 KiB)"),
        Case("podgroup-16k-alternatives-update", "PodGroup",
             review_body(podgroup_object(json.dumps({huge_key: 1})), operation="UPDATE",
                         old=podgroup_object(json.dumps({huge_key: 1})), **PODGROUP),
             "an UPDATE keeping the 16,000-alternative key (old and new judged)"),
        Case("podgroup-request-at-limits", "PodGroup",
             review_body(podgroup_object(_largest(lambda n: json.dumps(
                 {f"{A100}|" + alternatives(127, f"K{key}x"): 1 for key in range(n)}), 128 * 1024)), **PODGROUP),
             "a card.request just within the limits: keys of 128 alternatives, 128 KiB"),
        Case("queue-9000-unknown-types", "Queue", review_body(queue_object(_unknown_quota(9_000)), **QUEUE),
             f"a quota of 9,000 unknown card types ({len(_unknown_quota(9_000)) // 1024} KiB)"),
        Case("queue-80-unknown-types", "Queue", review_body(queue_object(_unknown_quota(80)), **QUEUE),
             "a quota of 80 unknown card types"),
        Case("queue-9000-unknown-types-update", "Queue",
             review_body(queue_object(_unknown_quota(9_000)), operation="UPDATE",
                         old=queue_object(_unknown_quota(9_001)), **QUEUE),
             "an UPDATE of the 9,000-type quota (old and new judged)"),
        Case("job-16k-alternatives", "Job",
             review_body(job_object(json.dumps({huge_key: 1}), [task_object("t", "A1")]), **JOB),
             "a Volcano Job with the 16,000-alternative card.request"),
        Case("job-41-alternatives", "Job",
             review_body(job_object(json.dumps({ALTERNATIVES_41: 1}), [task_object("t", ALTERNATIVES_41)]), **JOB),
             "a Volcano Job with the 41-alternative card.request and task card.name"),
        Case("job-3mib-tasks", "Job",
             _largest(lambda n: review_body(job_object(None, [task_object(f"t{index}", ALTERNATIVES_41, padding=30)
                                                        for index in range(n)]), **JOB), BODY_LIMIT),
             "a Volcano Job of ~800 card tasks (3 MiB) naming 41 alternatives, card.request derived by mutation"),
        Case("job-3mib-distinct-card-names", "Job",
             _largest(lambda n: review_body(job_object(None, [task_object(f"t{index}", alternatives(128, f"T{index}x"))
                                                        for index in range(n)]), **JOB), BODY_LIMIT),
             "a Volcano Job of 3 MiB whose tasks each name 128 alternatives no other task names"),
        Case("job-256-tasks-distinct-card-names", "Job",
             review_body(job_object(None, [task_object(f"t{index}", alternatives(128, f"T{index}x"), padding=4)
                                     for index in range(256)]), **JOB),
             "a Volcano Job of 256 tasks (the limit), each naming 128 alternatives no other task names"),
        Case("job-depth-10000", "Job", review_body(deep_job(JSON_DEPTH_LIMIT), **JOB),
             "a Volcano Job nested 10,000 levels (an unknown spec field): the API server's JSON limit"),
        Case("job-depth-10000-3mib", "Job",
             review_body(deep_job(JSON_DEPTH_LIMIT, (BODY_LIMIT - 4096) // chain), **JOB),
             f"{(BODY_LIMIT - 4096) // chain} values nested 10,000 levels side by side (3 MiB)"),
        Case("job-depth-10000-3mib-scalars-beside", "Job",
             review_body(deep_job(JSON_DEPTH_LIMIT, (BODY_LIMIT - 4096) // chain_beside, beside=True), **JOB),
             f"{(BODY_LIMIT - 4096) // chain_beside} values nested 10,000 levels with a scalar beside each level"),
        Case("job-deep-and-broad-3mib", "Job",
             review_body(deep_job(JSON_DEPTH_LIMIT, wide=(BODY_LIMIT - chain - 4096) // (len(FIVE_LEVELS) + 1)),
                         **JOB),
             "a value nested 10,000 levels beside an array of 5-level values filling 3 MiB"),
        Case("pod-3mib", "Pod",
             _largest(lambda n: review_body(pod_object(A100, containers=60, padding=n), **POD), BODY_LIMIT),
             "a card pod of 3 MiB (60 containers with long env lists)"),
        Case("pod-3mib-many-objects", "Pod",
             _largest(lambda n: review_body(pod_object(A100, containers=1, padding=0) | {"spec": {
                 "schedulerName": "volcano", "containers": [{"name": "c", "image": "i", "env": [{"name": "A"}] * n,
                                                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
                                            **POD), BODY_LIMIT),
             "a card pod of 3 MiB holding as many JSON objects as fit (single-field env entries)"),
        Case("pod-3mib-many-resources", "Pod",
             _largest(lambda n: review_body(pod_object(A100) | {"spec": {"schedulerName": "volcano", "containers": [
                 {"name": f"c{index}", "image": "i", "resources": {"limits": {
                     "nvidia.com/gpu": "1", **{f"example.com/r{r}": "1" for r in range(100)}}}}
                 for index in range(n)]}}, **POD), BODY_LIMIT),
             "a card pod of 3 MiB whose containers request 100 extended resources each"),
        Case("pod-256k-card-name", "Pod", review_body(pod_object(big_card_name), **POD),
             f"a card.name of {big_card_name.count('|') + 1:,} alternatives (256 KiB)"),
        Case("pod-41-alternatives", "Pod", review_body(pod_object(ALTERNATIVES_41), **POD),
             "a card.name of 41 alternatives, 40 unknown"),
        Case("pod-256k-annotations", "Pod", review_body(pod_object(A100, annotations=many_annotations), **POD),
             "a card pod with 256 KiB of other annotations"),
        Case("pod-on-the-loop-numbers", "Pod",
             _largest(lambda n: review_body(_with_spec_field(pod_object(A100), [1.5e300] * n), **POD), INLINE_BYTES),
             "the costliest body still read on the event loop: 32 KiB, a long array of numbers"),
        Case("pod-on-the-loop-brackets", "Pod",
             _largest(lambda n: review_body(_with_spec_field(pod_object(A100), [{"a": [0]}] * n), **POD),
                      INLINE_BYTES),
             "the costliest body still read on the event loop: 32 KiB, a long array of small objects"),
        Case("pod-on-the-loop-then-deep", "Pod",
             _largest(lambda n: review_body(_with_spec_field(pod_object(A100), [[1.5e300] * n, "DEEP"]), **POD)
                      .replace(b'"DEEP"', b"[" * BEYOND_IN_PLACE + b"1" + b"]" * BEYOND_IN_PLACE), INLINE_BYTES),
             "32 KiB: numbers, then a value nested 6,000 levels; json.loads fails on the loop at the end, and the "
             "body is read again on a policy thread"),
        Case("deployment-3mib", "Deployment",
             _largest(lambda n: review_body(_deployment(ALTERNATIVES_41, n), **DEPLOYMENT), BODY_LIMIT),
             "a Deployment whose 3 MiB pod template names 41 alternatives"),
    ]
