"""Properties of admission as a whole, over fuzzed objects of every admitted kind: no exception escapes a policy,
every denial says why on one line, every patch applies cleanly, and mutation is idempotent."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
from builders import gpu_labels, gpu_node, node, queue
from hypothesis import event, given
from hypothesis import strategies as st

from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.quota import card_name_problem

A100, H100, MPS = "NVIDIA-A100", "NVIDIA-H100", "NVIDIA-A100/mps-80g*1/8"
CARDS = [A100, H100, MPS, f"{A100}|{H100}", f"{A100}|{MPS}", "NVIDIA-A10O", "", "A||B", "A|"]
RESOURCES = ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb", "cpu", "memory",
             "vke.volcengine.com/mgpu-core", "vke.volcengine.com/mgpu-memory"]

SNAPSHOT = Ledger.build([
    gpu_node("a100", A100, 8), gpu_node("h100", H100, 8),
    node("mps", labels=gpu_labels(A100, memory=81920, replicas=8), allocatable={"nvidia.com/gpu.shared": "32"}),
    queue("team-a", {A100: 10, H100: 5, MPS: 16}), queue("org", {A100: 20}), queue("plain"),
]).snapshot
SNAPSHOT.complete = True

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(), st.text(max_size=12))
json_like = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                                      max_size=3), max_leaves=8)
quantities = st.one_of(st.sampled_from(["1", "2", "0", "-1", "6k", "120", "50", "1024", "1.5", "abc", "1e3"]),
                       st.integers(-5, 300), scalars)
amount_texts = st.one_of(
    st.dictionaries(st.sampled_from(CARDS), st.one_of(st.integers(-2, 30), scalars), max_size=3).map(json.dumps),
    st.text(max_size=30), json_like.map(json.dumps),
)
annotations = st.dictionaries(
    st.sampled_from(["volcano.sh/card.quota", "volcano.sh/card.request", "volcano.sh/card.name",
                     "scheduling.volcano.sh/queue-name", "scheduling.k8s.io/group-name",
                     "vke.volcengine.com/container-multiple-gpu", "volcano.sh/crossquota-scoring-strategy",
                     "volcano.sh/crossquota-cpu", "volcano.sh/crossquota-percentage-memory"]),
    st.one_of(st.sampled_from([*CARDS, "team-a", "org", "plain", "ghost", "1,2", "-1", "most-allocated", "50"]),
              amount_texts),
    max_size=4,
)
resources = st.dictionaries(st.sampled_from(RESOURCES), quantities, max_size=3)
containers = st.lists(st.fixed_dictionaries({"name": st.text(min_size=1, max_size=6)},
                                            optional={"resources": st.fixed_dictionaries(
                                                {}, optional={"limits": resources, "requests": resources})}),
                      min_size=1, max_size=3)
affinities = st.one_of(st.none(), json_like, st.just({"nodeAffinity": {
    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}))


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(containers)}
    for key, strategy in (("schedulerName", st.sampled_from(["volcano", "default-scheduler"])),
                          ("affinity", affinities), ("nodeName", st.sampled_from(["a100", "gone"]))):
        if draw(st.booleans()):
            spec[key] = draw(strategy)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml",
                                                            "annotations": draw(annotations)}, "spec": spec}


@st.composite
def others(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["Queue", "PodGroup", "Job", "Node", "ConfigMap"]))
    metadata = {"name": draw(st.sampled_from(["team-a", "child", "volcano-scheduler-configmap"])),
                "annotations": draw(annotations)}
    if kind == "Queue":
        spec = {"parent": draw(st.sampled_from(["org", "ghost", "root", ""])), "dra": draw(json_like)}
        return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": kind, "metadata": metadata, "spec": spec}
    if kind == "PodGroup":
        return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": kind, "metadata": metadata,
                "spec": {"queue": draw(st.sampled_from(["team-a", "plain", "ghost", None]))}}
    if kind == "Job":
        tasks = draw(st.lists(st.fixed_dictionaries({
            "name": st.text(max_size=5), "replicas": st.one_of(st.integers(-1, 20), scalars),
            "template": st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"annotations": annotations}),
                                               "spec": st.fixed_dictionaries({"containers": containers})}),
        }), max_size=2))
        return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": kind, "metadata": metadata,
                "spec": {"queue": "team-a", "tasks": tasks}}
    if kind == "Node":
        return {"apiVersion": "v1", "kind": kind, "metadata": metadata,
                "status": {"allocatable": draw(st.one_of(resources, json_like))}}
    conf = draw(st.one_of(st.text(max_size=40), json_like.map(json.dumps)))
    return {"apiVersion": "v1", "kind": kind, "metadata": metadata, "data": {"volcano-scheduler.conf": conf}}


@st.composite
def plausible(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly valid objects, so that mutations (affinity, canonical quota, derived card.request) happen."""
    card = draw(st.sampled_from([A100, H100, f"{A100}|{H100}", MPS, f"{H100}|{A100}"]))
    resource = "nvidia.com/gpu.shared" if card == MPS else "nvidia.com/gpu"
    kind = draw(st.sampled_from(["Pod", "Queue", "Job"]))
    if kind == "Pod":
        spec: dict[str, Any] = {"schedulerName": "volcano", "containers": [
            {"name": "main", "resources": {"limits": {resource: str(draw(st.integers(1, 4)))}}}]}
        if draw(st.booleans()):
            spec["affinity"] = draw(affinities)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "p", "namespace": "ml",
            "annotations": {"volcano.sh/card.name": card, "scheduling.volcano.sh/queue-name": "team-a"}},
            "spec": spec}
    if kind == "Queue":
        quota = draw(st.dictionaries(st.sampled_from([A100, H100, MPS]), st.integers(0, 20), min_size=1))
        text = json.dumps(quota, indent=draw(st.sampled_from([None, 2])), sort_keys=draw(st.booleans()))
        return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                "metadata": {"name": "child", "annotations": {"volcano.sh/card.quota": text}},
                "spec": {"parent": draw(st.sampled_from(["org", "root", ""]))}}
    tasks = [{"name": f"t{index}", "replicas": draw(st.integers(0, 4)), "template": {
        "metadata": {"annotations": {"volcano.sh/card.name": card}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {resource: "1"}}}]}}}
        for index in range(draw(st.integers(1, 2)))]
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
            "spec": {"queue": "team-a", "tasks": tasks}}


@given(st.one_of(pods(), others(), plausible()), st.booleans())
def test_admission_never_raises_and_its_patches_apply_and_are_idempotent(manifest: dict[str, Any],
                                                                           update: bool) -> None:
    old = manifest if update else None
    verdict = admit(manifest, old, SNAPSHOT, PolicyConfig())
    event(f"{manifest['kind']}: {'allowed' if verdict.allowed else 'denied'}{' + patch' if verdict.patch else ''}")
    assert "\n" not in verdict.message
    assert all(warning.isprintable() for warning in verdict.warnings)
    if not verdict.allowed:
        assert verdict.message.strip()
        assert verdict.violations
        assert verdict.patch == ()
        return
    if verdict.patch:
        mutated = jsonpatch.apply_patch(manifest, [dict(op) for op in verdict.patch])
        again = admit(mutated, old, SNAPSHOT, PolicyConfig())
        assert again.allowed
        assert again.patch == ()


@given(st.text(max_size=40))
def test_card_name_parser_never_raises_and_speaks_in_one_line(text: str) -> None:
    problem = card_name_problem(text)
    assert problem is None or (problem.strip() and problem.isprintable())
