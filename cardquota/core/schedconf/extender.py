"""Where cardquota's rules can silently stop holding, read from the scheduler's configuration: the ``extender``
plugin's stanza (which tasks it is sent, where its enqueue vote sits among the other voters) and the plugins'
arguments (the one place they are read from). Shared by the ConfigMap policy (warnings at admission), ``doctor``
and ``kubectl cardquota scheduler-conf``.

Facts about Volcano v1.15.1 this module relies on:

* ``pkg/scheduler/plugins/extender/extender.go``, ``parseExtenderConfig`` and ``IsInterested``: when
  ``extender.managedResources`` is a non-empty list, the task verbs (predicate, prioritize, preemptable,
  reclaimable, allocateFunc, deallocateFunc) are sent only for tasks with one of those names in a container's (or an
  init container's) requests or limits; other tasks pass unasked. Without it, every task is sent.
  ``jobEnqueueable`` and ``queueOverused`` are not filtered.
* ``pkg/scheduler/framework/session_plugins.go``, ``JobEnqueueable``: tiers in order, each tier's voters in order;
  the first reject (-1) rejects the job at once; after a tier in which some voter permitted (+1), the job is enqueued
  and later tiers are not asked. ``isEnabled(plugin.EnabledJobEnqueued)`` gates each voter
  (``enableJobEnqueued``, true unless written false: ``pkg/scheduler/plugins/defaults.go``).
* The voters (``AddJobEnqueueableFn``): ``capacity``, ``overcommit``, ``proportion`` and ``resourcequota`` permit
  or reject; ``sla`` permits or abstains (``pkg/scheduler/plugins/*/``); the capacity-card plugin (Volcano PR #4706)
  permits or rejects; ``extender`` answers what the service answers.

So the extender's vote counts when no tier before its own holds a voter that may permit (that tier would decide
without asking it), and no voter after it in its own tier may reject (the extender reserves the job's cards when it
permits; a later reject would leave that reservation standing for a job that stays Pending).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.keys import MGPU_CORE, MGPU_MEMORY
from cardquota.core.resources import is_card_resource
from cardquota.core.schedconf.reader import read_bool

EXTENDER = "extender"
MANAGED_RESOURCES = "extender.managedResources"
ENQUEUE_VERB = "extender.jobEnqueueableVerb"
ENQUEUE_SWITCH = "enableJobEnqueued"
TASK_VERBS = ("extender.predicateVerb", "extender.allocateFuncVerb")
"""The task verbs the rules need at placement (checked there; charged there)."""
ARGUMENT_PLUGINS = ("capacity-card", "crossquota", "predicates")
"""The plugins whose arguments cardquota's rules apply."""
MGPU_ARGUMENT_PREFIX = "predicate.MGPU"
"""Of the ``predicates`` plugin's arguments, the mGPU ones are cardquota's (the others are Volcano's own)."""
PERMITTING_VOTERS = frozenset({"capacity", "overcommit", "proportion", "resourcequota", "sla", "capacity-card"})
REJECTING_VOTERS = frozenset({"capacity", "overcommit", "proportion", "resourcequota", "capacity-card"})
MGPU_RESOURCES = (MGPU_CORE, MGPU_MEMORY)


@dataclass(frozen=True)
class PluginEntry:
    """One plugin of ``tiers[tier].plugins[index]``."""

    name: str
    tier: int
    index: int
    entry: Mapping[str, Any]

    @property
    def arguments(self) -> Mapping[str, Any]:
        arguments = self.entry.get("arguments")
        return arguments if isinstance(arguments, MAPPING_TYPES) else {}

    @property
    def path(self) -> str:
        return f"tiers[{self.tier}].plugins[{self.index}]"

    def switched_on(self, switch: str) -> bool:
        """A plugin switch (``enableJobEnqueued``…): on unless written false (Volcano's ``setDefaultIfNil``)."""
        return read_bool(self.entry.get(switch)) is not False


@dataclass(frozen=True)
class Leak:
    """A place where the configuration lets work past cardquota's rules unchecked: where (a path inside the conf,
    ``""`` for the whole conf) and what happens, in a sentence that says what to change."""

    path: str
    message: str


def plugin_entries(conf: object) -> list[PluginEntry]:
    """Every readable plugin entry of a parsed ``volcano-scheduler.conf``, in the order the scheduler runs them
    (unreadable parts are skipped: the ConfigMap policy reports them)."""
    entries: list[PluginEntry] = []
    tiers = conf.get("tiers") if isinstance(conf, MAPPING_TYPES) else None
    for tier_index, tier in enumerate(tiers if isinstance(tiers, list) else []):
        plugins = tier.get("plugins") if isinstance(tier, MAPPING_TYPES) else None
        for index, plugin in enumerate(plugins if isinstance(plugins, list) else []):
            if isinstance(plugin, MAPPING_TYPES) and isinstance(plugin.get("name"), str):
                entries.append(PluginEntry(plugin["name"], tier_index, index, plugin))
    return entries


