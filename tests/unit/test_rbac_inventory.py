"""Every Kubernetes API call each cardquota process can make, held to the RBAC every shipped overlay and the Helm
chart render for its service account, both ways: a call the rendered roles do not allow fails, and so does a grant
no call needs.

The inventory (:data:`CALLS`) is tied to the code three ways: every function of cardquota/kube.py that calls the API
server declares its RBAC verbs (``kube.RBAC_VERBS``, found by walking kube.py); every use of such a function in a
process's modules must be listed here for that process, with a verb the function makes; and the resources and names
come from the code's own constants (the cached resources, the Settings' names, the Lease, the CRD, the ConfigMap).
The processes' requests themselves are recorded against kmock in tests/reliability/test_least_privilege.py, and
tests/integration/test_publish_limits_kmock.py runs the controller under its rendered RBAC (tests/rbac.py)."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rbac import KUBECTL, NAMESPACE, Grants, Request, charted, grants_of, kustomized

from cardquota import kube
from cardquota.core.crd_additions import QUEUE_CRD
from cardquota.core.schedconf.source import EXTENDER_CONFIGMAP
from cardquota.kube import CACHED_RESOURCES, DRA_GROUP, NAMESPACE_RESOURCES, RBAC_VERBS
from cardquota.operator.leader import LeaderElection
from cardquota.operator.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SETTINGS = Settings()
LEASE = inspect.signature(LeaderElection.__init__).parameters["name"].default
ANY_NAMESPACE = "*"
"""A call on objects in any namespace (pods, events where they are): only a ClusterRole grants it."""
KOPF = "kopf.on.event"
"""Kopf's own watch machinery (cardquota/operator/watch.py): it lists, then watches, each kind it follows."""
KOPF_VERBS = frozenset({"list", "watch"})


@dataclass(frozen=True)
class Call:
    """One kind of request a process makes: where in the code, through which function, and what RBAC sees."""

    module: str
    function: str
    verb: str
    group: str
    resource: str
    namespace: str = ""
    """"" for a cluster-scoped resource (or a list/watch across namespaces), :data:`ANY_NAMESPACE`, or the
    operator's own namespace."""
    name: str = ""
    when: str = ""
    """The setting the call depends on ("" always): card-gate, managed-tls, namespace-queues."""

    def request(self) -> Request:
        namespace = "some-namespace" if self.namespace == ANY_NAMESPACE else self.namespace
        return Request(self.verb, self.group, self.resource, namespace, self.name)


def _group(prefix: str) -> str:
    return "" if prefix.startswith("/api/") else prefix.split("/")[2]


def _followed(resources: Any, *, pods: bool = True, when: str = "") -> Iterator[Call]:
    """The list and watch of each resource: the reflectors' (list_pages, WatchStream) for the kinds they follow,
    a first list_all_async then Kopf's for the others (cardquota/operator/watch.py)."""
    from cardquota.operator.watch import REFLECTED_KINDS

    for prefix, plural, kind, _ in resources:
        if kind == "Pod" and not pods:
            continue
        if kind in REFLECTED_KINDS:
            yield Call("operator/reflector.py", "list_pages", "list", _group(prefix), plural, when=when)
            yield Call("operator/reflector.py", "WatchStream", "watch", _group(prefix), plural, when=when)
        else:
            yield Call("operator/watch.py", "list_all_async", "list", _group(prefix), plural, when=when)
            yield Call("operator/watch.py", KOPF, "list", _group(prefix), plural, when=when)
            yield Call("operator/watch.py", KOPF, "watch", _group(prefix), plural, when=when)


def _claims(module: str, when: str = "") -> Iterator[Call]:
    for plural in ("resourceclaims", "resourceclaimtemplates"):
        yield Call(module, "list_pages", "list", DRA_GROUP, plural, when=when)
        yield Call(module, "WatchStream", "watch", DRA_GROUP, plural, when=when)


