"""``kubectl cardquota``: card usage, node card types and "why is my job pending?" from the terminal.

Every command reads the live cluster through :mod:`cardquota.kube` (kubeconfig, ``--context``, or the in-cluster
service account), or the same objects offline with ``--cluster FILE``; then it calls the core — the ledger, the
explain engine, the admission policies — exactly as the controllers and webhooks do.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

from cardquota.cli import crd, doctor, output, schedconf
from cardquota.cli.check import (
    add_card_policy_options,
    add_namespace_queues_option,
    card_policy_of,
    in_namespace,
    validate,
)
from cardquota.cli.output import NONE
from cardquota.cli.selector import parse_selector
from cardquota.core.cards import NodeCards
from cardquota.core.doctor import operator_card_policy
from cardquota.core.errors import InputError
from cardquota.core.explain import Explanation, explain, explain_submitted, job_podgroups
from cardquota.core.keys import VOLCANO_SCHEDULERS
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Manifest, namespaced_key
from cardquota.core.policies.config import DEFAULT_SCHEDULER_CONFIGMAP
from cardquota.core.schedconf.source import EXTENDER_CONFIGMAP
from cardquota.core.scheduling.session import SchedulerConfig, read_scheduler_config
from cardquota.core.snapshot import DEFAULT_CARD_POLICY, CardPolicy
from cardquota.core.workload_kinds import ADAPTERS, NOT_CHECKED, TRAIN_JOB, TRAINER_GROUP, runtime_ref
from cardquota.core.yamltext import load_one
from cardquota.loader import Document, load_paths
from cardquota.operator.settings import read_count, read_seconds

EXIT_OK, EXIT_BLOCKED = 0, 1
T = TypeVar("T")
P = TypeVar("P", bound=argparse.ArgumentParser)
SCHEDULER_NAMESPACE = "volcano-system"
CARDQUOTA_NAMESPACE = "cardquota-system"
OPERATOR_DEPLOYMENT = "cardquota"
"""Where the extender's conf lives (manifests/base/namespace.yaml)."""
ELSEWHERE = " (another namespace: -n NAMESPACE; every namespace: -A)"
TARGET_KINDS = {"pod": "pod", "pods": "pod", "po": "pod", "podgroup": "podgroup", "podgroups": "podgroup",
                "pg": "podgroup", "job": "job", "jobs": "job", "vcjob": "job", "vcjobs": "job",
                **{word: word for _, kind in (*ADAPTERS, *NOT_CHECKED) for word in (kind.lower(),)},
                **{f"{kind.lower()}s": kind.lower() for _, kind in (*ADAPTERS, *NOT_CHECKED)}, "lws": "leaderworkerset"}
"""The words ``explain KIND/NAME`` takes (as kubectl's: singular, plural, short names), by what they name: a pod, a
PodGroup, a Volcano Job, or a workload of a registered kind (its kind in lower case)."""
_RED, _YELLOW, _GREEN, _RESET = "\033[31m", "\033[33m", "\033[32m", "\033[0m"
BAR_WIDTH = 20


