"""``kubectl cardquota explain job/NAME`` on the dump the README has users make (``kubectl get
nodes,queues,podgroups,pods -A -o yaml``): it holds no Volcano Job, so the Job is explained by the PodGroup its job
controller made and that PodGroup's pods, with one line saying so.

Volcano v1.15.1's job controller names a Job's PodGroup ``<job>-<job uid>`` and makes the Job its controller owner
(``createOrUpdatePodGroup``, pkg/controllers/job/job_controller_actions.go), and annotates each pod with
``volcano.sh/job-name`` and the PodGroup's name in ``scheduling.k8s.io/group-name`` (``createJobPod``,
job_controller_util.go); Volcano's podgroup controller gives the PodGroups it makes for other pods those pods' owners
(``newPGOwnerReferences``, pkg/controllers/podgroup/pg_controller_handler.go), a ``batch/v1`` Job among them.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import gpu_node, pod, podgroup, queue

from cardquota.cli.main import run
from cardquota.core.explain import job_podgroups

A100 = "NVIDIA-A100"
UID = "5f0c1a52-3a1e-4d0b-9a4e-7b9d2c1e6f10"
GROUP = f"train-{UID}"
ASSUMED = ("assumed: cardUnlimitedCpuMemory=false, predicate.MGPUEnable=false, crossquota off (the plugins' "
           "defaults: no ConfigMap cardquota-extender-conf or volcano-scheduler-configmap in the input)\n")
"""What explain says of a dump without the scheduler's ConfigMaps (issue 40, item 4)."""
NOTE = (f"note: no Volcano Job ml/train in {{dump}}: explaining the PodGroup its job controller made, ml/{GROUP}, "
        "and its pods\n" + ASSUMED.replace("{", "{{").replace("}", "}}"))
VOLCANO_OWNER = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train", "uid": UID,
                 "controller": True, "blockOwnerDeletion": True}


def job_podgroup(*, phase: str, request: int, owner: dict[str, Any] | None = VOLCANO_OWNER,
                 name: str = GROUP) -> dict[str, Any]:
    group = podgroup(name, namespace="ml", queue="team-a", phase=phase, request={A100: request})
    if owner is not None:
        group["metadata"]["ownerReferences"] = [owner]
    return group


def job_pod(index: int, *, node_name: str | None) -> dict[str, Any]:
    member = pod(f"train-worker-{index}", namespace="ml", card=A100, gpus=1, node_name=node_name, group=GROUP)
    member["metadata"]["annotations"]["volcano.sh/job-name"] = "train"
    member["metadata"]["ownerReferences"] = [VOLCANO_OWNER]
    return member


def dump(tmp_path: Path, *objects: dict[str, Any]) -> str:
    """The cluster as ``kubectl get nodes,queues,podgroups,pods -A -o yaml`` prints it: one List, no Jobs."""
    items = [gpu_node("a100-1", A100, 8), queue("team-a", {A100: 4}), *objects]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {}}))
    return str(path)


