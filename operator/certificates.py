"""The webhook's certificates kept in a Secret: ensured at start, renewed before expiry, ``caBundle`` in sync.

Every replica runs this; they agree through the Secret: a write carries the resourceVersion it read, so when two
replicas race, the loser gets a conflict, re-reads, and uses what the winner wrote. Everything a rotation needs is in
the Secret, so a replica started (or restarted) mid-rotation picks it up where it stands.

**Leaf renewal** (the serving certificate expiring, with the wrong names, or not issued by the CA) keeps the CA: the
caBundle does not change, the new certificate is loaded at once.

**CA renewal** (the CA within :data:`CA_RENEW_BEFORE` of expiry) never serves a certificate the API server cannot
verify yet. The API server reads the caBundle through an informer, so it sees a change some time after the write
(seconds, under load); a certificate signed by a CA it has not seen yet fails the handshake. So, in two phases:

1. *A new CA joins the caBundle.* The Secret keeps the CA and the serving certificate it signed, and holds the new
   CA beside them (``ca-next.crt``/``ca-next.key``); the caBundle becomes old CA + new CA. Once every webhook
   configuration carries that bundle, the time is written in the Secret (:data:`BUNDLE_SINCE`).
2. *The serving certificate switches*, one grace period (``Settings.cert_grace_period``) after that time: a
   certificate signed by the new CA is issued, the new CA becomes the CA and the old one's certificate is kept as
   ``ca-previous.crt``, so the caBundle is the same old + new (no write). Replicas load the new certificate at their
   next check (they wake for it), those that have not yet still serve one the old CA signed, which stays trusted.
3. *The old CA leaves the caBundle* one grace period plus one check interval after the switch
   (:data:`SWITCHED_AT`), when every replica serves the new certificate; an API server still holding the old + new
   bundle meanwhile trusts it too.

A CA that is missing, cannot sign (unreadable, in part or whole, or its key another certificate's: see
:func:`~cardquota.runtime.tls.checked_authority`) or is already expired is replaced at once: no handshake can succeed
with it anyway. Replacing one that was there is logged as a warning and counted in
``cardquota_certificate_reload_failures_total{reason="ca"}``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from cryptography import x509
from kubernetes import client

from cardquota.kube import (
    BundlePatch,
    Conflict,
    KubeError,
    patch_ca_bundle,
    read_namespaced,
    read_secret,
    write_secret,
)
from cardquota.operator.settings import Settings
from cardquota.runtime.metrics import CERTIFICATE_RELOAD_FAILURES
from cardquota.runtime.tls import (
    KeyPair,
    ReloadableContext,
    UnusablePair,
    checked_authority,
    new_ca,
    new_serving_cert,
    renewal_reason,
    service_dns_names,
    whole_certificate,
)

log = logging.getLogger("cardquota.certificates")
SECRET_TYPE = "kubernetes.io/tls"
CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
PREVIOUS_CA_CERT = "ca-previous.crt"
NEXT_CA_CERT, NEXT_CA_KEY = "ca-next.crt", "ca-next.key"
ROTATION_KEYS = (PREVIOUS_CA_CERT, NEXT_CA_CERT, NEXT_CA_KEY)
"""Secret keys present only during a CA rotation (removed from the Secret when it ends)."""
BUNDLE_SINCE = "cardquota.io/ca-bundle-since"
"""Secret annotation, while a new CA waits: since when every webhook configuration has carried the caBundle that
holds it (RFC 3339)."""
SWITCHED_AT = "cardquota.io/ca-switched-at"
"""Secret annotation, while the previous CA is kept: when the serving certificate switched to the new CA."""
CA_RENEW_BEFORE = datetime.timedelta(days=90)
CHECK_INTERVAL_SECONDS = 60.0
"""Renewal and the webhook configurations' caBundle are checked this often (a configuration applied again, or
applied after the operator started, gets its caBundle within a minute; reads only, unless something changed)."""
SHORTEST_WAIT_SECONDS = 1.0
"""A check due sooner than this (a rotation step due now) waits this long at least (or the check interval, if
shorter)."""
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
ATTEMPTS = 5
"""Reads of the Secret when writes conflict (another replica wrote in between) before giving up until the next
check."""


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class Certificates:
    ca: KeyPair
    """The CA that signed ``serving``."""
    serving: KeyPair
    previous_ca: bytes = b""
    """The CA certificate ``ca`` replaced, kept in the caBundle after the switch until every replica serves a
    certificate ``ca`` signed (see :data:`SWITCHED_AT`)."""
    next_ca: KeyPair | None = None
    """A renewed CA in the caBundle, not yet signing the serving certificate (phase 1 of a CA rotation)."""
    bundle_since: datetime.datetime | None = None
    """While ``next_ca`` waits: since when every webhook configuration has carried :meth:`ca_bundle`."""
    switched_at: datetime.datetime | None = None
    """While ``previous_ca`` is kept: when the serving certificate switched to ``ca``."""

    def ca_bundle(self, now: datetime.datetime | None = None) -> bytes:
        """The CAs the API server must trust, oldest first: the previous CA while it is kept (and valid), the CA,
        the next CA while it waits. The switch turns (CA, next) into (previous, CA): the same bytes."""
        return _bundle(self.previous_ca, self.ca.cert_pem, self.next_ca, now)

    def next_step(self, grace: datetime.timedelta, retire_after: datetime.timedelta) -> datetime.datetime | None:
        """When the rotation under way takes its next step (None when none is under way or its time is unknown)."""
        if self.next_ca is not None:
            return self.bundle_since + grace if self.bundle_since is not None else None
        if self.previous_ca and self.switched_at is not None:
            return self.switched_at + retire_after
        return None


@dataclass(frozen=True)
class Stored:
    """What the TLS Secret holds; a part missing or unreadable is None (b"" for the previous CA)."""

    ca: KeyPair | None = None
    serving: KeyPair | None = None
    previous_ca: bytes = b""
    next_ca: KeyPair | None = None
    bundle_since: datetime.datetime | None = None
    switched_at: datetime.datetime | None = None


def _bundle(previous_ca: bytes, ca_cert: bytes, next_ca: KeyPair | None, now: datetime.datetime | None) -> bytes:
    previous = previous_ca if previous_ca and _still_valid(previous_ca, now) else b""
    return previous + ca_cert + (next_ca.cert_pem if next_ca is not None else b"")


def _ca_problem(ca: KeyPair, now: datetime.datetime) -> str | None:
    """Why ``ca`` cannot sign a certificate anyone would trust (None when it can)."""
    try:
        cert = checked_authority(ca)
    except UnusablePair as error:
        return f"unusable ({error.reason})"
    if cert.not_valid_after_utc <= now:
        return f"expired {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    return None


def _expiry(cert_pem: bytes) -> datetime.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def plan(stored: Stored, dns_names: list[str], *, now: datetime.datetime | None = None,
         grace: datetime.timedelta = datetime.timedelta(seconds=Settings.cert_grace_period),
         retire_after: datetime.timedelta | None = None) -> tuple[Certificates, str | None]:
    """What the Secret should hold at ``now``, and why it changed (None when it did not). ``grace``: how long a new
    CA is in the caBundle before it signs the serving certificate; ``retire_after``: how long after the switch the
    previous CA leaves the caBundle (default: ``grace`` plus one check interval)."""
    moment = now or utc_now()
    retire = retire_after if retire_after is not None else grace + datetime.timedelta(seconds=CHECK_INTERVAL_SECONDS)
    ca, next_ca = stored.ca, stored.next_ca
    problem = "missing" if ca is None else _ca_problem(ca, moment)
    if ca is None or problem is not None:
        waiting = next_ca is not None and _ca_problem(next_ca, moment) is None
        fresh = next_ca if next_ca is not None and waiting else new_ca(now=now)
        why = "no CA yet" if ca is None else (f"the CA is {problem}: replaced at once (no handshake can succeed with "
                                              "it)" + (", by the CA that was waiting" if waiting else ""))
        return Certificates(fresh, new_serving_cert(fresh, dns_names, now=now)), why
    serving, previous = stored.serving, stored.previous_ca
    since, switched = stored.bundle_since, stored.switched_at
    reasons: list[str] = []
    if _expiry(ca.cert_pem) - CA_RENEW_BEFORE <= moment:
        if next_ca is None or _ca_problem(next_ca, moment) is not None \
                or _expiry(next_ca.cert_pem) - CA_RENEW_BEFORE <= moment:
            next_ca, previous, switched = new_ca(now=now), b"", None
            reasons.append(f"the CA expires {_expiry(ca.cert_pem):%Y-%m-%d %H:%M} UTC: a new CA joins the caBundle; "
                           f"the serving certificate moves to it {grace.total_seconds():g} s after every webhook "
                           "configuration has it")
        elif since is not None and moment >= since + grace:
            ca, previous, next_ca = next_ca, ca.cert_pem, None
            serving, switched = new_serving_cert(ca, dns_names, now=now), moment
            reasons.append(f"the caBundle has held the new CA for {(moment - since).total_seconds():g} s: the serving "
                           "certificate is now one it signed (the previous CA stays in the caBundle for now)")
    elif next_ca is not None:
        next_ca = None
        reasons.append("the CA is no longer expiring: the CA waiting to replace it leaves the caBundle")
    if previous and next_ca is None:
        if switched is None:
            switched = moment
            reasons.append("the previous CA leaves the caBundle once every replica serves the new certificate")
        elif moment >= switched + retire:
            previous, switched = b"", None
            reasons.append("the previous CA left the caBundle: every replica serves a certificate of the new CA")
    if not previous:
        switched = None
    renewal = "no serving certificate yet" if serving is None else renewal_reason(serving, ca, dns_names, now=moment)
    if renewal is not None:
        serving = new_serving_cert(ca, dns_names, now=now)
        reasons.append(f"serving certificate: {renewal}")
    assert serving is not None
    if next_ca is None or _bundle(previous, ca.cert_pem, next_ca, moment) != _bundle(
            stored.previous_ca, stored.ca.cert_pem if stored.ca else b"", stored.next_ca, moment):
        since = None  # a time for another caBundle (or none waiting) says nothing of this one
    planned = Certificates(ca, serving, previous, next_ca, since, switched)
    return planned, "; ".join(reasons) or None


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
    """Whether the previous CA stays in the caBundle: readable whole (else the API server skips it anyway, see
    :func:`~cardquota.runtime.tls.checked_authority`) and not expired."""
    try:
        expiry = whole_certificate(cert_pem).not_valid_after_utc
    except UnusablePair:
        return False
    return expiry > (now or utc_now())


def _time(text: object) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def decode(secret: Mapping[str, Any] | None) -> Stored:
    """What the Secret holds; what cannot be read is missing (a rotation whose times cannot be read waits for the
    next ones, it never hurries)."""
    data = (secret or {}).get("data") or {}
    annotations = ((secret or {}).get("metadata") or {}).get("annotations") or {}

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
    return Stored(pair(CA_CERT, CA_KEY), pair(TLS_CERT, TLS_KEY), previous, pair(NEXT_CA_CERT, NEXT_CA_KEY),
                  _time(annotations.get(BUNDLE_SINCE)), _time(annotations.get(SWITCHED_AT)))


def secret_body(settings: Settings, certificates: Certificates, existing: Mapping[str, Any] | None,
                owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Secret to write; a new one is owned by the operator's Deployment (``owner``), so uninstalling removes
    it (an existing Secret keeps the owners it has). Written over ``existing`` (a merge patch), the rotation's keys
    and annotations it holds and ``certificates`` has not are removed (null)."""
    metadata: dict[str, Any] = {"name": settings.tls_secret, "namespace": settings.namespace,
                                "labels": {"app.kubernetes.io/name": "cardquota",
                                           "app.kubernetes.io/component": "webhook-tls"}}
    if existing is not None:
        metadata["resourceVersion"] = (existing.get("metadata") or {}).get("resourceVersion")
    elif owner is not None:
        owner_metadata = owner.get("metadata") or {}
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": owner_metadata.get("name"), "uid": owner_metadata.get("uid")}]
    next_ca = certificates.next_ca or KeyPair(b"", b"")
    encoded: dict[str, str | None] = {name: base64.b64encode(value).decode("ascii") for name, value in (
        (CA_CERT, certificates.ca.cert_pem), (CA_KEY, certificates.ca.key_pem),
        (TLS_CERT, certificates.serving.cert_pem), (TLS_KEY, certificates.serving.key_pem),
        (PREVIOUS_CA_CERT, certificates.previous_ca), (NEXT_CA_CERT, next_ca.cert_pem),
        (NEXT_CA_KEY, next_ca.key_pem)) if value}
    annotations: dict[str, str | None] = {name: moment.isoformat() for name, moment in (
        (BUNDLE_SINCE, certificates.bundle_since), (SWITCHED_AT, certificates.switched_at)) if moment is not None}
    if existing is not None:
        held_data = existing.get("data") or {}
        held_annotations = (existing.get("metadata") or {}).get("annotations") or {}
        encoded |= {name: None for name in ROTATION_KEYS if name in held_data and name not in encoded}
        annotations |= {name: None for name in (BUNDLE_SINCE, SWITCHED_AT)
                        if name in held_annotations and name not in annotations}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE, "metadata": metadata, "data": encoded}