@dataclass
class Cluster:
    """Where the objects come from: files (``--cluster``) or the live API."""

    files: list[str]
    kubeconfig: str | None
    context: str | None
    _api: Any = None
    _noted: bool = False
    """Whether the plugins' arguments were said (:meth:`scheduler_config`)."""

    @property
    def live(self) -> bool:
        return not self.files

    def api(self) -> Any:
        """The Kubernetes API client (made on first use: offline commands never need one)."""
        if self._api is None:
            from cardquota.kube import api_client

            problem = kubeconfig_problem(self.kubeconfig, os.environ)
            if problem is not None:
                raise InputError(problem, where="cluster")
            self._api = _kube(lambda: api_client(kubeconfig=self.kubeconfig, context=self.context))
        return self._api

    def objects(self, *, workloads: bool = False, namespaces: bool = False, claims: bool = False) -> list[Manifest]:
        """Nodes, Queues, PodGroups and Pods — and the PriorityClasses, with ``workloads`` the Deployments,
        StatefulSets and ReplicaSets an HPA can scale, with ``namespaces`` the Namespaces, with ``claims`` the DRA
        ResourceClaims and templates (when ``resource.k8s.io`` is served), when this user may list them (offline:
        whatever the files hold)."""
        if not self.live:
            documents = load_paths(self.files)
            validate(documents)
            return [document.manifest for document in documents]
        from cardquota.kube import (
            CARD_RESOURCES,
            NAMESPACE_RESOURCES,
            PRIORITY_CLASS_RESOURCES,
            WORKLOAD_RESOURCES,
            dra_resources,
            list_all,
            served_dra_version,
        )

        optional = (*PRIORITY_CLASS_RESOURCES, *(WORKLOAD_RESOURCES if workloads else ()),
                    *(NAMESPACE_RESOURCES if namespaces else ()))
        if claims and (version := _kube(lambda: served_dra_version(self.api()))) is not None:
            optional = (*optional, *dra_resources(version))
        return _kube(lambda: list(list_all(self.api(), CARD_RESOURCES, optional=optional)))

    def scheduler_config(self, objects: Sequence[Manifest], err: TextIO) -> SchedulerConfig:
        """The plugins' arguments, from where the extender and the controller read them (the extender's conf, else
        the scheduler ConfigMap: :func:`~cardquota.core.schedconf.source.arguments_text`). Offline, which ones and
        where from are said on ``err``, once: a dump without the ConfigMaps is read with the plugins' defaults."""
        read = read_scheduler_config([*objects, *self.configmaps(err)], DEFAULT_SCHEDULER_CONFIGMAP)
        if not self.live and not self._noted:
            self._noted = True
            err.write(read.note + "\n")
        return read.config

    def card_policy(self, args: argparse.Namespace, err: TextIO) -> CardPolicy:
        """The card-quota settings to read the cluster with: the options given, the rest the operator's (live: read
        from its Deployment's args and environment, as ``doctor`` reads them), else the defaults."""
        running = DEFAULT_CARD_POLICY
        given = getattr(args, "unquoted_queues", None) and getattr(args, "card_pods_outside_volcano", None)
        if self.live and not given:
            from cardquota.kube import KubeError, read_namespaced

            try:
                deployment = read_namespaced(self.api(), "deployment", CARDQUOTA_NAMESPACE, OPERATOR_DEPLOYMENT)
            except KubeError as error:
                err.write(f"warning: Deployment {CARDQUOTA_NAMESPACE}/{OPERATOR_DEPLOYMENT} could not be read "
                          f"({error}); --unquoted-queues and --card-pods-outside-volcano take their defaults\n")
                deployment = None
            if deployment is not None:
                running = operator_card_policy(deployment)
        return card_policy_of(args, running)

    def configmaps(self, err: TextIO) -> list[Manifest]:
        """Live: the extender's conf and the scheduler ConfigMap, those that exist and can be read (offline: none,
        the files hold them)."""
        if not self.live:
            return []
        from cardquota.kube import KubeError, read_namespaced

        found: list[Manifest] = []
        for namespace, name in ((CARDQUOTA_NAMESPACE, EXTENDER_CONFIGMAP),
                                (SCHEDULER_NAMESPACE, DEFAULT_SCHEDULER_CONFIGMAP)):
            try:
                configmap = read_namespaced(self.api(), "configmap", namespace, name)
            except KubeError as error:
                err.write(f"warning: ConfigMap {namespace}/{name} could not be read ({error}); the plugins' "
                          "arguments are read without it\n")
                continue
            if configmap is not None:
                found.append(configmap)
        return found

    def trainer_runtimes(self, target: Manifest, err: TextIO) -> list[Manifest]:
        """Live: the TrainingRuntime or ClusterTrainingRuntime a TrainJob names, when it exists and this user may
        read it (``get`` on it); otherwise none, said on ``err`` (offline: the files hold it, or not)."""
        if not self.live or _group_kind(target) != TRAIN_JOB:
            return []
        from cardquota.kube import KubeError, read_namespaced, read_object

        kind, namespace, name = runtime_ref(target)
        try:
            if kind == "TrainingRuntime":
                found = read_namespaced(self.api(), "trainingruntime", namespace, name)
            else:
                found = read_object(self.api(), f"/apis/{TRAINER_GROUP}/v1alpha1/clustertrainingruntimes/{name}")
                found = {"apiVersion": f"{TRAINER_GROUP}/v1alpha1", "kind": kind, **found} if found else None
        except KubeError as error:
            err.write(f"warning: {kind} {name} could not be read ({' '.join(str(error).split())}): its TrainJob "
                      "is not checked\n")
            return []
        return [found] if found is not None else []

    def default_namespace(self) -> str:
        """The kubeconfig context's namespace (as kubectl uses it), else ``default``."""
        if not self.live:
            return "default"
        from kubernetes import config

        try:
            contexts, active = config.list_kube_config_contexts(config_file=self.kubeconfig)  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError):
            return "default"
        chosen = next((c for c in contexts if c.get("name") == self.context), active) if self.context else active
        namespace = ((chosen or {}).get("context") or {}).get("namespace")
        return namespace if isinstance(namespace, str) and namespace else "default"

    def target(self, kind: str, namespace: str | None, name: str, objects: Sequence[Manifest],
               err: TextIO) -> Manifest:
        """The object to explain; ``namespace`` None looks in every namespace (``-A``). A Volcano Job that is not
        there (a dump of nodes, queues, podgroups and pods has none) is explained by the PodGroup the job controller
        made for it, and its pods (:func:`~cardquota.core.explain.job_podgroups`), saying so on ``err``."""
        matches = self._matches(kind, namespace, name, objects)
        where = "" if self.live else f" in {', '.join(self.files)}"
        if not matches and kind == "job":
            matches = job_podgroups(objects, namespace, name)
            if len(matches) == 1:
                group_namespace, group = namespaced_key(matches[0])
                job = name if namespace is None else f"{namespace}/{name}"
                err.write(f"note: no Volcano Job {job}{where or ' in the cluster'}: explaining the PodGroup its job "
                          f"controller made, {group_namespace}/{group}, and its pods\n")
            where += " (nor a PodGroup owned by a Volcano Job of that name)"
        if not matches and namespace is None:
            raise InputError(f"{kind} {name} not found in any namespace{where}")
        if not matches:
            raise InputError(f"{kind} {namespace}/{name} not found{where}{ELSEWHERE}")
        if len(matches) > 1:
            namespaces = ", ".join(sorted(str((m.get("metadata") or {}).get("namespace")) for m in matches))
            raise InputError(f"{kind} {name} is in several namespaces ({namespaces}): choose one with -n")
        return matches[0]

    def _matches(self, kind: str, namespace: str | None, name: str, objects: Sequence[Manifest]) -> list[Manifest]:
        """The objects of ``kind`` named ``name`` (in ``namespace``; None: any)."""
        if self.live and namespace is not None:
            from cardquota.kube import read_namespaced

            found = _kube(lambda: read_namespaced(self.api(), kind, namespace, name))
            return [found] if found is not None else []
        candidates = list(objects)
        if self.live and kind not in ("pod", "podgroup"):  # (not among the objects the snapshot lists)
            from cardquota.kube import list_namespaced_kind

            candidates = _kube(lambda: list_namespaced_kind(self.api(), "job"))
        wanted = _EXPLAINABLE[kind]
        return [m for m in candidates
                if _group_kind(m) == wanted
                and (m.get("metadata") or {}).get("name") == name
                and (namespace is None or ((m.get("metadata") or {}).get("namespace") or "default") == namespace)]


