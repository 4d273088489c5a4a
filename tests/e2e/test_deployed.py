"""cardquota deployed on a real cluster, used the way a platform engineer would: kubectl apply, kubectl get.

Expected messages and canonical forms are computed with the same core policies the webhook runs, so these tests
check the wiring (API server → webhook → policy → answer), not a second copy of the rules.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from builders import pod, queue
from e2e.cluster import A100, Kubectl, bind, remove_namespace_and_queues, unplaced_card_pod, until

from cardquota.core import keys
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.queue import admit as admit_queue
from cardquota.core.snapshot import ClusterSnapshot

NAMESPACE = "cardquota-e2e"
QUEUE = "e2e-team-a"
SMALL_QUEUE = "e2e-team-one-card"
DRA_QUEUE = "e2e-team-one-device"


def _clean(kubectl: Kubectl) -> None:
    remove_namespace_and_queues(kubectl, NAMESPACE, QUEUE, SMALL_QUEUE, DRA_QUEUE, "e2e-bad")


@pytest.fixture(scope="module", autouse=True)
def clean_slate(kubectl: Kubectl) -> Iterator[None]:
    """Nothing left from an earlier run on the same cluster (the KUBECONFIG mode), nothing left behind."""
    _clean(kubectl)
    yield
    _clean(kubectl)


@pytest.fixture(scope="module")
def namespace(kubectl: Kubectl) -> str:
    kubectl.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return NAMESPACE


def test_an_invalid_queue_is_refused_with_the_policy_message(kubectl: Kubectl) -> None:
    bad = queue("e2e-bad", '{"NVIDIA-A100": -1}')
    expected = admit_queue(bad, None, ClusterSnapshot(), PolicyConfig())
    assert not expected.allowed
    result = kubectl.apply(bad, check=False)
    assert result.returncode != 0
    assert "denied the request" in result.stderr
    assert expected.message in result.stderr


def test_a_valid_queue_is_admitted_in_its_canonical_form(kubectl: Kubectl) -> None:
    written = queue(QUEUE, '{ "NVIDIA-A100" : 4 }')
    verdict = admit_queue(written, None, ClusterSnapshot(), PolicyConfig())
    canonical = jsonpatch.apply_patch(written, verdict.patch)["metadata"]["annotations"][keys.CARD_QUOTA]
    kubectl.apply(written)
    stored = kubectl.get("queue", QUEUE)
    assert stored["metadata"]["annotations"][keys.CARD_QUOTA] == canonical


def test_kubectl_get_queue_shows_card_quota_and_usage(kubectl: Kubectl) -> None:
    kubectl.apply(queue(QUEUE, {A100: 4}))

    def row() -> list[str] | None:
        lines = kubectl.run("get", "queue", QUEUE).stdout.splitlines()
        return lines if len(lines) == 2 and f"{A100} 0/4" in lines[1] else None

    header, line = until(row, what="the CARD-USAGE column")
    # Appended after Volcano's own columns (its Queue CRD has PARENT since v1.14): nothing of Volcano's is replaced.
    assert header.split()[0] == "NAME"
    assert header.split()[-2:] == ["CARD-QUOTA", "CARD-USAGE"]
    assert '{"NVIDIA-A100":4}' in line


def test_a_fake_gpu_node_gets_its_card_types(kubectl: Kubectl, gpu_node: str) -> None:
    def card_types() -> dict[str, Any] | None:
        text = kubectl.get("node", gpu_node)["metadata"].get("annotations", {}).get("volcano.sh/card.types")
        return json.loads(text) if text else None

    types = until(card_types, what=f"volcano.sh/card.types on {gpu_node}")
    assert types == {A100: {"resource": "nvidia.com/gpu", "count": 8, "kind": "whole"}}


def test_a_card_pod_gets_node_affinity_and_usage_moves_when_it_binds(
    kubectl: Kubectl, namespace: str, gpu_node: str,
) -> None:
    kubectl.apply(queue(QUEUE, {A100: 4}))
    # Volcano runs here: a node selector no node matches keeps it from placing the pod, which waits (pending) until
    # the test binds it.
    kubectl.apply(unplaced_card_pod("trainer-0", namespace, QUEUE))
    stored = kubectl.get("pod", "trainer-0", namespace)
    terms = stored["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100]} in terms[0]["matchExpressions"]

    def annotation(name: str, wanted: dict[str, int]) -> bool | None:
        text = kubectl.get("queue", QUEUE)["metadata"].get("annotations", {}).get(name)
        return True if text is not None and json.loads(text) == wanted else None

    until(lambda: annotation("volcano.sh/card.pending", {A100: 1}), what="the pod counted as pending")
    # The shipped manifests create card pods at cardquota's scheduling gate; the API server binds no gated pod
    # ("pod trainer-0 has non-empty .spec.schedulingGates"), so the binding waits for the lift, as a scheduler does.
    until(lambda: True if not kubectl.get("pod", "trainer-0", namespace)["spec"].get("schedulingGates") else None,
          what="the card-quota gate lifted (the queue has room)")
    bind(kubectl, "trainer-0", namespace, gpu_node)
    until(lambda: annotation("volcano.sh/card.allocated", {A100: 1}), what="the pod counted as allocated")
    until(lambda: annotation("volcano.sh/card.pending", {}), what="nothing pending any more")


def test_a_card_pod_beyond_its_queues_quota_waits_at_the_gate_until_cards_are_released(
    kubectl: Kubectl, namespace: str, gpu_node: str,
) -> None:
    """Through the real API server: the pod webhook creates card pods gated, the leader lifts the gate of the first
    (its queue's one A100 is free) and keeps the second gated — Pending, never Unschedulable, so no autoscaler adds
    a node for it — until the first is deleted."""
    kubectl.apply(queue(SMALL_QUEUE, {A100: 1}))
    kubectl.apply(unplaced_card_pod("first", namespace, SMALL_QUEUE))
    until(lambda: True if not kubectl.get("pod", "first", namespace)["spec"].get("schedulingGates") else None,
          what="the first pod's gate lifted")
    kubectl.apply(unplaced_card_pod("second", namespace, SMALL_QUEUE))
    time.sleep(3)  # fifteen of the leader's rounds
    second = kubectl.get("pod", "second", namespace)
    assert second["spec"]["schedulingGates"] == [{"name": keys.CARD_GATE}]
    conditions = {c["type"]: c for c in second.get("status", {}).get("conditions") or []}
    assert conditions.get("PodScheduled", {}).get("reason") == "SchedulingGated"  # (the API server's own)
    # Nobody but cardquota lifts it: the API server's own policy (base/card-gate-policy.yaml) refuses the patch.
    removed = kubectl.run("patch", "pod", "second", "-n", namespace, "--type=json", "-p",
                          json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}]), check=False)
    assert removed.returncode != 0
    assert "cannot be removed by hand" in removed.stderr, removed.stderr
    assert kubectl.get("pod", "second", namespace)["spec"]["schedulingGates"] == [{"name": keys.CARD_GATE}]
    kubectl.run("delete", "pod", "first", "-n", namespace, "--wait", "--timeout=60s", "--grace-period=0")
    until(lambda: True if not kubectl.get("pod", "second", namespace)["spec"].get("schedulingGates") else None,
          what="the second pod's gate lifted once the first's card was released")


def _claim_pod(name: str, namespace: str) -> dict[str, Any]:
    """A pod without cards naming the ResourceClaimTemplate ``one-device``, which no scheduler places."""
    manifest = pod(name, namespace=namespace, queue=DRA_QUEUE)
    manifest["spec"].update({"schedulerName": "volcano", "nodeSelector": {"cardquota.io/e2e-held": "true"},
                             "resourceClaims": [{"name": "d", "resourceClaimTemplateName": "one-device"}]})
    container = manifest["spec"]["containers"][0]
    container["image"] = "registry.k8s.io/pause:3.10"
    container["resources"] = {"requests": {"cpu": "10m"}, "claims": [{"name": "d"}]}
    return manifest


def test_a_pod_naming_dra_claims_waits_at_the_gate_under_its_queues_dra_quota(kubectl: Kubectl,
                                                                             namespace: str) -> None:
    """Through the real API server (resource.k8s.io/v1): the pod mutation's matchCondition sends pods naming claims,
    the webhook creates them gated under a queue's DRA capability of one device, the leader (which lists and watches
    the claims with its ClusterRole) lifts the first and keeps the second gated until the first is deleted."""
    bounded = queue(DRA_QUEUE)
    bounded["spec"]["dra"] = {"capability": {"gpu.e2e.example.com": {"count": 1}}}
    kubectl.apply(bounded)
    kubectl.apply({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                   "metadata": {"name": "one-device", "namespace": namespace},
                   "spec": {"spec": {"devices": {"requests": [
                       {"name": "d", "exactly": {"deviceClassName": "gpu.e2e.example.com"}}]}}}})
    kubectl.apply(_claim_pod("claims-first", namespace))
    until(lambda: True if not kubectl.get("pod", "claims-first", namespace)["spec"].get("schedulingGates") else None,
          what="the first claiming pod's gate lifted")
    kubectl.apply(_claim_pod("claims-second", namespace))
    assert kubectl.get("pod", "claims-second", namespace)["spec"]["schedulingGates"] == [{"name": keys.CARD_GATE}]
    time.sleep(3)  # fifteen of the leader's rounds
    assert kubectl.get("pod", "claims-second", namespace)["spec"]["schedulingGates"] == [{"name": keys.CARD_GATE}]
    kubectl.run("delete", "pod", "claims-first", "-n", namespace, "--wait", "--timeout=60s", "--grace-period=0")
    until(lambda: True if not kubectl.get("pod", "claims-second", namespace)["spec"].get("schedulingGates")
          else None, what="the second claiming pod's gate lifted once the first's device was released")
