"""``kubectl cardquota doctor``: is this installation healthy? Pure checks over objects already read.

Each check takes what the adapter fetched — an object, ``None`` when it does not exist, or :class:`Unreadable`
when it could not be read (a 403: "cannot tell") — and returns :class:`Result` lines: ok, warn, fail or unknown, a
message a platform engineer can act on, and the fix (a command or a step). Malformed objects become failing lines,
never exceptions. What the core may not do itself is injected: the clock (``now``, seconds since the epoch) and the
certificate verification (:data:`TrustCheck`: cryptography is not imported here).

The checks, in the order they print: Volcano's CRDs and version, cardquota's additions to those CRDs, the
admission webhooks and their certificate, the operator's pods and leader, the scheduler ConfigMap, the card types
nodes offer, and the usage published on queues with a card quota.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from cardquota.core import keys
from cardquota.core.cards import (
    ACCELERATOR_RESOURCE,  # noqa: F401  (re-exported: the checks' one definition lives in cards)
    Unlabelled,
    cluster_totals,
    product_label,  # noqa: F401  (re-exported)
    sharing_warnings,
    unlabelled_accelerators,
)
from cardquota.core.crd_additions import CRD_NAMES, WORDING, AdditionState, State, inspect, restore_command
from cardquota.core.errors import InputError, one_line
from cardquota.core.jsontypes import MAPPING_TYPES, SEQUENCE_TYPES
from cardquota.core.keys import CARD_USAGE
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Manifest
from cardquota.core.policies import schedconf
from cardquota.core.policies.config import PolicyConfig, read_flag
from cardquota.core.publish import QUEUE_ANNOTATIONS, bounded_queue_annotations, queue_budget
from cardquota.core.schedconf.extender import (
    PluginEntry,
    conf_leaks,
    extender_entry,
    offered_resources,
    plugin_entries,
)
from cardquota.core.schedconf.reader import CONF_KEY
from cardquota.core.schedconf.source import EXTENDER_CONFIGMAP
from cardquota.core.snapshot import (
    DEFAULT_CARD_POLICY,
    CardPolicy,
    ClusterSnapshot,
    Kind,
    OutsideVolcano,
    QueueRecord,
    UnquotedQueues,
    describe,
    kind_of,
    node_record,
    queue_record,
)
from cardquota.core.yamltext import load_one

VOLCANO = "Volcano"
CRD_ADDITIONS = "cardquota's CRD additions"
WEBHOOKS = "Admission webhooks"
OPERATOR = "Operator"
SCHEDULER = "Scheduler configuration"
NODES = "Nodes"
QUEUES = "Queue usage"
CHECKS = (VOLCANO, CRD_ADDITIONS, WEBHOOKS, OPERATOR, SCHEDULER, NODES, QUEUES)
"""The checks, in the order they run and print."""

OLDEST_VOLCANO = (1, 13)
"""The oldest Volcano release cardquota supports (docs/versions.md)."""
VOLCANO_INSTALL = ("install Volcano v1.13 or later, e.g. kubectl apply -f https://raw.githubusercontent.com/"
                   "volcano-sh/volcano/v1.15.1/installer/volcano-development.yaml (or: make volcano)")
SCHEDULER_LABEL = ("app", "volcano-scheduler")
"""The label Volcano's installer puts on its scheduler Deployment."""
SCHEDULER_DEPLOYMENT = ("volcano-system", "volcano-scheduler")
DEPLOY = ("kubectl apply -k manifests/overlays/production (or the overlay you deployed) with your image set in it "
          "first (kustomize edit set image cardquota=REGISTRY/cardquota:TAG; with the Helm chart: image.repository)")
"""The fix for a missing or broken installation: the overlays name an image that is never pulled
(registry.invalid) until the user sets theirs (docs/install.md, "2. The image")."""
CERT_RENEW_DAYS = 30
"""The operator renews the serving certificate this many days before it expires (runtime/tls.py RENEW_BEFORE)."""
SHOWN = 10
"""Names listed in one line or as details before "and N more"."""
DETAIL_LIMIT = 400
"""Characters of one detail line (a violation, a node's missing labels) before it is clipped."""
CARD_TYPES_SECTION = "docs/cards.md: Card types discovered from a node"

VOLCANO_PODGROUP_WEBHOOK = "volcano-admission-service-podgroups-mutate"
"""The MutatingWebhookConfiguration of Volcano's ``/podgroups/mutate`` webhook (installer/helm/chart/volcano/templates/
webhooks.yaml, v1.15.1; rendered when ``custom.enabled_admissions`` names it: by default up to v1.11)."""
VOLCANO_PODGROUP_POLICY = "volcano-podgroup-mutation-policy"
"""Volcano's MutatingAdmissionPolicy doing the same (installer/helm/chart/volcano/policy/podgroups-mutating.yaml,
v1.12+, ``custom.map_enable``)."""
MAP_NAMESPACE_QUEUES_ENV = "CARDQUOTA_MAP_NAMESPACE_QUEUES"
"""The operator's variable for :attr:`PolicyConfig.map_namespace_queues` (operator/settings.py)."""
CARD_GATE_ENV = "CARDQUOTA_CARD_GATE"
"""The operator's variable for :attr:`PolicyConfig.card_gate` (operator/settings.py)."""
UNQUOTED_QUEUES_ENV = "CARDQUOTA_UNQUOTED_QUEUES"
OUTSIDE_VOLCANO_ENV = "CARDQUOTA_CARD_PODS_OUTSIDE_VOLCANO"
"""The operator's variables for its :class:`~cardquota.core.snapshot.CardPolicy` (operator/settings.py)."""
SCHEDULERS_ENV = "CARDQUOTA_SCHEDULERS"
"""The operator's ``--schedulers`` as its environment gives them (comma-separated)."""
SCHEDULER_FLAGS = ("--schedulers", "--card-aware-scheduler")

ADDITION_WORDING = WORDING
"""What ``kubectl cardquota crd status`` says of each state (the same words)."""


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"
    """Could not be told: something needed could not be read (no permission)."""


@dataclass(frozen=True)
class Result:
    name: str
    """The check this line belongs to (one of :data:`CHECKS`)."""
    status: Status
    message: str
    fix: str = ""
    """What to run or do (for lines that are not ok)."""
    details: tuple[str, ...] = ()
    """Lines under the message: the queues, nodes or violations it is about."""

    def as_json(self) -> dict[str, Any]:
        return {"check": self.name, "status": self.status.value, "message": self.message,
                "details": list(self.details), "fix": self.fix}


@dataclass(frozen=True)
class Unreadable:
    """An object or list that could not be read (a 403 names the verb and resource): its check cannot tell."""

    reason: str


Read = Manifest | None | Unreadable
"""One object: as read, None when it does not exist, or why it could not be read."""
Listing = Sequence[Manifest] | Unreadable


@dataclass(frozen=True)
class Trust:
    """Whether a webhook's caBundle verifies the serving certificate (:data:`TrustCheck`'s answer)."""

    problem: str | None
    """Why not (unreadable, signed by no CA in the bundle, expired, names), None when it does."""
    days_left: int | None = None
    """Whole days until the serving certificate expires."""


TrustCheck = Callable[[str, str, str], Trust]
"""(a caBundle, a ``tls.crt`` — both base64 as the API holds them —, the DNS name the API server calls) → Trust."""


@dataclass(frozen=True)
class Target:
    """Where cardquota and Volcano are installed (the operator's settings; the CLI fills in their defaults)."""

    namespace: str
    service: str
    tls_secret: str
    deployment: str
    lease: str
    webhook_configurations: Mapping[str, str]
    """Kind (ValidatingWebhookConfiguration, MutatingWebhookConfiguration) → name."""
    pod_selector: Mapping[str, str]
    """The operator pods' labels when its Deployment cannot tell (manifests/base/deployment.yaml)."""
    scheduler_namespace: str
    scheduler_configmap: str

    @property
    def controller_deployment(self) -> str:
        """The controllers' Deployment when they run apart from the webhooks (manifests/components/
        separate-controller); absent in the one-Deployment install."""
        return f"{self.deployment}-controller"

    @property
    def dns_name(self) -> str:
        """The name the API server calls the webhook Service by (a SAN the serving certificate must have)."""
        return f"{self.service}.{self.namespace}.svc"


