"""Which ``resource.k8s.io`` version claims are read through, and that a claim reads the same in each version's shape.

Kubernetes (kubernetes/kubernetes, tag v1.34.0): ``staging/src/k8s.io/api/resource/v1/types.go`` and
``staging/src/k8s.io/api/resource/v1beta2/types.go`` put a plain request under ``DeviceRequest.Exactly``
(``ExactDeviceRequest``: ``deviceClassName``, ``count``, ``capacity``); ``staging/src/k8s.io/api/resource/v1beta1/
types.go`` has ``deviceClassName``, ``count`` and ``capacity`` on ``DeviceRequest`` itself. v1 is served by default
from 1.34 on, v1beta1 and v1beta2 only when enabled."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cardquota.core.scheduling.dra import claim_amounts
from cardquota.kube import DRA_VERSIONS, preferred_dra_version


@pytest.mark.parametrize(("served", "chosen"), [
    (["v1", "v1beta2", "v1beta1"], "v1"),  # 1.34 with the betas enabled
    (["v1beta1", "v1"], "v1"),  # discovery's order does not matter
    (["v1beta2", "v1beta1"], "v1beta2"),  # 1.33
    (["v1beta1", "v1alpha3"], "v1beta1"),  # 1.32
    (["v1alpha3"], None),  # 1.31: an alpha we do not read
    ([], None),  # the group is not served
])
def test_the_newest_served_version_is_chosen(served: list[str], chosen: str | None) -> None:
    assert preferred_dra_version(served) == chosen


@given(st.lists(st.sampled_from([*DRA_VERSIONS, "v1alpha3", "v2alpha1", ""])))
def test_the_choice_is_served_and_no_preferred_version_is_passed_over(served: list[str]) -> None:
    chosen = preferred_dra_version(served)
    if chosen is None:
        assert not set(served) & set(DRA_VERSIONS)
    else:
        assert chosen in served
        assert not set(served) & set(DRA_VERSIONS[:DRA_VERSIONS.index(chosen)])


REQUEST = st.fixed_dictionaries({
    "deviceClassName": st.sampled_from(["gpu.example.com", "hami-core-gpu", "npu.example.com"]),
    "count": st.integers(1, 64),
}, optional={"capacity": st.fixed_dictionaries({"requests": st.fixed_dictionaries({
    "memory": st.sampled_from(["1Gi", "512Mi", "80Gi"])})})})


def _v1beta1(requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": f"r{index}", **request} for index, request in enumerate(requests)]}}


def _v1(requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": f"r{index}", "exactly": request}
                                     for index, request in enumerate(requests)]}}


@given(st.lists(REQUEST, max_size=5))
def test_a_claim_counts_the_same_in_the_v1beta1_and_the_v1_shape(requests: list[dict[str, Any]]) -> None:
    flat, exact = claim_amounts(_v1beta1(requests)), claim_amounts(_v1(requests))
    assert flat == exact
    for device_class in {request["deviceClassName"] for request in requests}:
        assert exact[device_class].count == sum(request["count"] for request in requests
                                                if request["deviceClassName"] == device_class)


def test_both_shapes_read_count_and_capacity() -> None:
    request = {"deviceClassName": "gpu.example.com", "count": 2, "capacity": {"requests": {"memory": "1Gi"}}}
    for spec in (_v1beta1([request]), _v1([request])):
        amount = claim_amounts(spec)["gpu.example.com"]
        assert amount.count == 2
        assert amount.capacity == {"memory": Fraction(2 * 2**30)}


def test_the_version_is_discovered_again_before_each_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster upgrade can stop serving the version in use: each full list (at start, after a 404) asks discovery
    again and lists through what it finds; none served is a 404 for the reflector, and the metric says so."""
    from cardquota.kube import ListProgress, NotFound
    from cardquota.operator import reflector

    served: list[str | None] = [None]
    listed: list[tuple[str, str]] = []
    monkeypatch.setattr(reflector, "served_dra_version", lambda api: served[0])

    def list_pages(api: object, path: str, api_version: str, kind: str, progress: object) -> Iterator[object]:
        listed.append((path, api_version))
        return iter(())

    monkeypatch.setattr(reflector, "list_pages", list_pages)
    dra = reflector.DraVersion(api=None, kind="ResourceClaim")  # type: ignore[arg-type]
    with pytest.raises(NotFound, match="are not enforced"):
        list(dra.pages("resourceclaims", ListProgress()))
    assert reflector.DRA_UNREADABLE.labels("ResourceClaim")._value.get() == 1
    for version in ("v1beta1", "v1"):
        served[0] = version
        assert list(dra.pages("resourceclaims", ListProgress())) == []
        assert listed[-1] == (f"/apis/resource.k8s.io/{version}/resourceclaims", f"resource.k8s.io/{version}")
        assert reflector.DRA_UNREADABLE.labels("ResourceClaim")._value.get() == 0
    assert dra.version == "v1"


def test_a_list_resumed_through_another_version_starts_from_its_first_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """A continue token is only good for the version it was issued through: when the served version changed while a
    list was under way (a page failed past its retries, then the cluster was upgraded), it lists from page 1."""
    from cardquota.kube import ListProgress
    from cardquota.operator import reflector

    served = ["v1beta1"]
    tokens: list[tuple[str, str]] = []
    monkeypatch.setattr(reflector, "served_dra_version", lambda api: served[0])

    def list_pages(api: object, path: str, api_version: str, kind: str, progress: ListProgress) -> Iterator[object]:
        tokens.append((api_version, progress.token))
        return iter(())

    monkeypatch.setattr(reflector, "list_pages", list_pages)
    dra = reflector.DraVersion(api=None, kind="ResourceClaim")  # type: ignore[arg-type]
    progress = ListProgress(token="page-3")
    list(dra.pages("resourceclaims", progress))  # the first discovery: no token can be from another version
    progress.token = "page-3"
    list(dra.pages("resourceclaims", progress))  # the same version: resumed
    served[0] = "v1"
    list(dra.pages("resourceclaims", progress))
    assert tokens == [("resource.k8s.io/v1beta1", ""), ("resource.k8s.io/v1beta1", "page-3"),
                      ("resource.k8s.io/v1", "")]