def plugin_arguments(entries: Iterable[PluginEntry]) -> dict[str, Mapping[str, Any]]:
    """Each plugin's arguments (the last entry of a name wins, as the scheduler builds plugins by name)."""
    return {entry.name: entry.arguments for entry in entries}


def extender_entry(entries: Iterable[PluginEntry]) -> PluginEntry | None:
    return next((entry for entry in reversed(list(entries)) if entry.name == EXTENDER), None)


def managed_resources(entry: PluginEntry) -> frozenset[str] | None:
    """The resources whose tasks the extender is sent; None when every task is (absent, or an empty list)."""
    value = entry.arguments.get(MANAGED_RESOURCES)
    if not isinstance(value, list):
        return None
    names = frozenset(item for item in value if isinstance(item, str))
    return names or None


# ----------------------------------------------------------------------------------------- managed resources


def offered_resources(allocatables: Iterable[Mapping[str, Any]], card_resources: Iterable[str] = ()) -> set[str]:
    """The resources whose pods must reach the extender's task verbs: every card resource a node offers
    (``card_resources``: those discovery named, whatever their name) or could be a card by its name
    (:func:`~cardquota.core.resources.is_card_resource`: NPUs and GPUs on nodes discovery finds no card type on),
    and the mGPU resources (the extender places mGPU pods)."""
    present: set[str] = set()  # every resource some node has a positive amount of (each name judged once below)
    for allocatable in allocatables:
        for resource, amount in allocatable.items():
            if resource not in present and _positive(amount):
                present.add(resource)
    return set(card_resources) | {resource for resource in present
                                  if is_card_resource(resource) or resource in MGPU_RESOURCES}


def _positive(amount: object) -> bool:
    try:
        return bool(amount) and float(amount) > 0  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True  # (unreadable: the node policy says why; listing it costs nothing)


def managed_resource_leaks(entry: PluginEntry, offered: Iterable[str], *, crossquota: bool,
                           capability_queues: Sequence[str], card_gate: bool = False,
                           dra_queues: Sequence[str] = ()) -> list[Leak]:
    """What ``managedResources`` keeps from the extender: card resources nodes offer that it does not list, and —
    when it is set at all — every pod without a card resource (crossquota and the queues' cpu/memory capability
    check those at placement, and the DRA quotas). With the card-quota gate (``card_gate``) the gate holds the card
    and DRA quotas: only the mGPU resources must reach it (the card indexes), the capability is checked at enqueue,
    and crossquota still needs every pod."""
    managed = managed_resources(entry)
    if managed is None:
        return []
    path = entry.path
    leaks: list[Leak] = []
    needed = set(offered) & set(MGPU_RESOURCES) if card_gate else set(offered)
    missing = sorted(needed - managed)
    if missing:
        held = "mGPU card indexes unassigned" if card_gate else "card quota unchecked"
        leaks.append(Leak(path, f"managedResources leaves out {_listed(missing)}, which nodes offer: their pods "
                                f"skip the extender's predicate ({held}); add them or drop managedResources"))
    unreached = []
    if crossquota:
        unreached.append("crossquota")
    if capability_queues and not card_gate:
        unreached.append(f"the cpu/memory capability of {_listed(list(capability_queues))}")
    if dra_queues and not card_gate:
        unreached.append(f"the DRA quotas of {_listed(list(dra_queues))}")
    if unreached:
        leaks.append(Leak(path, "managedResources is set, so pods without cards skip the extender's predicate: "
                                f"{' and '.join(unreached)} not checked for them; drop managedResources"))
    return leaks


# ------------------------------------------------------------------------------------------------ enqueue vote


def enqueue_leaks(entries: Sequence[PluginEntry]) -> list[Leak]:
    """Where the extender's enqueue vote is not asked or may be overruled (see the module's docstring)."""
    extender = extender_entry(entries)
    if extender is None:
        return []
    if not isinstance(extender.arguments.get(ENQUEUE_VERB), str):
        return [Leak(extender.path, f"the extender has no {ENQUEUE_VERB}: PodGroups are enqueued without their "
                                    "card.request checked")]
    if not extender.switched_on(ENQUEUE_SWITCH):
        return [Leak(extender.path, f"the extender's {ENQUEUE_SWITCH} is false: PodGroups are enqueued without "
                                    "their card.request checked")]
    leaks: list[Leak] = []
    for entry in entries:
        if entry is extender or not entry.switched_on(ENQUEUE_SWITCH):
            continue
        if entry.tier < extender.tier and entry.name in PERMITTING_VOTERS:
            leaks.append(Leak(entry.path, f"{entry.name} votes on enqueue in tier {entry.tier}, before the "
                                          f"extender's tier {extender.tier}: its permit enqueues jobs unasked, "
                                          f"card.request unchecked; move the extender into tier {entry.tier}, "
                                          f"after {entry.name}"))
        elif entry.tier == extender.tier and entry.index > extender.index and entry.name in REJECTING_VOTERS:
            leaks.append(Leak(entry.path, f"{entry.name} votes after the extender in tier {entry.tier} and may reject "
                                          "a job the extender permitted (and reserved cards for); move the extender "
                                          f"after {entry.name}"))
    return leaks


