"""Pure parts of the operator: the certificate plan, settings from CLI and environment, JSON logs, AdmissionReview
translation."""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import logging
import re
from typing import Any

import pytest

from cardquota.core.policies.config import FailureMode
from cardquota.core.verdict import MAX_MESSAGE_VIOLATIONS, Verdict, allow, deny
from cardquota.core.violations import Reason, Violation, not_found, required
from cardquota.operator.certificates import Stored, decode, plan, secret_body
from cardquota.operator.settings import LogFormat, Settings, add_arguments, from_arguments, parse_failure_modes
from cardquota.processes import JsonFormatter
from cardquota.runtime.tls import new_ca, new_serving_cert, renewal_reason, service_dns_names
from cardquota.webhooks.review import MAX_MESSAGE_LENGTH, MalformedReview, read_review, response

NAMES = service_dns_names("cardquota", "cardquota-system")
NOW = datetime.datetime(2026, 11, 22, tzinfo=datetime.UTC)


def test_service_dns_names() -> None:
    assert NAMES == ["cardquota", "cardquota.cardquota-system", "cardquota.cardquota-system.svc",
                     "cardquota.cardquota-system.svc.cluster.local"]


def test_plan_issues_everything_when_nothing_exists_and_nothing_when_all_is_good() -> None:
    certificates, reason = plan(Stored(), NAMES, now=NOW)
    assert reason == "no CA yet"
    assert renewal_reason(certificates.serving, certificates.ca, NAMES, now=NOW) is None
    same, reason = plan(Stored(certificates.ca, certificates.serving), NAMES, now=NOW)
    assert reason is None
    assert same == certificates


@pytest.mark.parametrize(
    ("change", "reason_start"),
    [
        ("expiring", "serving certificate: expires"),
        ("names", "serving certificate: names"),
        ("other-ca", "serving certificate: not issued by the current CA"),
    ],
)
def test_plan_renews_the_serving_certificate(change: str, reason_start: str) -> None:
    ca = new_ca(now=NOW)
    if change == "expiring":
        serving = new_serving_cert(ca, NAMES, days=10, now=NOW)
    elif change == "names":
        serving = new_serving_cert(ca, ["other"], now=NOW)
    else:
        serving = new_serving_cert(new_ca(now=NOW), NAMES, now=NOW)
    renewed, reason = plan(Stored(ca, serving), NAMES, now=NOW)
    assert reason is not None
    assert reason.startswith(reason_start)
    assert renewed.ca == ca
    assert renewal_reason(renewed.serving, ca, NAMES, now=NOW) is None


def test_ca_renewal_adds_the_new_ca_to_the_bundle_and_keeps_serving_the_old_certificate() -> None:
    """The whole rotation, step by step: tests/unit/test_certificate_rotation.py."""
    old = new_ca(days=60, now=NOW)  # inside the 90-day renewal window
    serving = new_serving_cert(old, NAMES, days=50, now=NOW)
    rotating, reason = plan(Stored(old, serving), NAMES, now=NOW)
    assert reason is not None
    assert reason.startswith("the CA expires")
    assert (rotating.ca, rotating.serving) == (old, serving)
    assert rotating.next_ca is not None
    assert rotating.ca_bundle(NOW) == old.cert_pem + rotating.next_ca.cert_pem
    assert decode(secret_body(Settings(), rotating, None)) == Stored(old, serving, next_ca=rotating.next_ca)


def test_secret_body_is_a_tls_secret_with_labels_and_the_read_version() -> None:
    certificates, _ = plan(Stored(), NAMES, now=NOW)
    body = secret_body(Settings(), certificates, {"metadata": {"resourceVersion": "42"}})
    assert body["type"] == "kubernetes.io/tls"
    assert body["metadata"]["resourceVersion"] == "42"
    assert body["metadata"]["labels"]["app.kubernetes.io/component"] == "webhook-tls"
    assert base64.b64decode(body["data"]["tls.crt"]) == certificates.serving.cert_pem
    assert "ca-previous.crt" not in body["data"]


