"""``--cert-dir``: a certificate mounted read-only (every Secret volume is) is served as it is, and a new pair is
served only once it loads, over real HTTPS on 127.0.0.1.

Handshakes are checked by the fingerprint of the certificate the server presents, with and without SNI (the API
server names the Service, so it sends SNI; a kubelet probing the pod's IP sends none) and over TLS 1.2 and 1.3."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import os
import shutil
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from malformed_certificates import duplicate_extension_pair, five_byte_ip_pair
from polling import eventually
from read_only import read_only_view, serving

from cardquota import processes
from cardquota.kube import Connection, api_client
from cardquota.operator.settings import Settings
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.metrics import REGISTRY
from cardquota.runtime.tls import KeyPair, ReloadableContext, fingerprint, new_ca, new_serving_cert


def pair_fingerprint(pair: KeyPair) -> str:
    return fingerprint(x509.load_pem_x509_certificate(pair.cert_pem))


def mount(folder: Path, cert_pem: bytes, key_pem: bytes) -> None:
    """tls.crt, then tls.key, each replaced whole (a reader sees either file old or new, never half-written)."""
    for name, data in (("tls.crt", cert_pem), ("tls.key", key_pem)):
        (folder / f".{name}.new").write_bytes(data)
        os.replace(folder / f".{name}.new", folder / name)


def client(ca: KeyPair, *, sni: bool, tls12: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    context.check_hostname = sni  # without SNI the name is not checked, the chain still is
    if tls12:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    return context


async def served(port: int, ca: KeyPair, *, sni: bool = True, tls12: bool = False) -> str:
    """The fingerprint of the certificate a new handshake gets (ssl.SSLError when the handshake fails)."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client(ca, sni=sni, tls12=tls12),
                                              server_hostname="localhost" if sni else "")
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    return fingerprint(x509.load_der_x509_certificate(der))


def write_version(folder: Path, name: str, pair: KeyPair) -> None:
    """One version of a Secret volume as the kubelet lays it out (kubernetes ``pkg/volume/util/atomic_writer.go``):
    a timestamped folder, ``..data_tmp`` linked to it and renamed over ``..data``, the visible names linking into
    ``..data``, the previous version removed."""
    (folder / name).mkdir()
    mount(folder / name, pair.cert_pem, pair.key_pem)
    previous = os.readlink(folder / "..data") if (folder / "..data").is_symlink() else None
    os.symlink(name, folder / "..data_tmp")
    os.rename(folder / "..data_tmp", folder / "..data")
    for visible in ("tls.crt", "tls.key"):
        if not (folder / visible).is_symlink():
            os.symlink(f"..data/{visible}", folder / visible)
    if previous is not None:
        shutil.rmtree(folder / previous)


@pytest.fixture
def ca() -> KeyPair:
    return new_ca()


@pytest.fixture
def mounted() -> Iterator[Path]:
    """A folder reachable by any user (``tmp_path`` is private to root), for a server running as another one."""
    folder = Path(tempfile.mkdtemp(prefix="cardquota-cert-dir-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("layout", ["plain folder", "Secret volume"])
def test_a_read_only_cert_dir_is_served_as_mounted(mounted: Path, ca: KeyPair, layout: str) -> None:
    pair = new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])
    if layout == "plain folder":
        mount(mounted, pair.cert_pem, pair.key_pem)
    else:
        write_version(mounted, "..2026_11_26_22_00_00.000000001", pair)
        os.chmod(mounted / "..2026_11_26_22_00_00.000000001", 0o755)
    for path in mounted.rglob("tls.*"):
        path.chmod(0o644)  # readable by a server running as another user (a Secret volume's default mode)
    listing = sorted(str(path) for path in mounted.rglob("*"))
    view, failures = read_only_view(mounted)
    if view is None:
        pytest.skip(f"no way to make a folder read-only for a process here: {'; '.join(failures)}")
    try:
        with serving(view.prefix, mounted) as (port, process):
            connection = http.client.HTTPSConnection("127.0.0.1", port, context=client(ca, sni=False), timeout=30)
            connection.request("GET", "/healthz")
            assert connection.getresponse().status == 200
            assert connection.sock is not None
            der = connection.sock.getpeercert(binary_form=True)
            assert der is not None
            assert fingerprint(x509.load_der_x509_certificate(der)) == pair_fingerprint(pair)
            connection.close()
            process.terminate()
            _, log = process.communicate(timeout=30)
    finally:
        view.undo()
    assert f"serving certificate from {mounted}: subject CN=localhost" in log
    assert f"SHA-256 {pair_fingerprint(pair)}" in log
    assert sorted(str(path) for path in mounted.rglob("*")) == listing, view.how


@contextlib.asynccontextmanager
async def following(folder: Path) -> AsyncIterator[int]:
    """The operator's admission server following the files in ``folder`` (the test sets how often it checks): its
    port."""
    settings = Settings(host="127.0.0.1", port=0, metrics_port=0, dev=False, cert_dir=str(folder))
    tasks: list[asyncio.Task[None]] = []
    api = api_client(Connection(host="https://127.0.0.1:9"))  # never called: the certificate is mounted
    runner = await processes.serve_admissions(settings, ClusterCache(), api, tasks)
    try:
        yield runner.addresses[0][1]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()


