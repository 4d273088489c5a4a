"""RBAC as the API server applies it, for tests: the rules the shipped manifests (every kustomize overlay) and the
Helm chart grant a service account, whether they allow one request, and a kmock that answers 403 to what they do
not allow (:class:`RbacEnforced`), so a forbidden call fails a test the way it fails a cluster.

What the API server does, and where (k8s.io/apiserver and k8s.io/kubernetes, as of Kubernetes v1.34):

- the verb of a request: ``pkg/endpoints/request/requestinfo.go`` (``RequestInfoFactory.NewRequestInfo``): GET of
  one object ``get``, of a collection ``list``, with ``watch=true`` ``watch``; POST ``create``; PUT ``update``;
  PATCH ``patch``; DELETE of one object ``delete``, of a collection ``deletecollection``. A subresource
  (``pods/binding``, ``pods/eviction``, ``queues/status``) is its own resource ``<plural>/<subresource>``; the name
  of a create is the one in the path (a subresource's parent), none for a plain create.
- matching: ``plugin/pkg/auth/authorizer/rbac/rbac.go`` (``RuleAllows``) with ``pkg/apis/rbac/v1/evaluation_helpers``:
  the verb, the API group and the resource (or ``<resource>/<subresource>``) must each be listed (or ``*``), and
  ``resourceNames``, when given, must hold the request's name (so never a list, a watch or a create without a name).
  A ClusterRole bound by a ClusterRoleBinding applies everywhere; a Role by a RoleBinding in its own namespace.
  Discovery (``/api``, ``/apis``, ``/version``) is granted to every authenticated user (``system:discovery``).
  A list or watch narrowed to one name by ``fieldSelector=metadata.name=`` is not modelled: cardquota makes none.
- the answer: ``pkg/endpoints/handlers/responsewriters/errors.go`` (``Forbidden``, ``forbiddenMessage``) writes a
  Status from ``apierrors.NewForbidden`` (k8s.io/apimachinery ``pkg/api/errors/errors.go``): code 403, reason
  ``Forbidden``, message ``<resource>[.<group>] ["<name>" ]is forbidden: User "<user>" cannot <verb> resource
  "<resource>" in API group "<group>" (in the namespace "<ns>" | at the cluster scope)``, details
  ``{name, group, kind: <resource>}``.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kmock
import yaml

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "manifests"
CHART = REPO / "charts" / "cardquota"
KUBECTL = shutil.which("kubectl")
NAMESPACE = "cardquota-system"

Objects = list[dict[str, Any]]
Permission = tuple[str, str, str, str, str]
"""One grant: (verb, API group, resource, resource name or "", the Role's namespace or "" for cluster-wide)."""


@dataclass(frozen=True)
class Request:
    """What RBAC sees of one request."""

    verb: str
    group: str
    resource: str
    """The plural, or ``<plural>/<subresource>``."""
    namespace: str = ""
    name: str = ""

    def __str__(self) -> str:
        group = f".{self.group}" if self.group else ""
        name = f" {self.name}" if self.name else ""
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.verb} {self.resource}{group}{name}{where}"


@dataclass(frozen=True)
class Rule:
    verbs: frozenset[str]
    groups: frozenset[str]
    resources: frozenset[str]
    names: frozenset[str]
    namespace: str = ""
    """The Role's namespace; "" for a ClusterRole bound cluster-wide."""
    role: str = ""

    def allows(self, request: Request) -> bool:
        return ((not self.namespace or self.namespace == request.namespace)
                and bool({request.verb, "*"} & self.verbs) and bool({request.group, "*"} & self.groups)
                and bool({request.resource, "*"} & self.resources)
                and (not self.names or request.name in self.names))


@dataclass(frozen=True)
class Grants:
    """The rules bound to one service account."""

    user: str
    rules: tuple[Rule, ...]

    def allows(self, request: Request) -> bool:
        return any(rule.allows(request) for rule in self.rules)

    def permissions(self) -> frozenset[Permission]:
        """Every (verb, group, resource, name or "", namespace or "") a rule grants, one by one."""
        return frozenset((verb, group, resource, name, rule.namespace) for rule in self.rules
                         for verb in rule.verbs for group in rule.groups for resource in rule.resources
                         for name in (rule.names or {""}))

    def allowing(self, request: Request) -> frozenset[Permission]:
        """The permissions (of :meth:`permissions`) that allow ``request``: none if it is refused."""
        return frozenset(permission for permission in self.permissions() if _rule_of(permission).allows(request))


def _rule_of(permission: Permission) -> Rule:
    verb, group, resource, name, namespace = permission
    return Rule(frozenset({verb}), frozenset({group}), frozenset({resource}), frozenset({name} - {""}), namespace)


