"""Certificates for the admission server, made with ``cryptography``: a CA, a serving certificate for the
Service's DNS names, when to renew, a mounted pair read from one version of its folder, and an SSL context that
reloads in place (rotation without a restart: new handshakes get the new certificate once it has loaded, connections
in flight keep theirs, no request fails, and a pair that does not load leaves the previous one serving)."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import logging
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVING_DAYS = 365
RENEW_BEFORE = datetime.timedelta(days=30)
log = logging.getLogger("cardquota.tls")


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    def __repr__(self) -> str:  # never print a private key, even by accident
        return f"KeyPair(cert_pem=<{len(self.cert_pem)} bytes>, key_pem=<redacted>)"


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use for the webhook Service."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def new_ca(common_name: str = "cardquota-webhook-ca", *, days: int = CA_DAYS,
           now: datetime.datetime | None = None) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start = _now(now)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start - datetime.timedelta(minutes=5)).not_valid_after(start + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_serving_cert(ca: KeyPair, dns_names: Sequence[str], *, ip_addresses: Sequence[str] = (),
                     days: int = SERVING_DAYS, now: datetime.datetime | None = None) -> KeyPair:
    """A serving certificate for ``dns_names`` (and ``ip_addresses``) signed by ``ca``; :class:`UnusablePair` when
    ``ca`` cannot sign (see :func:`checked_authority`)."""
    ca_cert = checked_authority(ca)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)  # checked_authority: the certificate's key, an EC one
    key = ec.generate_private_key(ec.SECP256R1())
    start = _now(now)
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(address)) for address in ip_addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start - datetime.timedelta(minutes=5)).not_valid_after(start + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def renewal_reason(serving: KeyPair, ca: KeyPair, dns_names: Sequence[str], *,
                   now: datetime.datetime | None = None, renew_before: datetime.timedelta = RENEW_BEFORE) -> str | None:
    """Why the serving certificate must be replaced (expiring, wrong names, not issued by the CA, unreadable, its
    key another certificate's), or None when it is good."""
    try:
        cert = checked_certificate(serving)
    except UnusablePair as error:
        return str(error)
    try:
        ca_cert = checked_authority(ca)
    except UnusablePair as error:
        return f"the CA cannot sign ({error.reason})"
    if cert.not_valid_after_utc - renew_before <= _now(now):
        return f"expires {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    try:
        names = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                    .get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        names = set()
    if not set(dns_names) <= names:
        return f"names {sorted(names)} do not cover {sorted(dns_names)}"
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, Exception) as error:  # InvalidSignature has no common base beyond Exception
        return f"not issued by the current CA ({type(error).__name__})"
    return None


class UnusablePair(ValueError):
    """A certificate and key that cannot be served (or sign) together: unreadable (in part), or the key is not the
    certificate's. The message is one line: why (:attr:`reason`), and what to do (:attr:`fix`, where a person has
    something to do: the operator replaces a CA of its own Secret itself, so it logs the reason alone)."""

    def __init__(self, reason: str, fix: str = "") -> None:
        super().__init__(f"{reason}: {fix}" if fix else reason)
        self.reason = reason
        self.fix = fix


def checked_certificate(pair: KeyPair) -> x509.Certificate:
    """``pair``'s certificate once ``cryptography`` has read all of it (:func:`whole_certificate`) and the key, and
    found the key is the certificate's; else :class:`UnusablePair` saying why. Only the first certificate of
    ``tls.crt`` is read (the one served, and the only one this module reads); a chain after it is left to
    OpenSSL."""
    cert = whole_certificate(pair.cert_pem)
    try:
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
    except Exception as error:  # ValueError, TypeError (encrypted), UnsupportedAlgorithm
        raise UnusablePair(f"the key cannot be read ({_reason(error)})", "mount an unencrypted PEM key") from None
    if cert.public_key() != key.public_key():
        raise UnusablePair("the key is not the certificate's")
    return cert


