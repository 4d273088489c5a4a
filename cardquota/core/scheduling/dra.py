"""The DRA queue quota when placing a task (dra-queue-quota-design.md): its claims must fit ``spec.dra.capability``
of its queue and of every ancestor queue — :func:`cardquota.core.dra_claims.shortage`, which the card-quota gate
applies too — said as the scheduler says it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cardquota.core.dra_claims import (
    DeviceAmount,
    DeviceAmounts,
    ancestry,
    capability,
    claim_amounts,
    number,
    shortage,
    total,
)
from cardquota.core.scheduling.refusal import Refusal

__all__ = ["INSUFFICIENT_DRA", "DeviceAmount", "DeviceAmounts", "ancestry", "claim_amounts", "quota_refusal", "total"]

INSUFFICIENT_DRA = "InsufficientDRAQuota"


def quota_refusal(queue: str, request: DeviceAmounts, allocated: Mapping[str, DeviceAmounts],
                  queue_specs: Mapping[str, Mapping[str, Any]], parents: Mapping[str, str]) -> Refusal | None:
    """None when ``allocated + request`` fits ``spec.dra.capability`` of the queue and each ancestor (a DeviceClass
    a queue sets no bound for is not limited there)."""
    short = shortage(queue, request, allocated, lambda name: capability((queue_specs.get(name) or {}).get("dra")),
                     parents)
    if short is None:
        return None
    through = "" if short.queue == queue else f" (through queue {queue})"
    return Refusal(INSUFFICIENT_DRA, f"Queue {short.queue} has insufficient {short.device_class} {short.what} quota"
                                     f"{through}: total would be {number(short.total)}, but capability is "
                                     f"{short.limit}")