def test_decode_tolerates_missing_and_garbled_data() -> None:
    assert decode(None) == Stored()
    assert decode({"data": {"tls.crt": "%%%", "tls.key": "x", "ca.crt": "AAAA"}}) == Stored()


def settings_from(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_arguments(parser.parse_args(argv), env or {})


def test_settings_defaults() -> None:
    settings = settings_from([])
    assert settings == Settings()
    assert settings.policy.card_aware_schedulers == frozenset({"volcano"})


def test_settings_from_environment_and_command_line() -> None:
    env = {"CARDQUOTA_NAMESPACE": "gpu-system", "CARDQUOTA_WEBHOOK_PORT_NUMBER": "8443",
           "CARDQUOTA_SCHEDULERS": "volcano,vc-gpu", "CARDQUOTA_FAILURE_MODES": "Pod=closed",
           "CARDQUOTA_LOG_FORMAT": "json"}
    settings = settings_from(["--failure-mode", "Queue=open", "--service", "cq"], env)
    assert settings.namespace == "gpu-system"
    assert settings.port == 8443
    assert settings.service == "cq"
    assert settings.schedulers == frozenset({"volcano", "vc-gpu"})
    assert dict(settings.failure_modes) == {"Pod": FailureMode.CLOSED, "Queue": FailureMode.OPEN}
    assert settings.log_format is LogFormat.JSON


@pytest.mark.parametrize("item", ["Pod", "Pod=sometimes", "Deployment=open", "=open"])
def test_bad_failure_modes_are_refused_naming_the_item(item: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"{item!r}: expected KIND=open|closed")):
        parse_failure_modes([item])


def test_json_log_lines_are_json_with_the_exception() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        record = logging.LogRecord("cardquota", logging.ERROR, __file__, 1, "policy %s failed", ("Pod ml/p",),
                                   sys.exc_info())
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "ERROR"
    assert line["message"] == "policy Pod ml/p failed"
    assert "RuntimeError: boom" in line["exception"]


def test_response_shapes() -> None:
    ok = response("u1", allow(warnings=["w" * 300, "v" * 5000]), with_patch=True)["response"]
    assert ok == {"uid": "u1", "allowed": True, "warnings": ["w" * 255 + "…", "v" * 255 + "…"]}  # (over 4,096)
    assert response("u1", allow(warnings=["w" * 300]), with_patch=True)["response"]["warnings"] == ["w" * 300]
    denied = response("u2", deny([Violation("spec.x", "bad")]), with_patch=True)["response"]
    assert denied == {"uid": "u2", "allowed": False,
                      "status": {"code": 403, "reason": "Forbidden", "message": "spec.x: bad", "details": {
                          "causes": [{"type": "FieldValueInvalid", "field": "spec.x", "message": "bad"}]}}}
    patched = response("u3", Verdict(True, patch=({"op": "add", "path": "/a", "value": 1},)), with_patch=True)
    assert patched["response"]["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(patched["response"]["patch"])) == [{"op": "add", "path": "/a", "value": 1}]
    assert "patch" not in response("u3", Verdict(True, patch=({"op": "add", "path": "/a", "value": 1},)),
                                   with_patch=False)["response"]


def test_a_denial_lists_its_causes_as_the_api_server_lists_field_errors() -> None:
    """metav1.StatusCause per violation (type = reason, field = path), as many as the message shows, each clipped
    as the message is: a client reads cardquota's denial as it reads the API server's own validation error."""
    violations = [required("spec.queue", "is required"), not_found('metadata.annotations["q"]', "queue q\nis gone"),
                  *(Violation(f"spec.tasks[{i}]", "x" * 5000, Reason.TOO_LONG) for i in range(10))]
    status = response("u", deny(violations), with_patch=True)["response"]["status"]
    causes = status["details"]["causes"]
    assert len(causes) == MAX_MESSAGE_VIOLATIONS < len(violations)
    assert causes[:2] == [
        {"type": "FieldValueRequired", "field": "spec.queue", "message": "is required"},
        {"type": "FieldValueNotFound", "field": 'metadata.annotations["q"]', "message": "queue q\\nis gone"},
    ]
    assert [cause["field"] for cause in causes[2:]] == ["spec.tasks[0]", "spec.tasks[1]", "spec.tasks[2]"]
    assert {cause["type"] for cause in causes[2:]} == {"FieldValueTooLong"}
    assert all(len(cause["message"]) == MAX_MESSAGE_LENGTH and cause["message"].endswith("…")
               for cause in causes[2:])
    assert len(status["message"]) == MAX_MESSAGE_LENGTH
    assert "details" not in response("u", Verdict(allowed=False, message="no"), with_patch=True)["response"]["status"]
    assert "status" not in response("u", allow(), with_patch=True)["response"]


def test_generated_names_and_request_namespace_reach_the_policy() -> None:
    body = {"kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": "ml", "name": "", "object": {"metadata": {"generateName": "web-"}}}}
    request = read_review(json.dumps(body).encode())
    assert request.policy_object() == {"metadata": {"generateName": "web-", "name": "web-*", "namespace": "ml"}}
    assert request.identity == "Pod ml/web-*"
    with pytest.raises(MalformedReview):
        read_review(b'{"kind": "AdmissionReview", "request": {"uid": 5}}')


