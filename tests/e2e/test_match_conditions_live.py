"""The API server's own CEL against the project's model of it (tests/webhook_conditions.py, cel-python), one write at
a time, on the writes the property tests generate (tests/unit/test_match_conditions.py ``writes``).

For the module, every other webhook configuration is set aside (saved, deleted, put back after) and one probe
configuration stands in for cardquota's: a validating webhook per shipped webhook — its rules, matchConditions and
failurePolicy as shipped, no selectors — pointing at a server in this process, which allows everything and records
which webhook was called for which write. Each generated write is then made as its user (impersonated) with
server-side dry-run, an update after creating its old object for real; the API server's decision for each webhook
(called, skipped, or the write refused because a condition failed to evaluate under ``failurePolicy: Fail``) is
compared with the model's decision over the same objects as the API server holds them (the stored old object and
the new one as the dry run returned it, defaults applied). A disagreement fails with the write.

Runs on ``make e2e-local``'s control plane only: the API server must reach this process (loopback, same network
namespace).
"""

from __future__ import annotations

import collections
import copy
import itertools
import json
import os
import re
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from e2e.cluster import Kubectl
from e2e.undo import UndoLog
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from unit.test_match_conditions import CONTROLLERS, HOOKS, KINDS, OWN, SCHEDULER, outcome, writes
from webhook_conditions import Decision

LOCAL = os.environ.get("CARDQUOTA_E2E_LOCAL", "")
NAMESPACE = "cardquota-e2e-cel"
PROBE = "cardquota-e2e-cel-probe"
USERS = ("alice", SCHEDULER, CONTROLLERS, OWN)
EXAMPLES = 25
"""Writes per kind (each one to four API calls)."""

pytestmark = pytest.mark.skipif(not LOCAL, reason="the API server calls a server in this process: make e2e-local")


@dataclass
class Recorder:
    """What the probe webhooks were called with: (webhook name, operation, object name, dry run)."""

    calls: list[tuple[str, str, str, bool]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def called(self, name: str, operation: str) -> set[str]:
        with self.lock:
            return {hook for hook, op, named, dry in self.calls if named == name and op == operation and dry}


def _handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Probe(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request = review["request"]
            target = request.get("object") or request.get("oldObject") or {}
            with recorder.lock:
                recorder.calls.append((self.path.split("?", 1)[0].strip("/"), request["operation"],
                                       target.get("metadata", {}).get("name", ""), bool(request.get("dryRun"))))
            body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "response": {"uid": request["uid"], "allowed": True}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass
    return Probe


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Recorder, int, bytes]]:
    from e2e.local import pki

    folder = tmp_path_factory.mktemp("probe")
    authority = pki.Authority.create("cardquota-e2e-probe")
    crt, key = pki.write(folder, "probe", *authority.issue("probe", ips=("127.0.0.1",), server=True))
    recorder = Recorder()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(recorder))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(crt), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield recorder, server.server_address[1], authority.pem
    server.shutdown()


def _probe_configuration(port: int, ca: bytes) -> dict[str, Any]:
    import base64

    hooks = []
    for hook in HOOKS:
        hooks.append({"name": hook["name"], "admissionReviewVersions": ["v1"], "sideEffects": "None",
                      "timeoutSeconds": 5, "failurePolicy": hook.get("failurePolicy", "Fail"),
                      "matchPolicy": hook.get("matchPolicy", "Equivalent"), "rules": hook["rules"],
                      "matchConditions": hook.get("matchConditions") or [],
                      "clientConfig": {"url": f"https://127.0.0.1:{port}/{hook['name']}",
                                       "caBundle": base64.b64encode(ca).decode()}})
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": PROBE}, "webhooks": hooks}


def _clean(obj: Mapping[str, Any]) -> dict[str, Any]:
    kept = copy.deepcopy(dict(obj))
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
        kept["metadata"].pop(key, None)
    return kept


@pytest.fixture(scope="module")
def live(kubectl: Kubectl, module_undo: UndoLog, probe: tuple[Recorder, int, bytes]) -> Any:
    """Only the probe's webhooks (the others saved and put back), writers with RBAC for every kind, a namespace."""
    from e2e.local import controlplane, rest

    api = rest.admin(Path(LOCAL) / "pki", "127.0.0.1", controlplane.API_PORT)
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        path = f"/apis/admissionregistration.k8s.io/v1/{kind}"
        for saved in api.get(path)["items"]:
            name = saved["metadata"]["name"]
            module_undo.change(f"set aside {kind} {name}",
                               lambda path=path, saved=saved: api.create(path, _clean(saved)),
                               lambda path=path, name=name: api.delete(f"{path}/{name}"))
    _, port, ca = probe
    hooks = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    module_undo.change(f"create the probe {PROBE}", lambda: api.delete(f"{hooks}/{PROBE}"),
                       lambda: api.create(hooks, _probe_configuration(port, ca)))
    groups = sorted({group for group, *_ in KINDS.values()})
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": PROBE},
            "rules": [{"apiGroups": groups, "resources": ["*"], "verbs": ["*"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": PROBE},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": PROBE},
               "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}
                            for user in USERS]}
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    module_undo.change("grant the probe's writers every verb on the admitted kinds",
                       lambda: (api.delete(f"{rbac}/clusterrolebindings/{PROBE}"),
                                api.delete(f"{rbac}/clusterroles/{PROBE}")),
                       lambda: (api.create(f"{rbac}/clusterroles", role),
                                api.create(f"{rbac}/clusterrolebindings", binding)))
    module_undo.change(f"create namespace {NAMESPACE}", lambda: api.delete(f"/api/v1/namespaces/{NAMESPACE}"),
                       lambda: api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                  "metadata": {"name": NAMESPACE}}))
    return api


