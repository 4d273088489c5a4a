"""A Queue's spec.dra: shape, guarantee <= deserved <= capability, and the hierarchy against parent and children."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import queue
from hypothesis import given
from hypothesis import strategies as st
from verdicts import violations_of

from cardquota.core.dra_quota import device_class_violation
from cardquota.core.policies.dra import dra_violations
from cardquota.core.snapshot import ClusterSnapshot, queue_record
from cardquota.core.violations import FieldPath, Reason, Violation

H100 = "nvidia-h100"
VGPU = "hami-core-gpu.project-hami.io"

SEED_DRA: dict[str, Any] = {  # the usage example of the DRA queue quota design
    "capability": {
        H100: {"count": 8},
        VGPU: {"count": 80, "capacity": {"cores": "800", "memory": "80Gi"}},
    },
    "deserved": {VGPU: {"count": 40}},
    "guarantee": {VGPU: {"count": 10}},
}


def dra_queue(name: str = "ml-team", dra: Any = None, *, parent: str | None = None) -> dict[str, Any]:
    manifest = queue(name, parent=parent)
    if dra is not None:
        manifest["spec"]["dra"] = copy.deepcopy(dra)
    return manifest


def snapshot_of(*queues: dict[str, Any], complete: bool = True) -> ClusterSnapshot:
    snapshot = ClusterSnapshot(complete=complete)
    for manifest in queues:
        record = queue_record(manifest)
        snapshot.queues[record.queue.name] = record
    return snapshot


def capability(**classes: Any) -> dict[str, Any]:
    return {"capability": {name.replace("_", "-"): entry for name, entry in classes.items()}}


def check(manifest: dict[str, Any], snapshot: ClusterSnapshot | None = None) -> tuple[list[Violation], list[str]]:
    return dra_violations(manifest, snapshot if snapshot is not None else snapshot_of())


Expected = list[tuple[str, Reason, str | None]]
"""(path, reason, message) of each violation; the message is given for the first case of each rule only."""


def assert_found(violations: list[Violation], expected: Expected) -> None:
    assert violations_of(violations) == [(path, reason) for path, reason, _ in expected]
    for violation, (_, _, message) in zip(violations, expected, strict=True):
        if message is not None:
            assert violation.message == message


def test_the_design_example_is_valid() -> None:
    assert check(dra_queue(dra=SEED_DRA)) == ([], [])


@pytest.mark.parametrize("manifest", [
    dra_queue(),
    dra_queue(dra=None),
    {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"}},
    {"kind": "Queue", "spec": "not a map"},
    {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"},
     "spec": {"dra": None}},
])
def test_a_queue_without_spec_dra_has_nothing_to_say(manifest: dict[str, Any]) -> None:
    assert check(manifest) == ([], [])


@pytest.mark.parametrize(("dra", "expected"), [
    pytest.param([1], [("spec.dra", Reason.INVALID,
                        "must be a map of capability, deserved and guarantee, not a list")],
                 id="dra-not-a-map"),
    pytest.param({"limits": {}}, [("spec.dra.limits", Reason.NOT_SUPPORTED,
                                   "unknown field limits (spec.dra has capability, deserved and guarantee)")],
                 id="unknown-dra-field"),
    pytest.param({"capability": [H100]},
                 [("spec.dra.capability", Reason.INVALID,
                   "must be a map of DeviceClass name to quota, not a list")],
                 id="section-not-a-map"),
    pytest.param({"capability": {"NVIDIA-H100": {"count": 1}}},
                 [('spec.dra.capability["NVIDIA-H100"]', Reason.INVALID,
                   "DeviceClass name NVIDIA-H100 is not a DNS subdomain (lowercase letters, digits, '-' and '.', "
                   "starting and ending with a letter or digit, such as nvidia-h100 or gpu.example.com)")],
                 id="class-name-uppercase"),
    pytest.param({"capability": {"gpu": 4}},
                 [('spec.dra.capability["gpu"]', Reason.INVALID,
                   "DeviceClass gpu: must be a map with count and optional capacity, not a number")],
                 id="entry-not-a-map"),
    pytest.param({"guarantee": {"gpu": {"count": 1, "memory": "1Gi"}}},
                 [('spec.dra.guarantee["gpu"].memory', Reason.NOT_SUPPORTED,
                   "DeviceClass gpu: unknown field memory (an entry has count and capacity)")],
                 id="unknown-entry-field"),
    pytest.param({"capability": {"gpu": {}}},
                 [('spec.dra.capability["gpu"].count', Reason.REQUIRED,
                   "DeviceClass gpu: count is required (the number of devices)")],
                 id="count-missing"),
    pytest.param({"capability": {"gpu": {"count": "8"}}},
                 [('spec.dra.capability["gpu"].count', Reason.INVALID,
                   'DeviceClass gpu: count must be a whole number, not "8"')],
                 id="count-string"),
    pytest.param({"capability": {"gpu": {"count": 2.5}}},
                 [('spec.dra.capability["gpu"].count', Reason.INVALID, None)],
                 id="count-float"),
    pytest.param({"capability": {"gpu": {"count": True}}},
                 [('spec.dra.capability["gpu"].count', Reason.INVALID, None)],
                 id="count-bool"),
    pytest.param({"capability": {"gpu": {"count": -1}}},
                 [('spec.dra.capability["gpu"].count', Reason.INVALID,
                   "DeviceClass gpu: count -1 is negative")],
                 id="count-negative"),
    pytest.param({"capability": {"gpu": {"count": 2**63}}},
                 [('spec.dra.capability["gpu"].count', Reason.INVALID,
                   f"DeviceClass gpu: count {2**63} is too large (at most {2**63 - 1})")],
                 id="count-beyond-int64"),
    pytest.param({"capability": {"gpu": {"count": 1, "capacity": ["memory"]}}},
                 [('spec.dra.capability["gpu"].capacity', Reason.INVALID,
                   "DeviceClass gpu: capacity must be a map of dimension to quantity, not a list")],
                 id="capacity-not-a-map"),
    pytest.param({"capability": {"gpu": {"count": 1, "capacity": {"memory": "80GB"}}}},
                 [('spec.dra.capability["gpu"].capacity["memory"]', Reason.INVALID,
                   "DeviceClass gpu: capacity memory: \"80GB\" is not a quantity "
                   '(expected e.g. "2", "500m", "80Gi", "1e3")')],
                 id="capacity-not-a-quantity"),
    pytest.param({"capability": {"gpu": {"count": 1, "capacity": {"cores": "-5"}}}},
                 [('spec.dra.capability["gpu"].capacity["cores"]', Reason.INVALID,
                   "DeviceClass gpu: capacity cores: -5 is negative")],
                 id="capacity-negative"),
    pytest.param({"capability": {"gpu": {"count": 1, "capacity": {"": "5"}}}},
                 [('spec.dra.capability["gpu"].capacity[""]', Reason.REQUIRED,
                   'DeviceClass gpu: capacity dimension "" must be a non-empty name')],
                 id="capacity-empty-dimension"),
])
def test_shape_violations(dra: Any, expected: Expected) -> None:
    violations, warnings = check(dra_queue(dra=dra))
    assert_found(violations, expected)
    assert warnings == []


@pytest.mark.parametrize(("name", "valid"), [
    ("nvidia-h100", True),
    ("hami-core-gpu.project-hami.io", True),
    ("a", True),
    ("0gpu9", True),
    ("a" * 253, True),
    ("a" * 254, False),
    ("", False),
    ("-gpu", False),
    ("gpu-", False),
    ("gpu..example", False),
    (".gpu", False),
    ("gpu_h100", False),
    ("gpu h100", False),
    ("gpu\n", False),
    ("ǵpu", False),
    (7, False),
])
def test_device_class_names_are_dns_subdomains(name: object, valid: bool) -> None:
    assert (device_class_violation(name, FieldPath.of("spec", "dra")) is None) is valid


@pytest.mark.parametrize(("dra", "expected"), [
    pytest.param({"deserved": {"gpu": {"count": 4}}, "guarantee": {"gpu": {"count": 6}}},
                 [('spec.dra.guarantee["gpu"].count', Reason.INVALID,
                   "DeviceClass gpu: guarantee count 6 is above deserved count 4 "
                   "(each must be guarantee <= deserved <= capability)")],
                 id="guarantee-above-deserved"),
    pytest.param({"capability": {"gpu": {"count": 8, "capacity": {"memory": "80Gi"}}},
                  "deserved": {"gpu": {"count": 8, "capacity": {"memory": "100Gi"}}}},
                 [('spec.dra.deserved["gpu"].capacity["memory"]', Reason.INVALID, None)],
                 id="deserved-dimension-above-capability"),
    pytest.param({"capability": {"gpu": {"count": 2}}, "guarantee": {"gpu": {"count": 3}}},
                 [('spec.dra.guarantee["gpu"].count', Reason.INVALID, None)],
                 id="guarantee-above-capability-without-deserved"),
    pytest.param({"capability": {"gpu": {"count": 8, "capacity": {"cores": "100"}}},
                  "deserved": {"gpu": {"count": 8}},
                  "guarantee": {"gpu": {"count": 1, "capacity": {"cores": "200"}}}},
                 [('spec.dra.guarantee["gpu"].capacity["cores"]', Reason.INVALID, None)],
                 id="guarantee-dimension-above-capability-when-deserved-lacks-it"),
    pytest.param({"capability": {"gpu": {"count": 2}}, "deserved": {"gpu": {"count": 3}},
                  "guarantee": {"gpu": {"count": 3}}},
                 [('spec.dra.deserved["gpu"].count', Reason.INVALID, None)],
                 id="chain-reported-once"),
    pytest.param({"capability": {"gpu": {"count": 4, "capacity": {"memory": "1Gi"}}},
                  "deserved": {"gpu": {"count": 4, "capacity": {"memory": "1024Mi"}}},
                  "guarantee": {"gpu": {"count": 0}, "other": {"count": 99}}},
                 [], id="equal-bounds-and-unbounded-classes-are-fine"),
    pytest.param({"capability": {"gpu": {"count": 4, "capacity": {"cores": "1.5"}}},
                  "deserved": {"gpu": {"count": 4, "capacity": {"cores": "1500m"}}}},
                 [], id="quantities-compare-exactly"),
    pytest.param({"capability": {"gpu": {"count": "8"}}, "deserved": {"gpu": {"count": 9}}},
                 [('spec.dra.capability["gpu"].count', Reason.INVALID, None)],
                 id="invalid-bounds-are-not-compared"),
])
def test_guarantee_deserved_capability_order(dra: dict[str, Any], expected: Expected) -> None:
    violations, warnings = check(dra_queue(dra=dra))
    assert_found(violations, expected)
    assert warnings == []


PARENT = dra_queue("org", capability(gpu={"count": 8, "capacity": {"memory": "80Gi"}}))


@pytest.mark.parametrize(("child_dra", "expected"), [
    pytest.param(capability(gpu={"count": 8, "capacity": {"memory": "80Gi"}}), [], id="equal-to-parent"),
    pytest.param(capability(gpu={"count": 9}),
                 [('spec.dra.capability["gpu"].count', Reason.INVALID,
                   "DeviceClass gpu: capability count 9 is above parent queue org's capability count 8")],
                 id="count-above-parent"),
    pytest.param(capability(gpu={"count": 1, "capacity": {"memory": "81Gi", "cores": "9999"}}),
                 [('spec.dra.capability["gpu"].capacity["memory"]', Reason.INVALID, None)],
                 id="dimension-above-parent-and-unlimited-dimension"),
    pytest.param(capability(other={"count": 1000}), [], id="class-the-parent-does-not-limit"),
])
def test_a_child_stays_within_its_parent(child_dra: dict[str, Any], expected: Expected) -> None:
    violations, warnings = check(dra_queue("team", child_dra, parent="org"), snapshot_of(PARENT))
    assert_found(violations, expected)
    assert warnings == []


def test_a_parent_with_an_invalid_or_missing_dra_limits_nothing() -> None:
    child = dra_queue("team", capability(gpu={"count": 100}), parent="org")
    for parent_dra in (None, {"capability": "junk"}, {"capability": {"gpu": {"count": "8"}}}):
        assert check(child, snapshot_of(dra_queue("org", parent_dra))) == ([], [])


def test_a_missing_parent_denies_on_a_complete_snapshot_and_warns_otherwise() -> None:
    child = dra_queue("team", capability(gpu={"count": 1}), parent="org")
    violations, warnings = check(child, snapshot_of(complete=True))
    assert_found(violations, [("spec.parent", Reason.NOT_FOUND, "parent queue org does not exist")])
    assert warnings == []
    violations, warnings = check(child, snapshot_of(complete=False))
    assert violations == []
    assert len(warnings) == 1
    assert "spec.dra.capability against parent queue org not checked" in warnings[0]


def test_the_implicit_root_parent_and_queues_without_capability_need_no_parent() -> None:
    assert check(dra_queue("team", capability(gpu={"count": 1}), parent="root"), snapshot_of()) == ([], [])
    assert check(dra_queue("team", {"deserved": {"gpu": {"count": 1}}}, parent="org"), snapshot_of()) == ([], [])


@pytest.mark.parametrize(("parent_dra", "expected"), [
    pytest.param(capability(gpu={"count": 8, "capacity": {"memory": "80Gi"}}), [], id="enough-for-child"),
    pytest.param(capability(gpu={"count": 4, "capacity": {"memory": "80Gi"}}),
                 [('spec.dra.capability["gpu"].count', Reason.INVALID,
                   "DeviceClass gpu: capability count 4 is below child queue team-a's capability count 8")],
                 id="count-below-child"),
    pytest.param(capability(gpu={"count": 8, "capacity": {"memory": "40Gi"}}),
                 [('spec.dra.capability["gpu"].capacity["memory"]', Reason.INVALID, None)],
                 id="dimension-below-child"),
    pytest.param(capability(other={"count": 1}), [], id="parent-without-the-class-limits-nothing"),
])
def test_a_parent_does_not_drop_below_a_child(parent_dra: dict[str, Any], expected: Expected) -> None:
    child = dra_queue("team-a", capability(gpu={"count": 8, "capacity": {"memory": "80Gi"}}), parent="org")
    old_self = dra_queue("org", capability(gpu={"count": 100}))
    violations, warnings = check(dra_queue("org", parent_dra), snapshot_of(child, old_self))
    assert_found(violations, expected)
    assert warnings == []


def test_a_queue_that_names_itself_as_parent_is_not_its_own_child_or_parent() -> None:
    old_self = dra_queue("loop", capability(gpu={"count": 1}), parent="loop")
    new_self = dra_queue("loop", capability(gpu={"count": 8}), parent="loop")
    assert check(new_self, snapshot_of(old_self)) == ([], [])


def test_odd_names_stay_on_one_line_in_paths_and_messages() -> None:
    dra = {"capability": {"gpu\nx": {"count": 1}, "gpu": {"count": 1, "capacity": {"mem\u2028ory": "x"}}},
           "bad\tfield": 1}
    violations, _ = check(dra_queue(dra=dra))
    assert len(violations) == 3
    for violation in violations:
        assert str(violation).isprintable(), violation


def mostly(usual: st.SearchStrategy[Any], *unusual: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` three times in four, else one of ``unusual``."""
    return st.sampled_from([usual, usual, usual, *unusual]).flatmap(lambda strategy: strategy)


