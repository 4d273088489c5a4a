"""bench/worst_case.py keeps working (figures are for people: no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_worst_case_bench_reports_time_memory_warnings_and_loop_stall() -> None:
    result = subprocess.run([sys.executable, "bench/worst_case.py", "--repeats", "1", "--case",
                             "podgroup-41-alternatives", "--case", "job-depth-10000"],
                            cwd=REPO, capture_output=True, text=True, check=True, timeout=300)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("2 worst cases, 1 runs each, card catalog of 322 types")
    assert lines[1].startswith("1. one review")
    assert lines[2].startswith("podgroup-41-alternatives")
    assert "allowed    2 warnings" in lines[2]
    assert lines[3].startswith("job-depth-10000")
    assert "ratio" in lines[3]
    assert "peak" in lines[3]
    assert lines[4].startswith("2. event-loop stall")
    assert "stalled at most" in lines[5]
