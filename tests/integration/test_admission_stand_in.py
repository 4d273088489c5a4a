"""The admission stand-in (tests/admission_proxy.py) behaves as the kube-apiserver's webhook dispatchers: tiny fake
webhooks on 127.0.0.1 record what they are sent and answer as each test wants, and the stand-in's verdict and the
order of calls are compared with what k8s.io/apiserver v0.34.0 does (the file and function are named at each test).
The last tests run cardquota's own webhook server under the shipped MutatingWebhookConfiguration."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from admission_proxy import AdmissionProxy, AdmissionRequest, Rejected, namespaces_in
from admission_reviews import Server
from aiohttp import web
from builders import pod
from webhook_conditions import (
    OUT_OF_BUDGET_MESSAGE,
    Outcome,
    configuration_documents,
    evaluate_conditions,
    matching_rules,
    review_request,
)

from cardquota.webhooks.review import loads

Answer = dict[str, Any]
Handler = Callable[[dict[str, Any]], Answer | Awaitable[Answer]]
Answering = Callable[[dict[str, Any]], Answer]


@dataclass
class Fakes:
    """Fake webhooks, one per path: each call recorded as (path, the request it was sent)."""

    base: str
    handlers: dict[str, Handler] = field(default_factory=dict)
    seen: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def paths(self) -> list[str]:
        return [path for path, _ in self.seen]


@pytest.fixture
async def fakes() -> AsyncIterator[Fakes]:
    found = Fakes(base="")

    async def answer(request: web.Request) -> web.Response:
        review = loads(await request.read())  # (as deep as the API server sends: cardquota's own reader)
        path = request.path
        found.seen.append((path, review["request"]))
        result = found.handlers[path](review["request"])
        result = await result if isinstance(result, Awaitable) else result
        body = {"uid": review["request"]["uid"], **result}
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": body})

    app = web.Application()
    app.router.add_post("/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    found.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield found
    await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as opened:
        yield opened


def allow() -> Answer:
    return {"allowed": True}


def patching(*operations: dict[str, Any]) -> Answering:
    encoded = base64.b64encode(json.dumps(list(operations)).encode()).decode()
    return lambda _: {"allowed": True, "patchType": "JSONPatch", "patch": encoded}


def label_once(key: str, value: str) -> Handler:
    """Adds a label unless the object has it already (an idempotent mutation, as a reinvocable one should be)."""
    def handler(request: dict[str, Any]) -> Answer:
        labels = request["object"].get("metadata", {}).get("labels") or {}
        if labels.get(key) == value:
            return allow()
        operation = ({"op": "add", "path": f"/metadata/labels/{key}", "value": value} if labels
                     else {"op": "add", "path": "/metadata/labels", "value": {key: value}})
        return patching(operation)(request)
    return handler


def webhook(fakes: Fakes, name: str, handler: Handler, *, resources: tuple[str, ...] = ("configmaps",),
            failure: str = "Fail", **extra: Any) -> dict[str, Any]:
    path = "/" + name
    fakes.handlers[path] = handler
    return {"name": name, "clientConfig": {"url": fakes.base + path}, "failurePolicy": failure,
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": list(resources),
                       "operations": ["CREATE", "UPDATE", "DELETE"]}], **extra}


def configuration(kind: str, name: str, *hooks: dict[str, Any]) -> dict[str, Any]:
    return {"kind": f"{kind}WebhookConfiguration", "metadata": {"name": name}, "webhooks": list(hooks)}


def stand_in(session: aiohttp.ClientSession, *configurations: dict[str, Any], **options: Any) -> AdmissionProxy:
    """The stand-in over these configurations; namespaces ``ml`` and ``kube-system`` known by their labels unless
    ``namespaces`` says otherwise."""
    options.setdefault("namespaces", {"ml": {"kubernetes.io/metadata.name": "ml", "team": "vision"},
                                      "kube-system": {"kubernetes.io/metadata.name": "kube-system"}})
    return AdmissionProxy(upstream="http://127.0.0.1:9", webhook_url=lambda: "", ca_file=Path("/nonexistent"),
                          users={}, configurations=list(configurations), session=session, **options)


def configmap(name: str = "settings", namespace: str = "ml", **labels: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"a": "1"}}


def create(resource: str = "configmaps", namespace: str = "ml", name: str = "settings", *,
           operation: str = "CREATE", old: Any = None, group: str = "", version: str = "v1") -> AdmissionRequest:
    return AdmissionRequest(group=group, version=version, resource=resource, subresource="", namespace=namespace,
                            name=name, operation=operation, user="alice", old=old)


async def refusal(proxy: AdmissionProxy, request: AdmissionRequest, new: Any) -> dict[str, Any]:
    with pytest.raises(Rejected) as raised:
        await proxy.admit(request, new)
    return raised.value.body


# ------------------------------------------------------------------------------------------------- mutating


async def test_mutating_webhooks_run_first_in_order_each_seeing_the_last_patch(
        fakes: Fakes, session: aiohttp.ClientSession) -> None:
    """mutating_webhook_manager.go sorts configurations by name; dispatcher.go calls the webhooks one by one on the
    object as patched so far; the validating webhooks (reinvocation.go: Admit, then Validate) see the result."""
    proxy = stand_in(
        session,
        configuration("Validating", "a-check", webhook(fakes, "check", lambda _: allow())),
        configuration("Mutating", "z-second", webhook(fakes, "second", label_once("second", "yes"))),
        configuration("Mutating", "a-first", webhook(fakes, "first", label_once("first", "yes")),
                      webhook(fakes, "first-b", label_once("first-b", "yes"))))
    admitted = await proxy.admit(create(), configmap())
    assert fakes.paths() == ["/first", "/first-b", "/second", "/check"]
    seen = {path: request["object"]["metadata"].get("labels") for path, request in fakes.seen}
    assert seen["/first"] is None
    assert seen["/first-b"] == {"first": "yes"}
    assert seen["/second"] == {"first": "yes", "first-b": "yes"}
    assert seen["/check"] == admitted["metadata"]["labels"] == {"first": "yes", "first-b": "yes", "second": "yes"}


@pytest.mark.parametrize(("first", "second_changes", "calls"), [
    ("IfNeeded", True, ["/first", "/second", "/first"]),
    ("Never", True, ["/first", "/second"]),
    ("IfNeeded", False, ["/first", "/second"]),
], ids=["reinvoked", "never", "nothing-changed-after"])
async def test_an_if_needed_webhook_is_reinvoked_once_when_a_later_one_changed_the_object(
        fakes: Fakes, session: aiohttp.ClientSession, first: str, second_changes: bool, calls: list[str]) -> None:
    """dispatcher.go ``Dispatch`` and reinvocationcontext.go: a webhook that changed the object marks the IfNeeded
    webhooks called before it; the chain then runs once more (reinvocation.go), calling only those."""
    second: Handler = label_once("second", "yes") if second_changes else (lambda _: allow())
    proxy = stand_in(session, configuration(
        "Mutating", "hooks", webhook(fakes, "first", label_once("first", "yes"), reinvocationPolicy=first),
        webhook(fakes, "second", second, reinvocationPolicy="IfNeeded")))
    await proxy.admit(create(), configmap())
    assert fakes.paths() == calls
    if calls[-1:] == ["/first"] and len(calls) == 3:
        assert fakes.seen[-1][1]["object"]["metadata"]["labels"] == {"first": "yes", "second": "yes"}


@pytest.mark.parametrize("failure", ["Fail", "Ignore"])
async def test_a_patch_that_does_not_apply_refuses_the_request_whatever_the_failure_policy(
        fakes: Fakes, session: aiohttp.ClientSession, failure: str) -> None:
    """dispatcher.go ``callAttrMutatingHook``: ``patchObj.Apply`` failing returns ``apierrors.NewInternalError``,
    which is not an ``ErrCallingWebhook``, so ``Dispatch`` returns it under Ignore too; nothing after it runs."""
    proxy = stand_in(
        session,
        configuration("Mutating", "m", webhook(
            fakes, "bad-patch", patching({"op": "replace", "path": "/metadata/labels/absent", "value": "x"}),
            failure=failure)),
        configuration("Validating", "v", webhook(fakes, "check", lambda _: allow())))
    body = await refusal(proxy, create(), configmap())
    assert (body["code"], body["reason"]) == (500, "InternalError")
    assert body["message"].startswith("Internal error occurred: ")
    assert body["details"]["causes"][0]["message"] == body["message"].removeprefix("Internal error occurred: ")
    assert fakes.paths() == ["/bad-patch"]


@pytest.mark.parametrize(("failure", "refused"), [("Fail", True), ("Ignore", False)])
async def test_an_undecodable_patch_is_a_failed_call_under_the_failure_policy(
        fakes: Fakes, session: aiohttp.ClientSession, failure: str, refused: bool) -> None:
    """dispatcher.go: ``jsonpatch.DecodePatch`` failing is an ``ErrCallingWebhook`` (Ignore: skipped; Fail:
    ``Internal error occurred: failed calling webhook ...``), unlike a patch that does not apply."""
    proxy = stand_in(session, configuration("Mutating", "m", webhook(
        fakes, "garbled", lambda _: {"allowed": True, "patchType": "JSONPatch", "patch": "bm90IGpzb24="},
        failure=failure)))
    if refused:
        body = await refusal(proxy, create(), configmap())
        assert body["code"] == 500
        assert body["message"].startswith('Internal error occurred: failed calling webhook "garbled": received '
                                          "undecodable patch in webhook response")
    else:
        assert await proxy.admit(create(), configmap()) == configmap()


# ------------------------------------------------------------------------------------------------- validating


async def test_validating_webhooks_are_called_together_and_the_first_refusal_to_arrive_is_reported(
        fakes: Fakes, session: aiohttp.ClientSession) -> None:
    """validating/dispatcher.go ``Dispatch``: one goroutine per webhook, the refusals read from a channel in the
    order they complete, ``errs[0]`` returned. The first webhook in order answers only once the stand-in has the
    second's answer (called one after the other, it would wait until its timeout instead), then refuses too: the
    client hears the second's refusal."""
    proxies: list[AdmissionProxy] = []

    async def slow(_: dict[str, Any]) -> Answer:
        while not any(name == "fast" for name, _, _ in proxies[0].calls):
            await asyncio.sleep(0.01)
        return {"allowed": False, "status": {"code": 403, "message": "slow says no"}}

    def fast(_: dict[str, Any]) -> Answer:
        return {"allowed": False, "status": {"code": 403, "message": "fast says no"}}

    proxies.append(stand_in(session, configuration("Validating", "v", webhook(fakes, "slow", slow),
                                                   webhook(fakes, "fast", fast))))
    body = await refusal(proxies[0], create(), configmap())
    assert body["message"] == 'admission webhook "fast" denied the request: fast says no'
    assert [name for name, _, _ in proxies[0].calls] == ["fast", "slow"]


