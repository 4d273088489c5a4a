"""The Volcano scheduler ConfigMap: YAML, actions and tiers, and the arguments of capacity-card, crossquota and
the mGPU predicates."""

from __future__ import annotations

import base64
from fractions import Fraction
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from verdicts import violations_of

from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.schedconf import admit
from cardquota.core.schedconf.goregex import go_regex_problem
from cardquota.core.schedconf.reader import read_bool, read_int, read_number
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict
from cardquota.core.violations import Reason

CONF = 'data["volcano-scheduler.conf"]'

# The capacity-card design, example 4 (node ordering configuration), verbatim.
CAPACITY_CARD_EXAMPLE_4 = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: volcano-scheduler-configmap
  namespace: volcano-system
data:
  volcano-scheduler.conf: |
    actions: "enqueue, allocate, backfill"
    tiers:
    - plugins:
      - name: capacity-card
        arguments:
          cardUnlimitedCpuMemory: false
          nodeOrderWeight: 2.0    # Increase card type priority influence
"""

# The capacity-card design's plugin configuration section.
CAPACITY_CARD_PLUGIN_CONFIGURATION = """\
actions: "enqueue, allocate, backfill"
tiers:
  - plugins:
      - name: capacity-card
        arguments:
          cardUnlimitedCpuMemory: true  # Optional: if true, card resources don't need CPU/memory quotas
          nodeOrderWeight: 1.0 # Optional, node ordering weight coefficient
"""

# The crossquota design's configuration format, as the arguments of a crossquota plugin.
CROSSQUOTA_CONFIGURATION = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: crossquota
    arguments:
      # GPU node detection
      gpu-resource-names: "nvidia.com/gpu,amd.com/gpu"

      # Quota resources
      quota-resources: "cpu,memory"

      # Quota configuration
      quota.cpu: "32"
      quota-percentage.memory: "50"

      # Node ordering configuration
      crossQuotaWeight: 10
      weight.cpu: 10
      weight.memory: 1
"""

# The mGPU design's "Volcano Plugin Config" (its "..." elisions removed).
MGPU_PLUGIN_CONFIG = """\
      actions: "reclaim, allocate, backfill, preempt"
      tiers:
      - plugins:
        - name: priority
        - name: gang
        - name: conformance
      - plugins:
        - name: drf
        - name: predicates
          arguments:
            predicate.MGPUEnable: true
            predicate.MGPUPolicy: binpack
            predicate.MGPUWeightOfCore: 20
            predicate.MGPUScheduleMode: index
            predicate.MGPUMaxContainersPerCard: 16
        - name: proportion
        - name: nodeorder
"""


def configmap(conf: str | None, *, name: str = "volcano-scheduler-configmap",
              namespace: str = "volcano-system") -> dict[str, Any]:
    manifest: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": name, "namespace": namespace}, "data": {}}
    if conf is not None:
        manifest["data"]["volcano-scheduler.conf"] = conf
    return manifest


def conf_of(*tiers: list[dict[str, Any]], actions: str = "enqueue, allocate, backfill") -> str:
    return yaml.safe_dump({"actions": actions, "tiers": [{"plugins": plugins} for plugins in tiers]})


def plugin(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments} if arguments else {"name": name}


def run(manifest: dict[str, Any], config: PolicyConfig | None = None) -> Verdict:
    return admit(manifest, None, ClusterSnapshot(complete=True), config or PolicyConfig())


def problems(conf: str) -> list[tuple[str, str]]:
    return [(v.path, v.message) for v in run(configmap(conf)).violations]


Expected = list[tuple[str, Reason, str | None]]
"""(path, reason, message) of each violation; the message is given for the first case of each rule only."""


def assert_found(verdict: Verdict, expected: Expected) -> None:
    assert violations_of(verdict) == [(path, reason) for path, reason, _ in expected]
    for violation, (_, _, message) in zip(verdict.violations, expected, strict=True):
        if message is not None:
            assert violation.message == message


@pytest.mark.parametrize("conf", [
    pytest.param(yaml.safe_load(CAPACITY_CARD_EXAMPLE_4)["data"]["volcano-scheduler.conf"],
                 id="capacity-card-example-4"),
    pytest.param(CAPACITY_CARD_PLUGIN_CONFIGURATION, id="capacity-card-plugin-configuration"),
    pytest.param(CROSSQUOTA_CONFIGURATION, id="crossquota-configuration-format"),
    pytest.param(MGPU_PLUGIN_CONFIG, id="mgpu-plugin-config"),
])
def test_the_designs_examples_are_valid(conf: str) -> None:
    verdict = run(configmap(conf))
    assert verdict.allowed, verdict.message
    assert verdict.warnings == ()
    assert verdict.patch == ()


