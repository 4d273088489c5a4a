"""The ``extender`` plugin's stanza, and the user's scheduler configuration with it merged in.

cardquota ships the stanza, not a whole ``volcano-scheduler-configmap``: a whole ConfigMap would replace the user's
own plugins and tuning. :func:`merged_conf` keeps every other plugin, action and configuration as it is, drops a
previous ``extender`` entry, and puts the stanza where its enqueue vote counts
(:mod:`cardquota.core.schedconf.extender`): at the end of the first tier that holds an enqueue voter (after every
voter of that tier, and with no voter in an earlier tier), else at the end of the last tier.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.schedconf.extender import (
    EXTENDER,
    MANAGED_RESOURCES,
    MGPU_RESOURCES,
    PERMITTING_VOTERS,
    REJECTING_VOTERS,
    placement_needs,
)

EXTENDER_URL = "http://cardquota-extender.cardquota-system.svc:8713"
"""The extender's Service (manifests/components/extender/extender.yaml)."""
HTTP_TIMEOUT = "500ms"
VERBS = {
    "extender.onSessionCloseVerb": "onSessionClose",
    "extender.predicateVerb": "predicate",
    "extender.prioritizeVerb": "prioritize",
    "extender.jobEnqueueableVerb": "jobEnqueueable",
    "extender.jobEnqueuedVerb": "jobEnqueued",
    "extender.jobReadyVerb": "jobReady",
    "extender.allocateFuncVerb": "allocateFunc",
    "extender.deallocateFuncVerb": "deallocateFunc",
}
"""The verbs the scheduler calls. No onSessionOpenVerb: the extender watches the cluster itself, so the scheduler
need not send it the whole cluster every cycle. ``jobEnqueuedVerb``: Volcano's master branch (ed72c7c) tells the
extender a job it permitted was enqueued (v1.15.1 does not read the key). No queueOverusedVerb: card quotas are
per card type and checked per task, and an overused answer makes Volcano's allocate skip every job of the queue, of
every type and CPU-only ones too (``if ssn.Overused(queue) { continue }``, actions/allocate, v1.15.1) — and, with
``ignorable: false``, every queue while the extender cannot be reached (``return !ep.config.ignorable``,
plugins/extender/extender.go)."""

ENQUEUE_VERBS = ("extender.jobEnqueueableVerb", "extender.jobEnqueuedVerb")
"""The verbs of the stanza that are asked once per job, not per task or node."""


@dataclass(frozen=True)
class GatedStanza:
    """What the extender is still needed for when the card-quota gate holds the card quotas (:func:`gated_stanza`).

    The gate decides, once per pod and ahead of Volcano's cycle, whether a card pod's cards fit its queue and every
    ancestor, and pins an ``A|B`` request to one type; the extender's per-(task, node) ``predicate`` and per-task
    ``prioritize`` are then needed only for the rules that are per node by nature: an mGPU pod's card indexes (its
    tasks only: ``managedResources`` lists the mGPU resources) and crossquota (every task: it cannot be told from a
    task's resource names). The gate holds the queues' DRA quotas too."""

    placement: bool
    """The task verbs (predicate, prioritize, allocateFunc, deallocateFunc, jobReady, onSessionClose) are set."""
    managed: tuple[str, ...] | None
    """``extender.managedResources`` (None: left out, every task is sent) — read only when :attr:`placement`."""
    reasons: tuple[str, ...]
    """Why the task verbs stay, one phrase each (empty when they go)."""

    @property
    def ignorable(self) -> bool:
        """``extender.ignorable``. Without task verbs nothing of a quota depends on the extender's answer (its
        enqueue vote delays, the gate holds): a transport error permits, so an extender that is down, restarting or
        slow never stops Volcano's other work. With them, an mGPU pod must not be bound without its card indexes:
        false, as before."""
        return not self.placement


