"""``kubectl cardquota doctor``: each check of cardquota/core/doctor.py, healthy and each broken case (table-driven
over small builders), the certificate verification with real certificates, the renderer and exit codes, and the
whole command offline (``--cluster`` files) end to end.

``installation_objects`` builds a whole healthy installation (Volcano v1.15.1's real CRDs with cardquota's additions,
the shipped webhook configurations and Deployment, a Secret written by the operator's own certificate code, a
fresh Lease, nodes, queues with the usage the ledger computes): the kmock test seeds the same objects.
"""

from __future__ import annotations

import argparse
import base64
import copy
import datetime
import io
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import gpu_labels, gpu_node, node, pod, podgroup, queue
from kubeconfigs import write_kubeconfig
from malformed_certificates import duplicate_extension_pair, five_byte_ip_pair, well_formed_pair
from volcano_crds import patched_crd, upstream_crd

from cardquota.cli import crd as crd_cli
from cardquota.cli import doctor as doctor_cli
from cardquota.cli.main import run
from cardquota.core import doctor
from cardquota.core.crd_additions import CRD_NAMES, JOB_CRD, PODGROUP_CRD, QUEUE_CRD, State
from cardquota.core.doctor import Result, Status, Target, Trust, Unreadable
from cardquota.core.keys import CARD_USAGE
from cardquota.core.ledger import Ledger
from cardquota.core.publish import queue_annotations
from cardquota.core.schedconf.fragment import extender_stanza, gated_stanza, merged_conf
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.operator.certificates import Certificates, secret_body
from cardquota.operator.settings import Settings
from cardquota.runtime.tls import KeyPair, new_ca, new_serving_cert, service_dns_names

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
LEADER, STANDBY = "cardquota-7c9f8d6b5-4tq2x", "cardquota-7c9f8d6b5-9wz7m"
Manifest = dict[str, Any]


def target(**options: Any) -> Target:
    """The Target the CLI builds with no options (the operator's Settings defaults)."""
    args = argparse.Namespace(namespace=None, service="cardquota", tls_secret="cardquota-webhook-tls",
                              deployment="cardquota")
    for key, value in options.items():
        setattr(args, key, value)
    return doctor_cli.target_of(args)


def stamp(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------------------------------- builders


def crds(release: str = "v1.15.1") -> dict[str, Manifest]:
    return {name: patched_crd(name, release) for name in CRD_NAMES}


def scheduler_deployment(image: str = "docker.io/volcanosh/vc-scheduler:v1.15.1", *, namespace: str = "volcano-system",
                         name: str = "volcano-scheduler", labels: dict[str, str] | None = None) -> Manifest:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app": "volcano-scheduler"} if labels is None else labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "volcano-scheduler"}},
                     "template": {"metadata": {"labels": {"app": "volcano-scheduler"}},
                                  "spec": {"containers": [{"name": "volcano-scheduler", "image": image}]}}}}


def shipped(path: str) -> list[Manifest]:
    return list(yaml.safe_load_all((REPO / path).read_text()))


def webhook_configurations(ca_bundle: str | None) -> dict[str, Manifest]:
    """manifests/base/webhooks.yaml as installed, each webhook's caBundle set as the operator sets it."""
    configurations = {}
    for configuration in shipped("manifests/base/webhooks.yaml"):
        for webhook in configuration["webhooks"]:
            if ca_bundle is not None:
                webhook["clientConfig"]["caBundle"] = ca_bundle
        configurations[configuration["kind"]] = configuration
    return configurations


def certificates(now: float = NOW, *, names: list[str] | None = None, ca: KeyPair | None = None,
                 days: int = 365) -> Certificates:
    moment = datetime.datetime.fromtimestamp(now, datetime.UTC)
    authority = ca or new_ca(now=moment)
    serving = new_serving_cert(authority, names or service_dns_names("cardquota", "cardquota-system"), now=moment,
                               days=days)
    return Certificates(authority, serving)


def tls_secret(pair: Certificates) -> Manifest:
    """The Secret as the operator writes it (operator/certificates.py)."""
    return secret_body(Settings(), pair, None)


def bundle_of(pair: Certificates) -> str:
    return base64.b64encode(pair.ca_bundle()).decode("ascii")


def operator_deployment(replicas: int = 2) -> Manifest:
    (deployment,) = shipped("manifests/base/deployment.yaml")
    deployment["spec"]["replicas"] = replicas
    return deployment


