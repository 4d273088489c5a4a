"""kube.evict_pod against kmock serving the Eviction API as the API server does (tests/evictions.py): what each
answer becomes (evicted, gone, refused by a PodDisruptionBudget, a recreated pod), the request it sends, that a
refusal is returned at once and never retried, and that the RBAC shipped for the card gate's account allows it
(kmock holds the calls to the rendered roles: tests/rbac.py) while an account without the gate's role is refused."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from builders import disruption_budget, pod
from evictions import BUDGET_SENTENCE, SEVERAL_BUDGETS_SENTENCE, EvictingUnderRbac
from operator_runs import calling_as, shipped_grants, token_of
from rbac import enforcing, refusals

from cardquota.kube import Connection, EvictionAnswer, EvictionOutcome, Forbidden, api_client, evict_pod
from cardquota.operator.settings import Role, Settings

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(cls=EvictingUnderRbac, client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]

PODS = "v1/pods"
BUDGETS = "policy/v1/poddisruptionbudgets"
SWEEP = {"app": "sweep"}
GATE_RUNNERS = (Settings(card_gate=True), Settings(role=Role.CONTROLLER, card_gate=True))
"""The processes that run the card gate: the all-in-one operator, and the controllers of a split install."""


def running(name: str = "sweep-0", uid: str = "uid-sweep-0") -> dict[str, Any]:
    return pod(name, namespace="ml", node_name="a100-1", labels=SWEEP, uid=uid)


@pytest.fixture(params=GATE_RUNNERS, ids=lambda settings: f"{settings.role.value}-account")
def gate_connection(request: pytest.FixtureRequest, volcano_kmock: Any) -> Iterator[Connection]:
    """A Connection as the account of a process that runs the card gate, held to what the chart renders for it."""
    with calling_as(volcano_kmock, shipped_grants(request.param)) as connection:
        yield connection


async def evicting(connection: Connection, name: str = "sweep-0", uid: str | None = "uid-sweep-0",
                   **options: Any) -> EvictionAnswer:
    return await asyncio.to_thread(functools.partial(evict_pod, api_client(connection), "ml", name, uid, **options))


def evictions(kmock: Any) -> list[Any]:
    return [request for request in kmock if request.url.path.endswith("/eviction")]


def present(kmock: Any, name: str = "sweep-0") -> bool:
    return any(resource.plural == "pods" and (namespace, named) == ("ml", name) and not pod.deleted
               for (resource, namespace, named), pod in kmock.objects.items())


@dataclass(frozen=True)
class Case:
    name: str
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    uid: str | None = "uid-sweep-0"
    outcome: EvictionOutcome = EvictionOutcome.EVICTED
    message: tuple[str, ...] = ()
    """Sentences the answer's message holds."""
    retry_after: float | None = None
    pod_stays: bool = False

    def __str__(self) -> str:
        return self.name