WEBHOOK_CONFIGURATION_RESOURCES = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
CERTIFICATES = "operator/certificates.py"
SERVING: tuple[Call, ...] = (
    Call(CERTIFICATES, "read_secret", "get", "", "secrets", NAMESPACE, SETTINGS.tls_secret, "managed-tls"),
    Call(CERTIFICATES, "write_secret", "create", "", "secrets", NAMESPACE, "", "managed-tls"),
    Call(CERTIFICATES, "write_secret", "patch", "", "secrets", NAMESPACE, SETTINGS.tls_secret, "managed-tls"),
    Call(CERTIFICATES, "read_namespaced", "get", "apps", "deployments", NAMESPACE, SETTINGS.deployment,
         "managed-tls"),  # its own Deployment, owner of the Secret it creates
    *(Call(CERTIFICATES, "patch_ca_bundle", verb, "admissionregistration.k8s.io", resource, "", name, "managed-tls")
      for resource in WEBHOOK_CONFIGURATION_RESOURCES for name in SETTINGS.webhook_configurations
      for verb in ("get", "patch")),
)
"""The webhooks' serving certificate, managed in a Secret (none with a mounted one: cert-manager)."""
EVERY_PROCESS: tuple[Call, ...] = (
    Call("operator/crd_drift.py", "read_crd", "get", "apiextensions.k8s.io", "customresourcedefinitions", "",
         QUEUE_CRD),
    *_followed(NAMESPACE_RESOURCES, when="namespace-queues"),
)
CONTROLLER = "operator/controller.py"
GATEKEEPER = "operator/gatekeeper.py"
CONTROLLERS: tuple[Call, ...] = (
    Call(CONTROLLER, "patch_annotations", "patch", "", "nodes"),
    Call(CONTROLLER, "patch_annotations", "patch", "scheduling.volcano.sh", "queues"),
    Call(CONTROLLER, "read_object", "get", "scheduling.volcano.sh", "queues"),  # after a patch refused as too large
    Call(CONTROLLER, "create_event", "create", "", "events", ANY_NAMESPACE),
    Call(CONTROLLER, "read_namespaced", "get", "", "configmaps", NAMESPACE, EXTENDER_CONFIGMAP),
    Call("operator/crd_drift.py", "create_event", "create", "", "events", ANY_NAMESPACE),
    Call("operator/leader.py", "read_lease", "get", "coordination.k8s.io", "leases", NAMESPACE, LEASE),
    Call("operator/leader.py", "create_lease", "create", "coordination.k8s.io", "leases", NAMESPACE),
    Call("operator/leader.py", "update_lease", "patch", "coordination.k8s.io", "leases", NAMESPACE, LEASE),
    Call(GATEKEEPER, "read_object", "get", "", "pods", ANY_NAMESPACE, when="card-gate"),
    Call(GATEKEEPER, "patch_pod", "patch", "", "pods", ANY_NAMESPACE, when="card-gate"),
    Call(GATEKEEPER, "evict_pod", "create", "", "pods/eviction", ANY_NAMESPACE, when="card-gate"),  # preemption
    Call(GATEKEEPER, "create_event", "create", "", "events", ANY_NAMESPACE, when="card-gate"),  # preemption events
    Call(GATEKEEPER, "list_objects", "list", "policy", "poddisruptionbudgets", ANY_NAMESPACE, when="card-gate"),
    *_claims("operator/reflector.py", when="card-gate"),
)

EXTENDER = "operator/extender.py"
CALLS: dict[str, tuple[Call, ...]] = {
    "operator": (*_followed(CACHED_RESOURCES), *SERVING, *EVERY_PROCESS, *CONTROLLERS),
    "webhook": (*_followed(CACHED_RESOURCES, pods=False), *SERVING, *EVERY_PROCESS),
    "controller": (*_followed(CACHED_RESOURCES), *EVERY_PROCESS, *CONTROLLERS),
    "extender": (*_followed(CACHED_RESOURCES), *_claims("operator/reflector.py"),
                 Call(EXTENDER, "patch_annotations", "patch", "", "pods", ANY_NAMESPACE),
                 Call(EXTENDER, "create_event", "create", "", "events", ANY_NAMESPACE)),
}
"""Every call each process makes: ``cardquota operator`` (all in one), ``--role webhook``, ``--role controller``,
and ``cardquota extender``."""
MODULES: dict[str, tuple[str, ...]] = {
    "operator": ("operator/certificates.py", "operator/controller.py", "operator/crd_drift.py",
                 "operator/gatekeeper.py", "operator/leader.py", "operator/reflector.py", "operator/watch.py"),
    "webhook": ("operator/certificates.py", "operator/crd_drift.py", "operator/reflector.py", "operator/watch.py"),
    "controller": ("operator/controller.py", "operator/crd_drift.py", "operator/gatekeeper.py", "operator/leader.py",
                   "operator/reflector.py", "operator/watch.py"),
    "extender": ("operator/extender.py", "operator/reflector.py", "operator/watch.py"),
}
"""The modules each process runs that call the API server (cardquota/processes.py ``run``; the extender's
``run_extender``, which follows the cluster as the operator does)."""
NOT_MADE: dict[tuple[str, str, str], str] = {
    ("webhook", "operator/crd_drift.py", "create_event"):
        "the drift event is recorded by the controllers' leader only, and a webhook process never leads",
}
"""Functions a process's module refers to that the process never calls, and why."""
NOT_YET_USED: dict[tuple[str, str], str] = {}
"""Calls listed (and granted) before their module makes them, and why; an entry must go once the module does."""


