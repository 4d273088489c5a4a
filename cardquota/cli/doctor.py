"""``kubectl cardquota doctor``: check a live installation and say what to fix, as ``linkerd check`` does.

This module reads (the live API through :mod:`cardquota.kube`, or the objects in ``--cluster`` files), verifies the
webhook certificate with ``cryptography``, and prints; the checks themselves are :mod:`cardquota.core.doctor`.
A read that is refused (403) or fails makes its check "cannot tell" (``?``); an API that cannot be reached at all,
or a kubeconfig that cannot be used, is one line and exit 2.

Exit codes: 0 every check passed (warnings allowed), 1 something is wrong, 2 something could not be told (and
nothing is wrong), or the cluster could not be read at all.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import datetime
import functools
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO, TypeVar

from cardquota.cli import output
from cardquota.core import crd_additions
from cardquota.core.doctor import (
    GATE_POLICY,
    VOLCANO_PODGROUP_POLICY,
    VOLCANO_PODGROUP_WEBHOOK,
    Installation,
    Listing,
    Read,
    Result,
    Status,
    Target,
    Trust,
    TrustCheck,
    Unreadable,
    label_selector,
    maps_namespace_queues,
    overall,
    pod_selector,
    run_checks,
)
from cardquota.core.objects import Manifest
from cardquota.core.policies.config import DEFAULT_SCHEDULER_CONFIGMAP
from cardquota.core.schedconf.source import EXTENDER_CONFIGMAP

T = TypeVar("T")
EXIT = {Status.OK: 0, Status.WARN: 0, Status.FAIL: 1, Status.UNKNOWN: 2}
MARKS = {Status.OK: "✓", Status.WARN: "!", Status.FAIL: "✗", Status.UNKNOWN: "?"}
COLOURS = {Status.OK: "\033[32m", Status.WARN: "\033[33m", Status.FAIL: "\033[31m", Status.UNKNOWN: "\033[33m"}
RESET = "\033[0m"
OPERATOR_POD_LABELS = {"app.kubernetes.io/component": "operator"}
"""The operator pods' labels (manifests/base/deployment.yaml's selector), used when the Deployment cannot be read."""
SCHEDULER_NAMESPACE = "volcano-system"
ADMISSION_API = "/apis/admissionregistration.k8s.io/v1"


def add_command(commands: Any, common: argparse.ArgumentParser) -> None:
    from cardquota.cli.kubectl import add_namespace_options, examples
    from cardquota.operator.settings import Settings

    defaults = Settings()
    parser = commands.add_parser(
        "doctor", parents=[common], help="check the installation: Volcano, CRDs, webhooks, operator, scheduler, "
        "nodes, queues",
        description="Check a live installation and print ✓ (ok), ! (warning), ✗ (wrong, with the fix) or ? (cannot "
        "tell: not allowed to read it) per check. -n is cardquota's namespace (default "
        f"{defaults.namespace}). Exit 0 when nothing is wrong (warnings allowed), 1 when something is, 2 when "
        "something could not be told or the cluster cannot be read. With --cluster FILE the same checks run over "
        "the objects in the files.",
        epilog=examples("kubectl cardquota doctor",
                        "kubectl cardquota doctor -n my-cardquota -o json   # installed in another namespace"))
    parser.add_argument("--service", default=defaults.service,
                        help=f"the webhook Service, for the certificate's names (default {defaults.service})")
    parser.add_argument("--tls-secret", default=defaults.tls_secret,
                        help=f"the Secret holding the serving certificate (default {defaults.tls_secret})")
    parser.add_argument("--deployment", default=defaults.deployment,
                        help=f"the operator's Deployment (default {defaults.deployment}); when the controllers run "
                        "apart, theirs is this name + -controller")
    parser.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    add_namespace_options(parser, namespace=f"cardquota's namespace (default {defaults.namespace})")
    parser.set_defaults(command=doctor_command)


def doctor_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from cardquota.cli.kubectl import _cluster, _color

    cluster = _cluster(args)
    target = target_of(args)
    now = time.time()
    installation = (fetch_live(cluster.api(), target, now) if cluster.live
                    else fetch_files(cluster.files, target, now))
    results = run_checks(installation, target)
    status = overall(results)
    document = {"status": status.value, "results": [result.as_json() for result in results]}
    if args.output == "json":
        output.write_json(document, out)
    elif args.output == "yaml":
        output.write_yaml(document, out)
    else:
        out.write(render(results, color=_color(out)))
    return EXIT[status]


def target_of(args: argparse.Namespace) -> Target:
    from cardquota.operator.certificates import WEBHOOK_KINDS as KINDS
    from cardquota.operator.leader import LeaderElection
    from cardquota.operator.settings import Settings

    settings = Settings()
    lease = inspect.signature(LeaderElection).parameters["name"].default  # the one place the Lease is named
    return Target(
        namespace=args.namespace or settings.namespace, service=args.service, tls_secret=args.tls_secret,
        deployment=args.deployment, lease=str(lease),
        webhook_configurations=dict(zip(KINDS, settings.webhook_configurations, strict=True)),
        pod_selector=OPERATOR_POD_LABELS, scheduler_namespace=SCHEDULER_NAMESPACE,
        scheduler_configmap=settings.scheduler_configmap or DEFAULT_SCHEDULER_CONFIGMAP)


# ------------------------------------------------------------------------------------------------------ output


def render(results: Sequence[Result], *, color: bool = False) -> str:
    """One section per check (a title underlined), a mark and message per line, details and the fix indented."""
    lines: list[str] = []
    section = None
    for result in results:
        if result.name != section:
            if section is not None:
                lines.append("")
            lines += [result.name, "-" * len(result.name)]
            section = result.name
        mark = MARKS[result.status]
        if color:
            mark = f"{COLOURS[result.status]}{mark}{RESET}"
        lines.append(f"{mark} {result.message}")
        lines += [f"    {detail}" for detail in result.details]
        if result.fix and result.status is not Status.OK:
            lines.append(f"    → {result.fix}")
    lines += ["", summary(results)]
    return "\n".join(lines) + "\n"


def summary(results: Sequence[Result]) -> str:
    counts = {status: sum(result.status is status for result in results) for status in Status}
    if counts[Status.OK] == len(results):
        return f"{MARKS[Status.OK]} all {len(results)} checks passed"
    words = [(Status.FAIL, "failed"), (Status.UNKNOWN, "cannot tell"), (Status.WARN, "warning"), (Status.OK, "ok")]
    parts = [f"{counts[status]} {word}{'s' if word == 'warning' and counts[status] != 1 else ''}"
             for status, word in words if counts[status]]
    return f"{MARKS[overall(results)]} {', '.join(parts)}"


# ------------------------------------------------------------------------------------------------ certificates


def verifier(now: float) -> TrustCheck:
    moment = datetime.datetime.fromtimestamp(now, datetime.UTC)
    return lambda bundle, certificate, dns_name: verify(bundle, certificate, dns_name, moment)


def verify(ca_bundle: str, tls_crt: str, dns_name: str, now: datetime.datetime) -> Trust:
    """Whether a webhook's caBundle lets the API server trust the serving certificate: some CA in the bundle,
    valid now, signed it; it is valid now; its DNS names include ``dns_name`` (both arguments base64, as the API
    holds them). A certificate ``cryptography`` cannot read whole (:func:`~cardquota.runtime.tls.read_whole`) is
    one the API server cannot read either: the serving certificate is then the problem, and a CA is left out of the
    bundle as the API server leaves it out (see :func:`~cardquota.runtime.tls.checked_authority`)."""
    from cryptography import x509

    from cardquota.runtime.tls import UnusablePair, read_whole

    try:
        bundled = x509.load_pem_x509_certificates(base64.b64decode(ca_bundle, validate=True))
    except (ValueError, binascii.Error) as error:
        return Trust(f"the caBundle is not base64 PEM certificates ({_first_line(error)})")
    try:
        serving = read_whole(x509.load_pem_x509_certificates(base64.b64decode(tls_crt, validate=True))[0])
    except (ValueError, binascii.Error) as error:  # UnusablePair is a ValueError
        return Trust(f"tls.crt is not a base64 PEM certificate ({_first_line(error)})"
                     if not isinstance(error, UnusablePair) else f"tls.crt: {error}")
    authorities: list[Any] = []
    unreadable: list[tuple[Any, str]] = []
    for authority in bundled:
        try:
            authorities.append(read_whole(authority))
        except UnusablePair as error:
            unreadable.append((authority, error.reason))
    days_left = int((serving.not_valid_after_utc - now).total_seconds() // 86400)
    if serving.not_valid_after_utc <= now:
        return Trust(f"the serving certificate expired on {serving.not_valid_after_utc:%Y-%m-%d %H:%M} UTC", days_left)
    if serving.not_valid_before_utc > now:
        return Trust(f"the serving certificate is not valid before {serving.not_valid_before_utc:%Y-%m-%d %H:%M} UTC",
                     days_left)
    signers = [ca for ca in authorities if _signed_by(serving, ca)]
    skipped = [reason for ca, reason in unreadable if _signed_by(serving, ca)]
    if not signers and skipped:
        return Trust(f"the CA that signed it is in the caBundle, but the API server cannot read it: {skipped[0]}",
                     days_left)
    if not signers:
        issuer = serving.issuer.rfc4514_string()
        same_name = ", the same name but another key: the CA was replaced" if any(
            ca.subject == serving.issuer for ca in authorities) else ""
        unread = f"; {len(unreadable)} the API server cannot read: {unreadable[0][1]}" if unreadable else ""
        return Trust(f"no CA in the caBundle ({_subjects(authorities)}{unread}) signed it (its issuer: {issuer}"
                     f"{same_name})", days_left)
    if all(ca.not_valid_after_utc <= now for ca in signers):
        return Trust(f"the CA that signed it expired on {signers[0].not_valid_after_utc:%Y-%m-%d %H:%M} UTC",
                     days_left)
    try:
        names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value \
            .get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = []
    if dns_name not in names:
        return Trust(f"its DNS names ({', '.join(names) or 'none'}) do not include {dns_name}", days_left)
    return Trust(None, days_left)


def _signed_by(certificate: Any, authority: Any) -> bool:
    try:
        certificate.verify_directly_issued_by(authority)
    except Exception:  # ValueError, TypeError, InvalidSignature (no common base but Exception)
        return False
    return True


def _subjects(certificates: Sequence[Any]) -> str:
    return ", ".join(certificate.subject.rfc4514_string() or "no subject" for certificate in certificates) or "none"


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


# --------------------------------------------------------------------------------------------------- live reads


def fetch_live(api: Any, target: Target, now: float) -> Installation:
    """Everything the checks need, read from the API; a refused or failed read is Unreadable (its check cannot
    tell), an unreachable API or unusable credentials stop everything (one line, exit 2)."""
    from cardquota.kube import CARD_RESOURCES, list_objects, read_crd, read_object

    def get(path: str) -> Read:
        return _read(functools.partial(read_object, api, path))

    namespace = f"/namespaces/{target.namespace}"
    operator_deployment = get(f"/apis/apps/v1{namespace}/deployments/{target.deployment}")
    controller_deployment = get(f"/apis/apps/v1{namespace}/deployments/{target.controller_deployment}")
    controller_pods: Listing = ()
    if isinstance(controller_deployment, Mapping):
        controller_pods = _read(functools.partial(list_objects, api, f"/api/v1{namespace}/pods", "v1", "Pod",
                                                  label_selector=_selector(controller_deployment, target)))
    listings: dict[str, Listing] = {
        plural: _read(functools.partial(list_objects, api, f"{prefix}/{plural}", version, kind))
        for prefix, plural, kind, version in CARD_RESOURCES}
    return Installation(
        crds={name: _read(functools.partial(read_crd, api, name)) for name in crd_additions.CRD_NAMES},
        scheduler_deployments=_scheduler_deployments(api),
        webhook_configurations={kind: get(f"{ADMISSION_API}/{kind.lower()}s/{name}")
                                for kind, name in target.webhook_configurations.items()},
        tls_secret=get(f"/api/v1{namespace}/secrets/{target.tls_secret}"),
        operator_deployment=operator_deployment,
        operator_pods=_read(functools.partial(list_objects, api, f"/api/v1{namespace}/pods", "v1", "Pod",
                                              label_selector=_selector(operator_deployment, target))),
        lease=get(f"/apis/coordination.k8s.io/v1{namespace}/leases/{target.lease}"),
        scheduler_configmap=get(f"/api/v1/namespaces/{target.scheduler_namespace}/configmaps/"
                                f"{target.scheduler_configmap}"),
        nodes=listings["nodes"], queues=listings["queues"], podgroups=listings["podgroups"], pods=listings["pods"],
        now=now, trust=verifier(now), controller_deployment=controller_deployment, controller_pods=controller_pods,
        extender_conf=get(f"/api/v1{namespace}/configmaps/{EXTENDER_CONFIGMAP}"),
        volcano_podgroup_webhook=get(f"{ADMISSION_API}/mutatingwebhookconfigurations/{VOLCANO_PODGROUP_WEBHOOK}"),
        volcano_podgroup_policy=_admission_policy(get),
        gate_policy=get(f"{ADMISSION_API}/validatingadmissionpolicies/{GATE_POLICY}"),
        gate_policy_binding=get(f"{ADMISSION_API}/validatingadmissionpolicybindings/{GATE_POLICY}"),
        namespaces=_read(functools.partial(list_objects, api, "/api/v1/namespaces", "v1", "Namespace"))
        if isinstance(operator_deployment, Mapping) and maps_namespace_queues(operator_deployment) else ())


MUTATING_POLICY_VERSIONS = ("v1", "v1beta1", "v1alpha1")
"""The versions a MutatingAdmissionPolicy is read through, newest first (v1alpha1 from Kubernetes 1.32, v1beta1
from 1.34; Volcano's chart writes v1beta1)."""


def _admission_policy(get: Callable[[str], Read]) -> Read:
    """Volcano's MutatingAdmissionPolicy, through the first version that answers (a version not served: not found)."""
    unreadable: Read = None
    for version in MUTATING_POLICY_VERSIONS:
        found = get(f"/apis/admissionregistration.k8s.io/{version}/mutatingadmissionpolicies/"
                    f"{VOLCANO_PODGROUP_POLICY}")
        if isinstance(found, Mapping):
            return found
        if isinstance(found, Unreadable) and unreadable is None:
            unreadable = found
    return unreadable


def _scheduler_deployments(api: Any) -> Listing:
    """Deployments labelled app=volcano-scheduler anywhere, and volcano-system/volcano-scheduler."""
    from cardquota.kube import list_objects, read_object

    labelled = _read(functools.partial(list_objects, api, "/apis/apps/v1/deployments", "apps/v1", "Deployment",
                                       label_selector="app=volcano-scheduler"))
    named = _read(functools.partial(read_object, api,
                                    "/apis/apps/v1/namespaces/volcano-system/deployments/volcano-scheduler"))
    found = [] if isinstance(labelled, Unreadable) else list(labelled)
    if isinstance(named, Mapping):
        found.append({"apiVersion": "apps/v1", "kind": "Deployment", **named})
    if not found and isinstance(labelled, Unreadable):
        return labelled
    return found


def _selector(deployment: Read, target: Target) -> str:
    """The label selector of the Deployment's pods (the operator's default labels when it cannot tell)."""
    return label_selector(pod_selector(deployment, target.pod_selector))


def _read(call: Callable[[], T]) -> T | Unreadable:
    """One read: its value, or Unreadable when the API refused or failed it. No API at all, or credentials it does
    not accept, are raised (as one line, exit 2): nothing could be told."""
    from cardquota.cli.kubectl import _kube
    from cardquota.kube import Forbidden, KubeError, NotConfigured, Unauthorized, Unreachable

    def attempt() -> T | Unreadable:
        try:
            return call()
        except (Unreachable, Unauthorized, NotConfigured):
            raise
        except KubeError as error:
            message = str(error).split(": HTTP ", 1)[-1]
            return Unreadable(f"not allowed (HTTP {message})" if isinstance(error, Forbidden) else f"HTTP {message}")

    return _kube(attempt)


# ------------------------------------------------------------------------------------------------------- files


def fetch_files(files: Sequence[str], target: Target, now: float) -> Installation:
    """The same reads over the objects in ``--cluster`` files (a dump such as ``kubectl get … -o yaml``): an object
    the files do not hold is "not found"."""
    from cardquota.core.snapshot import Kind, kind_of
    from cardquota.loader import load_paths

    manifests = [document.manifest for document in load_paths(files)]
    found: dict[tuple[str, str, str], Manifest] = {}
    for manifest in manifests:
        metadata = manifest.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        namespace = metadata.get("namespace")
        found[(str(manifest.get("kind")), namespace if isinstance(namespace, str) and namespace else "",
               str(metadata.get("name")))] = manifest

    def one(kind: str, namespace: str, name: str) -> Manifest | None:
        return found.get((kind, namespace, name))

    def every(kind: Kind) -> list[Manifest]:
        return [m for m in manifests if kind_of(m) is kind]

    return Installation(
        crds={name: one("CustomResourceDefinition", "", name) for name in crd_additions.CRD_NAMES},
        scheduler_deployments=[m for m in manifests if m.get("kind") == "Deployment"],
        webhook_configurations={kind: one(kind, "", name) for kind, name in target.webhook_configurations.items()},
        tls_secret=one("Secret", target.namespace, target.tls_secret),
        operator_deployment=one("Deployment", target.namespace, target.deployment),
        operator_pods=every(Kind.POD),
        lease=one("Lease", target.namespace, target.lease),
        scheduler_configmap=one("ConfigMap", target.scheduler_namespace, target.scheduler_configmap),
        nodes=every(Kind.NODE), queues=every(Kind.QUEUE), podgroups=every(Kind.PODGROUP), pods=every(Kind.POD),
        now=now, trust=verifier(now), controller_deployment=one("Deployment", target.namespace,
                                                                target.controller_deployment),
        controller_pods=every(Kind.POD), extender_conf=one("ConfigMap", target.namespace, EXTENDER_CONFIGMAP),
        volcano_podgroup_webhook=one("MutatingWebhookConfiguration", "", VOLCANO_PODGROUP_WEBHOOK),
        volcano_podgroup_policy=one("MutatingAdmissionPolicy", "", VOLCANO_PODGROUP_POLICY),
        gate_policy=one("ValidatingAdmissionPolicy", "", GATE_POLICY),
        gate_policy_binding=one("ValidatingAdmissionPolicyBinding", "", GATE_POLICY),
        namespaces=every(Kind.NAMESPACE))
