"""A Kubernetes control plane of real components on this machine: etcd, kube-apiserver (RBAC, admission webhooks,
TLS, a service-account issuer), kube-controller-manager and kwok's simulated nodes, each a process started by PID
and stopped by PID.

It runs inside the private namespaces :mod:`run` makes (network, mount, PID), so its addresses and mounts are its
own: the API server listens on 127.0.0.1 and on the bridge the host kubelet's pods are attached to
(:data:`HOST_IP`), and the API server reaches webhooks at their pods' addresses (``--enable-aggregator-routing``:
Service → EndpointSlice → pod IP, as on a cluster without kube-proxy on the control-plane host).
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml
from e2e.local import pki

BRIDGE = "cq0"
HOST_IP = "10.250.0.1"
"""The host's address on the pods' bridge (the node's: where the host kubelet's probes come from)."""
API_IP = "10.250.0.2"
"""The API server's address for pods (KUBERNETES_SERVICE_HOST), apart from the node's as a Service's is: a pod
cut off from the API server (a route in its namespace) still answers probes."""
BRIDGE_MAC = "02:00:0a:fa:00:01"
"""The bridge's own, fixed hardware address (locally administered). A bridge left to choose takes the lowest of its
ports' addresses and changes it as pods' veths come and go; every pod's cached neighbour entry for the host then
points at an address no port answers, and traffic between the pods and the host (the API server's webhook calls,
the pods' API requests) stalls for seconds until the entry is probed again — a webhook call failing with "context
deadline exceeded" and both replicas' Lease renewals landing together at the end of the stall."""
POD_PREFIX = "10.250.0"
SERVICE_RANGE = "10.96.0.0/16"
API_PORT = 6443
ETCD_PORT = 2379
ISSUER = "https://kubernetes.default.svc.cluster.local"
CONTEXT = "cardquota-local"
AUDITED_GROUPS = ("system:serviceaccounts:cardquota-system",)
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "userGroups": list(AUDITED_GROUPS)}, {"level": "None"}]}
"""The API server's audit log holds every request of cardquota's service accounts (who, verb, resource, answer):
what the RBAC test reads (the requests of everyone else are left out)."""


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 25) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class Processes:
    """Processes started by this run, stopped newest first: SIGTERM, then SIGKILL after ``grace`` seconds."""

    logs: Path
    started: list[Process] = field(default_factory=list)

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Process:
        log = self.logs / f"{name}.log"
        out: IO[bytes] = log.open("ab")
        popen = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env={**os.environ, **(env or {})}, start_new_session=True)
        out.close()
        process = Process(name, popen, log)
        self.started.append(process)
        return process

    def check(self) -> None:
        """Fail with the log's tail of any process that has exited."""
        for process in self.started:
            code = process.popen.poll()
            if code is not None:
                raise RuntimeError(f"{process.name} exited with {code}; the end of {process.log}:\n{process.tail()}")

    def stop(self, grace: float = 10) -> None:
        for process in reversed(self.started):
            stop(process.popen, grace)
        self.started.clear()


def stop(popen: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM to the process group, SIGKILL after ``grace`` seconds."""
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGTERM)
    try:
        popen.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()


def sh(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout


def network() -> None:
    """Loopback up, and the pods' bridge with the host's address on it (in this run's own network namespace)."""
    sh("ip", "link", "set", "lo", "up")
    sh("ip", "link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge")
    sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", BRIDGE)
    sh("ip", "addr", "add", f"{API_IP}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")


@dataclass(frozen=True)
class Layout:
    """Where a run keeps its files: ``state`` (keys, etcd's data, pods' folders) and ``logs``."""

    state: Path
    logs: Path
    bin: Path

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def audit_log(self) -> Path:
        return self.state / "audit.log"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.state / "admin.kubeconfig"

    def kubeconfig(self, name: str) -> Path:
        return self.state / f"{name}.kubeconfig"

    def tool(self, name: str) -> str:
        return str(self.bin / name)


def write_kubeconfig(path: Path, server: str, ca: bytes, certificate: bytes, key: bytes) -> Path:
    def data(value: bytes) -> str:
        return base64.b64encode(value).decode()

    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": CONTEXT,
        "clusters": [{"name": CONTEXT, "cluster": {"server": server, "certificate-authority-data": data(ca)}}],
        "users": [{"name": CONTEXT, "user": {"client-certificate-data": data(certificate),
                                             "client-key-data": data(key)}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT}}]}))
    path.chmod(0o600)
    return path