@dataclass(frozen=True)
class Shipped:
    """One way of installing a process: its service account in what an overlay or the chart renders, and the
    settings that decide which of its calls it makes."""

    process: str
    account: str
    source: str
    """``overlay <name>`` or ``chart <values>``."""
    objects: Any
    settings: frozenset[str]


def _overlay(overlay: str) -> Any:
    return lambda: kustomized(overlay)


def _chart(values: dict[str, Any]) -> Any:
    return lambda: charted(values)


SEPARATE = {"separateController": {"enabled": True}}
NO_GATE = {"cardGate": {"enabled": False}}
CERT_MANAGER = {"tls": {"mode": "cert-manager"}}
SHIPPED: tuple[Shipped, ...] = (
    Shipped("operator", "cardquota", "overlay dev", _overlay("dev"), frozenset({"card-gate", "managed-tls"})),
    Shipped("webhook", "cardquota", "overlay production", _overlay("production"), frozenset({"managed-tls"})),
    Shipped("controller", "cardquota-controller", "overlay production", _overlay("production"),
            frozenset({"card-gate"})),
    Shipped("operator", "cardquota", "overlay dev-extender", _overlay("dev-extender"),
            frozenset({"card-gate", "managed-tls"})),
    Shipped("extender", "cardquota-extender", "overlay dev-extender", _overlay("dev-extender"), frozenset()),
    Shipped("operator", "cardquota", "chart defaults", _chart({}), frozenset({"card-gate", "managed-tls"})),
    Shipped("webhook", "cardquota", "chart separateController", _chart(SEPARATE), frozenset({"managed-tls"})),
    Shipped("controller", "cardquota-controller", "chart separateController", _chart(SEPARATE),
            frozenset({"card-gate"})),
    Shipped("extender", "cardquota-extender", "chart extender", _chart({"extender": {"enabled": True}}),
            frozenset()),
    Shipped("operator", "cardquota", "chart mapNamespaceQueues", _chart({"mapNamespaceQueues": True}),
            frozenset({"card-gate", "managed-tls", "namespace-queues"})),
    Shipped("webhook", "cardquota", "chart separateController mapNamespaceQueues",
            _chart({**SEPARATE, "mapNamespaceQueues": True}), frozenset({"managed-tls", "namespace-queues"})),
    Shipped("controller", "cardquota-controller", "chart separateController mapNamespaceQueues",
            _chart({**SEPARATE, "mapNamespaceQueues": True}), frozenset({"card-gate", "namespace-queues"})),
    Shipped("operator", "cardquota", "chart cardGate off", _chart(NO_GATE), frozenset({"managed-tls"})),
    Shipped("controller", "cardquota-controller", "chart separateController cardGate off",
            _chart({**SEPARATE, **NO_GATE}), frozenset()),
    Shipped("operator", "cardquota", "chart cert-manager", _chart(CERT_MANAGER), frozenset({"card-gate"})),
    Shipped("webhook", "cardquota", "chart separateController cert-manager", _chart({**SEPARATE, **CERT_MANAGER}),
            frozenset()),
)


def _made(shipped: Shipped) -> tuple[Call, ...]:
    return tuple(call for call in CALLS[shipped.process] if not call.when or call.when in shipped.settings)


def _permission(call: Call) -> tuple[str, str, str, str, str]:
    """The one grant that allows ``call`` and no more: (verb, group, resource, name, Role namespace or "")."""
    return (call.verb, call.group, call.resource, call.name, call.namespace if call.namespace == NAMESPACE else "")


# ------------------------------------------------------------------------------------------- the code's calls


def _functions_calling_the_api() -> set[str]:
    """The top-level functions and classes of kube.py that reach ``_send`` or ``call_api`` (through each other)."""
    tree = ast.parse(Path(kube.__file__).read_text())
    uses: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            uses[node.name] = {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)} | \
                {sub.attr for sub in ast.walk(node) if isinstance(sub, ast.Attribute)}
    calling = {name for name, used in uses.items() if "call_api" in used}
    while True:
        more = {name for name, used in uses.items() if used & calling} - calling
        if not more:
            return {name for name in calling if not name.startswith("_")}
        calling |= more


