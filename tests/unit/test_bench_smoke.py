"""The benchmark script keeps working (no timing is asserted: figures are for people, not for CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_runs_and_reports_every_figure() -> None:
    result = subprocess.run([sys.executable, "bench/run.py", "--pods", "200", "--repeats", "1"], cwd=REPO,
                            capture_output=True, text=True, check=True, timeout=120)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("cluster: 12 nodes, 200 pods")
    assert [line.split(".")[0] for line in lines[1:]] == ["1", "2", "3", "4"]
