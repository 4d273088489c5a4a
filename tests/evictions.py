"""A kmock emulator that serves the Eviction API (``POST /api/v1/namespaces/NS/pods/NAME/eviction``) as the API
server does, for tests: kmock alone would store the Eviction as if it were a pod.

What it answers, after k8s.io/kubernetes v1.33, pkg/registry/core/pod/storage/eviction.go (``EvictionREST.Create``,
``checkAndDecrement``, ``canIgnorePDB``) and k8s.io/apiserver v0.33.0 (the create handler answers a success Status
with 201; a failure Status returned without an error is sent with its own code, ``finisher.go``; an error's
``retryAfterSeconds`` becomes a ``Retry-After`` header, ``responsewriters/writers.go`` ``ErrorNegotiated``):

- the body's name differs from the path's: 400 BadRequest;
- no such pod: 404 NotFound;
- a pod Pending, Succeeded, Failed or terminating: deleted with no budget check;
- else the PodDisruptionBudgets of its namespace whose ``spec.selector.matchLabels`` all match its labels (an empty
  selector matches nothing; ``matchExpressions`` are not modelled): more than one, a 500 Status; one whose
  ``status.observedGeneration`` is behind ``metadata.generation``, 429 TooManyRequests with ``Retry-After: 10``;
  one with ``status.disruptionsAllowed`` 0, 429 with none; the 429s carry the sentence "Cannot evict pod as it would
  violate the pod's disruption budget." and a ``DisruptionBudget`` cause naming the budget; otherwise the budget's
  ``disruptionsAllowed`` is decremented (not with ``dryRun``);
- the deletion: a ``deleteOptions.preconditions.uid`` other than the pod's, 409 Conflict (the API server retries a
  conflict on a pod it deletes without a budget check for up to 10 s first; here it answers at once); otherwise the
  pod is deleted (not with ``dryRun: [All]``, as the API server validates but stores nothing) and the answer is a
  201 Status Success. With :attr:`EvictionServed.graceful`, the deletion is graceful as the API server makes it
  (k8s.io/kubernetes ``pkg/registry/core/pod/strategy.go``, ``podStrategy.CheckGracefulDelete``, read at commit
  008b3652959c): a pod bound to a node (``spec.nodeName``), not Succeeded or Failed, whose
  ``spec.terminationGracePeriodSeconds`` is not 0 (the API server defaults it to 30) gets a ``deletionTimestamp``
  and stays (a MODIFIED event) until its kubelet ends it — here, until the test deletes it; any other pod goes at
  once (a DELETED event).

The unready-pod branch (a budget with enough healthy pods lets an unready one go without decrementing) is not
modelled. Compose it after :class:`rbac.RbacEnforced` (:class:`EvictingUnderRbac`) so a refused eviction never
reaches it.
"""

from __future__ import annotations

import datetime
from typing import Any, ClassVar

import aiohttp.web
import kmock
from rbac import RbacEnforced

BUDGET_SENTENCE = "Cannot evict pod as it would violate the pod's disruption budget."
SEVERAL_BUDGETS_SENTENCE = ("This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
                            "support.")


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None,
           headers: dict[str, str] | None = None) -> aiohttp.web.Response:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "code": code}
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    return aiohttp.web.json_response(body, status=code, headers=headers)


def too_many_requests(cause: str, retry_after: int) -> aiohttp.web.Response:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return status(429, "TooManyRequests", BUDGET_SENTENCE, details,
                  {"Retry-After": str(retry_after)} if retry_after else None)


def _grace_period(pod: dict[str, Any]) -> bool:
    """Whether the API server deletes the pod gracefully (``CheckGracefulDelete``, see the module docstring)."""
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    return bool(spec.get("nodeName")) and phase not in ("Succeeded", "Failed") \
        and spec.get("terminationGracePeriodSeconds", 30) != 0


