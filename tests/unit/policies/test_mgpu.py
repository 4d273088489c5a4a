"""mGPU admission rules (mgpu-design.md, "Webhook Addmission"): every rule, every example of the seed, valid pods,
and properties: any input gives a list of one-line violations, never an exception."""

from __future__ import annotations

from typing import Any

import pytest
from builders import container, pod
from hypothesis import given
from hypothesis import strategies as st
from strategies import manifest_values
from verdicts import violations_of

from cardquota.core.errors import InputError
from cardquota.core.keys import CONTAINER_MULTIPLE_GPU, MGPU_CORE, MGPU_MEMORY
from cardquota.core.objects import Pod
from cardquota.core.policies.mgpu import may_break_mgpu_rules, mgpu_violations
from cardquota.core.violations import Reason, Violation

MULTIPLE_PATH = f'metadata.annotations["{CONTAINER_MULTIPLE_GPU}"]'


def core_path(index: int = 0, section: str = "requests") -> str:
    return f'spec.containers[{index}].resources.{section}["{MGPU_CORE}"]'


def memory_path(index: int = 0, section: str = "requests") -> str:
    return f'spec.containers[{index}].resources.{section}["{MGPU_MEMORY}"]'


def mgpu(name: str = "main", core: Any = None, memory: Any = None, *, limits: bool = False,
         both: bool = False) -> dict[str, Any]:
    """A container requesting mGPU (as requests, as limits, or as both like the seed's multiple-pod examples)."""
    values = {key: value for key, value in ((MGPU_CORE, core), (MGPU_MEMORY, memory)) if value is not None}
    if both:
        return container(name, requests=dict(values), limits=dict(values))
    return container(name, limits=values) if limits else container(name, requests=values)


def mgpu_pod(*containers: dict[str, Any], multiple: Any = None) -> dict[str, Any]:
    annotations = {CONTAINER_MULTIPLE_GPU: multiple} if multiple is not None else None
    return pod("mgpu-pod", containers=list(containers), annotations=annotations)


def cpu_only(name: str = "sidecar") -> dict[str, Any]:
    return container(name, requests={"cpu": "1"})


# --- every example of the seed's webhook section ----------------------------------------------------------------

SEED_EXAMPLES = [
    pytest.param(  # normal pod, rule 1: mgpu-core <= 0
        mgpu_pod(mgpu("main", "-20", "6k")),
        [(core_path(), Reason.INVALID, 'container "main": vke.volcengine.com/mgpu-core -20 must be above 0')],
        id="normal-1-core-negative",
    ),
    pytest.param(  # normal pod, "rule 2" example: core 120 is not in (0, 100), so the 256 MiB rule does not apply;
        # it is denied by rule 3 (above 100, not a multiple of 100). The memory is not judged when the core is
        # invalid (how much memory it needs depends on the core).
        mgpu_pod(mgpu("main", "120", 128)),
        [(core_path(), Reason.INVALID, None)],
        id="normal-2-core-120-memory-128-denied-by-rule-3",
    ),
    pytest.param(  # normal pod, rule 3: above 100 and not a full card
        mgpu_pod(mgpu("main", "120")),
        [(core_path(), Reason.INVALID,
          'container "main": vke.volcengine.com/mgpu-core 120 is above 100 and not a multiple of 100 '
          "(a full card is 100)")],
        id="normal-3-core-120",
    ),
    pytest.param(  # normal pod, rule 4: full cards with a redundant memory
        mgpu_pod(mgpu("main", "200", "6k")),
        [(memory_path(), Reason.FORBIDDEN,
          'container "main": vke.volcengine.com/mgpu-memory must not be set when '
          "vke.volcengine.com/mgpu-core 200 asks for 2 cards (a full card comes with all its memory); "
          "remove vke.volcengine.com/mgpu-memory")],
        id="normal-4-full-cards-with-memory",
    ),
    pytest.param(  # multiple pod, rule 1: 2 counts, 1 container
        mgpu_pod(mgpu("main", "200", "6k", both=True), multiple="3,2"),
        [(MULTIPLE_PATH, Reason.INVALID,
          'lists 2 card counts ("3,2") but the pod has 1 container; give one count per container, '
          "in spec.containers order")],
        id="multiple-1-count-mismatch",
    ),
    pytest.param(  # multiple pod, rule 2, as written in the seed (one container): the negative entry is reported,
        # and so is the length (2 entries, 1 container)
        mgpu_pod(mgpu("main", "200", "6k", both=True), multiple="-1,2"),
        [(MULTIPLE_PATH, Reason.INVALID, 'entry 0 ("-1") is negative; a card count is 0 or more'),
         (MULTIPLE_PATH, Reason.INVALID, None)],
        id="multiple-2-negative-count",
    ),
    pytest.param(  # multiple pod, rule 3: 200 / 2 = 100, a full card each, with a redundant memory
        mgpu_pod(mgpu("main", "200", "6k", both=True), multiple="2"),
        [(memory_path(), Reason.FORBIDDEN,
          'container "main": vke.volcengine.com/mgpu-memory must not be set when '
          "vke.volcengine.com/mgpu-core 200 over its 2 cards (vke.volcengine.com/container-multiple-gpu)"
          " is a full card each (a full card comes with all its memory); "
          "remove vke.volcengine.com/mgpu-memory")],
        id="multiple-3-full-card-each-with-memory",
    ),
    pytest.param(  # multiple pod, rule 4: 130 / 3 is not a whole number (6000 / 3 = 2000 MiB per card is fine)
        mgpu_pod(mgpu("main", "130", "6k", both=True), multiple="3"),
        [(core_path(), Reason.INVALID,
          'container "main": vke.volcengine.com/mgpu-core 130 is not divisible by its 3 cards '
          "(vke.volcengine.com/container-multiple-gpu)")],
        id="multiple-4-core-not-divisible",
    ),
]


