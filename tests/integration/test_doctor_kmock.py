"""``kubectl cardquota doctor`` against a live API (kmock), through a kubeconfig as a cluster admin runs it.

Healthy: the real operator runs against kmock (managed certificates: it writes the TLS Secret and every webhook's
caBundle; it takes the Lease as the pod named by $HOSTNAME; it publishes the queues' usage), and doctor passes every
check. Broken: a cluster seeded with what goes wrong in practice exits 1 with a fix under each ✗ line. A refused
read (403) makes its check "cannot tell" and the exit 2. The doctor section of the documentation (docs/doctor.md)
shows these two runs: the test runs them again and compares.
"""

from __future__ import annotations

import asyncio
import copy
import io
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from builders import node
from kubeconfigs import write_kubeconfig
from operator_runs import operator_running
from polling import eventually
from unit.test_doctor import (
    LEADER,
    STANDBY,
    _gate_policy,
    bundle_of,
    certificates,
    crds,
    installation_objects,
    lease,
    nodes,
    operator_deployment,
    operator_pod,
    scheduler_configmap,
    scheduler_deployment,
    webhook_configurations,
    with_conf,
    workload,
)
from user_docs import section
from volcano_crds import upstream_crd

from cardquota.cli.main import run
from cardquota.core.crd_additions import JOB_CRD
from cardquota.operator.leader import LeaderElection

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

