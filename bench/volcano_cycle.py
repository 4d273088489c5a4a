"""Volcano's own scheduling cycle on a real control plane at cluster size, without and with cardquota's extender
stanza: the ratio is what the stanza costs Volcano (issue 38's scale figure; issue 39's targets are measured against
it).

    make bench-control-plane                       # 1,000 nodes x 20 pods, 104 pending card tasks (13 gangs of 8)
    make bench-control-plane BENCH_ARGS="--nodes 200 --gangs 4"

Runs inside ``make e2e-local``'s control plane (tests/e2e/local/run.py): kwok nodes with 8 A100 each, every node
already running ``--pods`` CPU pods (bound at creation, Running through kwok; ~2 KB each, as a Deployment's pods
are), and cardquota installed as the README says (``crd install``, overlays/dev-extender). Then, once with Volcano's
own scheduler configuration (its installer's) and once with cardquota's stanza merged in
(``kubectl cardquota scheduler-conf``), the same ``--gangs`` Volcano Jobs of 8 one-A100 tasks are created in a queue
whose card quota holds them all, and measured until every task is bound (or ``--timeout``):

* the time from the jobs' creation until the last task is bound;
* Volcano's cycle, from its own metrics (``volcano_e2e_scheduling_latency_milliseconds``: mean of the sessions
  that ran meanwhile, and their count).

Prints both and their ratio (with / without). One run per configuration: run it several times for a range.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from e2e.local import controlplane, rest  # noqa: E402

NAMESPACE = "bench-volcano"
QUEUE = "bench-team"
A100 = "NVIDIA-A100"
LATENCY = "volcano_e2e_scheduling_latency_milliseconds"


def kubectl(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def parallel(items: Iterable[Any], work: Callable[[Any], Any], threads: int = 6) -> None:
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for future in concurrent.futures.as_completed([pool.submit(work, item) for item in items]):
            future.result()


def control_plane_api(target: str) -> rest.Api | None:
    """The admin client of ``make e2e-local``'s control plane this runs inside; None (said on stderr) outside it.
    ``target``: the make target that runs the script there."""
    local = os.environ.get("CARDQUOTA_E2E_LOCAL")
    if not local:
        print(f"runs inside make e2e-local's control plane: make {target}", file=sys.stderr)
        return None
    return rest.admin(Path(local) / "pki", "127.0.0.1", controlplane.API_PORT)


def install_cardquota() -> None:
    plugin = str(Path(sys.executable).parent / "kubectl-cardquota")
    subprocess.run([plugin, "crd", "install"], check=True, capture_output=True)
    kubectl("apply", "-k", str(REPO / "manifests" / "overlays" / "dev-extender"))
    for name in ("cardquota", "cardquota-extender"):
        kubectl("-n", "cardquota-system", "rollout", "status", f"deployment/{name}", "--timeout=300s")


def filler_pod(node: str, index: int) -> dict[str, Any]:
    """A Deployment's pod as the API server stores it (labels, annotations, env, probes): ~2 KB."""
    name = f"{node}-app-{index}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": f"web-{index}",
                                    "pod-template-hash": "7d9f8c6b5d", "team": "platform"},
                         "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-01T00:00:00Z",
                                         "prometheus.io/scrape": "true", "prometheus.io/port": "8080"}},
            "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "app", "image": "registry.example/web:1.2.3",
                                     "args": ["--port=8080", "--log-level=info"],
                                     "env": [{"name": f"SETTING_{n}", "value": f"value-{n}" * 3} for n in range(12)],
                                     "ports": [{"containerPort": 8080, "name": "http"}],
                                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                                   "limits": {"memory": "256Mi"}},
                                     "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}}]}}