@pytest.mark.parametrize(("manifest", "expected"), SEED_EXAMPLES)
def test_every_seed_example_is_denied_with_the_exact_reason(manifest: dict[str, Any],
                                                           expected: list[tuple[str, Reason, str | None]]) -> None:
    """(path, reason) of every violation; the exact message for the first example of each rule."""
    found = mgpu_violations(manifest)
    assert violations_of(found) == [(path, reason) for path, reason, _ in expected]
    for violation, (_, _, message) in zip(found, expected, strict=True):
        if message is not None:
            assert violation.message == message


# --- one case per rule --------------------------------------------------------------------------------------------

RULES = [
    # normal pod, rule 1: core <= 0 or memory <= 0
    ("core-zero", mgpu_pod(mgpu(core="0", memory="1024")),
     [(core_path(), Reason.INVALID, "mgpu-core 0 must be above 0")]),
    ("memory-zero", mgpu_pod(mgpu(core="50", memory="0")),
     [(memory_path(), Reason.INVALID, "mgpu-memory 0 must be above 0")]),
    ("memory-negative", mgpu_pod(mgpu(core="50", memory="-1Ki")),
     [(memory_path(), Reason.INVALID, None)]),
    ("core-and-memory-negative", mgpu_pod(mgpu(core="-1", memory="-1")),
     [(core_path(), Reason.INVALID, None), (memory_path(), Reason.INVALID, None)]),
    ("memory-without-core", mgpu_pod(mgpu(memory="1024")),
     [(core_path(), Reason.REQUIRED, f"requests {MGPU_MEMORY} without {MGPU_CORE}; set {MGPU_CORE} above 0")]),
    # rule 2: core in (0, 100) needs memory >= 256 MiB (missing memory counts as 0)
    ("partial-memory-below-256", mgpu_pod(mgpu(core="50", memory="255")),
     [(memory_path(), Reason.INVALID,
       'container "main": vke.volcengine.com/mgpu-memory 255 is below 256 MiB, the least a container '
       "sharing a card (vke.volcengine.com/mgpu-core 50) can run with")]),
    ("partial-memory-missing", mgpu_pod(mgpu(core="99")),
     [(memory_path(), Reason.REQUIRED,
       'container "main": vke.volcengine.com/mgpu-memory is not set; vke.volcengine.com/mgpu-core 99 '
       "shares a card and needs at least 256 MiB of its memory")]),
    ("partial-memory-quantity-below-256", mgpu_pod(mgpu(core="1", memory="0.2k")),
     [(memory_path(), Reason.INVALID, None)]),
    # rule 3: core > 100 must be a multiple of 100
    ("core-150", mgpu_pod(mgpu(core="150")), [(core_path(), Reason.INVALID, None)]),
    ("core-101-with-memory-invalid-too", mgpu_pod(mgpu(core="101", memory="0")),
     [(core_path(), Reason.INVALID, None), (memory_path(), Reason.INVALID, None)]),
    # rule 4: a full-card request must not set memory
    ("one-full-card-with-memory", mgpu_pod(mgpu(core="100", memory="1024")),
     [(memory_path(), Reason.FORBIDDEN, None)]),
    ("full-cards-with-zero-memory", mgpu_pod(mgpu(core="300", memory="0")),
     [(memory_path(), Reason.FORBIDDEN, None)]),
    # whole numbers
    ("core-fraction", mgpu_pod(mgpu(core="50.5", memory="1024")),
     [(core_path(), Reason.INVALID, "mgpu-core 50.5 is not a whole number")]),
    ("core-milli", mgpu_pod(mgpu(core="500m", memory="1024")), [(core_path(), Reason.INVALID, None)]),
    ("memory-fraction", mgpu_pod(mgpu(core="50", memory="1024.5")),
     [(memory_path(), Reason.INVALID, "mgpu-memory 1024.5 is not a whole number of MiB")]),
    # values that are not quantities
    ("core-not-a-quantity", mgpu_pod(mgpu(core="fifty", memory="1024")),
     [(core_path(), Reason.INVALID,
       'vke.volcengine.com/mgpu-core "fifty" is not a Kubernetes quantity (such as 50 or 6k)')]),
    ("memory-control-characters", mgpu_pod(mgpu(core="50", memory="1Gi\n")),
     [(memory_path(), Reason.INVALID, None)]),
    ("core-a-list", mgpu_pod(mgpu(core=[50], memory="1024")), [(core_path(), Reason.INVALID, None)]),
    ("core-a-boolean", mgpu_pod(mgpu(core=True, memory="1024")), [(core_path(), Reason.INVALID, None)]),
    ("core-out-of-range", mgpu_pod(mgpu(core="1e40")), [(core_path(), Reason.INVALID, None)]),
    # where values come from
    ("limits-path", mgpu_pod(mgpu(core="120", limits=True)),
     [(core_path(section="limits"), Reason.INVALID, None)]),
    ("request-wins-over-limit", mgpu_pod(container("main", requests={MGPU_CORE: "50"}, limits={MGPU_CORE: "100"})),
     [(memory_path(), Reason.REQUIRED, None)]),
    ("second-container-named", mgpu_pod(cpu_only(), mgpu("worker", core="120")),
     [(core_path(1), Reason.INVALID, None)]),
    ("unnamed-container", mgpu_pod({"resources": {"requests": {MGPU_CORE: "120"}}}),
     [(core_path(), Reason.INVALID, "container #0: vke.volcengine.com/mgpu-core 120")]),
    ("name-with-line-break", mgpu_pod(mgpu("a\nb", core="120")),
     [(core_path(), Reason.INVALID, None)]),
    ("every-container-reported", mgpu_pod(mgpu("a", core="120"), mgpu("b", core="0")),
     [(core_path(0), Reason.INVALID, None), (core_path(1), Reason.INVALID, None)]),
    # multiple pod: the annotation
    ("multiple-not-a-number", mgpu_pod(mgpu(core="100"), multiple="two"),
     [(MULTIPLE_PATH, Reason.INVALID,
       'entry 0 ("two") is not a whole number of cards (write counts such as "2,1,0", without spaces)')]),
    ("multiple-empty", mgpu_pod(mgpu(core="100"), multiple=""),
     [(MULTIPLE_PATH, Reason.INVALID, None)]),
    ("multiple-space", mgpu_pod(mgpu(core="100"), multiple=" 1"),
     [(MULTIPLE_PATH, Reason.INVALID, None)]),
    ("multiple-decimal", mgpu_pod(mgpu(core="100"), multiple="1.0"),
     [(MULTIPLE_PATH, Reason.INVALID, None)]),
    ("multiple-too-large", mgpu_pod(mgpu(core="100"), multiple="9" * 30),
     [(MULTIPLE_PATH, Reason.INVALID, "is too large")]),
    ("multiple-int64-overflow", mgpu_pod(mgpu(core="100"), multiple=str(2**63)),
     [(MULTIPLE_PATH, Reason.INVALID, None)]),
    ("multiple-not-a-string", mgpu_pod(mgpu(core="100"), multiple=2),
     [(MULTIPLE_PATH, Reason.INVALID, 'must be a string such as "2,1", not a number (quote the value)')]),
    ("multiple-many-bad-entries", mgpu_pod(*[mgpu(f"c{i}", core="100") for i in range(8)], multiple="x," * 7 + "x"),
     [(MULTIPLE_PATH, Reason.INVALID, None) for _ in range(5)]
     + [(MULTIPLE_PATH, Reason.INVALID, "3 more entries are not a card count")]),
    ("multiple-without-containers", pod("p", containers=[], annotations={CONTAINER_MULTIPLE_GPU: "1"}),
     [(MULTIPLE_PATH, Reason.INVALID, None)]),
    ("multiple-containers-not-a-list", {"metadata": {"annotations": {CONTAINER_MULTIPLE_GPU: "1"}},
                                        "spec": {"containers": "main"}},
     [("spec.containers", Reason.INVALID, "must be a list of containers")]),
    # multiple pod: per container
    ("multiple-no-core", mgpu_pod(mgpu(memory="1024"), multiple="2"),
     [(core_path(), Reason.REQUIRED, f"{MGPU_CORE} is not set, but {CONTAINER_MULTIPLE_GPU} gives it 2 cards")]),
    ("multiple-no-mgpu-at-all", mgpu_pod(cpu_only("main"), multiple="1"),
     [(core_path(), Reason.REQUIRED, None)]),
    ("multiple-core-zero", mgpu_pod(mgpu(core="0", memory="1024"), multiple="2"),
     [(core_path(), Reason.INVALID, None)]),
    ("multiple-memory-negative", mgpu_pod(mgpu(core="100", memory="-2048"), multiple="2"),
     [(memory_path(), Reason.INVALID, None)]),
    ("multiple-above-100-per-card", mgpu_pod(mgpu(core="400"), multiple="2"),
     [(core_path(), Reason.INVALID,
       "mgpu-core 400 over its 2 cards (vke.volcengine.com/container-multiple-gpu) is above 100 per "
       "card (a full card is 100)")]),
    ("multiple-above-100-per-card-not-whole", mgpu_pod(mgpu(core="130", memory="6k"), multiple="1"),
     [(core_path(), Reason.INVALID, None)]),
    ("multiple-memory-per-card-below-256", mgpu_pod(mgpu(core="100", memory="500"), multiple="2"),
     [(memory_path(), Reason.INVALID,
       "mgpu-memory 500 over its 2 cards (vke.volcengine.com/container-multiple-gpu) is below "
       "256 MiB per card (at least 512 in all)")]),
    ("multiple-memory-missing", mgpu_pod(mgpu(core="100"), multiple="2"),
     [(memory_path(), Reason.REQUIRED,
       "mgpu-memory is not set; sharing 2 cards needs at least 256 MiB per card (512 in all)")]),
    ("multiple-memory-not-divisible", mgpu_pod(mgpu(core="100", memory="1025"), multiple="2"),
     [(memory_path(), Reason.INVALID, "mgpu-memory 1025 is not divisible by its 2 cards")]),
    ("multiple-core-and-memory-not-divisible", mgpu_pod(mgpu(core="100", memory="1000"), multiple="3"),
     [(core_path(), Reason.INVALID, None), (memory_path(), Reason.INVALID, None)]),
    ("multiple-core-fraction", mgpu_pod(mgpu(core="50.5", memory="1024"), multiple="1"),
     [(core_path(), Reason.INVALID, None)]),
    ("multiple-zero-entry-with-request", mgpu_pod(mgpu("a", core="100"), mgpu("b", core="50", memory="1024"),
                                                  multiple="1,0"),
     [(core_path(1), Reason.FORBIDDEN,
       f'container "b": requests {MGPU_CORE} 50 but its {CONTAINER_MULTIPLE_GPU} entry is 0 (no mGPU)'),
      (memory_path(1), Reason.FORBIDDEN, None)]),
    ("multiple-garbage-value", mgpu_pod(mgpu(core="x"), multiple="1"),
     [(core_path(), Reason.INVALID, None)]),
    ("multiple-zero-entry-garbage-value", mgpu_pod(mgpu(core="x"), multiple="0"),
     [(core_path(), Reason.INVALID, None)]),
    ("multiple-bad-entry-skips-its-container-only", mgpu_pod(mgpu("a", core="999"), mgpu("b", core="400"),
                                                             multiple="x,2"),
     [(MULTIPLE_PATH, Reason.INVALID, None), (core_path(1), Reason.INVALID, None)]),
]