def test_operator_without_a_cluster_says_so_in_one_line(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from cardquota.cli.main import run as cli

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    out, err = io.StringIO(), io.StringIO()
    code = cli("cardquota", ["operator", "--dev", "--port", "0", "--metrics-port", "0", "--host", "127.0.0.1",
                             "--cert-dir", str(tmp_path)], stdout=out, stderr=err)
    assert code == 2
    assert err.getvalue().count("\n") == 1
    assert err.getvalue().startswith("cardquota: error: cluster: no Kubernetes configuration")


def test_an_unreachable_api_server_ends_leadership_at_the_renewal_deadline() -> None:
    import urllib3

    from cardquota.operator.leader import LeaderElection

    class Unreachable:
        def param_serialize(self, *args: object, **kwargs: object) -> None:
            raise urllib3.exceptions.MaxRetryError(None, "/apis", "connection refused")  # type: ignore[arg-type]

    now = [100.0]
    election = LeaderElection(Unreachable(), "ns", identity="me", clock=lambda: now[0])  # type: ignore[arg-type]
    election._held, election._renewed_at = True, now[0]
    assert election.try_acquire() is True  # one failed round: still leading until the renewal deadline
    now[0] += 10
    assert election.try_acquire() is False
    assert election.leading is False


def test_leadership_ends_by_itself_at_the_renewal_deadline_and_every_lease_request_is_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica leads only within RENEW_DEADLINE_SECONDS of the start of its last successful renewal, however long
    the next round hangs; each Lease request carries a timeout."""
    from cardquota.operator import leader

    timeouts: list[object] = []
    lease: dict[str, Any] = {}

    def read(api: object, namespace: str, name: str, timeout: object = None) -> object:
        timeouts.append(timeout)
        return lease or None

    def create(api: object, namespace: str, body: dict[str, Any], timeout: object = None) -> object:
        timeouts.append(timeout)
        lease.update(body, metadata={"resourceVersion": "1"})
        return lease

    def update(api: object, namespace: str, name: str, spec: object, version: object, timeout: object = None) -> object:
        timeouts.append(timeout)
        return lease

    monkeypatch.setattr(leader, "read_lease", read)
    monkeypatch.setattr(leader, "create_lease", create)
    monkeypatch.setattr(leader, "update_lease", update)
    now = [100.0]
    election = leader.LeaderElection(object(), "ns", identity="me", clock=lambda: now[0])  # type: ignore[arg-type]
    assert election.leading is False
    assert election.try_acquire() is True
    now[0] += leader.RENEW_DEADLINE_SECONDS - 0.1
    assert election.leading is True
    now[0] += 0.1  # no renewal came back in time (the API server hangs): no more writes
    assert election.leading is False
    assert election.try_acquire() is True  # renewed (from this moment on)
    assert election.leading is True
    now[0] += leader.RENEW_DEADLINE_SECONDS
    assert election.leading is False
    assert timeouts == [leader.LEASE_REQUEST_TIMEOUT] * 4


def test_a_former_leaders_last_write_ends_before_another_replica_can_take_the_lease_over() -> None:
    """The bound the gate keeper's writes rely on: leading ends RENEW_DEADLINE_SECONDS after the renewal's start
    (which stamps renewTime), a write checked as leading just before it is sent ends within WRITE_DEADLINE_SECONDS
    (the connection pool tries a connection ``retries.total`` more times, then the read timeout), and another
    replica takes over only LEASE_SECONDS after renewTime."""
    from kubernetes import client

    from cardquota.kube import _client
    from cardquota.operator import leader

    configured = _client(client.Configuration()).configuration.retries
    connect, read = leader.WRITE_TIMEOUT
    assert (configured.total + 1) * connect + read <= leader.WRITE_DEADLINE_SECONDS
    assert leader.RENEW_DEADLINE_SECONDS + leader.WRITE_DEADLINE_SECONDS < leader.LEASE_SECONDS


def test_renewals_keep_their_pace_and_a_failed_one_is_tried_again_within_the_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A round every 5 s from the start of the last (a 3 s round does not push the next back), and after a failed
    round while holding the Lease, the next at once if it took longer than 1 s: leadership lasts to its deadline
    (10 s after the last renewal's start) and no longer."""
    import asyncio

    from cardquota.operator import leader

    class Stop(Exception):
        pass

    now = [0.0]
    sleeps: list[float] = []
    leading_at_start: list[bool] = []
    election = leader.LeaderElection(object(), "ns", identity="me", clock=lambda: now[0])  # type: ignore[arg-type]
    outcomes = iter([(0.0, True), (3.0, True), (4.0, False), (4.0, False), (0.0, True)])

    def one_round(_: object = None) -> bool:
        leading_at_start.append(election.leading)
        try:
            took, renewed = next(outcomes)
        except StopIteration:
            raise Stop from None
        started = now[0]
        now[0] += took
        return election._became(True, started) if renewed else election.leading

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(election, "try_acquire", one_round)
    monkeypatch.setattr(leader.asyncio, "sleep", fake_sleep)
    with pytest.raises(Stop):
        asyncio.run(election.run())
    assert sleeps == [5.0, 2.0, 0.0, 0.0, 5.0]
    assert leading_at_start == [False, True, True, True, False, True]


def test_a_replica_taking_over_knows_when_its_predecessors_writes_had_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """Taking over a Lease whose holder last renewed 35 s ago for 15 s: that holder's writes had ended 20 s before
    this round started (leading ends before the Lease expires). Where that is not known, the round's start."""
    from cardquota.operator import leader

    wall = datetime.datetime(2026, 12, 7, 12, 0, 0, tzinfo=datetime.UTC)
    stored: dict[str, Any] = {}
    monkeypatch.setattr(leader, "read_lease", lambda *_, **__: stored or None)
    monkeypatch.setattr(leader, "create_lease", lambda _api, _ns, body, **__: stored.update(body))
    monkeypatch.setattr(leader, "update_lease", lambda *_, **__: stored)
    first = leader.LeaderElection(object(), "ns", identity="first", clock=lambda: 500.0)  # type: ignore[arg-type]
    assert first.predecessor_done is None
    assert first.try_acquire(wall) is True
    assert first.predecessor_done == 500.0  # (created: a Lease deleted by hand may have had a holder still writing)
    stored["spec"] = {"holderIdentity": "gone", "leaseDurationSeconds": 15,
                      "renewTime": leader._stamp(wall - datetime.timedelta(seconds=35))}
    second = leader.LeaderElection(object(), "ns", identity="second", clock=lambda: 500.0)  # type: ignore[arg-type]
    assert second.try_acquire(wall) is True
    assert second.predecessor_done == 480.0
    second._became(False)
    assert second.predecessor_done is None  # (not holding: nothing known)
    # A takeover whose answer was lost: the next round finds the Lease its own without having known it held it —
    # someone may have held it in between, so its predecessor's writes are taken to end only now.
    stored["spec"] = {"holderIdentity": "second", "leaseDurationSeconds": 15, "renewTime": leader._stamp(wall)}
    later = [600.0]
    second.clock = lambda: later[0]
    assert second.try_acquire(wall) is True
    assert second.predecessor_done == 600.0