@pytest.mark.parametrize(("status", "expected"), [
    ({"code": 422, "reason": "Invalid", "message": "bad quota",
      "details": {"causes": [{"type": "FieldValueInvalid", "field": "data.a", "message": "bad quota"}]}},
     {"code": 422, "reason": "Invalid", "status": "Failure", "message": 'admission webhook "v" denied the request: '
      "bad quota", "details": {"causes": [{"type": "FieldValueInvalid", "field": "data.a", "message": "bad quota"}]}}),
    ({"code": 200, "reason": "Conflict"},
     {"code": 400, "reason": "Conflict", "status": "Failure",
      "message": 'admission webhook "v" denied the request: Conflict'}),
    (None, {"code": 400, "status": "Failure", "message": 'admission webhook "v" denied the request without '
                                                         "explanation"}),
], ids=["kept", "code-raised-reason-as-message", "nothing-said"])
async def test_a_denial_keeps_the_webhooks_status(fakes: Fakes, session: aiohttp.ClientSession,
                                                  status: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    """errors/statuserror.go ``ToStatusErr``: the webhook's status (code, reason, details) as sent, a code below
    400 raised to 400, the status set to Failure, the message prefixed with the webhook's name."""
    answer: Answer = {"allowed": False} if status is None else {"allowed": False, "status": status}
    proxy = stand_in(session, configuration("Validating", "c", webhook(fakes, "v", lambda _: answer)))
    body = await refusal(proxy, create(), configmap())
    assert {key: value for key, value in body.items() if key not in ("kind", "apiVersion", "metadata")} == expected


# ------------------------------------------------------------------------------------------------- selectors


NOT_SYSTEM = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                    "values": ["kube-system"]}]}


