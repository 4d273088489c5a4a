"""Certificate rotation without a failed handshake.

* The plan step by step at given times, each step written to the Secret and read back (a replica restarted there
  carries on from the Secret alone).
* Simulated in virtual time, with the default grace period: two replicas (each its own ``keep_certificates`` loop, a
  restart in the middle) against a fake API server that enforces resourceVersion preconditions on the Secret and,
  like the real one, verifies the webhook against the caBundle it saw :data:`INFORMER_DELAY` ago. Every second, each
  replica's served certificate is verified as the API server would: no failure across a CA renewal, nor across a
  leaf renewal.
* The caBundle patch tests each webhook's name; a refused patch (422) is computed again from a fresh read.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import datetime
import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from admission_proxy import merge_patch
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError
from malformed_certificates import duplicate_extension_pair, five_byte_ip_pair

from cardquota import kube
from cardquota.kube import BundlePatch, KubeError, api_error, patch_ca_bundle
from cardquota.operator import certificates
from cardquota.operator.certificates import (
    BUNDLE_SINCE,
    NEXT_CA_CERT,
    NEXT_CA_KEY,
    PREVIOUS_CA_CERT,
    SWITCHED_AT,
    Certificates,
    Stored,
    decode,
    ensure_certificates,
    keep_certificates,
    plan,
    secret_body,
)
from cardquota.operator.settings import Settings
from cardquota.runtime.metrics import REGISTRY
from cardquota.runtime.tls import KeyPair, ReloadableContext, new_ca, new_serving_cert, service_dns_names

NAMES = service_dns_names("cardquota", "cardquota-system")
NOW = datetime.datetime(2026, 11, 22, tzinfo=datetime.UTC)
GRACE = datetime.timedelta(seconds=60)
RETIRE = datetime.timedelta(seconds=120)
SECOND = datetime.timedelta(seconds=1)


def step(stored: Stored, at: datetime.datetime) -> tuple[Certificates, str | None, Stored]:
    """Plan at ``at``; the Secret written and read back holds exactly the plan (what a restarted replica reads)."""
    planned, reason = plan(stored, NAMES, now=at, grace=GRACE, retire_after=RETIRE)
    back = decode(secret_body(Settings(), planned, None))
    assert back == Stored(planned.ca, planned.serving, planned.previous_ca, planned.next_ca, planned.bundle_since,
                          planned.switched_at)
    return planned, reason, back


def signed_by(serving: KeyPair, ca: KeyPair) -> bool:
    try:
        x509.load_pem_x509_certificate(serving.cert_pem).verify_directly_issued_by(
            x509.load_pem_x509_certificate(ca.cert_pem))
    except Exception:
        return False
    return True


def test_a_ca_rotation_step_by_step_through_the_secret() -> None:
    old = new_ca(days=60, now=NOW)  # within 90 days of expiry
    serving = new_serving_cert(old, NAMES, now=NOW)

    # 1. A new CA joins the caBundle; the old CA keeps signing what is served.
    joined, reason, stored = step(Stored(old, serving), NOW)
    assert reason is not None
    assert reason.startswith("the CA expires")
    assert (joined.ca, joined.serving, joined.previous_ca) == (old, serving, b"")
    fresh = joined.next_ca
    assert fresh is not None
    assert joined.ca_bundle(NOW) == old.cert_pem + fresh.cert_pem
    assert joined.bundle_since is None  # written once every webhook configuration carries the bundle
    assert step(stored, NOW + datetime.timedelta(hours=1))[1] is None  # no time yet: no switch, however long

    # 2. One grace period after every configuration had the bundle, the serving certificate switches.
    published = NOW + 5 * SECOND
    stored = dataclasses.replace(stored, bundle_since=published)
    assert step(stored, published + GRACE - SECOND)[1] is None
    switched, reason, stored = step(stored, published + GRACE)
    assert reason is not None
    assert reason.startswith("the caBundle has held the new CA for 60 s")
    assert switched.ca == fresh
    assert signed_by(switched.serving, fresh)
    assert switched.previous_ca == old.cert_pem
    assert switched.next_ca is None
    assert switched.switched_at == published + GRACE
    assert switched.ca_bundle(published + GRACE) == joined.ca_bundle(NOW)  # the same bytes: no caBundle write

    # 3. The old CA leaves once every replica serves the new certificate.
    assert step(stored, published + GRACE + RETIRE - SECOND)[1] is None
    retired, reason, stored = step(stored, published + GRACE + RETIRE)
    assert reason == "the previous CA left the caBundle: every replica serves a certificate of the new CA"
    assert (retired.ca, retired.serving, retired.previous_ca, retired.switched_at) == (fresh, switched.serving, b"",
                                                                                       None)
    assert retired.ca_bundle() == fresh.cert_pem
    assert step(stored, published + GRACE + RETIRE + datetime.timedelta(days=300))[1] is None


def test_leaf_renewal_keeps_the_ca_and_the_bundle() -> None:
    ca = new_ca(now=NOW)
    expiring = new_serving_cert(ca, NAMES, days=20, now=NOW)
    renewed, reason, _ = step(Stored(ca, expiring), NOW)
    assert reason is not None
    assert reason.startswith("serving certificate: expires")
    assert (renewed.ca, renewed.next_ca, renewed.previous_ca) == (ca, None, b"")
    assert signed_by(renewed.serving, ca)
    assert renewed.ca_bundle(NOW) == ca.cert_pem


def test_a_ca_that_cannot_be_used_any_more_is_replaced_at_once() -> None:
    expired = new_ca(days=1, now=NOW - datetime.timedelta(days=2))
    serving = new_serving_cert(expired, NAMES, now=NOW - datetime.timedelta(days=2))
    replaced, reason, _ = step(Stored(expired, serving), NOW)
    assert reason is not None
    assert reason.startswith("the CA is expired")
    assert replaced.ca != expired
    assert signed_by(replaced.serving, replaced.ca)
    assert (replaced.previous_ca, replaced.next_ca) == (b"", None)
    waiting = new_ca(now=NOW)  # a new CA was waiting in the caBundle: it takes over
    promoted, reason, _ = step(Stored(expired, serving, next_ca=waiting, bundle_since=NOW), NOW)
    assert promoted.ca == waiting
    assert reason is not None
    assert reason.endswith("by the CA that was waiting")
    unreadable, reason, _ = step(Stored(KeyPair(b"garbage", b"garbage"), serving), NOW)
    assert reason is not None
    assert reason.startswith("the CA is unusable (the certificate cannot be read (")
    assert reason.endswith("): replaced at once (no handshake can succeed with it)")
    assert signed_by(unreadable.serving, unreadable.ca)


def rsa_ca() -> KeyPair:
    """A well-formed self-signed CA whose key is RSA: one the operator cannot sign with (it signs with EC keys)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rsa-ca")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - datetime.timedelta(days=1)).not_valid_after(NOW + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM),
                   key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()))