IN_CLUSTER_VARIABLE = "KUBERNETES_SERVICE_HOST"
"""Set in every pod: the service account is used when there is no kubeconfig."""
DEFAULT_KUBECONFIG = "~/.kube/config"
USE_ANOTHER = "pass --kubeconfig FILE, or read the objects offline with --cluster FILE"


def kubeconfig_problem(kubeconfig: str | None, environ: Mapping[str, str]) -> str | None:
    """What keeps the plugin from reading a kubeconfig, said as the user can act on it — no such file (the one
    ``--kubeconfig`` names, else ``$KUBECONFIG``'s, else ``~/.kube/config`` outside a pod), not YAML (with the line)
    — or None when the kubernetes library should try (and name anything else wrong in one line)."""
    if kubeconfig is not None:
        paths, where = [kubeconfig], f"--kubeconfig {kubeconfig}"
    else:
        variable = environ.get("KUBECONFIG", "")
        paths = [path for path in variable.split(os.pathsep) if path] or [DEFAULT_KUBECONFIG]
        where = f"KUBECONFIG={variable}" if variable else DEFAULT_KUBECONFIG
        if not any(os.path.exists(os.path.expanduser(path)) for path in paths):
            if environ.get(IN_CLUSTER_VARIABLE):
                return None  # in a pod: its service account
            return f"no kubeconfig ({where}: no such file) and not in a pod: {USE_ANOTHER}"
    for path in paths:
        full = os.path.expanduser(path)
        if not os.path.exists(full):
            if kubeconfig is not None:
                return f"{where}: no such file"
            continue
        try:
            with open(full, encoding="utf-8") as file:
                document = load_one(file.read())
        except (OSError, UnicodeDecodeError) as error:
            return f"the kubeconfig {path} cannot be read: {getattr(error, 'strerror', None) or error}"
        except InputError as error:
            return f"the kubeconfig {path} is not YAML: {error}"
        if not isinstance(document, Mapping):
            return f"the kubeconfig {path} is not a kubeconfig (a YAML map with clusters, contexts and users)"
    return None


