"""The Volcano scheduler ConfigMap (``v1`` ConfigMap named :attr:`PolicyConfig.scheduler_configmap`).

Its ``data["volcano-scheduler.conf"]`` must be one YAML document with ``actions`` (a comma-separated string) and
``tiers`` (a list of ``{plugins: [{name, arguments}]}``). The arguments of the plugins cardquota works with are
checked as their designs define them:

* ``capacity-card``: ``cardUnlimitedCpuMemory`` bool, ``nodeOrderWeight`` number > 0; the plugin must not be
  enabled together with ``capacity`` or ``proportion``;
* ``crossquota``: ``gpu-resource-names`` comma-separated regular expressions (Go syntax), ``quota-resources``
  comma-separated resource names, ``quota.<resource>`` quantities ≥ 0, ``quota-percentage.<resource>`` numbers
  from 0 to 100, ``crossQuotaWeight`` and ``weight.<resource>`` numbers ≥ 0;
* ``predicates`` (mGPU): ``predicate.MGPUEnable`` bool, ``predicate.MGPUPolicy`` binpack or spread (any case),
  ``predicate.MGPUScheduleMode`` index or id, ``predicate.MGPUWeightOfCore`` from 0 to 100,
  ``predicate.MGPUMaxContainersPerCard`` whole number ≥ 1.

A number may be written as a YAML number or a string (``2.0`` or ``"2.0"``), a bool as ``true`` or ``"true"``.

What makes Volcano's scheduler refuse the whole configuration — it then logs the error and keeps running the one it
had, at start its built-in default without the ``extender`` (``loadSchedulerConf`` in pkg/scheduler/scheduler.go,
``UnmarshalSchedulerConf`` in pkg/scheduler/util.go, v1.15.1 and master) — is refused here too: an action it does
not have (:data:`VOLCANO_ACTIONS`), a plugin switch (``enablePredicate``, ``enableJobEnqueued``…) that is not a YAML
bool (a ``*bool`` read by gopkg.in/yaml.v2, which takes no string or number for it), and ``drf`` with
``enableHierarchy: true`` beside ``proportion`` in one tier.
A configuration that enables the ``extender`` plugin and is otherwise valid is allowed with a warning for each place
where work would pass the rules unchecked (:mod:`cardquota.core.schedconf.extender`): a card resource some node
offers that ``managedResources`` leaves out, crossquota or a queue's cpu/memory capability that ``managedResources``
makes unreachable, an enqueue vote the scheduler may never ask or may overrule, a task verb left out.

The configuration must be under ``data``: one under ``binaryData`` is refused (:func:`binary_conf_violations`).

Other ConfigMaps are allowed untouched. Never raises: bad input becomes :class:`Violation` values.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cardquota.core.errors import InputError, one_line
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest
from cardquota.core.policies.common import ratcheting
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.quantity import parse_quantity
from cardquota.core.schedconf.extender import conf_leaks, offered_resources, plugin_entries
from cardquota.core.schedconf.goregex import go_regex_problem
from cardquota.core.schedconf.reader import (
    CONF_KEY,
    document_end_problem,
    read_bool,
    read_int,
    read_number,
)
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict, allow, decide
from cardquota.core.violations import (
    FieldPath,
    Reason,
    Violation,
    forbidden,
    invalid,
    not_supported,
    required,
    shown,
    type_name,
    written,
)
from cardquota.core.yamltext import load_one

CONF_PATH = FieldPath.of("data").escaped_key(CONF_KEY)
BINARY_CONF_PATH = FieldPath.of("binaryData").escaped_key(CONF_KEY)

CAPACITY_CARD = "capacity-card"
CROSSQUOTA = "crossquota"
EXTENDER = "extender"
PREDICATES = "predicates"
CONFLICTS_WITH_CAPACITY_CARD = ("capacity", "proportion")
"""Plugins that manage queue capacity themselves: enabling one beside capacity-card makes two plugins disagree."""

RESOURCE_NAME_EXAMPLES = "a resource name (such as cpu, memory or nvidia.com/gpu)"

VOLCANO_ACTIONS = ("allocate", "backfill", "enqueue", "gangpreempt", "gangreclaim", "preempt", "reclaim", "shuffle")
"""The actions Volcano's scheduler registers (pkg/scheduler/actions/factory.go, v1.15.1 and master); a name it does
not find, compared exactly after trimming spaces (``framework.GetAction``), fails the whole configuration."""
PLUGIN_SWITCHES = (
    "enableJobOrder", "enableHierarchy", "enableJobReady", "enableJobPipelined", "enableTaskOrder",
    "enablePreemptable", "enableReclaimable", "enablePreemptive", "enableQueueOrder", "EnabledClusterOrder",
    "enabledClusterOrder", "enablePredicate", "enableBestNode", "enableNodeOrder", "enableTargetJob",
    "enableReservedNodes", "enableJobEnqueued", "enabledVictim", "enableJobStarving", "enabledOverused",
    "enabledAllocatable", "enabledHyperNodeOrder", "enabledSubJobReady", "enabledSubJobPipelined",
    "enabledSubJobOrder", "enabledHyperNodeGradient",
)
"""A plugin entry's switches: the ``*bool`` fields of ``PluginOption`` (pkg/scheduler/conf/scheduler_conf.go; the
cluster-order one is spelt ``EnabledClusterOrder`` on v1.15.1, ``enabledClusterOrder`` on master)."""
YAML_11_SHORT_BOOLS = ("y", "Y", "n", "N")
"""Plain scalars yaml.v2 reads as bools (YAML 1.1) where PyYAML reads strings: let through (quoted, Volcano would
refuse them; the two cannot be told apart once loaded)."""

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

Check = Callable[[object], str | None]
"""What is wrong with an argument's value (a phrase such as ``must be true or false, not "yes"``), or None: the
message of an Invalid violation (of a NotSupported one for a :class:`_OneOf` check)."""


@ratcheting
def admit(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    """Deny a scheduler ConfigMap whose configuration Volcano would not load or would misread (an UPDATE that
    leaves ``data`` as it was is judged as every policy judges updates: what it carries over only warns)."""
    metadata = manifest.get("metadata")
    name = metadata.get("name") if isinstance(metadata, MAPPING_TYPES) else None
    if name != config.scheduler_configmap:
        return allow()
    binary = binary_conf_violations(manifest)
    if binary:
        return decide(binary)
    data = manifest.get("data")
    if data is None:
        data = {}
    if not isinstance(data, MAPPING_TYPES):
        return decide([invalid(FieldPath.of("data"), f"must be a map of key to text, not {type_name(data)}")])
    if CONF_KEY not in data:
        return decide([required(CONF_PATH, "is missing: the Volcano scheduler reads its actions and plugins "
                                           "from this key")])
    text = data[CONF_KEY]
    if not isinstance(text, str):
        return decide([invalid(CONF_PATH, f"must be text (the YAML configuration), not {type_name(text)}")])
    violations = conf_violations(text)
    return decide(violations, () if violations else leak_warnings(text, snapshot, card_gate=config.card_gate))


def binary_conf_violations(manifest: Manifest) -> list[Violation]:
    """The scheduler ConfigMap carrying its configuration under ``binaryData``: refused. Volcano's scheduler would
    run it — it reads the file named by ``--scheduler-conf`` (``os.ReadFile`` in ``loadSchedulerConf``,
    pkg/scheduler/scheduler.go, volcano v1.15.1) from the ConfigMap volume its chart mounts at
    ``/volcano.scheduler`` (installer/helm/chart/volcano/templates/scheduler.yaml), and a ConfigMap volume writes
    every ``binaryData`` key as a file like a ``data`` key (``MakePayload``, k8s.io/kubernetes
    pkg/volume/configmap/configmap.go, v1.34) — while every reader of cardquota (this policy, the extender's and
    the CLI's arguments, :mod:`cardquota.core.schedconf.source`, ``doctor``) reads the text under ``data``. Refusing
    keeps one place for the configuration, the one that is checked. (The API server refuses a key in both maps:
    ``ValidateConfigMap``, pkg/apis/core/validation/validation.go.) The violation is at ``binaryData[...]``, so an
    update that leaves that value as it was is ratcheted like any other."""
    binary = manifest.get("binaryData")
    if not isinstance(binary, MAPPING_TYPES) or CONF_KEY not in binary:
        return []
    return [forbidden(BINARY_CONF_PATH, f"the Volcano scheduler reads this file too, but cardquota checks the "
                                        f"configuration only under data, so it would run unchecked; move "
                                        f"{CONF_KEY} to data (as text)")]


def leak_warnings(text: str, snapshot: ClusterSnapshot, *, card_gate: bool = False) -> list[str]:
    """Where a readable configuration that enables the extender lets work past cardquota's rules: card resources
    nodes offer left out of ``managedResources``, checks it makes unreachable, an enqueue vote that does not count,
    task verbs left out (:func:`cardquota.core.schedconf.extender.conf_leaks`; the plugins' arguments are those
    this conf writes, as the policy sees no other ConfigMap: ``doctor`` compares the extender's)."""
    try:
        entries = plugin_entries(load_one(text))
    except InputError:
        return []
    records = list(snapshot.nodes.values())
    offered = offered_resources((record.node.allocatable for record in records),
                                (resource for record in records for resource in record.cards.by_resource))
    capability = sorted(name for name, record in snapshot.queues.items() if record.queue.capability is not None)
    dra = sorted(name for name, record in snapshot.queues.items() if record.queue.dra)
    return [one_line(f"{leak.path}: {leak.message}")
            for leak in conf_leaks(entries, offered=offered, capability_queues=capability, card_gate=card_gate,
                                   dra_queues=dra)]


def conf_violations(text: str) -> list[Violation]:
    """Everything wrong with the text of ``volcano-scheduler.conf`` (paths start at ``data[...]``)."""
    try:
        conf = load_one(text)
    except InputError as error:
        problem = document_end_problem(text)
        return [invalid(CONF_PATH, problem or one_line(f"is not valid YAML: {error}"))]
    if not isinstance(conf, MAPPING_TYPES):
        return [invalid(CONF_PATH, f"must be a YAML map with actions and tiers, not {type_name(conf)}")]
    violations = _actions_violations(conf)
    violations.extend(_tiers_violations(conf))
    return [v.with_message(one_line(v.message)) for v in violations]


def _actions_violations(conf: Mapping[Any, Any]) -> list[Violation]:
    path = CONF_PATH.child("actions")
    example = 'such as "enqueue, allocate, backfill"'
    if "actions" not in conf:
        return [required(path, f"is required: the actions the scheduler runs, in order, {example}")]
    actions = conf["actions"]
    if not isinstance(actions, str):
        return [invalid(path, f"must be a comma-separated string of actions, {example}, not {type_name(actions)}")]
    if not actions.strip():
        return [required(path, f"must name at least one action, {example}")]
    if any(not action.strip() for action in actions.split(",")):
        return [invalid(path, f"{written(actions)} has an empty action name (a stray comma?)")]
    unknown = [action.strip() for action in actions.split(",") if action.strip() not in VOLCANO_ACTIONS]
    if unknown:
        return [not_supported(path, f"names {', '.join(map(shown, unknown))}, which Volcano's scheduler does not "
                                    f"have (it would refuse this configuration and keep the one it runs); its "
                                    f"actions are {', '.join(VOLCANO_ACTIONS)}")]
    return []


def _tiers_violations(conf: Mapping[Any, Any]) -> list[Violation]:
    path = CONF_PATH.child("tiers")
    if "tiers" not in conf:
        return [required(path, "is required: a list of tiers, each with a list of plugins")]
    tiers = conf["tiers"]
    if not isinstance(tiers, list):
        return [invalid(path, f"must be a list of tiers, each with a list of plugins, not {type_name(tiers)}")]
    violations: list[Violation] = []
    plugins: list[tuple[str, FieldPath]] = []  # (name, path) of every readable plugin
    for tier_index, tier in enumerate(tiers):
        tier_path = path.index(tier_index)
        if not isinstance(tier, MAPPING_TYPES):
            violations.append(invalid(tier_path, f"must be a map with plugins, not {type_name(tier)}"))
            continue
        if "plugins" not in tier:
            violations.append(required(tier_path.child("plugins"), "is required: the list of this tier's plugins"))
            continue
        tier_plugins = tier["plugins"]
        if not isinstance(tier_plugins, list):
            violations.append(invalid(tier_path.child("plugins"),
                                      f"must be a list of plugins, not {type_name(tier_plugins)}"))
            continue
        for plugin_index, plugin in enumerate(tier_plugins):
            plugin_path = tier_path.child("plugins").index(plugin_index)
            name = _plugin_violations(plugin, plugin_path, violations)
            if name is not None:
                plugins.append((name, plugin_path))
        violations.extend(_hierarchy_conflicts(tier_plugins, tier_path))
    violations.extend(_conflicts(plugins))
    return violations


def _hierarchy_conflicts(tier_plugins: list[Any], tier_path: FieldPath) -> list[Violation]:
    """``drf`` with ``enableHierarchy: true`` and ``proportion`` in one tier: Volcano refuses the configuration
    ("proportion and drf with hierarchy enabled conflicts", ``UnmarshalSchedulerConf``, pkg/scheduler/util.go)."""
    named = [(index, plugin) for index, plugin in enumerate(tier_plugins) if isinstance(plugin, MAPPING_TYPES)]
    hierarchy = next((index for index, plugin in named
                      if plugin.get("name") == "drf" and plugin.get("enableHierarchy") is True), None)
    if hierarchy is None:
        return []
    return [forbidden(tier_path.child("plugins").index(index).child("name"),
                      f"proportion conflicts with drf's enableHierarchy in the same tier (plugins[{hierarchy}]): "
                      "Volcano's scheduler would refuse this configuration and keep the one it runs")
            for index, plugin in named if plugin.get("name") == "proportion"]


def _plugin_violations(plugin: object, path: FieldPath, violations: list[Violation]) -> str | None:
    """Check one plugin entry; its name when readable."""
    if not isinstance(plugin, MAPPING_TYPES):
        violations.append(invalid(path, f"must be a map with a name, not {type_name(plugin)}"))
        return None
    name = plugin.get("name")
    if name is None:
        violations.append(required(path.child("name"), "is required: the plugin's name, such as gang or "
                                                       "capacity-card"))
        return None
    if not isinstance(name, str) or not name.strip():
        violations.append(invalid(path.child("name"),
                                  f"must be a plugin name (a non-empty string), not {written(name)}"))
        return None
    for switch in PLUGIN_SWITCHES:
        value = plugin.get(switch)
        if value is not None and not isinstance(value, bool) and value not in YAML_11_SHORT_BOOLS:
            violations.append(invalid(path.child(switch),
                                      f"must be true or false unquoted, not {written(value)}: Volcano's scheduler "
                                      "would refuse this configuration and keep the one it runs"))
    arguments = plugin.get("arguments")
    if arguments is None:
        return name
    if not isinstance(arguments, MAPPING_TYPES):
        violations.append(invalid(path.child("arguments"),
                                  f"{shown(name)} arguments must be a map of name to value, "
                                  f"not {type_name(arguments)}"))
        return name
    exact, prefixed = PLUGIN_ARGUMENTS.get(name, ({}, {}))
    for key, value in arguments.items():
        if not isinstance(key, str):
            continue
        message: str | None = None
        reason = Reason.INVALID
        check = exact.get(key)
        if check is not None:
            message = check(value)
            reason = Reason.NOT_SUPPORTED if isinstance(check, _OneOf) else reason
        else:
            for prefix, prefix_check in prefixed.items():
                if key.startswith(prefix):
                    message = _prefixed_argument_message(prefix, key, prefix_check, value)
                    break
        if message is not None:
            violations.append(Violation(str(path.child("arguments").escaped_key(key)),
                                        f"{name} argument {shown(key)} {message}", reason))
    return name


def _conflicts(plugins: list[tuple[str, FieldPath]]) -> list[Violation]:
    card = next((path for name, path in plugins if name == CAPACITY_CARD), None)
    if card is None:
        return []
    where = str(card).removeprefix(f"{CONF_PATH}.")
    return [
        forbidden(path.child("name"), f"plugin {name} conflicts with {CAPACITY_CARD} (at {where}): both manage "
                                      f"queue capacity, so enable only one of them")
        for name, path in plugins
        if name in CONFLICTS_WITH_CAPACITY_CARD
    ]


# Checks of argument values.

def _is_bool(value: object) -> str | None:
    return None if read_bool(value) is not None else f"must be true or false, not {written(value)}"


def _number_in(low: int, high: int | None = None, *, above: bool = False) -> Check:
    if high is not None:
        wanted = f"a number from {low} to {high}"
    else:
        wanted = f"a number greater than {low}" if above else f"a number of at least {low}"

    def check(value: object) -> str | None:
        number = read_number(value)
        fits = number is not None and (number > low if above else number >= low) and (high is None or number <= high)
        return None if fits else f"must be {wanted}, not {written(value)}"

    return check


def _int_from(low: int) -> Check:
    def check(value: object) -> str | None:
        number = read_int(value)
        return None if number is not None and number >= low else \
            f"must be a whole number of at least {low}, not {written(value)}"

    return check


@dataclass(frozen=True)
class _OneOf:
    """The check of a closed set of values: a value outside it is NotSupported (other checks' are Invalid)."""

    choices: tuple[str, ...]
    ignore_case: bool = False

    def __call__(self, value: object) -> str | None:
        if isinstance(value, str) and (value.lower() if self.ignore_case else value) in self.choices:
            return None
        wanted = " or ".join(self.choices)
        return f"must be {wanted}{' (in any case)' if self.ignore_case else ''}, not {written(value)}"


def _one_of(*choices: str, ignore_case: bool = False) -> Check:
    return _OneOf(choices, ignore_case)


def _is_quantity(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"must be a quantity such as \"32\" or \"64Gi\", not {type_name(value)}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**128:
        return f"{written(value)} is out of range"
    try:
        amount = parse_quantity(value)
    except InputError as error:
        return f"must be a quantity such as \"32\" or \"64Gi\": {error.message}"
    return f"must not be negative, not {written(value)}" if amount < 0 else None


def _is_regex_list(value: object) -> str | None:
    if not isinstance(value, str):
        return f"must be a comma-separated string of regular expressions, not {written(value)}"
    for pattern in value.split(","):
        pattern = pattern.strip()
        if not pattern:
            return f"has an empty pattern in {written(value)} (which would match every resource)"
        problem = go_regex_problem(pattern)
        if problem is not None:
            return f"has an invalid regular expression {written(pattern)}: {problem}"
    return None


def _is_resource_list(value: object) -> str | None:
    if not isinstance(value, str):
        return f"must be a comma-separated string of resource names, not {written(value)}"
    for resource in value.split(","):
        resource = resource.strip()
        if not resource:
            return f"has an empty resource name in {written(value)} (a stray comma?)"
        if not is_resource_name(resource):
            return f"lists {written(resource)}, which is not {RESOURCE_NAME_EXAMPLES}"
    return None


def is_resource_name(resource: str) -> bool:
    """A Kubernetes resource name is a qualified name: ``cpu``, ``hugepages-2Mi``, ``nvidia.com/gpu``."""
    prefix, slash, name = resource.rpartition("/")
    return (
        len(name) <= 63 and _QUALIFIED_NAME.fullmatch(name) is not None
        and (not slash or (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix) is not None))
    )


def _prefixed_argument_message(prefix: str, key: str, check: Check, value: object) -> str | None:
    """``quota.<resource>`` and the like: the resource the key names, then the value."""
    resource = key[len(prefix):]
    if not resource:
        return f"names no resource (expected e.g. {prefix}cpu or {prefix}memory)"
    if not is_resource_name(resource):
        return f"names {written(resource)}, which is not {RESOURCE_NAME_EXAMPLES}"
    return check(value)


_GO_DURATION = re.compile(r"[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)")
EXTENDER_VERBS = ("onSessionOpenVerb", "onSessionCloseVerb", "predicateVerb", "prioritizeVerb", "preemptableVerb",
                  "reclaimableVerb", "queueOverusedVerb", "jobEnqueueableVerb", "jobEnqueuedVerb", "jobReadyVerb",
                  "allocateFuncVerb", "deallocateFuncVerb")


def _is_url(value: object) -> str | None:
    if not isinstance(value, str) or not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
        return (f"must be an http(s) URL such as http://cardquota-extender.cardquota-system.svc:8713, not "
                f"{written(value)}")
    return None


def _is_go_duration(value: object) -> str | None:
    """Go's time.ParseDuration: ``500ms``, ``1s``, ``1m30s`` (the scheduler silently uses 1s for anything else)."""
    if isinstance(value, str) and _GO_DURATION.fullmatch(value):
        return None
    return f"must be a Go duration such as 500ms or 2s, not {written(value)} (the scheduler would use 1s)"


def _is_verb(value: object) -> str | None:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.~-]+(/[A-Za-z0-9_.~-]+)*", value):
        return f"must be a URL path segment such as predicate, not {written(value)}"
    return None


def _is_resource_name_list(value: object) -> str | None:
    """``managedResources`` must be a YAML list: a plain string makes the scheduler exit at start."""
    if isinstance(value, str):
        return (f"must be a YAML list of resource names such as [nvidia.com/gpu], not the string {written(value)} "
                "(the scheduler exits on a string)")
    if not isinstance(value, list) or not value:
        return f"must be a non-empty YAML list of resource names, not {written(value)}"
    for item in value:
        if not isinstance(item, str) or not is_resource_name(item):
            return f"lists {written(item)}, which is not {RESOURCE_NAME_EXAMPLES}"
    return None


PLUGIN_ARGUMENTS: dict[str, tuple[dict[str, Check], dict[str, Check]]] = {
    EXTENDER: (
        {"extender.urlPrefix": _is_url, "extender.httpTimeout": _is_go_duration, "extender.ignorable": _is_bool,
         "extender.managedResources": _is_resource_name_list,
         **{f"extender.{verb}": _is_verb for verb in EXTENDER_VERBS}},
        {},
    ),
    CAPACITY_CARD: ({"cardUnlimitedCpuMemory": _is_bool, "nodeOrderWeight": _number_in(0, above=True)}, {}),
    CROSSQUOTA: (
        {"gpu-resource-names": _is_regex_list, "quota-resources": _is_resource_list,
         "crossQuotaWeight": _number_in(0)},
        {"quota.": _is_quantity, "quota-percentage.": _number_in(0, 100), "weight.": _number_in(0)},
    ),
    PREDICATES: (
        {
            "predicate.MGPUEnable": _is_bool,
            "predicate.MGPUPolicy": _one_of("binpack", "spread", ignore_case=True),
            "predicate.MGPUScheduleMode": _one_of("index", "id"),
            "predicate.MGPUWeightOfCore": _number_in(0, 100),
            "predicate.MGPUMaxContainersPerCard": _int_from(1),
        },
        {},
    ),
}
"""Plugin → (argument → check, argument prefix → check of the value). Other arguments are not examined."""
