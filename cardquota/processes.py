"""``cardquota operator``: the admission server, the controllers and the watches feeding their cache, in one process
or (``--role webhook`` / ``--role controller``) split over two Deployments."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from kubernetes.client import ApiClient

from cardquota.core.ledger import Ledger
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.kube import Connection, api_client
from cardquota.operator.certificates import ensure_certificates, keep_certificates
from cardquota.operator.controller import Publisher, plugin_arguments
from cardquota.operator.crd_drift import CrdDriftCheck
from cardquota.operator.gatekeeper import LISTED_KINDS, Gatekeeper
from cardquota.operator.leader import LeaderElection
from cardquota.operator.metrics import metrics_app
from cardquota.operator.reflector import Reflector, listed_anew
from cardquota.operator.settings import LogFormat, Settings
from cardquota.operator.watch import follow
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.metrics import CERTIFICATE_RELOAD_FAILURES, serve_http
from cardquota.runtime.supervision import supervised
from cardquota.runtime.tls import KeyPair, ReloadableContext, new_ca, new_serving_cert, read_mounted_pair
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.server import build_app, serve

log = logging.getLogger("cardquota.operator")
CERT_CHECK_SECONDS = 60.0


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": self.formatTime(record), "level": record.levelname, "logger": record.name,
                 "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(log_format: LogFormat) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format is LogFormat.JSON
                         else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    logging.getLogger("kopf").setLevel(logging.WARNING)  # Kopf logs every handled watch event at INFO


def dev_certificates(directory: Path) -> KeyPair:
    """A throwaway CA (its certificate written as ``ca.crt`` for curl/kubectl) and a localhost certificate."""
    ca = new_ca("cardquota-dev-ca")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    return new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])


async def watch_certificate_files(source: Path, tls: ReloadableContext) -> None:
    """Every :data:`CERT_CHECK_SECONDS`, serve the pair mounted in ``source`` when it changed (rotation without a
    restart): :func:`check_certificate_files`, which never raises."""
    while True:
        await asyncio.sleep(CERT_CHECK_SECONDS)
        check_certificate_files(source, tls)


def check_certificate_files(source: Path, tls: ReloadableContext) -> None:
    """Serve the pair mounted in ``source`` if it changed. Whatever goes wrong — files not read, a pair that cannot
    be served, or anything unforeseen — leaves the pair before serving, is logged with the reason and counted in
    ``cardquota_certificate_reload_failures_total``; nothing is raised, so the next check runs."""
    try:
        pair = read_mounted_pair(source)
    except OSError as error:  # missing, unreadable, or changing on every read (PairChanging)
        CERTIFICATE_RELOAD_FAILURES.labels("unreadable").inc()
        log.warning("certificate files in %s not read (%s); still serving %s", source, error, tls.served())
        return
    try:
        tls.reload(pair, str(source))  # a pair that cannot be served: logged and counted (rejected) by reload
    except Exception as error:  # a fault of ours: the pair before keeps serving, the next check runs
        CERTIFICATE_RELOAD_FAILURES.labels("error").inc()
        log.error("certificate files in %s not checked (%s: %s); still serving %s", source, type(error).__name__,
                  error, tls.served(), exc_info=True)


async def run(settings: Settings, *, connection: Connection | None = None, stop: asyncio.Event | None = None,
              started: asyncio.Event | None = None, on_listening: Callable[[int], None] | None = None) -> None:
    """Serve admissions and run the controllers (those :attr:`Settings.role` asks for) until ``stop`` is set;
    ``started`` is set once the cluster snapshot has loaded, and ``on_listening`` gets the port the admission server
    bound (useful with port 0)."""
    role = settings.role
    cache = ClusterCache(ledger=Ledger(ClusterSnapshot(map_namespace_queues=settings.map_namespace_queues,
                                                       card_policy=settings.card_policy,
                                                       volcano_schedulers=settings.schedulers),
                                       published_usage=not role.follows_pods))
    api = api_client(connection)
    tasks: list[asyncio.Task[None]] = []
    runners: list[web.AppRunner] = []
    reflectors: list[Reflector] = []
    claim_watches: list[Reflector] = []
    try:
        if role.serves_webhooks:
            runners.append(await serve_admissions(settings, cache, api, tasks))
            if on_listening is not None:
                on_listening(runners[0].addresses[0][1])
        leader = LeaderElection(api, settings.namespace) if role.runs_controllers else None

        def leads() -> bool:
            """Whether this process writes (never a webhook process: the controllers' leader does)."""
            return leader is not None and leader.leading

        publisher: Publisher | None = None
        if leader is not None:
            arguments = await asyncio.to_thread(plugin_arguments, api, settings.namespace)
            if arguments is not None:  # the Queue policy's warning about a card queue without cpu/memory rests on it
                cache.ledger.snapshot.card_unlimited_cpu_memory = arguments.card_unlimited_cpu_memory
            keeper = Gatekeeper(cache, api, is_leader=leads, head_of_line=settings.gate_order,
                                listed_since=functools.partial(listed_anew, reflectors, LISTED_KINDS),
                                predecessor_done=functools.partial(predecessor_done, leader),
                                dra_readable=functools.partial(claims_current, claim_watches)) \
                if settings.card_gate else None
            publisher = Publisher(cache, api, window=settings.publish_window, is_leader=leads,
                                  capacity_card=arguments,
                                  gate_sentence=keeper.sentence if keeper is not None else lambda _: None)
            tasks += [asyncio.create_task(leader.run()), asyncio.create_task(publisher.run())]
            if keeper is not None:
                tasks.append(asyncio.create_task(keeper.run()))
        # in every process: the policies read the drift check's finding
        tasks.append(asyncio.create_task(CrdDriftCheck(api, cache, is_leader=leads).run()))
        runners.append(await serve_http(metrics_app(cache, publisher, queues=role.runs_controllers), settings.host,
                                        settings.metrics_port, settings.limits))
        await follow(cache, api, stop, tasks, started=started, pods=role.follows_pods,
                     namespaces=settings.map_namespace_queues, reflectors=reflectors,
                     claims=settings.card_gate and role.runs_controllers, claim_watches=claim_watches)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for runner in runners:
            await runner.cleanup()


def claims_current(claim_watches: list[Reflector]) -> bool:
    """Whether the DRA claims the card-quota gate reads are in the cache and current: every claim reflector has
    listed, its kind is served, and its watch is not failing (what it holds may otherwise miss claims created
    since)."""
    return bool(claim_watches) and all(reflector.synced.is_set() and reflector.served and not reflector.behind()
                                       for reflector in claim_watches)


def predecessor_done(leader: LeaderElection, since: float) -> float:
    """When the writes of the Lease's holder before ``leader`` had ended (``since``, when it began leading, if not
    known)."""
    done = leader.predecessor_done
    return since if done is None else min(done, since)


async def serve_admissions(settings: Settings, cache: ClusterCache, api: ApiClient,
                           tasks: list[asyncio.Task[None]]) -> web.AppRunner:
    """The HTTPS admission server over ``cache``, its serving certificate from where the settings say (tasks that
    keep it current are added to ``tasks``)."""
    admission = Admission(cache, settings.policy, settings.failure_modes, own_users=settings.unrefused_users)
    # nothing is written into --cert-dir (a Secret volume is read-only)
    tls = ReloadableContext(on_rejected=CERTIFICATE_RELOAD_FAILURES.labels("rejected").inc)
    restarted = CERTIFICATE_RELOAD_FAILURES.labels("restarted").inc
    cert_dir = Path(settings.cert_dir) if settings.cert_dir else None
    if settings.dev:
        dev_dir = cert_dir or Path(tempfile.mkdtemp(prefix="cardquota-tls-"))
        tls.install(dev_certificates(dev_dir), f"a self-signed CA (its ca.crt in {dev_dir})")
    elif cert_dir is not None and (cert_dir / "tls.crt").exists():  # mounted (e.g. cert-manager): follow the files
        # A pair that cannot be served at start (UnusablePair) stops the operator with one line (cli/main.py): there
        # is no pair before it to keep serving.
        tls.install(read_mounted_pair(cert_dir), str(cert_dir))
        tasks.append(asyncio.create_task(supervised(
            f"the watch of the certificate files in {cert_dir}",
            functools.partial(watch_certificate_files, cert_dir, tls), restarted)))
    else:  # managed: a CA and serving certificate in a Secret, caBundle patched, renewed before expiry
        tls.install((await asyncio.to_thread(ensure_certificates, api, settings)).serving,
                    f"Secret {settings.namespace}/{settings.tls_secret}")
        tasks.append(asyncio.create_task(supervised(
            f"the check of Secret {settings.namespace}/{settings.tls_secret}",
            functools.partial(keep_certificates, api, settings, tls), restarted)))
    return await serve(build_app(admission), settings.host, settings.port, tls.context, settings.limits)