def cluster_options(parser_class: type[P]) -> P:
    """Where the plugin reads the cluster from (a parent parser shared by its commands)."""
    common = parser_class(add_help=False)
    common.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    common.add_argument("--context", default=None, help="kubeconfig context to use")
    common.add_argument("--cluster", dest="cluster", action="append", default=[], metavar="FILE",
                        help="read these manifests instead of the live cluster (repeatable)")
    return common


def add_namespace_options(parser: argparse.ArgumentParser, *, namespace: str | None = None,
                          all_namespaces: str | None = None) -> None:
    """``-n``/``-A`` on a plugin command, each with this command's own help text. A command that reads one names it
    here (its ``namespace_options``); one that reads neither still accepts both, hidden from its help, to refuse
    them saying why (:func:`refuse_unused_namespace_options`)."""
    parser.add_argument("-n", "--namespace", default=None, help=namespace or argparse.SUPPRESS)
    parser.add_argument("-A", "--all-namespaces", action="store_true", help=all_namespaces or argparse.SUPPRESS)
    parser.set_defaults(namespace_options=tuple(flag for flag, text in (("-n", namespace), ("-A", all_namespaces))
                                                if text))


EXAMPLES_HEADING = "examples:"


def examples(*lines: str) -> str:
    """A command's epilog: the example command lines, printed as written, one a line (the help formatter of
    :mod:`cardquota.cli.main` keeps an epilog starting with :data:`EXAMPLES_HEADING` unwrapped)."""
    return "\n".join([EXAMPLES_HEADING, *(f"  {line}" for line in lines)])


NAMESPACE_OPTIONS = {"-n": ("namespace", "-n/--namespace"), "-A": ("all_namespaces", "-A/--all-namespaces")}
WHY_NO_NAMESPACE = {"usage": "queues are cluster-wide", "nodes": "nodes are cluster-wide",
                    "crd": "CRDs are cluster-wide", "check": "-n alone places the objects that name no namespace",
                    "doctor": "-n names cardquota's namespace",
                    "scheduler-conf": "the scheduler ConfigMap lives in volcano-system"}


def refuse_unused_namespace_options(args: argparse.Namespace, command: str) -> None:
    """``-n``/``-A`` given to a command they mean nothing to (each command says which it reads in
    ``namespace_options``) are refused, rather than silently ignored."""
    allowed = getattr(args, "namespace_options", None)
    if allowed is None:
        return
    for flag, (dest, spelled) in NAMESPACE_OPTIONS.items():
        if flag not in allowed and getattr(args, dest, None):
            why = WHY_NO_NAMESPACE.get(command)
            raise InputError(f"{spelled} does nothing here{f': {why}' if why else ''}; leave it out", where=command)


def option_value(read: Callable[[str], T], expected: str) -> Callable[[str], T]:
    """An argparse ``type`` reading an option's value with ``read``, refusing what it refuses in one line that says
    what was expected (``argument --limit: '0': expected a whole number, 1 or more``; exit 2 as any usage error)."""

    def parse(text: str) -> T:
        try:
            return read(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}") from None

    parse.__name__ = expected  # (argparse names the type by it in some messages)
    return parse


