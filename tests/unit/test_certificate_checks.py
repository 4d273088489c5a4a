"""Each check of the serving certificate — the mounted files' (``--cert-dir``) or the TLS Secret's — survives
whatever goes wrong in it: the pair before keeps serving, the log says why, the next check runs, and
``cardquota_certificate_reload_failures_total`` counts it by reason."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from malformed_certificates import five_byte_ip_pair

from cardquota import processes
from cardquota.kube import KubeError
from cardquota.operator import certificates
from cardquota.operator.certificates import Certificates, keep_certificates
from cardquota.operator.settings import Settings
from cardquota.runtime.metrics import REGISTRY
from cardquota.runtime.tls import KeyPair, ReloadableContext, new_ca, new_serving_cert

CA = new_ca()
GOOD = new_serving_cert(CA, ["localhost"])
NEXT = new_serving_cert(CA, ["localhost"])
FIVE_BYTE_IP = five_byte_ip_pair(CA)
REASONS = ("unreadable", "rejected", "secret", "error", "restarted")


def failures() -> dict[str, float]:
    return {reason: REGISTRY.get_sample_value("cardquota_certificate_reload_failures_total", {"reason": reason}) or 0.0
            for reason in REASONS}


def counted_since(before: dict[str, float]) -> dict[str, float]:
    return {reason: count - before[reason] for reason, count in failures().items() if count != before[reason]}


def mount(folder: Path, pair: KeyPair | None) -> None:
    for name in ("tls.crt", "tls.key"):
        (folder / name).unlink(missing_ok=True)
    if pair is not None:
        (folder / "tls.crt").write_bytes(pair.cert_pem)
        (folder / "tls.key").write_bytes(pair.key_pem)


def broken_reload(tls: ReloadableContext, pair: KeyPair, source: str) -> bool:
    raise RuntimeError("a fault of ours")


@pytest.mark.parametrize(("mounted", "reload", "served", "counted", "logged"), [
    pytest.param(NEXT, None, NEXT, {}, "serving certificate from", id="a new pair: served"),
    pytest.param(None, None, GOOD, {"unreadable": 1}, "not read ([Errno 2] No such file or directory",
                 id="no files"),
    pytest.param(FIVE_BYTE_IP, None, GOOD, {"rejected": 1}, "rejected (the certificate has a field or extension",
                 id="a certificate cryptography cannot read whole"),
    pytest.param(NEXT, broken_reload, GOOD, {"error": 1}, "not checked (RuntimeError: a fault of ours)",
                 id="anything else"),
])
def test_a_check_of_the_mounted_files_never_raises(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, mounted: KeyPair | None,
        reload: Callable[..., bool] | None, served: KeyPair, counted: dict[str, float], logged: str) -> None:
    tls = ReloadableContext(on_rejected=processes.CERTIFICATE_RELOAD_FAILURES.labels("rejected").inc)
    tls.install(GOOD)
    mount(tmp_path, mounted)
    if reload is not None:
        monkeypatch.setattr(ReloadableContext, "reload", reload)
    before = failures()
    caplog.set_level(logging.INFO)
    processes.check_certificate_files(tmp_path, tls)
    assert tls.loaded == served
    assert counted_since(before) == counted
    assert logged in caplog.records[-1].getMessage()
    if counted:
        assert caplog.records[-1].getMessage().endswith(f"still serving {tls.served()}")


async def test_the_secret_check_survives_any_failure_and_serves_the_next_pair(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A Kubernetes error, then an unforeseen one, then a pair cryptography cannot read, then a good pair: the loop
    keeps going and serves the last (it used to end at the first error other than Kubernetes' or the network's)."""
    outcomes: list[Any] = [KubeError("the API server is away"), RuntimeError("a fault of ours"),
                           Certificates(CA, FIVE_BYTE_IP), Certificates(CA, NEXT)]

    def ensure(*args: object, **kwargs: object) -> Certificates:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        assert isinstance(outcome, Certificates)
        return outcome

    async def sleep(seconds: float) -> None:
        if not outcomes:
            raise asyncio.CancelledError  # every outcome seen: end the loop
        await asyncio.sleep(0)

    monkeypatch.setattr(certificates, "ensure_certificates", ensure)
    tls = ReloadableContext(on_rejected=processes.CERTIFICATE_RELOAD_FAILURES.labels("rejected").inc)
    tls.install(GOOD)
    before = failures()
    caplog.set_level(logging.INFO)
    with pytest.raises(asyncio.CancelledError):
        await keep_certificates(object(), Settings(), tls, sleep=sleep)
    assert tls.loaded == NEXT
    assert counted_since(before) == {"secret": 1, "error": 1, "rejected": 1}
    assert any(record.getMessage().startswith("certificate check failed (RuntimeError: a fault of ours), will retry; "
                                              "still serving subject CN=localhost") for record in caplog.records)
