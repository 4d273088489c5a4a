"""Helpers every policy uses: reading an object without raising, saying when a cluster rule was skipped, and
ratcheting updates."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest
from cardquota.core.policies.config import Admit, PolicyConfig
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict, decide
from cardquota.core.violations import Violation, invalid

View = TypeVar("View")

NO_CLUSTER = "no cluster snapshot"


def read_view(build: Callable[[Manifest], View], manifest: Manifest) -> tuple[View | None, list[Violation]]:
    """A typed view of the object, or the violation that says which field could not be read."""
    try:
        return build(manifest), []
    except InputError as error:
        return None, [invalid(error.where or "object", error.message)]


def annotations_of(manifest: object) -> Mapping[Any, Any]:
    """An object's (or a pod template's) ``metadata.annotations``; empty when either is missing or not a map."""
    metadata = manifest.get("metadata") if isinstance(manifest, MAPPING_TYPES) else None
    annotations = metadata.get("annotations") if isinstance(metadata, MAPPING_TYPES) else None
    return annotations if isinstance(annotations, MAPPING_TYPES) else {}


def skipped(what: str) -> str:
    """The warning for a rule that needs the whole cluster, evaluated without it."""
    return f"{what} not checked: {NO_CLUSTER} (pass --cluster, or wait for the webhook's first full list)"


UNCHANGED_NOTE = "already so before this update, so not denied"


def ratcheting(admit: Admit) -> Admit:
    """The policy with UPDATEs ratcheted, as Kubernetes ratchets CRD validation (KEP-4008): an update is judged on
    what it changes. A violation the old object has too — the same field path and message, the old object judged
    against the same cluster — is a warning, not a denial: the value is stored already (a quota the cluster
    outgrew, a parent queue deleted since, a request above a quota lowered since), and refusing would only block
    unrelated writes (labels, annotations, status bookkeeping, cardquota's own usage annotations). A value the
    update sets or changes is judged in full. CREATE is unchanged; the old object is judged only when the new one
    has a violation. A denial carries no patch, so an update let through this way is not mutated (the canonical
    quota form, a Job's derived card.request wait for an update with nothing carried over)."""

    @functools.wraps(admit)
    def ratcheted(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot,
                  config: PolicyConfig) -> Verdict:
        verdict = admit(manifest, old, snapshot, config)
        if verdict.allowed or old is None:
            return verdict
        before = set(admit(old, None, snapshot, config).violations)
        carried = [violation for violation in verdict.violations if violation in before]
        if not carried:
            return verdict
        new = [violation for violation in verdict.violations if violation not in before]
        return decide(new, [*(f"{violation} ({UNCHANGED_NOTE})" for violation in carried), *verdict.warnings])

    return ratcheted