ROW_COUNT = option_value(read_count, "a whole number, 1 or more")
SECONDS = option_value(read_seconds, "a number of seconds, 0 or more")


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:  # commands: argparse's subparsers
    """The plugin's commands, added to the ``kubectl cardquota`` parser's subcommands."""

    usage = commands.add_parser("usage", parents=[common], help="each queue's card quota and what uses it",
                                description="Per queue and card type: quota, allocated, inqueue, pending, free.",
                                epilog=examples("kubectl cardquota usage team-a team-b -o wide",
                                                "kubectl cardquota usage --watch --interval 5",
                                                "kubectl cardquota usage --cluster cluster.yaml -o json"))
    usage.add_argument("queues", nargs="*", metavar="QUEUE", help="only these queues")
    usage.add_argument("-o", "--output", choices=["table", "wide", "json", "yaml"], default=None,
                       help="table (fits the terminal's width), wide (adds FREE, USED and a bar), json or yaml "
                       "(default: table on a terminal, json otherwise)")
    usage.add_argument("--limit", type=ROW_COUNT, default=None, help="print at most this many rows (1 or more)")
    usage.add_argument("-w", "--watch", action="store_true", help="print again every --interval seconds")
    usage.add_argument("--interval", type=SECONDS, default=2.0, help="seconds between refreshes with --watch")
    usage.add_argument("--refreshes", type=int, default=0, help=argparse.SUPPRESS)
    usage.add_argument("--card-aware-scheduler", "--schedulers", dest="schedulers", action="append", metavar="NAME",
                       help="a scheduler name Volcano runs, repeatable, as the operator's --schedulers: its pods "
                       "without a PodGroup count against their queue; other schedulers' pods without one count "
                       "against none (default: volcano)")
    add_namespace_queues_option(usage)
    add_card_policy_options(usage)
    add_namespace_options(usage)
    usage.set_defaults(command=usage_command)

    nodes = commands.add_parser("nodes", parents=[common], help="the card types each node offers and uses",
                                description="Per node and card type: kind, resource, allocatable and used cards, "
                                "with totals per card type.",
                                epilog=examples("kubectl cardquota nodes -l nvidia.com/gpu.product=NVIDIA-H100",
                                                "kubectl cardquota nodes -o wide --limit 20"))
    nodes.add_argument("-l", "--selector", default=None,
                       help="only nodes whose labels match, as kubectl -l: key=value, key!=value, key in (a,b), "
                       "key notin (a,b), key, !key, key>N, key<N; comma-separated, all must hold")
    nodes.add_argument("-o", "--output", choices=["table", "wide", "json", "yaml"], default=None,
                       help="table (fits the terminal's width), wide (every column), json or yaml (default: table "
                       "on a terminal, json otherwise)")
    nodes.add_argument("--limit", type=ROW_COUNT, default=None, help="print at most this many rows (1 or more)")
    add_namespace_options(nodes)
    nodes.set_defaults(command=nodes_command)

    explain_parser = commands.add_parser(
        "explain", parents=[common], help="why is this pod, PodGroup, Volcano Job or workload not running?",
        description="Say in plain sentences what blocks a pod, a PodGroup, a Volcano Job or a workload of a "
        "registered kind (PyTorchJob, MPIJob, RayJob, JobSet, LeaderWorkerSet, TrainJob, …), and what would "
        "unblock it. Exit 0 when nothing in cardquota's rules blocks it, 1 when something does.",
        epilog=examples("kubectl cardquota explain job/train-bert -n ml",
                        "kubectl cardquota explain pytorchjob/bert -A        # wherever it is",
                        "kubectl cardquota explain -f job.yaml -n ml         # as if submitted now"))
    explain_parser.add_argument("target", nargs="?", metavar="KIND/NAME",
                                help="pod/NAME, podgroup/NAME (pg/), job/NAME (vcjob/), or a registered kind: "
                                "pytorchjob/NAME, mpijob/, tfjob/, rayjob/, raycluster/, jobset/, leaderworkerset/ "
                                "(lws/), trainjob/, …")
    explain_parser.add_argument("-f", "--filename", dest="files", action="append", default=[], metavar="FILE",
                                help="explain these objects as if they were submitted now")
    explain_parser.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    add_namespace_queues_option(explain_parser)
    add_card_policy_options(explain_parser)
    add_namespace_options(explain_parser, namespace="the object's namespace (default: the kubeconfig context's, "
                          "else default)", all_namespaces="find the object in any namespace")
    explain_parser.set_defaults(command=explain_command)

    crd.add_command(commands, common)
    doctor.add_command(commands, common)
    schedconf.add_command(commands, common)