def test_the_example_configmap_is_examined_as_a_whole() -> None:
    manifest = yaml.safe_load(CAPACITY_CARD_EXAMPLE_4)
    assert run(manifest).allowed
    manifest["data"]["volcano-scheduler.conf"] = manifest["data"]["volcano-scheduler.conf"].replace("2.0", "0")
    assert not run(manifest).allowed


@pytest.mark.parametrize("manifest", [
    configmap("{{{ not yaml", name="other"),
    configmap(None, name="volcano-scheduler-configmap-backup"),
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": "junk"},
    {"apiVersion": "v1", "kind": "ConfigMap"},
])
def test_other_configmaps_are_not_examined(manifest: dict[str, Any]) -> None:
    assert run(manifest) == Verdict(allowed=True)


def test_the_examined_name_comes_from_the_config_in_any_namespace() -> None:
    config = PolicyConfig(scheduler_configmap="my-scheduler")
    assert run(configmap("actions: [", name="volcano-scheduler-configmap"), config).allowed
    verdict = run(configmap("actions: [", name="my-scheduler", namespace="anywhere"), config)
    assert not verdict.allowed
    assert violations_of(verdict) == [(CONF, Reason.INVALID)]


@pytest.mark.parametrize(("manifest", "expected"), [
    pytest.param(configmap(None),
                 [(CONF, Reason.REQUIRED,
                   "is missing: the Volcano scheduler reads its actions and plugins from "
                   "this key")],
                 id="key-missing"),
    pytest.param({**configmap(None), "data": None},
                 [(CONF, Reason.REQUIRED, None)],
                 id="no-data"),
    pytest.param({**configmap(None), "data": ["x"]},
                 [("data", Reason.INVALID,
                   "must be a map of key to text, not a list")],
                 id="data-not-a-map"),
    pytest.param(configmap(42),  # type: ignore[arg-type]
                 [(CONF, Reason.INVALID, "must be text (the YAML configuration), not a number")],
                 id="conf-not-text"),
])
def test_the_configuration_key(manifest: dict[str, Any], expected: Expected) -> None:
    assert_found(run(manifest), expected)


BINARY_CONF = 'binaryData["volcano-scheduler.conf"]'


def binary(manifest: dict[str, Any], conf: str, *, drop_data: bool = True) -> dict[str, Any]:
    """The ConfigMap with ``conf`` under binaryData (base64, as the API carries it), its data's key gone (the API
    server refuses a key in both maps)."""
    moved = {**manifest, "binaryData": {"volcano-scheduler.conf": base64.b64encode(conf.encode()).decode()}}
    if drop_data:
        moved["data"] = {key: value for key, value in manifest["data"].items() if key != "volcano-scheduler.conf"}
    return moved


@pytest.mark.parametrize("conf", [CAPACITY_CARD_PLUGIN_CONFIGURATION, "actions: enqueue\ntiers: ["],
                         ids=["valid", "invalid"])
def test_the_configuration_under_binary_data_is_refused_however_good(conf: str) -> None:
    """Volcano's scheduler reads binaryData keys too (a ConfigMap volume writes them as files), cardquota only the
    text under data: the one place a configuration is checked is the one it may be in."""
    verdict = run(binary(configmap(None), conf))
    assert_found(verdict, [(BINARY_CONF, Reason.FORBIDDEN,
                            "the Volcano scheduler reads this file too, but cardquota checks the configuration only "
                            "under data, so it would run unchecked; move volcano-scheduler.conf to data (as text)")])
    other = {**configmap(None), "binaryData": {"logo.png": "iVBORw0KGgo="}}
    assert_found(run(other), [(CONF, Reason.REQUIRED, None)])  # (another binaryData key: data is judged alone)
    assert run(binary(configmap(None), conf, drop_data=False) | {"metadata": {"name": "other"}}).allowed


