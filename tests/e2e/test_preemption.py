"""Preemption at the card-quota gate on a real control plane (issue 42): a Queue annotated
``cardquota.io/preemption: LowerPriority`` lets an urgent card pod waiting at the gate displace the queue's admitted
lower-priority pods. The keeper evicts them through the API server's Eviction API — so PodDisruptionBudgets hold —
and lets the urgent pod through once they are being deleted; its cards never exceed the quota meanwhile.

The pods are Volcano's (``schedulerName: volcano``) with a node selector nothing matches, so no scheduler places them:
the test binds each once its gate is lifted, onto the suite's GPU node, where the node's kubelet (kind's, or kwok's
under ``make e2e-local``) runs it. The audit-log checks (who called the Eviction API, on which pod) need
``make e2e-local``'s API server; elsewhere they are left out.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from builders import queue
from e2e.cluster import A100, Kubectl, bind, remove_namespace_and_queues, unplaced_card_pod, until
from e2e.test_rbac_audit import AUDIT_LOG, Request, requests
from e2e.undo import UndoLog

from cardquota.core import keys

NAMESPACE = "cardquota-e2e-preempt"
QUEUE = "e2e-preempt"
BUDGET_QUEUE = "e2e-preempt-budget"
LOW, HIGH = "cardquota-e2e-low", "cardquota-e2e-high"
PRIORITIES = {LOW: 10, HIGH: 1000}
GROUP_NAME = "scheduling.k8s.io/group-name"
"""Volcano's pod-group controller gives a pod of its own without one a PodGroup of its own, named here: the unit
cardquota evicts and reports on is then that PodGroup."""
REFUSAL_TIMEOUT = 150.0
"""Seconds for a budget's refusal to show in the urgent pod's gate event (the publisher says something new about an
object at most once a minute), and for the eviction once the budget is gone (the keeper leaves a refused victim
alone 10 s, doubling at each refusal in a row up to 60 s)."""


def _clean(kubectl: Kubectl) -> None:
    remove_namespace_and_queues(kubectl, NAMESPACE, QUEUE, BUDGET_QUEUE)


@pytest.fixture(scope="module", autouse=True)
def clean_slate(kubectl: Kubectl) -> Iterator[None]:
    _clean(kubectl)
    yield
    _clean(kubectl)


@pytest.fixture(scope="module")
def namespace(kubectl: Kubectl) -> str:
    kubectl.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return NAMESPACE


@pytest.fixture(scope="module")
def priority_classes(kubectl: Kubectl, module_undo: UndoLog) -> None:
    """A low and a high PriorityClass (the API server's Priority admission plugin writes their values into the pods'
    ``spec.priority``); deleted when the module is done."""
    names = list(PRIORITIES)
    module_undo.change(f"create PriorityClasses {', '.join(f'{n} ({v})' for n, v in PRIORITIES.items())}",
                       lambda: kubectl.run("delete", "priorityclass", *names, "--ignore-not-found"),
                       lambda: [kubectl.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                               "metadata": {"name": name}, "value": value})
                                for name, value in PRIORITIES.items()])


def _preempting_queue(name: str, cards: int) -> dict[str, Any]:
    made = queue(name, {A100: cards})
    made["metadata"]["annotations"][keys.PREEMPTION] = "LowerPriority"
    return made


def _pod(kubectl: Kubectl, name: str) -> dict[str, Any] | None:
    return kubectl.find("pod", name, NAMESPACE)


def _gated(manifest: Mapping[str, Any]) -> bool:
    return bool(manifest["spec"].get("schedulingGates"))


def _released(manifest: Mapping[str, Any] | None, uid: str) -> bool:
    """The pod of that uid is gone or being deleted (an evicted pod, as the gate counts it: releasing)."""
    return manifest is None or manifest["metadata"]["uid"] != uid or "deletionTimestamp" in manifest["metadata"]


def _cards(manifest: Mapping[str, Any]) -> int:
    return sum(int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
               for c in manifest["spec"]["containers"])


def _admit_and_run(kubectl: Kubectl, name: str, queue_name: str, node: str, **labels: str) -> dict[str, Any]:
    """A low-priority card pod let through the gate (its queue has room), bound to ``node`` and running there."""
    manifest = unplaced_card_pod(name, NAMESPACE, queue_name, priority_class=LOW)
    manifest["metadata"]["labels"] = labels
    kubectl.apply(manifest)
    until(lambda: True if not _gated(kubectl.get("pod", name, NAMESPACE)) else None, what=f"{name}'s gate lifted")
    bind(kubectl, name, NAMESPACE, node)
    running: dict[str, Any] = until(
        lambda: pod if (pod := kubectl.get("pod", name, NAMESPACE)).get("status", {}).get("phase") == "Running"
        and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])
        else None, what=f"{name} running on {node}")
    assert running["spec"]["priority"] == PRIORITIES[LOW]
    return running


def _unit_names(manifest: Mapping[str, Any]) -> set[str]:
    """What cardquota's events about this pod's unit name: the pod, or the PodGroup it belongs to."""
    group = (manifest["metadata"].get("annotations") or {}).get(GROUP_NAME)
    return {manifest["metadata"]["name"], *([group] if group else [])}


def _events(kubectl: Kubectl, names: set[str], reason: str) -> list[dict[str, Any]]:
    items = json.loads(kubectl.run("get", "events", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    return [e for e in items if e.get("reason") == reason and e["involvedObject"].get("name") in names]


def _evictions(pod_name: str) -> list[Request]:
    """cardquota's calls of the Eviction API on that pod (each eviction and its dry run), from the audit log."""
    return [r for r in requests() if r.account == "cardquota" and r.resource == "pods/eviction"
            and r.namespace == NAMESPACE and r.name == pod_name]