@dataclass(frozen=True)
class Installation:
    """Everything the checks read, fetched by the adapter (live or from files)."""

    crds: Mapping[str, Read]
    scheduler_deployments: Listing
    webhook_configurations: Mapping[str, Read]
    """Kind → the configuration named in :attr:`Target.webhook_configurations`."""
    tls_secret: Read
    operator_deployment: Read
    operator_pods: Listing
    lease: Read
    scheduler_configmap: Read
    nodes: Listing
    queues: Listing
    podgroups: Listing
    pods: Listing
    now: float
    """Seconds since the epoch."""
    trust: TrustCheck = field(repr=False, compare=False)
    controller_deployment: Read = None
    """:attr:`Target.controller_deployment`: None when the webhooks and the controllers are one Deployment."""
    controller_pods: Listing = ()
    extender_conf: Read = None
    """The extender's conf (ConfigMap ``cardquota-extender-conf`` in cardquota's namespace): None when the extender
    is not installed."""
    volcano_podgroup_webhook: Read = None
    """MutatingWebhookConfiguration :data:`VOLCANO_PODGROUP_WEBHOOK`."""
    volcano_podgroup_policy: Read = None
    """MutatingAdmissionPolicy :data:`VOLCANO_PODGROUP_POLICY`."""
    gate_policy: Read = None
    """ValidatingAdmissionPolicy :data:`GATE_POLICY`."""
    gate_policy_binding: Read = None
    """ValidatingAdmissionPolicyBinding :data:`GATE_POLICY`."""
    namespaces: Listing = ()
    """The Namespaces, read when the operator maps namespaces to queues (:func:`maps_namespace_queues`): its
    published usage counts pods without a PodGroup in their namespace's queue."""


def _object(value: object) -> Read:
    """A read as the checks take it: an object that is not a map (a malformed file) reads as an empty one, whose
    missing fields the checks then report."""
    if value is None or isinstance(value, Unreadable | Mapping):
        return value
    return {}


def _objects(listing: object) -> Listing:
    """A listing as the checks take it: items that are not maps are dropped."""
    if isinstance(listing, Unreadable):
        return listing
    return [item for item in listing if isinstance(item, MAPPING_TYPES)] if isinstance(listing, SEQUENCE_TYPES) else []


def run_checks(installation: Installation, target: Target) -> list[Result]:
    """Every check, in order. A check that fails unexpectedly (a bug) becomes one "cannot tell" line; the others
    still run."""
    crds = {name: _object(crd) for name, crd in installation.crds.items()}
    configurations = {kind: _object(c) for kind, c in installation.webhook_configurations.items()}
    nodes, queues = _objects(installation.nodes), _objects(installation.queues)
    podgroups, pods = _objects(installation.podgroups), _objects(installation.pods)
    operator = _object(installation.operator_deployment)
    mapping = isinstance(operator, Mapping) and maps_namespace_queues(operator)
    gate = isinstance(operator, Mapping) and runs_card_gate(operator)
    schedulers = volcano_schedulers(operator) if isinstance(operator, Mapping) else keys.VOLCANO_SCHEDULERS
    card_policy = operator_card_policy(operator) if isinstance(operator, Mapping) else DEFAULT_CARD_POLICY
    checks: list[tuple[str, Callable[[], list[Result]]]] = [
        (VOLCANO, lambda: check_volcano(crds, _objects(installation.scheduler_deployments))
                  + check_namespace_queues(_object(installation.volcano_podgroup_webhook),
                                           _object(installation.volcano_podgroup_policy),
                                           _object(installation.operator_deployment))),
        (CRD_ADDITIONS, lambda: check_crd_additions(crds)),
        (WEBHOOKS, lambda: check_webhooks(configurations, _object(installation.tls_secret), target,
                                          installation.trust)),
        (OPERATOR, lambda: check_operator(_object(installation.operator_deployment),
                                          _objects(installation.operator_pods), _object(installation.lease), target,
                                          installation.now, _object(installation.controller_deployment),
                                          _objects(installation.controller_pods))),
        (OPERATOR, lambda: check_card_gate(gate, configurations.get("MutatingWebhookConfiguration"), pods, target)
                   + check_gate_policy(gate, _object(installation.gate_policy),
                                       _object(installation.gate_policy_binding), target)),
        (SCHEDULER, lambda: check_scheduler(_object(installation.scheduler_configmap), target, nodes=nodes,
                                            queues=queues, extender_conf=_object(installation.extender_conf),
                                            card_gate=gate)),
        (NODES, lambda: check_nodes(nodes)),
        (QUEUES, lambda: check_queues(nodes, queues, podgroups, pods, target, schedulers=schedulers,
                                      namespaces=_objects(installation.namespaces) if mapping else None,
                                      card_gate=gate, card_policy=card_policy)),
    ]
    results: list[Result] = []
    for name, check in checks:
        try:
            results += check()
        except Exception as error:  # a doctor keeps examining the rest; the line says it is a bug
            results.append(Result(name, Status.UNKNOWN, one_line(
                f"this check failed unexpectedly ({type(error).__name__}: {error}): a bug in cardquota"),
                fix="please report it with this line; the other checks are not affected"))
    return results


def overall(results: Iterable[Result]) -> Status:
    """FAIL when something is wrong; else UNKNOWN when something could not be told; else WARN or OK."""
    statuses = {result.status for result in results}
    for status in (Status.FAIL, Status.UNKNOWN, Status.WARN):
        if status in statuses:
            return status
    return Status.OK


# ------------------------------------------------------------------------------------------------------ Volcano


def check_volcano(crds: Mapping[str, Read], scheduler_deployments: Listing) -> list[Result]:
    results: list[Result] = []
    missing = [name for name in CRD_NAMES if crds.get(name) is None]
    unreadable = [(name, crd) for name in CRD_NAMES if isinstance(crd := crds.get(name), Unreadable)]
    if missing:
        results.append(Result(VOLCANO, Status.FAIL, f"Volcano's CRD{_s(missing)} {_names(missing)} "
                              f"{'is' if len(missing) == 1 else 'are'} not installed: Volcano is missing or "
                              "incomplete", fix=VOLCANO_INSTALL))
    results += [_cannot_tell(VOLCANO, f"whether the CRD {name} is installed", crd) for name, crd in unreadable]
    if not missing and not unreadable:
        results.append(Result(VOLCANO, Status.OK, f"Volcano's CRDs are installed: {', '.join(CRD_NAMES)}"))
    results.append(_volcano_version(scheduler_deployments))
    return results


def check_namespace_queues(webhook: Read, policy: Read, operator: Read) -> list[Result]:
    """Whether Volcano maps namespaces to queues (its PodGroup mutation: :data:`VOLCANO_PODGROUP_WEBHOOK` or
    :data:`VOLCANO_PODGROUP_POLICY` exists) as cardquota's operator is told (``CARDQUOTA_MAP_NAMESPACE_QUEUES``, or
    ``--map-namespace-queues``, on its container). Nothing is said when neither maps, nor when the operator's
    Deployment cannot be read (the Operator check says so)."""
    if not isinstance(operator, Mapping):
        return []
    follows = maps_namespace_queues(operator)
    found = [what for what, read in ((f"MutatingWebhookConfiguration {VOLCANO_PODGROUP_WEBHOOK}", webhook),
                                     (f"MutatingAdmissionPolicy {VOLCANO_PODGROUP_POLICY}", policy))
             if isinstance(read, Mapping)]
    unreadable = next((read for read in (webhook, policy) if isinstance(read, Unreadable)), None)
    if not found and unreadable is not None:
        return [_cannot_tell(VOLCANO, "whether Volcano maps namespaces to queues", unreadable)] if follows else []
    if found and follows:
        return [Result(VOLCANO, Status.OK, f"Volcano maps namespaces to queues ({', '.join(found)}) and cardquota "
                       "follows it")]
    if found:
        return [Result(VOLCANO, Status.WARN, f"Volcano maps namespaces to queues ({', '.join(found)}) but cardquota "
                       "does not: a card pod, Volcano Job or workload with no queue in a namespace annotated "
                       "scheduling.volcano.sh/queue-name is checked and counted against queue default, not the "
                       "namespace's (docs/admission.md: A namespace's queue)",
                       fix=f"set {MAP_NAMESPACE_QUEUES_ENV}=1 on the operator: the kustomize component "
                       "components/namespace-queues, or the Helm chart's --set mapNamespaceQueues=true")]
    if follows:
        return [Result(VOLCANO, Status.WARN, "cardquota maps namespaces to queues but Volcano does not (no "
                       f"MutatingWebhookConfiguration {VOLCANO_PODGROUP_WEBHOOK}, no MutatingAdmissionPolicy "
                       f"{VOLCANO_PODGROUP_POLICY}): PodGroups with no queue in an annotated namespace go to queue "
                       "default, which cardquota does not check them against",
                       fix=f"remove {MAP_NAMESPACE_QUEUES_ENV} from the operator (Helm: mapNamespaceQueues=false), or "
                       "turn Volcano's mapping on (its chart: custom.map_enable=true, or /podgroups/mutate in "
                       "custom.enabled_admissions)")]
    return []


