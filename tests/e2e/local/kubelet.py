"""The host kubelet: runs the pods bound to node ``cardquota-host`` as processes on this machine, the way a kubelet
runs containers — so cardquota's and Volcano's own Deployments, as shipped, run against the local control plane.

For each pod it makes what a container runtime would:

* a **network namespace** with its own address on the run's bridge (so two replicas both listen on :9443, and the
  API server reaches a webhook at its pod's address through the Service's EndpointSlice);
* a **root filesystem**: an overlay over this machine's root (changes stay the pod's), the image's files put in
  place (:class:`Image`: the binaries ``make control-plane`` built stand for Volcano's images, the project's
  virtualenv for ``cardquota``'s), a private ``/tmp`` and ``/run``, each volume at its ``mountPath``
  (configMap, secret, projected — the service-account token from the TokenRequest API, bound to the pod —,
  downwardAPI, emptyDir), ``/etc/hosts`` (below), read-only when ``readOnlyRootFilesystem``;
* a **UTS namespace** with the pod's name as hostname, and the pod's user and group (``runAsUser``, else the image's);
* the container's environment (``value``, ``fieldRef``, ``configMapKeyRef``, ``secretKeyRef``, ``envFrom``) with
  ``KUBERNETES_SERVICE_HOST``/``PORT`` pointing at the API server, and ``$(VAR)`` expanded in command and args.

It then reports the pod as a kubelet does (``status``: phase, pod IP, container states, restart counts, the Ready
condition after the readiness probe passes), restarts what exits under ``restartPolicy: Always``, runs a ``sleep``
preStop hook, stops a deleted pod with SIGTERM, SIGKILL after its grace period, and removes it. ConfigMap and
Secret volumes are refreshed as the kubelet does (an atomic swap of ``..data``), so a process that watches its
configuration file sees the change.

**Stand-ins, not a kubelet:** one container per pod (no init containers, no sidecars); no liveness or startup
probes; no resource limits (no cgroups); no image pulls (only the images of :class:`Image`); Services resolve
through ``/etc/hosts`` to a ready endpoint's address (no cluster DNS and no kube-proxy, so a Service's port must equal
its target port to be reachable from a pod; the API server itself routes by EndpointSlice). It also binds pods of
the default scheduler whose images it can run to its node (there is no kube-scheduler): the node is tainted so that
Volcano never places anything there.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import re
import shlex
import shutil
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.local.controlplane import API_IP, API_PORT, BRIDGE, HOST_IP, POD_PREFIX, sh, stop
from e2e.local.rest import Api, ApiError

NODE = "cardquota-host"
TAINT = {"key": "cardquota.io/host-processes", "value": "true", "effect": "NoSchedule"}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Image:
    """What an image would bring: files at paths of its root, its entrypoint, user, working folder and PATH."""

    entrypoint: tuple[str, ...]
    files: Mapping[str, Path] = field(default_factory=dict)
    """Path in the image → the host file that stands for it (bound there read-only)."""
    user: int = 0
    workdir: str = "/"
    path: str = PATH
    folders: tuple[Path, ...] = ()
    """Host folders the image needs at the same path, bound read-only over the pod's own ``/tmp``, ``/run`` and
    volumes (a virtualenv and the checkout it was installed from may live under ``/tmp``, as a CI clone does)."""


def images(bin_dir: Path, volcano: Path, venv_bin: Path, checkout: Path) -> dict[str, Image]:
    """The images the host kubelet runs, by repository name (the last path element, no tag): Volcano's three
    (their Dockerfiles put the binary at the root, the webhook manager's also the admission-secret script and
    kubectl) and cardquota's (the Dockerfile: ``cardquota operator`` as uid 65532)."""
    return {
        "vc-scheduler": Image(("/vc-scheduler",), {"/vc-scheduler": bin_dir / "vc-scheduler"}),
        "vc-controller-manager": Image(("/vc-controller-manager",),
                                       {"/vc-controller-manager": bin_dir / "vc-controller-manager"}),
        # Its image is Alpine's, whose /bin/sh (BusyBox ash) runs the script's bash-isms ([[ ]], function):
        # bash stands for it, as Debian's /bin/sh (dash) does not.
        "vc-webhook-manager": Image(("/vc-webhook-manager",), {
            "/vc-webhook-manager": bin_dir / "vc-webhook-manager",
            "/gen-admission-secret.sh": volcano / "gen-admission-secret.sh",
            "/usr/local/bin/kubectl": bin_dir / "kubectl",
            "/bin/sh": Path("/bin/bash").resolve()}),
        "cardquota": Image(("cardquota", "operator"), user=65532, workdir="/src", path=f"{venv_bin}:{PATH}",
                           folders=(checkout, venv_bin.parent)),
    }


