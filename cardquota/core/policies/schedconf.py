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
Other ConfigMaps are allowed untouched. Never raises: bad input becomes :class:`Violation` values.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from cardquota.core.errors import InputError, one_line
from cardquota.core.objects import Manifest
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.quantity import parse_quantity
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict, allow, decide
from cardquota.core.violations import Violation, shown, type_name, written
from cardquota.core.yamltext import load_one

CONF_KEY = "volcano-scheduler.conf"
CONF_PATH = f"data[{json.dumps(CONF_KEY)}]"

CAPACITY_CARD = "capacity-card"
CROSSQUOTA = "crossquota"
EXTENDER = "extender"
PREDICATES = "predicates"
CONFLICTS_WITH_CAPACITY_CARD = ("capacity", "proportion")
"""Plugins that manage queue capacity themselves: enabling one beside capacity-card makes two plugins disagree."""

MAX_GO_REPEAT = 1000
"""Go's regexp rejects a repeat count above this (``a{1001}``)."""
MAX_NUMBER_TEXT = 64
MAX_INT = 2**63 - 1
RESOURCE_NAME_EXAMPLES = "a resource name (such as cpu, memory or nvidia.com/gpu)"

_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_OCTAL = re.compile(r"[0-7]{1,3}")
_HEX = re.compile(r"[0-9A-Fa-f]{1,8}")
_REPEAT = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")
_GO_FLAGS = re.compile(r"\(\?([imsU]*(?:-[imsU]+)?)([:)])")
_GO_CLASS_NAMES = frozenset(
    {"alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space", "upper",
     "word", "xdigit"})

Check = Callable[[object], str | None]
"""What is wrong with an argument's value (a phrase such as ``must be true or false, not "yes"``), or None."""