def checked_authority(ca: KeyPair) -> x509.Certificate:
    """The CA's certificate once :func:`checked_certificate` has read it whole with its key, and found that key one
    :func:`new_serving_cert` can sign with (elliptic-curve); else :class:`UnusablePair` saying why.

    A CA certificate ``cryptography`` cannot read whole is one the API server cannot read either: Go's
    ``crypto/x509`` (``parser.go``, ``parseCertificate`` and ``parseSANExtension``, Go 1.21 on) refuses a repeated
    extension and an iPAddress name of other than 4 or 16 bytes, and ``CertPool.AppendCertsFromPEM``
    (``cert_pool.go``), which builds the trust from a webhook's ``caBundle``, skips a certificate it cannot parse.
    So no handshake could succeed with such a CA, nor with one whose key is another certificate's (what it signs
    does not verify against it)."""
    cert = checked_certificate(ca)
    if not isinstance(cert.public_key(), ec.EllipticCurvePublicKey):
        kind = type(cert.public_key()).__name__.removesuffix("PublicKey")
        raise UnusablePair(f"the key is {kind}, not elliptic-curve (the only kind this operator signs with)")
    return cert


def whole_certificate(cert_pem: bytes) -> x509.Certificate:
    """The first certificate in ``cert_pem`` once ``cryptography`` has read all of it (:func:`read_whole`); else
    :class:`UnusablePair` saying why."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except Exception as error:  # ValueError for bad PEM or DER; anything else cryptography raises is as bad
        raise UnusablePair(f"the certificate cannot be read ({_reason(error)})", "mount a PEM certificate") from None
    return read_whole(cert)


def read_whole(cert: x509.Certificate) -> x509.Certificate:
    """``cert`` once ``cryptography`` has read all of it — every field :func:`describe` and :func:`renewal_reason`
    read, every extension, the public key — else :class:`UnusablePair` saying why.

    OpenSSL serves certificates that ``cryptography`` cannot read whole, and ``cryptography`` parses extensions only
    when first asked (cryptography 51.0.1, ``src/rust/src/x509/common.rs``, ``parse_and_cache_extensions``): a
    repeated extension raises ``x509.DuplicateExtension`` there, and an iPAddress name of a length other than 4, 8,
    16 or 32 bytes a ``ValueError`` from ``parse_general_name``/``create_ip_network``. Served, such a certificate
    made the first :func:`describe` of it raise; checked here, before it is served (or signs, or is reported on),
    it is refused like a mismatched pair."""
    try:
        _summary(cert)
        for _ in cert.extensions:  # each extension is parsed here, in full
            pass
        cert.public_key()
    except Exception as error:  # ValueError, x509.DuplicateExtension, UnsupportedGeneralNameType, ...
        raise UnusablePair(f"the certificate has a field or extension cryptography cannot read ({_reason(error)})",
                           "issue it again") from None
    return cert


def server_context() -> ssl.SSLContext:
    """A server SSL context with the settings every serving context shares (TLS 1.2 at least)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def loaded_context(pair: KeyPair, scratch: Path | None = None) -> ssl.SSLContext:
    """A fresh :func:`server_context` serving ``pair``, or :class:`UnusablePair` saying why it cannot: first
    :func:`checked_certificate`, then OpenSSL's own loading.

    ``ssl`` loads a certificate chain from files only (``SSLContext.load_cert_chain``), so the pair is handed to it as
    in-memory files (Linux ``memfd_create``, opened through ``/proc/self/fd``: nothing reaches a file system), or,
    where those are missing, as files in a private folder (mode 0700, the files 0600) made in ``scratch`` (default:
    the system's temporary folder) and removed as soon as they are loaded. Never in the folder the pair came from."""
    checked_certificate(pair)
    context = server_context()
    try:
        with _pair_files(pair, scratch) as (cert_path, key_path):
            context.load_cert_chain(cert_path, key_path)
    except ssl.SSLError as error:
        raise UnusablePair(_ssl_reason(error)) from None
    return context