OTHER_CA = new_ca(now=NOW)
BROKEN_CAS = [
    pytest.param(lambda: five_byte_ip_pair(), "the certificate has a field or extension cryptography cannot read "
                 "(ValueError: b'\\x01\\x02' does not appear to be an IPv4 or IPv6 address)", id="a 5-byte iPAddress"),
    pytest.param(lambda: duplicate_extension_pair(), "the certificate has a field or extension cryptography cannot "
                 "read (DuplicateExtension: Duplicate 1.3.6.1.4.1.32473.1 extension found)", id="an extension twice"),
    pytest.param(lambda: KeyPair(new_ca(now=NOW).cert_pem, OTHER_CA.key_pem), "the key is not the certificate's",
                 id="another certificate's key"),
    pytest.param(rsa_ca, "the key is RSA, not elliptic-curve (the only kind this operator signs with)",
                 id="an RSA key"),
]


@pytest.mark.parametrize(("make", "why"), BROKEN_CAS)
def test_a_ca_that_cannot_sign_is_replaced_at_once_and_stays_replaced(make: Callable[[], KeyPair], why: str) -> None:
    """Such a CA used to be kept: one the API server cannot read (Go's parser refuses the first two) signing every
    serving certificate, or, with another certificate's key, a serving certificate re-issued at every check."""
    broken = make()
    serving = new_serving_cert(new_ca(now=NOW), NAMES, now=NOW)
    for held in (serving, None):
        replaced, reason, back = step(Stored(broken, held), NOW)
        assert reason == f"the CA is unusable ({why}): replaced at once (no handshake can succeed with it)"
        assert replaced.ca != broken
        assert signed_by(replaced.serving, replaced.ca)
        assert replaced.ca_bundle(NOW) == replaced.ca.cert_pem
        assert step(back, NOW + datetime.timedelta(minutes=1))[1] is None  # nothing more to do at the next check


