"""End-to-end fixtures: cardquota deployed beside stock Volcano on one cluster the suite may change — a kind cluster
it creates itself, or the context ``CARDQUOTA_E2E_CONTEXT`` names (:mod:`e2e.guard` decides, from the kubeconfig
files alone, before any API call) — and everything it changes there put back at the end (:mod:`e2e.undo`).

The suite runs only when asked (``make e2e`` sets ``CARDQUOTA_E2E=1``). Without a named context it creates a
throw-away kind cluster, which needs ``docker`` and ``kind``; otherwise every test here is skipped with the reason.
A ``KUBECONFIG`` with no context named is refused (an error, not a skip): its current context is not ours.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml
from builders import gpu_labels
from e2e.cluster import (
    A100,
    Kubectl,
    cardquota_plugin,
    fake_gpus,
    gpu_node_name,
    reverse_spec_patch,
    until,
    wait_admitting,
)
from e2e.guard import (
    CONTEXT_VARIABLE,
    CreatedKind,
    Kubeconfig,
    Refused,
    Target,
    created_target,
    named_target,
    refusal,
    refuse_ambient,
)
from e2e.undo import UndoLog, restoring

REPO = Path(__file__).resolve().parents[2]
IMAGE = "cardquota:dev"  # what manifests/overlays/dev deploys (imagePullPolicy Never)
OVERLAY = REPO / "manifests" / "overlays" / "dev"
CRDS = ("queues.scheduling.volcano.sh", "podgroups.scheduling.volcano.sh", "jobs.batch.volcano.sh")
CARDQUOTA_OBJECTS = (("namespace", "cardquota-system"), ("validatingwebhookconfiguration", "cardquota-validating"),
                     ("mutatingwebhookconfiguration", "cardquota-mutating"))


def _works(command: list[str]) -> bool:
    if shutil.which(command[0]) is None:
        return False
    try:
        return subprocess.run(command, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def skip_reason(environ: Mapping[str, str] = os.environ) -> str | None:
    """Why the end-to-end tests cannot run here, or None when they can (local probes only: no API call)."""
    if not _works(["kubectl", "version", "--client"]):
        return "kubectl is not installed"
    if not environ.get(CONTEXT_VARIABLE) and not environ.get("KUBECONFIG"):
        if not _works(["docker", "info"]):
            return (f"no usable Docker daemon (`docker info` failed) to create a kind cluster, and no "
                    f"{CONTEXT_VARIABLE} naming a cluster to use instead")
        if not _works(["kind", "version"]):
            return f"kind is not installed (https://kind.sigs.k8s.io) and no {CONTEXT_VARIABLE} is set"
    if environ.get("CARDQUOTA_E2E") != "1":
        return "end-to-end tests run with `make e2e` (CARDQUOTA_E2E=1): they deploy to a cluster"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests marked e2e_last read what the whole session made happen (the API server's audit log): they run last.
    items.sort(key=lambda item: item.get_closest_marker("e2e_last") is not None)
    ours = [item for item in items if Path(str(item.fspath)).is_relative_to(Path(__file__).parent)]
    reason = skip_reason()
    if reason is None:
        refused = refusal(os.environ) if ours else None
        if refused is not None:  # once, as pytest's one-line "ERROR: …" (exit 4), before any test or API call
            raise pytest.UsageError(refused)
        return
    for item in ours:
        item.add_marker(pytest.mark.skip(reason=reason))


def _refuse(message: str) -> NoReturn:
    """End the session with ``message``, printed once without a traceback (``pytest.fail`` in a session fixture
    fails, and prints, every test using it); the undo log's fixtures are still torn down."""
    pytest.exit(message, returncode=pytest.ExitCode.TESTS_FAILED)


def _sayer(config: pytest.Config) -> Callable[[str], None]:
    """Print at once, past pytest's capture: what is about to change must be seen before it changes."""
    capture = config.pluginmanager.getplugin("capturemanager")
    terminal = config.pluginmanager.getplugin("terminalreporter")

    def say(line: str) -> None:
        with capture.global_and_fixture_disabled():
            if terminal is None:
                sys.stderr.write(f"[e2e] {line}\n")
            else:
                terminal.ensure_newline()
                terminal.write_line(f"[e2e] {line}")
    return say


