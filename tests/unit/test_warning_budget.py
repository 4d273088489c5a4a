"""Warnings within the API server's budget (issue 17, item 3), enforced in one place — every Verdict: each warning
on one line, repeats dropped; whole while they fit the request's 4,096 runes together, else each cut to 256 (as the
API server would) and 4,096 in all, the first ones kept and a last one counting the rest.

:class:`Recorder` is what a client sees of a request's warnings: the API server's recorder (``recorder.AddWarning``
in k8s.io/apiserver/pkg/endpoints/filters/warning.go, Kubernetes 1.32) — each warning written whole, repeats
dropped, while the request's total is within 4,096 runes (``truncateAtTotalRunes``); the first that would pass it
makes every warning, those already written included, cut to 256 runes (``truncateItemRunes``), and once the total
reaches 4,096 the rest are dropped. The admission dispatchers add every webhook's warnings to it (``AddWarning`` in
k8s.io/apiserver/pkg/admission/plugin/webhook/validating/dispatcher.go), after the API server's own."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cardquota.core.errors import one_line
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

warnings_lists = st.lists(st.text(min_size=0, max_size=400)
                          | st.sampled_from(["w" * 256, "x" * 300, "dup", "z" * 1500, "long\n" * 700]),
                          max_size=60)


class Recorder:
    """The API server's warning recorder for one request (see the module docstring): :attr:`shown` is what the
    client gets, in order."""

    def __init__(self) -> None:
        self.recorded: list[str] = []
        self.shown: list[str] = []
        self.written = 0
        self.truncating = False

    def add(self, text: str) -> None:
        if not text or (self.truncating and self.written >= MAX_WARNINGS_RUNES) or text in self.recorded:
            return
        self.recorded.append(text)
        if self.truncating:
            text = text[:MAX_WARNING_RUNES]
        if self.truncating or self.written + len(text) <= MAX_WARNINGS_RUNES:
            self.written += len(text)
            self.shown.append(text)
            return
        self.truncating = True
        self.shown = [recorded[:MAX_WARNING_RUNES] for recorded in self.recorded]
        self.written = sum(map(len, self.shown))

    @classmethod
    def showing(cls, *requests_warnings: tuple[str, ...] | list[str]) -> list[str]:
        recorder = cls()
        for warnings in requests_warnings:
            for warning in warnings:
                recorder.add(warning)
        return recorder.shown


def cut(text: str) -> str:
    """A warning alone, when the warnings it is among do not fit together: on one line, cut visibly to 256."""
    line = one_line(text)
    return line if len(line) <= MAX_WARNING_RUNES else line[: MAX_WARNING_RUNES - 1] + "…"


@given(warnings_lists)
def test_the_api_server_shows_every_warning_as_sent(warnings: list[str]) -> None:
    """Alone in their request, the warnings a verdict sends are shown as sent: none cut, none dropped."""
    kept = within_budget(warnings)
    assert Recorder.showing(kept) == list(kept)
    assert sum(map(len, kept)) <= MAX_WARNINGS_RUNES
    assert len(set(kept)) == len(kept)
    assert all(warning and warning.isprintable() for warning in kept)
    assert within_budget(kept) == kept  # idempotent: a verdict rebuilt from a verdict keeps its warnings
    lines = list(dict.fromkeys(one_line(warning) for warning in warnings if warning))
    if sum(map(len, lines)) <= MAX_WARNINGS_RUNES:
        assert list(kept) == lines  # they fit together: all whole, however long one is
    else:
        assert all(len(warning) <= MAX_WARNING_RUNES for warning in kept)


@given(warnings_lists)
def test_the_first_warnings_are_kept_in_order_and_the_rest_counted(warnings: list[str]) -> None:
    kept = within_budget(warnings)
    if sum(map(len, dict.fromkeys(one_line(warning) for warning in warnings if warning))) <= MAX_WARNINGS_RUNES:
        return  # all whole (above)
    distinct = list(dict.fromkeys(cut(warning) for warning in warnings if warning))
    if sum(map(len, distinct)) <= MAX_WARNINGS_RUNES:
        assert list(kept) == distinct
        return
    *shown, last = kept
    assert last == (f"{len(distinct) - len(shown)} more warning{'s' if len(distinct) - len(shown) > 1 else ''} "
                    f"left out: the API server shows at most 4,096 characters of warnings")
    assert shown == [warning for warning in distinct if warning in shown]  # a subsequence, in order
    assert shown[0] == distinct[0] or len(distinct[0]) > MAX_WARNINGS_RUNES - 100


def test_a_long_warning_is_kept_whole_while_the_total_allows() -> None:
    """The API server cuts a warning to 256 runes only once the request's warnings pass 4,096 in all: a single
    warning of 1,000 runes is shown whole, and so it is sent (it was cut to 256 before)."""
    long = "queue team-a: " + "x" * 986
    assert within_budget([long]) == (long,)
    assert Recorder.showing([long]) == [long]
    assert within_budget([long, long + "y", "short"]) == (long, long + "y", "short")
    four = [f"{index} " + "z" * 1021 for index in range(4)]  # 4,092 runes: whole
    assert within_budget(four) == tuple(four)


def test_warnings_that_do_not_fit_together_are_cut_visibly_as_the_api_server_would_cut_them() -> None:
    """Past 4,096 runes the API server cuts each warning to 256, with no mark: cut here first, with "…"."""
    assert within_budget(["x" * 5000]) == ("x" * 255 + "…",)
    assert Recorder.showing(["x" * 5000]) == ["x" * 256]
    five = [f"{index} " + "z" * 1021 for index in range(5)]
    assert within_budget(five) == tuple(cut(warning) for warning in five)
    assert [shown[:255] for shown in Recorder.showing(five)] == [sent[:255] for sent in within_budget(five)]


def test_the_budget_is_the_requests() -> None:
    """Another webhook's (or the API server's own) warnings share the 4,096 runes: ours, whole, then cut by the API
    server to their first 256 runes — what was sent before whole warnings were kept."""
    ours = within_budget(["a" * 3000, "b" * 1000])
    assert ours == ("a" * 3000, "b" * 1000)
    assert Recorder.showing(["unknown field \"spec.foo\"" + " " * 100], ours) == [
        "unknown field \"spec.foo\"" + " " * 100, "a" * 256, "b" * 256]


def test_multi_line_warnings_are_escaped_and_repeats_dropped() -> None:
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
