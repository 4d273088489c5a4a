"""What cardquota's processes called during the whole session, as the API server's audit log recorded it, against
the RBAC they ship with: every request allowed (a missing verb is a 403 on a real cluster and nothing in kmock), and
every permission granted used by some request (none broader than needed) or listed below with why the session does
not reach it.

The log holds every request of the service accounts in ``cardquota-system`` (``make e2e-local``'s API server writes
it: ``--audit-policy-file``); elsewhere (kind, a named context) the test is skipped. It runs after every other test
of the session (``e2e_last``), so it sees what they made cardquota do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.cluster import Kubectl

REPO = Path(__file__).resolve().parents[2]
AUDIT_LOG = os.environ.get("CARDQUOTA_E2E_AUDIT_LOG", "")
NAMESPACE = "cardquota-system"
DECISION = "authorization.k8s.io/decision"
"""The audit annotation the API server's authorization filter sets on every request it authorized
(k8s.io/apiserver pkg/endpoints/filters/authorization.go, v0.35): ``allow`` or ``forbid``."""
TERMINATING = "because it is being terminated"
"""How NamespaceLifecycle refuses a new object in a namespace being deleted (k8s.io/apiserver
pkg/admission/plugin/namespace/lifecycle/admission.go, v0.35)."""
ACCOUNTS = {"cardquota": "manifests/overlays/dev", "cardquota-extender": "manifests/overlays/dev-extender"}
NOT_REACHED = {
    ("cardquota-extender", "create", "", "events"):
        "the extender's one Warning event, when the cluster serves no resource.k8s.io version (DRA quotas "
        "unenforced): this API server serves it",
    ("cardquota", "get", "scheduling.volcano.sh", "queues"):
        "a Queue is read again only when the API server refused a usage patch as too large (annotations past "
        "256 KiB); tests/integration/test_publish_limits_kmock.py makes it with the controllers' RBAC enforced",
    ("cardquota", "patch", "", "secrets"):
        "the TLS Secret is patched when the certificate is renewed or the CA rotated (days into its life); the "
        "session creates it (tests/integration/test_certificate_rotation_kmock.py renews it against kmock)",
}
"""Permissions the session does not exercise, each with why."""

pytestmark = [
    pytest.mark.skipif(not AUDIT_LOG, reason="the API server's audit log is read on make e2e-local's control plane"),
    pytest.mark.e2e_last,
]


@dataclass(frozen=True)
class Request:
    account: str
    verb: str
    group: str
    resource: str
    namespace: str
    name: str
    code: int
    decision: str
    """The authorizer's verdict (``allow`` or ``forbid``): a 403 can also come from admission afterwards."""
    message: str

    def describe(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return (f"{self.account}: {self.verb} {self.group or 'core'}/{self.resource} {self.name}{where} → {self.code}"
                f" ({self.decision}{': ' + self.message if self.message else ''})")


@dataclass(frozen=True)
class Permission:
    verb: str
    group: str
    resource: str
    names: tuple[str, ...]
    namespace: str
    """The Role's namespace; empty for a ClusterRole."""

    def allows(self, request: Request) -> bool:
        return (request.verb == self.verb and request.group == self.group and request.resource == self.resource
                and (not self.names or request.name in self.names)
                and (not self.namespace or request.namespace == self.namespace))


def requests() -> list[Request]:
    """The completed requests of cardquota's service accounts."""
    found, seen = [], set()
    for line in Path(AUDIT_LOG).read_text().splitlines():
        event = json.loads(line)
        user = event["user"]["username"]
        # A watch is logged when its answer starts (ResponseStarted), and again only when it ends.
        if event.get("stage") not in ("ResponseStarted", "ResponseComplete") or event["auditID"] in seen:
            continue
        seen.add(event["auditID"])
        if not user.startswith(f"system:serviceaccount:{NAMESPACE}:"):
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        status = event.get("responseStatus") or {}
        found.append(Request(user.rsplit(":", 1)[-1], event["verb"], ref.get("apiGroup", ""), resource,
                             ref.get("namespace", ""), ref.get("name", ""), int(status.get("code", 0)),
                             (event.get("annotations") or {}).get(DECISION, ""), status.get("message", "")))
    return found


def _rendered(kubectl: Kubectl, overlay: str) -> list[dict[str, Any]]:
    text = kubectl.run("kustomize", str(REPO / overlay)).stdout
    return [document for document in yaml.safe_load_all(text) if document]


def granted(kubectl: Kubectl, account: str) -> Iterator[Permission]:
    """Each (verb, resource) the shipped roles bound to ``account`` grant it."""
    objects = _rendered(kubectl, ACCOUNTS[account])
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
             if o["kind"] in ("Role", "ClusterRole")}
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s.get("kind") == "ServiceAccount" and s["name"] == account and s.get("namespace") == NAMESPACE
                   for s in binding.get("subjects") or []):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace", "")
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])]
        for rule in role.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule["verbs"]:
                        yield Permission(verb, group, resource, tuple(rule.get("resourceNames") or ()), namespace)


def test_every_request_cardquota_made_was_allowed() -> None:
    made = requests()
    assert {r.account for r in made} >= {"cardquota", "cardquota-extender"}, "the session ran both"
    # (a 403 without the authorizer's verdict is counted too: nothing tells it was not RBAC)
    forbidden = sorted({r.describe() for r in made if r.decision == "forbid" or (r.code == 403 and not r.decision)})
    assert not forbidden, "refused by RBAC:\n" + "\n".join(forbidden)


def test_no_request_was_refused_after_authorization_but_for_a_namespace_being_deleted() -> None:
    """A 403 the authorizer allowed comes from admission. The one expected: an event for an object of a namespace
    being deleted (the NamespaceLifecycle plugin refuses new objects in it; cardquota logs a warning and goes on),
    as when a test's namespace goes while the controller reports on its PodGroups."""
    refused = sorted({r.describe() for r in requests() if r.code == 403 and r.decision == "allow"
                      and not (r.resource == "events" and TERMINATING in r.message)})
    assert not refused, "refused after authorization:\n" + "\n".join(refused)


@pytest.mark.parametrize("account", sorted(ACCOUNTS))
def test_every_permission_granted_is_used(kubectl: Kubectl, account: str) -> None:
    made = [r for r in requests() if r.account == account]
    unused = []
    for permission in set(granted(kubectl, account)):
        key = (account, permission.verb, permission.group, permission.resource)
        if not any(permission.allows(r) for r in made) and not NOT_REACHED.get(key):
            unused.append(f"{permission.verb} {permission.group or 'core'}/{permission.resource}"
                          f"{' ' + ','.join(permission.names) if permission.names else ''}")
    assert not unused, f"{account} is granted what it never called in the session:\n" + "\n".join(sorted(unused))


def test_every_request_is_allowed_by_the_shipped_roles_alone(kubectl: Kubectl) -> None:
    """No request relies on a permission from elsewhere (a default role, a binding the cluster happened to have)."""
    for account in ACCOUNTS:
        permissions = list(granted(kubectl, account))
        unexplained = sorted({r.describe() for r in requests() if r.account == account and r.code != 403
                              and not any(p.allows(r) for p in permissions) and not _discovery(r)})
        assert not unexplained, f"{account} made requests its roles do not grant:\n" + "\n".join(unexplained)


def _discovery(request: Request) -> bool:
    """Requests every authenticated user may make (system:discovery, system:basic-user): no resource."""
    return not request.resource or request.resource in ("selfsubjectaccessreviews", "selfsubjectrulesreviews")