def repository(reference: str) -> str:
    """``docker.io/volcanosh/vc-scheduler:v1.14.0`` → ``vc-scheduler``; ``cardquota:dev`` → ``cardquota``."""
    name = reference.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion in command and args (``$$`` is a literal ``$``; unknown names stay)."""
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))
    return _REFERENCE.sub(one, text)


def field_value(pod: Mapping[str, Any], path: str, ip: str) -> str:
    """A downward-API ``fieldRef`` of the pod."""
    meta = pod["metadata"]
    label = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if label:
        return str((meta.get(label.group(1)) or {}).get(label.group(2), ""))
    values = {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"], "metadata.uid": meta["uid"],
              "spec.nodeName": pod["spec"].get("nodeName", ""),
              "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
              "status.podIP": ip, "status.hostIP": HOST_IP, "status.podIPs": ip, "status.hostIPs": HOST_IP}
    if path not in values:
        raise PodError(f"fieldRef {path} is not supported by the host kubelet")
    return str(values[path])


class PodError(Exception):
    """The pod cannot run here; the message goes into its status."""


class NotYet(Exception):
    """The pod cannot start yet (a Secret or ConfigMap it mounts is missing): tried again, as the kubelet does."""


@dataclass
class Volume:
    """A volume's folder on the host, refreshed when its content changes (configMap, secret, projected)."""

    folder: Path
    read: Callable[[], dict[str, tuple[bytes, int]]] | None = None
    """Current content (path → (bytes, mode)); None for a folder written once (emptyDir)."""
    tmpfs: bool = False
    written: dict[str, tuple[bytes, int]] | None = None

    def sync(self) -> None:
        """Write the content when it changed, as the kubelet's atomic writer does: a new ``..<time>`` folder, the
        ``..data`` link swapped to it in one rename, each top-level name a link through ``..data``."""
        if self.read is None:
            return
        content = self.read()
        if content == self.written:
            return
        stamp = self.folder / f"..{time.time_ns()}"
        for path, (data, mode) in content.items():
            target = stamp / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(mode)
        stamp.mkdir(parents=True, exist_ok=True)
        stamp.chmod(0o755)
        link = self.folder / "..data_tmp"
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        link.symlink_to(stamp.name)
        old = (self.folder / "..data").resolve() if (self.folder / "..data").is_symlink() else None
        os.replace(link, self.folder / "..data")
        for top in {path.split("/", 1)[0] for path in content}:
            entry = self.folder / top
            if not entry.is_symlink():
                entry.symlink_to(f"..data/{top}")
        for top in {path.split("/", 1)[0] for path in self.written or {}} - {p.split("/", 1)[0] for p in content}:
            with contextlib.suppress(FileNotFoundError):
                (self.folder / top).unlink()
        if old is not None and old.exists():
            shutil.rmtree(old, ignore_errors=True)
        self.written = content


@dataclass
class HostPod:
    uid: str
    namespace: str
    name: str
    ip: str
    slot: int
    folder: Path
    log: Path
    volumes: list[Volume]
    launch: list[str]
    restart_policy: str
    probe: Mapping[str, Any] | None
    container: str
    image: str
    grace: float
    pre_stop: float
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    ready: bool = False
    started_at: str = ""
    terminated: tuple[int, str] | None = None
    stopping: bool = False
    """Being stopped (the pod deleted): left to the thread stopping it."""
    finished: bool = False
    """Its container ended for good (Succeeded or Failed, reported): nothing runs, it waits to be deleted."""
    next_probe: float = 0.0
    restart_at: float = 0.0
    reported: str = ""

    @property
    def netns(self) -> str:
        return f"cqp{self.slot}"