def operator_pod(name: str, *, ready: bool = True, waiting: str | None = None,
                 labels: dict[str, str] | None = None) -> Manifest:
    status: Manifest = {"phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if waiting:
        status["containerStatuses"] = [{"name": "operator", "ready": False, "state": {"waiting": {"reason": waiting}}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "cardquota-system",
                         "labels": {"app.kubernetes.io/component": "operator", "app.kubernetes.io/name": "cardquota"}
                         if labels is None else labels},
            "spec": {"containers": [{"name": "operator", "image": "cardquota:0.1.0"}]}, "status": status}


def lease(holder: str = f"{LEADER}-1a2b3c4d", *, renewed: float = NOW - 2, duration: object = 15) -> Manifest:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "cardquota-controller", "namespace": "cardquota-system"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": stamp(renewed)}}


def scheduler_configmap(example: str = "volcano-scheduler-configmap-extender.yaml") -> Manifest:
    (configmap,) = shipped(f"crds/examples/{example}")
    return configmap


def with_conf(conf: str) -> Manifest:
    configmap = scheduler_configmap()
    configmap["data"]["volcano-scheduler.conf"] = conf
    return configmap


def nodes() -> list[Manifest]:
    return [gpu_node("a100-1", A100, 8), gpu_node("h100-1", H100, 8), node("cpu-1")]


def workload() -> tuple[list[Manifest], list[Manifest], list[Manifest]]:
    """(queues, podgroups, pods): team-a holds 3 A100 and waits for 1 H100, team-b reserves 2 A100."""
    queues = [queue("team-a", {A100: 4, H100: 2}), queue("team-b", {A100: 2}), queue("default")]
    podgroups = [podgroup("big", namespace="ml", queue="team-b", request={A100: 2})]
    pods = [pod(f"train-{i}", namespace="ml", card=A100, gpus=1, queue="team-a", node_name="a100-1")
            for i in range(3)]
    pods.append(pod("eval", namespace="ml", card=H100, gpus=1, queue="team-a"))
    return queues, podgroups, pods


def published(queues: list[Manifest], everything: list[Manifest]) -> list[Manifest]:
    """The queues with the annotations the operator writes (computed by the same ledger)."""
    ledger = Ledger.build(everything)
    result = []
    for manifest in queues:
        manifest = copy.deepcopy(manifest)
        annotations = manifest["metadata"].setdefault("annotations", {})
        annotations.update(queue_annotations(ledger.usage(manifest["metadata"]["name"])))
        result.append(manifest)
    return result


def installation_objects(now: float, pair: Certificates | None = None) -> list[Manifest]:
    """Every object of a healthy installation, as a cluster (or a dump of it) holds them."""
    pair = pair or certificates(now)
    queues, podgroups, pods = workload()
    cluster_nodes = nodes()
    return [
        *crds().values(), scheduler_deployment(), *webhook_configurations(bundle_of(pair)).values(),
        tls_secret(pair), operator_deployment(), operator_pod(LEADER), operator_pod(STANDBY),
        lease(renewed=now - 2), scheduler_configmap(), *cluster_nodes,
        *published(queues, [*cluster_nodes, *queues, *podgroups, *pods]), *podgroups, *pods, *_gate_policy(),
    ]


def statuses(results: list[Result]) -> list[tuple[str, str]]:
    return [(r.status.value, r.message) for r in results]


def only(results: list[Result], status: Status) -> list[Result]:
    return [r for r in results if r.status is status]


FORBIDDEN = Unreadable('not allowed (HTTP 403: secrets "x" is forbidden: User "dev" cannot get resource "secrets")')


def fake_trust(problem: str | None = None, days_left: int | None = 364) -> Callable[[str, str, str], Trust]:
    return lambda bundle, certificate, dns_name: Trust(problem, days_left)


# ------------------------------------------------------------------------------------------------------ Volcano


def _without(name: str) -> dict[str, Any]:
    found: dict[str, Any] = crds()
    found[name] = None
    return found


@pytest.mark.parametrize(("crd_map", "deployments", "expected"), [
    pytest.param(crds(), [scheduler_deployment()], [
        ("ok", "Volcano's CRDs are installed: queues.scheduling.volcano.sh, podgroups.scheduling.volcano.sh, "
               "jobs.batch.volcano.sh"),
        ("ok", "Volcano v1.15.1 (volcano-system/volcano-scheduler runs docker.io/volcanosh/vc-scheduler:v1.15.1)")],
        id="healthy"),
    pytest.param(_without(JOB_CRD), [scheduler_deployment()], [
        ("fail", "Volcano's CRD jobs.batch.volcano.sh is not installed: Volcano is missing or incomplete"),
        ("ok", "Volcano v1.15.1 (volcano-system/volcano-scheduler runs docker.io/volcanosh/vc-scheduler:v1.15.1)")],
        id="one-crd-missing"),
    pytest.param({}, [], [
        ("fail", "Volcano's CRDs queues.scheduling.volcano.sh, podgroups.scheduling.volcano.sh, jobs.batch.volcano.sh "
                 "are not installed: Volcano is missing or incomplete"),
        ("warn", "Volcano version unknown: no Deployment labelled app=volcano-scheduler, and no "
                 "volcano-system/volcano-scheduler")], id="no-volcano"),
    pytest.param({**crds(), QUEUE_CRD: FORBIDDEN}, FORBIDDEN, [
        ("unknown", f"cannot tell whether the CRD {QUEUE_CRD} is installed: {FORBIDDEN.reason}"),
        ("unknown", f"cannot tell which Volcano version runs: {FORBIDDEN.reason}")], id="forbidden"),
    pytest.param(crds(), [scheduler_deployment("volcanosh/vc-scheduler:v1.12.3")], [
        ("ok", "Volcano's CRDs are installed: queues.scheduling.volcano.sh, podgroups.scheduling.volcano.sh, "
               "jobs.batch.volcano.sh"),
        ("warn", "Volcano v1.12.3 (volcano-system/volcano-scheduler) is older than v1.13, the oldest release cardquota "
                 "supports")], id="too-old"),
    pytest.param(crds(), [scheduler_deployment("registry:5000/vc-scheduler")], [
        ("ok", "Volcano's CRDs are installed: queues.scheduling.volcano.sh, podgroups.scheduling.volcano.sh, "
               "jobs.batch.volcano.sh"),
        ("warn", "Volcano version unknown: volcano-system/volcano-scheduler runs registry:5000/vc-scheduler, which "
                 "has no version tag")], id="no-tag"),
])
def test_volcano(crd_map: dict[str, Any], deployments: Any, expected: list[tuple[str, str]]) -> None:
    assert statuses(doctor.check_volcano(crd_map, deployments)) == expected


@pytest.mark.parametrize(("deployments", "found"), [
    ([scheduler_deployment("volcanosh/vc-scheduler:v1.14.4", namespace="batch", name="vc")],
     ("batch/vc", "volcanosh/vc-scheduler:v1.14.4")),
    ([scheduler_deployment("a/vc-scheduler:v1.13.0", namespace="x", name="s"), scheduler_deployment(labels={})],
     ("volcano-system/volcano-scheduler", "docker.io/volcanosh/vc-scheduler:v1.15.1")),
    ([scheduler_deployment(labels={"app": "other"}, namespace="x")], None),
    ([{"kind": "Deployment", "metadata": {"name": "volcano-scheduler", "namespace": "volcano-system"}, "spec": "x"}],
     None),
    ([{"kind": "Deployment", "metadata": "garbage"}], None),
])
def test_the_scheduler_deployment_is_found_by_label_or_by_name(deployments: list[Manifest],
                                                               found: tuple[str, str] | None) -> None:
    assert doctor.volcano_scheduler(deployments) == found


@pytest.mark.parametrize(("image", "version"), [
    ("docker.io/volcanosh/vc-scheduler:v1.15.1", "v1.15.1"),
    ("registry.local:5000/volcanosh/vc-scheduler:v1.16.0-alpha.1@sha256:abc", "v1.16.0-alpha.1"),
    ("registry.local:5000/volcanosh/vc-scheduler", None),
    ("vc-scheduler@sha256:abc", None),
])
def test_image_version(image: str, version: str | None) -> None:
    assert doctor.image_version(image) == version


def test_a_missing_crd_says_how_to_install_volcano() -> None:
    (failed, _) = doctor.check_volcano(_without(PODGROUP_CRD), [scheduler_deployment()])
    assert "volcano-development.yaml" in failed.fix


# ---------------------------------------------------------------------------------------------- CRD additions


def _foreign_column() -> Manifest:
    crd = patched_crd(QUEUE_CRD, "v1.15.1")
    for column in crd["spec"]["versions"][0]["additionalPrinterColumns"]:
        if column["name"] == "CARD-QUOTA":
            column["jsonPath"] = ".spec.somethingElse"
    return crd


def _no_spec_object() -> Manifest:
    crd = upstream_crd(QUEUE_CRD, "v1.15.1")
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = {"type": "string"}
    return crd


@pytest.mark.parametrize(("replaced", "expected"), [
    pytest.param({}, [
        ("ok", "queues.scheduling.volcano.sh v1beta1: schema spec.dra, column CARD-QUOTA, column CARD-USAGE in place"),
        ("ok", "podgroups.scheduling.volcano.sh v1beta1: column CARD-REQUEST in place"),
        ("ok", "jobs.batch.volcano.sh v1alpha1: column CARD-REQUEST in place")], id="healthy"),
    pytest.param({JOB_CRD: upstream_crd(JOB_CRD, "v1.15.1"), PODGROUP_CRD: None}, [
        ("ok", "queues.scheduling.volcano.sh v1beta1: schema spec.dra, column CARD-QUOTA, column CARD-USAGE in place"),
        ("fail", "podgroups.scheduling.volcano.sh is not installed: nothing to add to"),
        ("fail", "jobs.batch.volcano.sh v1alpha1: column CARD-REQUEST missing")], id="missing"),
    pytest.param({QUEUE_CRD: upstream_crd(QUEUE_CRD, "v1.13.0")}, [
        ("fail", "queues.scheduling.volcano.sh v1beta1: schema spec.dra, column CARD-QUOTA, column CARD-USAGE missing"),
        ("ok", "podgroups.scheduling.volcano.sh v1beta1: column CARD-REQUEST in place"),
        ("ok", "jobs.batch.volcano.sh v1alpha1: column CARD-REQUEST in place")], id="after-a-volcano-upgrade"),
    pytest.param({QUEUE_CRD: _foreign_column(), PODGROUP_CRD: FORBIDDEN,
                  JOB_CRD: {"metadata": {"name": JOB_CRD}, "spec": {"versions": "v1"}}}, [
        ("ok", "queues.scheduling.volcano.sh v1beta1: schema spec.dra, column CARD-USAGE in place"),
        ("warn", "queues.scheduling.volcano.sh v1beta1: column CARD-QUOTA defined by someone else (Volcano's own?): "
                 "left alone"),
        ("unknown", f"cannot tell whether cardquota's additions to {PODGROUP_CRD} are in place: {FORBIDDEN.reason}"),
        ("fail", "jobs.batch.volcano.sh has no served version cardquota can read (spec.versions)")],
        id="foreign-forbidden-malformed"),
    pytest.param({QUEUE_CRD: _no_spec_object()}, [
        ("fail", "queues.scheduling.volcano.sh v1beta1: schema spec.dra cannot be added: the CRD's schema has no spec "
                 "object to put it in"),
        ("fail", "queues.scheduling.volcano.sh v1beta1: column CARD-QUOTA, column CARD-USAGE missing"),
        ("ok", "podgroups.scheduling.volcano.sh v1beta1: column CARD-REQUEST in place"),
        ("ok", "jobs.batch.volcano.sh v1alpha1: column CARD-REQUEST in place")], id="unreachable"),
])
def test_crd_additions(replaced: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert statuses(doctor.check_crd_additions({**crds(), **replaced})) == expected


def test_missing_additions_are_fixed_by_crd_install() -> None:
    results = doctor.check_crd_additions({**crds(), JOB_CRD: upstream_crd(JOB_CRD, "v1.15.1")})
    assert [r.fix for r in only(results, Status.FAIL)] == ["kubectl cardquota crd install"]


def test_the_additions_are_worded_as_crd_status_words_them() -> None:
    """One wording: doctor's lines read as ``kubectl cardquota crd status`` prints them (its MISSING carries the
    command, which doctor prints as the fix line)."""
    for state in State:
        explained = crd_cli.EXPLAINED[state.value]
        assert explained.startswith(doctor.ADDITION_WORDING[state])
        assert explained == doctor.ADDITION_WORDING[state] or state is State.MISSING
    assert crd_cli.EXPLAINED[State.MISSING.value].endswith(doctor.restore_command())


# --------------------------------------------------------------------------------------------------- webhooks


def _webhook_results(configurations: dict[str, Any], secret: Any = None, **trust: Any) -> list[Result]:
    pair = certificates()
    return doctor.check_webhooks(configurations, tls_secret(pair) if secret is None else secret, target(),
                                 fake_trust(**trust))


VALIDATING = len(webhook_configurations(None)["ValidatingWebhookConfiguration"]["webhooks"])
HEALTHY_WEBHOOKS = [
    ("ok", f"ValidatingWebhookConfiguration cardquota-validating: {VALIDATING} webhooks, each with a caBundle"),
    ("ok", "MutatingWebhookConfiguration cardquota-mutating: 3 webhooks, each with a caBundle"),
    ("ok", "the caBundle verifies the serving certificate in Secret cardquota-system/cardquota-webhook-tls "
           "(cardquota.cardquota-system.svc, expires in 364 days)"),
]


def _partly_bundled() -> dict[str, Manifest]:
    configurations = webhook_configurations("Q0E=")
    for webhook in configurations["MutatingWebhookConfiguration"]["webhooks"][1:]:
        del webhook["clientConfig"]["caBundle"]
    return configurations


def _elsewhere() -> dict[str, Manifest]:
    configurations = webhook_configurations("Q0E=")
    configurations["ValidatingWebhookConfiguration"]["webhooks"][0]["clientConfig"]["service"]["namespace"] = "other"
    return configurations


@pytest.mark.parametrize(("configurations", "secret", "trust", "expected"), [
    pytest.param(webhook_configurations("Q0E="), None, {}, HEALTHY_WEBHOOKS, id="healthy"),
    pytest.param({"ValidatingWebhookConfiguration": None, "MutatingWebhookConfiguration": FORBIDDEN}, None, {}, [
        ("fail", "ValidatingWebhookConfiguration cardquota-validating is not registered: nothing is checked at "
                 "admission"),
        ("unknown", "cannot tell MutatingWebhookConfiguration cardquota-mutating is registered: "
                    f"{FORBIDDEN.reason}")], id="missing-and-forbidden"),
    pytest.param(webhook_configurations(None), None, {}, [
        ("fail", f"ValidatingWebhookConfiguration cardquota-validating: {VALIDATING} of {VALIDATING} webhooks have no "
                 "caBundle, so the API "
                 "server cannot call them"),
        ("fail", "MutatingWebhookConfiguration cardquota-mutating: 3 of 3 webhooks have no caBundle, so the API "
                 "server cannot call them")], id="no-ca-bundle-yet"),
    pytest.param(_partly_bundled(), None, {}, [
        HEALTHY_WEBHOOKS[0],
        ("fail", "MutatingWebhookConfiguration cardquota-mutating: 2 of 3 webhooks have no caBundle, so the API server "
                 "cannot call them"),
        HEALTHY_WEBHOOKS[2]], id="partly"),
    pytest.param(_elsewhere(), None, {}, [
        ("fail", "ValidatingWebhookConfiguration cardquota-validating: 1 call another Service than "
                 "cardquota-system/cardquota"), *HEALTHY_WEBHOOKS[1:]], id="another-service"),
    pytest.param({"ValidatingWebhookConfiguration": {"webhooks": "x"},
                  "MutatingWebhookConfiguration": {"webhooks": [None, 3]}}, None, {}, [
        ("fail", "ValidatingWebhookConfiguration cardquota-validating has no webhooks"),
        ("fail", "MutatingWebhookConfiguration cardquota-mutating has no webhooks")], id="malformed"),
    pytest.param(webhook_configurations("Q0E="), FORBIDDEN, {}, [
        *HEALTHY_WEBHOOKS[:2],
        ("unknown", "cannot tell the caBundle verifies the serving certificate in Secret "
                    f"cardquota-system/cardquota-webhook-tls: {FORBIDDEN.reason}")], id="secret-forbidden"),
    pytest.param(webhook_configurations("Q0E="), {"data": {"tls.key": "x"}}, {}, [
        *HEALTHY_WEBHOOKS[:2], ("fail", "Secret cardquota-system/cardquota-webhook-tls has no tls.crt")],
        id="secret-without-certificate"),
    pytest.param(webhook_configurations("Q0E="), None, {"problem": "no CA in the caBundle signed it"}, [
        *HEALTHY_WEBHOOKS[:2],
        ("fail", "the caBundle of cardquota-validating and cardquota-mutating does not verify the serving certificate "
                 "in Secret cardquota-system/cardquota-webhook-tls (cardquota.cardquota-system.svc): no CA in the "
                 "caBundle signed it")], id="untrusted"),
    pytest.param(webhook_configurations("Q0E="), None, {"days_left": 3}, [
        *HEALTHY_WEBHOOKS[:2],
        ("warn", "the serving certificate in Secret cardquota-system/cardquota-webhook-tls expires in 3 days: the "
                 "operator renews it 30 days ahead, so it is not renewing")], id="not-renewed"),
])
def test_webhooks(configurations: dict[str, Any], secret: Any, trust: dict[str, Any],
                  expected: list[tuple[str, str]]) -> None:
    assert statuses(_webhook_results(configurations, secret, **trust)) == expected


def test_a_missing_secret_says_who_creates_it() -> None:
    results = doctor.check_webhooks(webhook_configurations("Q0E="), None, target(), fake_trust())
    (failed,) = only(results, Status.FAIL)
    assert failed.message == ("Secret cardquota-system/cardquota-webhook-tls not found: the webhooks' serving "
                              "certificate is not there")
    assert "rollout restart deployment/cardquota" in failed.fix
    assert "--tls-secret" in failed.fix


def test_each_distinct_ca_bundle_is_verified_once_and_named_by_its_configurations() -> None:
    configurations = webhook_configurations("Q0E=")
    configurations["MutatingWebhookConfiguration"]["webhooks"][0]["clientConfig"]["caBundle"] = "T0xE"
    calls: list[tuple[str, str, str]] = []

    def trust(bundle: str, certificate: str, dns_name: str) -> Trust:
        calls.append((bundle, certificate[:4], dns_name))
        return Trust("an old CA" if bundle == "T0xE" else None, 200)

    results = doctor.check_webhooks(configurations, tls_secret(certificates()), target(), trust)
    assert [(bundle, name) for bundle, _, name in calls] == [("Q0E=", "cardquota.cardquota-system.svc"),
                                                             ("T0xE", "cardquota.cardquota-system.svc")]
    assert results[-1].message.startswith("the caBundle of cardquota-mutating does not verify")


def in_namespace(configurations: dict[str, Manifest], namespace: str) -> dict[str, Manifest]:
    """The configurations rendered for ``namespace`` (manifests/transformers/namespace): the own-writes condition's
    service accounts and the namespaceSelectors name it."""
    moved: dict[str, Manifest] = json.loads(json.dumps(configurations).replace("cardquota-system", namespace))
    return moved


def test_the_webhook_names_follow_the_options() -> None:
    custom = target(namespace="quota", service="cq")
    configurations = in_namespace(webhook_configurations("Q0E="), "quota")
    for configuration in configurations.values():
        for webhook in configuration["webhooks"]:
            webhook["clientConfig"]["service"] = {"name": "cq", "namespace": "quota"}
    seen: list[str] = []
    results = doctor.check_webhooks(configurations, tls_secret(certificates()), custom,
                                    lambda b, c, name: seen.append(name) or Trust(None, 100))  # type: ignore[func-returns-value]
    assert seen == ["cq.quota.svc"]
    assert [r.status for r in results] == [Status.OK] * 3


def test_webhooks_that_take_another_namespace_for_cardquotas_own_fail() -> None:
    """Installed in ``quota`` by an overlay that set ``namespace:`` without manifests/transformers/namespace: the
    Services follow, the CEL condition and the namespaceSelectors still name cardquota-system, so cardquota's own
    writes go through its own (fail-closed) webhooks."""
    configurations = webhook_configurations("Q0E=")
    for configuration in configurations.values():
        for webhook in configuration["webhooks"]:
            webhook["clientConfig"]["service"]["namespace"] = "quota"
    results = doctor.check_webhooks(configurations, tls_secret(certificates()), target(namespace="quota"),
                                    fake_trust())
    validating, mutating = results[:2]
    assert validating.status is Status.FAIL
    assert validating.message.startswith(f"ValidatingWebhookConfiguration cardquota-validating: {VALIDATING - 1} take "
                                         "another namespace than quota for cardquota's own")
    assert validating.details[0] == ("queues.validate.cardquota.io (service accounts of cardquota-system, "
                                     "namespaceSelector leaves out kube-system, cardquota-system)")
    assert "manifests/transformers/namespace" in validating.fix
    assert mutating.status is Status.FAIL
    healthy = doctor.check_webhooks(in_namespace(configurations, "quota"), tls_secret(certificates()),
                                    target(namespace="quota"), fake_trust())
    assert [r.status for r in healthy[:2]] == [Status.OK, Status.OK]


# ---------------------------------------------------------------------------------------------- certificates


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _verify(pair: Certificates, bundle: bytes | None = None, *, at: float = NOW,
            name: str = "cardquota.cardquota-system.svc") -> Trust:
    return doctor_cli.verify(_b64(pair.ca_bundle() if bundle is None else bundle), _b64(pair.serving.cert_pem), name,
                             datetime.datetime.fromtimestamp(at, datetime.UTC))


def test_a_certificate_issued_by_the_operator_verifies() -> None:
    assert _verify(certificates()) == Trust(None, 365)


def test_a_bundle_with_the_previous_ca_first_still_verifies() -> None:
    pair = certificates()
    previous = new_ca(now=datetime.datetime.fromtimestamp(NOW, datetime.UTC))
    assert _verify(pair, previous.cert_pem + pair.ca.cert_pem).problem is None


@pytest.mark.parametrize(("make", "problem"), [
    (lambda: _verify(certificates(), certificates().ca.cert_pem),
     "no CA in the caBundle (CN=cardquota-webhook-ca) signed it (its issuer: CN=cardquota-webhook-ca, the same name "
     "but another key: the CA was replaced)"),
    (lambda: _verify(certificates(), new_ca("someone-else").cert_pem),
     "no CA in the caBundle (CN=someone-else) signed it (its issuer: CN=cardquota-webhook-ca)"),
    (lambda: _verify(certificates(), at=NOW + 400 * 86400),
     "the serving certificate expired on 2028-01-15 08:00 UTC"),
    (lambda: _verify(certificates(), at=NOW - 86400),
     "the serving certificate is not valid before 2027-01-15 07:55 UTC"),
    (lambda: _verify(certificates(names=["cardquota", "cardquota.default.svc"])),
     "its DNS names (cardquota, cardquota.default.svc) do not include cardquota.cardquota-system.svc"),
    (lambda: _verify(certificates(), b"not a certificate"),
     "the caBundle is not base64 PEM certificates (Unable to load PEM file. See https://cryptography.io/en/latest/faq/#why"
     "-can-t-i-import-my-pem-file for more details. MalformedFraming)"),
    (lambda: doctor_cli.verify("%%%", "", "x", datetime.datetime.now(datetime.UTC)),
     "the caBundle is not base64 PEM certificates (Only base64 data is allowed)"),
    (lambda: doctor_cli.verify(_b64(certificates().ca.cert_pem), "bm9wZQ==", "x", datetime.datetime.now(datetime.UTC)),
     "tls.crt is not a base64 PEM certificate (Unable to load PEM file. See https://cryptography.io/en/latest/faq/#why"
     "-can-t-i-import-my-pem-file for more details. MalformedFraming)"),
])
def test_a_certificate_the_api_server_would_not_trust_says_why(make: Callable[[], Trust], problem: str) -> None:
    assert make().problem == problem


FIVE_BYTE_IP = "the certificate has a field or extension cryptography cannot read (ValueError: b'\\x01\\x02' does " \
    "not appear to be an IPv4 or IPv6 address)"
DUPLICATE = "the certificate has a field or extension cryptography cannot read (DuplicateExtension: Duplicate " \
    "1.3.6.1.4.1.32473.1 extension found)"


@pytest.mark.parametrize(("make", "problem"), [
    (lambda ca: (ca.cert_pem, five_byte_ip_pair(ca).cert_pem), f"tls.crt: {FIVE_BYTE_IP}: issue it again"),
    (lambda ca: (ca.cert_pem, duplicate_extension_pair(ca).cert_pem), f"tls.crt: {DUPLICATE}: issue it again"),
    (lambda ca: (five_byte_ip_pair().cert_pem, well_formed_pair(ca).cert_pem),
     f"no CA in the caBundle (none; 1 the API server cannot read: {FIVE_BYTE_IP}) signed it (its issuer: "
     "CN=cardquota-webhook-ca)"),
    (lambda ca: (ca.cert_pem + (broken := duplicate_extension_pair()).cert_pem, well_formed_pair(broken).cert_pem),
     f"the CA that signed it is in the caBundle, but the API server cannot read it: {DUPLICATE}"),
    (lambda ca: (five_byte_ip_pair().cert_pem + ca.cert_pem, well_formed_pair(ca).cert_pem), None),
], ids=["tls.crt with a 5-byte iPAddress", "tls.crt with an extension twice", "the only CA unreadable",
        "the signing CA unreadable", "an unreadable CA beside the signing one"])
def test_a_certificate_cryptography_cannot_read_whole_is_a_finding_not_a_traceback(
        make: Callable[[KeyPair], tuple[bytes, bytes]], problem: str | None) -> None:
    """The API server cannot read such a certificate either (Go's crypto/x509 refuses it; a caBundle's CA it cannot
    parse is left out of the trust): it used to raise from ``verify`` (tls.crt) or pass unnoticed (a CA)."""
    bundle, serving = make(new_ca())
    assert doctor_cli.verify(_b64(bundle), _b64(serving), "localhost",
                             datetime.datetime.now(datetime.UTC)).problem == problem


def test_an_expired_ca_is_named() -> None:
    moment = datetime.datetime.fromtimestamp(NOW, datetime.UTC)
    short_lived = new_ca(days=1, now=moment)
    pair = certificates(ca=short_lived)
    assert _verify(pair, at=NOW + 3 * 86400).problem == "the CA that signed it expired on 2027-01-16 08:00 UTC"


# --------------------------------------------------------------------------------------------------- operator


def _operator(deployment: Any = None, pods: Any = None, the_lease: Any = None, *, now: float = NOW) -> list[Result]:
    return doctor.check_operator(operator_deployment() if deployment is None else deployment,
                                 [operator_pod(LEADER), operator_pod(STANDBY)] if pods is None else pods,
                                 lease() if the_lease is None else the_lease, target(), now)


PODS_OK = ("ok", f"2 of 2 operator pods ready: {LEADER}, {STANDBY}")
LEADER_OK = ("ok", f"one leader: {LEADER} holds Lease cardquota-system/cardquota-controller (renewed within its 15 s)")
TERMINATING = operator_pod(STANDBY)
TERMINATING["metadata"]["deletionTimestamp"] = "2027-01-15T07:59:00Z"


@pytest.mark.parametrize(("parts", "expected"), [
    pytest.param({}, [PODS_OK, LEADER_OK], id="healthy"),
    pytest.param({"deployment": FORBIDDEN}, [
        ("unknown", f"cannot tell Deployment cardquota-system/cardquota is installed: {FORBIDDEN.reason}"),
        PODS_OK, LEADER_OK], id="deployment-forbidden"),
    pytest.param({"pods": [operator_pod(LEADER), operator_pod(STANDBY, ready=False, waiting="CrashLoopBackOff")]}, [
        ("warn", f"1 of 2 operator pods ready: {LEADER}"), LEADER_OK], id="one-crashing"),
    pytest.param({"pods": [operator_pod(LEADER), TERMINATING]}, [
        ("warn", f"1 of 2 operator pods ready: {LEADER}"), LEADER_OK], id="one-terminating"),
    pytest.param({"pods": [operator_pod(LEADER)]}, [("warn", f"1 of 2 operator pods ready: {LEADER}"), LEADER_OK],
                 id="one-missing"),
    pytest.param({"pods": [operator_pod(LEADER, ready=False, waiting="ImagePullBackOff"),
                           operator_pod(STANDBY, ready=False)]}, [
        ("fail", "none of the 2 operator pods is ready: admissions of queues, PodGroups and Volcano jobs fail"),
        ("fail", f"Lease cardquota-system/cardquota-controller is held by {LEADER}-1a2b3c4d, which is not a ready "
                 "operator pod (none is ready)")], id="none-ready"),
    pytest.param({"pods": [operator_pod(LEADER, labels={"app": "x"}), {**operator_pod(STANDBY), "metadata": {
        "name": STANDBY, "namespace": "elsewhere", "labels": {"app.kubernetes.io/component": "operator"}}}]}, [
        ("fail", "no operator pods (labels app.kubernetes.io/component=operator) in cardquota-system; the Deployment "
                 "wants 2"),
        ("fail", f"Lease cardquota-system/cardquota-controller is held by {LEADER}-1a2b3c4d, which is not a ready "
                 "operator pod (none is ready)")], id="no-pods"),
    pytest.param({"pods": FORBIDDEN}, [
        ("unknown", f"cannot tell the operator's pods are ready: {FORBIDDEN.reason}"),
        ("unknown", f"cannot tell whether the leader {LEADER}-1a2b3c4d is a ready operator pod: the pods could not be "
                    "read")], id="pods-forbidden"),
    pytest.param({"the_lease": FORBIDDEN}, [
        PODS_OK, ("unknown", f"cannot tell which replica leads: {FORBIDDEN.reason}")], id="lease-forbidden"),
    pytest.param({"the_lease": lease(renewed=NOW - 190)}, [
        PODS_OK, ("fail", f"no leader: {LEADER}-1a2b3c4d last renewed Lease cardquota-system/cardquota-controller "
                          "3 min ago, longer than its 15 s: nobody publishes usage or events")], id="stale"),
    pytest.param({"the_lease": lease("cardquota-old-0f1e2d3c")}, [
        PODS_OK, ("fail", "Lease cardquota-system/cardquota-controller is held by cardquota-old-0f1e2d3c, which is not "
                          f"a ready operator pod ({LEADER}, {STANDBY})")], id="held-elsewhere"),
    pytest.param({"the_lease": lease("")}, [
        PODS_OK, ("fail", "no leader: Lease cardquota-system/cardquota-controller has no holder")], id="no-holder"),
    pytest.param({"the_lease": lease(duration="15")}, [
        PODS_OK, ("fail", 'Lease cardquota-system/cardquota-controller has no valid leaseDurationSeconds (15)')],
        id="bad-duration"),
    pytest.param({"the_lease": {"spec": {"holderIdentity": LEADER, "leaseDurationSeconds": 15, "renewTime": "now"}}}, [
        PODS_OK, ("fail", "Lease cardquota-system/cardquota-controller has no readable renewTime (now)")],
        id="bad-renew-time"),
    pytest.param({"the_lease": {"spec": "garbage"}}, [
        PODS_OK, ("fail", "no leader: Lease cardquota-system/cardquota-controller has no holder")], id="malformed"),
])
def test_operator(parts: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert statuses(_operator(**parts)) == expected


def test_missing_things_say_what_to_run() -> None:
    (missing,) = doctor.check_operator(None, [], None, target(), NOW)
    assert missing.message == ("Deployment cardquota-system/cardquota not found: the operator is not deployed (or in "
                               "another namespace: -n)")
    assert missing.fix.startswith("kubectl apply -k manifests/overlays/production")
    results = _operator(pods=[operator_pod(LEADER, ready=False, waiting="ImagePullBackOff")], the_lease=None)
    assert results[0].details == (f"{LEADER}: ImagePullBackOff",)
    assert results[0].fix == ("kubectl -n cardquota-system describe pods -l app.kubernetes.io/component=operator; "
                              "kubectl -n cardquota-system logs -l app.kubernetes.io/component=operator --tail=50")
    scaled_down = doctor.check_operator(operator_deployment(replicas=0), [], lease(), target(), NOW)[0]
    assert scaled_down.fix == "kubectl -n cardquota-system scale deployment cardquota --replicas=2"
    absent = doctor.check_operator(operator_deployment(), [operator_pod(LEADER)], None, target(), NOW)[-1]
    assert absent.message == ("no leader: Lease cardquota-system/cardquota-controller does not exist, so no replica "
                              "publishes usage or events")


# The webhooks and the controllers in two Deployments (manifests/components/separate-controller): the Lease is the
# controller pods' to hold.
CONTROLLER, CONTROLLER_STANDBY = "cardquota-controller-5d6f7b8c9-abcde", "cardquota-controller-5d6f7b8c9-fghij"


def controller_deployment() -> Manifest:
    (deployment,) = [d for d in shipped("manifests/components/separate-controller/controller.yaml")
                     if d["kind"] == "Deployment"]
    return deployment


def controller_pod(name: str, *, ready: bool = True) -> Manifest:
    return operator_pod(name, ready=ready, labels={"app.kubernetes.io/component": "controller",
                                                   "app.kubernetes.io/name": "cardquota"})


SPLIT_PODS = [operator_pod(LEADER), operator_pod(STANDBY), controller_pod(CONTROLLER),
              controller_pod(CONTROLLER_STANDBY)]
CONTROLLERS_OK = ("ok", f"2 of 2 controller pods ready: {CONTROLLER}, {CONTROLLER_STANDBY}")
CONTROLLER_LEADS = ("ok", f"one leader: {CONTROLLER} holds Lease cardquota-system/cardquota-controller (renewed "
                          "within its 15 s)")


@pytest.mark.parametrize(("pods", "holder", "controller", "expected"), [
    pytest.param(SPLIT_PODS, CONTROLLER, None, [PODS_OK, CONTROLLERS_OK, CONTROLLER_LEADS], id="healthy"),
    pytest.param(SPLIT_PODS, LEADER, None, [PODS_OK, CONTROLLERS_OK, (
        "fail", f"Lease cardquota-system/cardquota-controller is held by {LEADER}-1a2b3c4d, which is not a ready "
                f"controller pod ({CONTROLLER}, {CONTROLLER_STANDBY})")], id="held-by-a-webhook-pod"),
    pytest.param([*SPLIT_PODS[:2], controller_pod(CONTROLLER, ready=False),
                  controller_pod(CONTROLLER_STANDBY, ready=False)], CONTROLLER, None, [
        PODS_OK, ("fail", "none of the 2 controller pods is ready: no usage, node card types or events are published"),
        ("fail", f"Lease cardquota-system/cardquota-controller is held by {CONTROLLER}-1a2b3c4d, which is not a ready "
                 "controller pod (none is ready)")], id="no-controller-ready"),
    pytest.param(SPLIT_PODS, LEADER, FORBIDDEN, [PODS_OK, (
        "unknown", "cannot tell whether Deployment cardquota-system/cardquota-controller runs the controllers: "
                   f"{FORBIDDEN.reason}"), LEADER_OK], id="controller-deployment-forbidden"),
])
def test_the_lease_is_the_controller_pods_when_the_controllers_run_apart(
        pods: list[Manifest], holder: str, controller: Any, expected: list[tuple[str, str]]) -> None:
    results = doctor.check_operator(operator_deployment(), pods, lease(f"{holder}-1a2b3c4d"), target(), NOW,
                                    controller_deployment() if controller is None else controller, pods)
    assert statuses(results) == expected


def test_the_deployment_selector_chooses_the_pods() -> None:
    deployment = operator_deployment(replicas=1)
    deployment["spec"]["selector"]["matchLabels"] = {"tier": "quota"}
    pods = [operator_pod(LEADER, labels={"tier": "quota"}), operator_pod(STANDBY)]
    assert statuses(_operator(deployment, pods))[0] == ("ok", f"1 of 1 operator pods ready: {LEADER}")


@pytest.mark.parametrize(("holder", "pod"), [
    (f"{LEADER}-1a2b3c4d", LEADER), (LEADER, LEADER), (f"{LEADER}-xyz", None), (f"{LEADER}1a2b3c4d", None),
    ("cardquota-7c9f8d6b5-4tq2", None),
])
def test_holder_pod(holder: str, pod: str | None) -> None:
    assert doctor.holder_pod(holder, [STANDBY, LEADER]) == pod


@pytest.mark.parametrize("moment", [
    datetime.datetime(2026, 11, 24, 10, 24, 44, 123456, datetime.UTC),
    datetime.datetime(2000, 2, 29, 23, 59, 59, tzinfo=datetime.UTC),
    datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC),
    datetime.datetime(2100, 3, 1, 0, 0, 1, 5, datetime.UTC),
])
def test_timestamps_read_as_datetime_reads_them(moment: datetime.datetime) -> None:
    assert doctor.epoch_seconds(moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")) == pytest.approx(moment.timestamp())
    assert doctor.epoch_seconds(moment.strftime("%Y-%m-%dT%H:%M:%SZ")) == int(moment.timestamp())
    shifted = moment.astimezone(datetime.timezone(datetime.timedelta(hours=-5, minutes=-30))).isoformat()
    assert doctor.epoch_seconds(shifted) == pytest.approx(moment.timestamp())


@pytest.mark.parametrize("text", [None, 3, "", "2026-02-30T00:00:00Z", "2026-11-24T25:00:00Z", "2026-11-24",
                                  "2026-11-24T10:24:44", "x" * 100])
def test_what_is_not_a_timestamp(text: object) -> None:
    assert doctor.epoch_seconds(text) is None


# -------------------------------------------------------------------------------------------------- scheduler


CONFLICT = """actions: "enqueue, allocate"
tiers:
- plugins:
  - name: capacity-card
  - name: proportion
"""
NEITHER = """actions: "enqueue, allocate"
tiers:
- plugins:
  - name: gang
  - name: proportion
"""
WHERE = "ConfigMap volcano-system/volcano-scheduler-configmap"


@pytest.mark.parametrize(("configmap", "expected"), [
    pytest.param(scheduler_configmap(), [("ok", f"{WHERE} enables extender and passes cardquota's ConfigMap policy")],
                 id="extender"),
    pytest.param(scheduler_configmap("volcano-scheduler-configmap.yaml"), [
        ("ok", f"{WHERE} enables capacity-card and passes cardquota's ConfigMap policy")], id="capacity-card"),
    pytest.param(None, [("fail", f"{WHERE} not found: is Volcano's scheduler installed there?")], id="missing"),
    pytest.param(FORBIDDEN, [("unknown", f"cannot tell {WHERE} enables card quotas: {FORBIDDEN.reason}")],
                 id="forbidden"),
    pytest.param(with_conf(NEITHER), [
        ("fail", f"{WHERE} enables neither capacity-card nor extender: the scheduler does not enforce card quotas")],
        id="neither"),
    pytest.param(with_conf(CONFLICT), [("fail", f"{WHERE} breaks cardquota's ConfigMap policy (1 violation)")],
                 id="conflict"),
    pytest.param(with_conf("tiers: ["), [("fail", f"{WHERE} breaks cardquota's ConfigMap policy (1 violation)")],
                 id="not-yaml"),
    pytest.param({"data": "x"}, [("fail", f"{WHERE} breaks cardquota's ConfigMap policy (1 violation)")],
                 id="malformed"),
])
def test_scheduler(configmap: Any, expected: list[tuple[str, str]]) -> None:
    assert statuses(doctor.check_scheduler(configmap, target(), card_gate=True)) == expected  # (as shipped)


def test_the_enqueue_only_stanza_leaks_card_quotas_when_the_operator_runs_without_the_gate() -> None:
    """The example's stanza keeps no task verb: right with the card-quota gate, a leak without it (the doctor reads
    which from the operator's Deployment: :func:`doctor.runs_card_gate`)."""
    (result,) = doctor.check_scheduler(scheduler_configmap(), target(), card_gate=False)
    assert result.status.value == "warn"
    assert any("card quotas are not checked when pods are placed" in line for line in result.details)
    shipped_operator = [d for d in shipped("manifests/base/deployment.yaml") if d["kind"] == "Deployment"]
    assert doctor.runs_card_gate(shipped_operator[0])
    without = copy.deepcopy(shipped_operator[0])
    without["spec"]["template"]["spec"]["containers"][0]["env"] = [
        e for e in without["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] != "CARDQUOTA_CARD_GATE"]
    assert not doctor.runs_card_gate(without)


def test_scheduler_violations_are_listed_with_their_field() -> None:
    (result,) = doctor.check_scheduler(with_conf(CONFLICT), target())
    assert result.details == ('data["volcano-scheduler.conf"].tiers[0].plugins[1].name: plugin proportion conflicts '
                              "with capacity-card (at tiers[0].plugins[0]): both manage queue capacity, so enable only "
                              "one of them",)
    assert result.fix.startswith("kubectl -n volcano-system edit configmap volcano-scheduler-configmap")


LEAKY = """actions: "enqueue, allocate"
tiers:
- plugins:
  - name: overcommit
- plugins:
  - name: extender
    arguments:
      extender.urlPrefix: http://cardquota-extender.cardquota-system.svc:8713
      extender.predicateVerb: predicate
      extender.allocateFuncVerb: allocateFunc
      extender.jobEnqueueableVerb: jobEnqueueable
      extender.managedResources: [nvidia.com/gpu]
  - name: capacity-card
    arguments:
      cardUnlimitedCpuMemory: false
"""


def extender_conf(crossquota: bool = False) -> Manifest:
    """The shipped extender conf (its ConfigMap); ``crossquota``: with the crossquota stanza it ships commented out
    turned on, as its comment says to."""
    conf = (REPO / "manifests" / "components" / "extender" / "volcano-scheduler.conf").read_text()
    if crossquota:
        start = conf.index("  # - name: crossquota")
        block = conf[start:].split("\n")
        lines = list(itertools.takewhile(lambda line: line.startswith(("  #   ", "  # - ")), block))
        turned_on = "\n".join(line.replace("  # ", "  ", 1) for line in lines)
        conf = conf[:start] + turned_on + "\n" + "\n".join(block[len(lines):])
        assert SchedulerConfig.from_conf(conf).crossquota is not None  # (really on)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cardquota-extender-conf", "namespace": "cardquota-system"},
            "data": {"volcano-scheduler.conf": conf}}


def test_scheduler_leaks_are_warned_with_where_and_why() -> None:
    """managedResources leaving out the NPU and MIG resources nodes offer; crossquota (turned on in the extender's
    conf) and a queue's cpu/memory capability unreachable; a voter in an earlier tier deciding before the extender;
    capacity-card's arguments written in the scheduler's conf unlike the extender's (and, as a voter, after it)."""
    node_list = [*nodes(), node("npu-1", allocatable={"huawei.com/Ascend910": "8"}),
                 node("mig-1", allocatable={"nvidia.com/mig-1g.5gb": "7"})]
    capped = {**queue("batch", {}), "spec": {"capability": {"cpu": "10"}}}
    results = doctor.check_scheduler(with_conf(LEAKY), target(), nodes=node_list, queues=[capped],
                                     extender_conf=extender_conf(crossquota=True))
    (leaks,) = [result for result in results if result.status is Status.WARN]
    assert leaks.message == f"{WHERE} lets work past cardquota's rules in 5 places"
    assert [detail.split(":")[0] for detail in leaks.details] == [
        "tiers[0].plugins[0]", "tiers[1].plugins[1]", "tiers[1].plugins[0]", "tiers[1].plugins[0]",
        "tiers[1].plugins[1]"]
    assert leaks.details[0].startswith("tiers[0].plugins[0]: overcommit votes on enqueue in tier 0")
    assert "capacity-card votes after the extender" in leaks.details[1]  # (a built-in capacity-card votes too)
    assert "huawei.com/Ascend910, nvidia.com/mig-1g.5gb" in leaks.details[2]
    assert "crossquota and the cpu/memory capability of batch" in leaks.details[3]
    assert "cardUnlimitedCpuMemory" in leaks.details[4]
    assert leaks.fix.startswith("kubectl cardquota scheduler-conf | kubectl apply -f -")


def test_the_shipped_configuration_has_no_leak() -> None:
    node_list = [*nodes(), node("npu-1", allocatable={"huawei.com/Ascend910": "8"})]
    capped = {**queue("batch", {}), "spec": {"capability": {"cpu": "10"}}}
    assert statuses(doctor.check_scheduler(scheduler_configmap(), target(), nodes=node_list, queues=[capped],
                                           extender_conf=extender_conf(), card_gate=True)) == [
        ("ok", f"{WHERE} enables extender and passes cardquota's ConfigMap policy")]


def test_with_the_gate_mgpu_nodes_need_the_task_verbs_for_their_tasks_only() -> None:
    """The enqueue-only stanza on a cluster whose nodes offer mGPU: a leak (its pods' card indexes are given when
    placed); the stanza scheduler-conf prints there keeps the task verbs for the mGPU resources and leaks nothing."""
    mgpu = {"vke.volcengine.com/mgpu-core": "400", "vke.volcengine.com/mgpu-memory": "98304"}
    node_list = [*nodes(), node("mgpu-1", labels=gpu_labels(A100), allocatable=mgpu)]
    (leak,) = doctor.check_scheduler(scheduler_configmap(), target(), nodes=node_list, card_gate=True)
    assert leak.status.value == "warn"
    assert any("placement still needs: nodes offer mGPU" in line for line in leak.details), leak.details
    stanza = extender_stanza(gated=gated_stanza(sorted(mgpu), crossquota=False))
    assert stanza["arguments"]["extender.managedResources"] == sorted(mgpu)
    assert stanza["arguments"]["extender.ignorable"] is False
    fixed = with_conf(yaml.safe_dump(merged_conf(None, stanza)))
    assert statuses(doctor.check_scheduler(fixed, target(), nodes=node_list, card_gate=True)) == [
        ("ok", f"{WHERE} enables extender and passes cardquota's ConfigMap policy")]


# ------------------------------------------------------------------------------------------------------ nodes


def _mps_node() -> Manifest:
    return node("mps-1", labels=gpu_labels(A100), allocatable={"nvidia.com/gpu.shared": "8"})


@pytest.mark.parametrize(("node_list", "expected"), [
    pytest.param(nodes(), [("ok", "2 of 3 nodes offer 2 card types: NVIDIA-A100 (8), NVIDIA-H100 (8)")], id="healthy"),
    pytest.param([node("cpu-1"), node("cpu-2")], [
        ("fail", "no node offers a card type (2 nodes read): card quotas have nothing to count")], id="cpu-only"),
    pytest.param([*nodes(), node("gpu-2", allocatable={"nvidia.com/gpu": "4"}),
                  node("npu-1", allocatable={"huawei.com/Ascend910": "8"})], [
        ("ok", "2 of 5 nodes offer 2 card types: NVIDIA-A100 (8), NVIDIA-H100 (8)"),
        ("warn", "card discovery finds no card type for the accelerators of 2 GPU/NPU nodes: the labels it reads "
                 "are missing")], id="unlabelled"),
    pytest.param([node("gpu-2", allocatable={"nvidia.com/gpu": "4"})], [
        ("fail", "no node offers a card type (1 node read): card quotas have nothing to count"),
        ("warn", "card discovery finds no card type for the accelerators of 1 GPU/NPU node: the labels it reads "
                 "are missing")], id="only-unlabelled"),
    pytest.param([*nodes(), _mps_node()], [
        ("ok", "2 of 4 nodes offer 2 card types: NVIDIA-A100 (8), NVIDIA-H100 (8)"),
        ("warn", "card discovery skipped something on 1 node")], id="mps-without-memory"),
    pytest.param([*nodes(), node("bad", allocatable={"nvidia.com/gpu": "two"})], [
        ("ok", "2 of 3 nodes offer 2 card types: NVIDIA-A100 (8), NVIDIA-H100 (8)"),
        ("fail", "1 node cannot be read")], id="malformed"),
    pytest.param(FORBIDDEN, [("unknown", f"cannot tell which card types nodes offer: {FORBIDDEN.reason}")],
                 id="forbidden"),
])
def test_nodes(node_list: Any, expected: list[tuple[str, str]]) -> None:
    assert statuses(doctor.check_nodes(node_list)) == expected


def test_unlabelled_gpu_nodes_name_the_label_discovery_needs() -> None:
    results = doctor.check_nodes([*nodes(), node("gpu-2", allocatable={"nvidia.com/gpu": "4", "nvidia.com/mig-1g.5gb":
                                                                       "7"}),
                                  node("npu-1", allocatable={"huawei.com/Ascend910": "8"}),
                                  node("zero", allocatable={"nvidia.com/gpu": "0"})])
    assert results[1].details == (
        "gpu-2: 4 nvidia.com/gpu, 7 nvidia.com/mig-1g.5gb allocatable, no nvidia.com/<type>.product label (e.g. "
        "nvidia.com/gpu.product=<product>)",
        "npu-1: 8 huawei.com/Ascend910 allocatable, no huawei.com/<type>.product label (e.g. "
        "huawei.com/npu.product=<product>)")
    assert "kubectl label node gpu-2 nvidia.com/gpu.product=<product>" in results[1].fix
    assert "kubectl label node npu-1 huawei.com/npu.product=<product>" in results[1].fix


def test_a_resource_other_nodes_offer_as_cards_counts_as_a_gpu_resource() -> None:
    labelled = node("x-1", labels=gpu_labels("X1", prefix="example.com", family="xpu"),
                    allocatable={"example.com/xpu": "2"})
    results = doctor.check_nodes([labelled, node("x-2", allocatable={"example.com/xpu": "2", "example.com/nic": "1"})])
    assert results[1].details == ("x-2: 2 example.com/xpu allocatable, no example.com/<type>.product label (e.g. "
                                  "example.com/xpu.product=<product>)",)


@pytest.mark.parametrize(("resource", "label"), [
    ("nvidia.com/gpu", "nvidia.com/gpu.product"), ("nvidia.com/gpu.shared", "nvidia.com/gpu.product"),
    ("nvidia.com/mig-1g.5gb", "nvidia.com/gpu.product"), ("huawei.com/Ascend910", "huawei.com/npu.product"),
    ("huawei.com/Ascend310P", "huawei.com/npu.product"),
    ("amd.com/gpu", "amd.com/gpu.product"), ("example.com/-x", "example.com/gpu.product"),
])
def test_product_label(resource: str, label: str) -> None:
    assert doctor.product_label(resource) == label


# ----------------------------------------------------------------------------------------------------- queues


def _queues(queues: list[Manifest] | None = None, podgroups: Any = None, pods: Any = None,
            node_list: Any = None) -> list[Result]:
    default_queues, default_podgroups, default_pods = workload()
    cluster_nodes = nodes() if node_list is None else node_list
    chosen_podgroups = default_podgroups if podgroups is None else podgroups
    chosen_pods = default_pods if pods is None else pods
    if queues is None:
        everything = [*nodes(), *default_queues, *default_podgroups, *default_pods]
        queues = published(default_queues, everything)
    return doctor.check_queues(cluster_nodes, queues, chosen_podgroups, chosen_pods, target())


def _published_then(change: Callable[[list[Manifest]], None]) -> list[Manifest]:
    queues, podgroups, pods = workload()
    result = published(queues, [*nodes(), *queues, *podgroups, *pods])
    change(result)
    return result


def _drop_usage(queues: list[Manifest]) -> None:
    del queues[0]["metadata"]["annotations"][CARD_USAGE]


def _stale(queues: list[Manifest]) -> None:
    queues[1]["metadata"]["annotations"][CARD_USAGE] = "NVIDIA-A100 1/2"


def _bad_quota(queues: list[Manifest]) -> None:
    queues[1]["metadata"]["annotations"]["volcano.sh/card.quota"] = '{"NVIDIA-A100": -2}'


QUEUES_OK = ("ok", "2 queues with a card quota: usage published and current (team-a, team-b)")


@pytest.mark.parametrize(("parts", "expected"), [
    pytest.param({}, [QUEUES_OK], id="healthy"),
    pytest.param({"queues": _published_then(_drop_usage)}, [
        ("fail", "1 queue with a card quota has no volcano.sh/card.usage: the operator is not publishing usage "
                 "(team-a)")], id="not-published"),
    pytest.param({"queues": _published_then(_stale)}, [
        ("warn", "the usage published on 1 queue differs from what the ledger computes now (may be in flight: the "
                 "operator publishes within a second): team-b")], id="stale"),
    pytest.param({"queues": [queue("default")]}, [
        ("warn", "no queue has a volcano.sh/card.quota annotation: no card quota is enforced")], id="no-quota"),
    pytest.param({"queues": _published_then(_bad_quota)}, [
        ("fail", "the volcano.sh/card.quota of 1 queue cannot be read (counted as no quota): team-b"),
        ("warn", "the usage published on 1 queue differs from what the ledger computes now (may be in flight: the "
                 "operator publishes within a second): team-b")], id="bad-quota"),
    pytest.param({"pods": FORBIDDEN}, [
        ("unknown", f"cannot tell the published usage is current (Pods unreadable): {FORBIDDEN.reason}")],
        id="forbidden"),
    pytest.param({"pods": [*workload()[2], {**pod("bad", namespace="ml"), "spec": "garbage"}]}, [
        ("warn", "1 object cannot be read and are left out of the usage computed here"), QUEUES_OK], id="bad-pod"),
    pytest.param({"queues": [*_published_then(lambda q: None), {**queue("broken"), "spec": []}]}, [
        ("fail", "1 Queue cannot be read"), QUEUES_OK], id="bad-queue"),
])
def test_queues(parts: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert statuses(_queues(**parts)) == expected


def test_stale_usage_shows_both_values_and_long_lists_are_cut() -> None:
    (result,) = _queues(queues=_published_then(_stale))
    assert result.details == ("team-b: volcano.sh/card.usage is 'NVIDIA-A100 1/2', the ledger now says "
                              "'NVIDIA-A100 0/2'",)
    many = [queue(f"q{i:02}", {A100: 1}) for i in range(13)]
    (result,) = _queues(queues=many)
    assert result.message.endswith("(q00, q01, q02, q03, q04, q05, q06, q07, q08, q09 and 3 more)")


# ------------------------------------------------------------------------------------------- all together


def _installation(objects: list[Manifest],
                  trust: Callable[[str, str, str], Trust] | None = None) -> doctor.Installation:
    def one(kind: str, name: str) -> Manifest | None:
        return next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), None)

    kinds: Callable[[str], list[Manifest]] = lambda kind: [o for o in objects if o["kind"] == kind]  # noqa: E731
    return doctor.Installation(
        crds={name: one("CustomResourceDefinition", name) for name in CRD_NAMES},
        scheduler_deployments=kinds("Deployment"),
        webhook_configurations={kind: one(kind, name) for kind, name in target().webhook_configurations.items()},
        tls_secret=one("Secret", "cardquota-webhook-tls"), operator_deployment=one("Deployment", "cardquota"),
        operator_pods=kinds("Pod"), lease=one("Lease", "cardquota-controller"),
        scheduler_configmap=one("ConfigMap", "volcano-scheduler-configmap"), nodes=kinds("Node"),
        queues=kinds("Queue"), podgroups=kinds("PodGroup"), pods=kinds("Pod"), now=NOW,
        trust=trust or doctor_cli.verifier(NOW), gate_policy=one("ValidatingAdmissionPolicy", "cardquota-card-gate"),
        gate_policy_binding=one("ValidatingAdmissionPolicyBinding", "cardquota-card-gate"))


def test_every_check_runs_in_order_and_a_healthy_installation_passes() -> None:
    results = doctor.run_checks(_installation(installation_objects(NOW)), target())
    assert [r.status for r in results] == [Status.OK] * 15
    assert list(dict.fromkeys(r.name for r in results)) == list(doctor.CHECKS)
    assert doctor.overall(results) is Status.OK


def test_a_check_that_breaks_is_one_line_and_the_others_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> list[Result]:
        raise KeyError("boom")

    monkeypatch.setattr(doctor, "check_nodes", broken)
    results = doctor.run_checks(_installation(installation_objects(NOW)), target())
    (line,) = [r for r in results if r.name == doctor.NODES]
    assert (line.status, line.message) == (Status.UNKNOWN, "this check failed unexpectedly (KeyError: 'boom'): a bug "
                                                           "in cardquota")
    assert len(results) == 15


@pytest.mark.parametrize(("found", "status", "code"), [
    ({Status.OK}, Status.OK, 0), ({Status.OK, Status.WARN}, Status.WARN, 0),
    ({Status.WARN, Status.UNKNOWN}, Status.UNKNOWN, 2), ({Status.UNKNOWN, Status.FAIL}, Status.FAIL, 1),
])
def test_overall_status_and_exit_code(found: set[Status], status: Status, code: int) -> None:
    results = [Result("x", s, "m") for s in found]
    assert doctor.overall(results) is status
    assert doctor_cli.EXIT[status] == code


@pytest.mark.parametrize("garbage", [None, 3, "text", [], {"metadata": "x", "spec": [1], "status": "y", "data": 5,
                                                           "webhooks": {"a": 1}}])
def test_garbage_anywhere_is_a_line_never_an_exception(garbage: Any) -> None:
    """Every single input replaced by something malformed: each check still answers with lines, and no check
    falls back to the "failed unexpectedly" line."""
    base = _installation(installation_objects(NOW))
    mapping_fields = {"crds", "webhook_configurations"}
    list_fields = {"scheduler_deployments", "operator_pods", "nodes", "queues", "podgroups", "pods"}
    for name in [f for f in base.__dataclass_fields__ if f not in ("now", "trust")]:
        value: Any
        if name in mapping_fields:
            value = dict.fromkeys(getattr(base, name), garbage)
        elif name in list_fields:
            value = [garbage] if garbage != [] else garbage
        else:
            value = garbage if isinstance(garbage, dict) or garbage is None else {"spec": garbage}
        broken = doctor.Installation(**{**{f: getattr(base, f) for f in base.__dataclass_fields__}, name: value})
        results = doctor.run_checks(broken, target())
        assert not any("failed unexpectedly" in r.message for r in results), (name, results)


# ------------------------------------------------------------------------------------------------------- CLI


def plugin(*argv: str, stdout: io.StringIO | None = None) -> tuple[int, str, str]:
    out, err = stdout or io.StringIO(), io.StringIO()
    code = run("kubectl cardquota", list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def dump(path: Path, objects: list[Manifest]) -> str:
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def test_render_prints_sections_marks_details_fixes_and_a_summary() -> None:
    results = [Result("A", Status.OK, "fine"), Result("A", Status.FAIL, "broken", fix="do this", details=("d1",)),
               Result("B", Status.WARN, "hmm", fix="maybe"), Result("B", Status.UNKNOWN, "?", fix="ask")]
    assert doctor_cli.render(results) == (
        "A\n-\n✓ fine\n✗ broken\n    d1\n    → do this\n\nB\n-\n! hmm\n    → maybe\n? ?\n    → ask\n\n"
        "✗ 1 failed, 1 cannot tell, 1 warning, 1 ok\n")
    assert doctor_cli.render([Result("A", Status.OK, "fine", fix="never shown")]).endswith(
        "✓ fine\n\n✓ all 1 checks passed\n")
    assert "\033[31m✗\033[0m broken" in doctor_cli.render(results, color=True)


def test_offline_healthy_installation_every_line_passes(tmp_path: Path) -> None:
    import time

    code, text, err = plugin("doctor", "--cluster", dump(tmp_path / "c.yaml", installation_objects(time.time())))
    assert (code, err) == (0, "")
    marks = [line[0] for line in text.splitlines()[:-1] if line and line[0] in "✓!✗?"]
    assert marks == ["✓"] * 15
    assert text.endswith("✓ all 15 checks passed\n")
    code, text, _ = plugin("doctor", "--cluster", str(tmp_path / "c.yaml"), "-o", "json")
    document = json.loads(text)
    assert code == 0
    assert document["status"] == "ok"
    assert document["results"][0] == {
        "check": "Volcano", "status": "ok", "message": "Volcano's CRDs are installed: queues.scheduling.volcano.sh, "
        "podgroups.scheduling.volcano.sh, jobs.batch.volcano.sh", "details": [], "fix": ""}


def test_offline_split_installation_checks_the_controller_pods_and_their_lease(tmp_path: Path) -> None:
    import time

    now = time.time()
    objects = [o for o in installation_objects(now) if o["kind"] != "Lease"]
    objects += [controller_deployment(), controller_pod(CONTROLLER), controller_pod(CONTROLLER_STANDBY),
                lease(f"{CONTROLLER}-1a2b3c4d", renewed=now - 2)]
    code, text, err = plugin("doctor", "--cluster", dump(tmp_path / "c.yaml", objects))
    assert (code, err) == (0, "")
    assert f"✓ 2 of 2 controller pods ready: {CONTROLLER}, {CONTROLLER_STANDBY}" in text
    assert f"✓ one leader: {CONTROLLER} holds Lease cardquota-system/cardquota-controller" in text
    objects[-1] = lease(f"{LEADER}-1a2b3c4d", renewed=now - 2)  # a webhook pod cannot be the leader
    code, text, _ = plugin("doctor", "--cluster", dump(tmp_path / "c.yaml", objects))
    assert code == 1
    assert f"which is not a ready controller pod ({CONTROLLER}, {CONTROLLER_STANDBY})" in text


def test_offline_broken_installation_exits_1_with_fixes(tmp_path: Path) -> None:
    import time

    now = time.time()
    objects = [o for o in installation_objects(now) if o["kind"] not in ("Lease", "MutatingWebhookConfiguration")]
    code, text, _ = plugin("doctor", "--cluster", dump(tmp_path / "c.yaml", objects))
    assert code == 1
    lines = text.splitlines()
    failed = lines.index("✗ MutatingWebhookConfiguration cardquota-mutating is not registered: nothing is checked at "
                         "admission")
    assert lines[failed + 1] == ("    → kubectl apply -k manifests/overlays/production (or the overlay you deployed) "
                                 "with your image set in it first (kustomize edit set image "
                                 "cardquota=REGISTRY/cardquota:TAG; with the Helm chart: image.repository)")
    assert ("✗ no leader: Lease cardquota-system/cardquota-controller does not exist, so no replica publishes usage or "
            "events") in lines
    assert lines[-1] == "✗ 2 failed, 12 ok"


def test_offline_other_namespace_and_names(tmp_path: Path) -> None:
    import time

    now = time.time()
    pair = certificates(now, names=service_dns_names("cq", "quota"))
    objects = installation_objects(now, pair)
    for manifest in objects:
        metadata = manifest["metadata"]
        if metadata.get("namespace") == "cardquota-system":
            metadata["namespace"] = "quota"
        if manifest["kind"].endswith("WebhookConfiguration"):
            manifest["webhooks"] = in_namespace({"": manifest}, "quota")[""]["webhooks"]  # (rendered for quota)
            for webhook in manifest["webhooks"]:
                webhook["clientConfig"]["service"] = {"name": "cq", "namespace": "quota", "path": "/validate"}
        if manifest["kind"] == "Secret":
            metadata["name"] = "tls"
        if manifest["kind"] == "ValidatingAdmissionPolicy":  # (as transformers/namespace writes it)
            for condition in manifest["spec"]["matchConditions"]:
                condition["expression"] = condition["expression"].replace(":cardquota-system:", ":quota:")
        if manifest["kind"] == "Deployment" and metadata["name"] == "cardquota":
            metadata["name"] = "cq"
    path = dump(tmp_path / "c.yaml", objects)
    code, text, _ = plugin("doctor", "--cluster", path, "-n", "quota", "--service", "cq", "--tls-secret", "tls",
                           "--deployment", "cq")
    assert code == 0, text
    code, text, _ = plugin("doctor", "--cluster", path)
    assert code == 1
    assert "✗ Deployment cardquota-system/cardquota not found" in text


def test_offline_malformed_objects_never_crash(tmp_path: Path) -> None:
    objects: list[Manifest] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "cardquota",
                                                                      "namespace": "cardquota-system"}, "spec": "x"},
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"name": "cardquota-controller", "namespace": "cardquota-system"}, "spec": ["x"]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": "cardquota-validating"}, "webhooks": "x"},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cardquota-webhook-tls",
                                                           "namespace": "cardquota-system"}, "data": ["x"]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "volcano-scheduler-configmap",
                                                              "namespace": "volcano-system"}, "data": {"x": 1}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": "x"}},
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"}, "spec": 5},
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
         "metadata": {"name": QUEUE_CRD}, "spec": {"versions": [{"name": 1}, "x"]}},
    ]
    code, text, err = plugin("doctor", "--cluster", dump(tmp_path / "c.yaml", objects))
    assert code == 1
    assert "Traceback" not in text + err
    assert "failed unexpectedly" not in text
    assert err == ""


