"""Certificates for the admission server, made with ``cryptography``: a CA, a serving certificate for the
Service's DNS names, when to renew, and an SSL context that reloads in place (rotation without a restart: new
handshakes get the new certificate, connections in flight keep theirs, no request fails)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVING_DAYS = 365
RENEW_BEFORE = datetime.timedelta(days=30)


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
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key")
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
    """Why the serving certificate must be replaced (expiring, wrong names, not issued by the CA, unreadable),
    or None when it is good."""
    try:
        cert = x509.load_pem_x509_certificate(serving.cert_pem)
        ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
        serialization.load_pem_private_key(serving.key_pem, password=None)
    except ValueError as error:
        return f"unreadable ({error})"
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


class ReloadableContext:
    """A server SSL context whose certificate can be replaced while the server runs."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.loaded: KeyPair | None = None

    def install(self, pair: KeyPair) -> None:
        """Write the pair (the key readable by this user only) and load it into the live context."""
        self.directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = self.directory / "tls.crt", self.directory / "tls.key"
        key_fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(key_fd, "wb") as key_file:
            key_file.write(pair.key_pem)
        cert_path.write_bytes(pair.cert_pem)
        self.context.load_cert_chain(cert_path, key_path)
        self.loaded = pair


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _now(now: datetime.datetime | None) -> datetime.datetime:
    return now if now is not None else datetime.datetime.now(datetime.UTC)