_NUMBER = itertools.count()


def _path(kind: str, namespace: str) -> str:
    group, version, resource, namespaced = KINDS[kind]
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    return f"{base}/namespaces/{namespace}/{resource}" if namespaced else f"{base}/{resource}"


def _placed(obj: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    """The write under a name of its own (and in the test's namespace, but the scheduler's ConfigMap)."""
    placed = copy.deepcopy(obj)
    metadata = placed["metadata"]
    if not (kind == "ConfigMap" and metadata.get("name") == "volcano-scheduler-configmap"):
        metadata["name"] = name  # (the scheduler's ConfigMap keeps its name: the condition reads it)
    if KINDS[kind][3]:
        metadata["namespace"] = NAMESPACE
    if kind == "Deployment":  # apps/v1 requires a selector matching the template (no condition reads either)
        placed["spec"]["selector"] = {"matchLabels": {"cardquota-e2e": "cel"}}
        placed["spec"]["template"].setdefault("metadata", {})["labels"] = {"cardquota-e2e": "cel"}
    return placed


@dataclass
class Verdicts:
    compared: int = 0
    unreached: list[str] = field(default_factory=list)
    """Why each write that never reached the webhooks did not (the API server's words)."""


VERDICTS: dict[str, Verdicts] = {}


def _api_decisions(recorder: Recorder, name: str, operation: str, refusal: str,
                   hooks: Mapping[str, Decision]) -> dict[str, Decision]:
    called = recorder.called(name, operation)
    return {hook: Decision.CALL if hook in called else Decision.REFUSE if hook in refusal else Decision.SKIP
            for hook in hooks}


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_api_servers_cel_decides_as_the_model_does(live: Any, probe: tuple[Recorder, int, bytes], kind: str,
                                                      data: st.DataObject) -> None:
    from e2e.local.rest import ApiError

    recorder = probe[0]
    with recorder.lock:
        recorder.calls.clear()
    new, old, user = data.draw(writes(kind))
    new = _placed(new, kind, f"cel-{next(_NUMBER)}")
    name = new["metadata"]["name"]
    path = _path(kind, new["metadata"].get("namespace", ""))
    verdicts = VERDICTS.setdefault(kind, Verdicts())
    stored = None
    if old is not None:
        try:
            live.create(path, _placed(old, kind, name))
        except ApiError as error:
            verdicts.unreached.append(f"old: {error}")
            return  # the old object is not valid to the API server: nothing to update
    operation = "UPDATE" if old is not None else "CREATE"
    impersonate = {"Impersonate-User": user}
    refusal, seen = "", None
    try:
        for attempt in range(3):  # controllers write some kinds meanwhile (a node's taints): update the latest
            try:
                if old is None:
                    seen = live.request("POST", path, new, query=[("dryRun", "All")], headers=impersonate)
                else:
                    stored = live.get(f"{path}/{name}")  # as the API server holds it now
                    new["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
                    if kind == "Pod":  # a pod's spec cannot change: the generator keeps it, defaults included
                        new["spec"] = stored["spec"]
                    seen = live.request("PUT", f"{path}/{name}", new, query=[("dryRun", "All")],
                                        headers=impersonate)
                break
            except ApiError as error:
                refusal = str(error)
                if error.status != 409 or old is None or attempt == 2:
                    break
                refusal = ""
    finally:
        if old is not None:
            live.delete(f"{path}/{name}", {"gracePeriodSeconds": 0})
    model = outcome(kind, _clean(seen) if seen is not None else new,
                    _clean(stored) if stored is not None else None, operation, user)
    if refusal and not recorder.called(name, operation) and "admission webhook" not in refusal:
        verdicts.unreached.append(refusal)  # refused before the validating webhooks (schema, validation, ...)
        return
    api = _api_decisions(recorder, name, operation, refusal, model)
    note(f"{operation} {kind} as {user}: {json.dumps(new)[:2000]}\nold: {json.dumps(stored)[:2000]}")
    verdicts.compared += 1
    assert api == model, f"the API server and the model disagree ({refusal or 'no refusal'})"


def test_the_comparison_reached_every_kind() -> None:
    """Not vacuous: most generated writes of every kind reached the webhooks and were compared."""
    assert set(VERDICTS) == set(KINDS)
    few = []
    for kind, verdicts in sorted(VERDICTS.items()):
        if verdicts.compared < EXAMPLES // 3:
            reasons = collections.Counter(re.sub(r"cel-\d+", "cel-N", why)[:240] for why in verdicts.unreached)
            few.append(f"{kind}: {verdicts.compared} compared; not reached:\n" + "\n".join(
                f"  {count} × {why}" for why, count in reasons.most_common()))
    assert not few, "\n".join(few)