# ----------------------------------------------------------------------------------------------------- commands


def usage_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    cluster = _cluster(args)
    refreshes = 0
    warned: set[str] = set()
    while True:
        objects = cluster.objects(namespaces=args.map_namespace_queues, claims=True)
        ledger = Ledger.build(objects, map_namespace_queues=args.map_namespace_queues,
                              volcano_schedulers=frozenset(args.schedulers) if args.schedulers else VOLCANO_SCHEDULERS,
                              card_policy=cluster.card_policy(args, err))
        missing = [name for name in args.queues if name not in set(ledger.queue_names())]
        if missing:
            raise InputError(f"no queue named {', '.join(missing)}")
        # cpu/memory are counted as the scheduler's capacity-card arguments say, read only when a queue has a
        # cpu/memory capability (the only queues whose usage shows them).
        unlimited = (any(record.queue.capability is not None for record in ledger.snapshot.queues.values())
                     and cluster.scheduler_config(objects, err).capacity_card.card_unlimited_cpu_memory)
        usage = {name: entry for name, entry in ledger.all_usage(card_unlimited_cpu_memory=unlimited).items()
                 if not args.queues or name in args.queues}
        warnings = output.usage_warnings(ledger, usage, source="the cluster" if cluster.live else "the input")
        no_nodes = output.no_nodes_warning(ledger, cluster.files, output.NO_NODES_IN_USAGE)
        for warning in [*warnings, *([no_nodes] if no_nodes else [])]:
            if warning not in warned:  # each once, not again on every --watch refresh
                warned.add(warning)
                err.write(warning + "\n")
        fmt = args.output or ("table" if out.isatty() else "json")
        policies = output.preemption_policies(ledger.snapshot)
        if fmt == "json":
            output.write_json(output.usage_json(usage, policies), out)
        elif fmt == "yaml":
            output.write_yaml(output.usage_json(usage, policies), out)
        elif not usage:
            if output.NO_RESOURCES not in warned:  # (once with --watch)
                warned.add(output.NO_RESOURCES)
                err.write(output.NO_RESOURCES + "\n")
        else:
            out.write(output.usage_table(usage, wide=fmt == "wide", color=_color(out), limit=args.limit, err=err,
                                         width=output.width_of(out), parents=ledger.snapshot.queue_parents(),
                                         policies=policies))
        refreshes += 1
        if not args.watch or (args.refreshes and refreshes >= args.refreshes):
            return EXIT_OK
        out.flush()
        time.sleep(args.interval)
        out.write("\n")


def nodes_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    cluster = _cluster(args)
    selector = parse_selector(args.selector)
    ledger = Ledger.build(cluster.objects())
    no_nodes = output.no_nodes_warning(ledger, cluster.files, "no card type to list")
    if no_nodes is not None:
        err.write(no_nodes + "\n")
    records = {name: record for name, record in ledger.snapshot.nodes.items() if selector.matches(record.node.labels)}
    used = ledger.node_card_usage()
    cards = {name: record.cards for name, record in records.items()}
    fmt = args.output or ("table" if out.isatty() else "json")
    document = nodes_json(cards, used)
    if fmt == "json":
        output.write_json(document, out)
    elif fmt == "yaml":
        output.write_yaml(document, out)
    elif not records:  # nothing matches -l (or no Node at all)
        err.write(output.NO_RESOURCES + "\n")
    else:
        out.write(nodes_table(cards, used, limit=args.limit, err=err, wide=fmt == "wide",
                              width=output.width_of(out)))
    return EXIT_OK