def test_an_update_of_the_configuration_under_binary_data_is_refused_and_one_leaving_it_ratchets() -> None:
    before = binary(configmap(None), CAPACITY_CARD_PLUGIN_CONFIGURATION)
    changed = binary(configmap(None), CROSSQUOTA_CONFIGURATION)
    assert not admit(changed, before, ClusterSnapshot(complete=True), PolicyConfig()).allowed
    labelled = {**before, "metadata": {**before["metadata"], "labels": {"team": "a"}}}
    verdict = admit(labelled, before, ClusterSnapshot(complete=True), PolicyConfig())
    assert verdict.allowed
    assert len(verdict.warnings) == 1
    moved = configmap(CAPACITY_CARD_PLUGIN_CONFIGURATION)
    assert admit(moved, before, ClusterSnapshot(complete=True), PolicyConfig()).allowed


@pytest.mark.parametrize(("conf", "expected"), [
    pytest.param("actions: [enqueue\ntiers: []",
                 [(CONF, Reason.INVALID,
                   "is not valid YAML: document 1: invalid YAML at line 2, "
                   "column 6: did not find expected ',' or ']'")],
                 id="invalid-yaml"),
    pytest.param("actions: a\n---\ntiers: []\n",
                 [(CONF, Reason.INVALID,
                   "is not valid YAML: holds 2 YAML documents where one is "
                   "expected")],
                 id="two-documents"),
    pytest.param("- actions",
                 [(CONF, Reason.INVALID,
                   "must be a YAML map with actions and tiers, not a list")],
                 id="not-a-map"),
    pytest.param("",
                 [(CONF, Reason.INVALID,
                   "must be a YAML map with actions and tiers, not null")],
                 id="empty"),
    pytest.param("tiers: []",
                 [(f"{CONF}.actions", Reason.REQUIRED,
                   'is required: the actions the scheduler runs, in order, such '
                   'as "enqueue, allocate, backfill"')],
                 id="actions-missing"),
    pytest.param("actions: ''\ntiers: []",
                 [(f"{CONF}.actions", Reason.REQUIRED,
                   'must name at least one action, such as "enqueue, allocate, backfill"')],
                 id="actions-empty"),
    pytest.param("actions: [enqueue]\ntiers: []",
                 [(f"{CONF}.actions", Reason.INVALID,
                   'must be a comma-separated string of actions, such as "enqueue, allocate, '
                   'backfill", not a list')],
                 id="actions-list"),
    pytest.param("actions: 'enqueue,,allocate'\ntiers: []",
                 [(f"{CONF}.actions", Reason.INVALID,
                   '"enqueue,,allocate" has an empty action name (a stray comma?)')],
                 id="actions-stray-comma"),
    pytest.param("actions: enqueue",
                 [(f"{CONF}.tiers", Reason.REQUIRED,
                   "is required: a list of tiers, each with a list of "
                   "plugins")],
                 id="tiers-missing"),
    pytest.param("actions: enqueue\ntiers: {plugins: []}",
                 [(f"{CONF}.tiers", Reason.INVALID,
                   "must be a list of tiers, each with a list of plugins, not a map")],
                 id="tiers-not-a-list"),
    pytest.param("actions: enqueue\ntiers: [gang]",
                 [(f"{CONF}.tiers[0]", Reason.INVALID,
                   "must be a map with plugins, not a "
                   "string")],
                 id="tier-not-a-map"),
    pytest.param("actions: enqueue\ntiers: [{}]",
                 [(f"{CONF}.tiers[0].plugins", Reason.REQUIRED,
                   "is required: the list of this "
                   "tier's plugins")],
                 id="plugins-missing"),
    pytest.param("actions: enqueue\ntiers: [{plugins: gang}]",
                 [(f"{CONF}.tiers[0].plugins", Reason.INVALID,
                   "must be a list of plugins, not a string")],
                 id="plugins-not-a-list"),
    pytest.param("actions: enqueue\ntiers: [{plugins: [gang]}]",
                 [(f"{CONF}.tiers[0].plugins[0]", Reason.INVALID,
                   "must be a map with a name, not a string")],
                 id="plugin-not-a-map"),
    pytest.param("actions: enqueue\ntiers: [{plugins: [{arguments: {}}]}]",
                 [(f"{CONF}.tiers[0].plugins[0].name", Reason.REQUIRED,
                   "is required: the plugin's name, such as gang or capacity-card")],
                 id="plugin-name-missing"),
    pytest.param("actions: enqueue\ntiers: [{plugins: [{name: ' '}]}]",
                 [(f"{CONF}.tiers[0].plugins[0].name", Reason.INVALID,
                   'must be a plugin name (a non-empty string), not " "')],
                 id="plugin-name-blank"),
    pytest.param("actions: enqueue\ntiers: [{plugins: [{name: gang, arguments: [1]}]}]",
                 [(f"{CONF}.tiers[0].plugins[0].arguments", Reason.INVALID,
                   "gang arguments must be a map of name to value, not a "
                   "list")],
                 id="arguments-not-a-map"),
    pytest.param("actions: enqueue\ntiers: []\nconfigurations: []\n", [], id="empty-tiers-and-other-keys"),
    pytest.param("actions: enqueue\ntiers: [{plugins: [{name: gang, arguments: null}, {name: x, arguments: {a: 1}}]}]",
                 [], id="null-arguments-and-unknown-plugins"),
])
def test_structure(conf: str, expected: Expected) -> None:
    assert_found(run(configmap(conf)), expected)