# Fuzzing: whatever spec.dra holds, dra_violations returns values and one-line messages, never raises.

_names = st.sampled_from(["capability", "deserved", "guarantee", "count", "capacity", "memory", "cores", "gpu",
                          "nvidia-h100", "Bad Name", ""]) | st.text(max_size=8)
_scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**70), max_value=2**70)
            | st.floats(allow_nan=True, allow_infinity=True)
            | st.sampled_from(["8", "80Gi", "-1", "1e3", "500m", "1.5", "abc", "", "9" * 70]) | st.text(max_size=6))
_json_like = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_names | st.integers(), children, max_size=4),
    max_leaves=20,
)
_quantities = st.sampled_from(["1", "10", "1Gi", "80Gi", "500m", 5, 0.5, "-1", "x"])
_entry = st.fixed_dictionaries(
    {"count": st.integers(min_value=0, max_value=20)},
    optional={"capacity": st.dictionaries(st.sampled_from(["memory", "cores"]), _quantities, max_size=2)},
)
# Mostly well-formed, so that the order and hierarchy rules are reached; sometimes anything at each level.
_entries = mostly(_entry, st.fixed_dictionaries({}, optional={
    "count": _scalars, "capacity": st.dictionaries(_names, _quantities | _scalars, max_size=3) | _json_like,
    "extra": _scalars,
}), _json_like)
_sections = st.dictionaries(st.sampled_from(["gpu", "nvidia-h100"]) | _names, _entries, max_size=3)
_dras = mostly(
    st.fixed_dictionaries({}, optional={"capability": _sections, "deserved": _sections, "guarantee": _sections}),
    st.fixed_dictionaries({}, optional={"capability": _sections | _json_like, "extra": _json_like}),
    _json_like,
)


@given(dra=_dras, parent_dra=_dras, child_dra=_dras, complete=st.booleans(),
       parent=st.sampled_from([None, "org", "root", "missing", "q"]))
def test_any_spec_dra_gives_values_never_exceptions(dra: Any, parent_dra: Any, child_dra: Any, complete: bool,
                                                     parent: str | None) -> None:
    queues = [dra_queue("org"), dra_queue("child", parent="q")]
    # Snapshot queues are built through the views, which accept only a map (or nothing) for spec.dra.
    if isinstance(parent_dra, dict):
        queues[0]["spec"]["dra"] = parent_dra
    if isinstance(child_dra, dict):
        queues[1]["spec"]["dra"] = child_dra
    manifest = dra_queue("q", parent=parent)
    manifest["spec"]["dra"] = dra
    violations, warnings = dra_violations(manifest, snapshot_of(*queues, complete=complete))
    for violation in violations:
        assert isinstance(violation, Violation)
        assert str(violation).isprintable(), violation
    for warning in warnings:
        assert warning.isprintable(), warning
