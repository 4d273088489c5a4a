"""The operator's configuration: one typed dataclass, read from the command line, each option falling back to an
environment variable (``cardquota operator --help`` names it), so the same settings work from a Deployment's env.

**Names no Service can set.** Kubernetes gives every pod variables for each Service of its namespace unless the pod
sets ``enableServiceLinks: false`` (ours do): for a Service ``cardquota`` with port 443, ``CARDQUOTA_SERVICE_HOST``,
``CARDQUOTA_SERVICE_PORT``, ``CARDQUOTA_PORT=tcp://10.96.12.34:443``, ``CARDQUOTA_PORT_443_TCP_ADDR`` and more. A
setting whose name has one of those shapes is set by whoever names a Service — so none of ours has one:
:func:`is_service_link_name` is the rule, and a unit test holds every ``CARDQUOTA_*`` name the code reads to it. The
ports were once ``CARDQUOTA_PORT``, ``CARDQUOTA_METRICS_PORT`` and ``CARDQUOTA_EXTENDER_PORT`` — the names Services
``cardquota``, ``cardquota-metrics`` and ``cardquota-extender`` produce — and are no longer read: they are now
``CARDQUOTA_WEBHOOK_PORT_NUMBER``, ``CARDQUOTA_METRICS_PORT_NUMBER`` and ``CARDQUOTA_EXTENDER_PORT_NUMBER``.

**Read when used.** The variables are read by the command that uses them (:func:`from_arguments`,
:func:`extender_settings`), not while the parser is built, so a variable meant for one command never stops another;
a value that cannot be read is an :class:`InputError` naming the variable and the form expected (one line, exit 2).
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from cardquota.core.errors import InputError
from cardquota.core.gate import HeadOfLine
from cardquota.core.policies.config import (
    DEFAULT_CARD_AWARE_SCHEDULERS,
    DEFAULT_SCHEDULER_CONFIGMAP,
    FailureMode,
    PolicyConfig,
)
from cardquota.core.policies.config import (
    read_flag as read_flag_value,
)
from cardquota.core.snapshot import DEFAULT_CARD_POLICY, CardPolicy, OutsideVolcano, UnquotedQueues
from cardquota.runtime.limits import ServerLimits, trusted_networks

KINDS = ("Queue", "PodGroup", "Job", "Pod", "Node", "ConfigMap")
T = TypeVar("T")

# Every environment variable the operator and the extender read (CARDQUOTA_DEBUG is the CLI's own).
ENV_NAMESPACE = "CARDQUOTA_NAMESPACE"
ENV_SERVICE = "CARDQUOTA_SERVICE"
ENV_SERVICE_ACCOUNT = "CARDQUOTA_SERVICE_ACCOUNT"
ENV_HOST = "CARDQUOTA_HOST"
ENV_WEBHOOK_PORT = "CARDQUOTA_WEBHOOK_PORT_NUMBER"
ENV_SCHEDULERS = "CARDQUOTA_SCHEDULERS"
ENV_SCHEDULER_CONFIGMAP = "CARDQUOTA_SCHEDULER_CONFIGMAP"
ENV_MAP_NAMESPACE_QUEUES = "CARDQUOTA_MAP_NAMESPACE_QUEUES"
ENV_FAILURE_MODES = "CARDQUOTA_FAILURE_MODES"
ENV_TLS_SECRET = "CARDQUOTA_TLS_SECRET"
ENV_DEPLOYMENT = "CARDQUOTA_DEPLOYMENT"
ENV_CERT_DIR = "CARDQUOTA_CERT_DIR"
ENV_DEV = "CARDQUOTA_DEV"
ENV_PUBLISH_WINDOW = "CARDQUOTA_PUBLISH_WINDOW"
ENV_CERT_GRACE_PERIOD = "CARDQUOTA_CERT_GRACE_PERIOD"
ENV_METRICS_PORT = "CARDQUOTA_METRICS_PORT_NUMBER"
ENV_LOG_FORMAT = "CARDQUOTA_LOG_FORMAT"
ENV_EXTENDER_PORT = "CARDQUOTA_EXTENDER_PORT_NUMBER"
ENV_SCHEDULER_CONF = "CARDQUOTA_SCHEDULER_CONF"
ENV_ROLE = "CARDQUOTA_ROLE"
ENV_CONTROLLER_SERVICE_ACCOUNT = "CARDQUOTA_CONTROLLER_SERVICE_ACCOUNT"
ENV_EXTENDER_SERVICE_ACCOUNT = "CARDQUOTA_EXTENDER_SERVICE_ACCOUNT"
ENV_MAX_CONNECTIONS = "CARDQUOTA_MAX_CONNECTIONS"
ENV_TRUSTED_CIDRS = "CARDQUOTA_TRUSTED_CIDRS"
ENV_HANDSHAKE_TIMEOUT = "CARDQUOTA_HANDSHAKE_TIMEOUT"
ENV_IDLE_TIMEOUT = "CARDQUOTA_IDLE_TIMEOUT"
ENV_CARD_GATE = "CARDQUOTA_CARD_GATE"
ENV_UNQUOTED_QUEUES = "CARDQUOTA_UNQUOTED_QUEUES"
ENV_OUTSIDE_VOLCANO = "CARDQUOTA_CARD_PODS_OUTSIDE_VOLCANO"
ENV_GATE_ORDER = "CARDQUOTA_GATE_ORDER"

_SERVICE_LINK_NAME = re.compile(
    r"[A-Z][A-Z0-9_]*_(?:"
    r"SERVICE_HOST|SERVICE_PORT(?:_[A-Z0-9_]+)?"  # <SVC>_SERVICE_HOST, <SVC>_SERVICE_PORT[_<PORT NAME>]
    r"|PORT(?:_[0-9]+_(?:TCP|UDP|SCTP)(?:_PROTO|_PORT|_ADDR)?)?"  # <SVC>_PORT, <SVC>_PORT_<n>_<PROTO>[_…]
    r")"
)
_SERVICE_LINK_VALUE = re.compile(r"(?:tcp|udp|sctp)://\S+")


def is_service_link_name(name: str) -> bool:
    """Whether Kubernetes could set ``name`` in a pod as a service link, for some Service of the pod's namespace.

    The kubelet (``pkg/kubelet/envvars``) names them after the Service, upper-cased with ``-`` as ``_`` (``<SVC>``
    below, a letter first), and after each named port likewise: ``<SVC>_SERVICE_HOST``, ``<SVC>_SERVICE_PORT``,
    ``<SVC>_SERVICE_PORT_<NAME>``, ``<SVC>_PORT``, ``<SVC>_PORT_<port>_<PROTO>`` and that with ``_PROTO``, ``_PORT``
    or ``_ADDR`` (PROTO: TCP, UDP or SCTP). Any Service name may come along, so only the shape is judged.
    """
    return _SERVICE_LINK_NAME.fullmatch(name) is not None


def read_port(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,5}", text) or int(text) > 65535:
        raise ValueError(text)
    return int(text)


def read_seconds(text: str) -> float:
    seconds = float(text)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(text)
    return seconds


def read_count(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", text) or int(text) < 1:
        raise ValueError(text)
    return int(text)


def read_positive_seconds(text: str) -> float:
    seconds = read_seconds(text)
    if seconds <= 0:
        raise ValueError(text)
    return seconds


def read_flag(text: str) -> bool:
    flag = read_flag_value(text)
    if flag is None:
        raise ValueError(text)
    return flag


def read_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(text)
    return names


PORT_FORM = "a port number (0 to 65535)"


def from_env(environ: Mapping[str, str], name: str, read: Callable[[str], T], form: str) -> T | None:
    """The variable ``name`` read with ``read`` (None when unset or empty). A value ``read`` refuses (ValueError) is
    an :class:`InputError` naming the variable, the value and ``form``."""
    text = environ.get(name, "")
    if not text:
        return None
    try:
        return read(text)
    except ValueError:
        shown = repr(text if len(text) <= 80 else f"{text[:77]}...")
        link = (" (this looks like a Kubernetes service link — a Service's address, not a cardquota setting)"
                if _SERVICE_LINK_VALUE.fullmatch(text) else "")
        raise InputError(f"{shown}: expected {form}{link}", where=name) from None


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class Role(StrEnum):
    """What one ``cardquota operator`` process does (docs/scale.md, "At scale: the webhooks and the controllers in
    two Deployments")."""

    ALL = "all"
    """The admission server and the controllers, over one cache of every cached kind, pods included."""
    WEBHOOK = "webhook"
    """The admission server only, over a cache without pods: no policy reads a pod from the cache, so a pod event
    storm never reaches this process; a queue's usage is read from what the controller published on it."""
    CONTROLLER = "controller"
    """The controllers only (node card types, queue usage, events, metrics of queues), over every cached kind."""

    @property
    def serves_webhooks(self) -> bool:
        return self is not Role.CONTROLLER

    @property
    def runs_controllers(self) -> bool:
        return self is not Role.WEBHOOK

    @property
    def follows_pods(self) -> bool:
        return self is not Role.WEBHOOK


@dataclass(frozen=True)
class Settings:
    namespace: str = "cardquota-system"
    service: str = "cardquota"
    host: str = "0.0.0.0"
    port: int = 9443
    schedulers: frozenset[str] = DEFAULT_CARD_AWARE_SCHEDULERS
    scheduler_configmap: str = DEFAULT_SCHEDULER_CONFIGMAP
    map_namespace_queues: bool = False
    """:attr:`PolicyConfig.map_namespace_queues`; when on, the cache also follows Namespaces."""
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
    service_account: str = "cardquota"
    """The operator's own service account: the webhooks never refuse its writes (the annotations it keeps)."""
    controller_service_account: str = "cardquota-controller"
    """The controllers' service account when they run in a Deployment of their own (``--role controller``, with
    least privilege each): the webhooks never refuse its writes either."""
    extender_service_account: str = "cardquota-extender"
    """The scheduler extender's service account (components/extender): it writes the mGPU placement annotations
    (``vke.volcengine.com/gpu-index-container-*``), which the pod webhook refuses from anyone else once the pod is
    bound; the webhooks never refuse its writes."""
    role: Role = Role.ALL
    cert_grace_period: float = 60.0
    """Seconds a renewed CA sits in the webhooks' caBundle before the serving certificate it signed is served, and
    again (plus one check interval) before the CA it replaced leaves the caBundle: long enough for every API server
    to see the configuration change (its webhook configuration informer) and for every replica to reload."""
    limits: ServerLimits = field(default_factory=ServerLimits)
    """What a caller can hold on each port (the admission server's, the metrics one)."""
    card_gate: bool = False
    """Admission by scheduling gate: the pod webhook gates card pods, the controllers' leader lifts the gate when
    their cards fit (:mod:`cardquota.core.gate`). The webhook and the controller must agree: a gate nobody lifts
    holds its pod."""
    gate_order: HeadOfLine = HeadOfLine.BEST_EFFORT_FIFO
    """Whether a gang or pod that does not fit holds back the later ones of its queue (StrictFIFO) or not."""
    card_policy: CardPolicy = DEFAULT_CARD_POLICY
    """How many cards a queue without a card quota holds, and what becomes of card pods Volcano does not schedule
    (:class:`~cardquota.core.snapshot.CardPolicy`): the snapshot every path reads carries it."""

    @property
    def own_users(self) -> frozenset[str]:
        """The user names the API server gives cardquota's own requests in an AdmissionReview: this process's, and
        the controllers' when they run apart (the ones the webhooks' ``not-cardquota-itself`` conditions leave
        out)."""
        return frozenset(f"system:serviceaccount:{self.namespace}:{account}"
                         for account in (self.service_account, self.controller_service_account))

    @property
    def unrefused_users(self) -> frozenset[str]:
        """Whose writes the admission server allows without judging them: cardquota's own (:attr:`own_users`) and
        the extender's, the one writer of the mGPU placement annotations no one else may change on a bound pod. The
        extender writes nothing but pods' annotations, so no webhook condition needs to leave it out."""
        return self.own_users | {f"system:serviceaccount:{self.namespace}:{self.extender_service_account}"}

    @property
    def policy(self) -> PolicyConfig:
        return PolicyConfig(card_aware_schedulers=self.schedulers, scheduler_configmap=self.scheduler_configmap,
                            map_namespace_queues=self.map_namespace_queues, card_gate=self.card_gate)


@dataclass(frozen=True)
class ExtenderSettings:
    host: str = "0.0.0.0"
    port: int = 8713
    scheduler_conf: str | None = None
    """volcano-scheduler.conf, for the plugins' arguments (their defaults when None)."""
    schedulers: frozenset[str] = DEFAULT_CARD_AWARE_SCHEDULERS
    """The names Volcano schedules pods under (``spec.schedulerName``): their pods count against their queue's quota
    without a PodGroup, and only theirs get mGPU results patched on."""
    limits: ServerLimits = field(default_factory=ServerLimits)
    card_policy: CardPolicy = DEFAULT_CARD_POLICY
    """As the operator's (:attr:`Settings.card_policy`): the scheduling rules read it from the session's snapshot."""


def parse_failure_modes(items: Sequence[str]) -> dict[str, FailureMode]:
    """``["Pod=closed", "Queue=open"]`` → modes; raises ValueError naming a bad item."""
    modes: dict[str, FailureMode] = {}
    for item in items:
        kind, _, mode = item.partition("=")
        if kind not in KINDS or mode not in {m.value for m in FailureMode}:
            raise ValueError(f"{item!r}: expected KIND=open|closed with KIND one of {', '.join(KINDS)}")
        modes[kind] = FailureMode(mode)
    return modes


def add_card_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """``--unquoted-queues`` and ``--card-pods-outside-volcano`` (:class:`~cardquota.core.snapshot.CardPolicy`), for
    the operator and the extender alike (each defaults to None: :func:`card_policy_from` reads the environment)."""
    parser.add_argument("--unquoted-queues", choices=[value.value for value in UnquotedQueues],
                        help="how many cards a queue without volcano.sh/card.quota holds: zero, as the capacity-card "
                        "design says (card work there is refused at apply time), or unlimited (pods naming no card "
                        f"type are not limited there) (env {ENV_UNQUOTED_QUEUES}; default zero)")
    parser.add_argument("--card-pods-outside-volcano", choices=[value.value for value in OutsideVolcano],
                        help="card pods another scheduler places, which Volcano charges to no queue: enforce (charged "
                        "to the queue Volcano would give them: gated with --card-gate, refused without it), warn or "
                        f"off (env {ENV_OUTSIDE_VOLCANO}; default warn: cluster add-ons such as GPU validators "
                        "request cards on the default scheduler)")


def card_policy_from(args: argparse.Namespace, env: Mapping[str, str]) -> CardPolicy:
    """The :class:`~cardquota.core.snapshot.CardPolicy` of :func:`add_card_policy_arguments`' options, else their
    variables, else the defaults."""
    return CardPolicy(
        unquoted_queues=UnquotedQueues(_chosen(getattr(args, "unquoted_queues", None), env, ENV_UNQUOTED_QUEUES,
                                               UnquotedQueues, " or ".join(UnquotedQueues),
                                               DEFAULT_CARD_POLICY.unquoted_queues)),
        outside_volcano=OutsideVolcano(_chosen(getattr(args, "card_pods_outside_volcano", None), env,
                                               ENV_OUTSIDE_VOLCANO, OutsideVolcano, " or ".join(OutsideVolcano),
                                               DEFAULT_CARD_POLICY.outside_volcano)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The operator's options. Each defaults to None ("not given"): :func:`from_arguments` then reads the
    environment variable named in its help, else takes the :class:`Settings` default."""
    defaults = Settings()
    parser.add_argument("--namespace", help=f"namespace of the operator, its Service and TLS Secret (env "
                        f"{ENV_NAMESPACE}; default {defaults.namespace})")
    parser.add_argument("--service", help=f"name of the webhook Service, for the certificate's DNS names (env "
                        f"{ENV_SERVICE}; default {defaults.service})")
    parser.add_argument("--service-account", help="the operator's own service account, whose writes the webhooks "
                        f"never refuse (env {ENV_SERVICE_ACCOUNT}; default {defaults.service_account})")
    parser.add_argument("--controller-service-account", help="the controllers' service account when they run in a "
                        "Deployment of their own; the webhooks never refuse its writes either (env "
                        f"{ENV_CONTROLLER_SERVICE_ACCOUNT}; default {defaults.controller_service_account})")
    parser.add_argument("--extender-service-account", help="the scheduler extender's service account, the one "
                        "writer of the mGPU placement annotations of bound pods; the webhooks never refuse its writes "
                        f"(env {ENV_EXTENDER_SERVICE_ACCOUNT}; default {defaults.extender_service_account})")
    parser.add_argument("--host", help=f"address to listen on (env {ENV_HOST}; default {defaults.host})")
    parser.add_argument("--port", "--webhook-port-number", dest="port", type=int,
                        help=f"HTTPS port of the admission server (env {ENV_WEBHOOK_PORT}; "
                        f"default {defaults.port})")
    parser.add_argument("--card-aware-scheduler", "--schedulers", dest="schedulers", action="append",
                        help=f"scheduler that enforces card quotas, repeatable (env {ENV_SCHEDULERS}, "
                        f"comma-separated; default {', '.join(sorted(defaults.schedulers))})")
    parser.add_argument("--scheduler-configmap", help=f"name of the Volcano scheduler ConfigMap (env "
                        f"{ENV_SCHEDULER_CONFIGMAP}; default {defaults.scheduler_configmap}; the schedulerconfig "
                        "webhook's matchCondition in manifests/base/webhooks.yaml names it too: patch it alike)")
    parser.add_argument("--map-namespace-queues", action="store_true", default=None,
                        help="the cluster's Volcano maps namespaces to queues (its PodGroup mutation webhook or "
                        "policy is on): a PodGroup-to-be with queue default is checked against its namespace's "
                        "scheduling.volcano.sh/queue-name, and Namespaces are watched (needs list/watch on "
                        f"namespaces; env {ENV_MAP_NAMESPACE_QUEUES}=1; default off)")
    parser.add_argument("--card-gate", action="store_true", default=None,
                        help="admission by scheduling gate: card pods are created gated and the controllers' leader "
                        "lifts the gate when their cards fit their queue and every ancestor (the webhook and the "
                        f"controller both need it; env {ENV_CARD_GATE}=1; default off)")
    add_card_policy_arguments(parser)
    parser.add_argument("--gate-order", choices=[order.value for order in HeadOfLine],
                        help="a gang or pod that does not fit: later ones of its queue may go first (BestEffortFIFO) "
                        f"or wait behind it (StrictFIFO) (env {ENV_GATE_ORDER}; default {defaults.gate_order})")
    parser.add_argument("--failure-mode", "--failure-modes", dest="failure_modes", action="append", default=[],
                        metavar="KIND=MODE",
                        help="open or closed per kind when cardquota cannot check, repeatable (env "
                        f"{ENV_FAILURE_MODES}, comma-separated; defaults: Pod=open, Node=open, others closed)")
    parser.add_argument("--tls-secret", help=f"Secret holding the CA and serving certificate (env {ENV_TLS_SECRET}; "
                        f"default {defaults.tls_secret})")
    parser.add_argument("--deployment", help="the operator's own Deployment, made owner of the TLS Secret (env "
                        f"{ENV_DEPLOYMENT}; default {defaults.deployment})")
    parser.add_argument("--cert-dir", help=f"folder for the serving certificate files (env {ENV_CERT_DIR}; "
                        "default: a temporary folder)")
    parser.add_argument("--dev", action="store_true", default=None,
                        help="local development: self-signed certificate for localhost, no Secret, no API writes "
                        f"(env {ENV_DEV}=1)")
    parser.add_argument("--publish-window", type=float, help="seconds between annotation writes (at most one "
                        f"patch per queue per window; env {ENV_PUBLISH_WINDOW}; default {defaults.publish_window})")
    parser.add_argument("--cert-grace-period", type=float, help="seconds a renewed CA is in the webhooks' caBundle "
                        "before the serving certificate switches to it, and the old CA stays after the switch (env "
                        f"{ENV_CERT_GRACE_PERIOD}; default {defaults.cert_grace_period:g})")
    parser.add_argument("--metrics-port", "--metrics-port-number", dest="metrics_port", type=int,
                        help="plain-HTTP port for /metrics, /healthz and /readyz (env "
                        f"{ENV_METRICS_PORT}; default {defaults.metrics_port})")
    parser.add_argument("--role", choices=[r.value for r in Role], help="all: the webhooks and the controllers; "
                        "webhook: the admission server only, over a cache without pods (run the controllers in "
                        "another Deployment); controller: the controllers only "
                        f"(env {ENV_ROLE}; default {defaults.role.value})")
    parser.add_argument("--log-format", choices=[f.value for f in LogFormat], help="json for machines, text for "
                        f"humans (env {ENV_LOG_FORMAT}; default {defaults.log_format.value})")
    add_limit_arguments(parser)


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """The options bounding what callers can hold on each port (:class:`ServerLimits`), for the operator and the
    extender."""
    defaults = ServerLimits()
    parser.add_argument("--max-connections", type=int, help="connections at once on each port, TLS handshakes "
                        f"included; at the cap the one that has made the least progress, of the source holding the "
                        f"most, makes room (env {ENV_MAX_CONNECTIONS}; default {defaults.max_connections})")
    parser.add_argument("--trusted-cidrs", metavar="CIDR,…", help="comma-separated addresses or CIDRs of the callers "
                        "the ports are for — the API server's (webhooks), the scheduler's (extender): exempt from the "
                        f"per-source shares, with a reserved part of what is shared (env {ENV_TRUSTED_CIDRS}; "
                        "default none)")
    parser.add_argument("--handshake-timeout", type=float, help="seconds a TLS handshake may take (env "
                        f"{ENV_HANDSHAKE_TIMEOUT}; default {defaults.handshake_timeout:g})")
    parser.add_argument("--idle-timeout", type=float, help="seconds a connection may wait for its next request "
                        f"(env {ENV_IDLE_TIMEOUT}; default {defaults.idle_timeout:g})")


def limits_from(args: argparse.Namespace, env: Mapping[str, str]) -> ServerLimits:
    """The :class:`ServerLimits` the options (None when not given) or their variables say."""
    defaults = ServerLimits()
    positive = "a number of seconds above 0"
    limits = ServerLimits(
        max_connections=_chosen(getattr(args, "max_connections", None), env, ENV_MAX_CONNECTIONS, read_count,
                                "a whole number, 1 or more", defaults.max_connections),
        handshake_timeout=_chosen(getattr(args, "handshake_timeout", None), env, ENV_HANDSHAKE_TIMEOUT,
                                  read_positive_seconds, positive, defaults.handshake_timeout),
        idle_timeout=_chosen(getattr(args, "idle_timeout", None), env, ENV_IDLE_TIMEOUT, read_positive_seconds,
                             positive, defaults.idle_timeout),
        trusted_networks=_trusted_cidrs(getattr(args, "trusted_cidrs", None), env),
    )
    for option, value in (("--max-connections", limits.max_connections),
                          ("--handshake-timeout", limits.handshake_timeout), ("--idle-timeout", limits.idle_timeout)):
        if not value > 0:
            raise InputError(f"{value}: expected a value above 0", where=option)
    return limits


def _trusted_cidrs(given: str | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """The ``--trusted-cidrs`` list (else its variable's), each checked to be an address or CIDR."""
    text, where = (given, "--trusted-cidrs") if given is not None else (env.get(ENV_TRUSTED_CIDRS), ENV_TRUSTED_CIDRS)
    cidrs = tuple(part.strip() for part in (text or "").split(",") if part.strip())
    try:
        trusted_networks(cidrs)
    except ValueError as error:
        raise InputError(str(error), where=where) from None
    return cidrs


def _chosen(given: T | None, environ: Mapping[str, str], name: str, read: Callable[[str], T], form: str,
            default: T) -> T:
    """The command line's value, else the environment's, else the default."""
    if given is not None:
        return given
    value = from_env(environ, name, read, form)
    return default if value is None else value


def _chosen_text(given: str | None, environ: Mapping[str, str], name: str, default: str) -> str:
    return given if given is not None else environ.get(name) or default


def from_arguments(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of ``cardquota operator``; raises InputError naming the variable or option that cannot be
    read."""
    env = os.environ if environ is None else environ
    defaults = Settings()
    schedulers = args.schedulers or from_env(env, ENV_SCHEDULERS, read_names, "scheduler names, comma-separated")
    kinds_form = f"KIND=open|closed items, comma-separated, with KIND one of {', '.join(KINDS)}"
    env_modes = from_env(env, ENV_FAILURE_MODES, lambda text: parse_failure_modes(read_names(text)), kinds_form)
    try:
        modes = {**(env_modes or {}), **parse_failure_modes(args.failure_modes)}
    except ValueError as error:
        raise InputError(str(error), where="--failure-mode") from None
    log_format = _chosen(args.log_format, env, ENV_LOG_FORMAT, LogFormat, "text or json", defaults.log_format)
    role = _chosen(args.role, env, ENV_ROLE, Role, "all, webhook or controller", defaults.role)
    return Settings(
        role=Role(role),
        namespace=_chosen_text(args.namespace, env, ENV_NAMESPACE, defaults.namespace),
        service=_chosen_text(args.service, env, ENV_SERVICE, defaults.service),
        service_account=_chosen_text(args.service_account, env, ENV_SERVICE_ACCOUNT, defaults.service_account),
        controller_service_account=_chosen_text(args.controller_service_account, env,
                                                ENV_CONTROLLER_SERVICE_ACCOUNT, defaults.controller_service_account),
        extender_service_account=_chosen_text(args.extender_service_account, env, ENV_EXTENDER_SERVICE_ACCOUNT,
                                              defaults.extender_service_account),
        host=_chosen_text(args.host, env, ENV_HOST, defaults.host),
        port=_chosen(args.port, env, ENV_WEBHOOK_PORT, read_port, PORT_FORM, defaults.port),
        schedulers=frozenset(schedulers) if schedulers else defaults.schedulers,
        scheduler_configmap=_chosen_text(args.scheduler_configmap, env, ENV_SCHEDULER_CONFIGMAP,
                                         defaults.scheduler_configmap),
        map_namespace_queues=_chosen(args.map_namespace_queues, env, ENV_MAP_NAMESPACE_QUEUES, read_flag, "1 or 0",
                                     defaults.map_namespace_queues),
        failure_modes=modes,
        tls_secret=_chosen_text(args.tls_secret, env, ENV_TLS_SECRET, defaults.tls_secret),
        deployment=_chosen_text(args.deployment, env, ENV_DEPLOYMENT, defaults.deployment),
        cert_dir=_chosen_text(args.cert_dir, env, ENV_CERT_DIR, defaults.cert_dir),
        dev=_chosen(args.dev, env, ENV_DEV, read_flag, "1 or 0", defaults.dev),
        log_format=LogFormat(log_format),
        publish_window=_chosen(args.publish_window, env, ENV_PUBLISH_WINDOW, read_seconds,
                               "a number of seconds, 0 or more", defaults.publish_window),
        metrics_port=_chosen(args.metrics_port, env, ENV_METRICS_PORT, read_port, PORT_FORM, defaults.metrics_port),
        cert_grace_period=_chosen(args.cert_grace_period, env, ENV_CERT_GRACE_PERIOD, read_seconds,
                                  "a number of seconds, 0 or more", defaults.cert_grace_period),
        limits=limits_from(args, env),
        card_gate=_chosen(getattr(args, "card_gate", None), env, ENV_CARD_GATE, read_flag, "1 or 0",
                          defaults.card_gate),
        gate_order=HeadOfLine(_chosen(getattr(args, "gate_order", None), env, ENV_GATE_ORDER, HeadOfLine,
                                      " or ".join(HeadOfLine), defaults.gate_order)),
        card_policy=card_policy_from(args, env),
    )


def extender_settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ExtenderSettings:
    """The settings of ``cardquota extender`` (options ``--host``, ``--port``, ``--scheduler-conf``,
    ``--schedulers``, each None when not given); raises InputError naming a variable that cannot be read."""
    env = os.environ if environ is None else environ
    defaults = ExtenderSettings()
    schedulers = args.schedulers or from_env(env, ENV_SCHEDULERS, read_names, "scheduler names, comma-separated")
    return ExtenderSettings(
        host=_chosen_text(args.host, env, ENV_HOST, defaults.host),
        port=_chosen(args.port, env, ENV_EXTENDER_PORT, read_port, PORT_FORM, defaults.port),
        scheduler_conf=args.scheduler_conf or env.get(ENV_SCHEDULER_CONF) or None,
        schedulers=frozenset(schedulers) if schedulers else defaults.schedulers,
        limits=limits_from(args, env),
        card_policy=card_policy_from(args, env),
    )
