"""Card alternatives read one way by every rule, and job-mode enqueue counting every reservation that may land on a
type (capacity-card-design.md, "Multi-Card Request Processing", "Job Mode").

The seed's job mode (``CheckSingleScalarResource`` with ``CheckModeJob`` in
pkg/scheduler/plugins/capacity-card/capacity_card_utils.go, volcano-sh/volcano PR #4706 at 61a5f00) splits a key on
``|`` and adds up ``toBeUsed`` and the capability of each part: a part named twice is added twice on both sides
(``2·used + request ≤ 2·quota``), and reservations kept under another ``A|B`` key are not part of ``toBeUsed[A]``.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cardquota.core.quota import (
    alternative_set,
    canonical_key,
    card_alternatives,
    card_request,
    quota_allows,
    reserved_on,
)
from cardquota.core.scheduling.capacity_card import INSUFFICIENT_SCALAR, job_enqueue_refusal
from cardquota.core.violations import Reason

REQUEST = "volcano.sh/card.request"


@pytest.mark.parametrize(
    ("key", "alternatives"),
    [
        ("A", ("A",)),
        ("A|B", ("A", "B")),
        ("B|A", ("B", "A")),
        ("A|A", ("A",)),
        ("A| A", ("A",)),
        (" A |B| A", ("A", "B")),
        ("A||B", ("A", "B")),
    ],
)
def test_alternatives_are_trimmed_and_distinct(key: str, alternatives: tuple[str, ...]) -> None:
    assert card_alternatives(key) == alternatives
    assert canonical_key(key) == "|".join(alternatives)
    assert alternative_set(key) == frozenset(alternatives)


def test_a_type_named_twice_never_doubles_the_ceiling() -> None:
    assert quota_allows("A100|A100", {"A100": 10}) == 10
    assert quota_allows("A100| A100", {"A100": 10}) == 10
    # stored anyway: {"A100|A100": 20} in a queue allowing 10 is refused (it was admitted: 20 <= 2*10)
    refusal = job_enqueue_refusal("q", {"A100|A100": 20}, {"A100": 10}, {}, {})
    assert refusal is not None
    assert refusal.reason == INSUFFICIENT_SCALAR
    # 2*used + request <= 2*quota let a job in with twice the room left: 6 used, 8 more is 14 > 10
    assert job_enqueue_refusal("q", {"A100|A100": 8}, {"A100": 10}, {"A100": 6}, {}) is not None
    assert job_enqueue_refusal("q", {"A100|A100": 4}, {"A100": 10}, {"A100": 6}, {}) is None


@pytest.mark.parametrize(
    ("text", "values", "reason"),
    [
        ('{"A100|A100": 20}', {"A100": 20}, Reason.DUPLICATE),
        ('{"A| A": 2}', {"A": 2}, Reason.INVALID),
        ('{"A| B": 2, "A|B": 1}', {"A|B": 3}, Reason.INVALID),
        ('{"A |B": 2}', {"A|B": 2}, Reason.INVALID),
    ],
)
def test_a_request_key_written_badly_is_refused_yet_counted_once(
        text: str, values: dict[str, int], reason: Reason) -> None:
    parsed = card_request({REQUEST: text})
    assert dict(parsed.values) == values
    assert [(violation.path, violation.reason) for violation in parsed.violations] == [
        (f'metadata.annotations["{REQUEST}"]', reason)]
    assert "\n" not in parsed.violations[0].message


def test_a_well_written_request_has_no_violation() -> None:
    parsed = card_request({REQUEST: '{"A|B": 3, "C": 1}'})
    assert parsed.ok
    assert dict(parsed.values) == {"A|B": 3, "C": 1}


@pytest.mark.parametrize(
    ("request_", "allowed"),
    [
        ({"A": 1}, False),
        ({"B": 1}, False),
        ({"A|B": 1}, False),
        ({"B|A": 1}, False),
        ({"A|C": 2}, True),  # fits on C
        ({"A|C": 3}, False),
        ({"C": 2}, True),
    ],
)
def test_an_inqueue_a_or_b_reservation_counts_against_every_key_it_may_land_on(
        request_: dict[str, int], allowed: bool) -> None:
    """Quota A=5, B=3, C=2: after {"A|B": 8} is reserved, nothing more may land on A or B (the seed's key-by-key
    check let {"A": 1} and {"B|A": 1} in: A's own total 0 + 1 <= 5)."""
    capability = {"A": 5, "B": 3, "C": 2}
    refusal = job_enqueue_refusal("q", request_, capability, {}, {"A|B": 8})
    assert (refusal is None) is allowed


def test_the_seed_scenario_still_enqueues() -> None:
    """A|B job of 8 with A=5, B=3, then a B|A job of 0 room: the first fits exactly."""
    assert job_enqueue_refusal("q", {"A|B": 8}, {"A": 5, "B": 3}, {}, {}) is None
    assert job_enqueue_refusal("q", {"A|B": 4}, {"A": 5, "B": 3}, {"A": 2, "B": 1}, {"B": 1}) is None
    assert job_enqueue_refusal("q", {"A|B": 5}, {"A": 5, "B": 3}, {"A": 2, "B": 1}, {"B": 1}) is not None


def test_reserved_on_counts_keys_sharing_a_type() -> None:
    amounts = {"A|B": 8, "B|A": 1, "C": 2, "A": 1, "C|D": 4}
    assert reserved_on(frozenset({"A"}), amounts) == 10
    assert reserved_on(frozenset({"C"}), amounts) == 6
    assert reserved_on(frozenset({"E"}), amounts) == 0


TYPES = ("A", "B", "C")
keys_st = st.lists(st.sampled_from(TYPES), min_size=1, max_size=3).map("|".join)


def _hall_holds(reservations: list[tuple[str, int]], quota: dict[str, int]) -> bool:
    """Whether the reservations can all be placed within the quota of each type: for every set T of types, the
    reservations that can only land in T fit T's quota together (Hall's condition for the bipartite placement)."""
    for size in range(1, len(TYPES) + 1):
        for subset in itertools.combinations(TYPES, size):
            inside = frozenset(subset)
            wanted = sum(amount for key, amount in reservations if alternative_set(key) <= inside)
            if wanted > sum(quota[card] for card in inside):
                return False
    return True


@settings(max_examples=300, deadline=None)
@given(quota=st.fixed_dictionaries({card: st.integers(0, 6) for card in TYPES}),
       jobs=st.lists(st.dictionaries(keys_st, st.integers(1, 6), min_size=1, max_size=2), max_size=8))
def test_reservations_admitted_one_by_one_never_promise_a_type_beyond_its_quota(
        quota: dict[str, int], jobs: list[dict[str, int]]) -> None:
    """Whatever jobs arrive, in any order, those job mode enqueues can all be placed within the quota, and a job is
    refused only when it could not be."""
    inqueue: dict[str, int] = {}
    admitted: list[tuple[str, int]] = []
    for job in jobs:
        request = dict(card_request({REQUEST: _json(job)}).values)
        admitted_now = job_enqueue_refusal("q", request, quota, {}, inqueue) is None
        # exact: refused only when the job's cards cannot be placed along with what is already reserved
        assert admitted_now is _hall_holds([*admitted, *request.items()], quota)
        if admitted_now:
            for key, amount in request.items():
                inqueue[key] = inqueue.get(key, 0) + amount
                admitted.append((key, amount))
    assert _hall_holds(admitted, quota)


def _json(amounts: dict[str, int]) -> str:
    return "{" + ", ".join(f'"{key}": {amount}' for key, amount in amounts.items()) + "}"
