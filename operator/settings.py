"""The operator's configuration: one typed dataclass, read from the command line with environment defaults
(``CARDQUOTA_<NAME>``), so the same settings work from ``cardquota operator --help`` and a Deployment's env."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from cardquota.core.policies.config import DEFAULT_SCHEDULER_CONFIGMAP, PolicyConfig
from cardquota.webhooks.kinds import FailureMode

KINDS = ("Queue", "PodGroup", "Job", "Pod", "Node", "ConfigMap")


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


@dataclass(frozen=True)
class Settings:
    namespace: str = "cardquota-system"
    service: str = "cardquota"
    host: str = "0.0.0.0"
    port: int = 9443
    schedulers: frozenset[str] = frozenset({"volcano"})
    scheduler_configmap: str = DEFAULT_SCHEDULER_CONFIGMAP
    failure_modes: Mapping[str, FailureMode] = field(default_factory=dict)
    """Per kind, overriding the kind's own default (fail-open for Pod and Node, fail-closed for the others)."""
    tls_secret: str = "cardquota-webhook-tls"
    deployment: str = "cardquota"
    """The operator's own Deployment, which owns the TLS Secret it creates."""
    cert_dir: str = ""
    """Where the serving certificate and key files live while the server runs (a temporary folder when empty)."""
    dev: bool = False
    """Serve a self-signed certificate on localhost and manage no Secret or webhook configuration."""
    log_format: LogFormat = LogFormat.TEXT
    webhook_configurations: tuple[str, ...] = ("cardquota-validating", "cardquota-mutating")
    publish_window: float = 1.0
    """Seconds between annotation writes: a burst of events costs at most one patch per queue per window."""
    metrics_port: int = 8080
    """Plain-HTTP port of /metrics, /healthz and /readyz (0: any free port)."""

    @property
    def policy(self) -> PolicyConfig:
        return PolicyConfig(card_aware_schedulers=self.schedulers, scheduler_configmap=self.scheduler_configmap)


def parse_failure_modes(items: Sequence[str]) -> dict[str, FailureMode]:
    """``["Pod=closed", "Queue=open"]`` → modes; raises ValueError naming a bad item."""
    modes: dict[str, FailureMode] = {}
    for item in items:
        kind, _, mode = item.partition("=")
        if kind not in KINDS or mode not in {m.value for m in FailureMode}:
            raise ValueError(f"{item!r}: expected KIND=open|closed with KIND one of {', '.join(KINDS)}")
        modes[kind] = FailureMode(mode)
    return modes


def add_arguments(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    env = os.environ if environ is None else environ
    defaults = Settings()

    def default(name: str, value: object) -> str:
        return env.get(f"CARDQUOTA_{name}", str(value))

    parser.add_argument("--namespace", default=default("NAMESPACE", defaults.namespace),
                        help="namespace of the operator, its Service and TLS Secret (env CARDQUOTA_NAMESPACE)")
    parser.add_argument("--service", default=default("SERVICE", defaults.service),
                        help="name of the webhook Service, for the certificate's DNS names (env CARDQUOTA_SERVICE)")
    parser.add_argument("--host", default=default("HOST", defaults.host), help="address to listen on")
    parser.add_argument("--port", type=int, default=int(default("PORT", defaults.port)),
                        help="HTTPS port of the admission server (env CARDQUOTA_PORT)")
    parser.add_argument("--card-aware-scheduler", dest="schedulers", action="append",
                        help="scheduler that enforces card quotas, repeatable (env CARDQUOTA_SCHEDULERS, "
                        "comma-separated; default volcano)")
    parser.add_argument("--scheduler-configmap", default=default("SCHEDULER_CONFIGMAP", defaults.scheduler_configmap),
                        help="name of the Volcano scheduler ConfigMap")
    parser.add_argument("--failure-mode", dest="failure_modes", action="append", default=[], metavar="KIND=MODE",
                        help="open or closed per kind when cardquota cannot check, repeatable (env "
                        "CARDQUOTA_FAILURE_MODES, comma-separated; defaults: Pod=open, Node=open, others closed)")
    parser.add_argument("--tls-secret", default=default("TLS_SECRET", defaults.tls_secret),
                        help="Secret holding the CA and serving certificate")
    parser.add_argument("--deployment", default=default("DEPLOYMENT", defaults.deployment),
                        help="the operator's own Deployment, made owner of the TLS Secret (env CARDQUOTA_DEPLOYMENT)")
    parser.add_argument("--cert-dir", default=default("CERT_DIR", defaults.cert_dir),
                        help="folder for the serving certificate files (default: a temporary folder)")
    parser.add_argument("--dev", action="store_true", default=env.get("CARDQUOTA_DEV") == "1",
                        help="local development: self-signed certificate for localhost, no Secret, no API writes")
    parser.add_argument("--publish-window", type=float, default=float(default("PUBLISH_WINDOW", 1.0)),
                        help="seconds between annotation writes (at most one patch per queue per window)")
    parser.add_argument("--metrics-port", type=int, default=int(default("METRICS_PORT", 8080)),
                        help="plain-HTTP port for /metrics, /healthz and /readyz")
    parser.add_argument("--log-format", choices=[f.value for f in LogFormat],
                        default=default("LOG_FORMAT", defaults.log_format.value),
                        help="json for machines, text for humans")


def from_arguments(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    schedulers = args.schedulers or [s for s in env.get("CARDQUOTA_SCHEDULERS", "volcano").split(",") if s]
    modes = [*filter(None, env.get("CARDQUOTA_FAILURE_MODES", "").split(",")), *args.failure_modes]
    return Settings(
        namespace=args.namespace,
        service=args.service,
        host=args.host,
        port=args.port,
        schedulers=frozenset(schedulers),
        scheduler_configmap=args.scheduler_configmap,
        failure_modes=parse_failure_modes(modes),
        tls_secret=args.tls_secret,
        deployment=args.deployment,
        cert_dir=args.cert_dir,
        dev=args.dev,
        log_format=LogFormat(args.log_format),
        publish_window=args.publish_window,
        metrics_port=args.metrics_port,
    )