# What Volcano's scheduler refuses to load (it logs the error and keeps the configuration it runs — at start its
# built-in default, without the extender): ``UnmarshalSchedulerConf`` in pkg/scheduler/util.go and
# ``loadSchedulerConf`` in pkg/scheduler/scheduler.go, v1.15.1 and master ed72c7c8.
@pytest.mark.parametrize(("conf", "expected"), [
    # an action the scheduler does not register (pkg/scheduler/actions/factory.go): "failed to find Action"
    pytest.param("actions: 'enqueue, alocate'\ntiers: []",
                 [(f"{CONF}.actions", Reason.NOT_SUPPORTED,
                   "names alocate, which Volcano's scheduler does not have (it would refuse this configuration and "
                   "keep the one it runs); its actions are allocate, backfill, enqueue, gangpreempt, gangreclaim, "
                   "preempt, reclaim, shuffle")],
                 id="unknown-action"),
    pytest.param("actions: 'Allocate'\ntiers: []", [(f"{CONF}.actions", Reason.NOT_SUPPORTED, None)],
                 id="action-names-are-exact"),
    pytest.param("actions: ' enqueue ,allocate,backfill,preempt,reclaim,shuffle,gangpreempt,gangreclaim'\n"
                 "tiers: []", [], id="every-registered-action"),
    # a plugin switch is a *bool read by gopkg.in/yaml.v2 (PluginOption, pkg/scheduler/conf/scheduler_conf.go):
    # a string or a number there is a type error for the whole document
    pytest.param("actions: enqueue\ntiers: [{plugins: [{name: extender, enableJobEnqueued: 'false'}]}]",
                 [(f"{CONF}.tiers[0].plugins[0].enableJobEnqueued", Reason.INVALID,
                   'must be true or false unquoted, not "false": Volcano\'s scheduler would refuse this '
                   "configuration and keep the one it runs")],
                 id="switch-quoted"),
    pytest.param("actions: enqueue\ntiers: [{plugins: [{name: gang, enablePredicate: 0}]}]",
                 [(f"{CONF}.tiers[0].plugins[0].enablePredicate", Reason.INVALID, None)], id="switch-number"),
    pytest.param("actions: enqueue\ntiers: [{plugins: [{name: gang, enablePreemptable: no, enableJobOrder: true,"
                 " enablePredicate: null, enableNodeOrder: y}]}]", [], id="switches-as-yaml-v2-reads-them"),
    # drf with enableHierarchy beside proportion in one tier: "proportion and drf with hierarchy enabled conflicts"
    pytest.param("actions: enqueue\ntiers: [{plugins: [{name: drf, enableHierarchy: true}, {name: proportion}]}]",
                 [(f"{CONF}.tiers[0].plugins[1].name", Reason.FORBIDDEN,
                   "proportion conflicts with drf's enableHierarchy in the same tier (plugins[0]): Volcano's "
                   "scheduler would refuse this configuration and keep the one it runs")],
                 id="hdrf-and-proportion"),
    pytest.param("actions: enqueue\ntiers: [{plugins: [{name: drf, enableHierarchy: true}]}, "
                 "{plugins: [{name: proportion}]}]", [], id="hdrf-and-proportion-in-two-tiers"),
])
def test_what_volcano_would_not_load(conf: str, expected: Expected) -> None:
    assert_found(run(configmap(conf)), expected)


def _arg_path(tier: int, index: int, argument: str) -> str:
    return f'{CONF}.tiers[{tier}].plugins[{index}].arguments["{argument}"]'