GATED_MUTATION = "pods.mutate.cardquota.io"
"""The mutation that adds the card-quota gate (manifests/base/webhooks.yaml)."""
GATE_POLICY = "cardquota-card-gate"
"""The ValidatingAdmissionPolicy, and its binding, refusing removal of the card-quota gate but by cardquota's own
accounts (manifests/base/card-gate-policy.yaml)."""


def check_card_gate(gate: bool, mutating: Read, pods: Listing, target: Target) -> list[Result]:
    """The card-quota gate's path: with the gate on, the card-pod mutation that adds it fails closed (else a card pod
    created while no replica answers is placed outside its quota); with it off, no pod still holds the gate (nothing
    would lift it: pods created before it was turned off wait for ever)."""
    gated = [] if isinstance(pods, Unreadable) else [
        f"{_map(pod.get('metadata')).get('namespace')}/{_map(pod.get('metadata')).get('name')}" for pod in pods
        if not _map(pod.get("spec")).get("nodeName") and any(
            isinstance(gate_entry, MAPPING_TYPES) and gate_entry.get("name") == keys.CARD_GATE
            for gate_entry in _list(_map(pod.get("spec")).get("schedulingGates")))]
    if not gate:
        if isinstance(pods, Unreadable):
            return [_cannot_tell(OPERATOR, f"that no pod holds the card-quota gate ({keys.CARD_GATE})", pods)]
        if gated:
            return [Result(OPERATOR, Status.FAIL, f"{len(gated)} pod{_s(gated)} hold{'' if len(gated) != 1 else 's'} "
                           f"the card-quota gate ({keys.CARD_GATE}), which the operator runs without: nothing "
                           "lifts it", details=_some(gated),
                           fix="turn the gate back on (CARDQUOTA_CARD_GATE=1; Helm cardGate.enabled=true), or remove "
                           "the gate from each pod (docs/install.md, Moving to the card-quota gate)")]
        return []
    if isinstance(mutating, Unreadable) or mutating is None:
        return []  # (the Admission webhooks check says it)
    hooks = [w for w in _list(mutating.get("webhooks")) if isinstance(w, MAPPING_TYPES) and w.get("name") ==
             GATED_MUTATION]
    name = target.webhook_configurations.get("MutatingWebhookConfiguration", "cardquota-mutating")
    if not hooks:
        return [Result(OPERATOR, Status.FAIL, f"the operator runs the card-quota gate but MutatingWebhookConfiguration "
                       f"{name} has no {GATED_MUTATION}: card pods are created without the gate, unchecked",
                       fix=DEPLOY)]
    waiting = f"; {len(gated)} pod{_s(gated)} wait{'s' if len(gated) == 1 else ''} at it" if gated else ""
    if hooks[0].get("failurePolicy") != "Fail":
        return [Result(OPERATOR, Status.WARN, f"{GATED_MUTATION} fails open ({hooks[0].get('failurePolicy')}): a "
                       "card pod created while no replica answers is placed without the card-quota gate, outside its "
                       "queue's quota" + waiting,
                       fix=f"kubectl patch mutatingwebhookconfiguration {name} --type=json -p '[{{\"op\": \"replace\", "
                       f"\"path\": \"/webhooks/{_list(mutating.get('webhooks')).index(hooks[0])}/failurePolicy\", "
                       "\"value\": \"Fail\"}]' (or re-apply the manifests)")]
    return [Result(OPERATOR, Status.OK, f"card pods are created at the card-quota gate ({GATED_MUTATION} fails "
                   f"closed){waiting}")]


def check_gate_policy(gate: bool, policy: Read, binding: Read, target: Target) -> list[Result]:
    """With the gate on, the API server keeps it cardquota's to lift: ValidatingAdmissionPolicy
    :data:`GATE_POLICY`, failing closed, and its binding (to it) denying, not only warning or auditing. Without them
    anyone allowed to patch pods — a user, another controller — can drop the gate and run a pod past its quota. And
    the accounts the policy lets through are those of cardquota's namespace: else it refuses cardquota's own lifts,
    and every card pod waits."""
    if not gate:
        return []
    what = f"ValidatingAdmissionPolicy{{,Binding}} {GATE_POLICY}"
    unreadable = next((read for read in (policy, binding) if isinstance(read, Unreadable)), None)
    if unreadable is not None:
        return [_cannot_tell(OPERATOR, f"that only cardquota can lift the card-quota gate ({what})", unreadable)]
    missing = [kind for kind, read in (("ValidatingAdmissionPolicy", policy),
                                       ("ValidatingAdmissionPolicyBinding", binding)) if not isinstance(read, Mapping)]
    risk = "anyone allowed to patch pods can remove the card-quota gate and run a pod past its queue's quota"
    if missing:
        return [Result(OPERATOR, Status.WARN, f"{' and '.join(f'{kind} {GATE_POLICY}' for kind in missing)} "
                       f"{'is' if len(missing) == 1 else 'are'} missing: {risk}",
                       fix="re-apply the manifests (kubectl apply -k manifests/overlays/…) or the Helm chart; "
                       "Kubernetes 1.30 or later serves ValidatingAdmissionPolicy")]
    spec = _map(_map(policy).get("spec"))
    accounts = f"system:serviceaccount:{target.namespace}:"
    if not any(accounts in str(_map(condition).get("expression")) for condition in _list(spec.get("matchConditions"))):
        return [Result(OPERATOR, Status.FAIL, f"ValidatingAdmissionPolicy {GATE_POLICY} does not let cardquota's "
                       f"accounts in namespace {target.namespace} through (no {accounts}… in its matchConditions): the "
                       "API server refuses cardquota's own lifts, and every card pod waits at the gate",
                       fix="re-apply the manifests with the namespace cardquota runs in (kustomize: the overlay's "
                       "transformers/namespace; Helm: the release namespace)")]
    bound = _map(_map(binding).get("spec")).get("policyName")
    if bound != GATE_POLICY:
        return [Result(OPERATOR, Status.WARN, f"ValidatingAdmissionPolicyBinding {GATE_POLICY} binds "
                       f"{_shown(str(bound))}, not the policy {GATE_POLICY}: {risk}",
                       fix="re-apply the manifests or the Helm chart")]
    actions = [str(action) for action in _list(_map(_map(binding).get("spec")).get("validationActions"))]
    failure = spec.get("failurePolicy") or "Fail"
    if "Deny" not in actions or failure != "Fail":
        why = (f"its binding only {', '.join(actions) or 'does nothing'} (no Deny)" if "Deny" not in actions
               else f"it fails open (failurePolicy {failure})")
        return [Result(OPERATOR, Status.WARN, f"ValidatingAdmissionPolicy {GATE_POLICY} does not hold: {why}, so "
                       f"{risk}", fix="re-apply the manifests or the Helm chart (validationActions [Deny], "
                       "failurePolicy Fail)")]
    return [Result(OPERATOR, Status.OK, f"only cardquota's accounts can lift the card-quota gate (the API server's "
                   f"ValidatingAdmissionPolicy {GATE_POLICY} denies the others)")]


def maps_namespace_queues(deployment: Mapping[str, Any]) -> bool:
    """Whether the operator Deployment's first container is told Volcano maps namespaces to queues."""
    return _switched_on(deployment, "--map-namespace-queues", MAP_NAMESPACE_QUEUES_ENV)


def runs_card_gate(deployment: Mapping[str, Any]) -> bool:
    """Whether the operator Deployment's first container runs the card-quota gate."""
    return _switched_on(deployment, "--card-gate", CARD_GATE_ENV)


def volcano_schedulers(deployment: Mapping[str, Any]) -> frozenset[str]:
    """The scheduler names the operator Deployment's first container is told Volcano runs (``--schedulers`` among
    its args, else ``CARDQUOTA_SCHEDULERS``), as its usage counts pods by; ``volcano`` when it is told none."""
    container = _first_container(deployment)
    named = _option_values(container, SCHEDULER_FLAGS)
    if not named:
        named = [str(value or "") for value in _env_values(container, SCHEDULERS_ENV)[-1:]]
    names = frozenset(name.strip() for value in named for name in value.split(",") if name.strip())
    return names or keys.VOLCANO_SCHEDULERS


def operator_card_policy(deployment: Mapping[str, Any]) -> CardPolicy:
    """The card policy the operator Deployment's first container runs with (``--unquoted-queues`` and
    ``--card-pods-outside-volcano`` among its args, else their variables; a value it would refuse, the default)."""
    container = _first_container(deployment)

    def chosen(flag: str, env: str, kind: type[UnquotedQueues] | type[OutsideVolcano], default: StrEnum) -> str:
        values = _option_values(container, (flag,)) or [str(value or "") for value in _env_values(container, env)]
        return values[-1] if values and values[-1] in set(kind) else default.value

    return CardPolicy(
        unquoted_queues=UnquotedQueues(chosen("--unquoted-queues", UNQUOTED_QUEUES_ENV, UnquotedQueues,
                                              DEFAULT_CARD_POLICY.unquoted_queues)),
        outside_volcano=OutsideVolcano(chosen("--card-pods-outside-volcano", OUTSIDE_VOLCANO_ENV, OutsideVolcano,
                                              DEFAULT_CARD_POLICY.outside_volcano)))


