"""Reading a ``jobEnqueueable`` body for its PodGroup only, a ratio against ``json.loads`` of the same bytes.

    python bench/job_bodies.py [--pods 8,100,1000] [--repeats 7]

Volcano sends the job's whole JobInfo: its PodGroup and every task with its full Pod (pkg/scheduler/api/job_info.go,
no json tags). A PodGroup whose pods already exist (vc-controller's group of a Deployment or StatefulSet) carries
them all while it is Pending, each cycle. The extender needs only the PodGroup
(:func:`cardquota.operator.extender.read_job_request`); the baseline is what it did before, ``json.loads`` of the
whole body (the same bytes, the collector on in both, as in production). Pods are bench/synthetic.py's realistic
pending pods (6.4 KB of JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import synthetic
from timing import timed
from volcano_payloads import job_info

from cardquota.operator.extender import read_job_request


def body(pods: int) -> bytes:
    members = [synthetic.realistic_pod(index, None, 1) for index in range(pods)]
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "pg-0", "namespace": "ml", "uid": "pg-uid"},
             "spec": {"minMember": 1, "queue": "team"}, "status": {"phase": "Pending"}}
    return json.dumps({"job": job_info(group, members)}).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default="8,100,1000")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    for pods in (int(count) for count in args.pods.split(",")):
        data = body(pods)
        whole = timed(lambda data=data: json.loads(data), args.repeats)
        names = timed(lambda data=data: read_job_request(data), args.repeats)
        print(f"{pods:>5} pods, body {len(data) / 2**20:6.2f} MiB: json.loads {statistics.median(whole) * 1e3:8.2f} ms "
              f"(min {min(whole) * 1e3:.2f}), PodGroup only {statistics.median(names) * 1e3:7.2f} ms "
              f"(min {min(names) * 1e3:.2f}): ratio {statistics.median(names) / statistics.median(whole):.3f}")


if __name__ == "__main__":
    main()