@pytest.mark.parametrize(("request_", "new", "called"), [
    (create(namespace="ml"), configmap(namespace="ml"), True),
    (create(namespace="kube-system"), configmap(namespace="kube-system"), False),
    # A cluster-scoped object other than a Namespace is never exempted (matcher.go ``MatchNamespaceSelector``).
    (create("nodes", namespace=""), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}, True),
    # A Namespace being created is judged by its own labels (``GetNamespaceLabels``).
    (create("namespaces", namespace="kube-system", name="kube-system"),
     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system", "labels": {
         "kubernetes.io/metadata.name": "kube-system"}}}, False),
    (create("namespaces", namespace="new", name="new"),
     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "new"}}, True),
], ids=["namespaced-match", "namespaced-excluded", "cluster-scoped", "namespace-itself-excluded",
        "namespace-itself-new"])
async def test_the_namespace_selector_is_read_as_the_api_server_reads_it(
        fakes: Fakes, session: aiohttp.ClientSession, request_: AdmissionRequest, new: Any, called: bool) -> None:
    """predicates/namespace/matcher.go ``MatchNamespaceSelector`` and ``GetNamespaceLabels`` (v0.34.0)."""
    proxy = stand_in(session, configuration("Validating", "v", webhook(
        fakes, "v", lambda _: allow(), resources=("configmaps", "nodes", "namespaces"), namespaceSelector=NOT_SYSTEM)))
    await proxy.admit(request_, new)
    assert fakes.paths() == (["/v"] if called else [])


