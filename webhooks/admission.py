"""Admission of one AdmissionRequest: the kind's policy over the cache, with the kind's failure mode.

Never raises: a policy that fails, or a cache that has not loaded yet, is answered per kind — fail-open (allowed
with a warning saying cardquota could not check) or fail-closed (denied with the reason).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from cardquota.core.errors import one_line
from cardquota.core.policies.config import FailureMode, PolicyConfig
from cardquota.core.verdict import Verdict, allow
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.latency import ADMISSION_LATENCIES
from cardquota.webhooks import cronjob, job, node, pod, podgroup, queue, schedconf, workload
from cardquota.webhooks.kinds import AdmittedKind
from cardquota.webhooks.review import AdmissionRequest, response

log = logging.getLogger("cardquota.webhooks")

ADMITTED: dict[tuple[str, str], AdmittedKind] = {
    kind.key: kind for kind in (*(module.WEBHOOK for module in (queue, podgroup, job, cronjob, pod, node, schedconf)),
                                *workload.WEBHOOKS)
}


ALLOWED = allow()
"""Allowed with nothing more to say (a Verdict is immutable: one serves every such answer)."""


class Admission:
    """The admission decisions of both webhooks: each kind's policy over the cache's snapshot, answered per the
    kind's failure mode when the policy cannot run."""

    def __init__(self, cache: ClusterCache, policy: PolicyConfig,
                 failure_modes: Mapping[str, FailureMode] | None = None,
                 kinds: Iterable[AdmittedKind] = ADMITTED.values(), own_users: Iterable[str] = ()) -> None:
        self.cache = cache
        self.policy = policy
        self.failure_modes = dict(failure_modes or {})
        self.kinds = {kind.key: kind for kind in kinds}
        self.own_users = frozenset(own_users)
        """cardquota's own service accounts: their writes (annotations it keeps) are never refused."""

    def answer(self, request: AdmissionRequest, mutating: bool) -> dict[str, Any]:
        """The AdmissionReview answering one request (its latency observed in the webhook histogram). Never raises:
        a failure here is answered per the kind's failure mode."""
        start = time.perf_counter()
        try:
            verdict = self.review(request, mutating=mutating)
            ADMISSION_LATENCIES.observe(request.kind, "allowed" if verdict.allowed else "denied",
                                        time.perf_counter() - start)
            return response(request.uid, verdict, with_patch=mutating)
        except Exception as error:  # nothing here should fail; if it does, still answer, per the kind's failure mode
            log.exception("could not answer the review of %s (uid %s)", request.identity, request.uid)
            verdict = self.cannot_check(request, f"internal error ({type(error).__name__})")
            return response(request.uid, verdict, with_patch=False)

    def review(self, request: AdmissionRequest, *, mutating: bool) -> Verdict:
        """The verdict for the validating (``mutating=False``) or mutating webhook. The mutating one only
        patches — it never denies, even when it cannot check, so a refusal always names the validating webhook
        and carries its message — and leaves warnings to the validating one, so kubectl shows each once; the
        validating one never patches."""
        admitted = self.kinds.get((request.group, request.kind))
        if admitted is None or request.operation == "CONNECT" or request.user in self.own_users:
            return ALLOWED
        if request.operation == "DELETE":
            return self._delete(admitted, request) if not mutating else ALLOWED
        snapshot = self.cache.ledger.snapshot
        if not snapshot.complete:  # (the cache's first full list has not arrived)
            if mutating:
                return ALLOWED
            return self.cannot_check(request, "its cluster snapshot is still loading; retry in a few seconds")
        try:
            verdict = admitted.admit(request.policy_object() or {}, request.policy_old_object(),
                                     snapshot, self.policy)
        except Exception as error:  # a bug in a policy: answered per failure mode, never a 500
            log.exception("policy for %s failed (%s, uid %s)", request.identity, request.operation, request.uid)
            if mutating:
                return ALLOWED
            return self.cannot_check(request, f"internal error ({type(error).__name__}: {error})")
        if mutating:
            if not verdict.allowed or not verdict.patch:
                return ALLOWED
            only_patch = not (verdict.warnings or verdict.message or verdict.violations)
            return verdict if only_patch else allow(patch=verdict.patch)
        if not verdict.patch:
            return verdict  # (rebuilding it would only check its warnings' budget again)
        warnings = verdict.warnings
        if verdict.allowed and admitted.mutation_matters:  # it sees the object after every mutation
            warnings = (*warnings, unmutated_warning(verdict))
        return Verdict(verdict.allowed, verdict.message, verdict.violations, warnings)

    def _delete(self, admitted: AdmittedKind, request: AdmissionRequest) -> Verdict:
        if admitted.on_delete is None or not self.cache.ledger.snapshot.complete:
            return allow()
        try:
            return allow(warnings=admitted.on_delete(request.name, self.cache.ledger))
        except Exception:
            log.exception("delete warnings for %s failed", request.identity)
            return allow()

    def failure_mode(self, request: AdmissionRequest) -> FailureMode:
        admitted = self.kinds.get((request.group, request.kind))
        default = admitted.failure_mode if admitted is not None else FailureMode.OPEN
        return self.failure_modes.get(request.kind, default)

    def cannot_check(self, request: AdmissionRequest, reason: str) -> Verdict:
        """The answer when the policy cannot run, per the kind's failure mode."""
        sentence = f"cardquota could not check {request.identity}: {reason}"
        if self.failure_mode(request) is FailureMode.OPEN:
            return allow(warnings=[f"{sentence}; it was let through unchecked"])
        return Verdict(allowed=False, message=one_line(sentence))  # not a field's fault: no violation, no cause


def unmutated_warning(verdict: Verdict) -> str:
    """Said by the validating webhook of an object still lacking cardquota's mutation: the mutating webhook did not
    run (not registered, or its failurePolicy let the object through) or a later mutating webhook undid it."""
    paths = ", ".join(dict.fromkeys(operation["path"] for operation in verdict.patch))
    return (f"cardquota's mutating webhook would still change {paths}: it did not run, or a later mutating webhook "
            "undid its change; the object is admitted without it")