class ReloadableContext:
    """The SSL context a server listens with, whose certificate can be replaced while it serves.

    The listening context (:attr:`context`) never holds a certificate itself and is never changed: each pair is
    loaded into a fresh context first (:func:`loaded_context`), and only one that loaded is handed to new
    handshakes, by the listening context's ``sni_callback``, which sets the connection's ``context``. Python's ssl
    documentation (``SSLContext.sni_callback``) names replacing ``SSLSocket.context`` with another ``SSLContext`` as
    the callback's typical use (asyncio hands it the ``SSLObject``, whose ``context`` is set the same way). It runs
    for every ClientHello, SNI or not: OpenSSL (1.1.1 on, which Python 3.10 on requires) calls the servername
    callback from ``final_server_name`` in ``ssl/statem/extensions.c`` whether or not the extension was sent, and
    CPython's ``_servername_callback`` (``Modules/_ssl.c``) passes ``server_name=None`` when there is none; a
    kubelet probing the pod's IP sends none. So a pair that does not load (a certificate with another key, a file
    half-written) is refused while the previous one keeps serving, and connections in flight keep the context they
    were handed. Settings for every handshake belong in :func:`server_context`, which makes both kinds of context.
    ``scratch`` is where :func:`loaded_context` may put its short-lived files (nothing stays there);
    ``on_rejected`` is told each time :meth:`reload` refuses a pair (a metric counts them)."""

    def __init__(self, scratch: Path | None = None, on_rejected: Callable[[], None] | None = None) -> None:
        self.scratch = scratch
        self.on_rejected = on_rejected
        self.context = server_context()
        self.context.sni_callback = self._hand_over
        self._serving: ssl.SSLContext | None = None
        self.loaded: KeyPair | None = None

    def install(self, pair: KeyPair, source: str = "") -> None:
        """Serve ``pair`` to new handshakes once it has loaded into a fresh context; :class:`UnusablePair` when it
        cannot, the pair before still serving. Logs what is served from now on (``source`` says where it came
        from)."""
        self._serving = loaded_context(pair, self.scratch)
        self.loaded = pair
        log.info("serving certificate%s: %s", f" from {source}" if source else "", describe(pair.cert_pem))

    def reload(self, pair: KeyPair, source: str) -> bool:
        """:meth:`install` ``pair`` unless it is already served; whether it now is. A pair that cannot be served is
        logged as rejected, with the certificate that keeps serving."""
        if pair == self.loaded:
            return False
        try:
            self.install(pair, source)
        except UnusablePair as error:
            log.warning("certificate from %s rejected (%s); still serving %s", source, error, self.served())
            if self.on_rejected is not None:
                self.on_rejected()
            return False
        return True

    def served(self) -> str:
        """:func:`describe` of the certificate served, for a log line ("nothing" before the first)."""
        return describe(self.loaded.cert_pem) if self.loaded is not None else "nothing"

    def _hand_over(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                   listening: ssl.SSLContext) -> None:
        if self._serving is not None:
            connection.context = self._serving


def describe(cert_pem: bytes) -> str:
    """What a log needs to tell which certificate is served: subject, names, serial, validity, SHA-256
    fingerprint (as ``openssl x509 -fingerprint -sha256`` prints it). Never raises: a certificate that cannot be
    read (in part) is said to be so."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except Exception as error:  # a log line about a certificate must never fail
        return f"an unreadable certificate ({_reason(error)})"
    try:
        return _summary(cert)
    except Exception as error:  # the fingerprint is read from the DER alone
        return f"a certificate cryptography cannot read whole ({_reason(error)}), SHA-256 {fingerprint(cert)}"


def _summary(cert: x509.Certificate) -> str:
    """:func:`describe`'s line, raising what ``cryptography`` raises on a field it cannot read."""
    try:
        alternative = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [*alternative.get_values_for_type(x509.DNSName),
                 *(str(address) for address in alternative.get_values_for_type(x509.IPAddress))]
    except x509.ExtensionNotFound:
        names = []
    now = _now(None)
    validity = ("EXPIRED " if cert.not_valid_after_utc <= now else
                "NOT YET VALID " if cert.not_valid_before_utc > now else "")
    return (f"subject {cert.subject.rfc4514_string() or '(empty)'}, names [{', '.join(names)}], "
            f"serial {cert.serial_number:x}, {validity}valid until {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC, "
            f"SHA-256 {fingerprint(cert)}")


def fingerprint(cert: x509.Certificate) -> str:
    """A certificate's SHA-256 fingerprint, as ``openssl x509 -fingerprint -sha256`` prints it."""
    return cert.fingerprint(hashes.SHA256()).hex(":").upper()