async def test_namespace_labels_are_read_from_the_cluster_and_an_unknown_namespace_refuses_where_rules_match(
        fakes: Fakes, session: aiohttp.ClientSession, empty_volcano_kmock: Any) -> None:
    """matcher.go ``GetNamespaceLabels`` reads the namespace (here kmock's, with the
    ``kubernetes.io/metadata.name`` label the API server gives every namespace); webhook.go ``ShouldCallHook``
    returns the lookup's error only once a rule matched, and the namespace's NotFound comes back as is (404)."""
    empty_volcano_kmock.objects["v1/namespaces", None, "ml"] = {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml", "labels": {"team": "vision"}}}
    selector = {"matchLabels": {"team": "vision", "kubernetes.io/metadata.name": "ml"}}
    proxy = stand_in(session, configuration("Validating", "v", webhook(
        fakes, "v", lambda _: allow(), resources=("secrets",), namespaceSelector=selector)),
        namespaces=namespaces_in(empty_volcano_kmock))
    await proxy.admit(create("secrets", namespace="ml"), configmap(namespace="ml"))
    assert fakes.paths() == ["/v"]
    await proxy.admit(create(namespace="nowhere"), configmap(namespace="nowhere"))  # no rule matches: no lookup
    body = await refusal(proxy, create("secrets", namespace="nowhere"), configmap(namespace="nowhere"))
    assert (body["code"], body["reason"], body["message"]) == (404, "NotFound", 'namespaces "nowhere" not found')
    assert fakes.paths() == ["/v"]


@pytest.mark.parametrize(("new_labels", "old_labels", "called"), [
    ({"card": "yes"}, None, True),
    ({}, {"card": "yes"}, True),  # the old object's labels count too (an update that removes the label)
    ({}, {}, False),
])
async def test_the_object_selector_reads_the_new_and_the_old_object(
        fakes: Fakes, session: aiohttp.ClientSession, new_labels: dict[str, str], old_labels: dict[str, str] | None,
        called: bool) -> None:
    """predicates/object/matcher.go ``MatchObjectSelector``: the new object's labels or the old one's."""
    proxy = stand_in(session, configuration("Validating", "v", webhook(
        fakes, "v", lambda _: allow(), objectSelector={"matchLabels": {"card": "yes"}})))
    old = None if old_labels is None else configmap(**old_labels)
    request_ = create(operation="CREATE" if old is None else "UPDATE", old=old)
    await proxy.admit(request_, configmap(**new_labels))
    assert fakes.paths() == (["/v"] if called else [])


@pytest.mark.parametrize(("rule", "request_", "matches"), [
    ({"resources": ["pods"], "scope": "Namespaced"}, ("pods", "", "ml", "v1"), True),
    ({"resources": ["pods"], "scope": "Cluster"}, ("pods", "", "ml", "v1"), False),
    ({"resources": ["namespaces"], "scope": "Cluster"}, ("namespaces", "", "ml", "v1"), True),
    ({"resources": ["namespaces"], "scope": "Namespaced"}, ("namespaces", "", "ml", "v1"), False),
    ({"resources": ["pods"]}, ("pods", "status", "ml", "v1"), False),
    ({"resources": ["pods/*"]}, ("pods", "status", "ml", "v1"), True),
    ({"resources": ["*"]}, ("pods", "", "ml", "v1"), True),
    ({"resources": ["*/status"]}, ("pods", "status", "ml", "v1"), True),
    ({"resources": ["pods"], "apiVersions": ["v2"]}, ("pods", "", "ml", "v1"), False),
], ids=["namespaced", "cluster-scope-excludes-namespaced", "namespace-is-cluster-scoped",
        "namespace-not-namespaced", "no-subresource", "subresource-wildcard", "any-resource", "any-with-status",
        "other-version"])
def test_rules_match_as_the_api_server_matches_them(rule: dict[str, Any], request_: tuple[str, str, str, str],
                                                    matches: bool) -> None:
    """predicates/rules/rules.go ``Matcher.Matches`` (v0.34.0): scope (a Namespace is cluster-scoped), operation,
    group, version, resource and subresource with ``*``."""
    resource, subresource, namespace, version = request_
    hook = {"rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], **rule}]}
    assert matching_rules(hook, "", resource, "CREATE", subresource, version=version,
                          namespace=namespace) is matches


# ------------------------------------------------------------------------------------------------- conditions


@pytest.mark.parametrize(("options", "expression", "error"), [
    ({}, "object.spec.missing == 'x'", "expression 'object.spec.missing == 'x'' resulted in error: no such key: "
                                       "spec"),
    ({"per_call_limit": 20}, "object.data.all(k, k.startsWith('a'))",
     "expression 'object.data.all(k, k.startsWith('a'))' resulted in error: operation cancelled: actual cost "
     "limit exceeded"),
    ({"condition_budget": 20}, "object.data.all(k, k.startsWith('a'))",
     "validation failed due to running out of cost budget, no further validation rules will be run"),
], ids=["evaluation-error", "cost-limit", "budget"])
@pytest.mark.parametrize("failure", ["Fail", "Ignore"])
async def test_a_condition_that_cannot_be_evaluated_goes_through_the_failure_policy(
        fakes: Fakes, session: aiohttp.ClientSession, options: dict[str, Any], expression: str, error: str,
        failure: str) -> None:
    """matchconditions/matcher.go ``Match``: an evaluation error, an expression over its cost limit or the
    conditions over their budget refuse under Fail (webhook.go: ``apierrors.NewForbidden`` over the request's
    resource and name) and skip the webhook under Ignore."""
    data = {f"a{index}": "v" for index in range(20)}
    proxy = stand_in(session, configuration("Validating", "v", webhook(
        fakes, "v", lambda _: allow(), failure=failure,
        matchConditions=[{"name": "c", "expression": expression}])), **options)
    new = {**configmap(), "data": data}
    if failure == "Ignore":
        await proxy.admit(create(), new)
    else:
        body = await refusal(proxy, create(), new)
        assert (body["code"], body["reason"]) == (403, "Forbidden")
        assert body["message"] == f'configmaps "settings" is forbidden: {error}'
        assert body["details"] == {"group": "", "kind": "configmaps", "name": "settings"}
    assert fakes.paths() == []


@pytest.mark.parametrize(("budget", "within"), [(6, True), (5, False)])
def test_the_cost_of_conditions_is_counted_as_the_api_servers_own_test_counts_it(budget: int, within: bool) -> None:
    """pkg/admission/plugin/cel/condition_test.go (v0.34.0, "test RuntimeCELCostBudge exactly covers"):
    ``oldObject != null`` and ``object.subsets.size() > 2`` cost 6 together — a budget of 6 holds them, 5 does
    not."""
    hook = {"failurePolicy": "Fail", "matchConditions": [
        {"name": "old", "expression": "oldObject != null"},
        {"name": "subsets", "expression": "object.subsets.size() > 2"}]}
    endpoints = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "e"}, "subsets": [{}, {}, {}]}
    outcome = evaluate_conditions(hook, endpoints, None, review_request(operation="CREATE", user="alice"),
                                  budget=budget)
    assert outcome == (Outcome(matches=False) if within else Outcome(matches=False, error=OUT_OF_BUDGET_MESSAGE))