@pytest.mark.parametrize(("plugin_name", "argument", "value", "message"), [
    # capacity-card
    ("capacity-card", "cardUnlimitedCpuMemory", "yes please",
     'capacity-card argument cardUnlimitedCpuMemory must be true or false, not "yes please"'),
    ("capacity-card", "cardUnlimitedCpuMemory", 1, None),
    ("capacity-card", "nodeOrderWeight", 0, "capacity-card argument nodeOrderWeight must be a number greater than 0, "
                                            "not 0"),
    ("capacity-card", "nodeOrderWeight", "-1.5", None),
    ("capacity-card", "nodeOrderWeight", "heavy", None),
    ("capacity-card", "nodeOrderWeight", None, None),
    ("capacity-card", "nodeOrderWeight", float("inf"), None),
    # crossquota
    ("crossquota", "gpu-resource-names", "nvidia.com/(gpu",
     'crossquota argument gpu-resource-names has an invalid regular expression "nvidia.com/(gpu": missing ), '
     "unterminated subpattern at position 11"),
    ("crossquota", "gpu-resource-names", "nvidia.com/gpu,(?!amd).*",
     'crossquota argument gpu-resource-names has an invalid regular expression "(?!amd).*": lookahead and '
     "lookbehind assertions are not supported by Go's regexp"),
    ("crossquota", "gpu-resource-names", "nvidia.com/gpu,",
     'crossquota argument gpu-resource-names has an empty pattern in "nvidia.com/gpu," (which would match every '
     "resource)"),
    ("crossquota", "gpu-resource-names", ["nvidia.com/gpu"],
     "crossquota argument gpu-resource-names must be a comma-separated string of regular expressions, not a list"),
    ("crossquota", "quota-resources", "cpu,,memory",
     'crossquota argument quota-resources has an empty resource name in "cpu,,memory" (a stray comma?)'),
    ("crossquota", "quota-resources", "cpu,main memory",
     'crossquota argument quota-resources lists "main memory", which is not a resource name (such as cpu, memory '
     "or nvidia.com/gpu)"),
    ("crossquota", "quota.cpu", "32 cores",
     "crossquota argument quota.cpu must be a quantity such as \"32\" or \"64Gi\": \"32 cores\" is not a quantity "
     '(expected e.g. "2", "500m", "80Gi", "1e3")'),
    ("crossquota", "quota.memory", "-64Gi", 'crossquota argument quota.memory must not be negative, not "-64Gi"'),
    ("crossquota", "quota.", "32", "crossquota argument quota. names no resource (expected e.g. quota.cpu or "
                                   "quota.memory)"),
    ("crossquota", "quota-percentage.memory", 150,
     "crossquota argument quota-percentage.memory must be a number from 0 to 100, not 150"),
    ("crossquota", "quota-percentage.memory", "-1", None),
    ("crossquota", "crossQuotaWeight", -10, "crossquota argument crossQuotaWeight must be a number of at least 0, "
                                            "not -10"),
    ("crossquota", "weight.cpu", "ten", 'crossquota argument weight.cpu must be a number of at least 0, not "ten"'),
    ("crossquota", "weight.bad name", 1, 'crossquota argument weight.bad name names "bad name", which is not a '
                                         "resource name (such as cpu, memory or nvidia.com/gpu)"),
    # predicates (mGPU)
    ("predicates", "predicate.MGPUEnable", "on", 'predicates argument predicate.MGPUEnable must be true or false, '
                                                 'not "on"'),
    ("predicates", "predicate.MGPUPolicy", "pack", 'predicates argument predicate.MGPUPolicy must be binpack or '
                                                   'spread (in any case), not "pack"'),
    ("predicates", "predicate.MGPUPolicy", 1, None),
    ("predicates", "predicate.MGPUScheduleMode", "uuid", 'predicates argument predicate.MGPUScheduleMode must be '
                                                         'index or id, not "uuid"'),
    ("predicates", "predicate.MGPUWeightOfCore", 101, "predicates argument predicate.MGPUWeightOfCore must be a "
                                                      "number from 0 to 100, not 101"),
    ("predicates", "predicate.MGPUWeightOfCore", "-0.5", None),
    ("predicates", "predicate.MGPUMaxContainersPerCard", 0, "predicates argument predicate.MGPUMaxContainersPerCard "
                                                            "must be a whole number of at least 1, not 0"),
    ("predicates", "predicate.MGPUMaxContainersPerCard", 16.5, None),
    ("predicates", "predicate.MGPUMaxContainersPerCard", "16.0", None),
])
def test_bad_plugin_arguments(plugin_name: str, argument: str, value: Any, message: str | None) -> None:
    """(path, reason) of every case (NotSupported for a value outside a closed set); the message for the first case
    of each argument."""
    verdict = run(configmap(conf_of([plugin("gang"), plugin(plugin_name, **{argument: value})])))
    reason = Reason.NOT_SUPPORTED if argument in CHOICES else Reason.INVALID
    assert violations_of(verdict) == [(_arg_path(0, 1, argument), reason)]
    text = verdict.violations[0].message
    assert text.startswith(f"{plugin_name} argument ")
    if message is not None:
        assert text == message


