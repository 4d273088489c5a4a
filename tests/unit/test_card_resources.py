"""One definition of "card resource" (issue 18 item 8): HAMi's memory/core/percentage shares and other vendors'
non-card resources are never counted as cards by the ledger, the policies or the scheduling session."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import pytest
from builders import container, gpu_node, pod, queue
from hypothesis import given, settings
from hypothesis import strategies as st

from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.cards import card_resources_requested
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.quantity import whole_units
from cardquota.core.resources import is_card_resource
from cardquota.core.scheduling.capacity_card import minimum_beyond_capability
from cardquota.core.snapshot import CardCatalog
from cardquota.core.usage import pending_cards

CARDS = ["nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/gpu.shared", "huawei.com/Ascend910",
         "huawei.com/Ascend910B", "amd.com/gpu", "habana.ai/gaudi", "aws.amazon.com/neuroncore",
         "metax-tech.com/sgpu", "cambricon.com/mlu"]
NOT_CARDS = ["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "kubernetes.io/batch-cpu",
             "scheduling.kubernetes.io/anything", "vke.volcengine.com/eni-ip", "vke.volcengine.com/mgpu-core",
             "vke.volcengine.com/mgpu-memory", "rdma/hca", "rdma/rdma_shared_device_a",
             "k8s.v1.cni.cncf.io/net1", "devices.kubevirt.io/kvm",
             # HAMi (project-hami.io) and the vendors' virtualisation plugins: memory, cores, percent, priority
             "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage", "nvidia.com/priority",
             "hygon.com/dcumem", "hygon.com/dcucores", "cambricon.com/mlu.smlu.vmemory",
             "cambricon.com/mlu.smlu.vcore", "iluvatar.ai/vcuda-core", "iluvatar.ai/vcuda-memory",
             "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core", "metax-tech.com/vmemory",
             "metax-tech.com/vcore", "huawei.com/Ascend910B-memory", "huawei.com/Ascend310P-memory"]


@pytest.mark.parametrize("resource", CARDS)
def test_card_resources(resource: str) -> None:
    assert is_card_resource(resource)


@pytest.mark.parametrize("resource", NOT_CARDS)
def test_not_card_resources(resource: str) -> None:
    assert not is_card_resource(resource)


HAMI = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}


@pytest.mark.parametrize("resource", NOT_CARDS)
def test_the_policies_and_the_ledger_use_it(resource: str) -> None:
    """Item 8: the policies' card resources and the ledger's card count of a pod (no node offers a card type)."""
    requests = {resource: Fraction(3000), "nvidia.com/gpu": Fraction(1)}
    assert card_resources_requested(requests, CardCatalog()) == {"nvidia.com/gpu": Fraction(1)}
    ledger = Ledger.build([queue("q", {"NVIDIA-A100": 4}),
                           pod("p", queue="q", card="NVIDIA-A100",
                               containers=[container(limits={"nvidia.com/gpu": "1", resource: "3000"})])])
    assert ledger.usage("q").pending == {"NVIDIA-A100": 1}


def test_a_hami_pod_is_one_pending_card_not_3031() -> None:
    """Item 8 as reported: nvidia.com/gpumem 3000 and gpucores 30 beside nvidia.com/gpu 1, no node yet."""
    ledger = Ledger.build([queue("q", {"NVIDIA-A100": 4}),
                           pod("hami", queue="q", card="NVIDIA-A100", containers=[container(limits=HAMI)])])
    assert ledger.usage("q").pending == {"NVIDIA-A100": 1}


def test_the_scheduling_rules_use_it() -> None:
    """Item 8: a job whose minResources name only HAMi shares (no card) is judged on its cpu/memory."""
    podgroup = {"spec": {"minResources": {"cpu": "8", "nvidia.com/gpumem": "3000"}}}
    assert minimum_beyond_capability(podgroup, "q", {"cpu": Fraction(4)}) is not None


RESOURCE_NAMES = ["nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/gpu.shared", "huawei.com/Ascend910",
                  "nvidia.com/gpumem", "nvidia.com/gpucores", "vke.volcengine.com/eni-ip", "cpu", "memory"]


@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from(RESOURCE_NAMES), st.integers(0, 4000), max_size=5),
       st.sampled_from(["NVIDIA-A100", "NVIDIA-A100|Ascend910"]), st.booleans())
def test_the_ledger_counts_the_cards_the_policies_count(requests: dict[str, int], card: str,
                                                        node_offers: bool) -> None:
    """Issue 21: for any pending pod naming a card type, the cards the ledger holds pending for its queue are the
    whole units of the card resources the policies see it request — with and without a node offering the type
    (one rule: resources.card_requests)."""
    objects: list[dict[str, Any]] = [queue("q", {"NVIDIA-A100": 10_000})]
    if node_offers:
        objects.append(gpu_node("n", "NVIDIA-A100", 8))
    objects.append(pod("p", queue="q", card=card,
                       containers=[container(limits={name: str(amount) for name, amount in requests.items()})]))
    ledger = Ledger.build(objects)
    counted = card_resources_requested({name: Fraction(amount) for name, amount in requests.items()},
                                       ledger.snapshot.catalog())
    assert sum(ledger.usage("q").pending.values()) == whole_units(sum(counted.values(), Fraction(0)))


@settings(max_examples=150)
@given(st.dictionaries(st.sampled_from(RESOURCE_NAMES[1:]), st.integers(0, 40), max_size=5),
       st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_a_jobs_derived_request_is_what_the_ledger_charges_its_pods(others: dict[str, int], gpus: int,
                                                                    replicas: int, node_offers: bool) -> None:
    """Issue 21: the Job policy's per-pod charge of a task (the card.request it writes for a Job without one) and
    the ledger's pending charge of the pods the task becomes are one function (usage.pending_cards). Before, the
    policy counted only the card type's own resource: a template asking nvidia.com/gpu 1 and
    nvidia.com/mig-1g.5gb 1 was 1 card per pod to the policy and 2 to the ledger."""
    limits = {"nvidia.com/gpu": str(gpus)} | {name: str(amount) for name, amount in others.items()}
    cluster: list[dict[str, Any]] = [queue("q", {"NVIDIA-A100": 10_000})]
    if node_offers:
        cluster.append(gpu_node("n", "NVIDIA-A100", 8))
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": "j", "namespace": "default"},
           "spec": {"queue": "q", "minAvailable": replicas, "tasks": [{
               "name": "worker", "replicas": replicas,
               "template": {"metadata": {"annotations": {"volcano.sh/card.name": "NVIDIA-A100"}},
                            "spec": {"containers": [container(limits=limits)]}}}]}}
    pods = [pod(f"j-worker-{index}", queue="q", card="NVIDIA-A100", containers=[container(limits=limits)])
            for index in range(replicas)]
    ledger = Ledger.build([*cluster, *pods])
    verdict = admit(job, None, Ledger.build(cluster).snapshot, PolicyConfig())
    assert verdict.allowed, verdict.message  # the template requests the card type's own resource
    written = {op["path"]: op.get("value") for op in verdict.patch}.get("/metadata/annotations") or {}
    derived = json.loads(written.get("volcano.sh/card.request", "{}"))
    assert derived.get("NVIDIA-A100", 0) == ledger.usage("q").pending.get("NVIDIA-A100", 0)


def test_the_reported_disagreement_is_gone() -> None:
    """The case above as reported: a whole card and a MIG slice beside it are 2 cards a pod to both."""
    requests = {"nvidia.com/gpu": Fraction(1), "nvidia.com/mig-1g.5gb": Fraction(1)}
    assert pending_cards(requests, frozenset()) == 2
    assert pending_cards(requests, frozenset({"nvidia.com/gpu"})) == 1  # a node offers only the whole card