def gated_stanza(offered: Iterable[str], *, crossquota: bool) -> GatedStanza:
    """The stanza's shape with the card-quota gate on: ``offered`` the card and mGPU resources nodes offer,
    ``crossquota`` whether the crossquota plugin is configured. A queue's cpu/memory ``spec.capability`` is checked
    at enqueue (the job's ``minResources``), once per job; Volcano's own proportion or capacity plugin caps a set
    capability at placement; the gate holds the card and DRA quotas."""
    offered = list(offered)
    needs = placement_needs(offered, crossquota=crossquota)
    mgpu = tuple(sorted(set(offered) & set(MGPU_RESOURCES)))
    return GatedStanza(bool(needs), None if crossquota or not needs else mgpu, tuple(needs))


DEFAULT_CONF: Mapping[str, Any] = {
    "actions": "enqueue, allocate, backfill",
    "tiers": [
        {"plugins": [{"name": "priority"}, {"name": "gang", "enablePreemptable": False}, {"name": "conformance"}]},
        {"plugins": [{"name": "overcommit"}, {"name": "drf", "enablePreemptable": False}, {"name": "predicates"},
                     {"name": "proportion"}, {"name": "nodeorder"}, {"name": "binpack"}]},
    ],
}
"""Volcano's own default (v1.15.1 ``installer/helm/chart/volcano/config/volcano-scheduler.conf``): what the
scheduler runs when the cluster has no ConfigMap to merge into."""


def extender_stanza(managed: Iterable[str] | None = None, *, url: str = EXTENDER_URL,
                    gated: GatedStanza | None = None) -> dict[str, Any]:
    """The ``extender`` plugin entry. Without the card-quota gate (``gated`` None): every verb, ``managed`` the
    resources whose tasks the scheduler sends (None: every task, which crossquota, the queues' cpu/memory capability
    and DRA quotas need). With it: the enqueue verbs, and the task verbs only where :class:`GatedStanza` says."""
    if gated is None:
        verbs, ignorable = dict(VERBS), False
    else:
        verbs = {key: verb for key, verb in VERBS.items() if gated.placement or key in ENQUEUE_VERBS}
        managed, ignorable = gated.managed, gated.ignorable
    arguments: dict[str, Any] = {"extender.urlPrefix": url, "extender.httpTimeout": HTTP_TIMEOUT, **verbs,
                                 "extender.ignorable": ignorable}
    if managed is not None and (gated is None or gated.placement):
        arguments[MANAGED_RESOURCES] = sorted(set(managed))
    return {"name": EXTENDER, "arguments": arguments}


def merged_conf(conf: object, stanza: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` (a parsed ``volcano-scheduler.conf``; None or not a map: Volcano's default) with ``stanza`` in
    place of any ``extender`` entry, where its enqueue vote counts. ``conf`` is not changed."""
    merged: dict[str, Any] = copy.deepcopy(dict(conf)) if isinstance(conf, MAPPING_TYPES) else copy.deepcopy(
        dict(DEFAULT_CONF))
    tiers = merged.get("tiers")
    if not isinstance(tiers, list):
        tiers = []
    kept: list[Any] = []
    for tier in tiers:
        if isinstance(tier, MAPPING_TYPES) and isinstance(tier.get("plugins"), list):
            plugins = [plugin for plugin in tier["plugins"]
                       if not (isinstance(plugin, MAPPING_TYPES) and plugin.get("name") == EXTENDER)]
            tier = {**tier, "plugins": plugins}
        kept.append(tier)
    target = _voting_tier(kept)
    if target is None:
        kept.append({"plugins": [dict(stanza)]})
    else:
        kept[target] = {**kept[target], "plugins": [*kept[target]["plugins"], dict(stanza)]}
    merged["tiers"] = kept
    return merged


def _voting_tier(tiers: list[Any]) -> int | None:
    """The first tier holding an enqueue voter, else the last tier with a plugin list (None: no such tier)."""
    readable = [index for index, tier in enumerate(tiers)
                if isinstance(tier, MAPPING_TYPES) and isinstance(tier.get("plugins"), list)]
    for index in readable:
        if any(isinstance(plugin, MAPPING_TYPES) and plugin.get("name") in PERMITTING_VOTERS | REJECTING_VOTERS
               for plugin in tiers[index]["plugins"]):
            return index
    return readable[-1] if readable else None