def _option_values(container: Mapping[str, Any], flags: tuple[str, ...]) -> list[str]:
    """The values the container's args give any of ``flags`` (``--flag=value`` or ``--flag value``), in order."""
    args = [str(arg) for arg in _list(container.get("args"))]
    values: list[str] = []
    for index, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if flag in flags:
            values.append(value if equals else (args[index + 1] if index + 1 < len(args) else ""))
    return values


def _switched_on(deployment: Mapping[str, Any], flag: str, env: str) -> bool:
    """Whether the Deployment's first container has ``flag`` among its args, or ``env`` set to a true value."""
    container = _first_container(deployment)
    if flag in [str(arg) for arg in _list(container.get("args"))]:
        return True
    values = _env_values(container, env)
    return bool(values) and read_flag(str(values[-1])) is True


def _first_container(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    """The Deployment's first container (empty when it has none)."""
    template = _map(_map(deployment.get("spec")).get("template"))
    containers = [c for c in _list(_map(template.get("spec")).get("containers")) if isinstance(c, MAPPING_TYPES)]
    return containers[0] if containers else {}


def _env_values(container: Mapping[str, Any], name: str) -> list[object]:
    """The values the container's ``env`` gives ``name``, in order (the last one wins)."""
    return [item.get("value") for item in _list(container.get("env"))
            if isinstance(item, MAPPING_TYPES) and item.get("name") == name]


def _volcano_version(deployments: Listing) -> Result:
    if isinstance(deployments, Unreadable):
        return _cannot_tell(VOLCANO, "which Volcano version runs", deployments)
    found = volcano_scheduler(deployments)
    if found is None:
        return Result(VOLCANO, Status.WARN, "Volcano version unknown: no Deployment labelled app=volcano-scheduler, "
                      "and no volcano-system/volcano-scheduler",
                      fix="expected when the scheduler runs under another name (the extender setup); otherwise "
                      "check Volcano's scheduler is deployed: kubectl get deploy -A -l app=volcano-scheduler")
    where, image = found
    version = image_version(image)
    if version is None:
        return Result(VOLCANO, Status.WARN, f"Volcano version unknown: {where} runs {_shown(image)}, which has no "
                      "version tag", fix="nothing to do if you know it is v1.13 or later")
    parsed = _release(version)
    if parsed is not None and parsed < OLDEST_VOLCANO:
        return Result(VOLCANO, Status.WARN, f"Volcano {version} ({where}) is older than v1.13, the oldest release "
                      "cardquota supports", fix="upgrade Volcano, then run: " + restore_command())
    return Result(VOLCANO, Status.OK, f"Volcano {version} ({where} runs {image})")


def volcano_scheduler(deployments: Iterable[Manifest]) -> tuple[str, str] | None:
    """("namespace/name", image) of Volcano's scheduler Deployment, preferring volcano-system/volcano-scheduler."""
    candidates: list[tuple[bool, str, str]] = []
    for deployment in deployments:
        namespace, name = _namespace(deployment), _name(deployment)
        labels = _labels(deployment)
        if labels.get(SCHEDULER_LABEL[0]) != SCHEDULER_LABEL[1] and (namespace, name) != SCHEDULER_DEPLOYMENT:
            continue
        image = _scheduler_image(deployment)
        if image is not None:
            candidates.append(((namespace, name) != SCHEDULER_DEPLOYMENT, f"{namespace}/{name}", image))
    if not candidates:
        return None
    _, where, image = min(candidates)
    return where, image


def _scheduler_image(deployment: Manifest) -> str | None:
    spec = _map(_map(_map(deployment.get("spec")).get("template")).get("spec"))
    containers = [c for c in _list(spec.get("containers")) if isinstance(c, MAPPING_TYPES)]
    images = [(c.get("name"), c.get("image")) for c in containers if isinstance(c.get("image"), str)]
    for name, image in images:
        if "vc-scheduler" in str(image) or name == "volcano-scheduler":
            return str(image)
    return str(images[0][1]) if images else None


def image_version(image: str) -> str | None:
    """The tag of an image reference (``docker.io/volcanosh/vc-scheduler:v1.15.1`` → ``v1.15.1``), None without."""
    reference = image.split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    _, colon, tag = last.partition(":")
    return tag if colon and tag else None


def _release(version: str) -> tuple[int, int] | None:
    match = re.match(r"v?(\d{1,6})\.(\d{1,6})", version)
    return (int(match[1]), int(match[2])) if match else None


# ------------------------------------------------------------------------------------------------ CRD additions


def check_crd_additions(crds: Mapping[str, Read]) -> list[Result]:
    results: list[Result] = []
    for name in CRD_NAMES:
        crd = crds.get(name)
        if isinstance(crd, Unreadable):
            results.append(_cannot_tell(CRD_ADDITIONS, f"whether cardquota's additions to {name} are in place", crd))
            continue
        if crd is None:
            results.append(Result(CRD_ADDITIONS, Status.FAIL, f"{name} is not installed: nothing to add to",
                                  fix=f"install Volcano first, then run: {restore_command()}"))
            continue
        states = inspect(crd)
        if not states:
            results.append(Result(CRD_ADDITIONS, Status.FAIL, f"{name} has no served version cardquota can read "
                                  "(spec.versions)", fix=f"reinstall Volcano's CRDs, then run: {restore_command()}"))
            continue
        results += _addition_lines(name, states)
    return results


def _addition_lines(name: str, states: Sequence[AdditionState]) -> list[Result]:
    results: list[Result] = []
    by_line: dict[tuple[str, State], list[str]] = {}
    for addition in states:
        by_line.setdefault((addition.version, addition.state), []).append(addition.label)
    for (version, state), labels in by_line.items():
        message = f"{name} {version}: {', '.join(labels)} {ADDITION_WORDING[state]}"
        if state is State.PRESENT:
            results.append(Result(CRD_ADDITIONS, Status.OK, message))
        elif state is State.FOREIGN:
            results.append(Result(CRD_ADDITIONS, Status.WARN, message,
                                  fix=f"nothing to do if it is Volcano's own: kubectl get crd {name} -o yaml"))
        elif state is State.MISSING:
            results.append(Result(CRD_ADDITIONS, Status.FAIL, message, fix=restore_command()))
        else:
            results.append(Result(CRD_ADDITIONS, Status.FAIL, message,
                                  fix=f"this is not Volcano's CRD: reinstall Volcano's, then run: {restore_command()}"))
    return results


# --------------------------------------------------------------------------------------------------- webhooks


def check_webhooks(configurations: Mapping[str, Read], secret: Read, target: Target,
                   trust: TrustCheck) -> list[Result]:
    results: list[Result] = []
    bundles: dict[str, list[str]] = {}  # caBundle → the configurations carrying it
    operator_logs = _logs_command(target)
    for kind, name in target.webhook_configurations.items():
        configuration = configurations.get(kind)
        what = f"{kind} {name}"
        if isinstance(configuration, Unreadable):
            results.append(_cannot_tell(WEBHOOKS, f"{what} is registered", configuration))
            continue
        if configuration is None:
            results.append(Result(WEBHOOKS, Status.FAIL, f"{what} is not registered: nothing is checked at "
                                  "admission", fix=DEPLOY))
            continue
        webhooks = [w for w in _list(configuration.get("webhooks")) if isinstance(w, MAPPING_TYPES)]
        if not webhooks:
            results.append(Result(WEBHOOKS, Status.FAIL, f"{what} has no webhooks", fix=DEPLOY))
            continue
        names = [_shown(str(w.get("name") or f"webhooks[{i}]")) for i, w in enumerate(webhooks)]
        without = [n for n, w in zip(names, webhooks, strict=True) if not _ca_bundle(w)]
        elsewhere = [f"{n} ({service})" for n, w in zip(names, webhooks, strict=True)
                     if (service := _service(w)) is not None and service != f"{target.namespace}/{target.service}"]
        strangers = [f"{n} ({', '.join(others)})" for n, w in zip(names, webhooks, strict=True)
                     if (others := other_namespaces(w, target.namespace))]
        problems: list[str] = []
        if without:
            problems.append(f"{len(without)} of {len(webhooks)} webhooks have no caBundle, so the API server cannot "
                            "call them")
        if elsewhere:
            problems.append(f"{len(elsewhere)} call another Service than {target.namespace}/{target.service}")
        if strangers:
            problems.append(f"{len(strangers)} take another namespace than {target.namespace} for cardquota's own, so "
                            "cardquota's writes or namespace go through its own webhooks")
        if problems:
            results.append(Result(
                WEBHOOKS, Status.FAIL, f"{what}: {'; '.join(problems)}",
                details=_some([*without, *elsewhere, *strangers]),
                fix=("the operator sets each caBundle at start and every minute: is it running? "
                     f"kubectl -n {target.namespace} get pods; {operator_logs}") if without else
                f"re-apply the manifests: {DEPLOY} (an overlay that sets namespace: lists "
                f"{NAMESPACE_TRANSFORMER} under transformers:), or point doctor at your install with -n/--service"))
        else:
            results.append(Result(WEBHOOKS, Status.OK, f"{what}: {len(webhooks)} webhook{_s(webhooks)}, each with "
                                  "a caBundle"))
        for webhook in webhooks:
            if bundle := _ca_bundle(webhook):
                carriers = bundles.setdefault(bundle, [])
                if name not in carriers:
                    carriers.append(name)
    if bundles:
        results.append(_certificate(bundles, secret, target, trust))
    return results


def _certificate(bundles: Mapping[str, list[str]], secret: Read, target: Target, trust: TrustCheck) -> Result:
    where = f"Secret {target.namespace}/{target.tls_secret}"
    restart = f"kubectl -n {target.namespace} rollout restart deployment/{target.deployment}"
    if isinstance(secret, Unreadable):
        return _cannot_tell(WEBHOOKS, f"the caBundle verifies the serving certificate in {where}", secret)
    if secret is None:
        return Result(WEBHOOKS, Status.FAIL, f"{where} not found: the webhooks' serving certificate is not there",
                      fix=f"the operator creates it at start ({restart}); if your certificate comes from "
                      "elsewhere (--cert-dir, cert-manager), name its Secret with --tls-secret")
    certificate = _map(secret.get("data")).get("tls.crt")  # a kubernetes.io/tls Secret's certificate (chain)
    if not isinstance(certificate, str) or not certificate:
        return Result(WEBHOOKS, Status.FAIL, f"{where} has no tls.crt", fix=f"let the operator rewrite it: {restart}")
    verdicts = [(carriers, trust(bundle, certificate, target.dns_name)) for bundle, carriers in bundles.items()]
    for carriers, verdict in verdicts:
        if verdict.problem is not None:
            return Result(WEBHOOKS, Status.FAIL, one_line(
                f"the caBundle of {' and '.join(carriers)} does not verify the serving certificate in {where} "
                f"({target.dns_name}): {verdict.problem}"),
                fix=f"the operator rewrites the caBundle and renews the certificate within a minute; if this "
                f"stays, restart it: {restart}")
    days = min((v.days_left for _, v in verdicts if v.days_left is not None), default=None)
    if days is not None and days < CERT_RENEW_DAYS:
        return Result(WEBHOOKS, Status.WARN, f"the serving certificate in {where} expires in {days} day{_s(days)}: "
                      f"the operator renews it {CERT_RENEW_DAYS} days ahead, so it is not renewing",
                      fix=f"{_logs_command(target)}; then: {restart}")
    expiry = f", expires in {days} days" if days is not None else ""
    return Result(WEBHOOKS, Status.OK, f"the caBundle verifies the serving certificate in {where} "
                  f"({target.dns_name}{expiry})")


OWN_WRITES_CONDITION = "not-cardquota-itself"
"""The matchCondition by which a webhook never receives cardquota's own writes (its service accounts')."""
NAMESPACE_TRANSFORMER = "manifests/transformers/namespace"
"""Writes cardquota's namespace into that condition and into the namespaceSelectors, which kustomize's
``namespace:`` does not reach."""
_SERVICE_ACCOUNT_NAMESPACE = re.compile(r"system:serviceaccount:([^:'\"]*):")
_NAMESPACE_LABEL = "kubernetes.io/metadata.name"


def other_namespaces(webhook: Mapping[str, Any], namespace: str) -> list[str]:
    """Where a webhook takes another namespace than ``namespace`` for cardquota's own (an overlay that set
    ``namespace:`` without :data:`NAMESPACE_TRANSFORMER`): the namespaces of the service accounts its
    :data:`OWN_WRITES_CONDITION` names; a namespaceSelector that leaves namespaces out by name (``NotIn``) and not
    ``namespace``. Empty when it has neither, or both name ``namespace``."""
    found: list[str] = []
    for condition in _list(webhook.get("matchConditions")):
        if isinstance(condition, MAPPING_TYPES) and condition.get("name") == OWN_WRITES_CONDITION:
            named = _SERVICE_ACCOUNT_NAMESPACE.findall(str(condition.get("expression") or ""))
            found.extend(f"service accounts of {other}" for other in dict.fromkeys(named) if other != namespace)
    for expression in _list(_map(webhook.get("namespaceSelector")).get("matchExpressions")):
        if (isinstance(expression, MAPPING_TYPES) and expression.get("key") == _NAMESPACE_LABEL
                and expression.get("operator") == "NotIn" and namespace not in _list(expression.get("values"))):
            left_out = ", ".join(map(str, _list(expression.get("values"))))
            found.append(f"namespaceSelector leaves out {left_out}")
    return found


def _ca_bundle(webhook: Mapping[str, Any]) -> str:
    bundle = _map(webhook.get("clientConfig")).get("caBundle")
    return bundle if isinstance(bundle, str) else ""


def _service(webhook: Mapping[str, Any]) -> str | None:
    service = _map(webhook.get("clientConfig")).get("service")
    if not isinstance(service, MAPPING_TYPES):
        return None  # a url: not ours to judge
    return f"{service.get('namespace')}/{service.get('name')}"


# --------------------------------------------------------------------------------------------------- operator


def check_operator(deployment: Read, pods: Listing, lease: Read, target: Target, now: float,
                   controller: Read = None, controller_pods: Listing = ()) -> list[Result]:
    """The webhook Deployment's pods, the controller Deployment's when the controllers run apart (``controller``
    found), and the Lease: held by a ready pod of whichever Deployment runs the controllers."""
    results: list[Result] = []
    where = f"{target.namespace}/{target.deployment}"
    if isinstance(deployment, Unreadable):
        results.append(_cannot_tell(OPERATOR, f"Deployment {where} is installed", deployment))
    elif deployment is None:
        results.append(Result(OPERATOR, Status.FAIL, f"Deployment {where} not found: the operator is not deployed "
                              "(or in another namespace: -n)", fix=DEPLOY))
        return results
    ready = _ready_pods(deployment, pods, target.pod_selector, target, results,
                        _Pods("operator", target.deployment,
                              "admissions of queues, PodGroups and Volcano jobs fail"))
    leading, leaders = "operator", target.pod_selector
    if isinstance(controller, MAPPING_TYPES):
        leading, leaders = "controller", pod_selector(controller, {})
        ready = _ready_pods(controller, controller_pods, leaders, target, results,
                            _Pods("controller", target.controller_deployment,
                                  "no usage, node card types or events are published"))
    elif isinstance(controller, Unreadable):
        results.append(_cannot_tell(OPERATOR, f"whether Deployment {target.namespace}/"
                                    f"{target.controller_deployment} runs the controllers", controller))
    results.append(_leader(lease, ready, target, now, leading, _logs_command(target, leaders)))
    return results


@dataclass(frozen=True)
class _Pods:
    what: str
    """"operator" or "controller"."""
    deployment: str
    impact: str
    """What no ready pod means."""


def _ready_pods(deployment: Read, pods: Listing, selector: Mapping[str, str], target: Target,
                results: list[Result], kind: _Pods) -> list[str] | None:
    """Adds the line on the Deployment's pods; the ready ones, None when the pods could not be read."""
    wanted = 1
    selector = pod_selector(deployment, selector)
    if isinstance(deployment, MAPPING_TYPES):
        replicas = _map(deployment.get("spec")).get("replicas", 1)
        wanted = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
    if isinstance(pods, Unreadable):
        results.append(_cannot_tell(OPERATOR, f"the {kind.what}'s pods are ready", pods))
        return None
    return _pod_lines(pods, dict(selector), wanted, target, results, kind)


def pod_selector(deployment: Read, default: Mapping[str, str]) -> Mapping[str, str]:
    """The Deployment's ``matchLabels``; ``default`` when it cannot tell."""
    labels = _map(_map(_map(deployment.get("spec")).get("selector")).get("matchLabels")) \
        if isinstance(deployment, MAPPING_TYPES) else {}
    if labels and all(isinstance(v, str) for v in labels.values()):
        return {str(k): str(v) for k, v in labels.items()}
    return default


def label_selector(labels: Mapping[str, str]) -> str:
    """``a=1,b=2``: the labels as ``kubectl -l`` and a list's ``labelSelector`` take them."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def _pod_lines(pods: Sequence[Manifest], selector: Mapping[str, str], wanted: int, target: Target,
               results: list[Result], kind: _Pods) -> list[str]:
    chosen = sorted((pod for pod in pods if _namespace(pod) == target.namespace
                     and all(_labels(pod).get(k) == v for k, v in selector.items())), key=_name)
    ready = [_name(pod) for pod in chosen if _ready(pod)]
    not_ready = [f"{_name(pod)}: {_why_not_ready(pod)}" for pod in chosen if not _ready(pod)]
    labels = label_selector(selector)
    describe_pods = f"kubectl -n {target.namespace} describe pods -l {labels}"
    if not chosen:
        scale = f"kubectl -n {target.namespace} scale deployment {kind.deployment} --replicas=2"
        results.append(Result(OPERATOR, Status.FAIL, f"no {kind.what} pods (labels {labels}) in "
                              f"{target.namespace}; the Deployment wants {wanted}",
                              fix=scale if wanted == 0 else
                              f"kubectl -n {target.namespace} describe deployment {kind.deployment}"))
    elif not ready:
        results.append(Result(OPERATOR, Status.FAIL, f"none of the {len(chosen)} {kind.what} pods is ready: "
                              f"{kind.impact}", details=_some(not_ready),
                              fix=f"{describe_pods}; {_logs_command(target, selector)}"))
    elif len(ready) < wanted or not_ready:
        results.append(Result(OPERATOR, Status.WARN, f"{len(ready)} of {max(wanted, len(chosen))} {kind.what} pods "
                              f"ready: {_names(ready)}", details=_some(not_ready), fix=describe_pods))
    else:
        results.append(Result(OPERATOR, Status.OK, f"{len(ready)} of {len(chosen)} {kind.what} pods ready: "
                              f"{_names(ready)}"))
    return ready


def _ready(pod: Manifest) -> bool:
    if _map(pod.get("metadata")).get("deletionTimestamp"):
        return False
    conditions = _list(_map(pod.get("status")).get("conditions"))
    return any(isinstance(c, MAPPING_TYPES) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in conditions)


def _why_not_ready(pod: Manifest) -> str:
    if _map(pod.get("metadata")).get("deletionTimestamp"):
        return "terminating"
    status = _map(pod.get("status"))
    for container in _list(status.get("containerStatuses")):
        state = _map(_map(container).get("state"))
        reason = _map(state.get("waiting")).get("reason") or _map(state.get("terminated")).get("reason")
        if isinstance(reason, str) and reason:
            return _shown(reason)
    phase = status.get("phase")
    return f"{_shown(phase)}, not ready" if isinstance(phase, str) and phase else "not ready"


def _leader(lease: Read, ready: Sequence[str] | None, target: Target, now: float, what: str, logs: str) -> Result:
    where = f"Lease {target.namespace}/{target.lease}"
    if isinstance(lease, Unreadable):
        return _cannot_tell(OPERATOR, "which replica leads", lease)
    if lease is None:
        return Result(OPERATOR, Status.FAIL, f"no leader: {where} does not exist, so no replica publishes usage or "
                      "events", fix=f"a running replica creates it within seconds: {logs}")
    spec = _map(lease.get("spec"))
    holder = spec.get("holderIdentity")
    if not isinstance(holder, str) or not holder:
        return Result(OPERATOR, Status.FAIL, f"no leader: {where} has no holder", fix=logs)
    duration = spec.get("leaseDurationSeconds")
    if not isinstance(duration, int) or isinstance(duration, bool) or duration <= 0:
        return Result(OPERATOR, Status.FAIL, f"{where} has no valid leaseDurationSeconds "
                      f"({_shown(str(duration))})", fix=f"kubectl -n {target.namespace} delete lease {target.lease}"
                      " (a replica recreates it)")
    renewed = epoch_seconds(spec.get("renewTime"))
    if renewed is None:
        written = _shown(str(spec.get("renewTime")))
        return Result(OPERATOR, Status.FAIL, f"{where} has no readable renewTime ({written})",
                      fix=f"kubectl -n {target.namespace} delete lease {target.lease} (a replica recreates it)")
    age = now - renewed
    if age > duration:
        return Result(OPERATOR, Status.FAIL, f"no leader: {_shown(holder)} last renewed {where} {_duration(age)} "
                      f"ago, longer than its {duration} s: nobody publishes usage or events",
                      fix=f"{logs}; a replica takes over an expired Lease within 5 s")
    if ready is None:
        return _cannot_tell(OPERATOR, f"whether the leader {_shown(holder)} is a ready {what} pod",
                            Unreadable("the pods could not be read"))
    pod = holder_pod(holder, ready)
    if pod is None:
        return Result(OPERATOR, Status.FAIL, f"{where} is held by {_shown(holder)}, which is not a ready {what} pod "
                      f"({_names(ready) or 'none is ready'})", fix=f"{logs}; kubectl -n {target.namespace} delete "
                      f"lease {target.lease} lets a ready replica take over")
    return Result(OPERATOR, Status.OK, f"one leader: {pod} holds {where} (renewed within its {duration} s)")


def holder_pod(holder: str, pods: Iterable[str]) -> str | None:
    """The pod a Lease holder identity belongs to: the operator names itself ``<pod name>-<8 hex digits>``
    (operator/leader.py), other controllers often just ``<pod name>``."""
    for pod in pods:
        if holder == pod or (holder.startswith(pod + "-") and re.fullmatch(r"[0-9a-f]{8}", holder[len(pod) + 1:])):
            return pod
    return None


# -------------------------------------------------------------------------------------------------- scheduler


def check_scheduler(configmap: Read, target: Target, *, nodes: Listing = (), queues: Listing = (),
                    extender_conf: Read = None, card_gate: bool = False) -> list[Result]:
    where = f"ConfigMap {target.scheduler_namespace}/{target.scheduler_configmap}"
    edit = f"kubectl -n {target.scheduler_namespace} edit configmap {target.scheduler_configmap}"
    if isinstance(configmap, Unreadable):
        return [_cannot_tell(SCHEDULER, f"{where} enables card quotas", configmap)]
    if configmap is None:
        return [Result(SCHEDULER, Status.FAIL, f"{where} not found: is Volcano's scheduler installed there?",
                       fix="Volcano's installer creates it; then merge the extender's stanza into it: "
                       f"{MERGE_COMMAND}")]
    named = {**configmap, "metadata": {**_map(configmap.get("metadata")), "name": target.scheduler_configmap}}
    verdict = schedconf.admit(named, None, ClusterSnapshot(),
                              PolicyConfig(scheduler_configmap=target.scheduler_configmap))
    results: list[Result] = []
    if verdict.violations:
        results.append(Result(SCHEDULER, Status.FAIL, f"{where} breaks cardquota's ConfigMap policy "
                              f"({len(verdict.violations)} violation{_s(verdict.violations)})",
                              details=_some([str(v) for v in verdict.violations]),
                              fix=f"{edit} (cardquota check -f FILE checks a change offline)"))
    entries = _conf_entries(configmap)
    plugins = None if entries is None else {entry.name for entry in entries}
    enforcing = [name for name in (schedconf.CAPACITY_CARD, schedconf.EXTENDER) if name in (plugins or ())]
    if plugins is not None and not enforcing:
        results.append(Result(SCHEDULER, Status.FAIL, f"{where} enables neither {schedconf.CAPACITY_CARD} nor "
                              f"{schedconf.EXTENDER}: the scheduler does not enforce card quotas",
                              fix="stock Volcano: deploy manifests/components/extender, then merge the extender's "
                              f"stanza into the scheduler's configuration: {MERGE_COMMAND}"))
    results += _scheduler_leaks(entries, nodes, queues, extender_conf, where, edit, card_gate=card_gate)
    if not results:
        results.append(Result(SCHEDULER, Status.OK, f"{where} enables {' and '.join(enforcing)} and passes "
                              "cardquota's ConfigMap policy"))
    return results


MERGE_COMMAND = "kubectl cardquota scheduler-conf | kubectl apply -f - (docs/scheduler-configuration.md)"
"""Prints the live scheduler ConfigMap with the extender's stanza merged in (the user's plugins kept)."""


def _scheduler_leaks(entries: list[PluginEntry] | None, nodes: Listing, queues: Listing, extender_conf: Read,
                     where: str, edit: str, *, card_gate: bool = False) -> list[Result]:
    """Where the configuration lets work past the rules (:func:`cardquota.core.schedconf.extender.conf_leaks`),
    with the extender's conf as the source of the plugins' arguments when it can be read. ``entries``: the
    scheduler's plugins (None when its conf cannot be read)."""
    if entries is None or extender_entry(entries) is None:
        return []
    results: list[Result] = []
    arguments = _conf_entries(extender_conf) if isinstance(extender_conf, Mapping) else None
    if isinstance(extender_conf, Unreadable):
        results.append(_cannot_tell(SCHEDULER, f"the plugins' arguments agree with {EXTENDER_CONFIGMAP}",
                                    extender_conf))
    records = []
    for manifest in nodes if not isinstance(nodes, Unreadable) else ():
        try:
            records.append(node_record(manifest))
        except InputError:
            continue  # (the Nodes check reports it)
    offered = offered_resources((record.node.allocatable for record in records),
                                (resource for record in records for resource in record.cards.by_resource))
    capability, dra = [], []
    for manifest in queues if not isinstance(queues, Unreadable) else ():
        try:
            record = queue_record(manifest)
        except InputError:
            continue
        if record.queue.capability is not None:
            capability.append(record.queue.name)
        if record.queue.dra:
            dra.append(record.queue.name)
    leaks = conf_leaks(entries, offered=offered, capability_queues=sorted(capability), arguments=arguments,
                       card_gate=card_gate, dra_queues=sorted(dra))
    if leaks:
        results.append(Result(SCHEDULER, Status.WARN, f"{where} lets work past cardquota's rules in {len(leaks)} "
                              f"place{_s(leaks)}", details=_some([f"{leak.path}: {leak.message}" for leak in leaks]),
                              fix=f"{MERGE_COMMAND}, or {edit}"))
    return results