@dataclass
class HeldCards:
    """Samples, each from one list of the namespace's pods, of the cards held in a queue: pods past the gate and not
    being deleted (the gate's own count: a pod being deleted is releasing), unfinished."""

    kubectl: Kubectl
    queue: str
    most: int = 0
    samples: int = 0
    worst: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def sample(self) -> None:
        pods = json.loads(self.kubectl.run("get", "pods", "-n", NAMESPACE, "-o", "json").stdout)["items"]
        holding = [p for p in pods
                   if (p["metadata"].get("annotations") or {}).get("scheduling.volcano.sh/queue-name") == self.queue
                   and not _gated(p) and "deletionTimestamp" not in p["metadata"]
                   and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        held = sum(_cards(p) for p in holding)
        self.samples += 1
        if held > self.most:
            self.most, self.worst = held, [p["metadata"]["name"] for p in holding]


@contextmanager
def watching(kubectl: Kubectl, queue_name: str, quota: int) -> Iterator[HeldCards]:
    """Sample the queue's held cards while the block runs (every half second, on a thread), then assert they never
    exceeded ``quota``."""
    held, stop = HeldCards(kubectl, queue_name), threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                held.sample()
            except Exception as error:  # (reported when the block ends)
                held.errors.append(error)
            stop.wait(0.5)

    thread = threading.Thread(target=run, name="held-cards", daemon=True)
    thread.start()
    try:
        yield held
    finally:
        stop.set()
        thread.join(timeout=60)
    held.sample()
    assert not held.errors, f"sampling the held cards failed: {held.errors[0]}"
    assert held.samples > 2
    assert held.most <= quota, f"{held.most} A100 held in queue {queue_name} (quota {quota}): {held.worst}"


def test_an_urgent_pod_preempts_exactly_the_lower_priority_pod_it_needs_through_the_eviction_api(
    kubectl: Kubectl, namespace: str, gpu_node: str, priority_classes: None,
) -> None:
    kubectl.apply(_preempting_queue(QUEUE, 2))
    with watching(kubectl, QUEUE, 2):
        lows = {name: _admit_and_run(kubectl, name, QUEUE, gpu_node) for name in ("low-0", "low-1")}
        kubectl.apply(unplaced_card_pod("urgent", namespace, QUEUE, priority_class=HIGH))
        assert kubectl.get("pod", "urgent", namespace)["spec"]["priority"] == PRIORITIES[HIGH]

        def released() -> list[str] | None:
            gone = [name for name, low in lows.items() if _released(_pod(kubectl, name), low["metadata"]["uid"])]
            return gone or None

        victims = until(released, what="a low-priority pod evicted for the urgent one")
        urgent = until(lambda: pod if not _gated(pod := kubectl.get("pod", "urgent", namespace)) else None,
                       what="the urgent pod let through the gate")
        assert urgent["metadata"]["annotations"].get(keys.ADMITTED_BY_PREEMPTION) == "true"
        bind(kubectl, "urgent", namespace, gpu_node)
        assert kubectl.get("pod", "urgent", namespace)["spec"]["nodeName"] == gpu_node
        # One card was needed: exactly one victim, the other low pod untouched.
        assert len(victims) == 1, victims
        [victim] = victims
        [survivor] = [name for name in lows if name != victim]
        still = kubectl.get("pod", survivor, namespace)
        assert not _released(still, lows[survivor]["metadata"]["uid"])
        assert still["status"]["phase"] == "Running"

    preempted = until(lambda: _events(kubectl, _unit_names(lows[victim]), "Preempted") or None,
                      what=f"the Preempted event on {victim}")
    assert {e["type"] for e in preempted} == {"Warning"}
    assert f"(priority {PRIORITIES[HIGH]})" in preempted[0]["message"]
    assert QUEUE in preempted[0]["message"]
    preempting = until(lambda: _events(kubectl, _unit_names(urgent), "Preempting") or None,
                       what="the Preempting event on the urgent pod")
    assert {e["type"] for e in preempting} == {"Normal"}
    assert f"(priority {PRIORITIES[LOW]})" in preempting[0]["message"]
    assert any(name in preempting[0]["message"] for name in _unit_names(lows[victim])), preempting[0]["message"]
    assert not _events(kubectl, _unit_names(still), "Preempted")
    if AUDIT_LOG:  # through the Eviction API, by cardquota's account, on the victim alone; never a delete
        assert {(r.verb, r.code) for r in _evictions(victim)} == {("create", 201)}, _evictions(victim)
        assert not _evictions(survivor)
        assert not [r for r in requests() if r.account == "cardquota" and r.verb == "delete"
                    and r.resource == "pods"]


def test_a_disruption_budget_keeps_the_only_victim_running_until_it_is_deleted(
    kubectl: Kubectl, namespace: str, gpu_node: str, priority_classes: None,
) -> None:
    kubectl.apply(_preempting_queue(BUDGET_QUEUE, 1))
    guarded = _admit_and_run(kubectl, "guarded", BUDGET_QUEUE, gpu_node, app="guarded")
    uid = guarded["metadata"]["uid"]
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
              "metadata": {"name": "guarded", "namespace": namespace},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}
    kubectl.apply(budget)

    def judged() -> bool | None:  # (the disruption controller's status: until then the keeper takes it as refusing)
        stored = kubectl.get("pdb", "guarded", namespace)
        status = stored.get("status") or {}
        return True if (status.get("observedGeneration") == stored["metadata"]["generation"]
                        and status.get("currentHealthy") == 1 and status.get("disruptionsAllowed") == 0) else None

    until(judged, what="the budget's status: 1 healthy pod, 0 disruptions allowed")
    with watching(kubectl, BUDGET_QUEUE, 1):
        kubectl.apply(unplaced_card_pod("urgent-2", namespace, BUDGET_QUEUE, priority_class=HIGH))

        def refusal() -> dict[str, Any] | None:
            assert not _released(_pod(kubectl, "guarded"), uid), "the guarded pod was evicted despite its budget"
            assert _gated(kubectl.get("pod", "urgent-2", namespace)), "the urgent pod went through"
            said = [e for e in _events(kubectl, _unit_names(kubectl.get("pod", "urgent-2", namespace)),
                                       "WaitingAtCardQuotaGate") if "PodDisruptionBudget" in e["message"]]
            return said[0] if said else None

        event = until(refusal, timeout=REFUSAL_TIMEOUT, every=3, what="the gate event saying a budget refuses")
        assert f"not preempting: evicting the lower-priority workloads of queue {BUDGET_QUEUE}" in event["message"]
        if AUDIT_LOG:  # the budgets were read, and no eviction of the guarded pod was even tried
            assert [r for r in requests() if r.account == "cardquota" and r.verb == "list"
                    and r.resource == "poddisruptionbudgets" and r.namespace == namespace and r.code == 200]
            assert not _evictions("guarded")
        kubectl.run("delete", "pdb", "guarded", "-n", namespace)
        until(lambda: True if _released(_pod(kubectl, "guarded"), uid) else None, timeout=REFUSAL_TIMEOUT,
              what="the guarded pod evicted once its budget is gone")
        urgent = until(lambda: pod if not _gated(pod := kubectl.get("pod", "urgent-2", namespace)) else None,
                       what="the urgent pod let through the gate")
        assert urgent["metadata"]["annotations"].get(keys.ADMITTED_BY_PREEMPTION) == "true"
        bind(kubectl, "urgent-2", namespace, gpu_node)
    if AUDIT_LOG:
        assert ("create", 201) in {(r.verb, r.code) for r in _evictions("guarded")}