@pytest.fixture
async def operator_tls(tmp_path: Path, ca: KeyPair, monkeypatch: pytest.MonkeyPatch
                       ) -> AsyncIterator[tuple[int, Path]]:
    """The operator's admission server following the files in ``tmp_path/tls`` (checked every 20 ms)."""
    folder = tmp_path / "tls"
    folder.mkdir()
    first = new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])
    mount(folder, first.cert_pem, first.key_pem)
    monkeypatch.setattr(processes, "CERT_CHECK_SECONDS", 0.02)
    async with following(folder) as port:
        yield port, folder


async def test_a_mismatched_pair_leaves_the_old_certificate_serving(
        operator_tls: tuple[int, Path], ca: KeyPair, caplog: pytest.LogCaptureFixture) -> None:
    port, folder = operator_tls
    old = KeyPair((folder / "tls.crt").read_bytes(), (folder / "tls.key").read_bytes())
    assert await served(port, ca) == pair_fingerprint(old)
    new = new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])
    caplog.set_level(logging.INFO)

    def warned() -> list[str]:
        return [record.getMessage() for record in caplog.records
                if record.levelno >= logging.WARNING and str(folder) in record.getMessage()]

    # A folder read between the writes of a new pair: the new certificate with the old key (a writer that replaces
    # tls.crt first), then the old certificate with the new key (one that replaces tls.key first). Loaded into the
    # live context, the first left it with a certificate and no key (OpenSSL 3.0 drops the key that does not match
    # the new certificate, then refuses the old key): every handshake failed.
    for cert_pem, key_pem in ((new.cert_pem, old.key_pem), (old.cert_pem, new.key_pem)):
        caplog.clear()
        mount(folder, cert_pem, key_pem)
        await eventually(lambda: bool(warned()))
        for sni in (True, False):
            for tls12 in (True, False):
                assert await served(port, ca, sni=sni, tls12=tls12) == pair_fingerprint(old)
        assert "rejected (the key is not the certificate's); still serving subject CN=localhost" in warned()[0]
        assert f"SHA-256 {pair_fingerprint(old)}" in warned()[0]

    mount(folder, new.cert_pem, new.key_pem)

    async def new_served() -> bool:
        return await served(port, ca) == pair_fingerprint(new)

    await eventually(new_served)
    for sni in (True, False):
        for tls12 in (True, False):
            assert await served(port, ca, sni=sni, tls12=tls12) == pair_fingerprint(new)
    assert any(f"serving certificate from {folder}: " in r.getMessage() and pair_fingerprint(new) in r.getMessage()
               for r in caplog.records)


async def test_nothing_is_written_into_the_cert_dir(operator_tls: tuple[int, Path], ca: KeyPair) -> None:
    port, folder = operator_tls
    assert await served(port, ca, sni=False)
    assert sorted(os.listdir(folder)) == ["tls.crt", "tls.key"]


@pytest.mark.parametrize("make", [five_byte_ip_pair, duplicate_extension_pair])
async def test_a_certificate_cryptography_cannot_read_is_refused_and_the_watch_goes_on(
        operator_tls: tuple[int, Path], ca: KeyPair, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, make: Callable[[KeyPair], KeyPair]) -> None:
    """Such a pair (OpenSSL loads it) used to be served, then the log line describing it raised and ended the watch:
    no later pair was ever served. Now it is refused, the old pair keeps serving, and the watch — started again if it
    stops anyway — serves the next good pair."""
    port, folder = operator_tls
    old = KeyPair((folder / "tls.crt").read_bytes(), (folder / "tls.key").read_bytes())
    malformed = make(ca)
    caplog.set_level(logging.INFO)
    rejected = REGISTRY.get_sample_value("cardquota_certificate_reload_failures_total", {"reason": "rejected"}) or 0
    mount(folder, malformed.cert_pem, malformed.key_pem)
    await eventually(lambda: any(f"certificate from {folder} rejected (the certificate has a field or extension "
                                 "cryptography cannot read (" in record.getMessage() for record in caplog.records))
    for sni in (True, False):
        assert await served(port, ca, sni=sni) == pair_fingerprint(old)
    assert (REGISTRY.get_sample_value("cardquota_certificate_reload_failures_total", {"reason": "rejected"}) or 0) \
        > rejected

    # The watch itself stops once (a check raising where none should): it is started again a second later, and
    # counted.
    restarted = REGISTRY.get_sample_value("cardquota_certificate_reload_failures_total", {"reason": "restarted"}) or 0
    check = processes.check_certificate_files
    calls = 0

    def stops_once(source: Path, tls: ReloadableContext) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("the watch stops")
        check(source, tls)

    monkeypatch.setattr(processes, "check_certificate_files", stops_once)
    new = new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])
    mount(folder, new.cert_pem, new.key_pem)

    async def new_served() -> bool:
        return await served(port, ca) == pair_fingerprint(new)

    await eventually(new_served)
    assert calls > 1
    assert REGISTRY.get_sample_value("cardquota_certificate_reload_failures_total", {"reason": "restarted"}) \
        == restarted + 1
    assert any(record.getMessage().startswith(f"the watch of the certificate files in {folder} stopped "
                                              "(RuntimeError: the watch stops); starting it again in 1 s")
               for record in caplog.records)
