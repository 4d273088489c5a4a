"""Entry points of the ``cardquota`` and ``kubectl-cardquota`` commands.

Exit codes: 0 success; 1 ``check`` denied an object; 2 unreadable input or bad usage (one line on stderr, never a
traceback); 3 an internal error (one line; set ``CARDQUOTA_DEBUG=1`` for the traceback); 141 the reader of the output
went away (``… | head -1``): nothing more is written, not even a message (:data:`EXIT_CLOSED_PIPE`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import functools
import io
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO, TypeVar

from cardquota import __version__
from cardquota.cli import output
from cardquota.cli.check import (
    CheckResult,
    Identity,
    add_card_policy_options,
    add_namespace_queues_option,
    apply_patch,
    card_policy_of,
    identity,
    in_namespace,
    skipped_notes,
    stored_as,
    to_admit,
    validate,
)
from cardquota.cli.output import OutputFormat
from cardquota.core.cards import NodeCards
from cardquota.core.errors import InputError
from cardquota.core.gate import HeadOfLine
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Manifest, ObjectKey
from cardquota.core.policies import admit
from cardquota.core.policies.config import (
    DEFAULT_CARD_AWARE_SCHEDULERS,
    DEFAULT_SCHEDULER_CONFIGMAP,
    PolicyConfig,
)
from cardquota.core.schedconf.source import EXTENDER_CONFIGMAP
from cardquota.core.scheduling.capacity_card import CARD_UNLIMITED_CPU_MEMORY
from cardquota.core.scheduling.session import SchedulerConfig, read_scheduler_config
from cardquota.core.scheduling.simulate import simulate
from cardquota.core.snapshot import (
    ClusterSnapshot,
    Kind,
    describe,
    kind_of,
    node_record,
    object_key,
    podgroup_as_created,
)
from cardquota.loader import Document, load_paths

KUBECTL_PROG = "kubectl cardquota"
EXIT_OK = 0
EXIT_DENIED = 1
EXIT_INPUT = 2
EXIT_INTERNAL = 3
EXIT_CLOSED_PIPE = 141
"""The output's reader closed it (``cardquota usage -o json | head -1``): a quiet exit with 128 + SIGPIPE, the status
kubectl and coreutils end with there (a Go program writing to a closed stdout or stderr dies of SIGPIPE:
``epipecheck`` in Go's ``src/os/file_unix.go``; ``head``/``seq`` keep SIGPIPE's default action), so a shell sees the
same 141 and ``set -o pipefail`` treats a cut-off cardquota as it treats a cut-off kubectl. Not 0: ``check``'s verdict
(1 denied) was never read, and a gate must not read a cut-off run as a pass."""

T = TypeVar("T")
Command = Callable[[argparse.Namespace, TextIO, TextIO], int]


def main(argv: Sequence[str] | None = None) -> int:
    return run("cardquota", argv)


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    return run(KUBECTL_PROG, argv)


def run(prog: str, argv: Sequence[str] | None = None, stdout: TextIO | None = None,
        stderr: TextIO | None = None) -> int:
    out = _tolerant(stdout if stdout is not None else _buffered_stdout())
    err = _tolerant(stderr if stderr is not None else sys.stderr)
    try:
        code = _run(prog, argv, out, err)
        out.flush()  # here, not at interpreter exit, where a closed pipe would print "Exception ignored …"
        err.flush()
        return code
    except BrokenPipeError:  # from any command, any format, the help, or the flush above
        _discard_closed([fd for fd, given in ((1, stdout), (2, stderr)) if given is None])
        return EXIT_CLOSED_PIPE


def _run(prog: str, argv: Sequence[str] | None, out: TextIO, err: TextIO) -> int:
    parser = build_kubectl_parser(prog, out, err) if prog == KUBECTL_PROG else build_parser(prog, out, err)
    try:
        args, extras = parser.parse_known_args(argv)
        if extras and isinstance(getattr(args, "words", None), list) and not any(e.startswith("-") for e in extras):
            args.words += extras  # words after options (argparse stops filling a '*' positional at the first option)
        elif extras:
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
    except SystemExit as exit_:
        return int(exit_.code or 0)
    command: Command = args.command
    try:
        _stdin_at_most_once(args)
        if prog == KUBECTL_PROG:
            from cardquota.cli.kubectl import refuse_unused_namespace_options

            refuse_unused_namespace_options(args, command.__name__.removesuffix("_command"))
        return command(args, out, err)
    except InputError as error:
        err.write(f"{prog}: error: {error}\n")
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # (an OSError: not an internal error) run() ends quietly
    except Exception as error:
        if os.environ.get("CARDQUOTA_DEBUG"):
            traceback.print_exc(file=err)
        err.write(f"{prog}: internal error: {type(error).__name__}: {error} (set CARDQUOTA_DEBUG=1 for details)\n")
        return EXIT_INTERNAL


class _Formatter(argparse.HelpFormatter):
    """argparse's help, wrapped to the terminal, except an epilog of examples (``examples:``, one command a line),
    printed as written. (``RawDescriptionHelpFormatter`` would keep the long descriptions unwrapped too.)"""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        from cardquota.cli.kubectl import EXAMPLES_HEADING

        if text.startswith(EXAMPLES_HEADING):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class _Parser(argparse.ArgumentParser):
    """argparse, writing help and usage errors to the streams the command was given, and suggesting the closest
    choice for a mistyped command or value (``invalid choice: 'usge' … did you mean 'usage'?``); its subcommands'
    epilogs of examples printed as written (:class:`_Formatter`)."""

    out: TextIO = sys.stdout
    err: TextIO = sys.stderr

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if found is not None:
            choices = re.findall(r"'([^']*)'", found.group(2))
            close = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=0.5)
            if close:
                message += f"; did you mean '{close[0]}'?"
        super().error(message)

    def _print_message(self, message: str, file: object = None) -> None:
        if message:
            (self.out if file is sys.stdout else self.err).write(message)


def build_parser(prog: str, out: TextIO | None = None, err: TextIO | None = None) -> argparse.ArgumentParser:
    _Parser.out = out if out is not None else sys.stdout
    _Parser.err = err if err is not None else sys.stderr
    parser = _Parser(
        prog=prog,
        description="Card-level GPU quotas for Volcano: discover card types and account queue usage.",
        epilog=f"On the live cluster: {KUBECTL_PROG}, the kubectl plugin this package also installs "
        f"(kubectl-cardquota): usage, nodes, explain (why is it pending?), check, crd, doctor, scheduler-conf; see "
        f"'{KUBECTL_PROG} --help'.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    from cardquota.cli import kubectl, schedconf
    from cardquota.operator import settings  # the operator's and extender's options (their dependencies load later)

    discover = commands.add_parser(
        "discover",
        help="list the card types each Node offers",
        description="List the card types each Node offers (whole, MPS and MIG), with cluster totals.",
        epilog=kubectl.examples("cardquota discover -f examples/cluster.yaml -o table",
                                "kubectl get nodes -o yaml | cardquota discover -f -"),
    )
    discover.add_argument("-f", "--filename", dest="files", action="append", required=True, metavar="FILE",
                          help="YAML/JSON manifests (file, directory or - for stdin); repeatable")
    _add_output(discover)
    discover.set_defaults(command=discover_command)

    usage = commands.add_parser(
        "usage",
        help="show each queue's card quota, allocated, inqueue and pending cards",
        description="Show each Queue's card quota and the cards its pods hold (allocated), its Inqueue "
        "PodGroups have reserved (inqueue) and its unbound pods wait for (pending).",
        epilog=kubectl.examples("cardquota usage --cluster examples/cluster.yaml -o table",
                                "kubectl get nodes,queues,podgroups,pods -A -o yaml | cardquota usage --cluster -"),
    )
    usage.add_argument("--cluster", dest="files", action="append", default=[], metavar="CLUSTER",
                       help="a cluster snapshot: Nodes, Queues, PodGroups and Pods (file, directory or -); "
                       "repeatable")
    usage.add_argument("-f", dest="files", action="append", help=argparse.SUPPRESS)  # an alias older scripts use
    add_namespace_queues_option(usage)
    add_card_policy_options(usage)
    _add_output(usage)
    usage.set_defaults(command=usage_command)

    check = commands.add_parser(
        "check",
        help="admit manifests offline, exactly as the admission webhooks would",
        description="Admit each document of FILE in order, as kubectl apply would send it (an object already in "
        "the snapshot is an UPDATE); each allowed object, mutated, joins the snapshot for the documents after it. "
        "Exit 0 when all are allowed, 1 when any is denied (or, with --strict, warned), 2 for unreadable input.",
        epilog=kubectl.examples("cardquota check -f manifests/ --cluster cluster.yaml -o table",
                                "cardquota check -f job.yaml --cluster cluster.yaml --strict   # a CI gate"),
    )
    check.add_argument("-f", "--filename", dest="files", action="append", required=True, metavar="FILE",
                       help="manifests to admit (file, directory or -); repeatable")
    check.add_argument("--cluster", dest="cluster", action="append", default=[], metavar="CLUSTER",
                       help="the cluster the manifests are applied to (Nodes, Queues, PodGroups, Pods); without "
                       "it, rules that need the cluster are skipped with a warning")
    check.add_argument("--card-aware-scheduler", dest="schedulers", action="append", metavar="NAME",
                       help=f"a scheduler that enforces card quotas (repeatable; default: "
                       f"{', '.join(sorted(DEFAULT_CARD_AWARE_SCHEDULERS))})")
    check.add_argument("--scheduler-configmap", default=DEFAULT_SCHEDULER_CONFIGMAP, metavar="NAME",
                       help="name of the Volcano scheduler ConfigMap (default: %(default)s)")
    add_namespace_queues_option(check)
    add_card_policy_options(check)
    add_card_gate_option(check)
    add_strict_option(check)
    _add_output(check, wide=False)
    check.set_defaults(command=check_command)

    simulate = commands.add_parser(
        "simulate",
        help="replay a workload through enqueue and allocate: where each pod would go, and why not",
        description="Replay the workload (PodGroups, Pods, Volcano Jobs) on the cluster snapshot with the "
        "scheduler rules (capacity-card, crossquota, mGPU, DRA queue quota) and Volcano's gang semantics: each pod's "
        "node and card type (GPU indexes for mGPU), each PodGroup's phase, and the reason for everything not "
        "placed. Exit 0 when everything is placed, 1 when something is not, 2 for unreadable input.",
        epilog=kubectl.examples("cardquota simulate --cluster examples/cluster.yaml "
                                "-f examples/simulate/workload.yaml -o table"),
    )
    simulate.add_argument("--cluster", dest="cluster", action="append", required=True, metavar="CLUSTER",
                          help="the cluster: Nodes, Queues, PodGroups, Pods (and the scheduler ConfigMap, "
                          "ResourceClaims); repeatable")
    simulate.add_argument("-f", "--filename", dest="files", action="append", required=True, metavar="FILE",
                          help="the workload, in submission order (file, directory or -); repeatable")
    simulate.add_argument("--scheduler-configmap", default=DEFAULT_SCHEDULER_CONFIGMAP, metavar="NAME",
                          help="the Volcano scheduler ConfigMap to read the plugins' arguments from, when the "
                          "cluster or workload holds it and not the extender's conf (ConfigMap "
                          f"{EXTENDER_CONFIGMAP}, read first, as the extender does) (default: %(default)s; "
                          "otherwise the plugins' defaults, crossquota and mGPU off)")
    simulate.add_argument("--card-gate", choices=("on", "off"), default="on",
                          help="on (default, as the shipped manifests run cardquota): card pods are created at the "
                          "card-quota gate, which lets a group through when its cards fit its queue and every "
                          "ancestor, before Volcano places it; off: Volcano places them, the extender checking each "
                          "task's quota")
    simulate.add_argument("--gate-order", choices=[order.value for order in HeadOfLine],
                          default=HeadOfLine.BEST_EFFORT_FIFO.value,
                          help="with the gate, as the operator's --gate-order: a group that does not fit lets the "
                          "next ones of its queue go first (BestEffortFIFO, the default) or holds them (StrictFIFO)")
    add_namespace_queues_option(simulate)
    add_card_policy_options(simulate)
    _add_output(simulate)
    simulate.set_defaults(command=simulate_command)

    schedconf.add_command(commands, kubectl.cluster_options(_Parser))  # (the same command as kubectl cardquota's)
    extender = commands.add_parser(
        "extender",
        help="serve the Volcano scheduler's extender plugin: the card, crossquota, mGPU and DRA rules",
        description="Serve the verbs of Volcano's extender plugin (onSessionOpen, predicate, prioritize, "
        "jobEnqueueable, queueOverused, jobReady, allocateFunc, deallocateFunc) over HTTP with cardquota's rules, "
        "so a stock Volcano scheduler enforces them. The cluster is kept by watches (nodes, queues, podgroups, pods, "
        "DRA ResourceClaims), so onSessionOpen's body is never read. mGPU results are patched onto the pods.",
        epilog=kubectl.examples("cardquota extender --port 8713 --scheduler-conf /etc/cardquota/volcano-scheduler.conf",
                                "cardquota extender --session-from-body --no-patch   # no API access: small clusters, "
                                "tests"),
    )
    # The environment is read when the command runs (settings.extender_settings), never while building the parser.
    extender_defaults = settings.ExtenderSettings()
    extender.add_argument("--host", help=f"address to listen on (env {settings.ENV_HOST}; default "
                          f"{extender_defaults.host})")
    extender.add_argument("--port", "--extender-port-number", dest="port", type=int,
                          help=f"HTTP port (env {settings.ENV_EXTENDER_PORT}; default "
                          f"{extender_defaults.port})")
    extender.add_argument("--scheduler-conf", metavar="FILE",
                          help="volcano-scheduler.conf, for the plugins' arguments (the scheduler ConfigMap "
                          f"mounted as a file; env {settings.ENV_SCHEDULER_CONF}); default: the plugins' defaults")
    extender.add_argument("--card-aware-scheduler", "--schedulers", dest="schedulers", action="append",
                          metavar="NAME", help="a scheduler name Volcano serves (spec.schedulerName), repeatable: its "
                          "pods count against their queue without a PodGroup, and only its pending pods get mGPU "
                          f"results patched on (env {settings.ENV_SCHEDULERS}, comma-separated; default "
                          f"{', '.join(sorted(DEFAULT_CARD_AWARE_SCHEDULERS))})")
    extender.add_argument("--no-patch", action="store_true",
                          help="do not patch mGPU results onto pods")
    settings.add_card_policy_arguments(extender)
    extender.add_argument("--session-from-body", action="store_true",
                          help="read the cluster from each onSessionOpen body instead of watching it (no Kubernetes "
                          "API access needed with --no-patch; parses the whole cluster every cycle: for small "
                          "clusters and tests)")
    settings.add_limit_arguments(extender)
    extender.set_defaults(command=extender_command)

    operator = commands.add_parser(
        "operator",
        help="run the admission webhooks (and the cache's watch handlers) against the cluster",
        description="Run the HTTPS admission server for Queues, PodGroups, Volcano Jobs, Pods, Nodes and the "
        "scheduler ConfigMap, fed by an in-memory cluster cache. Each option also reads the environment variable "
        "its help names.",
        epilog=kubectl.examples("cardquota operator --log-format=json   # as the Deployment runs it (CARDQUOTA_* set)",
                                "cardquota operator --role webhook      # the webhooks only; --role controller apart"),
    )
    settings.add_arguments(operator)
    operator.set_defaults(command=operator_command)
    return parser


def build_kubectl_parser(prog: str, out: TextIO | None = None, err: TextIO | None = None) -> argparse.ArgumentParser:
    """``kubectl cardquota``: usage, nodes, explain and check against the live cluster (or ``--cluster`` files)."""
    from cardquota.cli import kubectl

    _Parser.out = out if out is not None else sys.stdout
    _Parser.err = err if err is not None else sys.stderr
    parser = _Parser(prog=prog, description="Card quotas on the cluster kubectl points at: each queue's usage, the "
                     "nodes' card types, why a pod or job is pending, and what the admission webhooks would say.",
                     epilog="Offline, on manifests and cluster dumps (no cluster): cardquota discover, usage, check, "
                     "simulate; see 'cardquota --help'.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    common = kubectl.cluster_options(_Parser)
    kubectl.add_commands(commands, common)
    check = commands.add_parser(
        "check", parents=[common], help="admit manifests against the live cluster, as the webhooks would",
        description="`cardquota check` with the live cluster (or --cluster files) as the snapshot. Exit 0 when all "
        "are allowed, 1 when any is denied (or, with --strict, warned), 2 for unreadable input or an unreachable "
        "cluster.",
        epilog=kubectl.examples("kubectl cardquota check -f manifests/ -n ml",
                                "kubectl cardquota check -f job.yaml --strict -o json"))
    check.add_argument("-f", "--filename", dest="files", action="append", required=True, metavar="FILE",
                       help="manifests to admit (file, directory or -); repeatable")
    check.add_argument("--card-aware-scheduler", dest="schedulers", action="append", metavar="NAME",
                       help="a scheduler that enforces card quotas (repeatable; default: volcano)")
    check.add_argument("--scheduler-configmap", default=DEFAULT_SCHEDULER_CONFIGMAP, metavar="NAME",
                       help="name of the Volcano scheduler ConfigMap (default: %(default)s)")
    add_namespace_queues_option(check)
    add_card_policy_options(check)
    add_card_gate_option(check)
    add_strict_option(check)
    _add_output(check, wide=False)
    kubectl.add_namespace_options(check, namespace="place the manifests' objects that name no namespace in this "
                                  "one, as kubectl apply -n would")
    check.set_defaults(command=check_command, live=True)
    return parser


def _add_output(parser: argparse.ArgumentParser, *, wide: bool = True) -> None:
    formats = [f.value for f in OutputFormat if wide or f is not OutputFormat.WIDE]
    parser.add_argument("-o", "--output", choices=formats, default=None,
                        help="table (fits the terminal's width; 80 columns when not a terminal)"
                        + (", wide (every column, however wide)" if wide else "")
                        + ", json or yaml (default: table on a terminal, json otherwise)")


def discover_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    nodes: dict[str, NodeCards] = {}
    records = []
    for document in _unique(load_paths(args.files), {Kind.NODE}, err):
        record = _located(document, node_record)
        records.append(record)
        cards = record.cards
        nodes[cards.node] = cards
        for note in cards.notes:
            err.write(f"warning: Node {cards.node}: {note}\n")
    if not nodes:
        err.write(f"warning: no Node in {', '.join(args.files)}: nothing to discover\n")
    for warning in output.discovery_warnings([record.node for record in records], nodes):
        err.write(f"warning: {warning}\n")
    _write(args, out, output.discovery_json(nodes),
           lambda wide: output.discovery_table(nodes, wide=wide, width=output.width_of(out)))
    return EXIT_OK


def usage_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not args.files:
        raise InputError("name the cluster to read: --cluster FILE (a file, a directory or - for stdin)",
                         where="usage")
    ledger = Ledger(ClusterSnapshot(map_namespace_queues=args.map_namespace_queues, card_policy=card_policy_of(args)))
    documents = load_paths(args.files)
    for document in _unique(documents, set(Kind), err):
        _located(document, ledger.upsert)
    for warning in output.usage_warnings(ledger):
        err.write(warning + "\n")
    no_nodes = output.no_nodes_warning(ledger, args.files, output.NO_NODES_IN_USAGE)
    if no_nodes is not None:
        err.write(no_nodes + "\n")
    # cpu/memory counted as the plugins' arguments say, read where the extender reads them (as kubectl cardquota's)
    read = read_scheduler_config([document.manifest for document in documents], DEFAULT_SCHEDULER_CONFIGMAP)
    if any(record.queue.capability is not None for record in ledger.snapshot.queues.values()):
        err.write(read.note + "\n")  # (the cpu/memory counts rest on it; nothing else in usage does)
    config = read.config
    usage = ledger.all_usage(card_unlimited_cpu_memory=config.capacity_card.card_unlimited_cpu_memory)
    policies = output.preemption_policies(ledger.snapshot)
    _write(args, out, output.usage_json(usage, policies),
           lambda wide: output.usage_table(usage, wide=wide, color=_use_color(out), width=output.width_of(out),
                                           parents=ledger.snapshot.queue_parents(), policies=policies),
           empty=(not usage, err))
    return EXIT_OK


def extender_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import asyncio
    import logging
    import time

    from cardquota.core.scheduling.extender import Extender
    from cardquota.operator.extender import api_pod_patcher, run_extender
    from cardquota.operator.settings import extender_settings

    settings = extender_settings(args)
    config = SchedulerConfig()
    if settings.scheduler_conf:
        try:
            with open(settings.scheduler_conf, encoding="utf-8") as conf:
                config = SchedulerConfig.from_conf(conf.read())
        except OSError as error:
            raise InputError(f"cannot read it: {error.strerror}", where=settings.scheduler_conf) from None
        except InputError as error:
            raise error.located(settings.scheduler_conf) from None
    config = dataclasses.replace(config, scheduler_names=settings.schedulers, card_policy=settings.card_policy)
    patcher, api = None, None
    if not (args.no_patch and args.session_from_body):
        from cardquota.kube import KubeError, api_client

        try:
            api = api_client()
        except KubeError as error:
            if not args.session_from_body:
                raise InputError(f"the extender watches the cluster and cannot reach it: {error} (or serve with "
                                 "--session-from-body)", where="extender") from None
            err.write(f"warning: mGPU results will not be patched onto pods: {error}\n")
        if api is not None and not args.no_patch:
            patcher = api_pod_patcher(api)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(run_extender(Extender(config, clock=time.monotonic), settings.host, settings.port, patcher,
                                 api=None if args.session_from_body else api, limits=settings.limits))
    except OSError as error:
        raise InputError(f"cannot listen: {error.strerror}", where=f"{settings.host}:{settings.port}") from None
    return EXIT_OK


def operator_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import asyncio

    from cardquota.operator.settings import from_arguments
    from cardquota.processes import configure_logging, run

    settings = from_arguments(args)  # an unreadable option or variable: InputError, naming it
    import urllib3

    from cardquota.kube import KubeError
    from cardquota.runtime.tls import PairChanging, UnusablePair

    configure_logging(settings.log_format)
    try:
        asyncio.run(run(settings))
    except FileNotFoundError as error:
        raise InputError(f"no serving certificate: {error.filename} (mount one there, or use --dev)",
                         where="--cert-dir") from None
    except (UnusablePair, PairChanging) as error:
        raise InputError(f"the serving certificate cannot be served: {error}",
                         where="--cert-dir" if settings.cert_dir else f"Secret {settings.tls_secret}") from None
    except KubeError as error:
        raise InputError(str(error), where="cluster") from None
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise InputError(f"the Kubernetes API is not reachable: {error}", where="cluster") from None
    return EXIT_OK


def check_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = PolicyConfig(
        card_aware_schedulers=frozenset(args.schedulers) if args.schedulers else DEFAULT_CARD_AWARE_SCHEDULERS,
        scheduler_configmap=args.scheduler_configmap,
        map_namespace_queues=args.map_namespace_queues,
        card_gate=args.card_gate == "on",
    )
    documents = load_paths(args.files)
    if not documents:  # a gate pointed at the wrong path must not pass (kubectl apply: "no objects passed to apply")
        raise InputError(f"no objects passed to check (no object in {', '.join(args.files)})")
    policy = card_policy_of(args)
    if args.cluster:
        cluster = load_paths(args.cluster)
    elif getattr(args, "live", False):  # kubectl cardquota check: the live objects, the operator's settings
        from cardquota.cli.kubectl import live_check_input

        cluster, policy = live_check_input(args, err)
    else:
        cluster = []
    ledger = Ledger(ClusterSnapshot(map_namespace_queues=config.map_namespace_queues,
                                    volcano_schedulers=config.card_aware_schedulers, card_policy=policy))
    existing: dict[Identity, Manifest] = {}
    for document in cluster:
        _located(document, ledger.upsert)
        existing[identity(document.manifest)] = document.manifest
    ledger.snapshot.complete = bool(cluster)
    offline = bool(args.cluster) or not getattr(args, "live", False)
    arguments = read_scheduler_config([document.manifest for document in [*cluster, *documents]],
                                      args.scheduler_configmap)
    if offline and arguments.found:  # (the webhooks do not know it: a warning that rests on it says so)
        ledger.snapshot.card_unlimited_cpu_memory = arguments.config.capacity_card.card_unlimited_cpu_memory
    no_nodes = output.no_nodes_warning(ledger, args.cluster, output.NO_NODES_IN_CHECK) if cluster else None
    if no_nodes is not None:
        err.write(no_nodes + "\n")
    results: list[CheckResult] = []
    default_namespace = getattr(args, "namespace", None)  # kubectl cardquota check -n NAMESPACE
    for document in documents:
        if default_namespace:
            document = Document(in_namespace(document.manifest, default_namespace), document.source)
        key, manifest, old = to_admit(document.manifest, existing)
        verdict = admit(manifest, old, ledger.snapshot, config)
        if verdict.allowed:
            admitted = apply_patch(manifest, verdict.patch)
            if old is None:  # (Volcano's PodGroup mutation, when the namespace maps to a queue)
                admitted = podgroup_as_created(admitted, ledger.snapshot)
            stored, admitted = stored_as(admitted, existing)
            _located(Document(admitted, document.source), ledger.upsert)
            existing[stored] = admitted
        results.append(CheckResult(document, key, verdict))
    notes = list(skipped_notes(results, complete=ledger.snapshot.complete))
    if offline and any(CARD_UNLIMITED_CPU_MEMORY in warning
                       for result in results for warning in result.verdict.warnings):
        err.write(arguments.note + "\n")  # a warning resting on a scheduler argument: which, and where from
    for note in notes:
        err.write(f"warning: {note}\n")
    _write(args, out, [result.as_json() for result in results],
           lambda wide: output.check_table(results, color=_use_color(out), width=output.width_of(out)))
    if not all(result.verdict.allowed for result in results):
        return EXIT_DENIED
    warned = sum(len(result.verdict.warnings) for result in results) + len(notes) + (no_nodes is not None)
    if args.strict and warned:
        err.write(f"check --strict: {warned} warning{'' if warned == 1 else 's'}, each a failure here\n")
        return EXIT_DENIED
    return EXIT_OK


def add_card_gate_option(parser: argparse.ArgumentParser) -> None:
    """``--card-gate`` for ``check``: the webhooks as the shipped manifests and chart run them (with the card-quota
    gate: a pod requesting cards without volcano.sh/card.name in a card queue is refused, card pods are gated)."""
    parser.add_argument("--card-gate", choices=("on", "off"), default="on",
                        help="the admission webhooks run with the card-quota gate, as the shipped manifests and "
                        "chart do (default: on); off: as components/no-card-gate or cardGate.enabled=false")


def add_strict_option(parser: argparse.ArgumentParser) -> None:
    """``--strict`` for ``check``: a warning fails the check as a denial does (a CI gate whose cluster is known)."""
    parser.add_argument("--strict", action="store_true",
                        help="warnings are failures (exit 1): a quota naming a card type no node offers, rules "
                        "skipped for want of a cluster, … — for CI, where the cluster is known")


def simulate_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    cluster = load_paths(args.cluster)
    workload = load_paths(args.files)
    validate([*cluster, *workload])
    manifests = [document.manifest for document in [*cluster, *workload]]
    read = read_scheduler_config(manifests, args.scheduler_configmap)
    err.write(read.note + "\n")
    config = dataclasses.replace(read.config, map_namespace_queues=args.map_namespace_queues,
                                 card_policy=card_policy_of(args))
    result = simulate([d.manifest for d in cluster], [d.manifest for d in workload], config,
                      card_gate=args.card_gate == "on", gate_order=HeadOfLine(args.gate_order))
    for skipped in result.not_simulated:
        err.write(f"warning: not simulated: {skipped}\n")
    if not result.placements and not result.podgroups:  # (a gate pointed at the wrong file must not pass)
        raise InputError("nothing to simulate: no pod, PodGroup or workload with pods in "
                         f"{', '.join(args.files)}" + (" that cardquota can expand" if result.not_simulated else ""))
    _write(args, out, result.as_json(),
           lambda wide: output.simulation_table(result, wide=wide, width=output.width_of(out)))
    placed = all(outcome.node is not None for outcome in result.placements.values())
    return EXIT_OK if placed else EXIT_DENIED


STDIN = "-"


def _stdin_at_most_once(args: argparse.Namespace) -> None:
    """``-`` (stdin) can be read once: given to two options (``--cluster - -f -``), the second would read nothing."""
    options = {"files": "-f", "cluster": "--cluster"}
    given = [options[name] for name in options for path in (getattr(args, name, None) or []) if path == STDIN]
    if len(given) > 1:
        raise InputError(f"stdin can be read only once, but '-' is given {len(given)} times ({', '.join(given)}): "
                         "give it to one option and files to the others")


def _use_color(out: TextIO) -> bool:
    return out.isatty() and not os.environ.get("NO_COLOR")


def _located(document: Document, step: Callable[[Manifest], T]) -> T:
    try:
        return step(document.manifest)
    except InputError as error:
        raise error.located(document.source) from None


def _unique(documents: list[Document], kinds: set[Kind], err: TextIO) -> list[Document]:
    """The documents of the given kinds; later copies of an object replace earlier ones, as ``kubectl apply``
    would, with a warning."""
    seen: dict[tuple[str, ObjectKey], Document] = {}
    for document in documents:
        kind = kind_of(document.manifest)
        if kind is None or kind not in kinds:
            continue
        key = (kind.value, _located(document, functools.partial(object_key, kind)))
        if key in seen:
            err.write(f"warning: {describe(kind, document.manifest)} appears again in {document.source}; "
                      f"it replaces the one in {seen[key].source}\n")
            del seen[key]
        seen[key] = document
    return list(seen.values())


def _write(args: argparse.Namespace, out: TextIO, document: object, table: Callable[[bool], str], *,
           empty: tuple[bool, TextIO] | None = None) -> None:
    """The command's result as ``-o`` asks: its JSON document (or the same as YAML), or its table (``wide`` or
    not); ``empty`` (whether the table has no row, and stderr): :data:`~cardquota.cli.output.NO_RESOURCES` on
    stderr rather than bare headers."""
    chosen = _format(args, out)
    if chosen is OutputFormat.JSON:
        output.write_json(document, out)
    elif chosen is OutputFormat.YAML:
        output.write_yaml(document, out)
    elif empty is not None and empty[0]:
        empty[1].write(output.NO_RESOURCES + "\n")
    else:
        out.write(table(chosen is OutputFormat.WIDE))


def _format(args: argparse.Namespace, out: TextIO) -> OutputFormat:
    if args.output is not None:
        return OutputFormat(args.output)
    return OutputFormat.TABLE if out.isatty() else OutputFormat.JSON


def _tolerant(stream: TextIO) -> TextIO:
    """Names from the input may hold characters the terminal cannot encode: escape them, never crash."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(OSError, ValueError):
            reconfigure(errors="backslashreplace")
    return stream


def _buffered_stdout() -> TextIO:
    """``sys.stdout``, buffered even when Python runs unbuffered (``PYTHONUNBUFFERED=1``, as the image sets): there,
    a text write larger than the pipe's buffer whose reader goes away is cut short with no error (the text layer
    ignores its unbuffered file's short write: ``sys.stdout.write`` of 800,000 characters returned 800,000 when 65,536
    bytes reached the pipe), so the output would be lost silently and the closed pipe never seen. A buffered writer
    writes the rest, and the closed pipe raises. The file descriptor stays open when this object goes."""
    stream = sys.stdout
    if isinstance(getattr(stream, "buffer", None), io.RawIOBase):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            return open(stream.fileno(), "w", encoding=stream.encoding, errors="backslashreplace",
                        closefd=False)
    return stream


def _discard_closed(descriptors: Sequence[int]) -> None:
    """After a closed pipe: the process's own stdout and stderr (``descriptors``; not the streams a caller passed
    in) are pointed at /dev/null, so the text still buffered for them is dropped at exit instead of failing again
    there (the "Note on SIGPIPE" in the documentation of Python's ``signal`` module)."""
    for descriptor in descriptors:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, descriptor)
            os.close(devnull)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
