"""Helpers every policy uses: reading an object without raising, saying when a cluster rule was skipped, and
ratcheting updates."""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from cardquota.core import keys
from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest
from cardquota.core.policies.config import Admit, PolicyConfig
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict, decide
from cardquota.core.violations import FieldPath, Violation, invalid, not_found, same_value, shown, value_at
from cardquota.core.workloads import TEMPLATE_PATHS

View = TypeVar("View")

NO_CLUSTER = "no cluster snapshot"


def read_view(build: Callable[[Manifest], View], manifest: Manifest) -> tuple[View | None, list[Violation]]:
    """A typed view of the object, or the violation that says which field could not be read."""
    try:
        return build(manifest), []
    except InputError as error:
        if error.where:
            return None, [invalid(error.where, error.message)]
        return None, [invalid("object", error.message).depending_on("")]  # no field named: the whole object


def annotations_of(manifest: object) -> Mapping[Any, Any]:
    """An object's (or a pod template's) ``metadata.annotations``; empty when either is missing or not a map."""
    metadata = manifest.get("metadata") if isinstance(manifest, MAPPING_TYPES) else None
    annotations = metadata.get("annotations") if isinstance(metadata, MAPPING_TYPES) else None
    return annotations if isinstance(annotations, MAPPING_TYPES) else {}


def unknown_card_key_warnings(manifest: Manifest, old: Manifest | None, kind: str) -> list[str]:
    """A warning for each ``volcano.sh/card.*`` or ``cardquota.io/*`` annotation key cardquota does not know (a
    misspelling: the key is ignored, so what it was meant to say does not apply), with the closest it knows; only
    when the key is new."""
    before = annotations_of(old) if old is not None else {}
    warnings = []
    for key in annotations_of(manifest):
        if (isinstance(key, str) and key.startswith(keys.CARD_KEY_PREFIXES) and key not in keys.CARD_KEYS
                and key not in before):
            close = difflib.get_close_matches(key, sorted(keys.CARD_KEYS), n=1, cutoff=0.8)
            hint = f" (did you mean {close[0]}?)" if close else f" (it reads {', '.join(sorted(keys.CARD_KEYS))})"
            warnings.append(f"metadata.annotations[{key}]: not an annotation cardquota reads{hint}: ignored, "
                            f"so this {kind} is judged without it")
    return warnings


def warning_unknown_card_keys(kind: str) -> Callable[[Admit], Admit]:
    """The policy with :func:`unknown_card_key_warnings` added to its verdict (whatever else it decides)."""
    def wrap(admit: Admit) -> Admit:
        @functools.wraps(admit)
        def admitted(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot,
                     config: PolicyConfig) -> Verdict:
            verdict = admit(manifest, old, snapshot, config)
            found = unknown_card_key_warnings(manifest, old, kind)
            return dataclasses.replace(verdict, warnings=(*verdict.warnings, *found)) if found else verdict
        return admitted
    return wrap


MAX_NAMES_COMPARED = 1_000
"""Names a "did you mean" compares a misspelt one with (the first ones of a length that could match, in the order
given): a namespace of more PodGroups than this is searched in part, so a review's cost stays bounded (10,000
names of 200 characters took a second of a shared core)."""
MAX_NAME_LENGTH = 100
"""Names longer than this get no suggestion (difflib is quadratic in the length; real names are short)."""
NAME_CUTOFF = 0.75
"""How alike a name must be to be suggested (difflib's ratio): ``trainig-pg`` for ``training-pg`` is 0.95,
``team-b`` for ``team-a`` 0.83, ``a`` for ``b`` 0."""


def did_you_mean_name(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean training-pg?)`` — the one or two names among ``candidates`` (queues, a namespace's
    PodGroups) closest to a misspelt ``name``; empty when none is close."""
    if len(name) > MAX_NAME_LENGTH:
        return ""
    low, high = len(name) * NAME_CUTOFF / (2 - NAME_CUTOFF), len(name) * (2 - NAME_CUTOFF) / NAME_CUTOFF
    alike = (candidate for candidate in candidates  # (a ratio of at least NAME_CUTOFF needs lengths this close)
             if low <= len(candidate) <= high and candidate != name)
    pool = [candidate for candidate, _ in zip(alike, range(MAX_NAMES_COMPARED), strict=False)]
    close = difflib.get_close_matches(name, pool, n=2, cutoff=NAME_CUTOFF)
    return f" (did you mean {' or '.join(map(shown, close))}?)" if close else ""


def queue_not_found(path: FieldPath | str, queue: str, snapshot: ClusterSnapshot, *, what: str = "queue",
                    said: str | None = None) -> Violation:
    """``queue team-b does not exist (did you mean team-a?)`` at ``path`` (``what``: ``parent queue``; ``said``: the
    queue as the message shows it, when it says more than its name), the suggestion among the snapshot's queues."""
    return not_found(path, f"{what} {said or shown(queue)} does not exist"
                           f"{did_you_mean_name(queue, snapshot.queues)}")