def task_verb_leaks(extender: PluginEntry, placement_needs: Sequence[str] | None = None) -> list[Leak]:
    """Task verbs the rules need that the stanza does not set. ``placement_needs``: with the card-quota gate, why
    tasks must still reach the extender when placed (empty: they need not; None: no gate, card quotas are checked
    there)."""
    missing = [verb for verb in TASK_VERBS if not isinstance(extender.arguments.get(verb), str)]
    if not missing or placement_needs == []:
        return []
    if placement_needs is not None:
        return [Leak(extender.path, f"the extender has no {_listed(missing)}, which placement still needs: "
                                    f"{'; '.join(placement_needs)}")]
    return [Leak(extender.path, f"the extender has no {_listed(missing)}: card quotas are not "
                                f"{'checked' if TASK_VERBS[0] in missing else 'charged'} when pods are placed")]


# --------------------------------------------------------------------------------------- arguments in two places


def argument_disagreements(scheduler: Sequence[PluginEntry], extender_conf: Sequence[PluginEntry]) -> list[Leak]:
    """The plugins' arguments the scheduler's configuration writes differently from the extender's conf (the one
    the rules read when the extender serves them): each plugin of :data:`ARGUMENT_PLUGINS` the scheduler's conf
    has, argument by argument (one absent on one side counts as different; ``predicates`` only when the scheduler's
    writes mGPU arguments)."""
    theirs = plugin_arguments(extender_conf)
    leaks: list[Leak] = []
    for name, arguments in plugin_arguments(scheduler).items():
        if name not in ARGUMENT_PLUGINS or (name == "predicates" and not _compared(name, arguments)):
            continue  # (Volcano's own predicates plugin, with none of the mGPU arguments: nothing written twice)
        ours = theirs.get(name, {})
        differing = sorted(key for key in _compared(name, arguments) | _compared(name, ours)
                           if _same_value(arguments.get(key)) != _same_value(ours.get(key)))
        if differing:
            entry = next(e for e in reversed(list(scheduler)) if e.name == name)
            leaks.append(Leak(entry.path, f"{name}'s {_listed(differing)} differ from the extender's conf "
                                          "(cardquota-extender-conf), the one the extender, usage, explain and the "
                                          "events read; write them there only"))
    return leaks


def _compared(plugin: str, arguments: Mapping[str, Any]) -> set[str]:
    keys = {key for key in arguments if isinstance(key, str)}
    return {key for key in keys if key.startswith(MGPU_ARGUMENT_PREFIX)} if plugin == "predicates" else keys


def _same_value(value: object) -> object:
    """``true`` and ``"true"``, ``2`` and ``"2"`` are the same argument."""
    as_bool = read_bool(value)
    if as_bool is not None:
        return as_bool
    return str(value).strip() if value is not None else None


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:10])
    return shown + (f" and {len(names) - 10} more" if len(names) > 10 else "")


# ---------------------------------------------------------------------------------------------------- together


def placement_needs(offered: Iterable[str], *, crossquota: bool) -> list[str]:
    """With the card-quota gate: why tasks must still reach the extender's task verbs when placed, one phrase each
    (empty: they need not — the gate holds the card and DRA quotas, and the enqueue check the cpu/memory
    capability)."""
    needs = ["crossquota is configured (every task)"] if crossquota else []
    if set(offered) & set(MGPU_RESOURCES):
        needs.append("nodes offer mGPU (its tasks get their card indexes when placed)")
    return needs


def conf_leaks(scheduler: Sequence[PluginEntry], *, offered: Iterable[str], capability_queues: Sequence[str],
               arguments: Sequence[PluginEntry] | None = None, card_gate: bool = False,
               dra_queues: Sequence[str] = ()) -> list[Leak]:
    """Every leak of the scheduler's configuration (``scheduler``, its plugin entries) when it enables the
    extender: ``offered``, the card and mGPU resources nodes offer (:func:`offered_resources`);
    ``capability_queues``, the queues with a cpu/memory ``spec.capability``; ``arguments``, the entries of the
    extender's conf when it is known (the source of the plugins' arguments), else the scheduler's are taken;
    ``card_gate``, whether the card-quota gate holds the card and DRA quotas (then the task verbs are needed only
    for what crossquota and mGPU need at placement); ``dra_queues``, the queues with a DRA quota."""
    extender = extender_entry(scheduler)
    if extender is None:
        return []
    offered = list(offered)
    source = scheduler if arguments is None else arguments
    crossquota = "crossquota" in plugin_arguments(source)
    needs = placement_needs(offered, crossquota=crossquota) if card_gate else None
    leaks = [*task_verb_leaks(extender, needs), *enqueue_leaks(scheduler)]
    leaks += managed_resource_leaks(extender, offered, crossquota=crossquota, capability_queues=capability_queues,
                                    card_gate=card_gate, dra_queues=dra_queues)
    if arguments is not None:
        leaks += argument_disagreements(scheduler, arguments)
    return leaks