def _sync_ca_bundle(api: client.ApiClient, settings: Settings, bundle: bytes) -> bool:
    """Put ``bundle`` on every webhook of both configurations; whether any of them had to change."""
    encoded = base64.b64encode(bundle).decode("ascii")
    changed = False
    for kind, name in zip(WEBHOOK_KINDS, settings.webhook_configurations, strict=True):
        result = patch_ca_bundle(api, kind, name, encoded)
        if result is BundlePatch.MISSING:
            log.warning("%s %s not found: its caBundle was not set (install the manifests)", kind, name)
        changed |= result is BundlePatch.WRITTEN
    return changed


def _report_replaced_ca(settings: Settings, held: KeyPair | None, written: KeyPair,
                        now: datetime.datetime) -> None:
    """Warn (one line) and count a CA the Secret held and :func:`plan` replaced because it could not sign."""
    problem = _ca_problem(held, now) if held is not None and held != written else None
    if problem is not None:
        CERTIFICATE_RELOAD_FAILURES.labels("ca").inc()
        log.warning("the CA in TLS Secret %s/%s was %s: replaced, and the webhooks' caBundle with it",
                    settings.namespace, settings.tls_secret, problem)


def ensure_certificates(api: client.ApiClient, settings: Settings, now: datetime.datetime | None = None, *,
                        clock: Callable[[], datetime.datetime] = utc_now,
                        interval: float = CHECK_INTERVAL_SECONDS) -> Certificates:
    """Read the Secret, issue what is missing or expiring, take the CA rotation's next step when it is due, write the
    Secret back, and sync the webhooks' caBundle. ``now`` freezes the time (else ``clock`` is read); ``interval`` is
    how often replicas check (the previous CA stays that much longer than the grace period after a switch)."""
    read_clock: Callable[[], datetime.datetime] = (lambda: now) if now is not None else clock
    names = service_dns_names(settings.service, settings.namespace)
    grace = datetime.timedelta(seconds=settings.cert_grace_period)
    retire_after = grace + datetime.timedelta(seconds=interval)
    for _ in range(ATTEMPTS):
        existing = read_secret(api, settings.namespace, settings.tls_secret)
        stored, moment = decode(existing), read_clock()
        certificates, reason = plan(stored, names, now=moment, grace=grace, retire_after=retire_after)
        try:
            if reason is not None:
                owner = _deployment(api, settings) if existing is None else None
                existing = write_secret(api, secret_body(settings, certificates, existing, owner),
                                        create=existing is None)
                log.info("TLS Secret %s/%s written: %s", settings.namespace, settings.tls_secret, reason)
                _report_replaced_ca(settings, stored.ca, certificates.ca, moment)
            changed = _sync_ca_bundle(api, settings, certificates.ca_bundle(read_clock()))
            if certificates.next_ca is not None and (changed or certificates.bundle_since is None):
                # Every configuration carries the bundle with the new CA from now on: the grace period starts.
                certificates = dataclasses.replace(certificates, bundle_since=read_clock())
                write_secret(api, secret_body(settings, certificates, existing), create=False)
                log.info("every webhook configuration's caBundle holds the new CA: the serving certificate switches "
                         "to it in %g s", grace.total_seconds())
        except Conflict:
            log.info("TLS Secret %s/%s changed meanwhile (another replica); reading it again",
                     settings.namespace, settings.tls_secret)
            continue
        return certificates
    raise KubeError(f"could not settle the TLS Secret {settings.namespace}/{settings.tls_secret}")