@pytest.mark.parametrize(("manifest", "expected"), [pytest.param(m, e, id=i) for i, m, e in RULES])
def test_each_rule_denies_with_its_reason(manifest: dict[str, Any],
                                          expected: list[tuple[str, Reason, str | None]]) -> None:
    """(path, reason) of every violation; the message (a fragment of it) for the first case of each rule."""
    found = mgpu_violations(manifest)
    assert violations_of(found) == [(path, reason) for path, reason, _ in expected], found
    for violation, (_, _, fragment) in zip(found, expected, strict=True):
        if fragment is not None:
            assert fragment in violation.message, violation.message


# --- valid pods ---------------------------------------------------------------------------------------------------

VALID = [
    ("no-mgpu-at-all", pod("plain", gpus=1)),
    ("cpu-only-containers", mgpu_pod(cpu_only("a"), cpu_only("b"))),
    ("no-containers", pod("empty", containers=[])),
    ("partial-card-with-1GiB-as-MiB", mgpu_pod(mgpu(core="50", memory="1024"))),
    ("partial-card-at-least-256", mgpu_pod(mgpu(core="1", memory="256"))),
    ("partial-card-quantity-suffixes", mgpu_pod(mgpu(core="5e1", memory="6k"))),
    ("partial-card-as-limits", mgpu_pod(mgpu(core="30", memory="4096", limits=True))),
    ("partial-card-as-numbers", mgpu_pod(mgpu(core=30, memory=4096))),
    ("one-full-card", mgpu_pod(mgpu(core="100"))),
    ("two-full-cards", mgpu_pod(mgpu(core="200"))),
    ("full-cards-beside-a-cpu-container", mgpu_pod(cpu_only(), mgpu(core="800"))),
    ("multiple-2-cards-50-each", mgpu_pod(mgpu(core="100", memory="1024"), multiple="2")),
    ("multiple-full-card-each", mgpu_pod(mgpu(core="200", both=True), multiple="2")),
    ("multiple-seed-2-1-3", mgpu_pod(mgpu("c0", core="100", memory="2048"), mgpu("c1", core="100"),
                                     mgpu("c2", core="99", memory="768"), multiple="2,1,3")),
    ("multiple-zero-entry-no-mgpu", mgpu_pod(cpu_only("c0"), mgpu("c1", core="100", memory="6k"), multiple="0,2")),
    ("multiple-zero-entry-explicit-zero", mgpu_pod(mgpu("c0", core="0"), mgpu("c1", core="100"), multiple="0,1")),
    ("multiple-plus-sign", mgpu_pod(mgpu(core="100", memory="512"), multiple="+2")),
    ("metadata-not-a-map", {"metadata": "x", "spec": {"containers": [cpu_only()]}}),
    ("spec-not-a-map", {"metadata": {}, "spec": ["x"]}),
]