def admit(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    """Deny a scheduler ConfigMap whose configuration Volcano would not load or would misread."""
    metadata = manifest.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if name != config.scheduler_configmap:
        return allow()
    data = manifest.get("data")
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        return decide([Violation("data", f"must be a map of key to text, not {type_name(data)}")])
    if CONF_KEY not in data:
        return decide([Violation(CONF_PATH, "is missing: the Volcano scheduler reads its actions and plugins "
                                            "from this key")])
    text = data[CONF_KEY]
    if not isinstance(text, str):
        return decide([Violation(CONF_PATH, f"must be text (the YAML configuration), not {type_name(text)}")])
    return decide(conf_violations(text))


def conf_violations(text: str) -> list[Violation]:
    """Everything wrong with the text of ``volcano-scheduler.conf`` (paths start at ``data[...]``)."""
    try:
        conf = load_one(text)
    except InputError as error:
        problem = document_end_problem(text)
        return [Violation(CONF_PATH, problem or one_line(f"is not valid YAML: {error}"))]
    if not isinstance(conf, Mapping):
        return [Violation(CONF_PATH, f"must be a YAML map with actions and tiers, not {type_name(conf)}")]
    violations = _actions_violations(conf)
    violations.extend(_tiers_violations(conf))
    return [Violation(v.path, one_line(v.message)) for v in violations]


_DOCUMENT_END = re.compile(r"\.\.\.(?:[ \t].*)?")
"""A line that is YAML's document end marker ``...`` (at column 0, alone or before spaces or a comment)."""


def read_conf(text: str) -> Any:
    """The configuration as YAML reads it; InputError when it is not one YAML document. Text after a ``...``
    document end marker is refused with what is wrong (Volcano's YAML reader stops at the marker and ignores the
    rest; the parser's own message, "did not find expected <document start>", does not say so)."""
    try:
        return load_one(text)
    except InputError as error:
        problem = document_end_problem(text)
        if problem is not None:
            raise InputError(f"{CONF_KEY} {problem}") from None
        raise error from None


def document_end_problem(text: str) -> str | None:
    """``goes on after the YAML end of document "..." on line 2: …`` when text goes on after a ``...`` line and that
    is what stops the YAML reader (the text up to the marker reads on its own); None otherwise."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not _DOCUMENT_END.fullmatch(line):
            continue
        try:
            load_one("\n".join(lines[:index + 1]) + "\n")
        except InputError:
            return None  # something before the marker is wrong: the parser's message says what
        following = next((number for number, rest in enumerate(lines[index + 1:], start=index + 2)
                          if rest.strip() and not rest.lstrip().startswith("#")), None)
        if following is None or lines[following - 1].startswith(("---", "%")):
            return None
        return (f'goes on after the YAML end of document "..." on line {index + 1}: the scheduler reads only up '
                f'to the "..." and would ignore the rest (from line {following}); remove the "..." line')
    return None


def _actions_violations(conf: Mapping[Any, Any]) -> list[Violation]:
    path = f"{CONF_PATH}.actions"
    example = 'such as "enqueue, allocate, backfill"'
    if "actions" not in conf:
        return [Violation(path, f"is required: the actions the scheduler runs, in order, {example}")]
    actions = conf["actions"]
    if not isinstance(actions, str):
        return [Violation(path, f"must be a comma-separated string of actions, {example}, not {type_name(actions)}")]
    if not actions.strip():
        return [Violation(path, f"must name at least one action, {example}")]
    if any(not action.strip() for action in actions.split(",")):
        return [Violation(path, f"{written(actions)} has an empty action name (a stray comma?)")]
    return []


def _tiers_violations(conf: Mapping[Any, Any]) -> list[Violation]:
    path = f"{CONF_PATH}.tiers"
    if "tiers" not in conf:
        return [Violation(path, "is required: a list of tiers, each with a list of plugins")]
    tiers = conf["tiers"]
    if not isinstance(tiers, list):
        return [Violation(path, f"must be a list of tiers, each with a list of plugins, not {type_name(tiers)}")]
    violations: list[Violation] = []
    plugins: list[tuple[str, str]] = []  # (name, path) of every readable plugin
    for tier_index, tier in enumerate(tiers):
        tier_path = f"{path}[{tier_index}]"
        if not isinstance(tier, Mapping):
            violations.append(Violation(tier_path, f"must be a map with plugins, not {type_name(tier)}"))
            continue
        if "plugins" not in tier:
            violations.append(Violation(f"{tier_path}.plugins", "is required: the list of this tier's plugins"))
            continue
        tier_plugins = tier["plugins"]
        if not isinstance(tier_plugins, list):
            violations.append(Violation(f"{tier_path}.plugins",
                                        f"must be a list of plugins, not {type_name(tier_plugins)}"))
            continue
        for plugin_index, plugin in enumerate(tier_plugins):
            plugin_path = f"{tier_path}.plugins[{plugin_index}]"
            name = _plugin_violations(plugin, plugin_path, violations)
            if name is not None:
                plugins.append((name, plugin_path))
    violations.extend(_conflicts(plugins))
    return violations


def _plugin_violations(plugin: object, path: str, violations: list[Violation]) -> str | None:
    """Check one plugin entry; its name when readable."""
    if not isinstance(plugin, Mapping):
        violations.append(Violation(path, f"must be a map with a name, not {type_name(plugin)}"))
        return None
    name = plugin.get("name")
    if name is None:
        violations.append(Violation(f"{path}.name", "is required: the plugin's name, such as gang or capacity-card"))
        return None
    if not isinstance(name, str) or not name.strip():
        violations.append(Violation(f"{path}.name",
                                    f"must be a plugin name (a non-empty string), not {written(name)}"))
        return None
    arguments = plugin.get("arguments")
    if arguments is None:
        return name
    if not isinstance(arguments, Mapping):
        violations.append(Violation(f"{path}.arguments",
                                    f"{shown(name)} arguments must be a map of name to value, "
                                    f"not {type_name(arguments)}"))
        return name
    exact, prefixed = PLUGIN_ARGUMENTS.get(name, ({}, {}))
    for key, value in arguments.items():
        if not isinstance(key, str):
            continue
        problem: str | None = None
        check = exact.get(key)
        if check is not None:
            problem = check(value)
        else:
            for prefix, prefix_check in prefixed.items():
                if key.startswith(prefix):
                    problem = _prefixed_problem(prefix, key, prefix_check, value)
                    break
        if problem is not None:
            violations.append(Violation(f"{path}.arguments[{json.dumps(key)}]",
                                        f"{name} argument {shown(key)} {problem}"))
    return name


def _conflicts(plugins: list[tuple[str, str]]) -> list[Violation]:
    card = next((path for name, path in plugins if name == CAPACITY_CARD), None)
    if card is None:
        return []
    where = card.removeprefix(f"{CONF_PATH}.")
    return [
        Violation(f"{path}.name", f"plugin {name} conflicts with {CAPACITY_CARD} (at {where}): both manage queue "
                                  f"capacity, so enable only one of them")
        for name, path in plugins
        if name in CONFLICTS_WITH_CAPACITY_CARD
    ]


# Value readers: YAML scalars or strings, None when the value is not of the kind.

def read_bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def read_number(value: object) -> Fraction | None:
    """A finite number, exactly: ``2``, ``2.0``, ``"2.0"``, ``"1e3"``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value) if math.isfinite(value) else None
    if isinstance(value, str) and len(value) <= MAX_NUMBER_TEXT and _NUMBER.fullmatch(value):
        return Fraction(value)
    return None