def explain_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    cluster = _cluster(args)
    objects = cluster.objects(namespaces=args.map_namespace_queues, claims=True)
    submitted = load_paths(args.files) if args.files else []
    if submitted:
        validate(submitted)
        if args.namespace:  # as kubectl apply -n would place objects that name no namespace
            submitted = [Document(in_namespace(d.manifest, args.namespace), d.source) for d in submitted]
        # Explained as if submitted now: every object of FILE joins the cluster, replacing its namesake there.
        replaced = {_object_identity(document.manifest) for document in submitted}
        objects = [m for m in objects if _object_identity(m) not in replaced]
        objects.extend(document.manifest for document in submitted)
    targets: list[tuple[Manifest, str]] = []
    if args.target:
        kind, _, name = args.target.partition("/")
        if kind.lower() not in TARGET_KINDS or not name:
            raise InputError(f"{args.target!r}: expected pod/NAME, podgroup/NAME, job/NAME or a workload of a "
                             "registered kind (pytorchjob/NAME, rayjob/NAME, jobset/NAME, trainjob/NAME, …)",
                             where="explain")
        namespace = None if args.all_namespaces else args.namespace or cluster.default_namespace()
        named = _named_in(submitted, TARGET_KINDS[kind.lower()], namespace, name)
        if submitted and named is None:
            raise InputError(f"{TARGET_KINDS[kind.lower()]} {namespace or '(any namespace)'}/{name} not found in "
                             f"{', '.join(args.files)}", where="explain")
        targets.append(named or (cluster.target(TARGET_KINDS[kind.lower()], namespace, name, objects, err),
                                 args.target))
    else:
        targets.extend((document.manifest, document.source) for document in submitted
                       if _explainable(document.manifest))
        if submitted and not targets:
            raise InputError("holds no pod, PodGroup, Volcano Job or workload of a registered kind to explain",
                             where=", ".join(args.files))
    if not targets:
        raise InputError("name what to explain: KIND/NAME or -f FILE", where="explain")
    for target, _ in targets:
        objects.extend(cluster.trainer_runtimes(target, err))
    config = dataclasses.replace(cluster.scheduler_config(objects, err), map_namespace_queues=args.map_namespace_queues,
                                 card_policy=cluster.card_policy(args, err))
    explanations: list[Explanation] = []
    if submitted:  # as if submitted now: the rules, and simulate's enqueue and placement of the whole of FILE
        workload = [document.manifest for document in submitted]
        replaced = {_object_identity(manifest) for manifest in workload}
        before = [m for m in objects if _object_identity(m) not in replaced]
        explanations = explain_submitted(before, workload, [target for target, _ in targets], config)
    for target, source in [] if submitted else targets:
        try:
            explanations.append(explain(objects, target, config))
        except InputError as error:
            raise error.located(source) from None
    if args.output == "json":
        output.write_json([e.as_json() for e in explanations], out)
    elif args.output == "yaml":
        output.write_yaml([e.as_json() for e in explanations], out)
    else:
        width = output.width_of(out)
        out.write("\n\n".join("\n".join(wrapped for line in e.lines() for wrapped in output.wrapped(line, width))
                                for e in explanations) + "\n")
    return EXIT_BLOCKED if any(e.blocked for e in explanations) else EXIT_OK


_EXPLAINABLE = {"pod": ("", "Pod"), "podgroup": ("scheduling.volcano.sh", "PodGroup"),
                "job": ("batch.volcano.sh", "Job"),
                **{kind.lower(): (group, kind) for group, kind in (*ADAPTERS, *NOT_CHECKED)}}
"""What ``explain`` takes, by the word its KIND/NAME uses: (API group, kind)."""


def _group_kind(manifest: Manifest) -> tuple[str, object]:
    return str(manifest.get("apiVersion", "")).rpartition("/")[0], manifest.get("kind")


def _explainable(manifest: Manifest) -> bool:
    return _group_kind(manifest) in _EXPLAINABLE.values()


def _object_identity(manifest: Manifest) -> tuple[str, object, str, str]:
    metadata = manifest.get("metadata") if isinstance(manifest.get("metadata"), dict) else {}
    group, kind = _group_kind(manifest)
    return (group, kind, str((metadata or {}).get("namespace") or "default"), str((metadata or {}).get("name", "")))


def _named_in(documents: Sequence[Document], kind: str, namespace: str | None, name: str
              ) -> tuple[Manifest, str] | None:
    """The document of ``kind`` named ``name`` (in ``namespace``; None: any) among ``documents``."""
    for document in documents:
        group, found_kind, found_namespace, found_name = _object_identity(document.manifest)
        if ((group, found_kind) == _EXPLAINABLE[kind] and found_name == name
                and (namespace is None or found_namespace == namespace)):
            return document.manifest, document.source
    return None


