"""cardquota's namespace follows an overlay's ``namespace:`` everywhere, the webhooks' CEL conditions and
namespaceSelectors included (``kubectl kustomize``).

kustomize's ``namespace:`` moves every namespaced object and each webhook's ``clientConfig.service``, but not the
text of a CEL expression nor the values of a label selector: before, an overlay in another namespace left the
``not-cardquota-itself`` condition naming ``system:serviceaccount:cardquota-system:…`` and the namespaceSelectors
leaving out ``cardquota-system``, so cardquota's own writes and namespace went through its own fail-closed webhooks.
manifests/transformers/namespace writes the namespace there too; it is a transformer listed in the kustomization
that sets ``namespace:`` (kustomize runs a kustomization's ``transformers`` after its own ``namespace:``,
``KustTarget.runTransformers`` in api/internal/target/kusttarget.go, kustomize v5.5.0; a base's or a component's
run before the including overlay's ``namespace:``, so they cannot). The check is the doctor's
(:func:`cardquota.core.doctor.other_namespaces`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from object_walk import strings, webhooks

from cardquota.core.doctor import NAMESPACE_TRANSFORMER, OWN_WRITES_CONDITION, other_namespaces

REPO = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
OVERLAYS = ["dev", "production", "dev-extender"]

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (kubectl kustomize renders overlays)")


def render(directory: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    result = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    """A copy of manifests/ (kustomize takes no absolute paths, and an overlay's files stay below it)."""
    copy = tmp_path / "manifests"
    shutil.copytree(REPO / "manifests", copy)
    return copy


def strangers(rendered: list[dict[str, Any]], namespace: str) -> list[str]:
    """Each webhook that takes another namespace than ``namespace`` for cardquota's own (the doctor's check)."""
    return [f"{webhook['name']}: {found}" for webhook in webhooks(rendered)
            if (found := other_namespaces(webhook, namespace))]


def assert_all_in(rendered: list[dict[str, Any]], namespace: str) -> None:
    assert strangers(rendered, namespace) == []
    conditions = [condition for webhook in webhooks(rendered) for condition in webhook.get("matchConditions", [])
                  if condition["name"] == OWN_WRITES_CONDITION]
    assert conditions  # (the check above judged some)
    for condition in conditions:
        assert f"'system:serviceaccount:{namespace}:cardquota'" in condition["expression"]
    assert {obj["metadata"]["namespace"] for obj in rendered if obj["kind"] == "ServiceAccount"} == {namespace}
    for obj in rendered:
        if obj["kind"] == "ConfigMap":
            continue  # (the extender's conf: a comment names the default namespace)
        assert not [text for text in strings(obj) if "cardquota-system" in text], obj["kind"]


def set_namespace(kustomization: Path, namespace: str) -> None:
    text = kustomization.read_text()
    assert "\nnamespace: cardquota-system\n" in text
    kustomization.write_text(text.replace("\nnamespace: cardquota-system\n", f"\nnamespace: {namespace}\n"))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_shipped_overlays_keep_cardquota_out_of_its_own_way(overlay: str) -> None:
    assert strangers(render(REPO / "manifests" / "overlays" / overlay), "cardquota-system") == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_an_overlays_namespace_line_moves_everything(manifests: Path, overlay: str) -> None:
    """Each shipped overlay names cardquota's namespace once (``namespace:``): changed there, it changes in the
    webhooks' conditions and selectors too."""
    set_namespace(manifests / "overlays" / overlay / "kustomization.yaml", "gpu-admin")
    assert_all_in(render(manifests / "overlays" / overlay), "gpu-admin")


def wrapping(manifests: Path, *, transformer: bool) -> Path:
    """An overlay of one's own over the production overlay, in namespace gpu-admin."""
    overlay = manifests / "overlays" / "mine"
    overlay.mkdir()
    text = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: gpu-admin\n" \
           "resources:\n- ../production\n"
    if transformer:
        text += f"transformers:\n- ../../{NAMESPACE_TRANSFORMER.removeprefix('manifests/')}\n"
    (overlay / "kustomization.yaml").write_text(text)
    return overlay


def test_an_overlay_of_ones_own_follows_with_the_transformer(manifests: Path) -> None:
    assert_all_in(render(wrapping(manifests, transformer=True)), "gpu-admin")


def test_without_the_transformer_the_doctor_names_every_webhook_left_behind(manifests: Path) -> None:
    """What the transformer prevents (and the README's instructions say to list it): kustomize alone leaves the
    conditions and selectors on cardquota-system while cardquota runs in gpu-admin."""
    rendered = render(wrapping(manifests, transformer=False))
    left = strangers(rendered, "gpu-admin")
    leaving_out = [webhook for webhook in webhooks(rendered)  # (all but the ConfigMap's, which selects volcano-system)
                   if any(e["operator"] == "NotIn" for e in webhook["namespaceSelector"]["matchExpressions"])]
    assert len(left) == len(leaving_out) > 0
    assert any("service accounts of cardquota-system" in line for line in left)