NAMESPACE = "cardquota-system"
PLURALS = {"CustomResourceDefinition": "customresourcedefinitions", "Deployment": "deployments",
           "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
           "MutatingWebhookConfiguration": "mutatingwebhookconfigurations", "Secret": "secrets", "Pod": "pods",
           "Lease": "leases", "ConfigMap": "configmaps", "Node": "nodes", "Queue": "queues", "PodGroup": "podgroups",
           "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
           "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}
NEITHER_PLUGIN = """actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""


def kubeconfig(tmp_path: Path, url: str) -> str:
    return write_kubeconfig(tmp_path, url)


async def doctor(kmock: Any, tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = ["doctor", "--kubeconfig", kubeconfig(tmp_path, str(kmock.url)), *argv]
    code = await asyncio.to_thread(run, "kubectl cardquota", args, out, err)  # the client blocks
    return code, out.getvalue(), err.getvalue()


def seed(kmock: Any, objects: list[dict[str, Any]]) -> None:
    """Put the objects into kmock, as the API server would hold them."""
    for manifest in objects:
        metadata = manifest["metadata"]
        resource = f"{manifest['apiVersion']}/{PLURALS[manifest['kind']]}"
        kmock.objects[resource, metadata.get("namespace"), metadata["name"]] = copy.deepcopy(manifest)


def readme_runs() -> list[str]:
    """The outputs the doctor section (README or docs/) shows, in order (healthy, then broken)."""
    blocks = [block.split("```", 1)[0] for block in section("`kubectl cardquota doctor`").split("```console\n")[1:]]
    runs = [block.split("$ kubectl cardquota doctor\n", 1)[1] for block in blocks]
    assert len(runs) == 2
    return runs


def healthy_cluster_before_the_operator() -> list[dict[str, Any]]:
    """A healthy cluster's objects, less what the operator writes itself (TLS Secret, caBundles, Lease, usage)."""
    queues, podgroups, pods = workload()
    return [*crds().values(), scheduler_deployment(), *webhook_configurations(None).values(), operator_deployment(),
            operator_pod(LEADER), operator_pod(STANDBY), scheduler_configmap(), *nodes(), *queues, *podgroups, *pods,
            *_gate_policy()]


def broken_cluster(now: float) -> list[dict[str, Any]]:
    """What goes wrong in practice: Volcano upgraded (its Job CRD re-applied without our column), the mutating
    configuration deleted, a caBundle from a CA since replaced, a crashing replica and a Lease nobody renews, a
    scheduler without the card plugins, a GPU node without feature discovery's labels, usage not published."""
    objects = []
    for manifest in installation_objects(now):
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        if kind == "CustomResourceDefinition" and name == JOB_CRD:
            manifest = upstream_crd(JOB_CRD, "v1.15.1")
        elif kind == "MutatingWebhookConfiguration":
            continue
        elif kind == "ValidatingWebhookConfiguration":
            manifest = webhook_configurations(bundle_of(certificates(now)))[kind]
        elif kind == "Pod" and name == STANDBY:
            manifest = operator_pod(STANDBY, ready=False, waiting="CrashLoopBackOff")
        elif kind == "Lease":
            manifest = lease(f"{LEADER}-1a2b3c4d", renewed=now - 190)
        elif kind == "ConfigMap":
            manifest = with_conf(NEITHER_PLUGIN)
        elif kind == "Queue" and name == "team-a":
            del manifest["metadata"]["annotations"]["volcano.sh/card.usage"]
        elif kind == "Queue" and name == "team-b":
            manifest["metadata"]["annotations"]["volcano.sh/card.usage"] = "NVIDIA-A100 1/2"
        objects.append(manifest)
    return [*objects, node("gpu-7", allocatable={"nvidia.com/gpu": "4"})]


async def test_a_healthy_installation_passes_every_check(volcano_kmock: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    seed(volcano_kmock, healthy_cluster_before_the_operator())
    monkeypatch.setenv("HOSTNAME", LEADER)  # the operator names itself after its pod, as in the cluster
    monkeypatch.setattr(LeaderElection.run, "__defaults__", (0.5,))

    def objects(resource: str) -> list[dict[str, Any]]:
        return [dict(o) for o in volcano_kmock.objects.values() if o.get("kind") == resource]

    def settled() -> bool:
        webhooks = [w for c in objects("ValidatingWebhookConfiguration") + objects("MutatingWebhookConfiguration")
                    for w in c["webhooks"]]
        queues = [q for q in objects("Queue") if "volcano.sh/card.quota" in q["metadata"].get("annotations", {})]
        return (bool(objects("Lease")) and all(w.get("clientConfig", {}).get("caBundle") for w in webhooks)
                and all("volcano.sh/card.usage" in q["metadata"]["annotations"] for q in queues))

    async with operator_running(volcano_kmock, tmp_path, dev=False, cert_dir="", namespace=NAMESPACE,
                                publish_window=0.1):
        await eventually(settled, timeout=20)
        code, text, err = await doctor(volcano_kmock, tmp_path)
    assert (code, err) == (0, ""), text
    lines = text.splitlines()
    assert [line[0] for line in lines[:-1] if line and line[0] in "✓!✗?"] == ["✓"] * 15
    assert text == readme_runs()[0]


async def test_a_broken_installation_says_what_to_fix(volcano_kmock: Any, tmp_path: Path) -> None:
    seed(volcano_kmock, broken_cluster(time.time()))
    code, text, err = await doctor(volcano_kmock, tmp_path)
    assert (code, err) == (1, "")
    lines = text.splitlines()
    failing = [index for index, line in enumerate(lines[:-1]) if line.startswith("✗")]
    assert len(failing) == 6
    assert lines[-1] == "✗ 6 failed, 3 warnings, 7 ok"
    for index in failing:  # each ✗ line is followed (after its details) by the fix
        fix = next(line for line in lines[index + 1:] if not line.startswith("    ") or line.startswith("    →"))
        assert fix.startswith("    → "), lines[index]
    assert text == readme_runs()[1]


async def test_a_refused_read_cannot_be_told_and_exits_2(volcano_kmock: Any, tmp_path: Path) -> None:
    seed(volcano_kmock, installation_objects(time.time()))
    message = ('secrets "cardquota-webhook-tls" is forbidden: User "dev" cannot get resource "secrets" in API group '
               '"" in the namespace "cardquota-system"')
    volcano_kmock["get", f"/api/v1/namespaces/{NAMESPACE}/secrets/cardquota-webhook-tls"] << 403 << {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
        "message": message}
    code, text, err = await doctor(volcano_kmock, tmp_path)
    assert (code, err) == (2, ""), text
    assert (f"? cannot tell the caBundle verifies the serving certificate in Secret {NAMESPACE}/cardquota-webhook-tls: "
            f"not allowed (HTTP 403: {message})") in text.splitlines()
    assert text.endswith("? 1 cannot tell, 14 ok\n")
    # Something definitely wrong besides: exit 1.
    del volcano_kmock.objects["coordination.k8s.io/v1/leases", NAMESPACE, "cardquota-controller"]
    code, text, _ = await doctor(volcano_kmock, tmp_path, "-o", "json")
    assert code == 1
    assert '"status": "fail"' in text
