"""crossquota (crossquota-design.md): how much of a GPU node's CPU, memory (or other resources) pods that use no
GPU may take, and where such pods fit best.

* a **GPU node** offers (allocatable) a resource matching one of ``gpu-resource-names`` (Go regular expressions,
  searched anywhere in the name); a **CPU pod** requests none. Without ``gpu-resource-names`` (cardquota's reading;
  the upstream plugin's default is ``nvidia.com/gpu`` alone), the GPU resources are the card resources nodes offer,
  as ``kubectl cardquota scheduler-conf --managed-resources offered`` lists them
  (:func:`~cardquota.core.schedconf.extender.offered_resources`: those card discovery names, any resource that can
  be a card by its name, NPUs such as ``huawei.com/Ascend910`` included, and the mGPU resources) — so the cap holds
  on every accelerator node, not on NVIDIA's only;
* a GPU node's **quota** per quota resource, first found: node annotation ``volcano.sh/crossquota-<r>`` (absolute),
  node annotation ``volcano.sh/crossquota-percentage-<r>`` (of allocatable), plugin argument ``quota.<r>``,
  plugin argument ``quota-percentage.<r>``, else the whole allocatable;
* **predicate**: a CPU pod fits a GPU node when, for every quota resource, what the node's CPU pods use plus its
  request stays within the quota;
* **score** (CPU pods on GPU nodes only), per the pod's ``volcano.sh/crossquota-scoring-strategy``:
  most-allocated (default) ``(used + request) / quota``, least-allocated ``(quota - used - request) / quota``,
  each times the resource's weight, summed, divided by the summed weights, times ``crossQuotaWeight``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from cardquota.core.errors import InputError
from cardquota.core.keys import (
    ANNOTATION_QUOTA_PERCENTAGE_PREFIX,
    ANNOTATION_QUOTA_PREFIX,
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    SCORING_STRATEGY_ANNOTATION,
)
from cardquota.core.quantity import parse_quantity
from cardquota.core.schedconf.extender import offered_resources
from cardquota.core.schedconf.goregex import compile_go_regex
from cardquota.core.schedconf.reader import read_number
from cardquota.core.scheduling.refusal import Refusal

PLUGIN = "crossquota"
QUOTA_EXCEEDED = "CrossQuotaExceeded"
DEFAULT_PLUGIN_WEIGHT = 10
DEFAULT_RESOURCE_WEIGHTS = {"cpu": 10, "memory": 1}


@dataclass(frozen=True)
class CrossQuotaConfig:
    gpu_patterns: tuple[re.Pattern[str], ...] | None = None
    """``gpu-resource-names`` as written; None when it is not: the card resources nodes offer (the module's doc)."""
    quota_resources: tuple[str, ...] = ("cpu",)
    quotas: Mapping[str, Fraction] = field(default_factory=dict)
    quota_percentages: Mapping[str, Fraction] = field(default_factory=dict)
    plugin_weight: float = DEFAULT_PLUGIN_WEIGHT
    resource_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_RESOURCE_WEIGHTS))

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> CrossQuotaConfig:
        """The plugin's arguments (validated by the ConfigMap policy; what cannot be read falls back to defaults)."""
        names = _list(arguments.get("gpu-resource-names"))
        patterns = tuple(p for p in (compile_go_regex(name) for name in names) if p is not None) if names else None
        quotas: dict[str, Fraction] = {}
        percentages: dict[str, Fraction] = {}
        weights: dict[str, float] = dict(DEFAULT_RESOURCE_WEIGHTS)
        for key, value in arguments.items():
            if not isinstance(key, str):
                continue
            if key.startswith("quota-percentage."):
                number = read_number(value)
                if number is not None and 0 <= number <= 100:
                    percentages[key.removeprefix("quota-percentage.")] = number
            elif key.startswith("quota."):
                amount = _quantity(value)
                if amount is not None and amount >= 0:
                    quotas[key.removeprefix("quota.")] = amount
            elif key.startswith("weight."):
                number = read_number(value)
                if number is not None and number >= 0:
                    weights[key.removeprefix("weight.")] = _float(number, 1.0)
        resources = _list(arguments.get("quota-resources")) or sorted({*quotas, *percentages}) or ["cpu"]
        plugin_weight = read_number(arguments.get("crossQuotaWeight"))
        return cls(gpu_patterns=patterns, quota_resources=tuple(resources), quotas=quotas,
                   quota_percentages=percentages,
                   plugin_weight=_float(plugin_weight, DEFAULT_PLUGIN_WEIGHT),
                   resource_weights=weights)

    def weight(self, resource: str) -> float:
        return self.resource_weights.get(resource, 1.0)