def test_the_defaults_are_the_operators_settings() -> None:
    settings = Settings()
    chosen = target()
    assert (chosen.namespace, chosen.service, chosen.tls_secret, chosen.deployment) == (
        settings.namespace, settings.service, settings.tls_secret, settings.deployment)
    assert list(chosen.webhook_configurations.values()) == list(settings.webhook_configurations)
    assert chosen.lease == "cardquota-controller"
    (deployment,) = shipped("manifests/base/deployment.yaml")
    assert dict(chosen.pod_selector) == deployment["spec"]["selector"]["matchLabels"]
    names = {c["metadata"]["name"]: c["kind"] for c in shipped("manifests/base/webhooks.yaml")}
    assert names == {name: kind for kind, name in chosen.webhook_configurations.items()}


def test_reads_the_api_refuses_make_their_check_unknown_and_no_api_is_one_line() -> None:
    from cardquota.core.errors import InputError
    from cardquota.kube import UNREACHABLE, api_error

    def failing(status: int, message: str) -> Callable[[], Any]:
        def call() -> Any:
            raise api_error(message, status)
        return call

    refused = doctor_cli._read(failing(403, 'GET /api/v1/x: HTTP 403: x is forbidden: User "dev" cannot get "x"'))
    assert refused == Unreadable('not allowed (HTTP 403: x is forbidden: User "dev" cannot get "x")')
    assert doctor_cli._read(failing(500, "GET /x: HTTP 500: boom")) == Unreadable("HTTP 500: boom")
    with pytest.raises(InputError, match="no Kubernetes API reachable"):
        doctor_cli._read(failing(UNREACHABLE, "no Kubernetes API reachable at https://x: refused"))
    with pytest.raises(InputError, match="not logged in"):
        doctor_cli._read(failing(401, "GET /x: HTTP 401: Unauthorized"))
    assert doctor_cli._read(lambda: {"a": 1}) == {"a": 1}


