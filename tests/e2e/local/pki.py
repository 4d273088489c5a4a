"""The local control plane's keys and certificates: one CA, the API server's serving certificate, client
certificates (the administrator, the controller manager, the host kubelet), and the service-account signing key.

ECDSA P-256 throughout (fast to make; every component accepts it). Valid for a day: a run lasts minutes.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=1)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      *[x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]])


@dataclass(frozen=True)
class Authority:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @classmethod
    def create(cls, common_name: str) -> Authority:
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        name = _name(common_name)
        certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                       .serial_number(x509.random_serial_number())
                       .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
                       .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                       .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                    content_commitment=False, key_encipherment=False,
                                                    data_encipherment=False, key_agreement=False,
                                                    encipher_only=False, decipher_only=False), critical=True)
                       .sign(key, hashes.SHA256()))
        return cls(key, certificate)

    @property
    def pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, *, organizations: tuple[str, ...] = (), dns: tuple[str, ...] = (),
              ips: tuple[str, ...] = (), server: bool = False) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) for a client, or a server with these names."""
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (x509.CertificateBuilder().subject_name(_name(common_name, organizations))
                   .issuer_name(self.certificate.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
        if dns or ips:
            names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
            names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        return certificate.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def write(folder: Path, name: str, certificate: bytes, key: bytes) -> tuple[Path, Path]:
    """``<name>.crt`` and ``<name>.key`` in ``folder`` (the key readable by its owner only)."""
    crt, pem = folder / f"{name}.crt", folder / f"{name}.key"
    crt.write_bytes(certificate)
    pem.write_bytes(key)
    pem.chmod(0o600)
    return crt, pem


def service_account_keys(folder: Path) -> tuple[Path, Path]:
    """The key pair the API server signs service-account tokens with (private) and checks them with (public)."""
    key = _key()
    private, public = folder / "sa.key", folder / "sa.pub"
    private.write_bytes(_pem_key(key))
    private.chmod(0o600)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public