def _run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, text=True, capture_output=True, timeout=1800, **kwargs)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def _make_variable(name: str) -> str:
    """A variable as the Makefile defines it (one source for VOLCANO_MANIFEST), read without running a target."""
    return _run(["make", "-s", "--no-print-directory", "--eval", f"e2e-print: ; @echo $({name})", "e2e-print"],
                cwd=REPO).stdout.strip()


@pytest.fixture(scope="session")
def say(request: pytest.FixtureRequest) -> Callable[[str], None]:
    return _sayer(request.config)


@pytest.fixture(scope="session")
def undo_log(say: Callable[[str], None]) -> Iterator[UndoLog]:
    """The session's changes, undone when the session ends however it ends."""
    with restoring(UndoLog(say)) as log:
        yield log


@pytest.fixture(scope="module")
def module_undo(say: Callable[[str], None]) -> Iterator[UndoLog]:
    """A test module's changes, undone when the module is done (before the next module changes the same node)."""
    with restoring(UndoLog(say)) as log:
        yield log


def _create_kind(folder: Path, log: UndoLog) -> CreatedKind:
    """A kind cluster under a name no kind cluster has, created into a kubeconfig file of our own; its deletion is
    recorded before it is created (a creation that fails half-way leaves a cluster)."""
    existing = set(_run(["kind", "get", "clusters"]).stdout.split())
    name = next(n for n in (f"cardquota-e2e-{uuid.uuid4().hex[:8]}" for _ in range(10)) if n not in existing)
    kubeconfig = folder / "kubeconfig"
    log.change(f"create the kind cluster {name}", lambda: _run(["kind", "delete", "cluster", "--name", name]),
               lambda: _run(["kind", "create", "cluster", "--name", name, "--kubeconfig", str(kubeconfig),
                             "--wait", "180s"]))
    written = yaml.safe_load(_run(["kind", "get", "kubeconfig", "--name", name]).stdout)
    # The server as kind itself reports it, not as read back from the file the target will be checked against.
    created = CreatedKind(name, str(kubeconfig), Kubeconfig.merge(("kind",), [written]).server(f"kind-{name}"))
    _run(["make", "--no-print-directory", "image", f"IMAGE={IMAGE}"], cwd=REPO)
    _run(["kind", "load", "docker-image", IMAGE, "--name", name])
    return created


@pytest.fixture(scope="session")
def target(undo_log: UndoLog, tmp_path_factory: pytest.TempPathFactory) -> Target:
    """The one cluster the suite may change, or the session ends with why not, before any API call (a named context
    missing, or an ambient ``KUBECONFIG``, was refused at collection already: :func:`e2e.guard.refusal`)."""
    try:
        named = named_target(os.environ)
        if named is not None:
            return named
        refuse_ambient(os.environ)
        return created_target(_create_kind(tmp_path_factory.mktemp("kind"), undo_log))
    except Refused as error:
        refused = str(error)
    _refuse(refused)  # (outside the except: no "During handling of the above exception")


def _plan(target: Target, volcano_installed: bool, node: str, manifest: str) -> list[str]:
    return [
        f"the end-to-end tests will change {target.describe()}:",
        "  Volcano: already installed, left as it is" if volcano_installed
        else f"  Volcano: installed from {manifest}, removed at the end",
        f"  cardquota's additions patched into {', '.join(CRDS)} (the reverse patch at the end)",
        f"  cardquota deployed from manifests/overlays/dev and dev-extender ({IMAGE}, fail-closed webhooks; deleted "
        "at the end)",
        "  volcano-system/volcano-scheduler-configmap replaced and the scheduler restarted (put back, restarted)",
        f"  node {node}: GPU product labels, nvidia.com/gpu and mGPU resources in its status (put back)",
        "  namespaces cardquota-e2e, cardquota-e2e-volcano, cardquota-e2e-preempt, queues e2e-* and PriorityClasses "
        "cardquota-e2e-low and -high (deleted)",
    ]