def is_gpu_node(allocatable: Mapping[str, object], config: CrossQuotaConfig,
                card_resources: Collection[str] = ()) -> bool:
    """Whether the node offers a GPU resource (``card_resources``: those card discovery found on it)."""
    if config.gpu_patterns is None:
        return bool(offered_resources([allocatable], card_resources))
    return any(pattern.search(resource) for resource in allocatable for pattern in config.gpu_patterns)


def is_cpu_pod(requests: Mapping[str, Fraction], config: CrossQuotaConfig,
               card_resources: Collection[str] = ()) -> bool:
    """Whether the pod requests no GPU resource (``card_resources``: those of the node it is judged on)."""
    if config.gpu_patterns is None:
        return not offered_resources([requests], ()) and not any(
            amount and resource in card_resources for resource, amount in requests.items())
    return not any(amount and pattern.search(resource)
                   for resource, amount in requests.items() for pattern in config.gpu_patterns)


def node_quota(annotations: Mapping[str, str], allocatable: Mapping[str, Fraction],
               config: CrossQuotaConfig) -> dict[str, Fraction]:
    """The node's quota per quota resource, in the seed's priority order."""
    quota: dict[str, Fraction] = {}
    for resource in config.quota_resources:
        total = allocatable.get(resource, Fraction(0))
        absolute = _quantity(annotations.get(f"{ANNOTATION_QUOTA_PREFIX}{resource}"))
        percentage = read_number(annotations.get(f"{ANNOTATION_QUOTA_PERCENTAGE_PREFIX}{resource}"))
        if absolute is not None and absolute >= 0:
            quota[resource] = absolute
        elif percentage is not None and 0 <= percentage <= 100:
            quota[resource] = total * percentage / 100
        elif resource in config.quotas:
            quota[resource] = config.quotas[resource]
        elif resource in config.quota_percentages:
            quota[resource] = total * config.quota_percentages[resource] / 100
        else:
            quota[resource] = total
    return quota


def predicate_refusal(node: str, request: Mapping[str, Fraction], used: Mapping[str, Fraction],
                      quota: Mapping[str, Fraction], config: CrossQuotaConfig) -> Refusal | None:
    """None when a CPU pod's request fits the GPU node's quota for every quota resource."""
    for resource in config.quota_resources:
        wanted = request.get(resource, Fraction(0))
        total = used.get(resource, Fraction(0)) + wanted
        limit = quota.get(resource, Fraction(0))
        if total > limit:
            return Refusal(QUOTA_EXCEEDED, f"{resource} quota exceeded on GPU node {node}: pods without GPUs would "
                                           f"use {_number(total)} of {_number(limit)}")
    return None


def scoring_strategy(annotations: Mapping[str, str]) -> str:
    value = annotations.get(SCORING_STRATEGY_ANNOTATION, MOST_ALLOCATED)
    return value if value in (MOST_ALLOCATED, LEAST_ALLOCATED) else MOST_ALLOCATED


def score(strategy: str, request: Mapping[str, Fraction], used: Mapping[str, Fraction],
          quota: Mapping[str, Fraction], config: CrossQuotaConfig) -> float:
    """The seed's formula: weighted mean of the per-resource scores, times the plugin weight."""
    total = 0.0
    weights = 0.0
    for resource in config.quota_resources:
        weight = config.weight(resource)
        limit = quota.get(resource, Fraction(0))
        if limit > 0:
            after = used.get(resource, Fraction(0)) + request.get(resource, Fraction(0))
            ratio = after / limit if strategy == MOST_ALLOCATED else (limit - after) / limit
            total += float(ratio) * weight
        weights += weight
    return total / weights * config.plugin_weight if weights else 0.0


def _float(number: Fraction | None, default: float) -> float:
    """A non-negative argument as a float; ``default`` when unset, negative or beyond a float's range."""
    if number is None or number < 0:
        return default
    try:
        return float(number)
    except OverflowError:
        return default


def _list(value: object) -> list[str]:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, list):
        return [str(item).strip() for item in value if str(item).strip()]
    return []


def _quantity(value: object) -> Fraction | None:
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except InputError:
        return None


def _number(value: Fraction) -> str:
    return f"{float(value):g}"