CASES = (
    Case("no budget: evicted", {(PODS, "ml", "sweep-0"): running()}),
    Case("no uid given: evicted", {(PODS, "ml", "sweep-0"): running()}, uid=None),
    Case("a budget allowing one: evicted", {(PODS, "ml", "sweep-0"): running(),
                                            (BUDGETS, "ml", "sweep"): disruption_budget("sweep", SWEEP, allowed=1)}),
    Case("a budget allowing none: refused", {(PODS, "ml", "sweep-0"): running(),
                                             (BUDGETS, "ml", "sweep"): disruption_budget("sweep", SWEEP, allowed=0)},
         outcome=EvictionOutcome.REFUSED_BY_BUDGET,
         message=(BUDGET_SENTENCE, "The disruption budget sweep needs 2 healthy pods and has 2 currently"),
         pod_stays=True),
    Case("a budget behind its spec: refused, with the API server's wait",
         {(PODS, "ml", "sweep-0"): running(),
          (BUDGETS, "ml", "sweep"): disruption_budget("sweep", SWEEP, allowed=1, generation=2)},
         outcome=EvictionOutcome.REFUSED_BY_BUDGET,
         message=(BUDGET_SENTENCE, "The disruption budget sweep is still being processed by the server."),
         retry_after=10, pod_stays=True),
    Case("a budget with negative disruptions: refused", {
        (PODS, "ml", "sweep-0"): running(), (BUDGETS, "ml", "sweep"): disruption_budget("sweep", SWEEP, allowed=-1)},
         outcome=EvictionOutcome.REFUSED_BY_BUDGET, message=("pdb disruptions allowed is negative",), pod_stays=True),
    Case("two budgets: refused", {(PODS, "ml", "sweep-0"): running(),
                                  (BUDGETS, "ml", "a"): disruption_budget("a", SWEEP, allowed=1),
                                  (BUDGETS, "ml", "b"): disruption_budget("b", SWEEP, allowed=1)},
         outcome=EvictionOutcome.REFUSED_BY_BUDGET, message=(SEVERAL_BUDGETS_SENTENCE,), pod_stays=True),
    Case("a pending pod: evicted past its budget", {
        (PODS, "ml", "sweep-0"): pod("sweep-0", namespace="ml", labels=SWEEP, uid="uid-sweep-0"),
        (BUDGETS, "ml", "sweep"): disruption_budget("sweep", SWEEP, allowed=0)}),
    Case("no such pod: gone", outcome=EvictionOutcome.GONE, message=('pods "sweep-0" not found',)),
    Case("recreated under the name: conflict", {(PODS, "ml", "sweep-0"): running(uid="uid-recreated")},
         outcome=EvictionOutcome.CONFLICT,
         message=("UID in precondition: uid-sweep-0, UID in object meta: uid-recreated",), pod_stays=True),
)


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_each_answer_of_the_eviction_api_becomes_its_outcome(volcano_kmock: Any, gate_connection: Connection,
                                                                   case: Case) -> None:
    for (resource, namespace, name), manifest in case.objects.items():
        volcano_kmock.objects[resource, namespace, name] = manifest
    answer = await evicting(gate_connection, uid=case.uid)
    assert answer.outcome is case.outcome
    assert [sentence for sentence in case.message if sentence not in answer.message] == []
    assert answer.retry_after == case.retry_after
    assert present(volcano_kmock) is case.pod_stays
    assert len(evictions(volcano_kmock)) == 1  # once: a refusal is an answer, not retried


async def test_the_request_is_a_policy_v1_eviction_bounded_by_the_server_timeout(
        volcano_kmock: Any, gate_connection: Connection) -> None:
    volcano_kmock.objects[PODS, "ml", "sweep-0"] = running()
    answer = await evicting(gate_connection, dry_run=True, server_timeout=2, timeout=(0.5, 2.5))
    assert answer == EvictionAnswer(EvictionOutcome.EVICTED)
    assert present(volcano_kmock)  # a dry run deletes nothing
    (request,) = evictions(volcano_kmock)
    assert (request.method, request.url.path, dict(request.params)) == (
        "POST", "/api/v1/namespaces/ml/pods/sweep-0/eviction", {"timeout": "2s"})
    assert request.data == {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": "sweep-0", "namespace": "ml"},
                            "deleteOptions": {"preconditions": {"uid": "uid-sweep-0"}, "dryRun": ["All"]}}


async def test_a_refusal_with_a_retry_after_is_returned_without_waiting(
        volcano_kmock: Any, gate_connection: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server names ``Retry-After: 10`` while a budget's status is behind its spec: neither the connection
    pool nor cardquota's retries sleep on it (time.sleep would fail the call); the wait is the caller's to take."""
    volcano_kmock.objects[PODS, "ml", "sweep-0"] = running()
    volcano_kmock.objects[BUDGETS, "ml", "sweep"] = disruption_budget("sweep", SWEEP, allowed=1, generation=2)

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"slept {seconds} s on a refused eviction")

    monkeypatch.setattr(time, "sleep", no_sleep)
    answer = await evicting(gate_connection)
    assert (answer.outcome, answer.retry_after) == (EvictionOutcome.REFUSED_BY_BUDGET, 10)
    assert len(evictions(volcano_kmock)) == 1


@pytest.mark.parametrize("settings", [Settings(card_gate=False), Settings(role=Role.WEBHOOK)],
                         ids=["operator-without-the-gate", "webhook-account"])
async def test_an_account_without_the_gates_role_is_refused_by_rbac_not_by_a_budget(
        volcano_kmock: Any, settings: Settings) -> None:
    volcano_kmock.objects[PODS, "ml", "sweep-0"] = running()
    grants = shipped_grants(settings)
    token = token_of(grants)
    enforcing(volcano_kmock, token, grants)
    connection = Connection(host=str(volcano_kmock.url).rstrip("/"), insecure=True, token=token)
    with pytest.raises(Forbidden, match='cannot create resource "pods/eviction"'):
        await evicting(connection)
    assert [str(request) for _, request in refusals(volcano_kmock)] == ["create pods/eviction sweep-0 in ml"]
    assert present(volcano_kmock)