def explain(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run("kubectl cardquota", ["explain", *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_running_job_is_explained_by_its_podgroup_and_pods(tmp_path: Path) -> None:
    cluster = dump(tmp_path, job_podgroup(phase="Running", request=4),
                   *[job_pod(index, node_name="a100-1") for index in range(4)])
    code, text, err = explain("job/train", "-n", "ml", "--cluster", cluster, "-o", "text")
    assert code == 0
    assert err == NOTE.format(dump=cluster)
    assert text.splitlines()[:4] == [f"PodGroup ml/{GROUP}:", "  It is in queue team-a, phase Running.",
                                     f"  Its volcano.sh/card.request asks for 4 cards of {A100}.",
                                     "  4 of its 4 pods are bound."]


def test_a_pending_job_over_its_quota_is_blocked_as_its_podgroup_is(tmp_path: Path) -> None:
    cluster = dump(tmp_path, job_podgroup(phase="Pending", request=8))
    code, text, err = explain("job/train", "-n", "ml", "--cluster", cluster, "-o", "json")
    assert code == 1
    assert err == NOTE.format(dump=cluster)
    [explanation] = json.loads(text)
    assert explanation["subject"] == f"PodGroup ml/{GROUP}"
    assert explanation["blockers"][0].startswith(f"Queue team-a has insufficient {A100} quota: requested 8")


def test_without_owner_references_the_pods_name_the_podgroup(tmp_path: Path) -> None:
    """A dump cleaned of ownerReferences (kubectl-neat and the like) still has the pods' annotations."""
    members = [job_pod(index, node_name="a100-1") for index in range(2)]
    for member in members:
        del member["metadata"]["ownerReferences"]
    cluster = dump(tmp_path, job_podgroup(phase="Running", request=2, owner=None), *members)
    code, text, err = explain("job/train", "-A", "--cluster", cluster)
    assert code == 0
    assert err == NOTE.format(dump=cluster).replace("Job ml/train", "Job train")
    assert text.startswith(f"PodGroup ml/{GROUP}:\n")


def test_the_podgroup_of_a_kubernetes_batch_job_of_that_name_is_not_taken(tmp_path: Path) -> None:
    batch_owner = {**VOLCANO_OWNER, "apiVersion": "batch/v1"}
    cluster = dump(tmp_path, job_podgroup(phase="Running", request=1, owner=batch_owner, name=f"podgroup-{UID}"))
    code, text, err = explain("job/train", "-n", "ml", "--cluster", cluster)
    assert (code, text) == (2, "")
    assert err == (f"kubectl cardquota: error: job ml/train not found in {cluster} (nor a PodGroup owned by a Volcano "
                   "Job of that name) (another namespace: -n NAMESPACE; every namespace: -A)\n")


def volcano_job() -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": UID,
                        "annotations": {"volcano.sh/card.request": json.dumps({A100: 4})}},
           "spec": {"queue": "team-a", "minAvailable": 4, "tasks": [{"name": "worker", "replicas": 4, "template": {
               "metadata": {"annotations": {"volcano.sh/card.name": A100}},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}]}}


def test_a_job_in_the_input_is_explained_itself_without_a_note(tmp_path: Path) -> None:
    cluster = dump(tmp_path, volcano_job(), job_podgroup(phase="Running", request=4),
                   *[job_pod(index, node_name="a100-1") for index in range(4)])
    code, text, err = explain("job/train", "-n", "ml", "--cluster", cluster)
    assert (code, err) == (0, ASSUMED)
    assert text.startswith("Job ml/train:\n")
    assert "  4 of its 4 pods are bound." in text.splitlines()


@pytest.mark.parametrize(("namespace", "expected"), [("ml", [GROUP]), ("other", []), (None, [GROUP])])
def test_job_podgroups_looks_in_the_namespace_asked(namespace: str | None, expected: list[str]) -> None:
    objects = [job_podgroup(phase="Running", request=1), podgroup("unrelated", namespace="ml")]
    assert [group["metadata"]["name"] for group in job_podgroups(objects, namespace, "train")] == expected


def test_a_job_in_the_input_is_not_given_a_kubernetes_batch_jobs_podgroup(tmp_path: Path) -> None:
    """The Volcano Job's own PodGroup is not made yet: it is read from the Job's templates, not taken from the
    PodGroup (Running, 1 card) Volcano made for a batch/v1 Job of the same name."""
    batch_owner = {**VOLCANO_OWNER, "apiVersion": "batch/v1"}
    cluster = dump(tmp_path, volcano_job(),
                   job_podgroup(phase="Running", request=1, owner=batch_owner, name=f"podgroup-{UID}"))
    code, text, _ = explain("job/train", "-n", "ml", "--cluster", cluster)
    assert code == 0
    assert "  It is in queue team-a, phase Running." not in text.splitlines()
    assert "  Its pods do not exist yet: they were read from its task templates." in text.splitlines()
