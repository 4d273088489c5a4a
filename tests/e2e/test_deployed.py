"""cardquota deployed on a real cluster, used the way a platform engineer would: kubectl apply, kubectl get.

Expected messages and canonical forms are computed with the same core policies the webhook runs, so these tests
check the wiring (API server → webhook → policy → answer), not a second copy of the rules.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from builders import gpu_labels, pod, queue
from e2e.cluster import Kubectl, fake_gpus, gpu_node_name, until
from e2e.undo import UndoLog

from cardquota.core import keys
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.queue import admit as admit_queue
from cardquota.core.snapshot import ClusterSnapshot

A100 = "NVIDIA-A100"
NAMESPACE = "cardquota-e2e"
QUEUE = "e2e-team-a"


def _clean(kubectl: Kubectl) -> None:
    kubectl.run("delete", "namespace", NAMESPACE, "--wait", "--ignore-not-found", "--timeout=120s")
    kubectl.run("delete", "queue", QUEUE, "e2e-bad", "--ignore-not-found")


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


@pytest.fixture(scope="module")
def gpu_node(kubectl: Kubectl, module_undo: UndoLog) -> str:
    """A kind worker made to look like an 8-card A100 node: product labels, and nvidia.com/gpu in its status (put
    back as they were when the module is done)."""
    name = gpu_node_name(kubectl)
    fake_gpus(kubectl, module_undo, name, gpu_labels(A100, count=8, memory=81920), {"nvidia.com/gpu": "8"})
    return name


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
    manifest = pod("trainer-0", namespace=namespace, card=A100, queue=QUEUE, gpus=1)
    manifest["spec"]["schedulerName"] = "volcano"
    # Volcano runs here: a node selector no node matches keeps it from placing the pod, which waits (pending) until
    # the test binds it (a Binding is not held to the pod's node selector or affinity).
    manifest["spec"]["nodeSelector"] = {"cardquota.io/e2e-held": "true"}
    manifest["spec"]["containers"][0]["image"] = "registry.k8s.io/pause:3.10"
    manifest["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "10m"}  # room on a 2-CPU kind node
    kubectl.apply(manifest)
    stored = kubectl.get("pod", "trainer-0", namespace)
    terms = stored["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100]} in terms[0]["matchExpressions"]

    def annotation(name: str, wanted: dict[str, int]) -> bool | None:
        text = kubectl.get("queue", QUEUE)["metadata"].get("annotations", {}).get(name)
        return True if text is not None and json.loads(text) == wanted else None

    until(lambda: annotation("volcano.sh/card.pending", {A100: 1}), what="the pod counted as pending")
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "trainer-0", "namespace": namespace},
               "target": {"apiVersion": "v1", "kind": "Node", "name": gpu_node}}
    kubectl.run("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/trainer-0/binding", "-f", "-",
                stdin=json.dumps(binding))
    until(lambda: annotation("volcano.sh/card.allocated", {A100: 1}), what="the pod counted as allocated")
    until(lambda: annotation("volcano.sh/card.pending", {}), what="nothing pending any more")