CHOICES = ("predicate.MGPUPolicy", "predicate.MGPUScheduleMode")
"""The arguments whose values are one of a closed set."""


@pytest.mark.parametrize(("plugin_name", "arguments"), [
    ("capacity-card", {"cardUnlimitedCpuMemory": "true", "nodeOrderWeight": "2.0"}),
    ("capacity-card", {"cardUnlimitedCpuMemory": "False", "nodeOrderWeight": 2}),
    ("capacity-card", {"nodeOrderWeight": "1e-3", "unknownArgument": object.__name__}),
    ("crossquota", {"gpu-resource-names": r"nvidia\.com/.*, amd\.com/gpu$, (?i)^huawei\.com/ascend-\d+\z",
                    "quota-resources": "cpu, memory, ephemeral-storage, hugepages-2Mi, example.com/foo"}),
    ("crossquota", {"quota.cpu": 32, "quota.memory": "64Gi", "quota.nvidia.com/gpu": "0", "quota-percentage.cpu": 0,
                    "quota-percentage.memory": 100.0, "crossQuotaWeight": "0", "weight.memory": 0.5}),
    ("predicates", {"predicate.MGPUPolicy": "Spread", "predicate.MGPUScheduleMode": "id",
                    "predicate.MGPUWeightOfCore": "100", "predicate.MGPUMaxContainersPerCard": "1",
                    "predicate.MGPUEnable": "FALSE", "predicate.GPUSharingEnable": "whatever"}),
    ("predicates", {"predicate.MGPUPolicy": "BINPACK", "predicate.MGPUWeightOfCore": 0.5}),
])
def test_good_plugin_arguments(plugin_name: str, arguments: dict[str, Any]) -> None:
    assert problems(conf_of([plugin(plugin_name, **arguments)])) == []


@pytest.mark.parametrize("other", ["capacity", "proportion"])
def test_capacity_card_conflicts_with_capacity_and_proportion_anywhere(other: str) -> None:
    conf = conf_of([plugin("priority"), plugin(other)], [plugin("drf"), plugin("capacity-card")])
    assert violations_of(run(configmap(conf))) == [(f"{CONF}.tiers[0].plugins[1].name", Reason.FORBIDDEN)]
    assert problems(conf) == [(
        f"{CONF}.tiers[0].plugins[1].name",
        f"plugin {other} conflicts with capacity-card (at tiers[1].plugins[1]): both manage queue capacity, so "
        "enable only one of them",
    )]
    assert problems(conf_of([plugin("priority"), plugin(other)], [plugin("drf")])) == []


def test_every_problem_is_reported_with_its_own_path() -> None:
    conf = conf_of([plugin("capacity-card", nodeOrderWeight=0), plugin("proportion")],
                   [plugin("predicates", **{"predicate.MGPUPolicy": "x"})], actions="")
    verdict = run(configmap(conf))
    assert violations_of(verdict) == [
        (f"{CONF}.actions", Reason.REQUIRED),
        (_arg_path(0, 0, "nodeOrderWeight"), Reason.INVALID),
        (_arg_path(1, 0, "predicate.MGPUPolicy"), Reason.NOT_SUPPORTED),
        (f"{CONF}.tiers[0].plugins[1].name", Reason.FORBIDDEN),
    ]
    assert not verdict.allowed
    assert verdict.message.count("; ") == 3


@pytest.mark.parametrize(("value", "expected"), [
    (True, True), (False, False), ("true", True), ("TRUE", True), ("False", False),
    ("yes", None), ("1", None), (1, None), (None, None), ("", None),
])
def test_read_bool(value: object, expected: bool | None) -> None:
    assert read_bool(value) is expected