@pytest.mark.parametrize("manifest", [pytest.param(m, id=i) for i, m in VALID])
def test_valid_pods_are_allowed(manifest: dict[str, Any]) -> None:
    assert mgpu_violations(manifest) == []


def test_non_mgpu_pods_are_untouched_whatever_else_is_malformed() -> None:
    manifest = mgpu_pod(container("main", requests={"cpu": "lots", "nvidia.com/gpu": "x"}))
    manifest["spec"]["containers"].append("not a container")
    assert mgpu_violations(manifest) == []


# --- properties ---------------------------------------------------------------------------------------------------

SAMPLE_VALUES = ["100", "200", "50", "-20", "6k", "0", "256", "1024", "1e3", "0.5", "1Gi", "130", "128", "+1",
                 "1e40", "", " ", "NaN", "1..2", "5e-3"]
values = manifest_values(SAMPLE_VALUES)
resource_maps = st.one_of(
    st.dictionaries(st.sampled_from([MGPU_CORE, MGPU_MEMORY, "cpu"]), values, max_size=3),
    values,
)
containers = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.one_of(st.text(max_size=8), st.integers(), st.none()),
            "resources": st.one_of(
                st.fixed_dictionaries({}, optional={"requests": resource_maps, "limits": resource_maps}), values),
        },
    ),
    values,
)
annotation_values = st.one_of(
    st.text(alphabet="0123456789-+,. x", max_size=12),
    st.text(max_size=20),
    st.sampled_from(["2,1,3", "1", "0", "-1,2", "3,2", "", "99999999999999999999", "1" * 5000]),
    st.integers(),
    st.none(),
)
annotation_maps = st.one_of(
    st.dictionaries(st.sampled_from([CONTAINER_MULTIPLE_GPU, "other"]), annotation_values, max_size=2),
    values,
)
pods = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.one_of(st.fixed_dictionaries({}, optional={"annotations": annotation_maps}), values),
        "spec": st.one_of(st.fixed_dictionaries({}, optional={"containers": st.one_of(
            st.lists(containers, max_size=4), values)}), values),
    },
)


