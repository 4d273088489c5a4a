"""Effective requests are computed once per container resource shape (objects._EFFECTIVE) and shared: the shared
answer is always the one computing afresh gives, and whatever cannot be keyed is computed, and refused, as ever."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cardquota.core import objects
from cardquota.core.errors import InputError
from cardquota.core.objects import effective_requests

QUANTITIES = st.sampled_from(["1", "2", "500m", "250m", "1Gi", "32Gi", "0", "1.5", "3e2", 7])  # 7: not a string
RESOURCES = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "huawei.com/Ascend910B"])
AMOUNTS = st.dictionaries(RESOURCES, QUANTITIES, max_size=3)


@st.composite
def containers(draw: st.DrawFn, init: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c"}
    shape = draw(st.sampled_from(["none", "empty", "sections"]))
    if shape == "empty":
        container["resources"] = {}
    elif shape == "sections":
        container["resources"] = {section: draw(AMOUNTS) for section in ("limits", "requests")
                                  if draw(st.booleans())}
    if init and draw(st.booleans()):
        container["restartPolicy"] = "Always"
    return container


SPECS = st.fixed_dictionaries(
    {"containers": st.lists(containers(init=False), min_size=1, max_size=3)},
    optional={"initContainers": st.lists(containers(init=True), max_size=2),
              "overhead": st.dictionaries(RESOURCES, st.sampled_from(["100m", "1Gi"]), max_size=2)})


def fresh(spec: dict[str, Any]) -> dict[str, Any]:
    """The effective requests computed afresh, without the shared table."""
    return objects._effective_requests(objects._sequence(spec.get("containers"), "spec.containers"),
                                       objects._sequence(spec.get("initContainers"), "spec.initContainers"),
                                       spec.get("overhead"), "spec")


@given(st.lists(SPECS, min_size=1, max_size=6))
def test_the_shared_answer_is_always_the_fresh_one(specs: list[dict[str, Any]]) -> None:
    for spec in [*specs, *specs]:  # the second time round, from the table where a spec could be keyed
        assert effective_requests(spec, "spec") == fresh(spec)


def test_pods_asking_the_same_share_one_answer_and_a_sidecar_is_told_apart() -> None:
    def spec(policy: str | None = None) -> dict[str, Any]:
        init = {"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        if policy is not None:
            init["restartPolicy"] = policy
        return {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                "initContainers": [init]}

    assert effective_requests(spec(), "spec") is effective_requests(spec(), "spec")
    assert effective_requests(spec(), "spec")["nvidia.com/gpu"] == 1  # an init container runs alone
    assert effective_requests(spec("Always"), "spec")["nvidia.com/gpu"] == 2  # a sidecar runs beside


def test_a_spec_that_cannot_be_read_is_refused_even_after_a_readable_one_like_it() -> None:
    good = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    effective_requests(good, "spec")
    bad = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "lots"}}}]}
    with pytest.raises(InputError) as caught:
        effective_requests(bad, "spec")
    assert caught.value.where == 'spec.containers[0].resources.limits["nvidia.com/gpu"]'
    for unkeyable in ([{"name": "c", "resources": {"limits": {"nvidia.com/gpu": ["1"]}}}], [None], ["c"]):
        with pytest.raises(InputError):
            effective_requests({"containers": unkeyable}, "spec")


def test_the_table_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(objects, "_EFFECTIVE", {})
    for index in range(objects.MAX_EFFECTIVE + 10):
        effective_requests({"containers": [{"name": "c", "resources": {"requests": {"cpu": f"{index}m"}}}]}, "spec")
    assert 0 < len(objects._EFFECTIVE) <= objects.MAX_EFFECTIVE


def test_a_pod_naming_more_than_a_real_pod_does_is_computed_but_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(objects, "_EFFECTIVE", {})
    names = [f"example.com/device-{index}" for index in range(objects.MAX_KEYED_ENTRIES + 1)]
    spec = {"containers": [{"name": "c", "resources": {"limits": dict.fromkeys(names, "1")}}]}
    assert effective_requests(spec, "spec") == fresh(spec)
    assert objects._EFFECTIVE == {}
    spec["containers"][0]["resources"]["limits"].pop(names[0])  # at the bound: kept
    assert effective_requests(spec, "spec") is effective_requests(spec, "spec")
    assert len(objects._EFFECTIVE) == 1


def test_the_bound_on_kept_pods_counts_every_container(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two containers and an init container, each under the bound, over it together: computed, not kept."""
    monkeypatch.setattr(objects, "_EFFECTIVE", {})
    third = objects.MAX_KEYED_ENTRIES // 3 + 1
    def container(name: str) -> dict[str, object]:
        return {"name": name, "resources": {"limits": {f"example.com/{name}-{index}": "1" for index in range(third)}}}
    spec = {"containers": [container("a"), container("b")], "initContainers": [container("i")]}
    assert effective_requests(spec, "spec") == fresh(spec)
    assert objects._EFFECTIVE == {}
    spec["initContainers"] = []  # two thirds of the bound: kept
    assert effective_requests(spec, "spec") is effective_requests(spec, "spec")
    assert len(objects._EFFECTIVE) == 1
