"""Warnings within the API server's budget (issue 17, item 3), enforced in one place — every Verdict: each warning
on one line and at most 256 runes, 4,096 in all (k8s.io/apiserver/pkg/endpoints/filters/warning.go:
truncateItemRunes, truncateAtTotalRunes), repeats dropped, the first ones kept, and a last one counting the rest."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cardquota.core.verdict import (
    MAX_WARNING_RUNES,
    MAX_WARNINGS_RUNES,
    Verdict,
    allow,
    decide,
    deny,
    within_budget,
)
from cardquota.core.violations import Violation

warnings_lists = st.lists(st.text(min_size=0, max_size=400) | st.sampled_from(["w" * 256, "x" * 300, "dup"]),
                          max_size=60)


@given(warnings_lists)
def test_the_api_server_keeps_every_warning_whole(warnings: list[str]) -> None:
    kept = within_budget(warnings)
    assert all(0 < len(warning) <= MAX_WARNING_RUNES for warning in kept)
    assert sum(map(len, kept)) <= MAX_WARNINGS_RUNES
    assert len(set(kept)) == len(kept)
    assert all(warning.isprintable() for warning in kept)
    assert within_budget(kept) == kept  # idempotent: a verdict rebuilt from a verdict keeps its warnings


@given(warnings_lists)
def test_the_first_warnings_are_kept_in_order_and_the_rest_counted(warnings: list[str]) -> None:
    kept = within_budget(warnings)
    each = [within_budget([warning]) for warning in warnings]  # each alone: on one line and cut
    distinct = list(dict.fromkeys(alone[0] for alone in each if alone))
    if sum(map(len, distinct)) <= MAX_WARNINGS_RUNES:
        assert list(kept) == distinct
        return
    *shown, last = kept
    assert last == (f"{len(distinct) - len(shown)} more warning{'s' if len(distinct) - len(shown) > 1 else ''} "
                    f"left out: the API server shows at most 4,096 characters of warnings")
    assert shown == [warning for warning in distinct if warning in shown]  # a subsequence, in order
    assert shown[0] == distinct[0] or len(distinct[0]) > MAX_WARNINGS_RUNES - 100


def test_long_warnings_are_cut_visibly_and_multi_line_ones_escaped() -> None:
    assert within_budget(["x" * 1000]) == ("x" * 255 + "…",)
    assert within_budget(["a\nb"]) == ("a\\nb",)
    assert within_budget(["", "a", "a"]) == ("a",)


def test_eighty_warnings_of_69_runes_keep_57_and_count_23() -> None:
    """The issue's queue of 80 unknown types sent 80 warnings (5,520 runes): the API server would keep 59."""
    warnings = [f"card type NVIDIA-UNKNOWN-{index:05d} is not offered by any node (no match)"[:69]
                for index in range(80)]
    kept = within_budget(warnings)
    assert kept[:-1] == tuple(warnings[:len(kept) - 1])
    assert kept[-1] == f"{81 - len(kept)} more warnings left out: the API server shows at most 4,096 characters of " \
                       "warnings"
    assert sum(map(len, kept)) <= MAX_WARNINGS_RUNES


def test_every_way_of_building_a_verdict_is_within_budget() -> None:
    many = [f"warning {index} " + "y" * 200 for index in range(100)]
    for verdict in (allow(many), deny([Violation("p", "m")], many), decide([], many),
                    Verdict(True, warnings=tuple(many))):
        assert sum(map(len, verdict.warnings)) <= MAX_WARNINGS_RUNES
        assert verdict.warnings[-1].endswith("left out: the API server shows at most 4,096 characters of warnings")