def assert_one_line_violations(found: object) -> None:
    assert isinstance(found, list)
    for violation in found:
        assert isinstance(violation, Violation)
        for text in (violation.path, violation.message, str(violation)):
            assert text
            assert text.isprintable(), text
            assert len(text.splitlines()) == 1


@given(pods)
def test_any_pod_gives_one_line_violations_and_never_raises(manifest: dict[str, Any]) -> None:
    assert_one_line_violations(mgpu_violations(manifest))


@given(st.integers(min_value=1, max_value=99), st.integers(min_value=256, max_value=10**6))
def test_any_partial_card_with_enough_memory_is_allowed(core: int, memory: int) -> None:
    assert mgpu_violations(mgpu_pod(mgpu(core=str(core), memory=str(memory)))) == []


@given(st.integers(min_value=1, max_value=64))
def test_any_number_of_full_cards_without_memory_is_allowed(cards: int) -> None:
    assert mgpu_violations(mgpu_pod(mgpu(core=str(100 * cards)))) == []


@given(st.integers(min_value=1, max_value=16), st.integers(min_value=1, max_value=99),
       st.integers(min_value=256, max_value=81920))
def test_any_even_split_over_several_cards_is_allowed(count: int, per_card_core: int, per_card_memory: int) -> None:
    manifest = mgpu_pod(cpu_only(), mgpu(core=str(count * per_card_core), memory=str(count * per_card_memory)),
                        multiple=f"0,{count}")
    assert mgpu_violations(manifest) == []