def test_a_previous_ca_the_api_server_cannot_read_leaves_the_ca_bundle() -> None:
    ca = new_ca(now=NOW)
    planned = Certificates(ca, new_serving_cert(ca, NAMES, now=NOW), previous_ca=five_byte_ip_pair().cert_pem,
                           switched_at=NOW)
    assert planned.ca_bundle(NOW) == ca.cert_pem


def test_the_secret_check_replaces_a_ca_that_cannot_sign_once_with_a_warning_and_a_count(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    moment = datetime.datetime.now(datetime.UTC)
    api = FakeApiServer(lambda: moment)
    for name in ("read_secret", "write_secret", "patch_ca_bundle"):
        monkeypatch.setattr(certificates, name, getattr(api, name))
    settings = Settings()
    broken = KeyPair(new_ca().cert_pem, OTHER_CA.key_pem)
    api.write_secret(None, secret_body(settings, Certificates(broken, new_serving_cert(OTHER_CA, NAMES)), None),
                     create=True)

    def counted() -> float:
        return REGISTRY.get_sample_value("cardquota_certificate_reload_failures_total", {"reason": "ca"}) or 0.0

    before, writes = counted(), api.secret_writes
    caplog.set_level("INFO")
    first = ensure_certificates(object(), settings)
    assert first.ca != broken
    assert decode(api.secret).ca == first.ca
    assert signed_by(first.serving, first.ca)
    assert {name: api.distinct_bundles(name) for name in api.bundles} == {
        name: [first.ca.cert_pem] for name in settings.webhook_configurations}
    assert counted() == before + 1
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert warnings == [f"the CA in TLS Secret {settings.namespace}/{settings.tls_secret} was unusable (the key is "
                        "not the certificate's): replaced, and the webhooks' caBundle with it"]
    assert ensure_certificates(object(), settings) == first  # the next check: nothing to do, nothing counted
    assert (api.secret_writes, counted()) == (writes + 1, before + 1)


def test_a_waiting_ca_no_longer_needed_leaves_and_a_previous_ca_of_unknown_age_is_timed() -> None:
    ca = new_ca(now=NOW)
    serving = new_serving_cert(ca, NAMES, now=NOW)
    dropped, reason, _ = step(Stored(ca, serving, next_ca=new_ca(now=NOW), bundle_since=NOW), NOW)
    assert reason == "the CA is no longer expiring: the CA waiting to replace it leaves the caBundle"
    assert (dropped.next_ca, dropped.bundle_since) == (None, None)
    legacy = Stored(ca, serving, previous_ca=new_ca(now=NOW).cert_pem)  # as the one-step rotation left it
    timed, reason, stored = step(legacy, NOW)
    assert timed.switched_at == NOW
    assert timed.previous_ca == legacy.previous_ca
    assert step(stored, NOW + RETIRE)[0].previous_ca == b""


def test_the_secret_written_over_an_existing_one_removes_what_the_rotation_no_longer_holds() -> None:
    ca = new_ca(now=NOW)
    during = Certificates(ca, new_serving_cert(ca, NAMES, now=NOW), next_ca=new_ca(now=NOW), bundle_since=NOW)
    existing = secret_body(Settings(), during, None)
    assert existing["metadata"]["annotations"] == {BUNDLE_SINCE: NOW.isoformat()}
    existing["metadata"]["resourceVersion"] = "7"
    after = secret_body(Settings(), Certificates(ca, during.serving), existing)
    assert after["metadata"]["resourceVersion"] == "7"
    assert after["data"][NEXT_CA_CERT] is None
    assert after["data"][NEXT_CA_KEY] is None
    assert PREVIOUS_CA_CERT not in after["data"]  # was not there: nothing to remove
    assert after["metadata"]["annotations"] == {BUNDLE_SINCE: None}
    assert SWITCHED_AT not in after["metadata"]["annotations"]
    assert "annotations" not in secret_body(Settings(), Certificates(ca, during.serving), None)["metadata"]


# ------------------------------------------------------------------------------------------- simulated rotation

INFORMER_DELAY = datetime.timedelta(seconds=20)
"""How late the simulated API server sees a caBundle change (a slow informer; the grace period is 60 s)."""
CONFIGURATIONS = Settings().webhook_configurations


@dataclass
class FakeApiServer:
    """The TLS Secret, with resourceVersion preconditions, and each configuration's caBundle, every change recorded
    with its (virtual) time."""

    clock: Callable[[], datetime.datetime]
    secret: dict[str, Any] | None = None
    version: int = 0
    bundles: dict[str, list[tuple[datetime.datetime, str]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    secret_writes: int = 0

    def read_secret(self, _api: object, _namespace: str, _name: str) -> dict[str, Any] | None:
        with self.lock:
            return copy.deepcopy(self.secret)

    def write_secret(self, _api: object, body: dict[str, Any], *, create: bool) -> dict[str, Any]:
        with self.lock:
            if create:
                if self.secret is not None:
                    raise api_error("already exists", 409)
                written = copy.deepcopy(body)
            else:
                assert self.secret is not None
                sent = body["metadata"].get("resourceVersion")
                if sent is not None and sent != self.secret["metadata"]["resourceVersion"]:
                    raise api_error("the object has been modified", 409)
                written = merge_patch(self.secret, body)
            self.version += 1
            self.secret_writes += 1
            written["metadata"]["resourceVersion"] = str(self.version)
            self.secret = written
            return copy.deepcopy(written)

    def patch_ca_bundle(self, _api: object, _kind: str, name: str, bundle: str) -> BundlePatch:
        with self.lock:
            history = self.bundles.setdefault(name, [])
            if history and history[-1][1] == bundle:
                return BundlePatch.IN_PLACE
            history.append((self.clock(), bundle))
            return BundlePatch.WRITTEN

    def seen(self, name: str, at: datetime.datetime) -> bytes:
        """The caBundle the API server verifies with at ``at``: the one written INFORMER_DELAY before (or earlier)."""
        bundles = [bundle for moment, bundle in self.bundles[name] if moment <= at - INFORMER_DELAY]
        return base64.b64decode(bundles[-1] if bundles else self.bundles[name][0][1])

    def distinct_bundles(self, name: str) -> list[bytes]:
        return [base64.b64decode(bundle) for _, bundle in self.bundles[name]]


class VirtualTime:
    """A clock and a sleep for ``keep_certificates``: time moves only when every loop sleeps."""

    def __init__(self, start: datetime.datetime) -> None:
        self.now = start
        self._sleepers: list[tuple[datetime.datetime, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def clock(self) -> datetime.datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + datetime.timedelta(seconds=seconds), next(self._order), future))
        await future

    async def settle(self, loops: int) -> None:
        """Wait (real time) until ``loops`` loops sleep."""
        for _ in range(20_000):
            if sum(not future.done() for *_, future in self._sleepers) == loops:
                return
            await asyncio.sleep(0.0005)
        raise AssertionError("the certificate loops did not settle")

    def next_wake(self) -> datetime.datetime | None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    def advance(self, moment: datetime.datetime) -> None:
        self.now = max(self.now, moment)
        while self._sleepers and self._sleepers[0][0] <= self.now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)


@dataclass
class Replica:
    tls: ReloadableContext
    task: asyncio.Task[None]


@dataclass
class Simulation:
    time: VirtualTime
    api: FakeApiServer
    settings: Settings
    tmp_path: Path
    replicas: list[Replica] = field(default_factory=list)
    checks: int = 0
    failures: list[str] = field(default_factory=list)
    served: set[bytes] = field(default_factory=set)

    def start(self, serving: KeyPair, label: str) -> Replica:
        tls = ReloadableContext(self.tmp_path / label)
        tls.install(serving)
        task = asyncio.create_task(keep_certificates(object(), self.settings, tls, clock=self.time.clock,
                                                     sleep=self.time.sleep))
        return Replica(tls, task)

    async def restart(self, index: int) -> None:
        """A replica stopped and started: a new process, which knows what the Secret holds and nothing else."""
        await self.time.settle(len(self.replicas))
        self.replicas[index].task.cancel()
        started = await asyncio.to_thread(ensure_certificates, object(), self.settings, clock=self.time.clock)
        self.replicas[index] = self.start(started.serving, f"restarted-{index}-{len(self.served)}")

    def check(self) -> None:
        """Each replica, as the API server reaches it through each configuration, right now."""
        for index, replica in enumerate(self.replicas):
            assert replica.tls.loaded is not None
            self.served.add(replica.tls.loaded.cert_pem)
            leaf = x509.load_pem_x509_certificate(replica.tls.loaded.cert_pem)
            for name in CONFIGURATIONS:
                self.checks += 1
                store = Store(x509.load_pem_x509_certificates(self.api.seen(name, self.time.now)))
                verifier = PolicyBuilder().store(store).time(self.time.now).build_server_verifier(
                    x509.DNSName(NAMES[2]))
                try:
                    verifier.verify(leaf, [])
                except VerificationError as error:
                    self.failures.append(f"{self.time.now:%H:%M:%S} replica {index} via {name}: {error}")

    async def run(self, duration: datetime.timedelta) -> None:
        """Let time pass, the API server calling each replica every second."""
        end, tick = self.time.now + duration, self.time.now
        while True:
            await self.time.settle(len(self.replicas))
            wake = self.time.next_wake()
            moment = max(min(tick, wake) if wake is not None else tick, self.time.now)
            if moment > end:
                self.time.advance(end)
                return
            if moment >= tick:
                self.time.now = moment
                self.check()
                tick = moment + SECOND
            self.time.advance(moment)

    async def stop(self) -> None:
        for replica in self.replicas:
            replica.task.cancel()
        await asyncio.gather(*(replica.task for replica in self.replicas), return_exceptions=True)


async def test_two_replicas_rotate_the_ca_and_then_the_leaf_without_a_failed_handshake(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    start = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    time = VirtualTime(start)
    api = FakeApiServer(time.clock)
    settings = Settings()  # the default grace period, 60 s; replicas check every 60 s
    for name in ("read_secret", "write_secret", "patch_ca_bundle"):
        monkeypatch.setattr(certificates, name, getattr(api, name))
    monkeypatch.setattr(certificates, "_deployment", lambda *_: None)
    issued = start - datetime.timedelta(days=300)
    old = new_ca(days=360, now=issued)  # expires in 60 days: due for renewal
    first = new_serving_cert(old, NAMES, now=issued)
    api.write_secret(None, secret_body(settings, Certificates(old, first), None), create=True)
    for name in CONFIGURATIONS:
        api.bundles[name] = [(issued, base64.b64encode(old.cert_pem).decode())]
    simulation = Simulation(time, api, settings, tmp_path)
    simulation.replicas = [simulation.start(first, "a"), simulation.start(first, "b")]
    try:
        await simulation.run(datetime.timedelta(seconds=90))  # both replicas checked at 60 s: the CA renewal began
        assert decode(api.secret).next_ca is not None
        await simulation.restart(1)  # mid-rotation
        await simulation.run(datetime.timedelta(minutes=10))
        new = decode(api.secret)
        assert new.ca is not None
        assert new.ca != old
        assert (new.previous_ca, new.next_ca) == (b"", None)  # the rotation is over
        for name in CONFIGURATIONS:  # old → old + new → new: one new CA (one replica wrote it), no other change
            assert api.distinct_bundles(name) == [old.cert_pem, old.cert_pem + new.ca.cert_pem, new.ca.cert_pem]
        assert all(r.tls.loaded == new.serving for r in simulation.replicas)

        # Leaf renewal: 340 days on (the replicas slept through them), the serving certificate is due.
        switched_serving = new.serving
        time.now += datetime.timedelta(days=340)
        await simulation.run(datetime.timedelta(minutes=5))
        renewed = decode(api.secret)
        assert renewed.ca == new.ca
        assert renewed.serving not in (None, switched_serving)
        assert all(r.tls.loaded == renewed.serving for r in simulation.replicas)
        for name in CONFIGURATIONS:
            assert api.distinct_bundles(name)[-1] == new.ca.cert_pem  # the caBundle did not change
    finally:
        await simulation.stop()
    assert simulation.failures == []
    assert simulation.checks > 2 * 2 * 15 * 60  # every second, both replicas, both configurations
    assert len(simulation.served) == 3  # the old CA's certificate, the new CA's, its renewal


# ------------------------------------------------------------------------------------------- the caBundle patch

def webhooks(*names: str, bundle: str = "old") -> dict[str, Any]:
    return {"webhooks": [{"name": name, "clientConfig": {"caBundle": bundle}} for name in names]}


def test_each_added_ca_bundle_is_guarded_by_a_test_of_the_webhooks_name() -> None:
    configuration = webhooks("a", "b", "c")
    configuration["webhooks"][1]["clientConfig"]["caBundle"] = "new"
    assert kube.ca_bundle_patch(configuration, "new") == [
        {"op": "test", "path": "/webhooks/0/name", "value": "a"},
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "new"},
        {"op": "test", "path": "/webhooks/2/name", "value": "c"},
        {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": "new"},
    ]
    assert kube.ca_bundle_patch(webhooks("a", bundle="new"), "new") == []


class FakeConfiguration:
    """One webhook configuration behind ``kube._get``/``kube._request``, applying JSON patches as the API server
    does (a failed ``test`` is a 422); ``between`` runs once between the first read and the first patch."""

    def __init__(self, configuration: dict[str, Any], between: Callable[[dict[str, Any]], dict[str, Any]],
                 refusal: int = 422) -> None:
        self.configuration, self.between, self.refusal = configuration, between, refusal
        self.patches: list[Any] = []

    def get(self, _api: object, _path: str) -> dict[str, Any]:
        return copy.deepcopy(self.configuration)

    def request(self, _api: object, method: str, path: str, body: Any = None, _content_type: str = "") -> Any:
        assert method == "PATCH"
        self.patches.append(body)
        if len(self.patches) == 1:
            self.configuration = self.between(self.configuration)
        try:
            self.configuration = jsonpatch.apply_patch(self.configuration, body)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
            raise api_error(f"PATCH {path}: HTTP {self.refusal}: {error}", self.refusal) from None
        return self.configuration


@pytest.mark.parametrize("refusal", [422, 409, 500])
def test_a_refused_ca_bundle_patch_is_computed_again_from_a_fresh_read(monkeypatch: pytest.MonkeyPatch,
                                                                       refusal: int) -> None:
    def reorder(configuration: dict[str, Any]) -> dict[str, Any]:  # kubectl apply, in between
        return {"webhooks": configuration["webhooks"][1:] + configuration["webhooks"][:1]}

    fake = FakeConfiguration(webhooks("a", "b", "c"), reorder, refusal)
    fake.configuration["webhooks"][1]["clientConfig"]["caBundle"] = "new"
    monkeypatch.setattr(kube, "_get", fake.get)
    monkeypatch.setattr(kube, "_request", fake.request)
    assert patch_ca_bundle(object(), "ValidatingWebhookConfiguration", "v", "new") is BundlePatch.WRITTEN
    assert len(fake.patches) == 2
    assert [w["name"] for w in fake.configuration["webhooks"]] == ["b", "c", "a"]
    assert {w["clientConfig"]["caBundle"] for w in fake.configuration["webhooks"]} == {"new"}
    assert patch_ca_bundle(object(), "ValidatingWebhookConfiguration", "v", "new") is BundlePatch.IN_PLACE


def test_a_ca_bundle_patch_refused_every_time_or_forbidden_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def always_stale(_api: object, method: str, path: str, body: Any = None, _content_type: str = "") -> Any:
        raise api_error(f"{method} {path}: HTTP 422: test failed", 422)

    fake = FakeConfiguration(webhooks("a"), lambda configuration: configuration)
    monkeypatch.setattr(kube, "_get", fake.get)
    monkeypatch.setattr(kube, "_request", always_stale)
    with pytest.raises(KubeError) as stale:
        patch_ca_bundle(object(), "ValidatingWebhookConfiguration", "v", "new", attempts=3)
    assert stale.value.status == 422
    forbidden = FakeConfiguration(webhooks("a"), lambda configuration: configuration, refusal=403)
    forbidden.configuration["webhooks"][0]["name"] = "renamed"  # every patch fails, with 403: never retried
    monkeypatch.setattr(kube, "_request", forbidden.request)
    with pytest.raises(KubeError) as refused:
        patch_ca_bundle(object(), "ValidatingWebhookConfiguration", "v", "new")
    assert refused.value.status == 403
    assert len(forbidden.patches) == 1


def test_a_configuration_that_is_not_installed_gets_no_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(_api: object, path: str) -> Any:
        raise api_error(f"GET {path}: HTTP 404: not found", 404)

    monkeypatch.setattr(kube, "_get", missing)
    assert patch_ca_bundle(object(), "MutatingWebhookConfiguration", "m", "new") is BundlePatch.MISSING