def test_an_unreachable_cluster_is_one_line_and_exit_2(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path, "http://127.0.0.1:9")
    code, text, err = plugin("doctor", "--kubeconfig", kubeconfig)
    assert (code, text) == (2, "")
    assert "no Kubernetes API reachable at http://127.0.0.1:9" in err
    assert err.count("\n") == 1
    code, _, err = plugin("doctor", "--kubeconfig", str(tmp_path / "missing"))
    assert code == 2
    assert f"--kubeconfig {tmp_path / 'missing'}: no such file" in err  # issue 18 item 14


def _volcano_podgroup_mutation(kind: str) -> Manifest:
    """Volcano's PodGroup mutation as its Helm chart installs it (v1.15.1: templates/webhooks.yaml when
    custom.enabled_admissions names /podgroups/mutate; policy/podgroups-mutating.yaml with custom.map_enable)."""
    if kind == "MutatingWebhookConfiguration":
        return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": {"name": "volcano-admission-service-podgroups-mutate"},
                "webhooks": [{"name": "mutatepodgroup.volcano.sh", "admissionReviewVersions": ["v1"],
                              "sideEffects": "None", "clientConfig": {"service": {
                                  "name": "volcano-admission-service", "namespace": "volcano-system",
                                  "path": "/podgroups/mutate"}}}]}
    return {"apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": kind,
            "metadata": {"name": "volcano-podgroup-mutation-policy"}, "spec": {"failurePolicy": "Fail"}}