@given(st.integers(min_value=101, max_value=10**6).filter(lambda core: core % 100 != 0))
def test_any_core_above_a_card_that_is_not_whole_cards_is_denied(core: int) -> None:
    assert violations_of(mgpu_violations(mgpu_pod(mgpu(core=str(core))))) == [(core_path(), Reason.INVALID)]


_resources = st.dictionaries(st.sampled_from([MGPU_CORE, MGPU_MEMORY, "nvidia.com/gpu", "cpu"]),
                             st.sampled_from(["0", "1", "50", "1024", "x"]), max_size=3)
_containers = st.lists(st.fixed_dictionaries({"name": st.sampled_from(["a", "b"])}, optional={
    "resources": st.fixed_dictionaries({}, optional={"limits": _resources, "requests": _resources})}), max_size=3)


@given(_containers, _containers, st.dictionaries(st.sampled_from([CONTAINER_MULTIPLE_GPU, "other"]),
                                                 st.sampled_from(["1,0", "2", "", "a"]), max_size=2))
def test_the_pod_policys_first_test_never_skips_a_pod_the_rules_would_refuse(
        containers: list[dict[str, Any]], init_containers: list[dict[str, Any]], annotations: dict[str, str]) -> None:
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": annotations},
                "spec": {"containers": containers, "initContainers": init_containers}}
    try:
        view = Pod.from_manifest(manifest)
    except InputError:
        return  # (the Pod policy stops at an unreadable pod, before the mGPU rules)
    if not may_break_mgpu_rules(view.annotations, view.requests):
        assert mgpu_violations(manifest) == []
