"""What ratcheting by value costs an UPDATE, as a ratio to judging the same object on CREATE in the same run.

    python bench/ratcheting.py [--tasks 256] [--containers 200] [--repeats 7]

Each case is an object with violations whose values the update leaves alone (a label and a usage annotation are
written), so every violation is carried: the update judges the new object, then the old one, then compares every
value each violation depends on between the two (``common.ratcheting``). Judging twice puts the floor near 2x; what
is above it is the comparison (and the warnings' text).

* queue, parent gone                a child queue whose parent was deleted
* podgroup, queue gone              a PodGroup whose queue was deleted
* realistic pod, queue gone         a 6 KB pod (bench/synthetic.py) in a deleted queue: its card rules depend on its
                                    containers, compared whole
* job, N tasks with mGPU violations a Volcano Job whose every task template breaks an mGPU rule: a few distinct
                                    paths per task
* pod, N containers with mGPU violations  the mGPU rules depend on all of ``spec.containers``
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import realistic_pod
from timing import best_of

from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.snapshot import ClusterSnapshot

A100 = "NVIDIA-A100"
MGPU_CORE = "vke.volcengine.com/mgpu-core"
REQUEST = {"volcano.sh/card.request": json.dumps({A100: 1})}
CONFIG = PolicyConfig()


def snapshot() -> ClusterSnapshot:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a100-1", "labels": {
        "nvidia.com/gpu.product": A100, "nvidia.com/gpu.count": "8"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    team = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": "team-a", "annotations": {"volcano.sh/card.quota": json.dumps({A100: 2})}},
            "spec": {"weight": 1}}
    built = Ledger.build([node, team]).snapshot
    built.complete = True
    return built


def queue(parent: str) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": "child", "annotations": {"volcano.sh/card.quota": json.dumps({A100: 2})}},
            "spec": {"weight": 1, "parent": parent}}


def podgroup() -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml", "annotations": dict(REQUEST)},
            "spec": {"minMember": 1, "queue": "gone"}}


def pod_in_gone_queue() -> dict[str, Any]:
    manifest = realistic_pod(0, None, 1)
    manifest["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] = "gone"
    manifest["spec"]["schedulerName"] = "volcano"
    return manifest


def job(tasks: int) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"volcano.sh/card.name": A100}}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", MGPU_CORE: "0"}}}]}}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ml", "annotations": dict(REQUEST)},
            "spec": {"queue": "gone", "minAvailable": 1,
                     "tasks": [{"name": f"t{index}", "replicas": 1, "template": copy.deepcopy(template)}
                               for index in range(tasks)]}}


def mgpu_pod(containers: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "annotations": {}},
            "spec": {"containers": [{"name": f"c{index}", "resources": {"limits": {MGPU_CORE: "0"}}}
                                    for index in range(containers)]}}


def touched(manifest: dict[str, Any]) -> dict[str, Any]:
    """The object with a label and a usage annotation written: nothing a violation depends on."""
    changed = copy.deepcopy(manifest)
    metadata = changed["metadata"]
    metadata.setdefault("labels", {})["team"] = "vision"
    metadata.setdefault("annotations", {})["volcano.sh/card.usage"] = "NVIDIA-A100 0/2"
    return changed


def repeated(runs: int, action: Callable[..., object], *args: object) -> Callable[[], None]:
    def run() -> None:
        for _ in range(runs):
            action(*args)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=256)
    parser.add_argument("--containers", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    cluster = snapshot()
    cases: dict[str, dict[str, Any]] = {
        "queue, parent gone": queue("gone"), "podgroup, queue gone": podgroup(),
        "realistic pod, queue gone": pod_in_gone_queue(),
        f"job, {args.tasks} tasks with mGPU violations": job(args.tasks),
        f"pod, {args.containers} containers with mGPU violations": mgpu_pod(args.containers),
    }
    print(f"UPDATE carrying every violation vs CREATE of the same object, fastest of {args.repeats}")
    for name, stored in cases.items():
        update = touched(stored)
        verdict = admit(update, stored, cluster, CONFIG)
        if not verdict.allowed:
            raise SystemExit(f"{name}: the update was refused: {verdict.message}")
        carried = sum("already so before this update" in warning for warning in verdict.warnings)
        runs = max(1, 2_000 // (1 + len(json.dumps(stored)) // 500))
        create = best_of(args.repeats, repeated(runs, admit, stored, None, cluster, CONFIG)) / runs
        ratcheted = best_of(args.repeats, repeated(runs, admit, update, stored, cluster, CONFIG)) / runs
        print(f"  {name}: {ratcheted / create:.2f}x ({ratcheted * 1e6:,.0f} us vs {create * 1e6:,.0f} us; "
              f"{carried} carried warnings)")


if __name__ == "__main__":
    main()