def _conf_entries(configmap: Manifest) -> list[PluginEntry] | None:
    """The plugins ``volcano-scheduler.conf`` enables, in order; None when it cannot be read (the policy says why)."""
    text = _map(configmap.get("data")).get(CONF_KEY)
    if not isinstance(text, str):
        return None
    try:
        return plugin_entries(load_one(text))
    except InputError:
        return None


# ------------------------------------------------------------------------------------------------------ nodes


def check_nodes(nodes: Listing) -> list[Result]:
    if isinstance(nodes, Unreadable):
        return [_cannot_tell(NODES, "which card types nodes offer", nodes)]
    results: list[Result] = []
    records = []
    unreadable: list[str] = []
    for manifest in nodes:
        try:
            records.append(node_record(manifest))
        except InputError as error:
            unreadable.append(f"{describe(Kind.NODE, manifest)}: {error}")
    offering = [record for record in records if record.cards.types]
    totals = cluster_totals(record.cards for record in records)
    card_resources = {card.resource for record in records for card in record.cards.types.values()}
    unlabelled = [found for record in records
                  if (found := unlabelled_accelerators(record.node, card_resources)) is not None]
    label_fix = _label_fix(unlabelled)
    if not offering:
        results.append(Result(NODES, Status.FAIL, f"no node offers a card type ({len(records)} node"
                              f"{_s(records)} read): card quotas have nothing to count", fix=label_fix))
    else:
        listed = ", ".join(f"{name} ({count})" for name, count in totals.items())
        results.append(Result(NODES, Status.OK, f"{len(offering)} of {len(records)} nodes offer {len(totals)} card "
                              f"type{_s(totals)}: {listed}"))
    if unlabelled:
        results.append(Result(NODES, Status.WARN, f"card discovery finds no card type for the accelerators of "
                              f"{len(unlabelled)} GPU/NPU node{_s(unlabelled)}: the labels it reads are missing",
                              details=_some([found.describe() for found in unlabelled]), fix=label_fix))
    shared = sharing_warnings(record.cards for record in records)
    if shared:
        results.append(Result(NODES, Status.WARN, f"{len(shared)} card type{_s(shared)} "
                              f"count{'s' if len(shared) == 1 else ''} slices of shared cards, not whole cards: a "
                              "quota of N for such a type is N slices", details=_some(shared),
                              fix="write those types' quotas in slices (cards × replicas), or quota whole cards on "
                              f"nodes that do not share them ({CARD_TYPES_SECTION})"))
    notes = [f"{record.node.name}: {note}" for record in records for note in record.cards.notes]
    if notes:
        results.append(Result(NODES, Status.WARN, f"card discovery skipped something on {len(notes)} node"
                              f"{_s(notes)}", details=_some(notes),
                              fix="set the <vendor>/<type>.memory and .replicas labels MPS card types are named from"))
    if unreadable:
        results.append(Result(NODES, Status.FAIL, f"{len(unreadable)} node{_s(unreadable)} cannot be read",
                              details=_some(unreadable),
                              fix="fix the node's allocatable or labels (kubectl edit node NODE)"))
    return results