async def test_a_false_condition_skips_the_webhook_despite_another_ones_error(
        fakes: Fakes, session: aiohttp.ClientSession) -> None:
    """matcher.go ``Match``: any false condition skips the webhook, whatever the failure policy and the errors."""
    proxy = stand_in(session, configuration("Validating", "v", webhook(fakes, "v", lambda _: allow(), matchConditions=[
        {"name": "broken", "expression": "object.spec.missing == 'x'"},
        {"name": "false", "expression": "object.metadata.name == 'other'"}])))
    await proxy.admit(create(), configmap())
    assert fakes.paths() == []


async def test_a_deeply_nested_object_is_evaluated_not_an_escaping_error(
        fakes: Fakes, session: aiohttp.ClientSession) -> None:
    """The API server decodes objects nested up to 10,000 levels (sigs.k8s.io/json) and cel-go converts them
    lazily: conditions over such an object evaluate as over any other (here: the webhook is called, under Fail).
    cel-python's recursive conversion raised RecursionError out of the stand-in instead."""
    nested: dict[str, Any] = {}
    cursor = nested
    for _ in range(5_000):
        cursor["a"] = {}
        cursor = cursor["a"]
    proxy = stand_in(session, configuration("Validating", "v", webhook(fakes, "v", lambda _: allow(), matchConditions=[
        {"name": "named", "expression": "object.metadata.name == 'settings'"},
        {"name": "changed", "expression": "request.operation == 'CREATE' || object.data != oldObject.data"}])))
    await proxy.admit(create(), {**configmap(), "data": {"deep": nested}})
    assert fakes.paths() == ["/v"]


