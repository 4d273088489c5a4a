"""The serving certificate: a mounted pair read from one version of its folder, a pair loaded into a fresh context
before it is served (never into the folder it came from), and a log line that names what is served."""

from __future__ import annotations

import datetime
import io
import logging
import os
import shutil
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from hypothesis import given
from hypothesis import strategies as st
from kubeconfigs import write_kubeconfig
from malformed_certificates import duplicate_extension_pair, five_byte_ip_pair, openssl_loads

from cardquota.runtime import tls
from cardquota.runtime.tls import (
    KeyPair,
    PairChanging,
    ReloadableContext,
    UnusablePair,
    checked_certificate,
    describe,
    fingerprint,
    loaded_context,
    new_ca,
    new_serving_cert,
    read_mounted_pair,
    renewal_reason,
)

CA = new_ca()
GOOD = new_serving_cert(CA, ["localhost"], ip_addresses=["127.0.0.1"])
OTHER = new_serving_cert(CA, ["localhost"], ip_addresses=["127.0.0.1"])
UNREADABLE_IN_PART = [  # (pair, what cryptography says of it): OpenSSL serves both
    pytest.param(five_byte_ip_pair(CA), "ValueError: b'\\x01\\x02' does not appear to be an IPv4 or IPv6 address",
                 id="SAN iPAddress of 5 bytes"),
    pytest.param(duplicate_extension_pair(CA), "DuplicateExtension: Duplicate 1.3.6.1.4.1.32473.1 extension found",
                 id="an extension twice"),
]


def version_pair(number: int) -> KeyPair:
    return KeyPair(f"certificate {number}".encode(), f"key {number}".encode())


class AtomicWriter:
    """A Secret volume as the kubelet writes it (kubernetes ``pkg/volume/util/atomic_writer.go``,
    ``AtomicWriter.Write``), one step at a time: a new timestamped folder, its files, a ``..data_tmp`` link to it,
    renamed over ``..data``, the previous folder removed. The visible ``tls.crt``/``tls.key`` link into ``..data``."""

    def __init__(self, folder: Path, versions: int) -> None:
        self.folder, self.versions, self.current = folder, versions, 1
        self._write_version(1)
        os.symlink(self._name(1), folder / "..data")
        for name in ("tls.crt", "tls.key"):
            os.symlink(f"..data/{name}", folder / name)
        self.steps = [step for number in range(2, versions + 1) for step in self._update(number)]

    @staticmethod
    def _name(number: int) -> str:
        return f"..2026_11_26_22_{number:02d}_00.{number:09d}"

    def _write_version(self, number: int, parts: tuple[str, ...] = ("tls.crt", "tls.key")) -> None:
        folder = self.folder / self._name(number)
        folder.mkdir(exist_ok=True)
        pair = version_pair(number)
        for name in parts:
            (folder / name).write_bytes(pair.cert_pem if name == "tls.crt" else pair.key_pem)

    def _update(self, number: int) -> list[tuple[str, int]]:
        return [("mkdir", number), ("tls.crt", number), ("tls.key", number), ("link", number), ("swap", number),
                ("remove", number - 1)]

    def step(self) -> None:
        if not self.steps:
            return
        action, number = self.steps.pop(0)
        if action == "mkdir":
            (self.folder / self._name(number)).mkdir()
        elif action in ("tls.crt", "tls.key"):
            self._write_version(number, (action,))
        elif action == "link":
            os.symlink(self._name(number), self.folder / "..data_tmp")
        elif action == "swap":
            os.rename(self.folder / "..data_tmp", self.folder / "..data")
            self.current = number
        else:
            shutil.rmtree(self.folder / self._name(number))


@given(st.integers(2, 4), st.lists(st.integers(0, 8), max_size=30))
def test_an_atomic_writer_volume_is_read_from_one_version(tmp_path_factory: pytest.TempPathFactory, versions: int,
                                                         steps_before_reads: list[int]) -> None:
    """However the kubelet's writes interleave with the reads, the certificate and key come from one version.
    (Read through the visible names, ``tls.crt`` then ``tls.key``, as the operator did, a swap between the two reads
    gives the certificate of one version and the key of the next.)"""
    folder = tmp_path_factory.mktemp("secret-volume")
    writer = AtomicWriter(folder, versions)
    pending = iter(steps_before_reads)

    def read(path: Path) -> bytes:
        for _ in range(next(pending, 0)):
            writer.step()
        return path.read_bytes()

    pair = read_mounted_pair(folder, read)
    assert pair in [version_pair(number) for number in range(1, versions + 1)]