@pytest.mark.parametrize(("volcano", "cardquota", "mark", "words"), [
    ("MutatingWebhookConfiguration", False, "!", "Volcano maps namespaces to queues (MutatingWebhookConfiguration "
     "volcano-admission-service-podgroups-mutate) but cardquota does not"),
    ("MutatingAdmissionPolicy", False, "!", "Volcano maps namespaces to queues (MutatingAdmissionPolicy "
     "volcano-podgroup-mutation-policy) but cardquota does not"),
    ("MutatingAdmissionPolicy", True, "✓", "and cardquota follows it"),
    (None, True, "!", "cardquota maps namespaces to queues but Volcano does not"),
    (None, False, None, "namespaces to queues"),
])
def test_offline_doctor_says_when_volcano_and_cardquota_disagree_on_namespace_queues(
        tmp_path: Path, volcano: str | None, cardquota: bool, mark: str | None, words: str) -> None:
    import time

    objects = installation_objects(time.time())
    if volcano is not None:
        objects.append(_volcano_podgroup_mutation(volcano))
    if cardquota:
        deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "cardquota")
        deployment["spec"]["template"]["spec"]["containers"][0].setdefault("env", []).append(
            {"name": "CARDQUOTA_MAP_NAMESPACE_QUEUES", "value": "1"})
    code, text, _ = plugin("doctor", "--cluster", dump(tmp_path / "c.yaml", objects))
    assert code == 0
    lines = [line for line in text.splitlines() if words in line]
    if mark is None:
        assert lines == []
    else:
        assert len(lines) == 1
        assert lines[0].startswith(mark)
    if mark == "!":
        assert "→ set CARDQUOTA_MAP_NAMESPACE_QUEUES=1" in text or "→ remove CARDQUOTA_MAP_NAMESPACE_QUEUES" in text