# ------------------------------------------------------------------------------------------------- cardquota's own


def shipped_mutating() -> list[dict[str, Any]]:
    """cardquota's MutatingWebhookConfiguration as shipped."""
    return [document for document in configuration_documents() if document["kind"] == "MutatingWebhookConfiguration"]


def affinity_terms(manifest: dict[str, Any]) -> list[Any]:
    affinity = manifest["spec"].get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(required.get("nodeSelectorTerms") or [])


def replace_affinity() -> Handler:
    """A later mutating webhook (another product's) that sets the pod's affinity to its own, once."""
    mine = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["eu-1"]}]}]}}}

    def handler(request: dict[str, Any]) -> Answer:
        if request["object"]["metadata"].get("labels", {}).get("zoned") == "yes":
            return allow()
        return patching({"op": "add", "path": "/spec/affinity", "value": mine},
                        {"op": "add", "path": "/metadata/labels", "value": {"zoned": "yes"}})(request)
    return handler


@pytest.mark.parametrize(("namespace", "mutated"), [("ml", True), ("kube-system", False)])
async def test_cardquotas_pod_mutation_runs_in_the_loop_and_survives_a_later_webhook(
        server: Server, fakes: Fakes, session: aiohttp.ClientSession, tmp_path: Path, namespace: str,
        mutated: bool) -> None:
    """The shipped pods.mutate.cardquota.io (reinvocationPolicy IfNeeded) against cardquota's own webhook server:
    a card pod gets its node-affinity term; another product's mutating webhook, whose configuration sorts after
    ours and which replaces the affinity, makes the dispatcher call ours again, and the term is back in what is
    stored. In kube-system the namespaceSelector keeps ours out (the other still runs)."""
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(server.ca.cert_pem)
    other = configuration("Mutating", "zz-other", webhook(fakes, "zoner", replace_affinity(), resources=("pods",),
                                                          failure="Ignore"))
    proxy = AdmissionProxy(upstream="http://127.0.0.1:9", webhook_url=lambda: server.url, ca_file=ca_file,
                           users={}, configurations=[*shipped_mutating(), other], session=session,
                           namespaces={namespace: {"kubernetes.io/metadata.name": namespace}})
    manifest = pod("train", namespace=namespace, card="NVIDIA-A100", gpus=1, queue="team-a")
    manifest["spec"]["schedulerName"] = "volcano"
    admitted = await proxy.admit(create("pods", namespace=namespace, name="train"), manifest)
    ours = [name for name, _, _ in proxy.calls if name == "pods.mutate.cardquota.io"]
    terms = affinity_terms(admitted)
    product_keys = [expression["key"] for term in terms for expression in term["matchExpressions"]
                    if expression["key"].endswith(".product")]
    assert admitted["metadata"]["labels"] == {"zoned": "yes"}
    if mutated:
        assert len(ours) == 2  # first round, then reinvoked after the other webhook replaced the affinity
        assert product_keys
        assert len(product_keys) == len(terms)  # every term carries the card's product again
    else:
        assert ours == []
        assert product_keys == []