@pytest.mark.parametrize(("value", "expected"), [
    (2, Fraction(2)), (2.0, Fraction(2)), ("2.0", Fraction(2)), ("2", Fraction(2)), ("-1.5", Fraction(-3, 2)),
    (".5", Fraction(1, 2)), ("5.", Fraction(5)), ("1e3", Fraction(1000)), ("1E-2", Fraction(1, 100)),
    (True, None), ("nan", None), ("inf", None), (float("nan"), None), (float("-inf"), None), (" 2", None),
    ("2 ", None), ("0x10", None), ("1_000", None), ("1e9999", None), ("", None), (None, None), ([2], None),
    ("9" * 65, None),
])
def test_read_number(value: object, expected: Fraction | None) -> None:
    assert read_number(value) == expected


@pytest.mark.parametrize(("value", "expected"), [
    (16, 16), ("16", 16), ("+1", 1), ("-3", -3), (16.0, None), ("16.0", None), (True, None), ("0x10", None),
    (2**63, None), (str(2**63), None), (None, None),
])
def test_read_int(value: object, expected: int | None) -> None:
    assert read_int(value) == expected


@pytest.mark.parametrize(("pattern", "problem"), [
    ("nvidia.com/gpu", None),
    (r"^nvidia\.com/(gpu|mig-.*)$", None),
    (r"(?i)gpu", None),
    (r"a(?i)b", None),  # Go allows flags anywhere; Python only at the start
    (r"(?U)a+(?-U:b+)", None),
    (r"(?<name>gpu)", None),
    (r"(?P<name>gpu)", None),
    (r"\pL+\p{Greek}\PN", None),
    (r"gpu\z", None),
    (r"\Q.*+\E", None),
    (r"[[:alpha:]_-]+", None),
    (r"[[:^digit:]]", None),
    (r"[]a]", None),
    (r"[^]a]", None),
    (r"[a-z&&[b]", None),
    (r"\x{10FFFF}\x41\C\012\0", None),
    (r"a{1000}", None),
    ("(gpu", "missing ), unterminated subpattern at position 0"),
    ("[gpu", "unterminated character set at position 0"),
    ("*gpu", "nothing to repeat at position 0"),
    ("a{2,1}", "min repeat greater than max repeat at position 2"),
    ("a{1001}", "repeat count {1001} is above Go's limit of 1000"),
    ("a{1,2000}", "repeat count {1,2000} is above Go's limit of 1000"),
    ("a(?=b)", "lookahead and lookbehind assertions are not supported by Go's regexp"),
    ("(?<!a)b", "lookahead and lookbehind assertions are not supported by Go's regexp"),
    (r"(a)\1", r"backreference \1 is not supported by Go's regexp"),
    ("(?P<x>a)(?P=x)", "backreferences are not supported by Go's regexp"),
    ("(?>a)", "atomic groups (?>...) are not supported by Go's regexp"),
    ("a*+", "possessive repeat *+ is not supported by Go's regexp"),
    ("a{2}+", "possessive repeat {2}+ is not supported by Go's regexp"),
    ("(a)(?(1)b)", "conditional groups are not supported by Go's regexp"),
    ("(?#note)a", "comments (?#...) are not supported by Go's regexp"),
    ("(?x)a", 'invalid or unsupported Perl syntax "(?x)a"'),
    ("(?-)a", 'invalid or unsupported Perl syntax "(?-)a"'),
    (r"a\Z", r"\Z is not supported by Go's regexp (use \z)"),
    (r"\u0041", r"invalid escape sequence \u (Go's regexp writes code points as \x{...})"),
    (r"\x{110000}", r'invalid escape sequence "\\x{110000}"'),
    (r"\p{", r'invalid character class range "\\p{"'),
    ("[[:gpu:]]", 'invalid character class "[:gpu:]"'),
    ("gpu\\", "trailing backslash at end of expression"),
])
def test_regular_expressions_are_checked_as_go_reads_them(pattern: str, problem: str | None) -> None:
    assert go_regex_problem(pattern) == problem