def make_cluster(api: rest.Api, nodes: int, pods: int) -> list[str]:
    names = [f"scale-a100-{i:04d}" for i in range(nodes)]
    labels = {"nvidia.com/gpu.product": A100, "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920"}
    started = time.monotonic()
    parallel(names, lambda name: api.create("/api/v1/nodes", controlplane.kwok_node(name, labels,
                                                                                     {"nvidia.com/gpu": "8"})))
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    parallel([(node, i) for node in names for i in range(pods)], lambda item: api.create(path, filler_pod(*item)))
    print(f"{nodes} nodes and {nodes * pods} pods created in {time.monotonic() - started:.0f} s", flush=True)
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        waiting = api.get(path, fieldSelector="status.phase!=Running", limit="1")
        if not waiting["items"]:
            break
        time.sleep(5)
    print(f"... all Running after {time.monotonic() - started:.0f} s", flush=True)
    return names


def gang(name: str) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"volcano.sh/card.name": A100}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "w", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]}}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "annotations": {"volcano.sh/card.request": json.dumps({A100: 8})}},
            "spec": {"schedulerName": "volcano", "queue": QUEUE, "minAvailable": 8,
                     "tasks": [{"name": "worker", "replicas": 8, "template": template}]}}


def scheduler_metrics(api: rest.Api) -> tuple[float, float]:
    """(sum, count) of Volcano's end-to-end session latency histogram, from the scheduler pod's metrics port."""
    deadline = time.monotonic() + 120
    while True:  # the scheduler has no readiness probe: Running comes before its metrics port listens
        scheduler = api.get("/api/v1/namespaces/volcano-system/pods", labelSelector="app=volcano-scheduler")["items"]
        ready = [p for p in scheduler
                 if p.get("status", {}).get("podIP") and not p["metadata"].get("deletionTimestamp")]
        try:
            with urllib.request.urlopen(f"http://{ready[0]['status']['podIP']}:8080/metrics", timeout=10) as answer:
                text = answer.read().decode()
            break
        except (OSError, IndexError):
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
    values = {}
    for key in ("sum", "count"):
        match = re.search(rf"^{LATENCY}_{key}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.MULTILINE)
        values[key] = float(match.group(1)) if match else 0.0
    return values["sum"], values["count"]


EXTENDER_SECONDS = "cardquota_extender_duration_seconds"


def extender_metrics(api: rest.Api) -> dict[str, tuple[float, float]]:
    """Per verb, (sum, count) of the extender's own verb latency histogram (the time each call spent in the
    server), from its pod's /metrics; empty when it does not run."""
    pods = api.get("/api/v1/namespaces/cardquota-system/pods", labelSelector="app.kubernetes.io/component=extender")
    ready = [p for p in pods["items"]
             if p.get("status", {}).get("podIP") and not p["metadata"].get("deletionTimestamp")]
    if not ready:
        return {}
    with urllib.request.urlopen(f"http://{ready[0]['status']['podIP']}:8713/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: dict[str, list[float]] = {}
    for match in re.finditer(rf'^{EXTENDER_SECONDS}_(sum|count){{verb="([^"]+)"}} ([0-9.e+-]+)$', text, re.MULTILINE):
        found.setdefault(match.group(2), [0.0, 0.0])[0 if match.group(1) == "sum" else 1] = float(match.group(3))
    return {verb: (values[0], values[1]) for verb, values in found.items()}


def measure(api: rest.Api, label: str, gangs: int, timeout: float) -> dict[str, float]:
    jobs = "/apis/batch.volcano.sh/v1alpha1/namespaces/" + NAMESPACE + "/jobs"
    before = scheduler_metrics(api)
    extender_before = extender_metrics(api)
    started = time.monotonic()
    for index in range(gangs):
        api.create(jobs, gang(f"{label}-{index}"))
    tasks, bound = gangs * 8, 0
    while time.monotonic() - started < timeout:
        listed = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="volcano.sh/job-namespace")["items"]
        bound = sum(1 for pod in listed if pod["spec"].get("nodeName"))
        if bound >= tasks:
            break
        time.sleep(1)
    elapsed = time.monotonic() - started
    after = scheduler_metrics(api)
    extender_after = extender_metrics(api)
    sessions = after[1] - before[1]
    calls = {verb: (extender_after[verb][0] - extender_before.get(verb, (0.0, 0.0))[0],
                    extender_after[verb][1] - extender_before.get(verb, (0.0, 0.0))[1]) for verb in extender_after}
    calls = {verb: spent for verb, spent in calls.items() if spent[1]}
    if calls:
        print(f"{label}: extender calls meanwhile: "
              + ", ".join(f"{verb} {count:.0f} ({seconds * 1e3:.1f} ms in the server)"
                          for verb, (seconds, count) in sorted(calls.items())), flush=True)
    # Volcano observes a session's latency when it closes: none closed means one has been open all along.
    cycle = (after[0] - before[0]) / sessions if sessions else elapsed * 1000
    print(f"{label}: {bound}/{tasks} tasks bound in {elapsed:.1f} s; "
          + (f"{sessions:.0f} sessions, mean {cycle:.0f} ms each" if sessions
             else f"no session ended in {elapsed:.0f} s (one open all along: its cycle is at least that)"),
          flush=True)
    for index in range(gangs):
        api.delete(f"{jobs}/{label}-{index}")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and api.get(f"/api/v1/namespaces/{NAMESPACE}/pods",
                                                  labelSelector="volcano.sh/job-namespace", limit="1")["items"]:
        time.sleep(2)
    extender_ms = sum(seconds for seconds, _ in calls.values()) * 1e3
    return {"bound": bound, "tasks": tasks, "seconds": elapsed, "sessions": sessions, "cycle_ms": cycle,
            "extender_ms_per_session": extender_ms / sessions if sessions else extender_ms}


def restart_scheduler() -> None:
    kubectl("-n", "volcano-system", "rollout", "restart", "deployment/volcano-scheduler")
    kubectl("-n", "volcano-system", "rollout", "status", "deployment/volcano-scheduler", "--timeout=300s")
    time.sleep(5)  # its first sessions: the cache synced


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=20, help="running pods per node")
    parser.add_argument("--gangs", type=int, default=13, help="Volcano Jobs of 8 one-card tasks")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the tasks to be bound")
    args = parser.parse_args()
    api = control_plane_api("bench-control-plane")
    if api is None:
        return 2
    install_cardquota()
    make_cluster(api, args.nodes, args.pods)
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
             "metadata": {"name": QUEUE, "annotations": {"volcano.sh/card.quota": json.dumps({A100: 8 * args.gangs})}},
             "spec": {"weight": 1, "capability": {"cpu": "100000", "memory": "100000Gi"}}}
    api.create("/apis/scheduling.volcano.sh/v1beta1/queues", queue)
    without = measure(api, "volcano", args.gangs, args.timeout)
    kubectl("apply", "-f", "-", stdin=subprocess.run(
        [str(Path(sys.executable).parent / "kubectl-cardquota"), "scheduler-conf"], capture_output=True, text=True,
        check=True).stdout)
    restart_scheduler()
    with_stanza = measure(api, "cardquota", args.gangs, args.timeout)
    print(f"\n{args.nodes} nodes × {args.pods} pods, {args.gangs * 8} card tasks in gangs of 8:")
    print(f"  extender time in the server per session (ms): {with_stanza['extender_ms_per_session']:.1f}")
    for what, key in (("time to bind every task (s)", "seconds"), ("Volcano's mean cycle (ms)", "cycle_ms")):
        ratio = with_stanza[key] / without[key] if without[key] else float("nan")
        print(f"  {what}: without the stanza {without[key]:.1f}, with it {with_stanza[key]:.1f} "
              f"(ratio {ratio:.1f}×){'' if with_stanza['bound'] == with_stanza['tasks'] else ' — not all bound'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
