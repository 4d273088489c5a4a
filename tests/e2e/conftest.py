"""End-to-end fixtures: a kind cluster (or the one ``KUBECONFIG`` names) with stock Volcano (``make volcano``, the
pinned release) and cardquota deployed (``make deploy``: our CRD additions patched in, then the operator).

The suite runs only when asked (``make e2e`` sets ``CARDQUOTA_E2E=1``) and when a cluster can be had: either
``KUBECONFIG`` is set and reachable (the cluster must already have the image: ``make kind-up`` loads it), or
``docker`` and ``kind`` are usable, and then a throw-away cluster is created and always deleted afterwards.
Otherwise every test here is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.cluster import Kubectl, until

REPO = Path(__file__).resolve().parents[2]
IMAGE = "cardquota:dev"  # what manifests/overlays/dev deploys (imagePullPolicy Never)


def _works(command: list[str]) -> bool:
    if shutil.which(command[0]) is None:
        return False
    try:
        return subprocess.run(command, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def skip_reason() -> str | None:
    """Why the end-to-end tests cannot run here, or None when they can."""
    if not _works(["kubectl", "version", "--client"]):
        return "kubectl is not installed"
    if os.environ.get("KUBECONFIG"):
        if not _works(["kubectl", "cluster-info"]):
            return f"KUBECONFIG={os.environ['KUBECONFIG']} is set but its cluster is not reachable"
    elif not _works(["docker", "info"]):
        return "no usable Docker daemon (`docker info` failed) and no KUBECONFIG: cannot create a kind cluster"
    elif not _works(["kind", "version"]):
        return "kind is not installed (https://kind.sigs.k8s.io) and no KUBECONFIG is set"
    if os.environ.get("CARDQUOTA_E2E") != "1":
        return "end-to-end tests run with `make e2e` (CARDQUOTA_E2E=1): they deploy to a cluster"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = skip_reason()
    if reason is None:
        return
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.skip(reason=reason))


def _make(target: str, env: dict[str, str]) -> None:
    subprocess.run(["make", "--no-print-directory", target], cwd=REPO, env=env, check=True, timeout=1800)


@pytest.fixture(scope="session")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    env = dict(os.environ)
    cluster: str | None = None
    if not env.get("KUBECONFIG"):
        cluster = f"cardquota-e2e-{uuid.uuid4().hex[:6]}"
        env["KUBECONFIG"] = str(tmp_path_factory.mktemp("kind") / "kubeconfig")
        env.update(KIND_CLUSTER=cluster, IMAGE=IMAGE)
    try:
        if cluster is not None:
            _make("kind-up", env)  # creates the cluster, builds the image and loads it into the cluster
        kube = Kubectl(env)
        _make("volcano", env)  # stock Volcano at the pinned release, from its own manifest, unless installed
        _make("deploy", env)  # our additions patched into Volcano's CRDs, then cardquota
        # Ready replicas serve; the webhook configurations get their caBundle once a replica has started.
        until(lambda: _ca_bundle_set(kube), what="the webhook configurations' caBundle")
        yield kube
    finally:
        if cluster is not None:
            subprocess.run(["kind", "delete", "cluster", "--name", cluster], env=env, timeout=300)


def _ca_bundle_set(kube: Kubectl) -> bool | None:
    for kind, name in (("validatingwebhookconfiguration", "cardquota-validating"),
                       ("mutatingwebhookconfiguration", "cardquota-mutating")):
        webhooks = kube.get(kind, name).get("webhooks") or []
        if not webhooks or not all(hook.get("clientConfig", {}).get("caBundle") for hook in webhooks):
            return None
    return True