def grants_of(objects: Iterable[Mapping[str, Any]], account: str, namespace: str = NAMESPACE) -> Grants:
    """What the (Cluster)RoleBindings among ``objects`` give the ServiceAccount ``namespace/account``."""
    objects = list(objects)
    roles = {(obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj for obj in objects
             if obj.get("kind") in ("ClusterRole", "Role")}
    rules: list[Rule] = []
    for binding in objects:
        if binding.get("kind") not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(subject.get("kind") == "ServiceAccount" and subject.get("name") == account
                   and subject.get("namespace") == namespace for subject in binding.get("subjects") or []):
            continue
        bound_in = binding["metadata"].get("namespace", "") if binding["kind"] == "RoleBinding" else ""
        reference = binding["roleRef"]
        role = roles[(reference["kind"], bound_in if reference["kind"] == "Role" else "", reference["name"])]
        rules += [Rule(frozenset(rule.get("verbs") or ()), frozenset(rule.get("apiGroups") or ()),
                       frozenset(rule.get("resources") or ()), frozenset(rule.get("resourceNames") or ()),
                       bound_in, reference["name"]) for rule in role.get("rules") or []]
    return Grants(f"system:serviceaccount:{namespace}:{account}", tuple(rules))


# ------------------------------------------------------------------------------------------------- rendering

@functools.cache
def _kustomized(overlay: str) -> str:
    assert KUBECTL is not None, "kubectl is not on PATH (kubectl kustomize renders the overlays)"
    result = subprocess.run([KUBECTL, "kustomize", str(MANIFESTS / "overlays" / overlay)], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return json.dumps([document for document in yaml.safe_load_all(result.stdout) if document])


def kustomized(overlay: str) -> Objects:
    """The objects ``kubectl kustomize manifests/overlays/<overlay>`` renders."""
    return list(json.loads(_kustomized(overlay)))


@functools.cache
def _charted(values_json: str) -> str:
    import helm_python as helm

    chart = helm.Chart.load(CHART)
    rendered = chart.render(values=json.loads(values_json), name="cardquota", namespace=NAMESPACE, is_install=True)
    return json.dumps([document for text in rendered.values() for document in yaml.safe_load_all(text) if document])


def charted(values: Mapping[str, Any]) -> Objects:
    """The objects the Helm chart renders with ``values`` in :data:`NAMESPACE`."""
    return list(json.loads(_charted(json.dumps(values, sort_keys=True))))


def rendered_grants(account: str, overlay: str = "production") -> Grants:
    """What a kustomize overlay grants ``account`` (default: production, where the controllers have their own)."""
    return grants_of(kustomized(overlay), account)


# --------------------------------------------------------------------------------------------------- requests

_PATH = re.compile(r"^/(?:api/(?P<core>[^/]+)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
                   r"(?:/namespaces/(?P<namespace>[^/]+))?(?:/(?P<rest>.*))?$")


def request_of(method: str, path: str, params: Mapping[str, str]) -> Request | None:
    """What RBAC sees of ``method path?params`` (None: not a resource request, e.g. discovery)."""
    match = _PATH.match(path.rstrip("/"))
    if match is None:
        return None
    namespace = match["namespace"] or ""
    parts = [part for part in (match["rest"] or "").split("/") if part]
    if not parts:
        if not namespace:
            return None  # the group version's discovery document
        parts, namespace = ["namespaces", namespace], ""  # one Namespace (cluster-scoped)
    plural, name, subresource = (*parts, "", "")[:3]
    resource = f"{plural}/{subresource}" if subresource else plural
    method = method.upper()
    if method == "GET":
        verb = "watch" if str(params.get("watch", "")).lower() in ("true", "1") else ("get" if name else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    return Request(verb, match["group"] or "", resource, namespace, name)


def forbidden(grants: Grants, request: Request) -> kmock.KubernetesError:
    """The API server's 403 for ``request`` by ``grants.user`` (see the module docstring)."""
    plural = request.resource.split("/")[0]
    qualified = f"{plural}.{request.group}" if request.group else plural
    where = f'in the namespace "{request.namespace}"' if request.namespace else "at the cluster scope"
    reason = (f'User "{grants.user}" cannot {request.verb} resource "{request.resource}" in API group '
              f'"{request.group}" {where}')
    subject = f'{qualified} "{request.name}"' if request.name else qualified
    return kmock.KubernetesError(status=403, reason="Forbidden", message=f"{subject} is forbidden: {reason}",
                                 details={"name": request.name, "group": request.group, "kind": plural})


class RbacEnforced(kmock.KubernetesEmulator):
    """kmock that answers 403 (a Status, reason Forbidden, as the API server does) to a request whose bearer token is
    one of :attr:`accounts` and whose rules do not allow it; the object store is left as it was. Requests without a
    known token (the test's own, as a cluster admin) are served as before. Compose it before another emulator
    (``class X(RbacEnforced, AnnotationLimits)``) so nothing else sees a refused request."""

    accounts: dict[str, Grants]
    refused: list[tuple[str, Request]]

    def enforce(self, token: str, grants: Grants) -> None:
        """Requests with ``Authorization: Bearer <token>`` are held to ``grants``."""
        if "accounts" not in self.__dict__:
            self.accounts, self.refused = {}, []
        self.accounts[token] = grants

    async def _handle(self, request: Any) -> Any:
        accounts = self.__dict__.get("accounts") or {}
        authorization = next((value for key, value in request.headers.items() if key.lower() == "authorization"), "")
        grants = accounts.get(authorization.removeprefix("Bearer ").strip()) if authorization else None
        if grants is not None:
            seen = request_of(str(request.method.value), request.url.path, request.params)
            if seen is not None and not grants.allows(seen):
                self.refused.append((grants.user, seen))
                raise forbidden(grants, seen)
        return await super()._handle(request)


def enforcing(kmock_server: Any, token: str, grants: Grants) -> Any:
    """Hold the requests made with ``token`` to ``grants`` (the kmock must be a :class:`RbacEnforced`)."""
    assert isinstance(kmock_server, RbacEnforced), "mark the test pytest.mark.kmock(cls=<an RbacEnforced class>)"
    kmock_server.enforce(token, grants)
    return kmock_server


def refusals(kmock_server: Any) -> Sequence[tuple[str, Request]]:
    return list(kmock_server.__dict__.get("refused") or [])


def assert_nothing_refused(kmock_server: Any) -> None:
    """No request held to an account's RBAC was refused."""
    assert [f"{user}: {request}" for user, request in refusals(kmock_server)] == []
