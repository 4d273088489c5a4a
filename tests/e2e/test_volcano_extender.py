"""Stock Volcano (a pinned release) calling cardquota's extender: a multi-card job and an mGPU pod through the real
scheduler. Runs with the rest of tests/e2e (``make e2e``), over the Volcano the session fixture installs."""

from __future__ import annotations

import yaml
from builders import queue
from e2e.cluster import Kubectl, until
from e2e.volcano_setup import A100, NAMESPACE, job, podgroup_of, pods, volcano

from cardquota.core.scheduling.capacity_card import insufficient

__all__ = ["volcano"]  # the module's fixture (imported: pytest finds it here)

def test_a_multi_card_job_runs_within_the_queue_quota_and_a_bigger_one_waits(kubectl: Kubectl, volcano: str) -> None:
    kubectl.apply(job("fits", 2))
    def both_bound() -> bool | None:
        bound = [p for p in pods(kubectl, "volcano.sh/job-name=fits") if p["spec"].get("nodeName") == volcano]
        return True if len(bound) == 2 else None

    until(both_bound, what="both pods of the job bound by Volcano")
    # Two more A100 would exceed the queue's A100 quota of 2 (no H100 node here): the second job stays unbound.
    kubectl.apply(job("waits", 2))
    until(lambda: True if len(pods(kubectl, "volcano.sh/job-name=waits")) == 2 else None, what="pods created")
    assert all(not p["spec"].get("nodeName") for p in pods(kubectl, "volcano.sh/job-name=waits"))


def test_a_job_over_its_queues_card_quota_waits_and_kubectl_describe_says_why(kubectl: Kubectl, volcano: str) -> None:
    """Two A100 held by one job of a queue allowed two: the next one's PodGroup stays Pending (the extender refuses
    to enqueue it, so Volcano creates none of its pods) and `kubectl describe` shows cardquota's event with the
    seed's reason and wording (capacity-card-design.md, "Event reasons")."""
    team = queue("e2e-volcano-a100", {A100: 2})
    team["spec"]["capability"] = {"cpu": "10", "memory": "10Gi"}
    kubectl.apply(team)
    kubectl.apply(job("holds", 2, A100, "e2e-volcano-a100"))
    until(lambda: True if len([p for p in pods(kubectl, "volcano.sh/job-name=holds")
                                if p["spec"].get("nodeName")]) == 2 else None, what="both A100 held")
    kubectl.apply(job("over", 2, A100, "e2e-volcano-a100"))
    group = until(lambda: podgroup_of(kubectl, "over"), what="the PodGroup of the job over its quota")
    expected = insufficient("e2e-volcano-a100", A100, 2, 4, 2)

    def described() -> str | None:
        text = kubectl.run("describe", "podgroup", group, "-n", NAMESPACE).stdout
        return text if "InsufficientScalarQuota" in text else None

    text = until(described, what=f"cardquota's event in kubectl describe podgroup {group}")
    assert expected in " ".join(text.split()), text  # describe wraps long messages
    assert kubectl.get("podgroup", group, NAMESPACE)["status"].get("phase") in ("Pending", None)
    assert not pods(kubectl, "volcano.sh/job-name=over")  # never enqueued: Volcano made none of its pods


def test_an_mgpu_pod_gets_its_card_indexes_from_the_extender(kubectl: Kubectl, volcano: str) -> None:
    manifest = yaml.safe_load(f"""
apiVersion: v1
kind: Pod
metadata: {{name: infer, namespace: {NAMESPACE}, annotations: {{scheduling.volcano.sh/queue-name: e2e-volcano}}}}
spec:
  schedulerName: volcano
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources:
      limits: {{vke.volcengine.com/mgpu-core: "30", vke.volcengine.com/mgpu-memory: "4096"}}
      requests: {{cpu: 10m}}
""")
    kubectl.apply(manifest)

    def annotated() -> dict[str, str] | None:
        annotations = kubectl.get("pod", "infer", NAMESPACE)["metadata"].get("annotations", {})
        return annotations if "vke.volcengine.com/assumed" in annotations else None

    annotations = until(annotated, what="the mGPU result annotations")
    assert annotations["vke.volcengine.com/gpu-index-container-c"] == "0"