def _refuse_existing_cardquota(kubectl: Kubectl) -> None:
    present = [f"{kind} {name}" for kind, name in CARDQUOTA_OBJECTS if kubectl.find(kind, name) is not None]
    if present:
        _refuse(f"cardquota is already installed on {kubectl.target.describe()} ({', '.join(present)}): the "
                "end-to-end tests deploy their own and remove it afterwards; use a cluster without cardquota")


def _install_volcano(kubectl: Kubectl, log: UndoLog, manifest: str) -> None:
    log.change(f"install Volcano from {manifest}",
               lambda: kubectl.run("delete", "-f", manifest, "--ignore-not-found", "--wait", "--timeout=300s"),
               lambda: kubectl.run("apply", "--server-side", "-f", manifest))
    kubectl.run("-n", "volcano-system", "rollout", "status", "deployment/volcano-scheduler", "--timeout=300s")


def _crd_specs(kubectl: Kubectl) -> dict[str, Any]:
    return {name: kubectl.get("crd", name)["spec"] for name in CRDS}


def _install_crd_additions(kubectl: Kubectl, log: UndoLog) -> None:
    """``kubectl cardquota crd install`` on the target's context; recorded first: the reverse of the patch it made,
    computed from the CRDs saved before and read after (nothing else of the CRD is touched)."""
    before = _crd_specs(kubectl)
    reverse: dict[str, list[dict[str, Any]]] = {}

    def restore() -> None:
        for name, ops in reverse.items():
            if ops:
                kubectl.run("patch", "crd", name, "--type=json", "-p", json.dumps(ops))

    def apply() -> None:
        cardquota_plugin(kubectl, "crd", "install")
        after = _crd_specs(kubectl)
        for name in CRDS:
            reverse[name] = reverse_spec_patch(after[name], before[name])

    log.change(f"patch cardquota's additions into {', '.join(CRDS)}", restore, apply)


@pytest.fixture(scope="session")
def kubectl(target: Target, undo_log: UndoLog, say: Callable[[str], None]) -> Kubectl:
    """Stock Volcano (the Makefile's VOLCANO_MANIFEST, unless installed), cardquota's CRD additions, cardquota
    (overlays/dev) with its webhook configurations' caBundle set — each change recorded in the session's undo log."""
    kube = Kubectl(target)
    _refuse_existing_cardquota(kube)
    manifest = _make_variable("VOLCANO_MANIFEST")
    volcano_installed = kube.find("crd", "queues.scheduling.volcano.sh") is not None
    for line in _plan(target, volcano_installed, gpu_node_name(kube), manifest):
        say(line)
    if not volcano_installed:
        _install_volcano(kube, undo_log, manifest)
    _install_crd_additions(kube, undo_log)
    undo_log.change("deploy cardquota (manifests/overlays/dev)",
                    lambda: kube.run("delete", "-k", str(OVERLAY), "--ignore-not-found", "--wait", "--timeout=300s"),
                    lambda: kube.run("apply", "-k", str(OVERLAY)))
    kube.run("-n", "cardquota-system", "rollout", "status", "deployment/cardquota", "--timeout=180s")
    # Ready replicas serve; the webhook configurations get their caBundle once a replica has started.
    until(lambda: _ca_bundle_set(kube), what="the webhook configurations' caBundle")
    wait_admitting(kube)
    return kube


def _ca_bundle_set(kube: Kubectl) -> bool | None:
    for kind, name in (("validatingwebhookconfiguration", "cardquota-validating"),
                       ("mutatingwebhookconfiguration", "cardquota-mutating")):
        webhooks = kube.get(kind, name).get("webhooks") or []
        if not webhooks or not all(hook.get("clientConfig", {}).get("caBundle") for hook in webhooks):
            return None
    return True


@pytest.fixture(scope="module")
def gpu_node(kubectl: Kubectl, module_undo: UndoLog) -> str:
    """The suite's node (kind's worker, or make e2e-local's kwok node) made to look like an 8-card A100 node: product
    labels, and nvidia.com/gpu in its status (put back as they were when the module is done)."""
    name = gpu_node_name(kubectl)
    fake_gpus(kubectl, module_undo, name, gpu_labels(A100, count=8, memory=81920), {"nvidia.com/gpu": "8"})
    return name