def mostly(usual: st.SearchStrategy[Any], *unusual: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` three times in four, else one of ``unusual``."""
    return st.sampled_from([usual, usual, usual, *unusual]).flatmap(lambda strategy: strategy)


# Fuzzing: any text, any YAML structure, gives a verdict with one-line messages and never raises.

def _assert_one_line(verdict: Verdict) -> None:
    assert verdict.message.isprintable()
    for violation in verdict.violations:
        assert str(violation).isprintable(), violation
    for warning in verdict.warnings:
        assert warning.isprintable(), warning


@given(text=st.text(max_size=200))
def test_any_text_gives_a_verdict(text: str) -> None:
    _assert_one_line(run(configmap(text)))


@given(pattern=st.text(alphabet=st.sampled_from(list("()[]{}\\^$.|*+?-:=!<>#,0129aAzZpPQExuCiU_ \n"))
                       | st.characters(), max_size=30))
def test_any_regular_expression_gives_an_answer(pattern: str) -> None:
    problem = go_regex_problem(pattern)
    assert problem is None or isinstance(problem, str)


_argument_names = st.sampled_from([
    "cardUnlimitedCpuMemory", "nodeOrderWeight", "gpu-resource-names", "quota-resources", "quota.cpu",
    "quota.memory", "quota.", "quota-percentage.memory", "crossQuotaWeight", "weight.cpu", "weight.",
    "predicate.MGPUPolicy", "predicate.MGPUScheduleMode", "predicate.MGPUWeightOfCore",
    "predicate.MGPUMaxContainersPerCard", "predicate.MGPUEnable",
]) | st.text(max_size=10)
_scalars = (st.none() | st.booleans() | st.integers() | st.floats()
            | st.sampled_from(["true", "2.0", "-1", "64Gi", "binpack", "Spread", "id", "cpu,memory",
                               "nvidia.com/gpu,(", r"\p{", "a{2000}", "16", "1e999", "9" * 80])
            | st.text(max_size=12))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=10)
_arguments = st.dictionaries(_argument_names, _scalars, max_size=5)
_plugin = st.fixed_dictionaries(
    {"name": st.sampled_from(["capacity-card", "crossquota", "predicates", "capacity", "proportion", "gang"])},
    optional={"arguments": _arguments},
)
# Mostly well-formed, so that the argument checks are reached; sometimes anything at all at each level.
_plugins = mostly(_plugin, st.fixed_dictionaries(
    {"name": _scalars}, optional={"arguments": _arguments | _values}), _values)
_tiers = mostly(st.fixed_dictionaries({"plugins": st.lists(_plugins, max_size=4)}),
                st.fixed_dictionaries({}, optional={"plugins": _values}), _values)
_confs = mostly(
    st.fixed_dictionaries({"actions": st.just("enqueue, allocate"), "tiers": st.lists(_tiers, max_size=3)}),
    st.fixed_dictionaries({}, optional={
        "actions": st.sampled_from(["enqueue, allocate", "", ",", "allocate,,backfill"]) | _scalars,
        "tiers": st.lists(_tiers, max_size=3) | _values,
    }),
    _values,
)


@given(conf=_confs)
def test_any_yaml_structure_gives_a_verdict(conf: Any) -> None:
    _assert_one_line(run(configmap(yaml.safe_dump(conf))))


@pytest.mark.parametrize(("conf", "expected"), [
    pytest.param('actions: "enqueue, allocate"\n...\ntiers:\n- plugins:\n  - name: gang\n',
                 'goes on after the YAML end of document "..." on line 2: the scheduler reads only up to the "..." '
                 'and would ignore the rest (from line 3); remove the "..." line', id="text-after-the-marker"),
    pytest.param('actions: "enqueue, allocate"\ntiers:\n- plugins:\n  - name: gang\n...\n# the end\n', None,
                 id="marker-at-the-end"),
    pytest.param("actions: [enqueue\n...\ntiers: []\n", "is not valid YAML: document 1: invalid YAML at line 2, "
                 "column 1: did not find expected ',' or ']'", id="broken-before-the-marker"),
])
def test_a_document_end_marker_is_refused_only_when_text_follows_and_says_so(conf: str, expected: str | None) -> None:
    """Issue 18 item 11: a conf with a YAML ``...`` document end followed by more text was refused with the parser's
    "did not find expected <document start>"; it now says what is wrong (Volcano reads only up to the marker), and
    the scheduler's own reading (SchedulerConfig.from_conf: simulate, explain, the extender) says the same."""
    from cardquota.core.errors import InputError
    from cardquota.core.scheduling.session import SchedulerConfig

    verdict = run(configmap(conf))
    assert violations_of(verdict) == ([] if expected is None else [(CONF, Reason.INVALID)])
    assert [v.message for v in verdict.violations] == ([] if expected is None else [expected])
    if expected is not None and expected.startswith("goes on"):
        with pytest.raises(InputError, match=r"volcano-scheduler\.conf goes on after the YAML end of document"):
            SchedulerConfig.from_conf(conf)