@dataclass
class ControlPlane:
    """etcd, the API server, the controller manager and kwok, started in that order by :meth:`start`."""

    layout: Layout
    processes: Processes
    authority: pki.Authority | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{API_PORT}"

    def _credentials(self) -> None:
        folder = self.layout.pki
        folder.mkdir(parents=True, exist_ok=True)
        self.authority = ca = pki.Authority.create("cardquota-local-ca")
        (folder / "ca.crt").write_bytes(ca.pem)
        pki.write(folder, "apiserver", *ca.issue(
            "kube-apiserver", server=True, ips=("127.0.0.1", HOST_IP, API_IP, "10.96.0.1"),
            dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local")))
        pki.write(folder, "apiserver-kubelet-client", *ca.issue("kube-apiserver-kubelet-client",
                                                                organizations=("system:masters",)))
        pki.service_account_keys(folder)
        for name, common, groups in (("admin", "cardquota-local-admin", ("system:masters",)),
                                     ("controller-manager", "system:kube-controller-manager", ()),
                                     ("kwok", "cardquota-local-kwok", ("system:masters",)),
                                     ("kubelet", "system:node:cardquota-host", ("system:nodes",))):
            certificate, key = ca.issue(common, organizations=groups)
            pki.write(folder, name, certificate, key)
            write_kubeconfig(self.layout.kubeconfig(name), self.server, ca.pem, certificate, key)

    def _etcd(self) -> None:
        data = self.layout.state / "etcd"
        self.processes.start("etcd", [
            self.layout.tool("etcd"), "--data-dir", str(data), "--name", "local",
            "--listen-client-urls", f"http://127.0.0.1:{ETCD_PORT}",
            "--advertise-client-urls", f"http://127.0.0.1:{ETCD_PORT}",
            "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
            "--initial-cluster", "local=http://127.0.0.1:2380",
            "--unsafe-no-fsync",  # its data is on a tmpfs that dies with the run
            "--quota-backend-bytes", str(8 * 2**30), "--log-level", "warn"])

    def _apiserver(self) -> None:
        p = self.layout.pki
        policy = self.layout.state / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        self.processes.start("kube-apiserver", [
            self.layout.tool("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
            "--bind-address=0.0.0.0", f"--secure-port={API_PORT}", f"--advertise-address={API_IP}",
            f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}",
            f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
            f"--service-account-issuer={ISSUER}", f"--api-audiences={ISSUER}",
            f"--service-account-key-file={p / 'sa.pub'}", f"--service-account-signing-key-file={p / 'sa.key'}",
            "--authorization-mode=Node,RBAC", f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--enable-aggregator-routing=true", "--allow-privileged=true",
            "--enable-admission-plugins=NodeRestriction", "--profiling=false", "--v=1",
            f"--audit-policy-file={policy}", f"--audit-log-path={self.layout.audit_log}", "--audit-log-format=json",
            "--audit-log-mode=blocking"])
        self.wait_ready("/readyz", timeout=120)

    def wait_ready(self, path: str, timeout: float) -> None:
        context = ssl.create_default_context(cafile=str(self.layout.pki / "ca.crt"))
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self.processes.check()
            try:
                with urllib.request.urlopen(f"{self.server}{path}", context=context, timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError) as error:
                last = str(error)
            time.sleep(0.5)
        raise RuntimeError(f"the API server did not answer {path} within {timeout:.0f} s: {last}")

    def _controller_manager(self) -> None:
        p = self.layout.pki
        kubeconfig = self.layout.kubeconfig("controller-manager")
        self.processes.start("kube-controller-manager", [
            self.layout.tool("kube-controller-manager"), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--use-service-account-credentials=true", f"--root-ca-file={p / 'ca.crt'}",
            f"--service-account-private-key-file={p / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_RANGE}", "--leader-elect=false", "--bind-address=127.0.0.1",
            "--secure-port=10257", "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller",
            "--profiling=false", "--v=1"])

    def _kwok(self) -> None:
        self.processes.start("kwok", [
            self.layout.tool("kwok"), f"--kubeconfig={self.layout.kubeconfig('kwok')}",
            f"--config={self.layout.bin.parent / 'kwok' / 'stages.yaml'}",
            "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--cidr=10.244.0.1/16", "--node-ip=10.244.0.1", "--node-lease-duration-seconds=40",
            "--server-address=127.0.0.1:10247"])

    def start(self) -> None:
        self._credentials()
        self._etcd()
        self._apiserver()
        self._controller_manager()
        self._kwok()


def kwok_node(name: str, labels: Mapping[str, str], capacity: Mapping[str, str]) -> dict[str, Any]:
    """A Node kwok manages (its annotation): kwok keeps it Ready and runs the pods bound to it (no containers)."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", **capacity}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake",
                                                       "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok", **labels}},
            "spec": {},
            "status": {"capacity": resources, "allocatable": resources}}


@contextlib.contextmanager
def running(layout: Layout) -> Iterator[ControlPlane]:
    processes = Processes(layout.logs)
    plane = ControlPlane(layout, processes)
    try:
        plane.start()
        yield plane
    finally:
        processes.stop()
