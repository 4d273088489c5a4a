"""The webhook's certificates kept in a Secret: ensured at start, renewed before expiry, ``caBundle`` in sync.

Every replica runs this; they agree through the Secret: a write carries the resourceVersion it read, so when two
replicas race, the loser gets a conflict, re-reads, and uses what the winner wrote.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from cryptography import x509
from kubernetes import client

from cardquota.kube import CONFLICT, KubeError, patch_ca_bundle, read_namespaced, read_secret, write_secret
from cardquota.operator.settings import Settings
from cardquota.webhooks.tls import (
    KeyPair,
    ReloadableContext,
    new_ca,
    new_serving_cert,
    renewal_reason,
    service_dns_names,
)

log = logging.getLogger("cardquota.certificates")
SECRET_TYPE = "kubernetes.io/tls"
CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
PREVIOUS_CA_CERT = "ca-previous.crt"
CA_RENEW_BEFORE = datetime.timedelta(days=90)
CHECK_INTERVAL_SECONDS = 60.0
"""Renewal and the webhook configurations' caBundle are checked this often (a configuration applied again, or
applied after the operator started, gets its caBundle within a minute; reads only, unless something changed)."""
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


@dataclass(frozen=True)
class Certificates:
    ca: KeyPair
    serving: KeyPair
    previous_ca: bytes = b""
    """The CA certificate this one replaced, kept in the caBundle while it is valid, so replicas still serving a
    certificate it signed keep working until they reload."""

    def ca_bundle(self, now: datetime.datetime | None = None) -> bytes:
        bundle = self.ca.cert_pem
        if self.previous_ca and _still_valid(self.previous_ca, now):
            bundle += self.previous_ca
        return bundle


def plan(ca: KeyPair | None, serving: KeyPair | None, dns_names: list[str], previous_ca: bytes = b"",
         now: datetime.datetime | None = None) -> tuple[Certificates, str | None]:
    """What the Secret should hold, and why it changed (None when it did not)."""
    if ca is None or renewal_reason(ca, ca, [], now=now, renew_before=CA_RENEW_BEFORE) is not None:
        fresh_ca = new_ca(now=now)
        why = "no CA yet" if ca is None else "the CA is expiring or unreadable"
        retired = ca.cert_pem if ca is not None and _still_valid(ca.cert_pem, now) else b""
        return Certificates(fresh_ca, new_serving_cert(fresh_ca, dns_names, now=now), retired), why
    reason = "no serving certificate yet" if serving is None else renewal_reason(serving, ca, dns_names, now=now)
    if reason is not None:
        renewed = new_serving_cert(ca, dns_names, now=now)
        return Certificates(ca, renewed, previous_ca), f"serving certificate: {reason}"
    assert serving is not None
    return Certificates(ca, serving, previous_ca), None


def _deployment(api: client.ApiClient, settings: Settings) -> Mapping[str, Any] | None:
    """The operator's own Deployment, to own the Secret; None when it cannot be read (running outside it)."""
    try:
        found = read_namespaced(api, "deployment", settings.namespace, settings.deployment)
    except KubeError as error:
        log.info("the TLS Secret will have no owner: Deployment %s/%s cannot be read (%s)", settings.namespace,
                 settings.deployment, error)
        return None
    if found is None or not (found.get("metadata") or {}).get("uid"):
        log.info("the TLS Secret will have no owner: no Deployment %s/%s", settings.namespace, settings.deployment)
        return None
    return found


def _still_valid(cert_pem: bytes, now: datetime.datetime | None) -> bool:
    try:
        expiry = x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc
    except ValueError:
        return False
    return expiry > (now or datetime.datetime.now(datetime.UTC))