async def keep_certificates(api: client.ApiClient, settings: Settings, tls: ReloadableContext,
                            interval: float = CHECK_INTERVAL_SECONDS, *,
                            clock: Callable[[], datetime.datetime] = utc_now,
                            sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Check every ``interval`` seconds (sooner when a rotation step is due), renew before expiry, and serve the
    certificate the Secret holds from then on (no restart, no failed request; one that cannot be served is logged
    and the one before keeps serving). A check that fails, for any reason, is logged, counted in
    ``cardquota_certificate_reload_failures_total`` and tried again at the next one; nothing is raised."""
    grace = datetime.timedelta(seconds=settings.cert_grace_period)
    retire_after = grace + datetime.timedelta(seconds=interval)
    delay = interval
    while True:
        await sleep(delay)
        delay = interval
        try:
            certificates = await asyncio.to_thread(ensure_certificates, api, settings, clock=clock, interval=interval)
            tls.reload(certificates.serving, f"Secret {settings.namespace}/{settings.tls_secret}")
            due = certificates.next_step(grace, retire_after)
        except (KubeError, OSError, urllib3.exceptions.HTTPError) as error:
            CERTIFICATE_RELOAD_FAILURES.labels("secret").inc()
            log.warning("certificate check failed, will retry: %s", error)
            continue
        except Exception as error:  # a fault of ours: the pair before keeps serving, the next check runs
            CERTIFICATE_RELOAD_FAILURES.labels("error").inc()
            log.error("certificate check failed (%s: %s), will retry; still serving %s", type(error).__name__, error,
                      tls.served(), exc_info=True)
            continue
        if due is not None:
            shortest = min(SHORTEST_WAIT_SECONDS, interval)
            delay = min(interval, max((due - clock()).total_seconds(), shortest))