DATA_LINK = "..data"
"""The symlink a Kubernetes atomic-writer volume (Secret, ConfigMap, projected) points at its current version."""
READ_ATTEMPTS = 5
"""Reads of a mounted pair that changes while it is read, before giving up until the next check."""


class PairChanging(OSError):
    """The mounted files kept changing while they were read."""


def read_mounted_pair(directory: Path, read: Callable[[Path], bytes] = Path.read_bytes) -> KeyPair:
    """``tls.crt`` and ``tls.key`` in ``directory``, both from one version of it.

    A Kubernetes Secret (or ConfigMap, projected) volume is written by the kubelet's atomic writer
    (kubernetes ``pkg/volume/util/atomic_writer.go``, ``AtomicWriter.Write``): each version in a new hidden
    timestamped folder, the ``..data`` symlink renamed over to point at it, the visible ``tls.crt``/``tls.key``
    symlinks into ``..data``, the previous version's folder removed afterwards. Read through the visible names, the
    certificate and the key can come from two versions; here ``..data`` is resolved once and both files are read
    from that version's folder (read again from the next version if it was removed meanwhile). A folder without
    ``..data`` is read twice, and again until both reads agree. ``read`` reads one file (tests interleave writes).
    A file missing raises FileNotFoundError; files that keep changing, :class:`PairChanging`."""
    for _ in range(READ_ATTEMPTS):
        try:
            version = os.readlink(directory / DATA_LINK)
        except OSError:  # no ..data, or not a symlink: a plain folder
            version = ""
        if version:
            folder = directory / version
            try:
                return KeyPair(read(folder / "tls.crt"), read(folder / "tls.key"))
            except FileNotFoundError:
                if _same_link(directory / DATA_LINK, version):
                    raise  # the current version lacks the file: not a race
                continue  # replaced (and removed) while read: read the new version
        first = KeyPair(read(directory / "tls.crt"), read(directory / "tls.key"))
        if KeyPair(read(directory / "tls.crt"), read(directory / "tls.key")) == first:
            return first
    raise PairChanging(f"tls.crt and tls.key in {directory} changed on each of {READ_ATTEMPTS} reads")


def _same_link(link: Path, version: str) -> bool:
    try:
        return os.readlink(link) == version
    except OSError:
        return False


@contextlib.contextmanager
def _pair_files(pair: KeyPair, scratch: Path | None) -> Iterator[tuple[str, str]]:
    """Paths ``load_cert_chain`` can open holding the pair's certificate and key, for the ``with`` block only."""
    descriptors = _memory_files(2)
    if descriptors:
        try:
            for descriptor, data in zip(descriptors, (pair.cert_pem, pair.key_pem), strict=True):
                _write_all(descriptor, data)
            yield f"/proc/self/fd/{descriptors[0]}", f"/proc/self/fd/{descriptors[1]}"
        finally:
            for descriptor in descriptors:
                os.close(descriptor)
        return
    if scratch is not None:
        scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cardquota-tls-", dir=scratch) as folder:  # mode 0700
        paths = [os.path.join(folder, name) for name in ("tls.crt", "tls.key")]
        for path, data in zip(paths, (pair.cert_pem, pair.key_pem), strict=True):
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file:
                file.write(data)
        yield paths[0], paths[1]


def _memory_files(count: int) -> list[int]:
    """``count`` anonymous in-memory files, or none where the system has none (not Linux, no /proc, a sandbox
    refusing ``memfd_create``)."""
    descriptors: list[int] = []
    try:
        for _ in range(count):
            descriptors.append(os.memfd_create("cardquota-tls", os.MFD_CLOEXEC))
        if os.path.exists(f"/proc/self/fd/{descriptors[0]}"):
            return descriptors
    except (AttributeError, OSError):
        pass
    for descriptor in descriptors:
        os.close(descriptor)
    return []


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view):]


def _reason(error: BaseException) -> str:
    """An exception as one line: its type (``ValueError`` alone says little) and its message."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _ssl_reason(error: ssl.SSLError) -> str:
    if error.reason == "KEY_VALUES_MISMATCH":
        return "the key is not the certificate's"
    return f"cannot be loaded: {error.reason or error.strerror or error}"


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _now(now: datetime.datetime | None) -> datetime.datetime:
    return now if now is not None else datetime.datetime.now(datetime.UTC)
