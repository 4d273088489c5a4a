"""The Eviction API edge of kube.py, pure: the body :func:`kube.eviction_body` sends, what each error answer
becomes (:func:`kube.eviction_refusal`, from the Status the API server sends: k8s.io/kubernetes v1.33,
pkg/registry/core/pod/storage/eviction.go), and what RBAC sees of the request (tests/rbac.py ``request_of``).
Against kmock serving the Eviction API: tests/integration/test_eviction_kmock.py."""

from __future__ import annotations

from typing import Any

import pytest
from rbac import Request, request_of

from cardquota.kube import EvictionAnswer, EvictionOutcome, KubeError, api_error, eviction_body, eviction_refusal

META = {"name": "sweep-0", "namespace": "ml"}
EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": META}


@pytest.mark.parametrize(("uid", "dry_run", "body"), [
    ("uid-1", False, {**EVICTION, "deleteOptions": {"preconditions": {"uid": "uid-1"}}}),
    ("uid-1", True, {**EVICTION, "deleteOptions": {"preconditions": {"uid": "uid-1"}, "dryRun": ["All"]}}),
    (None, True, {**EVICTION, "deleteOptions": {"dryRun": ["All"]}}),
    (None, False, EVICTION),
    ("", False, EVICTION),
])
def test_the_eviction_body(uid: str | None, dry_run: bool, body: dict[str, Any]) -> None:
    assert eviction_body("ml", "sweep-0", uid, dry_run=dry_run) == body


BUDGET = "Cannot evict pod as it would violate the pod's disruption budget."
NEEDS = "The disruption budget sweep needs 2 healthy pods and has 2 currently"


def answered(status: int, message: str, details: dict[str, Any] | None = None, reason: str = "",
             retry_after: float | None = None) -> KubeError:
    """The KubeError kube._send raises for the API server's Status."""
    answer: dict[str, Any] = {"kind": "Status", "status": "Failure", "message": message, "code": status,
                              **({"reason": reason} if reason else {}), **({"details": details} if details else {})}
    return api_error(f"POST /api/v1/namespaces/ml/pods/sweep-0/eviction: HTTP {status}: {message}", status,
                     retry_after=retry_after, answer=answer)


REFUSED = EvictionOutcome.REFUSED_BY_BUDGET


@pytest.mark.parametrize(("error", "expected"), [
    (answered(404, 'pods "sweep-0" not found', {"name": "sweep-0", "kind": "pods"}, "NotFound"),
     EvictionAnswer(EvictionOutcome.GONE, 'pods "sweep-0" not found')),
    (answered(409, 'Operation cannot be fulfilled on pods "sweep-0": Precondition failed', reason="Conflict"),
     EvictionAnswer(EvictionOutcome.CONFLICT, 'Operation cannot be fulfilled on pods "sweep-0": Precondition failed')),
    (answered(429, BUDGET, {"causes": [{"reason": "DisruptionBudget", "message": NEEDS}]}, "TooManyRequests"),
     EvictionAnswer(REFUSED, f"{BUDGET} {NEEDS}")),
    (answered(429, BUDGET, {"causes": [{"reason": "DisruptionBudget", "message": "behind"}],
                            "retryAfterSeconds": 10}, "TooManyRequests", retry_after=10),
     EvictionAnswer(REFUSED, f"{BUDGET} behind", 10)),
    (answered(403, 'poddisruptionbudget.policy "sweep" is forbidden: pdb disruptions allowed is negative',
              {"name": "sweep", "group": "policy", "kind": "poddisruptionbudget"}, "Forbidden"),
     EvictionAnswer(REFUSED, 'poddisruptionbudget.policy "sweep" is forbidden: pdb disruptions allowed is negative')),
    (answered(500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."),
     EvictionAnswer(REFUSED, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
                             "support.")),
    # Not the pod's: raised by evict_pod as they came.
    (answered(429, "Too many requests, please try again later.", reason="TooManyRequests", retry_after=1), None),
    (answered(403, 'pods "sweep-0" is forbidden: User "u" cannot create resource "pods/eviction"',
              {"name": "sweep-0", "kind": "pods"}, "Forbidden"), None),
    (answered(500, "etcdserver: request timed out", reason="InternalError"), None),
    (answered(-1, "no Kubernetes API reachable"), None),
], ids=["404", "409", "429-budget", "429-budget-behind", "403-budget", "500-several-budgets", "429-throttled",
        "403-rbac", "500-other", "unreachable"])
def test_what_an_error_answer_to_an_eviction_means(error: KubeError, expected: EvictionAnswer | None) -> None:
    assert eviction_refusal(error) == expected


def test_rbac_sees_an_eviction_as_create_on_pods_eviction() -> None:
    assert request_of("POST", "/api/v1/namespaces/ml/pods/sweep-0/eviction", {"timeout": "2s"}) == \
        Request("create", "", "pods/eviction", "ml", "sweep-0")