def test_the_usage_is_computed_as_the_operator_does_when_it_maps_namespaces_to_queues() -> None:
    """With CARDQUOTA_MAP_NAMESPACE_QUEUES the operator charges a pending pod without a PodGroup to its namespace's
    queue; the doctor reads the Namespaces and computes the same, not a difference."""
    queues, podgroups, pods = workload()
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "serving", "annotations": {"scheduling.volcano.sh/queue-name": "team-b"}}}
    pods.append(pod("serve", namespace="serving", card=A100, gpus=1))
    ledger = Ledger.build([*nodes(), *queues, *podgroups, *pods, namespace], map_namespace_queues=True)
    assert ledger.usage("team-b").pending == {A100: 1}
    shown = [copy.deepcopy(q) for q in queues]
    for manifest in shown:
        manifest["metadata"].setdefault("annotations", {}).update(
            queue_annotations(ledger.usage(manifest["metadata"]["name"])))
    assert statuses(doctor.check_queues(nodes(), shown, podgroups, pods, target(), namespaces=[namespace])) == \
        [QUEUES_OK]
    assert statuses(doctor.check_queues(nodes(), shown, podgroups, pods, target()))[0][0] == "warn"
    assert statuses(doctor.check_queues(nodes(), shown, podgroups, pods, target(), namespaces=FORBIDDEN)) == [
        ("unknown", f"cannot tell the published usage is current (Namespaces unreadable): {FORBIDDEN.reason}")]