def test_a_swap_between_the_two_reads_reads_the_new_version(tmp_path: Path) -> None:
    writer = AtomicWriter(tmp_path, 2)
    reads: list[Path] = []

    def read(path: Path) -> bytes:
        reads.append(path)
        if len(reads) == 2:  # after tls.crt is read, the whole update: the version read from is removed
            while writer.steps:
                writer.step()
        return path.read_bytes()

    assert read_mounted_pair(tmp_path, read) == version_pair(2)
    assert [path.parent.name for path in reads] == [AtomicWriter._name(1), AtomicWriter._name(1),
                                                   AtomicWriter._name(2), AtomicWriter._name(2)]


def test_a_version_without_the_key_is_an_error_not_a_race(tmp_path: Path) -> None:
    AtomicWriter(tmp_path, 1)
    (tmp_path / AtomicWriter._name(1) / "tls.key").unlink()
    with pytest.raises(FileNotFoundError):
        read_mounted_pair(tmp_path)


def test_a_plain_folder_changed_while_read_is_read_again(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_bytes(b"certificate 2")
    (tmp_path / "tls.key").write_bytes(b"key 1")
    reads = 0

    def read(path: Path) -> bytes:  # the writer replaces the key once the certificate has been read
        nonlocal reads
        reads += 1
        if reads == 2:
            (tmp_path / "tls.key").write_bytes(b"key 2")
        return path.read_bytes()

    assert read_mounted_pair(tmp_path, read) == version_pair(2)


def test_files_that_never_settle_are_refused(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_bytes(b"certificate")
    (tmp_path / "tls.key").write_bytes(b"key")
    counter = iter(range(10**6))

    def read(path: Path) -> bytes:
        return path.read_bytes() + str(next(counter)).encode()

    with pytest.raises(PairChanging, match="changed on each of 5 reads"):
        read_mounted_pair(tmp_path, read)


def test_a_mismatched_pair_is_refused_and_the_served_one_stays(caplog: pytest.LogCaptureFixture) -> None:
    context = ReloadableContext()
    context.install(GOOD, "the first")
    caplog.set_level(logging.INFO)
    for mismatched in (KeyPair(OTHER.cert_pem, GOOD.key_pem), KeyPair(GOOD.cert_pem, OTHER.key_pem)):
        with pytest.raises(UnusablePair, match="the key is not the certificate's"):
            context.install(mismatched)
        assert context.reload(mismatched, "the mount") is False
        assert context.loaded == GOOD
    assert context.reload(KeyPair(b"not a certificate", GOOD.key_pem), "the mount") is False
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings[0] == ("certificate from the mount rejected (the key is not the certificate's); still serving "
                           f"{describe(GOOD.cert_pem)}")
    assert warnings[2].startswith("certificate from the mount rejected (the certificate cannot be read (ValueError: ")
    assert context.reload(GOOD, "the mount") is False  # already served: nothing to do, nothing logged
    assert context.reload(OTHER, "the mount") is True
    assert context.loaded == OTHER
    assert caplog.records[-1].getMessage() == f"serving certificate from the mount: {describe(OTHER.cert_pem)}"


class RecordingContext(ssl.SSLContext):
    """Notes the mode of the files (and their folder) a pair is loaded from."""

    modes: list[tuple[int, int, int]]

    def load_cert_chain(self, certfile: str, keyfile: str | None = None, password: object = None) -> None:
        assert keyfile is not None
        self.modes.append((stat.S_IMODE(os.stat(os.path.dirname(certfile)).st_mode),
                           stat.S_IMODE(os.stat(certfile).st_mode), stat.S_IMODE(os.stat(keyfile).st_mode)))
        super().load_cert_chain(certfile, keyfile)


def test_without_memory_files_a_private_folder_is_used_and_removed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    RecordingContext.modes = []
    monkeypatch.setattr(tls, "_memory_files", lambda count: [])
    monkeypatch.setattr(tls, "server_context", lambda: RecordingContext(ssl.PROTOCOL_TLS_SERVER))
    loaded_context(GOOD, tmp_path / "scratch")
    assert RecordingContext.modes == [(0o700, 0o600, 0o600)]
    assert list((tmp_path / "scratch").iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="in-memory files are Linux's")
def test_with_memory_files_nothing_reaches_a_file_system(tmp_path: Path) -> None:
    context = ReloadableContext(tmp_path / "scratch")
    context.install(GOOD)
    assert not (tmp_path / "scratch").exists()


def test_the_log_names_the_certificate() -> None:
    described = describe(GOOD.cert_pem)
    cert = x509.load_pem_x509_certificate(GOOD.cert_pem)
    assert described == (f"subject CN=localhost, names [localhost, 127.0.0.1], serial {cert.serial_number:x}, "
                         f"valid until {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC, SHA-256 {fingerprint(cert)}")
    assert len(fingerprint(cert)) == 32 * 3 - 1
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    expired = new_serving_cert(CA, ["localhost"], days=1, now=past)
    assert ", EXPIRED valid until 2020-01-02 " in describe(expired.cert_pem)
    assert describe(b"junk").startswith("an unreadable certificate (")


def test_a_secret_whose_key_is_another_certificates_is_renewed() -> None:
    assert renewal_reason(KeyPair(GOOD.cert_pem, OTHER.key_pem), CA, ["localhost"]) == \
        "the key is not the certificate's"
    assert renewal_reason(GOOD, CA, ["localhost"]) is None


def start_operator_with(pair: KeyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """``cardquota operator --cert-dir`` with ``pair`` mounted: its error output and exit code."""
    from cardquota.cli.main import run as cli

    (tmp_path / "tls").mkdir()
    (tmp_path / "tls" / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls" / "tls.key").write_bytes(pair.key_pem)
    from kubernetes.config import kube_config

    kubeconfig = write_kubeconfig(tmp_path, "https://127.0.0.1:9")  # never reached
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)  # read from KUBECONFIG at import
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    out, err = io.StringIO(), io.StringIO()
    code = cli("cardquota", ["operator", "--port", "0", "--metrics-port", "0", "--host", "127.0.0.1",
                             "--cert-dir", str(tmp_path / "tls")], stdout=out, stderr=err)
    return err.getvalue(), code


def test_an_unusable_mounted_pair_at_start_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    err, code = start_operator_with(KeyPair(OTHER.cert_pem, GOOD.key_pem), tmp_path, monkeypatch)
    assert code == 2
    assert err == ("cardquota: error: --cert-dir: the serving certificate cannot be served: the key is not the "
                   "certificate's\n")


@pytest.mark.parametrize(("pair", "reason"), UNREADABLE_IN_PART)
def test_a_certificate_cryptography_cannot_read_whole_is_refused_and_the_served_one_stays(
        pair: KeyPair, reason: str, caplog: pytest.LogCaptureFixture) -> None:
    """OpenSSL loads it (so it used to be served, and the first log line describing it raised); it is refused before
    it is served, like a mismatched pair, with one line saying why."""
    assert openssl_loads(pair)
    expected = f"the certificate has a field or extension cryptography cannot read ({reason}): issue it again"
    with pytest.raises(UnusablePair) as refused:
        checked_certificate(pair)
    assert str(refused.value) == expected
    with pytest.raises(UnusablePair, match="cannot read"):
        loaded_context(pair)
    rejections: list[None] = []
    context = ReloadableContext(on_rejected=lambda: rejections.append(None))
    context.install(GOOD, "the first")
    caplog.set_level(logging.INFO)
    assert context.reload(pair, "the mount") is False
    assert context.loaded == GOOD
    assert len(rejections) == 1
    assert caplog.records[-1].getMessage() == (f"certificate from the mount rejected ({expected}); still serving "
                                               f"{describe(GOOD.cert_pem)}")
    assert context.reload(OTHER, "the mount") is True  # the next good pair is served
    assert len(rejections) == 1


@pytest.mark.parametrize(("pair", "reason"), UNREADABLE_IN_PART)
def test_describe_never_raises(pair: KeyPair, reason: str) -> None:
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    assert describe(pair.cert_pem) == (f"a certificate cryptography cannot read whole ({reason}), "
                                       f"SHA-256 {fingerprint(cert)}")


@pytest.mark.parametrize(("pair", "reason"), UNREADABLE_IN_PART)
def test_a_secret_holding_such_a_certificate_is_renewed(pair: KeyPair, reason: str) -> None:
    assert renewal_reason(pair, CA, ["localhost"]) == (f"the certificate has a field or extension cryptography "
                                                       f"cannot read ({reason}): issue it again")


@pytest.mark.parametrize(("pair", "reason"), UNREADABLE_IN_PART)
def test_such_a_mounted_pair_at_start_is_one_line(pair: KeyPair, reason: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """No pair was served before it, so the operator stops, as for a mismatched pair, with one line."""
    err, code = start_operator_with(pair, tmp_path, monkeypatch)
    assert code == 2
    assert err == (f"cardquota: error: --cert-dir: the serving certificate cannot be served: the certificate has a "
                   f"field or extension cryptography cannot read ({reason}): issue it again\n")