def _selects(budget: dict[str, Any], labels: dict[str, str]) -> bool:
    match = ((budget.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return bool(match) and all(labels.get(key) == value for key, value in match.items())


class EvictionServed(kmock.KubernetesEmulator):
    """kmock that answers a pod eviction as the API server does (see the module docstring)."""

    graceful: ClassVar[bool] = False
    """An evicted pod bound to a node is marked for deletion (a ``deletionTimestamp``) and stays, as a kubelet's
    grace period keeps it; by default every evicted pod goes at once."""

    async def _handle(self, request: Any) -> Any:
        resource = request.resource
        if resource is None or resource.plural != "pods" or request.subresource != "eviction" \
                or str(request.method.value).upper() != "POST":
            return await super()._handle(request)
        return await self._evict(resource, request.namespace, request.name, request.data or {})

    async def _evict(self, resource: Any, namespace: str, name: str, eviction: dict[str, Any]) -> Any:
        if (eviction.get("metadata") or {}).get("name") != name:
            return status(400, "BadRequest", "name in URL does not match name in Eviction object")
        options = eviction.get("deleteOptions") or {}
        dry_run = "All" in (options.get("dryRun") or [])
        key = (resource, namespace, name)
        async with self._lock:
            pod = self._objects[key] if key in self._objects else None  # noqa: SIM401 - no .get there
            if pod is None or pod.deleted:
                return status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
            metadata = pod.get("metadata") or {}
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            if not (phase in ("Pending", "Succeeded", "Failed") or metadata.get("deletionTimestamp")):
                refusal = self._check_budgets(namespace, dict(metadata.get("labels") or {}), name, dry_run)
                if refusal is not None:
                    return refusal
            wanted = (options.get("preconditions") or {}).get("uid")
            if wanted and wanted != metadata.get("uid"):
                return status(409, "Conflict", (
                    f'Operation cannot be fulfilled on pods "{name}": StorageError: invalid object, Code: 4, Key: '
                    f"/registry/pods/{namespace}/{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition "
                    f"failed: UID in precondition: {wanted}, UID in object meta: {metadata.get('uid')}"),
                    {"name": name, "kind": "pods"})
            if not dry_run and self.graceful and _grace_period(pod.raw):
                if not metadata.get("deletionTimestamp"):
                    now = datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    pod.patch({"metadata": {"deletionTimestamp": now}})
                    await self._buses[resource].put({"type": "MODIFIED", "object": pod.raw})
            elif not dry_run:
                pod.delete()
                await self._buses[resource].put({"type": "DELETED", "object": pod.last.raw})
        return aiohttp.web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                          "code": 201}, status=201)

    def _check_budgets(self, namespace: str, labels: dict[str, str], pod: str, dry_run: bool) -> Any:
        budgets = [obj for (resource, where, _), obj in self._objects.items()
                   if resource.plural == "poddisruptionbudgets" and where == namespace and not obj.deleted
                   and _selects(obj.raw, labels)]
        if len(budgets) > 1:
            return status(500, "", SEVERAL_BUDGETS_SENTENCE)
        if not budgets:
            return None
        budget = budgets[0]
        name = budget["metadata"]["name"]
        state = budget.get("status") or {}
        if int(state.get("observedGeneration") or 0) < int(budget["metadata"].get("generation") or 0):
            return too_many_requests(f"The disruption budget {name} is still being processed by the server.", 10)
        allowed = int(state.get("disruptionsAllowed") or 0)
        if allowed < 0:
            return status(403, "Forbidden", f'poddisruptionbudget.policy "{name}" is forbidden: pdb disruptions '
                          "allowed is negative", {"name": name, "group": "policy", "kind": "poddisruptionbudget"})
        if allowed == 0:
            return too_many_requests(f"The disruption budget {name} needs {state.get('desiredHealthy', 0)} healthy "
                                     f"pods and has {state.get('currentHealthy', 0)} currently", 0)
        if not dry_run:
            budget.patch({"status": {"disruptionsAllowed": allowed - 1,
                                     "disruptedPods": {**(state.get("disruptedPods") or {}), pod: "now"}}})
        return None


class EvictingUnderRbac(RbacEnforced, EvictionServed):
    """The Eviction API, and the accounts' rendered RBAC (:mod:`rbac`)."""


class EvictingGracefullyUnderRbac(EvictingUnderRbac):
    """The Eviction API deleting bound pods gracefully (:attr:`EvictionServed.graceful`), under RBAC."""

    graceful = True