def _gated(name: str) -> Manifest:
    return pod(name, namespace="ml", card=A100, gpus=1, queue="team-a", gated=True)


def test_the_card_gate_path_as_shipped_is_ok_and_says_who_waits() -> None:
    mutating = webhook_configurations("Q0E=")["MutatingWebhookConfiguration"]
    assert statuses(doctor.check_card_gate(True, mutating, [_gated("w-0"), _gated("w-1")], target())) == [
        ("ok", "card pods are created at the card-quota gate (pods.mutate.cardquota.io fails closed); 2 pods wait "
               "at it")]


def test_a_card_pod_mutation_failing_open_lets_card_pods_past_the_gate() -> None:
    mutating = copy.deepcopy(webhook_configurations("Q0E=")["MutatingWebhookConfiguration"])
    (hook,) = [w for w in mutating["webhooks"] if w["name"] == "pods.mutate.cardquota.io"]
    hook["failurePolicy"] = "Ignore"
    (result,) = doctor.check_card_gate(True, mutating, [], target())
    assert result.status is Status.WARN
    assert "placed without the card-quota gate" in result.message
    assert '"path": "/webhooks/2/failurePolicy"' in result.fix
    hook["name"] = "renamed"
    assert statuses(doctor.check_card_gate(True, mutating, [], target()))[0][0] == "fail"


