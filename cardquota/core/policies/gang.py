"""What a gang's card request is and whether its queue can ever hold it — shared by the Volcano Job policy and the
registered workload kinds (Kubeflow training jobs, KubeRay, JobSet, LeaderWorkerSet), so both judge a gang by one
rule: the cards of the pods the PodGroup must place together (its ``minMember``) must fit the queue
(:func:`~cardquota.core.policies.cards.request_against_queue`: denied "it can never run" otherwise), and when every
replica together needs more than the queue allows, the pods beyond the gang only wait (a warning)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from cardquota.core import keys
from cardquota.core.policies.cards import MAX_NAMED, request_against_queue
from cardquota.core.quota import clipped, quota_allows
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.violations import FieldPath, Violation, shown


@dataclass
class CardRole:
    """A role of a gang (a Volcano Job's task, a training job's replica type, …) whose pods name a card type."""

    name: str
    index: int
    """Its position among the gang's roles (what a gang count list is indexed by)."""
    card_name: str
    replicas: int
    cards_per_pod: int


def derived_request(roles: Sequence[CardRole], gang: Sequence[int] | None) -> dict[str, int]:
    """Pods x cards per pod, summed per card key, in role order: the gang's pods (``gang``: pods per role index), or
    every replica (None)."""
    request: dict[str, int] = {}
    for role in roles:
        pods = role.replicas if gang is None else min(gang[role.index], role.replicas)
        amount = pods * role.cards_per_pod
        if amount > 0:
            request[role.card_name] = request.get(role.card_name, 0) + amount
    return request


def derivation(roles: Sequence[CardRole], gang: Sequence[int] | None, noun: str) -> str:
    """How :func:`derived_request` got its request, for messages: ``{"NVIDIA-A100":32}: 4 pods of task worker x 8``
    (with a multiplication sign for the x; roles of no card left out; a few roles named and the rest counted)."""
    request = derived_request(roles, gang)
    parts = []
    for role in roles:
        pods = role.replicas if gang is None else min(gang[role.index], role.replicas)
        if pods * role.cards_per_pod > 0:
            parts.append(f"{pods} pod{'s' if pods != 1 else ''} of {noun} {shown(role.name)} × {role.cards_per_pod}")
    more = f" and {len(parts) - MAX_NAMED:,} more {noun}s" if len(parts) > MAX_NAMED else ""
    written = json.dumps({clipped(key): amount for key, amount in request.items()}, separators=(",", ":"),
                         ensure_ascii=False)
    return f"{written}: {' + '.join(parts[:MAX_NAMED])}{more}"


def as_derived(violations: Iterable[Violation], request_path: FieldPath | str, at: FieldPath | str,
               derived_from: str, how: str) -> list[Violation]:
    """Violations of a ``volcano.sh/card.request`` the policy derived (nobody wrote it), said as derived and moved
    to what it was derived from (``at``): ``the volcano.sh/card.request derived from the tasks
    ({"NVIDIA-A100":32}: 4 pods of task worker x 8) requests 32 NVIDIA-A100 but …``. Violations elsewhere (a
    missing queue at ``spec.queue``) are kept as they are."""
    said = f"the {keys.CARD_REQUEST} derived from {derived_from} ({how})"
    moved = []
    for violation in violations:
        if violation.path != str(request_path):
            moved.append(violation)
            continue
        joint = " " if violation.message.startswith("requests ") else ": "
        moved.append(dataclasses.replace(violation, path=str(at), message=f"{said}{joint}{violation.message}")
                     .depending_on(request_path))
    return moved


def gang_against_queue(wanted: Mapping[str, int], full: Mapping[str, int], pods: int, queue: str,
                       snapshot: ClusterSnapshot, path: FieldPath | str,
                       gang_said: Callable[[str, int], str]) -> tuple[list[Violation], list[str]]:
    """The gang's cards (``wanted``) against its queue; when they fit but all ``pods`` replicas (``full``) need
    more than the queue allows, a warning per card key, which begins with ``gang_said(key, amount)`` (what the
    gang's share is called where the rule runs)."""
    fit, warnings = request_against_queue(wanted, queue, snapshot, path)
    if full and not fit and full != wanted:
        warnings = [*warnings, *elastic_warnings(wanted, full, pods, queue, snapshot, gang_said)]
    return fit, warnings


def elastic_warnings(wanted: Mapping[str, int], full: Mapping[str, int], pods: int, queue: str,
                     snapshot: ClusterSnapshot, gang_said: Callable[[str, int], str]) -> list[str]:
    """An elastic gang (fewer pods must start together than it has) whose replicas together need more cards than its
    queue's quota allows: it is enqueued with its gang's cards, and the pods beyond the quota stay Pending."""
    record = snapshot.queues.get(queue)
    if record is None or not record.quota.values:
        return []
    warnings = []
    for key, amount in full.items():
        allowed = quota_allows(key, record.quota.values)
        if amount > allowed:
            warnings.append(
                f"{gang_said(key, wanted.get(key, 0))}; all {pods} pods need {amount} {clipped(key)}, but queue "
                f"{shown(queue)} allows at most {allowed}: at most {allowed} of those cards are ever in use, the "
                "other pods stay Pending")
    return warnings