def _label_fix(unlabelled: Sequence[Unlabelled]) -> str:
    """Label the nodes with their own vendor's product label: one command per vendor (the first such node's),
    else (no node to name) the NVIDIA example GPU feature discovery writes. GPU feature discovery is named only
    when an NVIDIA node lacks its label."""
    commands: dict[tuple[str, ...], str] = {}
    for found in unlabelled:
        commands.setdefault(tuple(key for key, _ in found.labels), found.command)
    vendors = {key.partition("/")[0] for keys in commands for key in keys}
    gfd = "; NVIDIA's GPU feature discovery writes nvidia.com/gpu.product" if "nvidia.com" in vendors or not vendors \
        else ""
    shown = "; ".join(commands.values()) or "kubectl label node NODE nvidia.com/gpu.product=NVIDIA-A100"
    return (f"label them with their vendor's product label (its value is the card type's name in quotas{gfd}), "
            f"e.g. {shown} ({CARD_TYPES_SECTION})")


# ----------------------------------------------------------------------------------------------------- queues


def check_queues(nodes: Listing, queues: Listing, podgroups: Listing, pods: Listing,
                 target: Target, *, namespaces: Listing | None = None,
                 schedulers: frozenset[str] = keys.VOLCANO_SCHEDULERS, card_gate: bool = False,
                 card_policy: CardPolicy = DEFAULT_CARD_POLICY) -> list[Result]:
    """``namespaces``: when the operator maps namespaces to queues, the Namespaces (the usage is then computed as it
    computes it); None when it does not. ``schedulers``: the ones the operator is told Volcano runs. ``card_gate``:
    the operator runs the card-quota gate (then pending card pods past it that a quota cannot hold are named).
    ``card_policy``: the operator's (queues without a card quota whose pods hold cards are named)."""
    listings = ((queues, "Queues"), (nodes, "Nodes"), (podgroups, "PodGroups"), (pods, "Pods"),
                *(((namespaces, "Namespaces"),) if namespaces is not None else ()))
    for listing, what in listings:
        if isinstance(listing, Unreadable):
            return [_cannot_tell(QUEUES, f"the published usage is current ({what} unreadable)", listing)]
    ledger, unreadable = _ledger([manifest for listing, _ in listings
                                  if not isinstance(listing, Unreadable) for manifest in listing],
                                 map_namespace_queues=namespaces is not None, schedulers=schedulers,
                                 card_policy=card_policy)
    results: list[Result] = []
    bad_queues = [line for line in unreadable if line.startswith("Queue ")]
    if bad_queues:
        results.append(Result(QUEUES, Status.FAIL, f"{len(bad_queues)} Queue{_s(bad_queues)} cannot be read",
                              details=_some(bad_queues), fix="fix them: kubectl edit queue NAME"))
    others = [line for line in unreadable if not line.startswith("Queue ")]
    if others:
        results.append(Result(QUEUES, Status.WARN, f"{len(others)} object{_s(others)} cannot be read and are left out "
                              "of the usage computed here", details=_some(others)))
    with_quota = sorted((name, record) for name, record in ledger.snapshot.queues.items()
                        if keys.CARD_QUOTA in record.queue.meta.annotations)
    if not with_quota:
        results.append(Result(QUEUES, Status.WARN, f"no queue has a {keys.CARD_QUOTA} annotation: no card quota is "
                              "enforced",
                              fix=f"kubectl annotate queue NAME {keys.CARD_QUOTA}='{{\"NVIDIA-A100\": 4}}'"))
        return results
    invalid = [name for name, record in with_quota if record.quota.violations]
    if invalid:
        problems = [f"{name}: {v.message}" for name, record in with_quota for v in record.quota.violations]
        results.append(Result(QUEUES, Status.FAIL, f"the {keys.CARD_QUOTA} of {len(invalid)} queue{_s(invalid)} "
                              f"cannot be read (counted as no quota): {_names(invalid)}", details=_some(problems),
                              fix=f"kubectl annotate queue NAME --overwrite {keys.CARD_QUOTA}="
                              "'{\"NVIDIA-A100\": 4}' (a JSON object of card type to whole cards)"))
    missing: list[str] = []
    stale: list[str] = []
    stale_queues: list[str] = []
    offered = ledger.snapshot.catalog().entries
    for name, record in with_quota:
        current = record.queue.meta.annotations
        # What the controller publishes: the figures sized to fit beside the Queue's other annotations.
        publication = bounded_queue_annotations(ledger.usage(name), queue_budget(current), offered)
        if CARD_USAGE not in current:
            if not publication.removed:
                missing.append(name)
            continue
        desired = publication.annotations
        differing = [a for a in QUEUE_ANNOTATIONS if current.get(a) != desired[a]]
        if differing:
            stale_queues.append(name)
        stale += [f"{name}: {annotation} is {_quoted(current.get(annotation))}, the ledger now says "
                  f"{_quoted(desired[annotation])}" for annotation in differing]
    if missing:
        results.append(Result(QUEUES, Status.FAIL, f"{len(missing)} queue{_s(missing)} with a card quota "
                              f"{'has' if len(missing) == 1 else 'have'} no {CARD_USAGE}: the operator is not "
                              f"publishing usage ({_names(missing)})",
                              fix=f"is there a leader (the Operator lines above)? {_logs_command(target)}"))
    if stale:
        results.append(Result(QUEUES, Status.WARN, f"the usage published on {len(stale_queues)} queue"
                              f"{_s(stale_queues)} differs from what the ledger computes now (may be in flight: "
                              f"the operator publishes within a second): {_names(stale_queues)}",
                              details=_some(stale),
                              fix=f"run doctor again; if it stays: {_logs_command(target)}"))
    if not missing and not stale:
        names = [name for name, _ in with_quota]
        results.append(Result(QUEUES, Status.OK, f"{len(names)} queue{_s(names)} with a card quota: usage "
                              f"published and current ({_names(names)})"))
    if card_gate:
        results += _past_the_gate_over_quota(ledger, with_quota)
    return [*results, *_unquoted_holdings(ledger, card_policy)]


