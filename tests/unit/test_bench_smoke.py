"""The benchmark script keeps working (no timing is asserted: figures are for people, not for CI)."""

from __future__ import annotations

import json
import os
import re
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


def test_webhook_bench_runs_against_both_servers() -> None:
    result = subprocess.run([sys.executable, "bench/webhook.py", "--clients", "4", "--requests", "3", "--rounds", "2"],
                            cwd=REPO, capture_output=True, text=True, check=True, timeout=240)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("2 rounds of 12 AdmissionReview requests per server and body set, 4 concurrent clients")
    build = "compiled (mypyc)" if os.environ.get("CARDQUOTA_EXPECT_COMPILED") == "1" else "interpreted"
    assert lines[0].endswith(f"the core is {build}")  # make test-compiled runs this suite against the compiled core
    for first, bodies in ((1, "small bodies"), (6, "realistic bodies")):
        assert lines[first].startswith(bodies)
        assert lines[first + 1].startswith("  no-op aiohttp server")
        assert lines[first + 2].startswith("  cardquota webhooks")
        assert lines[first + 3].startswith("  p50 ratio")
        assert lines[first + 4].startswith("  per round (2): p50 ratio median")
    assert len(lines) == 11


def test_ledger_bench_reports_both_ratios() -> None:
    result = subprocess.run([sys.executable, "bench/ledger.py", "--pods", "500", "--nodes", "20", "--repeats", "1"],
                            cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("snapshot: 20 nodes, 500 pods")
    assert lines[1].startswith("1. full build:")
    assert lines[2].startswith("2. one pod event:")


def test_gate_bench_reports_its_ratio() -> None:
    result = subprocess.run([sys.executable, "bench/gate.py", "--pods", "400", "--nodes", "20", "--gangs", "4",
                             "--repeats", "1"], cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    lines = result.stdout.splitlines()
    assert lines[0] == "gate round, 32 gated pods in 4 gangs of 8, 20 queues, 20 nodes"
    assert lines[1].startswith("  with 400 other pods: median ")
    assert lines[3].startswith("  ratio ")


def test_preemption_bench_reports_both_cases_and_their_ratios() -> None:
    result = subprocess.run([sys.executable, "bench/preemption.py", "--small", "20", "--large", "60", "--repeats", "1"],
                            cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("choosing preemption victims for a gang of 4 x 8 cards")
    assert lines[1].startswith("  evicts, 20 admitted: min ")
    assert lines[1].endswith("(4 victims)")
    assert lines[3].startswith("  evicts: ratio ")
    assert lines[5].endswith("(NoSetFits)")
    assert lines[6].startswith("  no set fits: ratio ")


def test_gate_dra_bench_lets_every_pod_through_and_reports_its_ratio() -> None:
    result = subprocess.run([sys.executable, "bench/gate_dra.py", "--pods", "400", "--nodes", "20", "--gangs", "2",
                             "--holders", "50", "--repeats", "1"], cwd=REPO, capture_output=True, text=True,
                            check=True, timeout=120)
    lines = result.stdout.splitlines()
    assert lines[1].endswith("; 16 let through)")
    assert lines[2].endswith("(16 let through)")
    assert lines[3].startswith("  ratio ")


def test_gate_writes_bench_lets_every_pod_through_and_reports_its_ratio() -> None:
    result = subprocess.run([sys.executable, "bench/gate_writes.py", "--pods", "400", "--nodes", "20", "--gangs",
                             "2", "--runs", "1"], cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    lines = result.stdout.splitlines()
    assert json.loads(lines[0]) == {"pods_let_through": 16, "cluster_pods": 400, "nodes": 20}
    assert lines[1].startswith("gate round (decide + 16 lifts): CPU ")
    assert lines[3].startswith("ratio per run ")


def test_ratcheting_bench_reports_every_case() -> None:
    result = subprocess.run([sys.executable, "bench/ratcheting.py", "--tasks", "8", "--containers", "8", "--repeats",
                             "1"], cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("UPDATE carrying every violation vs CREATE of the same object")
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "queue, parent gone", "podgroup, queue gone", "realistic pod, queue gone", "job, 8 tasks with mGPU violations",
        "pod, 8 containers with mGPU violations"]
    assert all("carried warnings" in line for line in lines[1:])


def test_extender_bench_reports_latency_and_simulate_figures() -> None:
    result = subprocess.run([sys.executable, "bench/extender.py", "--nodes", "30", "--calls", "2", "--sim-pods", "50",
                             "--sim-nodes", "10"], cwd=REPO, capture_output=True, text=True, check=True, timeout=180)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("1. predicate + prioritize: 30-node session, 16 concurrent clients")
    assert "no-op aiohttp endpoint" in lines[1]
    assert "cardquota extender" in lines[2]
    assert lines[3].strip().startswith("p99 ratio")
    assert lines[4].startswith("2. simulate: 50 pods on 10 nodes in ")


def test_scale_bench_smoke_reports_every_figure() -> None:
    result = subprocess.run([sys.executable, "bench/scale.py", "--smoke"], cwd=REPO, capture_output=True, text=True,
                            check=True, timeout=300)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("scale: 200 pods")
    assert lines[1].startswith("  run 1: synced in ")
    assert "0 admission requests failed" in lines[1]
    assert [line.split()[0] for line in lines[2:7]] == ["start-up", "memory:", "admission", "event-loop", "storm:"]
    applied = re.search(r"\((\d+) of (\d+)\)$", lines[6])
    assert applied is not None
    assert applied[1] == applied[2]  # every storm event reached the cache
    assert lines[7].startswith("    slowest admissions until synced: ")
    assert lines[8].startswith("    where the loop stalled")
    assert lines[11].startswith("    API writes during the storm: ")
    assert lines[12].startswith("summary 200 pods over 1 runs")
    assert len(lines) == 19


def test_tls_start_bench_reports_start_and_handshake_figures() -> None:
    result = subprocess.run([sys.executable, "bench/tls_start.py", "--runs", "1", "--handshakes", "5", "--rounds", "1"],
                            cwd=REPO, capture_output=True, text=True, check=True, timeout=240)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("start to a served certificate, 1 runs")
    assert re.match(r"  --cert-dir writable \(baseline\): [0-9.]+-[0-9.]+ s", lines[1])
    assert lines[2].startswith(("  --cert-dir read-only (", "read-only folder: not possible here"))
    assert "FAILED" not in result.stdout
    assert lines[-2].startswith("handshakes, 1 rounds of 5: plain context (baseline)")
    assert lines[-1].startswith("loading a pair into a fresh context: ")


def test_bounded_servers_bench_reports_every_figure_for_both_servers() -> None:
    result = subprocess.run([sys.executable, "bench/bounded.py", "--connections", "20", "--runs", "1"], cwd=REPO,
                            capture_output=True, text=True, check=True, timeout=300)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("1 runs per server, 20 idle TLS connections")
    assert [line.strip().split(".")[0] for line in lines[1:]] == ["aiohttp defaults:", "1", "2", "cardquota:", "1",
                                                                  "2", "3"]
    assert "answered 400" in lines[6]


def test_full_list_bench_reports_both_ratios() -> None:
    result = subprocess.run([sys.executable, "bench/full_list.py", "--pods", "50", "--rounds", "1"], cwd=REPO,
                            capture_output=True, text=True, check=True, timeout=120)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("50 realistic pods")
    assert lines[1].startswith("round 1: longest loop stall")
    assert lines[2].startswith("stall ratio (parts / json.loads):")


def test_fair_serving_bench_reports_every_figure_against_the_no_attack_baseline() -> None:
    result = subprocess.run([sys.executable, "bench/fair_serving.py", "--runs", "1", "--attack-seconds", "4",
                             "--scenarios", "no attack", "slow-large-bodies", "--json"], cwd=REPO,
                            capture_output=True, text=True, check=True, timeout=120)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("1 runs per scenario, attacks of 4 s from 127.0.0.2")
    assert "(trusted)" in lines[0]
    assert lines[1].split()[:3] == ["scenario", "reviews", "refused"]
    assert [line.split("  ")[0] for line in lines[2:4]] == ["no attack", "slow-large-bodies"]
    runs = json.loads("\n".join(lines[4:]))
    assert [run["reviews"] > 0 and run["idle_mib"] > 0 for run in runs["slow-large-bodies"]] == [True]
