"""Serving certificates OpenSSL loads and ``cryptography`` cannot read whole, made here with ``cryptography``.

* :func:`five_byte_ip_pair`: a subjectAltName holding an iPAddress of 5 bytes (RFC 5280 §4.2.1.6 allows 4 or 16,
  8 or 32 in name constraints), written as an ``UnrecognizedExtension`` under the subjectAltName OID, whose value
  the builder writes as given.
* :func:`duplicate_extension_pair`: one private, non-critical extension twice (RFC 5280 §4.2: "A certificate MUST
  NOT include more than one instance of a particular extension"). OpenSSL 3.0 refuses a repeated extension it knows
  (a second subjectAltName or extendedKeyUsage: ``X509V3: INVALID_CERTIFICATE``) but loads a repeated one it does
  not know; ``cryptography`` raises ``x509.DuplicateExtension`` for either. The builder refuses a second extension
  with the same OID, so the second is written under a sibling OID of the same length, that OID is changed in the
  signed part, and the signed part is signed again with the CA's key and wrapped as a Certificate (RFC 5280 §4.1:
  SEQUENCE of tbsCertificate, signatureAlgorithm, signatureValue).

Either is a serving pair signed by the CA given, or, without one, a CA of its own: self-signed, basicConstraints
``CA:TRUE``, its key the certificate's (what the TLS Secret holds under ``ca.crt``/``ca.key``).
"""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtensionOID, NameOID

from cardquota.runtime.tls import CA_DAYS, KeyPair

ECDSA_WITH_SHA256 = bytes.fromhex("300a06082a8648ce3d040302")
"""AlgorithmIdentifier ecdsa-with-SHA256 (1.2.840.10045.4.3.2, no parameters: RFC 5758 §3.2), DER."""
PRIVATE_EXTENSION, SIBLING_EXTENSION = "1.3.6.1.4.1.32473.1", "1.3.6.1.4.1.32473.2"
"""Under the private enterprise number RFC 5612 reserves for documentation."""


def _der(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


def _signed(ca: KeyPair | None, extensions: list[x509.ExtensionType]) -> tuple[
        x509.Certificate, ec.EllipticCurvePrivateKey, ec.EllipticCurvePrivateKey]:
    """A certificate with ``extensions`` (none critical), its key and the key that signed it: ``ca``'s, or its own
    when ``ca`` is None (a self-signed CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost" if ca else "malformed-ca")])
    if ca is None:
        issuer, ca_key = subject, key
        extensions = [x509.BasicConstraints(ca=True, path_length=0), *extensions]
    else:
        issuer = x509.load_pem_x509_certificate(ca.cert_pem).subject
        loaded = serialization.load_pem_private_key(ca.key_pem, password=None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        ca_key = loaded
    now, day = datetime.datetime.now(datetime.UTC), datetime.timedelta(days=1)
    days = 1 if ca else CA_DAYS  # a CA months from expiry: not one the operator renews for its age
    builder = (x509.CertificateBuilder()
               .subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - day).not_valid_after(now + days * day))
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key, ca_key


def _pair(cert_der: bytes, key: ec.EllipticCurvePrivateKey) -> KeyPair:
    cert = x509.load_der_x509_certificate(cert_der)
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM),
                   key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()))


def five_byte_ip_pair(ca: KeyPair | None = None) -> KeyPair:
    """A pair for ``localhost`` signed by ``ca`` (or a self-signed CA) whose subjectAltName also holds the iPAddress
    ``01 02 03 04 05``."""
    names = _der(0x30, _der(0x82, b"localhost") + _der(0x87, bytes([1, 2, 3, 4, 5])))  # [2] dNSName, [7] iPAddress
    cert, key, _ = _signed(ca, [x509.UnrecognizedExtension(ExtensionOID.SUBJECT_ALTERNATIVE_NAME, names)])
    return _pair(cert.public_bytes(serialization.Encoding.DER), key)


def well_formed_pair(ca: KeyPair) -> KeyPair:
    """A pair for ``localhost`` that ``cryptography`` reads whole, signed by ``ca``: by one of the CAs above too,
    which :func:`cardquota.runtime.tls.new_serving_cert` refuses to sign with."""
    cert, key, _ = _signed(ca, [x509.SubjectAlternativeName([x509.DNSName("localhost")])])
    return _pair(cert.public_bytes(serialization.Encoding.DER), key)


def _oid_der(dotted: str) -> bytes:
    """An OBJECT IDENTIFIER, DER (X.690 §8.19: the first two arcs in one byte, then base 128)."""
    arcs = [int(arc) for arc in dotted.split(".")]
    body = bytes([40 * arcs[0] + arcs[1]])
    for arc in arcs[2:]:
        digits = [arc & 0x7F]
        while arc := arc >> 7:
            digits.insert(0, 0x80 | (arc & 0x7F))
        body += bytes(digits)
    return _der(0x06, body)


def duplicate_extension_pair(ca: KeyPair | None = None) -> KeyPair:
    """A pair for ``localhost`` signed by ``ca`` (or a self-signed CA) with the extension :data:`PRIVATE_EXTENSION`
    twice."""
    null = _der(0x05, b"")
    cert, key, ca_key = _signed(ca, [x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                                     x509.UnrecognizedExtension(x509.ObjectIdentifier(PRIVATE_EXTENSION), null),
                                     x509.UnrecognizedExtension(x509.ObjectIdentifier(SIBLING_EXTENSION), null)])
    tbs = cert.tbs_certificate_bytes
    assert tbs.count(_oid_der(SIBLING_EXTENSION)) == 1
    tbs = tbs.replace(_oid_der(SIBLING_EXTENSION), _oid_der(PRIVATE_EXTENSION))
    signature = ca_key.sign(tbs, ec.ECDSA(hashes.SHA256()))
    return _pair(_der(0x30, tbs + ECDSA_WITH_SHA256 + _der(0x03, b"\x00" + signature)), key)


def openssl_loads(pair: KeyPair) -> bool:
    """Whether OpenSSL (``ssl.SSLContext.load_cert_chain``) takes the pair: what a server would serve."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as folder:
        cert_path, key_path = os.path.join(folder, "tls.crt"), os.path.join(folder, "tls.key")
        for path, data in ((cert_path, pair.cert_pem), (key_path, pair.key_pem)):
            with open(path, "wb") as file:
                file.write(data)
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError:
            return False
    return True
