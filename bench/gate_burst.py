"""From a card pod's creation to the lifting of its card-quota gate, under a burst, on a real control plane.

    make bench-gate-burst                          # 1,000 pods, 16 creating at once
    make bench-gate-burst BENCH_ARGS="--pods 200"

Runs inside ``make e2e-local``'s control plane (tests/e2e/local/run.py) with cardquota installed as the README says
(``crd install``, overlays/dev-extender: the gate on) and one kwok node offering 8 A100. After one pod has gone
through (the new leader's takeover wait is over), ``--pods`` one-A100 card pods in a queue with room for all of
them are created by ``--writers`` threads as fast as the API server takes them; a watch (started before) records
when each pod's ``spec.schedulingGates`` comes back empty. For each pod: the time from the answer to its create —
the webhook has added the gate by then — to the watch event without it. Printed: p50, p90, p99 and max over the
pods, and the part of it the keeper's own interval accounts for (a pod created just after a round waits up to one
interval, 0.2 s, for the next: on average half of it). One run: run it several times for a range.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import ssl
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from e2e.local import controlplane, rest  # noqa: E402
from volcano_cycle import control_plane_api, install_cardquota  # noqa: E402

from cardquota.operator.gatekeeper import DEFAULT_INTERVAL  # noqa: E402

NAMESPACE = "bench-gate"
QUEUE = "bench-gate-team"
A100 = "NVIDIA-A100"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


def card_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "annotations": {"volcano.sh/card.name": A100, "scheduling.volcano.sh/queue-name": QUEUE}},
            "spec": {"schedulerName": "volcano", "nodeSelector": {"cardquota.io/bench-held": "true"},
                     "containers": [{"name": "main", "image": "registry.example/train:1.0",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "10m"}}}]}}


class Ungated:
    """A watch of the namespace's pods recording, per pod, when it was first seen without a scheduling gate."""

    def __init__(self, api: rest.Api, resource_version: str) -> None:
        self.seen: dict[str, float] = {}
        self.lock = threading.Lock()
        context = ssl.create_default_context(cafile=str(api.ca))
        context.load_cert_chain(str(api.certificate), str(api.key))
        self.connection = http.client.HTTPSConnection(api.host, api.port, context=context, timeout=600)
        self.connection.request("GET", f"{PODS}?watch=true&resourceVersion={resource_version}"
                                       "&allowWatchBookmarks=false")
        self.response = self.connection.getresponse()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for line in self.response:
                event = json.loads(line)
                pod = event.get("object") or {}
                name = pod.get("metadata", {}).get("name")
                if event.get("type") in ("ADDED", "MODIFIED") and name and not pod.get("spec", {}).get(
                        "schedulingGates"):
                    with self.lock:
                        self.seen.setdefault(name, time.time())
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            return  # (closed under it: http.client's reader is gone, AttributeError)

    def close(self) -> None:
        self.connection.close()


def lift_requests(audit_log: Path) -> dict[str, tuple[float, float]]:
    """Per pod of the namespace, (received, answered) wall-clock times of cardquota's PATCH of it that the API server
    accepted, from its audit log (the ResponseComplete stage: ``requestReceivedTimestamp``, ``stageTimestamp``)."""
    from datetime import datetime

    found: dict[str, tuple[float, float]] = {}
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        target = event.get("objectRef") or {}
        if (event.get("verb") == "patch" and target.get("resource") == "pods" and not target.get("subresource")
                and target.get("namespace") == NAMESPACE and event.get("stage") == "ResponseComplete"
                and (event.get("responseStatus") or {}).get("code", 200) < 300):
            found[target["name"]] = tuple(  # type: ignore[assignment]
                datetime.fromisoformat(event[key].replace("Z", "+00:00")).timestamp()
                for key in ("requestReceivedTimestamp", "stageTimestamp"))
    return found


def summary(values: list[float]) -> str:
    return (f"p50 {statistics.median(values):.2f} s, p90 {percentile(values, 0.9):.2f} s, "
            f"p99 {percentile(values, 0.99):.2f} s, max {max(values):.2f} s")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--writers", type=int, default=16, help="threads creating pods")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    api = control_plane_api("bench-gate-burst")
    if api is None:
        return 2
    install_cardquota()
    labels = {"nvidia.com/gpu.product": A100, "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920"}
    api.create("/api/v1/nodes", controlplane.kwok_node("bench-gate-a100", labels, {"nvidia.com/gpu": "8"}))
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    api.create("/apis/scheduling.volcano.sh/v1beta1/queues", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": QUEUE, "annotations": {"volcano.sh/card.quota": json.dumps({A100: args.pods + 1})}},
        "spec": {"weight": 1, "capability": {"cpu": "100000", "memory": "100000Gi"}}})
    start_rv = api.get(PODS)["metadata"]["resourceVersion"]
    watch = Ungated(api, start_rv)
    first = api.create(PODS, card_pod("warm-up"))
    if not first["spec"].get("schedulingGates"):
        raise SystemExit("the pod was created without the card-quota gate: is the gate on (CARDQUOTA_CARD_GATE)?")
    deadline = time.monotonic() + 120
    while "warm-up" not in watch.seen:  # the leader's takeover wait, once (seen: wall-clock times, as the audit log)
        if time.monotonic() > deadline:
            raise SystemExit("the warm-up pod was never let through: no leader?")
        time.sleep(0.2)
    created: dict[str, float] = {}

    def create(index: int) -> None:
        name = f"burst-{index}"
        api.create(PODS, card_pod(name))
        created[name] = time.time()

    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.writers) as pool:
        list(pool.map(create, range(args.pods)))
    created_in = time.monotonic() - began
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        with watch.lock:
            if all(name in watch.seen for name in created):
                break
        time.sleep(0.2)
    watch.close()
    latencies = [watch.seen[name] - at for name, at in created.items() if name in watch.seen]
    missing = len(created) - len(latencies)
    print(f"{len(created)} card pods created in {created_in:.1f} s by {args.writers} writers "
          f"({len(created) / created_in:.0f}/s); {len(latencies)} let through"
          + (f", {missing} not within {args.timeout:.0f} s" if missing else ""))
    if latencies:
        print(f"creation -> gate lifted (seen by a watch): {summary(latencies)} (target p99 <= 2 s)")
        audit = os.environ.get("CARDQUOTA_E2E_AUDIT_LOG")
        lifts = lift_requests(Path(audit)) if audit else {}
        split = [(lifts[name][0] - at, lifts[name][1] - lifts[name][0], watch.seen[name] - lifts[name][1])
                 for name, at in created.items() if name in lifts and name in watch.seen]
        if split:
            print(f"  creation -> the lift's PATCH received by the API server: {summary([s[0] for s in split])}")
            print(f"  the PATCH in the API server (webhooks, storage):          {summary([s[1] for s in split])}")
            print(f"  answered -> seen by the watch:                            {summary([s[2] for s in split])}")
        print(f"of which the keeper's own interval: up to {DEFAULT_INTERVAL:.1f} s a pod "
              f"({DEFAULT_INTERVAL / 2:.1f} s on average)")
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