def decode(secret: Mapping[str, Any] | None) -> tuple[KeyPair | None, KeyPair | None, bytes]:
    """(CA, serving certificate, previous CA certificate) from the Secret; what cannot be read is missing."""
    data = (secret or {}).get("data") or {}

    def pair(cert: str, key: str) -> KeyPair | None:
        if cert not in data or key not in data:
            return None
        try:
            return KeyPair(base64.b64decode(data[cert]), base64.b64decode(data[key]))
        except ValueError:
            return None

    try:
        previous = base64.b64decode(data.get(PREVIOUS_CA_CERT, ""))
    except ValueError:
        previous = b""
    return pair(CA_CERT, CA_KEY), pair(TLS_CERT, TLS_KEY), previous


def secret_body(settings: Settings, certificates: Certificates, existing: Mapping[str, Any] | None,
                owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Secret to write; a new one is owned by the operator's Deployment (``owner``), so uninstalling removes
    it (an existing Secret keeps the owners it has)."""
    metadata: dict[str, Any] = {"name": settings.tls_secret, "namespace": settings.namespace,
                                "labels": {"app.kubernetes.io/name": "cardquota",
                                           "app.kubernetes.io/component": "webhook-tls"}}
    if existing is not None:
        metadata["resourceVersion"] = (existing.get("metadata") or {}).get("resourceVersion")
    elif owner is not None:
        owner_metadata = owner.get("metadata") or {}
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": owner_metadata.get("name"), "uid": owner_metadata.get("uid")}]
    encoded = {name: base64.b64encode(value).decode("ascii") for name, value in (
        (CA_CERT, certificates.ca.cert_pem), (CA_KEY, certificates.ca.key_pem),
        (TLS_CERT, certificates.serving.cert_pem), (TLS_KEY, certificates.serving.key_pem),
        (PREVIOUS_CA_CERT, certificates.previous_ca)) if value}
    return {"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE, "metadata": metadata, "data": encoded}


def ensure_certificates(api: client.ApiClient, settings: Settings,
                        now: datetime.datetime | None = None) -> Certificates:
    """Read the Secret, issue what is missing or expiring, write it back, and sync the webhooks' caBundle."""
    names = service_dns_names(settings.service, settings.namespace)
    for _ in range(3):
        existing = read_secret(api, settings.namespace, settings.tls_secret)
        ca, serving, previous_ca = decode(existing)
        certificates, reason = plan(ca, serving, names, previous_ca, now=now)
        if reason is None:
            break
        try:
            owner = _deployment(api, settings) if existing is None else None
            write_secret(api, secret_body(settings, certificates, existing, owner), create=existing is None)
            log.info("TLS Secret %s/%s written: %s", settings.namespace, settings.tls_secret, reason)
            break
        except KubeError as error:
            if error.status != CONFLICT:
                raise
            log.info("TLS Secret %s/%s changed meanwhile (another replica); reading it again",
                     settings.namespace, settings.tls_secret)
    else:
        raise KubeError(f"could not settle the TLS Secret {settings.namespace}/{settings.tls_secret}")
    bundle = base64.b64encode(certificates.ca_bundle(now)).decode("ascii")
    for kind, name in zip(WEBHOOK_KINDS, settings.webhook_configurations, strict=True):
        if not patch_ca_bundle(api, kind, name, bundle):
            log.warning("%s %s not found: its caBundle was not set (install the manifests)", kind, name)
    return certificates


async def keep_certificates(api: client.ApiClient, settings: Settings, tls: ReloadableContext,
                            interval: float = CHECK_INTERVAL_SECONDS) -> None:
    """Renew before expiry and reload the live SSL context in place (no restart, no failed request)."""
    while True:
        await asyncio.sleep(interval)
        try:
            certificates = await asyncio.to_thread(ensure_certificates, api, settings)
        except (KubeError, OSError, urllib3.exceptions.HTTPError) as error:
            log.warning("certificate check failed, will retry: %s", error)
            continue
        if certificates.serving != tls.loaded:
            tls.install(certificates.serving)
            log.info("serving certificate reloaded from Secret %s/%s", settings.namespace, settings.tls_secret)