def _unquoted_holdings(ledger: Ledger, policy: CardPolicy) -> list[Result]:
    """Queues without a card quota whose pods hold cards: under ``--unquoted-queues=zero`` no more card work is
    admitted there (what an upgrade to it, or a first install, does to a team that had none)."""
    held = ledger.unquoted_holdings()
    if not held:
        return []
    names = sorted(held)
    where = (f"{len(names)} queue{_s(names)} without a {keys.CARD_QUOTA} hold{'s' if len(names) == 1 else ''} cards: "
             f"{_names([f'{name} ({held[name]})' for name in names])}")
    if policy.unquoted_hold_zero:
        return [Result(QUEUES, Status.WARN, f"{where}; the operator runs with --unquoted-queues=zero, so new card "
                       "work there is refused (what runs keeps running)",
                       fix=f"kubectl annotate queue NAME {keys.CARD_QUOTA}='{{\"NVIDIA-A100\": 4}}', or set "
                       f"{UNQUOTED_QUEUES_ENV}=unlimited on the operator (Helm: unquotedQueues=unlimited)")]
    return [Result(QUEUES, Status.OK, f"{where}; the operator runs with --unquoted-queues=unlimited, so pods naming "
                   "no card type are not limited there")]


def _past_the_gate_over_quota(ledger: Ledger, queues: Sequence[tuple[str, QueueRecord]]) -> list[Result]:
    """Pending card pods without the gate in a queue whose bound and admitted pods exceed its quota: pods created
    before the gate (or while its webhook was off), or admitted before the quota was lowered. Under the gated
    scheduler entry Volcano places them without a card check, past the quota."""
    over: list[str] = []
    pods: list[str] = []
    for name, record in queues:
        quota = record.quota.values
        held = ledger.held_cards(name)
        exceeded = {card for card, limit in quota.items() if held.get(card, 0) > limit}
        if not exceeded:
            continue
        gated = ledger.gated_pods().get(name, set())
        past = sorted(key for key in ledger.pending_pods(name) - gated
                      if (charge := ledger.pod_charge(key)) is not None and exceeded & set(charge.cards))
        if past:
            over += [f"{name} ({', '.join(f'{held[card]} of {quota[card]} {card}' for card in sorted(exceeded))})"]
            pods += [f"{namespace}/{pod}" for namespace, pod in past]
    if not pods:
        return []
    return [Result(QUEUES, Status.FAIL, f"{len(pods)} pending card pod{_s(pods)} past the card-quota gate would "
                   f"exceed {'its queue' if len(over) == 1 else 'their queues'}: {_names(over)} held by bound pods "
                   "and pods past the gate — created before the gate (or while its webhook was off), or admitted "
                   "before a quota was lowered; Volcano places them without a card check",
                   details=_some(pods),
                   fix="delete them (a Volcano Job, Deployment or Job recreates them at the gate): kubectl delete pod "
                   "-n NAMESPACE NAME; or keep the extender's full entry (kubectl cardquota scheduler-conf --card-gate "
                   "off) until they have run")]


