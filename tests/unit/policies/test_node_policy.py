"""Node admission: crossquota annotations are checked on create and on change; nothing else about a node is."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import gpu_node, node
from hypothesis import given
from hypothesis import strategies as st
from verdicts import denied_at, violations_of

from cardquota.core.policies import node as node_policy
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict
from cardquota.core.violations import Reason

CPU = "volcano.sh/crossquota-cpu"
MEMORY = "volcano.sh/crossquota-memory"
PERCENT_MEMORY = "volcano.sh/crossquota-percentage-memory"


def annotated(annotations: Any, *, base: dict[str, Any] | None = None) -> dict[str, Any]:
    manifest = copy.deepcopy(base) if base is not None else node("gpu-node-1", allocatable={"nvidia.com/gpu": "8"})
    manifest["metadata"]["annotations"] = annotations
    return manifest


def admit(manifest: dict[str, Any], old: dict[str, Any] | None = None) -> Verdict:
    return node_policy.admit(manifest, old, ClusterSnapshot(), PolicyConfig())


def assert_plain_allow(verdict: Verdict) -> None:
    assert verdict.allowed
    assert (verdict.message, verdict.violations, verdict.warnings, verdict.patch) == ("", (), (), ())


# --- create -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "manifest",
    [
        pytest.param(node("plain"), id="no-annotations"),
        pytest.param(gpu_node("gpu-node-1", "NVIDIA-A100", 8), id="gpu-node-no-annotations"),
        pytest.param(annotated({"node.alpha.kubernetes.io/ttl": "0"}), id="unrelated-annotations"),
        pytest.param(annotated({CPU: "32", MEMORY: "64Gi", PERCENT_MEMORY: "50"}), id="valid-crossquota"),
        pytest.param({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bare"}}, id="no-status"),
    ],
)
def test_nodes_without_problems_are_allowed_with_no_patch_and_no_warning(manifest: dict[str, Any]) -> None:
    assert_plain_allow(admit(manifest))


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({CPU: "80"},
         'metadata.annotations["volcano.sh/crossquota-cpu"]: volcano.sh/crossquota-cpu 80 is above the node\'s '
         "allocatable cpu 64"),
        ({PERCENT_MEMORY: "120"},
         'metadata.annotations["volcano.sh/crossquota-percentage-memory"]: volcano.sh/crossquota-percentage-memory '
         "120 is not a percentage from 0 to 100"),
        ({"volcano.sh/crossquota-amd.com/gpu": "1"},
         'metadata.annotations["volcano.sh/crossquota-amd.com/gpu"]: volcano.sh/crossquota-amd.com/gpu 1 limits '
         "amd.com/gpu, which the node does not have (it is not in status.allocatable)"),
        ({CPU: "80", MEMORY: "lots"},
         'metadata.annotations["volcano.sh/crossquota-cpu"]: volcano.sh/crossquota-cpu 80 is above the node\'s '
         'allocatable cpu 64; metadata.annotations["volcano.sh/crossquota-memory"]: volcano.sh/crossquota-memory '
         '"lots" is not a Kubernetes quantity (such as 32, 500m or 64Gi)'),
    ],
)
def test_bad_crossquota_annotations_are_denied_with_the_exact_message(annotations: dict[str, str],
                                                                       message: str) -> None:
    """The node policy's denial, said as the API server shows it: each violation's path and message, joined."""
    verdict = admit(annotated(annotations))
    assert not verdict.allowed
    assert violations_of(verdict) == [(f'metadata.annotations["{name}"]', Reason.INVALID) for name in annotations]
    assert verdict.message == message
    assert verdict.patch == ()


def test_a_gpu_node_may_cap_its_gpu_companion_resources() -> None:
    base = gpu_node("gpu-node-1", "NVIDIA-A100", 8)
    assert_plain_allow(admit(annotated({CPU: "32000m", PERCENT_MEMORY: "37.5"}, base=base)))


# --- update -------------------------------------------------------------------------------------------------------

def test_setting_a_bad_value_on_update_is_denied() -> None:
    old = annotated({CPU: "32"})
    verdict = admit(annotated({CPU: "65"}), old)
    denied_at(verdict, ('metadata.annotations["volcano.sh/crossquota-cpu"]', Reason.INVALID))


def test_adding_a_bad_annotation_on_update_is_denied() -> None:
    verdict = admit(annotated({CPU: "32", MEMORY: "1Ti"}), annotated({CPU: "32"}))
    denied_at(verdict, ('metadata.annotations["volcano.sh/crossquota-memory"]', Reason.INVALID))


def test_an_unchanged_bad_annotation_warns_but_does_not_block_other_updates() -> None:
    """e.g. ``kubectl cordon`` after the node's allocatable shrank below a quota admitted earlier."""
    old = annotated({CPU: "64"})
    new = annotated({CPU: "64"})
    new["status"]["allocatable"]["cpu"] = "48"
    new["spec"] = {"unschedulable": True}
    verdict = admit(new, old)
    assert verdict.allowed
    assert verdict.warnings == (
        'metadata.annotations["volcano.sh/crossquota-cpu"]: volcano.sh/crossquota-cpu 64 is above the node\'s '
        "allocatable cpu 48 (already set before this update, so not denied; fix or remove it)",
    )
    assert verdict.patch == ()