def test_every_function_that_calls_the_api_server_declares_its_rbac_verbs() -> None:
    calling = _functions_calling_the_api()
    assert {"read_object", "patch_annotations", "WatchStream", "list_pages", "patch_ca_bundle"} <= calling
    assert sorted(calling - set(RBAC_VERBS)) == []  # a new call: say its verbs in kube.RBAC_VERBS
    assert sorted(set(RBAC_VERBS) - calling) == []  # (and no listing outlives its function)


def _used_functions(module: str) -> set[str]:
    """The kube.py functions (and Kopf's event handlers) ``cardquota/<module>`` refers to."""
    tree = ast.parse((REPO / "cardquota" / module).read_text())
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "cardquota.kube" for alias in node.names}
    kopf = any(isinstance(node, ast.Attribute) and ast.unparse(node) == KOPF for node in ast.walk(tree))
    return {name for name in imported & names if RBAC_VERBS.get(name)} | ({KOPF} if kopf else set())


@pytest.mark.parametrize("process", sorted(CALLS))
def test_each_process_lists_every_api_function_its_modules_use_with_a_verb_it_makes(process: str) -> None:
    listed = {(call.module, call.function) for call in CALLS[process]}
    used = {(module, function) for module in MODULES[process] for function in _used_functions(module)
            if (process, module, function) not in NOT_MADE}
    assert sorted(used - listed) == []  # a module calls the API server through a function not listed for it
    assert sorted(listed - used - set(NOT_YET_USED)) == []  # a listed call its module no longer makes
    assert sorted(set(NOT_YET_USED) & used) == []  # the module makes it now: drop it from NOT_YET_USED
    wrong = [call for call in CALLS[process]
             if call.verb not in (KOPF_VERBS if call.function == KOPF else RBAC_VERBS[call.function])]
    assert wrong == []


def test_the_controller_reads_a_queue_back_after_a_refused_patch() -> None:
    """The call issue 41 found without a grant: Publisher._publish_queue GETs the Queue (kube.read_object)."""
    source = inspect.getsource(__import__("cardquota.operator.controller", fromlist=["Publisher"]).Publisher
                               ._publish_queue)
    assert "read_object" in source
    assert Call(CONTROLLER, "read_object", "get", "scheduling.volcano.sh", "queues") in CALLS["controller"]


# ------------------------------------------------------------------------------------- held to the shipped RBAC


def _grants(shipped: Shipped) -> Grants:
    if shipped.source.startswith("overlay") and KUBECTL is None:
        pytest.skip("kubectl is not on PATH (kubectl kustomize renders the overlays)")
    return grants_of(shipped.objects(), shipped.account)


@pytest.mark.parametrize("shipped", SHIPPED, ids=lambda shipped: f"{shipped.process}-{shipped.source}")
def test_the_rendered_rbac_allows_every_call_and_grants_nothing_else(shipped: Shipped) -> None:
    grants = _grants(shipped)
    made = _made(shipped)
    refused = [f"{call.module}: {call.request()}" for call in made if not grants.allows(call.request())]
    assert refused == []
    needed = {_permission(call) for call in made}
    assert sorted(grants.permissions() - needed) == []  # a grant no call needs


def test_a_missing_grant_and_an_unneeded_one_are_both_found() -> None:
    """The check above fails both ways: without ``get`` on queues the controllers' Queue read is refused, and a
    grant of ``delete`` on queues is needed by no call."""
    shipped = next(s for s in SHIPPED if s.process == "controller" and s.source == "overlay production")
    objects = kustomized("production")
    for obj in objects:
        if obj["kind"] == "ClusterRole" and obj["metadata"]["name"] == "cardquota-controller":
            for rule in obj["rules"]:
                if "queues" in rule["resources"]:
                    rule["verbs"] = [verb for verb in rule["verbs"] if verb != "get"] + ["delete"]
    grants = grants_of(objects, shipped.account)
    read_back = Call(CONTROLLER, "read_object", "get", "scheduling.volcano.sh", "queues")
    assert not grants.allows(read_back.request())
    assert ("delete", "scheduling.volcano.sh", "queues", "", "") in \
        grants.permissions() - {_permission(call) for call in _made(shipped)}