SKIPPED = f"not checked: {NO_CLUSTER} (pass --cluster, or wait for the webhook's first full list)"


def skipped(what: str) -> str:
    """The warning for a rule that needs the whole cluster, evaluated without it."""
    return f"{what} {SKIPPED}"


def skipped_rule(warning: str) -> str | None:
    """What a verdict's warning says was skipped for want of the cluster (``what`` of :func:`skipped`), or None
    for any other warning."""
    return warning.removesuffix(" " + SKIPPED) if warning.endswith(" " + SKIPPED) else None


@dataclass(frozen=True)
class ClusterRule:
    """A rule that is only evaluated on a complete snapshot and otherwise skipped without a word per object: the
    CLI says once per run that it was skipped, for the kinds it concerns (rules that name what they skip per
    object use :func:`skipped`)."""

    what: str
    kinds: frozenset[tuple[str, str]]
    """(API group, kind) of the objects it judges."""


CARD_KINDS = frozenset({("scheduling.volcano.sh", "Queue"), ("scheduling.volcano.sh", "PodGroup"),
                        ("batch.volcano.sh", "Job"), ("batch.volcano.sh", "CronJob"), ("", "Pod")})
CLUSTER_RULES = (
    ClusterRule("card types no node offers", CARD_KINDS),
    ClusterRule("top-level queues' card quotas above the cards the nodes offer",
                frozenset({("scheduling.volcano.sh", "Queue")})),
    ClusterRule("a card workload's replicas against its queue's quota", frozenset(TEMPLATE_PATHS)),
    ClusterRule("a HorizontalPodAutoscaler's maxReplicas against its workload's queue quota",
                frozenset({("autoscaling", "HorizontalPodAutoscaler")})),
)
"""Every rule skipped silently on an incomplete snapshot: :func:`cards.unknown_type_warnings`,
``queue._overcommit_warnings``, ``workload.admit`` (replicas) and ``workload.admit_hpa``."""


UNCHANGED_NOTE = "already so before this update, so not denied"


def ratcheting(admit: Admit) -> Admit:
    """The policy with UPDATEs ratcheted, as Kubernetes ratchets CRD validation (KEP-4008): an update is judged on
    what it changes. A violation is a warning, not a denial, when the update leaves every value it depends on as it
    was (:attr:`Violation.inputs`: the value at its field path — an annotation's text, a field's value — and the
    others its rule read, compared by :func:`same_value`) and the old object, judged against the same cluster, has
    it too (same path, reason and message). Such a value is stored already (a quota the cluster outgrew, a parent
    queue deleted since, a request above a quota lowered since), and refusing would only block unrelated writes
    (labels, annotations, status bookkeeping, cardquota's own usage annotations). A violation any of whose values
    the update sets, changes or removes is judged in full: a child queue whose parent is gone cannot raise its
    quota, a PodGroup in a deleted queue cannot raise its request, a malformed quota cannot be swapped for another.
    CREATE is unchanged; the old object is judged only when the new one has a violation. A denial carries no patch,
    so an update let through this way is not mutated (the canonical quota form, a Job's derived card.request wait
    for an update with nothing carried over)."""

    @functools.wraps(admit)
    def ratcheted(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot,
                  config: PolicyConfig) -> Verdict:
        verdict = admit(manifest, old, snapshot, config)
        if verdict.allowed or old is None:
            return verdict
        before = set(admit(old, None, snapshot, config).violations)
        unchanged = _Unchanged(old, manifest)
        carried: list[Violation] = []
        new: list[Violation] = []
        for violation in verdict.violations:
            kept = violation in before and all(map(unchanged, violation.inputs))
            (carried if kept else new).append(violation)
        if not carried:
            return verdict
        return decide(new, [*(f"{violation} ({UNCHANGED_NOTE})" for violation in carried), *verdict.warnings])

    return ratcheted


class _Unchanged:
    """Whether the value at a path is the same in the old and the new object, each path compared once per update
    (many violations share one: a Job's tasks, a quota's entries)."""

    def __init__(self, old: Manifest, new: Manifest) -> None:
        self.old, self.new = old, new
        self.known: dict[str, bool] = {}

    def __call__(self, path: str) -> bool:
        found = self.known.get(path)
        if found is None:
            found = self.known[path] = same_value(value_at(self.old, path), value_at(self.new, path))
        return found