def volcano_job_defaults() -> Handler:
    """Volcano's own Job mutation as far as the gang goes (mutatejob.volcano.sh, pkg/webhooks/admission/jobs/mutate/
    mutate_job.go ``patchDefaultQueue`` and ``patchDefaultMinAvailable``, v1.15.1): an unset queue becomes
    ``default``, an unset or 0 ``minAvailable`` the tasks' own minAvailable added up (replicas where unset)."""
    def handler(request: dict[str, Any]) -> Answer:
        spec = request["object"]["spec"]
        operations: list[dict[str, Any]] = []
        if not spec.get("queue"):
            operations.append({"op": "add", "path": "/spec/queue", "value": "default"})
        if not spec.get("minAvailable"):
            gang = sum(task.get("minAvailable", task.get("replicas", 0)) for task in spec.get("tasks") or [])
            operations.append({"op": "add", "path": "/spec/minAvailable", "value": gang})
        return patching(*operations)(request) if operations else allow()
    return handler


async def test_the_card_request_cardquota_derives_is_the_gang_volcano_then_defaults(
        server: Server, fakes: Fakes, session: aiohttp.ClientSession, tmp_path: Path) -> None:
    """The shipped jobs.mutate.cardquota.io (reinvocationPolicy Never) runs before Volcano's Job mutation, whose
    configuration (volcano-admission-service-jobs-mutate, installer/helm/chart/volcano/templates/webhooks.yaml)
    sorts after cardquota-mutating: it sees the Job before Volcano sets ``minAvailable``. A task of 4 replicas
    with minAvailable 2: Volcano's gang is 2 pods, so the derived card.request must be 2 cards, not 4 (it was 4:
    cardquota read an unset minAvailable as every replica)."""
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(server.ca.cert_pem)
    volcano = configuration("Mutating", "volcano-admission-service-jobs-mutate", webhook(
        fakes, "mutatejob.volcano.sh", volcano_job_defaults(), failure="Fail", reinvocationPolicy="Never",
        rules=[{"apiGroups": ["batch.volcano.sh"], "apiVersions": ["v1alpha1"], "resources": ["jobs"],
                "operations": ["CREATE"]}]))
    proxy = AdmissionProxy(upstream="http://127.0.0.1:9", webhook_url=lambda: server.url, ca_file=ca_file,
                           users={}, configurations=[*configuration_documents(), volcano], session=session,
                           namespaces={"ml": {"kubernetes.io/metadata.name": "ml"}})
    template = pod("worker", namespace="ml", card="NVIDIA-A100", gpus=1)
    template["spec"]["schedulerName"] = "volcano"
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"schedulerName": "volcano", "queue": "team-a", "tasks": [
               {"name": "worker", "replicas": 4, "minAvailable": 2,
                "template": {"metadata": template["metadata"], "spec": template["spec"]}}]}}
    admitted = await proxy.admit(create("jobs", namespace="ml", name="train", group="batch.volcano.sh",
                                        version="v1alpha1"), job)
    assert [name for name, _, _ in proxy.calls] == [
        "jobs.mutate.cardquota.io", "mutatejob.volcano.sh", "jobs.validate.cardquota.io"]
    assert admitted["spec"]["minAvailable"] == 2
    assert json.loads(admitted["metadata"]["annotations"]["volcano.sh/card.request"]) == {"NVIDIA-A100": 2}
