"""Every object cardquota ships, as the real API server judges it: each overlay's ``kubectl kustomize`` and the Helm
chart's rendering, applied with server-side dry-run — its schemas, its CEL (the webhooks' ``matchConditions``
compiled and their cost estimated), RBAC's own checks (no role grants what its writer lacks), admission (Volcano's
webhooks and cardquota's own). Unit tests hold the same objects to kubernetes-validate's schemas and cel-python; this
is the API server itself.

Nothing is changed: ``--dry-run=server`` stores nothing. Kinds of other projects' CRDs that a cluster may not have
(the Prometheus Operator's ServiceMonitor, cert-manager's Certificate and Issuer) are told apart: refused only as not
served, and only those.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.cluster import Kubectl

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = ("dev", "dev-extender", "production")
OPTIONAL = {("monitoring.coreos.com", "ServiceMonitor"), ("cert-manager.io", "Certificate"),
            ("cert-manager.io", "Issuer")}
"""Kinds the shipped objects may use whose CRDs belong to other projects (the README says to drop them without)."""
CHART_VALUES = {
    "defaults": {},
    "everything": {"extender": {"enabled": True}, "separateController": {"enabled": True},
                   "grafanaDashboard": {"enabled": True}, "serviceMonitor": {"enabled": True},
                   "mapNamespaceQueues": True},
    "cert-manager": {"tls": {"mode": "cert-manager"}},
}


def _group(obj: dict[str, Any]) -> str:
    api_version: str = obj["apiVersion"]
    return api_version.split("/")[0] if "/" in api_version else ""


def _dry_run(kubectl: Kubectl, objects: list[dict[str, Any]]) -> dict[str, str]:
    """Each object applied with server-side dry-run; what the API server refused, by kind/name."""
    refused = {}
    for obj in objects:
        result = kubectl.run("apply", "--server-side", "--dry-run=server", "--force-conflicts",
                             "--field-manager=cardquota-e2e-dry-run", "-f", "-", stdin=json.dumps(obj), check=False)
        name = f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
        if result.returncode != 0:
            refused[name] = result.stderr.strip()
        elif (_group(obj), obj["kind"]) in OPTIONAL:
            refused[name] = "accepted"  # served after all: nothing to tell apart
    return refused


def _only_unserved_optional_kinds(objects: list[dict[str, Any]], refused: dict[str, str]) -> None:
    optional = {f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
                for o in objects if (_group(o), o["kind"]) in OPTIONAL}
    unexpected = {name: why for name, why in refused.items() if name not in optional}
    assert not unexpected, "the API server refused shipped objects:\n" + "\n".join(
        f"  {name}: {why}" for name, why in unexpected.items())
    for name in optional & refused.keys():
        assert "no matches for kind" in refused[name] or refused[name] == "accepted", refused[name]


def _kustomize(kubectl: Kubectl, overlay: str) -> list[dict[str, Any]]:
    text = kubectl.run("kustomize", str(REPO / "manifests" / "overlays" / overlay)).stdout
    return [document for document in yaml.safe_load_all(text) if document]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_api_server_accepts_every_object_of_each_overlay(kubectl: Kubectl, overlay: str) -> None:
    objects = _kustomize(kubectl, overlay)
    kinds = {obj["kind"] for obj in objects}
    assert {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ClusterRole",
            "NetworkPolicy", "Deployment"} <= kinds
    _only_unserved_optional_kinds(objects, _dry_run(kubectl, objects))


@pytest.mark.parametrize("values", CHART_VALUES.values(), ids=CHART_VALUES.keys())
def test_the_api_server_accepts_every_object_the_chart_renders(kubectl: Kubectl, values: dict[str, Any]) -> None:
    helm = pytest.importorskip("helm_python", reason="the Helm chart is rendered with helm-python-sdk (test extra)")
    chart = helm.Chart.load(str(REPO / "charts" / "cardquota"))
    rendered = chart.render(values=values, name="cardquota", namespace="cardquota-system", is_install=True)
    objects = [document for text in rendered.values() for document in yaml.safe_load_all(text) if document]
    assert any(obj["kind"] == "ValidatingWebhookConfiguration" for obj in objects)
    _only_unserved_optional_kinds(objects, _dry_run(kubectl, objects))


def test_a_webhook_configuration_whose_cel_does_not_compile_is_refused(kubectl: Kubectl) -> None:
    """The check above can fail: the same API server refuses a matchCondition that does not compile."""
    shipped = next(obj for obj in _kustomize(kubectl, "dev") if obj["kind"] == "ValidatingWebhookConfiguration")
    broken = json.loads(json.dumps(shipped))
    broken["metadata"]["name"] = "cardquota-e2e-broken"
    broken["webhooks"][0]["matchConditions"][0]["expression"] = "object.metadata.name +"
    refused = _dry_run(kubectl, [broken])
    assert "compilation failed" in next(iter(refused.values()))

