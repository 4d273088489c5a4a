"""The scheduling review's findings (issue 39) on the real Volcano scheduler with cardquota as shipped. Each test
states the behaviour a card quota promises and raises :class:`OverAdmitted` where Volcano placed cards beyond it (or
held a job that fits). Both were reproduced here as strict expected failures with the extender-only stanza, and
pass since:

* a parent queue's ``card.quota`` was not held when placing (its children's jobs together exceeded it: 8 A100 held
  under a parent of 4 with the extender alone). Fixed by the card-quota gate, which the shipped manifests turn on
  (it lifts a pod's gate only when its cards fit its queue and every ancestor): a plain test now;
* a GPU pod of another scheduler, with no PodGroup and no queue, was charged to ``default``'s card quota (Volcano
  charges no queue for it), so a job of ``default`` that fits waited. Fixed: such a pod charges no queue
  (:meth:`ClusterSnapshot.charges_a_queue <cardquota.core.snapshot.ClusterSnapshot.charges_a_queue>`).

Not here: the lagging watch and the degraded extender. Cut off from the API server by a route in its pod's network
namespace, the extender did not over-admit Volcano Jobs: its enqueue check still counted the first job through its
PodGroup's card.request, and once degraded its pod left the Service, so Volcano's next call failed in transport and
``ignorable: false`` held. Reproducing them needs a watch that stalls in both directions while the connection
Volcano holds stays open; the host has neither netem nor a packet filter to do that (the closing note of issue 38).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from builders import gpu_labels, queue
from e2e.cluster import Kubectl, until
from e2e.undo import UndoLog
from e2e.volcano_setup import A100, NAMESPACE, job, pods, volcano

__all__ = ["volcano"]  # the module's fixture (imported: pytest finds it here)

LOCAL = os.environ.get("CARDQUOTA_E2E_LOCAL", "")
EXTRA_NODE = "kwok-a100-findings"
SETTLE = 20.0
"""Seconds a placement is given to happen (Volcano cycles every second) before a job is said to wait."""


class OverAdmitted(AssertionError):
    """Volcano placed more cards than a quota allows: the defect these tests reproduce."""


def _bound_cards(kubectl: Kubectl, queues: set[str]) -> int:
    """Cards held by bound, unfinished pods of Volcano Jobs in these queues (Volcano labels a job's pods)."""
    held = 0
    for pod in pods(kubectl, "volcano.sh/queue-name"):
        if (pod["metadata"]["labels"].get("volcano.sh/queue-name") in queues and pod["spec"].get("nodeName")
                and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")):
            held += sum(int(c["resources"].get("limits", {}).get("nvidia.com/gpu", 0))
                        for c in pod["spec"]["containers"])
    return held


def _card_queue(name: str, cards: int, parent: str | None = None) -> dict[str, Any]:
    made = queue(name, {A100: cards}, parent=parent)
    made["spec"]["capability"] = {"cpu": "100", "memory": "100Gi"}
    return made


def _settled_cards(kubectl: Kubectl, queues: set[str]) -> int:
    time.sleep(SETTLE)
    return _bound_cards(kubectl, queues)


def _running(kubectl: Kubectl, name: str, replicas: int) -> None:
    until(lambda: True if len([p for p in pods(kubectl, f"volcano.sh/job-name={name}")
                               if p["spec"].get("nodeName")]) == replicas else None,
          what=f"the {replicas} pods of job {name} bound", timeout=180)


@pytest.fixture
def fresh(kubectl: Kubectl, volcano: str, module_undo: UndoLog) -> None:
    """No job of an earlier test holds cards; a second GPU node with 8 A100 (besides the fixture's 4)."""
    kubectl.run("delete", "jobs.batch.volcano.sh", "--all", "-n", NAMESPACE, "--wait", "--timeout=120s")
    kubectl.run("delete", "pods", "--all", "-n", NAMESPACE, "--wait", "--timeout=120s", "--grace-period=0")
    if kubectl.find("node", EXTRA_NODE) is None:
        from e2e.local.controlplane import kwok_node

        node = kwok_node(EXTRA_NODE, gpu_labels(A100, count=8, memory=81920), {"nvidia.com/gpu": "8"})
        module_undo.change(f"create kwok node {EXTRA_NODE}", lambda: kubectl.run("delete", "node", EXTRA_NODE),
                           lambda: kubectl.apply(node))
        until(lambda: True if any(c["type"] == "Ready" and c["status"] == "True" for c in kubectl.get(
            "node", EXTRA_NODE).get("status", {}).get("conditions") or []) else None, what="the node Ready")


@pytest.mark.skipif(not LOCAL, reason="kwok nodes are made by make e2e-local's control plane")
def test_a_parent_queues_card_quota_holds_for_its_children_together(kubectl: Kubectl, fresh: None) -> None:
    kubectl.apply(_card_queue("e2e-parent", 4))
    for child in ("e2e-child-a", "e2e-child-b"):
        kubectl.apply(_card_queue(child, 4, parent="e2e-parent"))  # each within the parent: admitted
    kubectl.apply(job("under-a", 4, A100, "e2e-child-a"))
    _running(kubectl, "under-a", 4)
    kubectl.apply(job("under-b", 4, A100, "e2e-child-b"))
    held = _settled_cards(kubectl, {"e2e-child-a", "e2e-child-b"})
    if held > 4:
        raise OverAdmitted(f"{held} A100 held under parent e2e-parent, whose card.quota is 4")


@pytest.mark.skipif(not LOCAL, reason="kwok nodes are made by make e2e-local's control plane")
def test_a_pod_of_another_scheduler_charges_no_queue(kubectl: Kubectl, fresh: None, module_undo: UndoLog) -> None:
    saved = (kubectl.get("queue", "default")["metadata"].get("annotations") or {}).get("volcano.sh/card.quota")
    module_undo.change("give queue default a card.quota of 2 A100",
                       lambda: kubectl.run("annotate", "queue", "default", "--overwrite",
                                           f"volcano.sh/card.quota={saved}" if saved else "volcano.sh/card.quota-"),
                       lambda: kubectl.run("annotate", "queue", "default", "--overwrite",
                                           f"volcano.sh/card.quota={json.dumps({A100: 2})}"))
    kubectl.run("patch", "queue", "default", "--type=merge", "-p",
                json.dumps({"spec": {"capability": {"cpu": "100", "memory": "100Gi"}}}))
    foreign = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "notebook", "namespace": NAMESPACE},
               "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                        "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    kubectl.apply(foreign)  # the default scheduler's: the test places it, as that scheduler would
    kubectl.run("create", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/notebook/binding", "-f", "-",
                stdin=json.dumps({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "notebook"},
                                  "target": {"apiVersion": "v1", "kind": "Node", "name": EXTRA_NODE}}))
    kubectl.apply(job("in-default", 2, A100, "default"))
    try:
        _running(kubectl, "in-default", 2)
    except AssertionError as error:
        raise OverAdmitted("the notebook's 2 A100 (another scheduler's pod, in no queue) were charged to queue "
                           f"default, so its job of 2 A100 within default's quota of 2 waits: {error}") from None