def test_unchanged_problems_warn_while_changed_ones_deny() -> None:
    old = annotated({CPU: "99", PERCENT_MEMORY: "50"})
    verdict = admit(annotated({CPU: "99", PERCENT_MEMORY: "500"}), old)
    assert not verdict.allowed
    assert [v.path for v in verdict.violations] == ['metadata.annotations["volcano.sh/crossquota-percentage-memory"]']
    assert len(verdict.warnings) == 1
    assert "volcano.sh/crossquota-cpu 99 is above" in verdict.warnings[0]


def test_removing_a_bad_annotation_is_allowed() -> None:
    assert_plain_allow(admit(annotated({}), annotated({CPU: "99"})))


@pytest.mark.parametrize("old", [{}, {"metadata": "x"}, {"metadata": {"annotations": ["x"]}}])
def test_an_unreadable_old_object_counts_as_having_no_annotations(old: dict[str, Any]) -> None:
    verdict = admit(annotated({CPU: "99"}), old)
    assert not verdict.allowed
    assert verdict.warnings == ()


# --- properties ---------------------------------------------------------------------------------------------------

anything = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["1", "0", "-1", "64", "65", "100", "100.5", "NaN", "512Gi", "1e40", "5e1"]),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
names = st.one_of(
    st.sampled_from([CPU, MEMORY, PERCENT_MEMORY, "volcano.sh/crossquota-", "volcano.sh/crossquota-percentage-",
                     "volcano.sh/crossquota-scoring-strategy", "volcano.sh/crossquota-x\n", "other"]),
    st.text(max_size=8).map(lambda resource: "volcano.sh/crossquota-" + resource),
)
annotation_maps = st.one_of(st.dictionaries(names, anything, max_size=4), anything)
allocatables = st.one_of(st.dictionaries(st.sampled_from(["cpu", "memory", "x\n", ""]), anything, max_size=3),
                         anything)


def a_node(annotations: Any, allocatable: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "annotations": annotations},
            "status": {"allocatable": allocatable}}


@given(annotation_maps, allocatables, st.one_of(st.none(), annotation_maps))
def test_any_node_gets_a_verdict_on_one_line_and_never_raises(annotations: Any, allocatable: Any,
                                                              old_annotations: Any) -> None:
    old = None if old_annotations is None else a_node(old_annotations, allocatable)
    verdict = admit(a_node(annotations, allocatable), old)
    assert isinstance(verdict, Verdict)
    assert verdict.allowed == (not verdict.violations)
    assert verdict.patch == ()
    for text in (verdict.message, *verdict.warnings):
        assert len(text.splitlines()) <= 1
    if verdict.allowed:
        assert verdict.message == ""
    else:
        assert verdict.message


@given(annotation_maps, allocatables)
def test_an_update_that_changes_no_annotation_is_never_denied(annotations: Any, allocatable: Any) -> None:
    manifest = a_node(annotations, allocatable)
    assert admit(manifest, copy.deepcopy(manifest)).allowed
