"""Messages that cost time (issue 40, item 8): each says what is really wrong and what was meant.

* a ``volcano.sh/card.request`` the policy derived from the tasks (a Volcano Job's, a registered kind's PodGroup)
  is said to be derived, how, and is reported at what it was derived from, not as if the user had written it;
* a pod naming a PodGroup that does not exist is told so (with the PodGroups of its namespace it most likely meant),
  not "queue default does not exist";
* ``A,B`` written for the alternatives ``A|B`` is told the separator;
* a missing parent queue (or queue) gets a "did you mean", and a MIG pod named with the whole card's type the MIG
  types the catalog offers through its resource.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import gpu_labels, gpu_node, node, pod, podgroup, queue

from cardquota.cli.check import CheckResult
from cardquota.cli.output import check_table
from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict, deny, describe_operation
from cardquota.core.violations import Violation
from cardquota.loader import Document

A100, H100 = "NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3"
MIG = f"{A100}/mig-1g.5gb-mixed"
NODES = [
    gpu_node("a100-1", A100, 8),
    gpu_node("h100-1", H100, 8),
    node("mig-1", labels=gpu_labels(A100), allocatable={"nvidia.com/mig-1g.5gb": "7"}),
]
QUOTA = {A100: 16, H100: 8, MIG: 7}


def cluster(*objects: dict[str, Any]) -> ClusterSnapshot:
    snapshot = Ledger.build([*NODES, queue("team-a", QUOTA), *objects]).snapshot
    snapshot.complete = True
    return snapshot


def check(manifest: dict[str, Any], snapshot: ClusterSnapshot) -> Verdict:
    return admit(manifest, None, snapshot, PolicyConfig())


def card_pod(card: str, *, resource: str = "nvidia.com/gpu", **kwargs: Any) -> dict[str, Any]:
    return pod("p", namespace="ml", card=card, gpus=1, resource=resource, **kwargs)


def task(name: str, card: str, replicas: int, gpus: int) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "template": {
        "metadata": {"annotations": {"volcano.sh/card.name": card}},
        "spec": {"containers": [{"name": "main", "image": "t", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}


def vcjob(*tasks: dict[str, Any], request: dict[str, int] | None = None, min_available: int = 1) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "train", "namespace": "ml"}
    if request is not None:
        metadata["annotations"] = {"volcano.sh/card.request": json.dumps(request)}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": metadata,
            "spec": {"schedulerName": "volcano", "queue": "team-a", "minAvailable": min_available,
                     "tasks": list(tasks)}}


def pytorchjob(workers: int, gpus: int) -> dict[str, Any]:
    template = task("x", A100, 1, gpus)["template"]
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "llm", "namespace": "ml"},
            "spec": {"runPolicy": {"schedulingPolicy": {"queue": "team-a"}},
                     "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": workers, "template": template}}}}


# (what, manifest, extra objects, the violation expected as "path: message", or a warning expected)
DENIALS = [
    ("a derived card.request is said to be derived, at the tasks",
     vcjob(task("worker", A100, 4, 8), task("ps", A100, 1, 0), min_available=5), (),
     f'spec.tasks: the volcano.sh/card.request derived from the tasks ({{"{A100}":32}}: 4 pods of task worker × 8) '
     f"requests 32 {A100} but queue team-a allows at most 16: it can never run"),
    ("a derived card.request of several tasks names each",
     vcjob(task("launcher", H100, 1, 2), task("worker", H100, 4, 2), min_available=5), (),
     f'spec.tasks: the volcano.sh/card.request derived from the tasks ({{"{H100}":10}}: 1 pod of task launcher × 2 '
     f"+ 4 pods of task worker × 2) requests 10 {H100} but queue team-a allows at most 8: it can never run"),
    ("a written card.request is the user's own, at the annotation",
     vcjob(task("worker", A100, 4, 8), request={A100: 32}), (),
     f'metadata.annotations["volcano.sh/card.request"]: requests 32 {A100} but queue team-a allows at most 16: it '
     "can never run"),
    ("a registered kind's PodGroup request is said to be derived from its pods",
     pytorchjob(3, 8), (),
     f"spec: its PodGroup llm (Kubeflow training operator v1.9, minMember 4): the volcano.sh/card.request derived "
     f'from its pods ({{"{A100}":32}}: 1 pod of role Master × 8 + 3 pods of role Worker × 8) requests 32 {A100} but '
     "queue team-a allows at most 16: it can never run"),
    ("a comma between alternatives in card.name",
     card_pod(f"{A100},{H100}"), (),
     f'metadata.annotations["volcano.sh/card.name"]: "{A100},{H100}" has a comma: alternatives are separated by |, '
     f"not a comma (did you mean {A100}|{H100}?)"),
    ("a comma (and spaces) between alternatives in a card.request key",
     podgroup("pg", namespace="ml", queue="team-a", request={f"{A100}, {H100}": 1}), (),
     f'metadata.annotations["volcano.sh/card.request"]: {A100}, {H100} has a comma: alternatives are separated by |, '
     f"not a comma (did you mean {A100}|{H100}?)"),
    ("a parent queue misspelt",
     queue("child", {A100: 1}, parent="team-b", capability={"cpu": "8", "memory": "8Gi"}), (),
     "spec.parent: parent queue team-b does not exist (did you mean team-a?)"),
    ("a queue misspelt on a pod",
     card_pod(A100, queue="taem-a"), (),
     'metadata.annotations["scheduling.volcano.sh/queue-name"]: queue taem-a does not exist (did you mean team-a?)'),
    ("a queue misspelt on a PodGroup",
     podgroup("pg", namespace="ml", queue="team-aa", request={A100: 1}), (),
     "spec.queue: queue team-aa does not exist (did you mean team-a?)"),
    ("a MIG pod named with the whole card's type",
     card_pod(A100, resource="nvidia.com/mig-1g.5gb"), (),
     f'metadata.annotations["volcano.sh/card.name"]: {A100} is requested through nvidia.com/gpu, but the pod requests '
     f"nvidia.com/mig-1g.5gb (did you mean {MIG}?)"),
]


@pytest.mark.parametrize(("manifest", "objects", "expected"), [case[1:] for case in DENIALS],
                         ids=[case[0] for case in DENIALS])
def test_the_denial_says_what_is_wrong(manifest: dict[str, Any], objects: tuple[dict[str, Any], ...],
                                       expected: str) -> None:
    verdict = check(manifest, cluster(*objects))
    assert not verdict.allowed
    assert expected in [str(violation) for violation in verdict.violations], verdict.message


WARNINGS = [
    # A PodGroup not there (yet) is said, never denied on the queue the pod would fall back to: operators create a
    # gang's PodGroup after its pods (LeaderWorkerSet, KubeRay), and the queue is the PodGroup's.
    ("a misspelt PodGroup name with a queue that holds the cards: a warning",
     card_pod(A100, group="trainig-pg", queue="team-a"), (podgroup("training-pg", namespace="ml", queue="team-a"),),
     'metadata.annotations["scheduling.k8s.io/group-name"]: PodGroup ml/trainig-pg does not exist yet (did you mean '
     "training-pg?)"),
    ("a misspelt PodGroup name is said, not the default queue",
     card_pod(A100, group="trainig-pg"), (podgroup("training-pg", namespace="ml", queue="team-a"),
                                          podgroup("other", namespace="ml", queue="team-a"),
                                          podgroup("training-pg2", namespace="elsewhere", queue="team-a")),
     'metadata.annotations["scheduling.k8s.io/group-name"]: PodGroup ml/trainig-pg does not exist yet (did you mean '
     "training-pg?): Volcano schedules a pod only with its PodGroup, in the PodGroup's queue, so its queue's quota "
     "is judged once the PodGroup exists; if the name is misspelt, fix scheduling.k8s.io/group-name"),
    ("a PodGroup name like none of its namespace's gets no suggestion",
     card_pod(A100, group="zz"), (podgroup("training-pg", namespace="ml", queue="team-a"),),
     'metadata.annotations["scheduling.k8s.io/group-name"]: PodGroup ml/zz does not exist yet: Volcano schedules'),
    ("a leader pod of a LeaderWorkerSet, its PodGroup not created yet, unnamed, in no quota'd fallback queue",
     pod("l-0", namespace="ml", gpus=1, group="l-0-5d8f7c"), (podgroup("other", namespace="ml", queue="team-a"),),
     'metadata.annotations["scheduling.k8s.io/group-name"]: PodGroup ml/l-0-5d8f7c does not exist yet'),
    ("a comma in a quota key",
     queue("q", {f"{A100},{H100}": 1}, capability={"cpu": "8", "memory": "8Gi"}), (),
     f"card type {A100},{H100} is not offered by any node: alternatives are separated by |, not a comma (did you "
     f"mean {A100}|{H100}?)"),
]


@pytest.mark.parametrize(("manifest", "objects", "expected"), [case[1:] for case in WARNINGS],
                         ids=[case[0] for case in WARNINGS])
def test_the_warning_says_what_is_wrong(manifest: dict[str, Any], objects: tuple[dict[str, Any], ...],
                                        expected: str) -> None:
    verdict = check(manifest, cluster(*objects))
    assert verdict.allowed, verdict.message
    assert any(warning.startswith(expected) for warning in verdict.warnings), verdict.warnings


# --- one line names a field once ----------------------------------------------------------------------------------

CARD_NAME_PATH = 'metadata.annotations["volcano.sh/card.name"]'
REPEATS = [
    ("a message starting with its own path", CARD_NAME_PATH, f"{CARD_NAME_PATH}: must name a card type", None,
     f"{CARD_NAME_PATH}: must name a card type"),
    ("a message starting with its path without a colon", CARD_NAME_PATH, f"{CARD_NAME_PATH} must name a card type",
     None, f"{CARD_NAME_PATH}: must name a card type"),
    ("a pod rule's message moved under a Deployment's template", CARD_NAME_PATH,
     f"{CARD_NAME_PATH}: must name a card type", "spec.template",
     f"spec.template.{CARD_NAME_PATH}: must name a card type"),
    ("moved under a Volcano Job's task template", CARD_NAME_PATH, f"{CARD_NAME_PATH} must name a card type",
     "spec.tasks[0].template", f"spec.tasks[0].template.{CARD_NAME_PATH}: must name a card type"),
    ("a word that is also the path's last step is kept", "spec.queue", "queue x does not exist", None,
     "spec.queue: queue x does not exist"),
]


@pytest.mark.parametrize(("path", "message", "prefix", "expected"), [case[1:] for case in REPEATS],
                         ids=[case[0] for case in REPEATS])
def test_a_line_never_names_a_field_twice(path: str, message: str, prefix: str | None, expected: str) -> None:
    violation = Violation(path, message)
    if prefix is not None:
        violation = violation.under(prefix)
    assert str(violation) == expected
    assert deny([violation]).message == expected


def test_a_templates_pod_warning_is_at_the_templates_path() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ml"},
                  "spec": {"replicas": 1, "template": {
                      "metadata": {"annotations": {"volcano.sh/card.name": A100,
                                                   "scheduling.volcano.sh/queue-name": "team-a"}},
                      "spec": {"schedulerName": "volcano", "affinity": {"nodeAffinity": {
                          "requiredDuringSchedulingIgnoreDuringExecution": {}}},
                          "containers": [{"name": "m", "image": "x",
                                          "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}
    verdict = check(deployment, cluster())
    assert verdict.allowed
    assert [warning.split(" ", 1)[0] for warning in verdict.warnings] == [
        "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoreDuringExecution"]


# --- patch lines say what they add ---------------------------------------------------------------------------------

PATCHES = [
    ("a card pod's node affinity", card_pod(A100, queue="team-a"), (),
     [f"node affinity → nodes whose nvidia.com/gpu.product is {A100}"]),
    ("alternatives: the first preferred", card_pod(f"{H100}|{A100}", queue="team-a"), (),
     [f"node affinity → nodes whose nvidia.com/gpu.product is {H100} or {A100}, preferring {H100}"]),
    ("a Job's derived card.request", vcjob(task("worker", A100, 2, 4), min_available=2), (),
     [f'volcano.sh/card.request {{"{A100}":8}} (derived from the tasks)']),
    ("a quota rewritten in canonical form",
     queue("q", f'{{ "{A100}": 2 }}', capability={"cpu": "8", "memory": "8Gi"}), (),
     ["volcano.sh/card.quota in canonical form"]),
]


@pytest.mark.parametrize(("manifest", "objects", "expected"), [case[1:] for case in PATCHES],
                         ids=[case[0] for case in PATCHES])
def test_a_patch_is_described_by_what_it_adds(manifest: dict[str, Any], objects: tuple[dict[str, Any], ...],
                                              expected: list[str]) -> None:
    verdict = check(manifest, cluster(*objects))
    assert [describe_operation(operation) for operation in verdict.patch] == expected
    table = check_table([CheckResult(Document({}, "x.yaml"), ("", "Kind", "", "n"), verdict)], color=False, width=400)
    assert [line.strip() for line in table.splitlines() if line.strip().startswith("patch:")] == [
        f"patch: {said}" for said in expected]


def test_the_gate_is_described() -> None:
    verdict = admit(card_pod(A100, queue="team-a"), None, cluster(), PolicyConfig(card_gate=True))
    assert describe_operation(verdict.patch[-1]) == "scheduling gate cardquota.io/card-quota"
    assert describe_operation({"op": "remove", "path": "/spec/x"}) == "remove /spec/x"
