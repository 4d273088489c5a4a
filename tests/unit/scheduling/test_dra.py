"""The DRA queue quota with the numbers of dra-queue-quota-design.md."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from cardquota.core.scheduling.dra import DeviceAmount, claim_amounts, quota_refusal, total

GI = 2**30


def _claim(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


def test_claims_are_added_up_per_device_class_the_seeds_example() -> None:
    claims = [
        claim_amounts(_claim({"name": "a", "deviceClassName": "nvidia-h100", "count": 2})),
        claim_amounts(_claim({"name": "b", "exactly": {"deviceClassName": "hami-core-gpu", "count": 1,
                                                       "capacity": {"requests": {"cores": "30", "memory": "4Gi"}}}})),
        claim_amounts(_claim({"name": "c", "exactly": {"deviceClassName": "hami-core-gpu",
                                                       "capacity": {"requests": {"cores": "20", "memory": "2Gi"}}}})),
    ]
    aggregated = total(claims)
    assert aggregated["nvidia-h100"] == DeviceAmount(2)
    assert aggregated["hami-core-gpu"] == DeviceAmount(2, {"cores": Fraction(50),
                                                                     "memory": Fraction(6 * GI)})


SPECS = {
    "org": {"dra": {"capability": {"nvidia-h100": {"count": 8}}}},
    "team": {"parent": "org", "dra": {"capability": {"nvidia-h100": {"count": 6},
                                                     "hami-core-gpu": {"count": 80, "capacity": {"cores": "800"}}}}},
}
PARENTS = {"team": "org", "org": "root"}


def test_a_request_within_the_queue_and_its_parents_fits() -> None:
    request = {"nvidia-h100": DeviceAmount(2)}
    assert quota_refusal("team", request, {"team": {}, "org": {}}, SPECS, PARENTS) is None


def test_the_queue_itself_limits_counts_and_capacity_dimensions() -> None:
    allocated = {"team": {"nvidia-h100": DeviceAmount(5)}}
    refusal = quota_refusal("team", {"nvidia-h100": DeviceAmount(2)}, allocated, SPECS, PARENTS)
    assert refusal is not None
    assert refusal.message == ("Queue team has insufficient nvidia-h100 devices quota: total would be 7, but "
                               "capability is 6")
    cores = {"hami-core-gpu": DeviceAmount(1, {"cores": Fraction(900)})}
    refusal = quota_refusal("team", cores, {}, SPECS, PARENTS)
    assert refusal is not None
    assert "hami-core-gpu cores quota: total would be 900, but capability is 800" in refusal.message


def test_the_parent_limits_what_its_children_take_together() -> None:
    """team has room (4 of 6) but org's 8 are nearly all used by its other children."""
    allocated = {"team": {"nvidia-h100": DeviceAmount(2)}, "org": {"nvidia-h100": DeviceAmount(7)}}
    refusal = quota_refusal("team", {"nvidia-h100": DeviceAmount(2)}, allocated, SPECS, PARENTS)
    assert refusal is not None
    assert refusal.message.startswith("Queue org has insufficient nvidia-h100 devices quota (through queue team)")


def test_a_device_class_without_a_bound_is_not_limited_and_loops_end() -> None:
    assert quota_refusal("team", {"other": DeviceAmount(99)}, {}, SPECS, PARENTS) is None
    assert quota_refusal("a", {"x": DeviceAmount(1)}, {}, {}, {"a": "b", "b": "a"}) is None


def test_a_root_queue_object_bounds_everything_under_it() -> None:
    specs = {**SPECS, "root": {"dra": {"capability": {"nvidia-h100": {"count": 3}}}}}
    parents = {"team": "org", "org": "root", "root": ""}
    refusal = quota_refusal("team", {"nvidia-h100": DeviceAmount(4)}, {}, specs, parents)
    assert refusal is not None
    assert refusal.message.startswith("Queue root has insufficient nvidia-h100 devices quota (through queue team)")
    assert quota_refusal("team", {"nvidia-h100": DeviceAmount(4)}, {}, SPECS, PARENTS) is None  # no root