def read_int(value: object) -> int | None:
    """A whole number (``16`` or ``"16"``) that fits int64."""
    if isinstance(value, bool):
        return None
    number: int | None = None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and len(value) <= 20 and _INTEGER.fullmatch(value):
        number = int(value)
    return number if number is not None and abs(number) <= MAX_INT else None


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


def _one_of(*choices: str, ignore_case: bool = False) -> Check:
    wanted = " or ".join(choices)

    def check(value: object) -> str | None:
        if isinstance(value, str) and (value.lower() if ignore_case else value) in choices:
            return None
        return f"must be {wanted}{' (in any case)' if ignore_case else ''}, not {written(value)}"

    return check


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


def _prefixed_problem(prefix: str, key: str, check: Check, value: object) -> str | None:
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


# Regular expressions as Go's regexp (RE2) reads them, checked with Python's re.

def go_regex_problem(pattern: str) -> str | None:
    """What Go's ``regexp.Compile`` would reject in ``pattern``, or None.

    Python's ``re`` checks the syntax after Go-only spellings (``\\z``, ``\\pL``, ``\\x{..}``, ``\\Q..\\E``,
    ``(?<name>``, ``(?U)``, ``[[:alpha:]]``, flags mid-pattern) are turned into Python ones; what Go does not
    support although Python does (backreferences, lookaround, atomic groups, possessive repeats, conditionals,
    ``\\Z``, repeats above 1000) is refused first.
    """
    translated = _python_spelling(pattern)
    if not isinstance(translated, tuple):
        return translated
    text, changed = translated
    try:
        re.compile(text)
    except re.error as error:
        where = f" at position {error.pos}" if error.pos is not None and not changed else ""
        return f"{error.msg}{where}"
    except (ValueError, RecursionError, OverflowError, MemoryError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def compile_go_regex(pattern: str) -> re.Pattern[str] | None:
    """``pattern`` (Go syntax) compiled for Python's re, or None when Go would reject it."""
    if go_regex_problem(pattern) is not None:
        return None
    translated = _python_spelling(pattern)
    return re.compile(translated[0]) if isinstance(translated, tuple) else None


def _python_spelling(pattern: str) -> tuple[str, bool] | str:
    """(the pattern spelled for Python's re, whether anything changed), or what Go would not support."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    class_start = 0  # index of the first character that may close the class
    while i < n:
        char = pattern[i]
        if char == "\\":
            step = _escape(pattern, i, in_class, out)
            if isinstance(step, str):
                return step
            i = step
            continue
        if in_class:
            if char == "]" and i >= class_start:
                in_class = False
                out.append(char)
            elif char == "[" and pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                if end >= 0:  # without ":]" further on, Go reads the "[" as a literal
                    if pattern[i + 2:end].removeprefix("^") not in _GO_CLASS_NAMES:
                        return f"invalid character class {written(pattern[i:end + 2])}"
                    out.append("a")
                    i = end + 2
                    continue
                out.append("\\[")
            elif char in "[&~|" or (char == "-" and pattern.startswith("--", i)):
                out.append("\\" + char)  # literal in Go; escaped so Python does not read a nested set
            else:
                out.append(char)
            i += 1
            continue
        if char == "[":
            in_class = True
            out.append(char)
            i += 1
            if pattern.startswith("^", i):
                out.append("^")
                i += 1
            class_start = i + 1  # a "]" right after "[" or "[^" is a literal
            continue
        if char == "(" and pattern.startswith("(?", i):
            step = _group(pattern, i, out)
            if isinstance(step, str):
                return step
            i = step
            continue
        if char in "*+?":
            if pattern.startswith("+", i + 1):
                return f"possessive repeat {pattern[i:i + 2]} is not supported by Go's regexp"
            out.append(char)
            i += 1
            continue
        if char == "{":
            repeat = _REPEAT.match(pattern, i)
            if repeat is not None:
                counts = [int(text) for text in (repeat[1], repeat[3]) if text]
                if any(count > MAX_GO_REPEAT for count in counts):
                    return f"repeat count {repeat[0]} is above Go's limit of {MAX_GO_REPEAT}"
                if pattern.startswith("+", repeat.end()):
                    return f"possessive repeat {repeat[0]}+ is not supported by Go's regexp"
                out.append(repeat[0])
                i = repeat.end()
                continue
        out.append(char)
        i += 1
    text = "".join(out)
    return text, text != pattern


def _escape(pattern: str, i: int, in_class: bool, out: list[str]) -> int | str:
    """Append the Python spelling of the escape at ``i``; the index after it, or what Go would reject."""
    if i + 1 >= len(pattern):
        return "trailing backslash at end of expression"
    code = pattern[i + 1]
    if code in "01234567":
        octal = _OCTAL.match(pattern, i + 1)
        assert octal is not None
        if code != "0" and len(octal[0]) == 1:
            return f"backreference \\{code} is not supported by Go's regexp"
        out.append(f"\\x{int(octal[0], 8):02x}")
        return octal.end()
    if code in "89":
        return f"backreference \\{code} is not supported by Go's regexp"
    if code == "Z":
        return "\\Z is not supported by Go's regexp (use \\z)"
    if code in "uUN":
        return f"invalid escape sequence \\{code} (Go's regexp writes code points as \\x{{...}})"
    if code == "z" and not in_class:
        out.append("\\Z")
        return i + 2
    if code in "pP":
        if pattern.startswith("{", i + 2):
            end = pattern.find("}", i + 3)
            if end < 0 or end == i + 3:
                return f"invalid character class range {written(pattern[i:i + 12])}"
            out.append("a")
            return end + 1
        if i + 2 >= len(pattern) or not pattern[i + 2].isalpha():
            return f"invalid character class range {written(pattern[i:i + 3])}"
        out.append("a")
        return i + 3
    if code == "x" and pattern.startswith("{", i + 2):
        end = pattern.find("}", i + 3)
        digits = pattern[i + 3:end] if end >= 0 else ""
        if _HEX.fullmatch(digits) is None or int(digits, 16) > 0x10FFFF:
            return f"invalid escape sequence {written(pattern[i:end + 1] if end >= 0 else pattern[i:i + 12])}"
        out.append(f"\\U{int(digits, 16):08x}")
        return end + 1
    if code == "Q" and not in_class:
        end = pattern.find("\\E", i + 2)
        literal = pattern[i + 2:] if end < 0 else pattern[i + 2:end]
        out.append(re.escape(literal))
        return len(pattern) if end < 0 else end + 2
    if code == "C":
        out.append("." if not in_class else "a")
        return i + 2
    out.append(pattern[i:i + 2])
    return i + 2


def _group(pattern: str, i: int, out: list[str]) -> int | str:
    """Append the Python spelling of the ``(?`` group at ``i``; the index after its opening, or a Go refusal."""
    rest = pattern[i + 2:]
    if rest.startswith(("=", "!", "<=", "<!")):
        return "lookahead and lookbehind assertions are not supported by Go's regexp"
    if rest.startswith("P="):
        return "backreferences are not supported by Go's regexp"
    if rest.startswith(">"):
        return "atomic groups (?>...) are not supported by Go's regexp"
    if rest.startswith("("):
        return "conditional groups are not supported by Go's regexp"
    if rest.startswith("#"):
        return "comments (?#...) are not supported by Go's regexp"
    if rest.startswith("P<"):
        out.append("(?P<")
        return i + 4
    if rest.startswith("<"):
        out.append("(?P<")
        return i + 3
    flags = _GO_FLAGS.match(pattern, i)
    if flags is None:
        return f"invalid or unsupported Perl syntax {written(pattern[i:i + 6])}"
    # Flags change what matches, never whether the pattern is valid: a plain group (or nothing) checks the rest.
    if flags[2] == ":":
        out.append("(?:")
    return flags.end()