def _ledger(manifests: Sequence[Manifest], *, map_namespace_queues: bool = False,
            schedulers: frozenset[str] = keys.VOLCANO_SCHEDULERS,
            card_policy: CardPolicy = DEFAULT_CARD_POLICY) -> tuple[Ledger, list[str]]:
    """The ledger as ``kubectl cardquota usage`` builds it; malformed objects are left out and described."""
    try:
        return Ledger.build(manifests, map_namespace_queues=map_namespace_queues, volcano_schedulers=schedulers,
                            card_policy=card_policy), []
    except InputError:
        pass
    ledger = Ledger(ClusterSnapshot(map_namespace_queues=map_namespace_queues, volcano_schedulers=schedulers,
                                    card_policy=card_policy))
    unreadable: list[str] = []
    for manifest in manifests:
        try:
            ledger.upsert(manifest)
        except InputError as error:
            kind = kind_of(manifest)
            unreadable.append(f"{describe(kind, manifest) if kind is not None else 'an object'}: {error}")
    return ledger, unreadable


# ------------------------------------------------------------------------------------------------------- time


_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|z|[+-]\d{2}:\d{2})",
                        re.ASCII)


def epoch_seconds(text: object) -> float | None:
    """An RFC 3339 timestamp (a Lease's renewTime, ``2026-11-24T10:24:44.123456Z``) as seconds since the epoch;
    None when it is not one. (No clock and no datetime in the core: the civil-calendar arithmetic is done here.)"""
    if not isinstance(text, str) or len(text) > 40:
        return None
    match = _TIMESTAMP.fullmatch(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
    if not (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month) and hour < 24 and minute < 60
            and second < 61):
        return None
    zone = match[8]
    offset = 0 if zone in ("Z", "z") else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    fraction = float(match[7]) if match[7] else 0.0
    return _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second + fraction - offset


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def _duration(seconds: float) -> str:
    whole = int(seconds)
    if whole < 120:
        return f"{whole} s"
    if whole < 7200:
        return f"{whole // 60} min"
    if whole < 172800:
        return f"{whole // 3600} h"
    return f"{whole // 86400} days"


# ---------------------------------------------------------------------------------------------------- helpers


def _cannot_tell(name: str, what: str, unreadable: Unreadable) -> Result:
    return Result(name, Status.UNKNOWN, one_line(f"cannot tell {what}: {unreadable.reason}"),
                  fix="run doctor as a user who may read it (it is meant for cluster admins)")


def _logs_command(target: Target, pods: Mapping[str, str] | None = None) -> str:
    """Logs of the pods the labels ``pods`` select (the operator's when None)."""
    chosen = target.pod_selector if pods is None else pods
    return f"kubectl -n {target.namespace} logs -l {label_selector(chosen)} --tail=50"


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, MAPPING_TYPES) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _name(manifest: Manifest) -> str:
    name = _map(manifest.get("metadata")).get("name")
    return _shown(name) if isinstance(name, str) else "(no name)"


def _namespace(manifest: Manifest) -> str:
    namespace = _map(manifest.get("metadata")).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else "default"


def _labels(manifest: Manifest) -> Mapping[str, Any]:
    return _map(_map(manifest.get("metadata")).get("labels"))


def _shown(text: object, limit: int = 120) -> str:
    """Text from the cluster, on one line and clipped."""
    shown = one_line(str(text))
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


def _quoted(text: str | None) -> str:
    return "missing" if text is None else _shown(repr(text))


def _s(items: Sized | int) -> str:
    """The plural ending for a count (or a collection's size)."""
    return "" if (items if isinstance(items, int) else len(items)) == 1 else "s"


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _some(lines: Sequence[str]) -> tuple[str, ...]:
    shown = tuple(_shown(line, DETAIL_LIMIT) for line in lines[:SHOWN])
    return shown + ((f"... and {len(lines) - SHOWN} more",) if len(lines) > SHOWN else ())
