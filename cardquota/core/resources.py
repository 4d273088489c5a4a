"""Which Kubernetes resource names can be cards: the one definition the ledger, the admission policies and the
scheduling session share.

A card resource is an extended resource (``<domain>/<name>``) counted in devices: ``nvidia.com/gpu``,
``nvidia.com/mig-1g.5gb``, ``nvidia.com/gpu.shared``, ``huawei.com/Ascend910``. Not cards:

* Kubernetes' own names (``kubernetes.io/…``, ``*.kubernetes.io/…``: hugepages, attachable volumes) and the names
  without a domain (``cpu``, ``memory``, ``ephemeral-storage``);
* Volcano Engine's mGPU and network resources (``vke.volcengine.com/mgpu-core``, ``…/mgpu-memory``, ``…/eni-ip``):
  the mGPU rules count those;
* network devices (``rdma/…``, ``k8s.v1.cni.cncf.io/…``) and KubeVirt's ``devices.kubevirt.io/…``;
* device *shares* measured in memory, cores or percent, as HAMi and the vendors' virtualisation plugins expose
  them: ``nvidia.com/gpumem`` (MiB), ``nvidia.com/gpucores`` (percent), ``nvidia.com/gpumem-percentage``,
  ``nvidia.com/priority``, ``hygon.com/dcumem``, ``cambricon.com/mlu.smlu.vmemory``, ``iluvatar.ai/vcuda-core``,
  ``mthreads.com/sgpu-memory``, ``huawei.com/Ascend910B-memory``: a pod asking ``nvidia.com/gpumem: 3000`` asks for
  3,000 MiB on a card it also requests through ``nvidia.com/gpu``, not for 3,000 cards.

Nodes' discovered card resources (:mod:`cardquota.core.cards`) are cards whatever their name; this rule decides for
a resource no node offers (yet).
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping
from fractions import Fraction

NOT_CARD_DOMAINS = ("kubernetes.io/", "vke.volcengine.com/", "rdma/", "k8s.v1.cni.cncf.io/",
                    "devices.kubevirt.io/")
"""Domains whose resources are never cards (``*.kubernetes.io/`` too)."""

_SHARE_NAME = re.compile(
    r"(?:^|[-._])(?:v?mem|memory|vmemory|v?cores?|percentage|priority)$"  # sgpu-memory, mlu.smlu.vcore, priority
    r"|^[a-z]{3}(?:mem|cores?)(?:-percentage)?$",  # gpumem, gpucores, dcumem, gpumem-percentage
    re.IGNORECASE | re.ASCII,
)


def is_card_resource(resource: str) -> bool:
    """Whether a resource name can be a card (see the module's docstring)."""
    domain, slash, name = resource.partition("/")
    if not slash or not domain or not name:
        return False
    if resource.startswith(NOT_CARD_DOMAINS) or domain.endswith(".kubernetes.io"):
        return False
    return _SHARE_NAME.search(name) is None


def card_requests(requests: Mapping[str, Fraction], offered: Container[str]) -> dict[str, Fraction]:
    """The requested resources a pod takes cards through: those some node offers as cards, else (no node offers
    any of them) every requested resource that can be a card. The one rule the ledger's count of a pod's cards and
    the policies' use."""
    positive = {name: amount for name, amount in requests.items() if amount.numerator > 0}  # (a Fraction's sign)
    known = {name: amount for name, amount in positive.items() if name in offered}
    return known or {name: amount for name, amount in positive.items() if is_card_resource(name)}
