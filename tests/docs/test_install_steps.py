"""The README's install steps, run as far as offline allows (issue 43): the kustomization edits it shows (step 2's
``images:``, step 4's ``components:``) are made, by hand as a user with only kubectl would, in a copy of
manifests/, and ``kubectl kustomize`` renders the overlay the step's ``kubectl apply -k`` applies: every container
runs the image the user named, and the extender is deployed. The Helm way is rendered with the ``--set`` values its
command gives, into the namespace its ``kubectl create namespace``/``kubectl label`` lines make, which carries the
Pod Security labels the overlay's Namespace has (no ``--create-namespace``: it makes the namespace without them).

No command needs ``kustomize edit``: kubectl's built-in kustomize has none (the README may name it as an
alternative in prose, never as the only way, in a shell block)."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from unit.test_chart import kustomize, render
from user_docs import REPO, section

REGISTRY = "registry.example.com/team"
STEPS = section("Install on a cluster running Volcano")
BLOCK = re.compile(r"^ *```(sh|yaml)\n(.*?)^ *```$", re.MULTILINE | re.DOTALL)
OVERLAY = "manifests/overlays/production"


def blocks(kind: str) -> list[str]:
    return [_dedent(text).replace("<your registry>", REGISTRY) for found, text in BLOCK.findall(STEPS)
            if found == kind]


def _dedent(text: str) -> str:
    lines = text.splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines)


def commands() -> list[list[str]]:
    """Every command of the steps' shell blocks (continuation lines joined; ``&&`` splits)."""
    found = []
    for block in blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                found.append(words[:cut])
                words = words[cut + 1:]
    return found


def containers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [container for obj in objects if obj["kind"] == "Deployment"
            for container in obj["spec"]["template"]["spec"]["containers"]]


def test_no_shell_block_needs_kustomize_edit() -> None:
    assert not [command for command in commands() if command[:2] == ["kustomize", "edit"]]
    assert ["kubectl", "apply", "-k", OVERLAY] in commands()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH (kubectl kustomize)")
def test_the_kustomization_edits_shown_render_the_users_image_and_the_extender(tmp_path: Path) -> None:
    pushed = next(command[2] for command in commands() if command[:2] == ["docker", "push"])
    copy = tmp_path / "manifests"
    shutil.copytree(REPO / "manifests", copy, symlinks=True)
    kustomization = copy / "overlays" / "production" / "kustomization.yaml"
    document = yaml.safe_load(kustomization.read_text())
    edits = [yaml.safe_load(block) for block in blocks("yaml")]
    assert {key for edit in edits for key in edit} == {"images", "components"}
    for edit in edits:
        document.update(edit)  # the keys made to read as the README shows them
    kustomization.write_text(yaml.safe_dump(document, sort_keys=False))
    rendered = kustomize(copy / "overlays" / "production")
    assert {container["image"] for container in containers(rendered)} == {pushed}
    names = {obj["metadata"]["name"] for obj in rendered if obj["kind"] == "Deployment"}
    assert names == {"cardquota", "cardquota-controller", "cardquota-extender"}
    assert {"ServiceMonitor", "ConfigMap"} <= {obj["kind"] for obj in rendered}  # (what the overlay had, kept)


def test_the_helm_way_labels_its_namespace_as_the_overlay_does_and_deploys_the_extender() -> None:
    shown = commands()
    (install,) = [command for command in shown if command[:2] == ["helm", "install"]]
    assert "--create-namespace" not in install
    namespace = install[install.index("-n") + 1]
    assert ["kubectl", "create", "namespace", namespace] in shown
    (label,) = [command for command in shown if command[:4] == ["kubectl", "label", "namespace", namespace]]
    assert shown.index(label) < shown.index(install)
    labelled = dict(pair.split("=", 1) for pair in label[4:])
    overlay_namespace = yaml.safe_load((REPO / "manifests" / "base" / "namespace.yaml").read_text())
    security = {key: value for key, value in overlay_namespace["metadata"]["labels"].items()
                if key.startswith("pod-security.kubernetes.io/")}
    assert security
    assert labelled == security
    values = helm.parse_set_string(install[install.index("--set") + 1])
    objects = render(values, namespace)
    assert "Namespace" not in {obj["kind"] for obj in objects}  # (made by the kubectl lines above)
    assert {container["image"].rpartition(":")[0] for container in containers(objects)} == {f"{REGISTRY}/cardquota"}
    assert "cardquota-extender" in {obj["metadata"]["name"] for obj in objects if obj["kind"] == "Deployment"}