def test_pods_left_holding_the_gate_when_the_operator_runs_without_it_are_named() -> None:
    bound = _gated("bound")
    bound["spec"]["nodeName"] = "a100-1"
    (result,) = doctor.check_card_gate(False, None, [_gated("stuck"), bound, pod("other", namespace="ml")], target())
    assert result.status is Status.FAIL
    assert result.message.startswith("1 pod holds the card-quota gate (cardquota.io/card-quota)")
    assert result.details == ("ml/stuck",)
    assert doctor.check_card_gate(False, None, [pod("other", namespace="ml")], target()) == []


def _gate_policy() -> tuple[Manifest, Manifest]:
    policy, binding = yaml.safe_load_all((Path(__file__).parents[2] / "manifests/base/card-gate-policy.yaml")
                                         .read_text())
    return policy, binding


def test_the_gate_policy_as_shipped_keeps_the_gate_cardquotas_to_lift() -> None:
    policy, binding = _gate_policy()
    assert statuses(doctor.check_gate_policy(True, policy, binding, target())) == [
        ("ok", "only cardquota's accounts can lift the card-quota gate (the API server's ValidatingAdmissionPolicy "
               "cardquota-card-gate denies the others)")]
    assert doctor.check_gate_policy(False, None, None, target()) == []  # (the gate off: nothing to keep)


@pytest.mark.parametrize(("change", "said"), [
    (lambda policy, binding: (None, binding), "ValidatingAdmissionPolicy cardquota-card-gate is missing"),
    (lambda policy, binding: (None, None), "ValidatingAdmissionPolicy cardquota-card-gate and "
                                           "ValidatingAdmissionPolicyBinding cardquota-card-gate are missing"),
    (lambda policy, binding: (policy, {**binding, "spec": {**binding["spec"], "validationActions": ["Audit"]}}),
     "its binding only Audit (no Deny)"),
    (lambda policy, binding: ({**policy, "spec": {**policy["spec"], "failurePolicy": "Ignore"}}, binding),
     "it fails open (failurePolicy Ignore)"),
    (lambda policy, binding: (policy, {**binding, "spec": {**binding["spec"], "policyName": "other"}}),
     "binds other, not the policy cardquota-card-gate"),
])
def test_a_gate_policy_missing_or_not_denying_is_a_warning_saying_who_could_lift_the_gate(
        change: Callable[[Manifest, Manifest], tuple[Any, Any]], said: str) -> None:
    (result,) = doctor.check_gate_policy(True, *change(*_gate_policy()), target())
    assert result.status is Status.WARN
    assert said in result.message
    assert result.message.endswith("anyone allowed to patch pods can remove the card-quota gate and run a pod past "
                                   "its queue's quota")
    (unknown,) = doctor.check_gate_policy(True, FORBIDDEN, None, target())
    assert unknown.status is Status.UNKNOWN


def test_a_gate_policy_exempting_another_namespaces_accounts_refuses_cardquotas_own_lifts() -> None:
    """kustomize's namespace override does not rewrite the CEL string (transformers/namespace does): a policy still
    naming cardquota-system where cardquota runs elsewhere refuses every lift."""
    policy, binding = _gate_policy()
    (result,) = doctor.check_gate_policy(True, policy, binding, Target(**{**target().__dict__, "namespace": "gpu-ops"}))
    assert result.status is Status.FAIL
    assert result.message.startswith("ValidatingAdmissionPolicy cardquota-card-gate does not let cardquota's accounts "
                                     "in namespace gpu-ops through (no system:serviceaccount:gpu-ops:… in its "
                                     "matchConditions)")


@pytest.mark.parametrize(("args", "env", "expected"), [
    ([], [], {"volcano"}),
    (["--schedulers", "volcano,volcano-gpu"], [], {"volcano", "volcano-gpu"}),
    (["--card-aware-scheduler=volcano-gpu", "--schedulers", "batch"], [], {"volcano-gpu", "batch"}),
    ([], [{"name": "CARDQUOTA_SCHEDULERS", "value": " volcano , volcano-gpu "}], {"volcano", "volcano-gpu"}),
    (["--schedulers", "a"], [{"name": "CARDQUOTA_SCHEDULERS", "value": "b"}], {"a"}),  # (args win, as in settings)
])
def test_doctor_reads_the_schedulers_the_operator_is_told_volcano_runs(args: list[str], env: list[Manifest],
                                                                       expected: set[str]) -> None:
    from cardquota.operator import settings

    deployment = operator_deployment()
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [*container.get("args", []), *args]
    container["env"] = [item for item in container.get("env", []) if item["name"] != "CARDQUOTA_SCHEDULERS"] + env
    assert doctor.volcano_schedulers(deployment) == expected
    assert doctor.SCHEDULERS_ENV == settings.ENV_SCHEDULERS


def test_usage_published_by_an_operator_with_other_schedulers_is_not_taken_for_stale() -> None:
    """A GPU pod of scheduler volcano-gpu with no PodGroup: the operator, told volcano-gpu is Volcano's, counts it
    against queue default and publishes that; doctor, reading the same, finds the usage current."""
    notebook = pod("nb", namespace="ml", card=A100, gpus=1, queue="default")
    notebook["spec"]["nodeName"] = "a100-1"
    notebook["spec"]["schedulerName"] = "volcano-gpu"
    queues = [queue("default", {A100: 2})]
    cluster = [*nodes(), *queues, notebook]
    told = frozenset({"volcano", "volcano-gpu"})
    ledger = Ledger.build(cluster, volcano_schedulers=told)
    assert ledger.usage("default").allocated == {A100: 1}
    shown = copy.deepcopy(queues)
    shown[0]["metadata"]["annotations"].update(queue_annotations(ledger.usage("default")))
    assert statuses(doctor.check_queues(nodes(), shown, [], [notebook], target(), schedulers=told))[0][0] == "ok"
    assert statuses(doctor.check_queues(nodes(), shown, [], [notebook], target()))[0][0] == "warn"


def test_pending_card_pods_past_the_gate_that_would_exceed_a_quota_are_named() -> None:
    """Moving to the gate: card pods created before it (no gate) count against their queue at once, but under the
    gated scheduler entry Volcano places them without a card check. team-a's 3 bound A100 and two such pods make 5 of
    4: both are named (the gated one waits and is not); with one of them, or without the gate, nothing is said."""
    queues, podgroups, pods = workload()
    late = [pod(f"late-{i}", namespace="ml", card=A100, gpus=1, queue="team-a") for i in range(2)]
    everything = [*pods, *late, _gated("waits")]
    shown = published(queues, [*nodes(), *queues, *podgroups, *everything])
    results = doctor.check_queues(nodes(), shown, podgroups, everything, target(), card_gate=True)
    (failed,) = only(results, Status.FAIL)
    assert failed.message.startswith("2 pending card pods past the card-quota gate would exceed its queue: team-a "
                                     "(5 of 4 NVIDIA-A100) held by bound pods and pods past the gate")
    assert failed.details == ("ml/late-0", "ml/late-1")
    assert "kubectl delete pod" in failed.fix
    assert only(doctor.check_queues(nodes(), shown, podgroups, everything, target()), Status.FAIL) == []
    fewer = [*pods, late[0]]
    shown = published(queues, [*nodes(), *queues, *podgroups, *fewer])
    assert only(doctor.check_queues(nodes(), shown, podgroups, fewer, target(), card_gate=True), Status.FAIL) == []