class HostKubelet:
    """The node ``cardquota-host`` and the pods on it (see the module's docstring). Runs in a thread of the run."""

    def __init__(self, api: Api, state: Path, logs: Path, catalogue: Mapping[str, Image]) -> None:
        self.api = api
        self.state = state / "pods"
        self.logs = logs / "pods"
        self.catalogue = catalogue
        self.pods: dict[str, HostPod] = {}
        self.slots: set[int] = set()
        self.hosts_entries = ""
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.errors: list[str] = []
        self.tokens: dict[tuple[str, str, str], bytes] = {}
        self._last = {"lease": 0.0, "status": 0.0, "volumes": 0.0, "hosts": 0.0}

    # -- the node --------------------------------------------------------------------------------------------------

    def register(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        if not os.path.ismount("/run/netns"):  # the pods' network namespaces: this run's own (a private mount)
            os.makedirs("/run/netns", exist_ok=True)
            sh("mount", "-t", "tmpfs", "netns", "/run/netns")
        resources = {"cpu": "16", "memory": "64Gi", "pods": "110"}
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux",
                                                      "kubernetes.io/arch": "amd64",
                                                      "node-role.kubernetes.io/control-plane": ""}},
                "spec": {"taints": [TAINT]}}
        self.api.create("/api/v1/nodes", node)
        self.api.patch(f"/api/v1/nodes/{NODE}/status", {"status": {
            "capacity": resources, "allocatable": resources, "addresses": [{"type": "InternalIP", "address": HOST_IP},
                                                                           {"type": "Hostname", "address": NODE}],
            "nodeInfo": {"kubeletVersion": "host-kubelet", "operatingSystem": "linux", "architecture": "amd64",
                         "containerRuntimeVersion": "host://processes", "kubeProxyVersion": "", "osImage": "",
                         "kernelVersion": os.uname().release, "machineID": "", "systemUUID": "", "bootID": ""},
            "conditions": self._node_conditions()}})
        self._renew_lease()

    def _node_conditions(self) -> list[dict[str, str]]:
        stamp = now()
        return [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "host kubelet is ready",
                 "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]

    def _renew_lease(self) -> None:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": NODE, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40,
                         "renewTime": datetime.datetime.now(datetime.UTC).strftime(
                             "%Y-%m-%dT%H:%M:%S.%fZ")}}
        leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        try:
            self.api.patch(f"{leases}/{NODE}", {"spec": body["spec"]})
        except ApiError as error:
            if error.status != 404:
                raise
            self.api.create(leases, body)

    # -- the loop --------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="host-kubelet", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.step()
            except Exception as error:  # a loop of the run's own: say why and go on (the API may be restarting)
                self._say(f"{type(error).__name__}: {error}")
            self.stopping.wait(0.5)

    def _say(self, message: str) -> None:
        """Keep (and print once) what went wrong: the run prints the last of them when it fails."""
        if message not in self.errors:
            self.errors.append(message)
            print(f"[host-kubelet] {message}", flush=True)
        del self.errors[:-50]

    def _due(self, what: str, every: float) -> bool:
        if time.monotonic() - self._last[what] < every:
            return False
        self._last[what] = time.monotonic()
        return True

    def step(self) -> None:
        if self._due("lease", 10):
            self._renew_lease()
        if self._due("status", 60):
            self.api.patch(f"/api/v1/nodes/{NODE}/status", {"status": {"conditions": self._node_conditions()}})
        self._bind_pending()
        pods = {pod["metadata"]["uid"]: pod
                for pod in self.api.get("/api/v1/pods", fieldSelector=f"spec.nodeName={NODE}")["items"]}
        if self._due("hosts", 1):
            self._write_hosts()
        for uid, pod in pods.items():
            self._sync(uid, pod)
        for uid in list(self.pods):
            if uid not in pods and not self.pods[uid].stopping:
                self._terminate(self.pods[uid], delete=False)  # gone without us (force-deleted): stop what runs
        if self._due("volumes", 5):
            for host_pod in list(self.pods.values()):
                for volume in host_pod.volumes:
                    with contextlib.suppress(ApiError, PodError, NotYet):
                        volume.sync()

    def _bind_pending(self) -> None:
        pending = self.api.get("/api/v1/pods", fieldSelector="spec.nodeName=,spec.schedulerName=default-scheduler")
        for pod in pending["items"]:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or not all(repository(c["image"]) in self.catalogue
                                                        for c in pod["spec"]["containers"]):
                continue
            with contextlib.suppress(ApiError):
                self.api.create(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding", {
                    "apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"], "uid": meta["uid"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}})

    def _write_hosts(self) -> None:
        """``/etc/hosts`` of every pod: the pod itself, and each Service's name at a ready endpoint's address."""
        slices = self.api.get("/apis/discovery.k8s.io/v1/endpointslices")["items"]
        lines = []
        for entry in slices:
            service = (entry["metadata"].get("labels") or {}).get("kubernetes.io/service-name")
            ready = [e["addresses"][0] for e in entry.get("endpoints") or []
                     if (e.get("conditions") or {}).get("ready", True) and e.get("addresses")]
            if service and ready:
                namespace = entry["metadata"]["namespace"]
                lines.append(f"{ready[0]}\t{service}.{namespace}.svc {service}.{namespace}.svc.cluster.local")
        self.hosts_entries = "\n".join(sorted(set(lines)))
        for host_pod in self.pods.values():
            self._hosts_file(host_pod)

    def _hosts_file(self, host_pod: HostPod) -> None:
        text = f"127.0.0.1\tlocalhost\n::1\tlocalhost\n{host_pod.ip}\t{host_pod.name}\n{self.hosts_entries}\n"
        path = host_pod.folder / "hosts"
        if not path.exists() or path.read_text() != text:
            with path.open("r+" if path.exists() else "w") as out:  # in place: the pod's bind mount holds the inode
                out.seek(0)
                out.write(text)
                out.truncate()

    # -- one pod ---------------------------------------------------------------------------------------------------

    def _sync(self, uid: str, pod: dict[str, Any]) -> None:
        host_pod = self.pods.get(uid)
        if pod["metadata"].get("deletionTimestamp"):
            if host_pod is None or host_pod.finished:
                self._delete(pod["metadata"]["namespace"], pod["metadata"]["name"], uid)
                self._forget(host_pod)
            elif not host_pod.stopping:
                self._terminate(host_pod, delete=True)
            return
        if host_pod is None:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            try:
                host_pod = self._create(pod)
            except NotYet:
                return
            except (PodError, ApiError, RuntimeError) as error:
                self._report_failed(pod, str(error))
                return
            self.pods[uid] = host_pod
            self._launch(host_pod)
        if host_pod.stopping or host_pod.finished:
            return
        self._watch_process(host_pod)
        self._probe(host_pod)
        self._report(host_pod)

    def _allocate(self) -> int:
        slot = next(n for n in range(10, 250) if n not in self.slots)
        self.slots.add(slot)
        return slot

    def _create(self, pod: dict[str, Any]) -> HostPod:
        meta, spec = pod["metadata"], pod["spec"]
        if len(spec["containers"]) != 1 or spec.get("initContainers"):
            raise PodError("the host kubelet runs pods of one container and no init containers")
        container = spec["containers"][0]
        image = self.catalogue.get(repository(container["image"]))
        if image is None:
            raise PodError(f"the host kubelet has no image {container['image']}")
        slot = self._allocate()
        folder = self.state / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        try:
            return self._prepare(pod, container, image, slot, folder)
        except BaseException:
            self.slots.discard(slot)
            with contextlib.suppress(RuntimeError):
                sh("ip", "netns", "delete", f"cqp{slot}")
            shutil.rmtree(folder, ignore_errors=True)
            raise

    def _prepare(self, pod: dict[str, Any], container: Mapping[str, Any], image: Image, slot: int,
                 folder: Path) -> HostPod:
        meta, spec = pod["metadata"], pod["spec"]
        ip = f"{POD_PREFIX}.{slot}"
        folder.mkdir(parents=True)
        log = self.logs / f"{meta['namespace']}_{meta['name']}.log"
        volumes = {v["name"]: self._volume(pod, v, folder / "volumes" / v["name"], ip)
                   for v in spec.get("volumes") or []}
        for volume in volumes.values():
            volume.sync()
        env = self._environment(pod, container, ip, image)
        command = [expand(part, env) for part in (container.get("command") or list(image.entrypoint))]
        args = [expand(part, env) for part in container.get("args") or []]
        security = {**(spec.get("securityContext") or {}), **(container.get("securityContext") or {})}
        user = int(security.get("runAsUser", image.user))
        group = int(security.get("runAsGroup", user if "runAsUser" in security else image.user))
        if security.get("runAsNonRoot") and user == 0:
            raise PodError("container has runAsNonRoot and image will run as root")
        host_pod = HostPod(
            uid=meta["uid"], namespace=meta["namespace"], name=meta["name"], ip=ip, slot=slot, folder=folder, log=log,
            volumes=list(volumes.values()), launch=[], restart_policy=spec.get("restartPolicy", "Always"),
            probe=container.get("readinessProbe"), container=container["name"], image=container["image"],
            grace=float(spec.get("terminationGracePeriodSeconds", 30)),
            pre_stop=float((((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {})
                           .get("seconds", 0)))
        self._hosts_file(host_pod)
        self._sandbox(host_pod)
        script = self._script(host_pod, image, volumes, container, env, [*command, *args], user, group,
                              bool(security.get("readOnlyRootFilesystem")))
        (folder / "start.sh").write_text(script)
        host_pod.launch = ["nsenter", f"--net=/run/netns/{host_pod.netns}", "--", "unshare", "--mount", "--uts",
                           "--propagation", "private", "--", "/bin/sh", str(folder / "start.sh")]
        return host_pod

    def _sandbox(self, host_pod: HostPod) -> None:
        """The pod's network namespace, a veth pair to the bridge, its address and the route to the host."""
        ns, host_end = host_pod.netns, f"cqh{host_pod.slot}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", host_end, "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", f"{host_pod.ip}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", HOST_IP)

    def _script(self, host_pod: HostPod, image: Image, volumes: Mapping[str, Volume], container: Mapping[str, Any],
                env: Mapping[str, str], argv: list[str], user: int, group: int, read_only: bool) -> str:
        f = host_pod.folder
        root = f / "root"
        for name in ("up", "work", "root"):
            (f / name).mkdir(exist_ok=True)
        q = shlex.quote
        lines = ["set -eu", f"hostname {q(host_pod.name)}",
                 f"mount -t overlay overlay -o lowerdir=/,upperdir={q(str(f / 'up'))},workdir={q(str(f / 'work'))} "
                 f"{q(str(root))}"]
        lines += [f"mount --rbind /{name} {q(str(root / name))}" for name in ("proc", "sys", "dev")]
        lines += [f"mount -t tmpfs -o mode=1777 tmp {q(str(root / 'tmp'))}",
                  f"mount -t tmpfs -o mode=755 run {q(str(root / 'run'))}",
                  f"chmod o+x {q(str(root / 'root'))}"]  # the virtualenv's interpreter lives under /root

        def bind(source: Path, target: str, *, read_only: bool = False, is_file: bool = False) -> None:
            resolved = os.path.realpath(target)  # a path of the host root: its links are the image's links
            where = q(str(root) + resolved)
            lines.append(f"mkdir -p {q(str(root) + os.path.dirname(resolved))}")
            lines.append(f"[ -e {where} ] || touch {where}" if is_file else f"mkdir -p {where}")
            lines.append(f"mount --bind {q(str(source))} {where}")
            if read_only:
                lines.append(f"mount -o remount,bind,ro {where}")

        for target, source in image.files.items():
            bind(source, target, read_only=True, is_file=True)
        bind(f / "hosts", "/etc/hosts", is_file=True)
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None:
                raise PodError(f"volumeMount {mount['name']} names no volume")
            source = volume.folder / mount["subPath"] if mount.get("subPath") else volume.folder
            if volume.tmpfs:
                lines.append(f"mount -t tmpfs -o mode=1777 {q(mount['name'])} {q(str(volume.folder))}")
            bind(source, mount["mountPath"], read_only=bool(mount.get("readOnly")), is_file=source.is_file())
        for folder in image.folders:  # after the volumes: an emptyDir at /tmp must not hide a checkout under /tmp
            bind(folder, str(folder), read_only=True)
        workdir = container.get("workingDir") or image.workdir
        lines.append(f"mkdir -p {q(str(root) + workdir)}")  # as a runtime does for a working folder not in the image
        if read_only:
            lines.append(f"mount -o remount,bind,ro {q(str(root))}")
        drop = [] if user == 0 else ["setpriv", f"--reuid={user}", f"--regid={group}", "--clear-groups", "--"]
        variables = [f"{key}={value}" for key, value in env.items()]
        lines.append(" ".join(q(part) for part in ["exec", "chroot", str(root), *drop, "env", "-i",
                                                      f"--chdir={workdir}",
                                                      *variables, *argv]))
        return "\n".join(lines) + "\n"

    def _environment(self, pod: Mapping[str, Any], container: Mapping[str, Any], ip: str,
                     image: Image) -> dict[str, str]:
        namespace = pod["metadata"]["namespace"]
        env = {"PATH": image.path, "HOSTNAME": pod["metadata"]["name"], "HOME": "/",
               "KUBERNETES_SERVICE_HOST": API_IP, "KUBERNETES_SERVICE_PORT": str(API_PORT),
               "KUBERNETES_SERVICE_PORT_HTTPS": str(API_PORT),
               "KUBERNETES_PORT": f"tcp://{API_IP}:{API_PORT}"}
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                data = self._data("configmaps", namespace, source["configMapRef"]["name"], source["configMapRef"])
                env.update({prefix + k: v for k, v in data.items()})
            elif "secretRef" in source:
                data = self._data("secrets", namespace, source["secretRef"]["name"], source["secretRef"])
                env.update({prefix + k: base64.b64decode(v).decode() for k, v in data.items()})
        for variable in container.get("env") or []:
            name, source = variable["name"], variable.get("valueFrom")
            if source is None:
                env[name] = expand(variable.get("value", ""), env)
            elif "fieldRef" in source:
                env[name] = field_value(pod, source["fieldRef"]["fieldPath"], ip)
            elif "configMapKeyRef" in source:
                ref = source["configMapKeyRef"]
                env[name] = self._data("configmaps", namespace, ref["name"], ref).get(ref["key"], "")
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = self._data("secrets", namespace, ref["name"], ref)
                env[name] = base64.b64decode(secret.get(ref["key"], "")).decode()
            else:
                raise PodError(f"env {name}: only value, fieldRef, configMapKeyRef and secretKeyRef are supported")
        return env

    def _data(self, kind: str, namespace: str, name: str, ref: Mapping[str, Any]) -> dict[str, str]:
        """The ``data`` of a ConfigMap or Secret (``kind``: configmaps, secrets); an optional one missing is empty."""
        try:
            found: dict[str, str] = self.api.get(f"/api/v1/namespaces/{namespace}/{kind}/{name}").get("data") or {}
            return found
        except ApiError as error:
            if error.status == 404 and ref.get("optional"):
                return {}
            raise NotYet(f"{kind} {namespace}/{name}: {error}") from None

    def _volume(self, pod: Mapping[str, Any], volume: Mapping[str, Any], folder: Path, ip: str) -> Volume:
        folder.mkdir(parents=True)
        folder.chmod(0o777)
        namespace = pod["metadata"]["namespace"]
        if "emptyDir" in volume:
            return Volume(folder, tmpfs=(volume["emptyDir"] or {}).get("medium") == "Memory")
        if "configMap" in volume or "secret" in volume:
            mode = (volume.get("configMap") or volume.get("secret") or {}).get("defaultMode", 0o644)
            return Volume(folder, lambda: self._projected(pod, [volume], ip, mode))
        if "projected" in volume:
            sources = volume["projected"]["sources"]
            mode = volume["projected"].get("defaultMode", 0o644)
            return Volume(folder, lambda: self._projected(pod, sources, ip, mode))
        if "downwardAPI" in volume:
            return Volume(folder, lambda: self._projected(pod, [volume], ip, volume["downwardAPI"].get(
                "defaultMode", 0o644)))
        raise PodError(f"volume {volume['name']} of {namespace}/{pod['metadata']['name']}: only emptyDir, "
                       "configMap, secret, projected and downwardAPI volumes are supported")

    def _projected(self, pod: Mapping[str, Any], sources: Iterable[Mapping[str, Any]], ip: str,
                   mode: int) -> dict[str, tuple[bytes, int]]:
        namespace, files = pod["metadata"]["namespace"], {}
        for source in sources:
            if "configMap" in source or "secret" in source:
                ref = source.get("configMap") or source["secret"]
                is_secret = "secret" in source
                name = ref.get("name") or ref.get("secretName")
                data = self._data("secrets" if is_secret else "configmaps", namespace, name, ref)
                decoded = {k: base64.b64decode(v) if is_secret else v.encode() for k, v in data.items()}
                items = ref.get("items") or [{"key": k, "path": k} for k in decoded]
                for item in items:
                    if item["key"] in decoded:
                        files[item["path"]] = (decoded[item["key"]], item.get("mode", mode))
            elif "downwardAPI" in source:
                for item in source["downwardAPI"].get("items") or []:
                    value = field_value(pod, item["fieldRef"]["fieldPath"], ip) if "fieldRef" in item else ""
                    files[item["path"]] = (value.encode(), item.get("mode", mode))
            elif "serviceAccountToken" in source:
                files[source["serviceAccountToken"]["path"]] = (self._token(pod, source["serviceAccountToken"]),
                                                                mode)
            else:
                raise PodError(f"projected source {sorted(source)} is not supported by the host kubelet")
        return files

    def _token(self, pod: Mapping[str, Any], request: Mapping[str, Any]) -> bytes:
        """A token bound to the pod, from the TokenRequest API (what the kubelet writes into the projected volume);
        kept while the pod lives (a run is shorter than its lifetime)."""
        key = (pod["metadata"]["uid"], request.get("audience", ""), request["path"])
        if key not in self.tokens:
            meta = pod["metadata"]
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"expirationSeconds": int(request.get("expirationSeconds", 3607)),
                             "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                "uid": meta["uid"]},
                             **({"audiences": [request["audience"]]} if request.get("audience") else {})}}
            account = pod["spec"].get("serviceAccountName", "default")
            answer = self.api.create(f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token", body)
            self.tokens[key] = answer["status"]["token"].encode()
        return self.tokens[key]

    def _launch(self, host_pod: HostPod) -> None:
        out = host_pod.log.open("ab")
        try:
            host_pod.process = subprocess.Popen(host_pod.launch, stdout=out, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            out.close()
        host_pod.started_at = now()
        host_pod.terminated = None
        host_pod.ready = host_pod.probe is None
        host_pod.next_probe = time.monotonic() + float((host_pod.probe or {}).get("initialDelaySeconds", 0))

    def _watch_process(self, host_pod: HostPod) -> None:
        """Notice an exit; restart (after a back-off doubling from 1 s to 30 s) when the restart policy says so."""
        process = host_pod.process
        if process is None:
            if host_pod.restart_at and time.monotonic() >= host_pod.restart_at:
                host_pod.restart_at = 0.0
                self._launch(host_pod)
            return
        if process.poll() is None:
            return
        code = process.returncode
        host_pod.process = None
        host_pod.ready = False
        host_pod.terminated = (code, now())
        if host_pod.restart_policy == "Always" or (host_pod.restart_policy == "OnFailure" and code != 0):
            host_pod.restarts += 1
            host_pod.restart_at = time.monotonic() + min(2.0 ** (host_pod.restarts - 1), 30.0)

    def _probe(self, host_pod: HostPod) -> None:
        probe = host_pod.probe
        if probe is None or host_pod.process is None or time.monotonic() < host_pod.next_probe:
            return
        host_pod.next_probe = time.monotonic() + min(float(probe.get("periodSeconds", 10)), 2.0)
        get = probe.get("httpGet")
        if get is None:
            host_pod.ready = True  # exec and tcpSocket probes: taken as passing
            return
        port = get["port"]
        if isinstance(port, str):
            port = self._named_port(host_pod, port)
        url = f"{get.get('scheme', 'HTTP').lower()}://{host_pod.ip}:{port}{get.get('path', '/')}"
        try:
            context = ssl._create_unverified_context()  # the kubelet does not verify probe certificates either
            with urllib.request.urlopen(url, timeout=float(probe.get("timeoutSeconds", 1)), context=context) as answer:
                host_pod.ready = 200 <= answer.status < 400
        except OSError:
            host_pod.ready = False

    def _named_port(self, host_pod: HostPod, name: str) -> int:
        pod = self.api.get(f"/api/v1/namespaces/{host_pod.namespace}/pods/{host_pod.name}")
        for port in pod["spec"]["containers"][0].get("ports") or []:
            if port.get("name") == name:
                return int(port["containerPort"])
        raise PodError(f"no container port named {name}")

    def _report(self, host_pod: HostPod) -> None:
        running = host_pod.process is not None
        phase = "Running"
        if not running and host_pod.terminated is not None and not host_pod.restart_at:
            phase = "Succeeded" if host_pod.terminated[0] == 0 else "Failed"
        if running:
            state: dict[str, Any] = {"running": {"startedAt": host_pod.started_at}}
        else:
            code, finished = host_pod.terminated or (0, now())
            state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                    "startedAt": host_pod.started_at, "finishedAt": finished}}
        ready = "True" if host_pod.ready and running else "False"
        status = {
            "phase": phase, "hostIP": HOST_IP, "hostIPs": [{"ip": HOST_IP}], "podIP": host_pod.ip,
            "podIPs": [{"ip": host_pod.ip}], "startTime": host_pod.started_at,
            "conditions": [{"type": t, "status": s, "lastTransitionTime": None, "lastProbeTime": None}
                           for t, s in (("PodScheduled", "True"), ("Initialized", "True"), ("ContainersReady", ready),
                                        ("Ready", ready))],
            "containerStatuses": [{"name": host_pod.container, "image": host_pod.image, "imageID": "",
                                   "containerID": f"host://{host_pod.uid}", "ready": ready == "True",
                                   "started": running, "restartCount": host_pod.restarts, "state": state}]}
        text = json.dumps(status, sort_keys=True)
        if text == host_pod.reported:
            return
        stamp = now()
        for condition in status["conditions"]:
            condition["lastTransitionTime"] = stamp
        self.api.patch(f"/api/v1/namespaces/{host_pod.namespace}/pods/{host_pod.name}/status", {"status": status})
        host_pod.reported = text
        if phase in ("Succeeded", "Failed"):
            self._cleanup(host_pod)
            host_pod.finished = True

    def _report_failed(self, pod: Mapping[str, Any], message: str) -> None:
        meta = pod["metadata"]
        self._say(f"{meta['namespace']}/{meta['name']}: {message}")
        with contextlib.suppress(ApiError):
            self.api.patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", {"status": {
                "phase": "Failed", "reason": "HostKubelet", "message": message}})

    def _terminate(self, host_pod: HostPod, *, delete: bool) -> None:
        host_pod.stopping = True

        def run() -> None:
            if host_pod.process is not None and host_pod.pre_stop:
                time.sleep(host_pod.pre_stop)
            if host_pod.process is not None:
                stop(host_pod.process, max(host_pod.grace - host_pod.pre_stop, 1))
            self._cleanup(host_pod)
            if delete:
                self._delete(host_pod.namespace, host_pod.name, host_pod.uid)
            self._forget(host_pod)

        threading.Thread(target=run, name=f"stop-{host_pod.name}", daemon=True).start()

    def _forget(self, host_pod: HostPod | None) -> None:
        if host_pod is not None:
            self.pods.pop(host_pod.uid, None)
            self.slots.discard(host_pod.slot)

    def _cleanup(self, host_pod: HostPod) -> None:
        with contextlib.suppress(RuntimeError):
            sh("ip", "netns", "delete", host_pod.netns)

    def _delete(self, namespace: str, name: str, uid: str) -> None:
        with contextlib.suppress(ApiError):
            self.api.delete(f"/api/v1/namespaces/{namespace}/pods/{name}",
                            {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})

    def stop(self) -> None:
        """Stop the loop and every pod's process (the run is ending)."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(10)
        for host_pod in list(self.pods.values()):
            if host_pod.process is not None:
                stop(host_pod.process, 5)
            self._cleanup(host_pod)
