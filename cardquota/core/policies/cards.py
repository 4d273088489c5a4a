"""Card rules shared by the PodGroup, Job and Pod policies: requests against queue quotas, card names against
the resources a pod requests.

Where the cluster's nodes are known (the snapshot's card catalog) a card type's resource is the one nodes offer
for it; where they are not, the type's name tells its kind (``…/mps-…`` MPS replicas, ``…/mig-<profile>-mixed``
MIG slices, anything else whole cards), which is enough to catch a whole-card name on an MPS resource.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cardquota.core import keys
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.policies.common import queue_not_found, skipped
from cardquota.core.quota import ALTERNATIVES_MISWRITTEN, card_alternatives, clipped, comma_hint, quota_allows
from cardquota.core.resources import card_requests, is_card_resource
from cardquota.core.snapshot import MAX_MEMO, MAX_SUGGESTED, CardCatalog, ClusterSnapshot
from cardquota.core.violations import (
    ANNOTATIONS,
    FieldPath,
    Violation,
    invalid,
    shown,
    too_many,
)

_MPS_TYPE = "/mps-"
MAX_NAMED = 3
"""Names listed in one message (a warning is one per rule): the rest are counted."""
MAX_JOB_TASKS = 256
"""Tasks of one Volcano Job whose rules the Job policy runs (its card names, resources and mGPU rules, per task):
beyond, the Job is refused naming the limit, so a Job's review stays bounded whatever it holds. Real Jobs have one
task per role — ps/worker/chief/evaluator, an MPI launcher and its workers, a Ray head and worker groups — and scale
by ``replicas``: tens of tasks at most."""


@dataclass(frozen=True)
class ExpectedResource:
    """The Kubernetes resource a card type is requested through."""

    resource: str | None
    """The exact resource when nodes offer the type; None when only its kind is known."""
    description: str

    def matches(self, name: str, card_type: str) -> bool:
        if self.resource is not None:
            return name == self.resource
        return _kind_matches(card_type, name)


def expected_resource(card_type: str, catalog: CardCatalog) -> ExpectedResource:
    resource = catalog.resource_of(card_type)
    if resource is not None:
        return ExpectedResource(resource, resource)
    mig = mig_profile(card_type)
    if mig is not None:
        return ExpectedResource(None, f"a MIG resource <vendor>/mig-{mig}")
    if _MPS_TYPE in card_type:
        return ExpectedResource(None, "an MPS resource such as nvidia.com/gpu.shared")
    return ExpectedResource(None, "a whole-card resource such as nvidia.com/gpu")


def mig_profile(card_type: str) -> str | None:
    """The MIG profile of ``<product>/mig-<profile>-mixed`` (``1g.5gb``), or None: what
    ``re.search(r"/mig-(.+)-mixed$", card_type)`` finds, in linear time (that regex backtracks quadratically on a
    name repeating ``/mig-``, and names come from the input)."""
    body = card_type[:-1] if card_type.endswith("\n") else card_type
    if not body.endswith("-mixed"):
        return None
    body = body[:-6]
    start = body.find("/mig-", body.rfind("\n") + 1)
    return body[start + 5:] if 0 <= start < len(body) - 5 else None


def _kind_matches(card_type: str, resource: str) -> bool:
    if not is_card_resource(resource):
        return False
    mig = mig_profile(card_type)
    if mig is not None:
        return resource.endswith(f"/mig-{mig}")
    if _MPS_TYPE in card_type:
        return resource.endswith(".shared")
    return not resource.endswith(".shared") and "/mig-" not in resource


def card_resources_requested(requests: Mapping[str, Fraction], catalog: CardCatalog) -> dict[str, Fraction]:
    """The requested resources that are card resources (:func:`resources.card_requests` over the catalog's)."""
    return card_requests(requests, catalog.resources)


def card_product(card_type: str, catalog: CardCatalog) -> str:
    """The product label value of nodes offering ``card_type`` (what a card pod's node affinity asks for)."""
    entry = catalog.get(card_type)
    return entry.product if entry is not None and entry.product else card_type.split("/", 1)[0]


def product_label(alternatives: tuple[str, ...], requests: Mapping[str, Fraction], catalog: CardCatalog) -> str:
    """The node label naming the product (``nvidia.com/gpu.product``) for a pod asking for ``alternatives`` with
    ``requests``: the first alternative's as discovered, else the vendor of the card resource it requests."""
    for card in alternatives:
        entry = catalog.get(card)
        if entry is not None and entry.product_label:
            return entry.product_label
    requested = card_resources_requested(requests, catalog)
    vendor = next((name.split("/", 1)[0] for name in sorted(requested)), "nvidia.com")
    return f"{vendor}/gpu.product"


def job_tasks_violation(manifest: Mapping[str, Any]) -> Violation | None:
    """A Volcano Job with more than :data:`MAX_JOB_TASKS` tasks."""
    spec = manifest.get("spec")
    tasks = spec.get("tasks") if isinstance(spec, MAPPING_TYPES) else None
    if isinstance(tasks, list) and len(tasks) > MAX_JOB_TASKS:
        return too_many(FieldPath.of("spec", "tasks"), f"has {len(tasks):,} tasks; cardquota checks at most "
                                                       f"{MAX_JOB_TASKS} tasks per Job (scale a task with replicas)")
    return None


def card_name_resource_violations(card_name: str, requests: Mapping[str, Fraction], catalog: CardCatalog,
                                  path: FieldPath | str, subject: str) -> list[Violation]:
    """A pod (or pod template) naming ``card_name`` must request the card type's resource, and all alternatives
    must be requested through one resource. Alternatives requested through the same resource are judged (and
    reported) together, so the work is one look-up per resource, not per alternative."""
    alternatives = card_alternatives(card_name)
    facts = _facts(alternatives, catalog)
    if facts.mixed:
        return [facts.mixed_violation(path)]
    requested = card_resources_requested(requests, catalog)
    violations = []
    asked = ""
    for key, expected in facts.groups.items():
        first = facts.members(key, 1)[0]
        if expected.resource is not None:
            found = expected.resource in requested
        else:
            found = any(expected.matches(name, first) for name in requested)
        if not found:
            asked = asked or listed(sorted(requested)) or "no card resource"
            cards = facts.members(key, MAX_LISTED + 1)
            which = f"{clipped(first)} is" if len(cards) == 1 else f"{listed_names(cards, facts.kinds.count(key))} are"
            meant = catalog.offered_through(requested, cards)  # (a MIG slice's resource, the whole card named)
            violations.append(invalid(path, f"{which} requested through {expected.description}, but {subject} "
                                            f"requests {asked}{_suggested(meant)}"))
    return violations


def _suggested(names: Sequence[str]) -> str:
    """`` (did you mean A or B?)`` for names found by a rule (not a similarity search), a few named."""
    return did_you_mean_text([clipped(name) for name in names[:MAX_NAMED]], len(names))


def alternatives_resource_violation(alternatives: tuple[str, ...], catalog: CardCatalog,
                                    path: FieldPath | str) -> Violation | None:
    """``A|B`` alternatives must share one Kubernetes resource (a pod's resources are fixed at creation)."""
    facts = _facts(alternatives, catalog)
    return facts.mixed_violation(path) if facts.mixed else None



@dataclass(frozen=True)
class _Alternatives:
    """What the card rules need to know of one ``A|B|…`` list, worked out once per card catalog (see
    :func:`_facts`): each alternative's (exact resource or None, kind), and per distinct one the resource it is
    requested through."""

    alternatives: tuple[str, ...]
    kinds: list[tuple[str | None, str]]
    groups: Mapping[tuple[str | None, str], ExpectedResource]

    @property
    def mixed(self) -> bool:
        if len(self.groups) < 2:
            return False
        exact = {resource for resource, _ in self.groups if resource is not None}
        return len(exact) > 1 or len({kind for _, kind in self.groups}) > 1

    def members(self, key: tuple[str | None, str], limit: int) -> list[str]:
        """The first ``limit`` alternatives of a group (at C speed)."""
        return list(itertools.islice(itertools.compress(self.alternatives, map(key.__eq__, self.kinds)), limit))

    def mixed_violation(self, path: FieldPath | str) -> Violation:
        if len(self.alternatives) <= MAX_LISTED:
            parts = ", ".join(f"{clipped(card)} uses {self.groups[key].description}"
                              for card, key in zip(self.alternatives, self.kinds, strict=True))
        else:  # the first alternative of a few of the resources
            parts = ", ".join(f"{clipped(self.members(key, 1)[0])} uses {expected.description}"
                              for key, expected in itertools.islice(self.groups.items(), MAX_NAMED))
            parts += f", … ({len(self.alternatives):,} alternatives on {len(self.groups):,} resources)"
        return invalid(path, f"alternatives must share one Kubernetes resource, but {parts}")


_MEMO_CHARACTERS = 1024
"""Only lists this short are remembered (real card names are tens of characters), so memory stays small."""


def _facts(alternatives: tuple[str, ...], catalog: CardCatalog) -> _Alternatives:
    """The :class:`_Alternatives` of a list, remembered per catalog (a card name is typically repeated by every
    pod and task that uses it). The work per alternative runs at C speed (map, zip) but for MIG and MPS names
    (one call each): a Volcano Job may name thousands of distinct alternatives in its tasks."""
    memo = catalog.memo
    facts = memo.get(alternatives)
    if isinstance(facts, _Alternatives):
        return facts
    resources = map(catalog.resource_by_name.get, alternatives)
    joined = keys.CARD_ALTERNATIVE_SEPARATOR.join(alternatives)
    special = "/mig-" in joined or _MPS_TYPE in joined  # else every alternative is of the whole-card kind
    kinds = map(_kind_of, alternatives) if special else itertools.repeat(_WHOLE, len(alternatives))
    kinded = list(zip(resources, kinds, strict=True))
    first = dict(zip(reversed(kinded), range(len(kinded) - 1, -1, -1), strict=True))  # → its first index
    groups = {key: expected_resource(alternatives[first[key]], catalog) for key in dict.fromkeys(kinded)}
    facts = _Alternatives(alternatives, kinded, groups)
    if sum(map(len, alternatives)) <= _MEMO_CHARACTERS:
        if len(memo) >= MAX_MEMO:
            memo.clear()
        memo[alternatives] = facts
    return facts


_WHOLE = "whole"


def _kind_of(card_type: str) -> str:
    mig = mig_profile(card_type)
    if mig is not None:
        return f"mig-{mig}"
    return "mps" if _MPS_TYPE in card_type else _WHOLE


HELD_TO_0 = (f"a queue holds 0 of a card type its {keys.CARD_QUOTA} does not list (Volcano's capacity-card plugin "
             "holds a named card request so, whatever cardquota's --unquoted-queues says); add the type to it")
"""Why a named card request in a queue without quota for its type can never run, and what to do."""

QUEUE_PATH = FieldPath.of("spec", "queue")
"""A PodGroup's or Volcano Job's queue."""


def request_against_queue(request: Mapping[str, int], queue_name: str, snapshot: ClusterSnapshot,
                          path: FieldPath | str) -> tuple[list[Violation], list[str]]:
    """Can this card request ever be admitted by its queue? Current usage never denies (that is pending).

    Linear in the request, at C speed per alternative; at most one warning per rule (unknown types, alternatives
    without quota), each naming a few and counting the rest. Every violation depends on the request (at ``path``)
    and on the queue's name (``spec.queue``), wherever it is reported."""
    violations, warnings = _request_against_queue(request, queue_name, snapshot, path)
    return [violation.depending_on(path, QUEUE_PATH) for violation in violations], warnings


def _request_against_queue(request: Mapping[str, int], queue_name: str, snapshot: ClusterSnapshot,
                           path: FieldPath | str) -> tuple[list[Violation], list[str]]:
    violations: list[Violation] = []
    warnings: list[str] = []
    catalog = snapshot.catalog()
    requested: dict[str, None] = {}
    for key in request:
        alternatives = card_alternatives(key)
        mixed = alternatives_resource_violation(alternatives, catalog, path)
        if mixed is not None:
            violations.append(mixed)
        requested.update(dict.fromkeys(alternatives))
    warnings.extend(unknown_type_warnings(requested, snapshot))
    record = snapshot.queues.get(queue_name)
    if record is None:
        if snapshot.complete:
            violations.append(queue_not_found(QUEUE_PATH, queue_name, snapshot))
        else:
            warnings.append(skipped(f"card.request against queue {shown(queue_name)}'s quota"))
        return violations, warnings
    quota = record.quota.values
    if not quota:
        violations.append(invalid(path, f"queue {shown(queue_name)} has no card quota ({keys.CARD_QUOTA}), so "
                                        f"no card request in it can ever run: {HELD_TO_0}"))
        return violations, warnings
    unquoted: dict[str, None] = {}
    usable: dict[str, None] = {}
    partly: list[str] = []
    for key, wanted in request.items():
        alternatives = card_alternatives(key)
        quoted = list(filter(quota.__contains__, alternatives))
        if not quoted:
            which = clipped(key) if len(alternatives) == 1 else "any of " + listed_names(alternatives)
            violations.append(invalid(path, f"queue {shown(queue_name)} has no quota for {which} "
                                            f"(its quota: {format_amounts(quota, limit=MAX_LISTED)})"))
            continue
        if len(quoted) < len(alternatives):
            partly.append(key)
            unquoted.update(dict.fromkeys(itertools.filterfalse(quota.__contains__, alternatives)))
            usable.update(dict.fromkeys(quoted))
        allowed = quota_allows(key, quota)
        if wanted > allowed:
            if len(alternatives) == 1:
                violations.append(invalid(path, f"requests {wanted} {clipped(key)} but queue "
                                                f"{shown(queue_name)} allows at most {allowed}: it can never run"))
            else:
                split = _listing([f"{clipped(card)} {quota[card]}" for card in quoted[:MAX_LISTED]], len(quoted),
                                 separator=" + ")
                violations.append(invalid(path, f"requests {wanted} of {clipped(key)} but queue "
                                                f"{shown(queue_name)} allows at most {allowed} across them "
                                                f"({split}): it can never run"))
    if len(unquoted) == 1 and len(partly) == 1:
        warnings.append(f"queue {shown(queue_name)} has no quota for {clipped(next(iter(unquoted)))}: only "
                        f"{listed_names(list(usable))} of {clipped(partly[0])} can be used")
    elif unquoted:
        warnings.append(f"queue {shown(queue_name)} has no quota for {len(unquoted):,} of the alternatives "
                        f"requested, which can never be used: {listed_names(list(unquoted))}; only "
                        f"{listed_names(list(usable))} can be used")
    return violations, warnings


def unknown_type_warnings(card_types: Iterable[str], snapshot: ClusterSnapshot) -> list[str]:
    """Card types no node offers, when the nodes are known: one warning naming a few (each with what it most likely
    meant, so the suggestion search runs at most :data:`MAX_NAMED` times) and counting the rest."""
    catalog = snapshot.catalog()
    if not snapshot.complete or not catalog.entries:
        return []
    unknown = list(itertools.filterfalse(catalog.entries.__contains__, dict.fromkeys(card_types)))
    if not unknown:
        return []
    if len(unknown) == 1:
        return [f"card type {clipped(unknown[0])} is not offered by any node"
                f"{_meant(catalog, unknown[0], MAX_SUGGESTED)}"]
    named = [clipped(card) + _meant(catalog, card, MAX_SUGGESTED_EACH) for card in unknown[:MAX_NAMED]]
    more = f" and {len(unknown) - MAX_NAMED:,} more" if len(unknown) > MAX_NAMED else ""
    return [f"{len(unknown):,} card types are not offered by any node: {', '.join(named)}{more}"]


def _meant(catalog: CardCatalog, card: str, limit: int) -> str:
    """What an unknown type most likely meant: ``A,B`` written for alternatives (:func:`comma_hint`), else the
    discovered types closest to it (:func:`did_you_mean`)."""
    if ALTERNATIVES_MISWRITTEN in card:
        return f": {comma_hint(card)}"
    return did_you_mean(catalog, card, limit)


MAX_SUGGESTED_EACH = 2
"""Discovered types suggested for each of several unknown types in one warning (one alone gets
:data:`~cardquota.core.snapshot.MAX_SUGGESTED`)."""


def did_you_mean(catalog: CardCatalog, card: str, limit: int) -> str:
    """`` (did you mean NVIDIA-A100-SXM4-40GB or NVIDIA-A100-SXM4-80GB?)`` — every discovered type ``card`` most
    likely meant (:meth:`CardCatalog.suggest`), the first ``limit`` named and the rest counted; empty for none."""
    suggestion = catalog.suggest(card, limit)
    return did_you_mean_text([clipped(name) for name in suggestion.names], suggestion.total)


def did_you_mean_text(names: Sequence[str], total: int) -> str:
    """`` (did you mean A or B?)``, `` (did you mean one of A, B and 3 more?)`` for ``names`` shown of ``total``;
    empty for none."""
    if not names:
        return ""
    if total > len(names):
        return f" (did you mean one of {', '.join(names)} and {total - len(names):,} more?)"
    if len(names) == 1:
        return f" (did you mean {names[0]}?)"
    return f" (did you mean {', '.join(names[:-1])} or {names[-1]}?)"


MAX_LISTED = 8
"""Items a message lists in full; longer lists show :data:`MAX_NAMED` and count the rest."""


def listed(items: list[str], *, separator: str = ", ") -> str:
    """``a, b, c`` — or, beyond :data:`MAX_LISTED` items, the first :data:`MAX_NAMED` and ``and N more``."""
    return _listing(items[:MAX_LISTED], len(items), separator=separator)


def listed_names(names: Sequence[str], total: int | None = None) -> str:
    """:func:`listed` for names from the input (each clipped: only those shown are), of ``total`` in all."""
    return _listing([clipped(name) for name in names[:MAX_LISTED]], len(names) if total is None else total)


def _listing(shown_items: list[str], total: int, *, separator: str = ", ") -> str:
    if total <= MAX_LISTED:
        return separator.join(shown_items)
    return f"{separator.join(shown_items[:MAX_NAMED])} and {total - MAX_NAMED:,} more"


def format_amounts(amounts: Mapping[str, int], *, limit: int | None = None) -> str:
    """``NVIDIA-A100 10, NVIDIA-H100 5``; with ``limit``, a longer map shows a few entries and counts the rest."""
    if limit is not None and len(amounts) > limit:
        first = ", ".join(f"{clipped(name)} {amount}" for name, amount in itertools.islice(amounts.items(), MAX_NAMED))
        return f"{first} and {len(amounts) - MAX_NAMED:,} more"
    return ", ".join(f"{shown(name)} {amount}" for name, amount in amounts.items()) or "none"


CARD_NAME_PATH = ANNOTATIONS.key(keys.CARD_NAME)
CARD_REQUEST_PATH = ANNOTATIONS.key(keys.CARD_REQUEST)
CARD_QUOTA_PATH = ANNOTATIONS.key(keys.CARD_QUOTA)