def live_check_input(args: argparse.Namespace, err: TextIO) -> tuple[list[Document], CardPolicy]:
    """``kubectl cardquota check``: the live cluster's objects as the snapshot the manifests are checked against,
    and the card-quota settings the operator runs with (:meth:`Cluster.card_policy`)."""
    cluster = _cluster(args)
    documents = [Document(manifest, "cluster")
                 for manifest in cluster.objects(workloads=True, namespaces=args.map_namespace_queues)]
    return documents, cluster.card_policy(args, err)


# --------------------------------------------------------------------------------------------------- formatting


def nodes_json(cards: dict[str, NodeCards], used: dict[str, dict[str, int]]) -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    totals: dict[str, dict[str, Any]] = {}
    for name in sorted(cards):
        entries = {}
        for card_name, card in sorted(cards[name].types.items()):
            held = used.get(name, {}).get(card_name, 0)
            entries[card_name] = {"kind": card.kind.value, "resource": card.resource, "allocatable": card.count,
                                  "used": held, **{key: value for key, value in card.as_json().items()
                                                   if key in ("cards", "replicas")}}
            total = totals.setdefault(card_name, {"kind": card.kind.value, "resource": card.resource,
                                                  "allocatable": 0, "used": 0})
            total["allocatable"] += card.count
            total["used"] += held
        nodes[name] = entries
    return {"nodes": nodes, "totals": dict(sorted(totals.items()))}


def nodes_table(cards: dict[str, NodeCards], used: dict[str, dict[str, int]], *, limit: int | None,
                err: TextIO, wide: bool = False, width: int = output.WIDTH) -> str:
    """NODE, CARD TYPE, KIND, ALLOCATABLE and USED (``wide``: RESOURCE too), then the totals per card type."""
    document = nodes_json(cards, used)
    rows: list[list[object]] = []
    for name, entries in document["nodes"].items():
        if not entries:
            rows.append([name, NONE, NONE, *([NONE] if wide else []), NONE, NONE])
        for card_name, entry in entries.items():
            kind = f"{entry['kind']}×{entry['replicas']}" if "replicas" in entry else entry["kind"]  # (as discover)
            rows.append([name, card_name, kind, *([entry["resource"]] if wide else []),
                         entry["allocatable"], entry["used"]])
    resource = ["RESOURCE"] if wide else []
    fit = None if wide else width
    text = output.render_table(["NODE", "CARD TYPE", "KIND", *resource, "ALLOCATABLE", "USED"],
                               _limited(rows, limit, err), width=fit, elide=(0, 1))
    totals = [[card_name, entry["kind"], *([entry["resource"]] if wide else []), entry["allocatable"], entry["used"]]
              for card_name, entry in document["totals"].items()]
    if totals:
        text += "\n" + output.render_table(["CARD TYPE", "KIND", *resource, "ALLOCATABLE", "USED"], totals,
                                           width=fit, elide=(0,))
    return text


# ------------------------------------------------------------------------------------------------------ helpers


def _cluster(args: argparse.Namespace) -> Cluster:
    return Cluster(files=list(args.cluster), kubeconfig=args.kubeconfig, context=args.context)


def _kube(call: Callable[[], T]) -> T:
    """A Kubernetes call whose failure becomes one line: not reachable, not allowed (the API's own sentence names
    the verb and resource), or any other error."""
    from cardquota.kube import Forbidden, KubeError, Unauthorized

    try:
        return call()
    except KubeError as error:
        said = " ".join(str(error).split())  # the kubernetes library's messages may span lines (YAML errors)
        if isinstance(error, Forbidden):
            raise InputError(f"not allowed: {said}", where="cluster") from None
        if isinstance(error, Unauthorized):
            raise InputError(f"not logged in (HTTP 401): {said}", where="cluster") from None
        raise InputError(said, where="cluster") from None


def _limited(rows: list[list[object]], limit: int | None, err: TextIO) -> list[list[object]]:
    if limit is None or len(rows) <= limit:
        return rows
    err.write(f"{len(rows) - limit} more row{'s' if len(rows) - limit != 1 else ''} not shown (raise --limit)\n")
    return rows[:max(limit, 0)]


def _color(out: TextIO) -> bool:
    return out.isatty() and not os.environ.get("NO_COLOR")

