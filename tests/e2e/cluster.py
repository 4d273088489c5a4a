"""kubectl against the one cluster the suite may change (always with ``--context``), polling until the cluster has
converged, and the changes the fixtures make, each recorded in an :class:`~e2e.undo.UndoLog` with its inverse."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import jsonpatch
import yaml
from builders import pod
from e2e.guard import Target
from e2e.undo import UndoLog

from cardquota.core.publish import CARD_TYPES

T = TypeVar("T")
A100 = "NVIDIA-A100"
"""The card type of the suite's GPU node."""


@dataclass
class Kubectl:
    """kubectl against the target: ``KUBECONFIG`` is the target's and every call names its context (never the
    current one); every call has a timeout and returns what kubectl printed."""

    target: Target
    program: str = "kubectl"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": self.target.kubeconfig}

    def command(self, *args: str) -> list[str]:
        return [self.program, "--context", self.target.context, *args]

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self.command(*args), input=stdin, capture_output=True, text=True, env=self.env,
                                timeout=600)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def apply(self, manifest: dict[str, Any], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", stdin=json.dumps(manifest), check=check)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        where = ["-n", namespace] if namespace else []
        result: dict[str, Any] = json.loads(self.run("get", kind, name, *where, "-o", "json").stdout)
        return result

    def find(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None when there is none."""
        where = ["-n", namespace] if namespace else []
        result = self.run("get", kind, name, *where, "-o", "json", "--ignore-not-found")
        found: dict[str, Any] | None = json.loads(result.stdout) if result.stdout.strip() else None
        return found


def cardquota_plugin(kubectl: Kubectl, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl cardquota ARGS`` (the plugin of this virtualenv) on the target's context."""
    plugin = shutil.which("kubectl-cardquota", path=str(Path(sys.executable).parent)) or "kubectl-cardquota"
    result = subprocess.run([plugin, *args, "--context", kubectl.target.context], env=kubectl.env,
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise AssertionError(f"kubectl cardquota {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def remove_namespace_and_queues(kubectl: Kubectl, namespace: str, *queues: str) -> None:
    """A test module's namespace (waited for) and queues deleted, whether there or not: nothing left from an earlier
    run on the same cluster, nothing left behind."""
    kubectl.run("delete", "namespace", namespace, "--wait", "--ignore-not-found", "--timeout=120s")
    kubectl.run("delete", "queue", *queues, "--ignore-not-found")


def until(probe: Callable[[], T | None], *, timeout: float = 120, every: float = 2, what: str = "") -> T:
    """Poll until ``probe`` returns something other than None (a cluster converges; it does not answer at once)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or probe}")
        time.sleep(every)


def unplaced_card_pod(name: str, namespace: str, queue_name: str, *, gpus: int = 1,
                      priority_class: str | None = None) -> dict[str, Any]:
    """A card pod of Volcano's that no scheduler places (a node selector nothing matches): what happens to it is the
    gate's, and the test binds it (:func:`bind`) where a scheduler would."""
    manifest = pod(name, namespace=namespace, card=A100, queue=queue_name, gpus=gpus)
    manifest["spec"]["schedulerName"] = "volcano"
    manifest["spec"]["nodeSelector"] = {"cardquota.io/e2e-held": "true"}
    manifest["spec"]["containers"][0]["image"] = "registry.k8s.io/pause:3.10"
    manifest["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "10m"}  # room on a 2-CPU kind node
    if priority_class is not None:
        manifest["spec"]["priorityClassName"] = priority_class
    return manifest


def bind(kubectl: Kubectl, name: str, namespace: str, node: str) -> None:
    """Bind the pod to ``node`` as a scheduler does (a Binding is not held to the pod's node selector or affinity;
    the API server refuses it while the pod has scheduling gates)."""
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    kubectl.run("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", "-f", "-",
                stdin=json.dumps(binding))


NODE_VARIABLE = "CARDQUOTA_E2E_NODE"
"""Names the node the suite makes look like a GPU node (``make e2e-local`` names one of kwok's)."""


def wait_admitting(kubectl: Kubectl, timeout: float = 120) -> None:
    """Until a Queue with a card quota can be created (server-side dry run) through every webhook on its path —
    Volcano's and cardquota's: a CRD changed a moment ago (``crd install``) restarts its storage in the API server,
    and a webhook Deployment just rolled may have no ready endpoint yet; either refuses writes meanwhile."""
    quota = {"volcano.sh/card.quota": '{"NVIDIA-A100": 1}'}
    probe = json.dumps({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                        "metadata": {"name": "e2e-admitting", "annotations": quota}, "spec": {"weight": 1}})
    until(lambda: True if kubectl.run("create", "--dry-run=server", "-f", "-", stdin=probe,
                                      check=False).returncode == 0 else None,
          timeout=timeout, what="queue writes admitted by every webhook")


def gpu_node_name(kubectl: Kubectl, environ: Mapping[str, str] = os.environ) -> str:
    """The node the suite makes look like a GPU node: the one :data:`NODE_VARIABLE` names, else the last one listed
    (kind's only node)."""
    if environ.get(NODE_VARIABLE):
        return environ[NODE_VARIABLE]
    name: str = json.loads(kubectl.run("get", "nodes", "-o", "json").stdout)["items"][-1]["metadata"]["name"]
    return name


def node_restore_ops(node: Mapping[str, Any], saved: Mapping[str, Any], resources: list[str]) -> list[dict[str, Any]]:
    """The JSON patch of a node's status that puts ``resources`` in capacity and allocatable back as ``saved`` had
    them (removed when it had none), given the node as it is now."""
    ops: list[dict[str, Any]] = []
    for field in ("capacity", "allocatable"):
        now, before = node.get("status", {}).get(field) or {}, saved.get("status", {}).get(field) or {}
        for name in resources:
            path = f"/status/{field}/{name.replace('~', '~0').replace('/', '~1')}"
            if name in before:
                ops.append({"op": "add", "path": path, "value": before[name]})
            elif name in now:
                ops.append({"op": "remove", "path": path})
    return ops


def fake_gpus(kubectl: Kubectl, log: UndoLog, node: str, labels: Mapping[str, str],
              resources: Mapping[str, str]) -> None:
    """Label ``node`` and offer ``resources`` in its status; recorded first: the labels, the resources and
    cardquota's ``volcano.sh/card.types`` annotation put back as they were."""
    saved = kubectl.get("node", node)

    def restore() -> None:
        old_labels = saved["metadata"].get("labels") or {}
        kubectl.run("label", "node", node, "--overwrite",
                    *[f"{key}={old_labels[key]}" if key in old_labels else f"{key}-" for key in labels])
        ops = node_restore_ops(kubectl.get("node", node), saved, list(resources))
        if ops:
            kubectl.run("patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(ops))
        old = (saved["metadata"].get("annotations") or {}).get(CARD_TYPES)
        kubectl.run("annotate", "node", node, "--overwrite", f"{CARD_TYPES}={old}" if old is not None
                    else f"{CARD_TYPES}-")

    def apply() -> None:
        kubectl.run("label", "node", node, "--overwrite", *[f"{key}={value}" for key, value in labels.items()])
        patch = [{"op": "add", "path": f"/status/{field}/{name.replace('/', '~1')}", "value": value}
                 for field in ("capacity", "allocatable") for name, value in resources.items()]
        kubectl.run("patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(patch))

    log.change(f"label node {node} ({', '.join(labels)}) and offer {', '.join(resources)} in its status", restore,
               apply)


def reverse_spec_patch(after: Mapping[str, Any], before: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch of a whole object that turns the ``spec`` ``after`` back into ``before``."""
    ops: list[dict[str, Any]] = jsonpatch.make_patch(after, before).patch
    return [{**op, **{key: "/spec" + op[key] for key in ("path", "from") if key in op}} for op in ops]


def replace_scheduler_config(kubectl: Kubectl, log: UndoLog, manifest: str) -> None:
    """Apply ``manifest`` (Volcano's scheduler ConfigMap) and restart the scheduler; recorded first: the saved
    ConfigMap's data put back (or the ConfigMap deleted when there was none) and the scheduler restarted again."""
    namespace, name = "volcano-system", "volcano-scheduler-configmap"
    saved = kubectl.find("configmap", name, namespace)

    def restart() -> None:
        kubectl.run("-n", namespace, "rollout", "restart", "deployment/volcano-scheduler")
        kubectl.run("-n", namespace, "rollout", "status", "deployment/volcano-scheduler", "--timeout=300s")

    def restore() -> None:
        if saved is None:
            kubectl.run("-n", namespace, "delete", "configmap", name, "--ignore-not-found")
        else:
            kubectl.run("-n", namespace, "patch", "configmap", name, "--type=json", "-p", json.dumps(
                [{"op": "add", "path": "/data", "value": saved.get("data") or {}}]))
        restart()

    def apply() -> None:
        kubectl.run("apply", "-f", manifest)
        restart()

    log.change(f"replace {namespace}/{name} (saved) and restart the Volcano scheduler", restore, apply)


def _rendered(kubectl: Kubectl, overlay: str) -> dict[tuple[str, str, str], Any]:
    """The objects ``kubectl kustomize`` renders (client-side), by kind, namespace and name."""
    documents = [doc for doc in yaml.safe_load_all(kubectl.run("kustomize", overlay).stdout) if doc]
    return {(doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]): doc for doc in documents}


def apply_over(kubectl: Kubectl, log: UndoLog, overlay: str, base: str) -> None:
    """Apply ``overlay``, which builds on ``base`` (already applied); recorded first: the objects only ``overlay``
    has are deleted and, when it changes some of ``base``'s, ``base`` is applied again."""
    mine, theirs = _rendered(kubectl, overlay), _rendered(kubectl, base)
    extra = [document for key, document in mine.items() if key not in theirs]

    def restore() -> None:
        kubectl.run("delete", "-f", "-", "--ignore-not-found", "--wait", "--timeout=300s",
                    stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": extra}))
        if any(theirs[key] != document for key, document in mine.items() if key in theirs):
            kubectl.run("apply", "-k", base)

    added = ", ".join(f"{kind} {name}" for kind, _, name in sorted(mine.keys() - theirs.keys()))
    log.change(f"apply {overlay} ({added})", restore, lambda: kubectl.run("apply", "-k", overlay))
