"""Pods that start: every container of every Deployment an overlay renders, started the way the kubelet would start
it — its command and args (the image's ENTRYPOINT when it gives no command), its env, the service-link variables
Kubernetes injects for the Services of its namespace, and an API server that cannot be reached — either ends in one
line blaming the cluster (exit 2) or keeps serving and answers its liveness probe. Never a traceback, never a
complaint about an environment variable.

Each overlay runs twice: with the links the pod really gets (it sets ``enableServiceLinks: false``, so only the
``kubernetes`` Service's), and with every Service's links forced on, in case a fork or a future manifest drops the
setting: no name a Service can give is one cardquota reads.

The process runs the venv's ``cardquota`` console script outside any cluster: there is no service-account token, so
the kubeconfig (pointing at 127.0.0.1:1, where nothing listens) is what the Kubernetes client finds; each volume it
mounts is a local folder (a ConfigMap's keys as files) and paths under a mount point are rewritten to it; every port
the container declares is moved to a free local port so parallel runs cannot collide.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubeconfigs import write_kubeconfig

from cardquota.operator.settings import is_service_link_name

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = sorted(path.name for path in (REPO / "manifests" / "overlays").iterdir() if path.is_dir())
KUBECTL = shutil.which("kubectl")
CARDQUOTA = Path(sys.executable).parent / "cardquota"
UNREACHABLE_API = ("127.0.0.1", 1)
"""Where KUBERNETES_SERVICE_HOST/PORT and the kubeconfig point: nothing listens on port 1."""
EXIT_SECONDS = 60.0
"""How long a container may take to give up on the API server, or to answer its liveness probe."""
SERVE_SECONDS = 2.0
"""How long a serving container must keep running after it has answered."""

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (kubectl kustomize renders the "
                                "overlays whose pods this starts)")


def render(overlay: str) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    result = subprocess.run([KUBECTL, "kustomize", str(REPO / "manifests" / "overlays" / overlay)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def image_entrypoint() -> list[str]:
    """The Dockerfile's ENTRYPOINT (exec form): what runs when a container gives no command."""
    (line,) = [line for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith("ENTRYPOINT")]
    entrypoint: list[str] = json.loads(line.removeprefix("ENTRYPOINT"))
    return entrypoint


# ---------------------------------------------------------------------------------------- what the kubelet injects


def _env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def service_links(service: Mapping[str, Any], cluster_ip: str) -> dict[str, str]:
    """The variables the kubelet gives a pod for ``service`` (``pkg/kubelet/envvars.FromServices``)."""
    prefix = _env_name(service["metadata"]["name"])
    ports = service["spec"]["ports"]
    links = {f"{prefix}_SERVICE_HOST": cluster_ip, f"{prefix}_SERVICE_PORT": str(ports[0]["port"])}
    for port in ports:
        if port.get("name"):
            links[f"{prefix}_SERVICE_PORT_{_env_name(port['name'])}"] = str(port["port"])
    for index, port in enumerate(ports):
        protocol = port.get("protocol") or "TCP"
        address = f"{protocol.lower()}://{cluster_ip}:{port['port']}"
        if index == 0:
            links[f"{prefix}_PORT"] = address
        each = f"{prefix}_PORT_{port['port']}_{protocol.upper()}"
        links |= {each: address, f"{each}_PROTO": protocol.lower(), f"{each}_PORT": str(port["port"]),
                  f"{each}_ADDR": cluster_ip}
    return links


KUBERNETES_SERVICE = {"metadata": {"name": "kubernetes", "namespace": "default"},
                      "spec": {"ports": [{"name": "https", "port": UNREACHABLE_API[1], "protocol": "TCP"}]}}
"""The API server's Service: its links are injected into every pod, whatever enableServiceLinks says."""


def injected(namespace: str, rendered: list[dict[str, Any]], *, links: bool) -> dict[str, str]:
    """The service-link variables of a pod in ``namespace``: the ``kubernetes`` Service's always, and with
    ``links`` those of every Service of the namespace that has a cluster IP (plausible ones, 10.96.x.y)."""
    env = service_links(KUBERNETES_SERVICE, UNREACHABLE_API[0])
    if links:
        services = [obj for obj in rendered if obj["kind"] == "Service" and obj["metadata"]["namespace"] == namespace
                    and obj["spec"].get("clusterIP") != "None"]
        for index, service in enumerate(services, start=1):
            env |= service_links(service, f"10.96.{index}.{10 + index}")
    return env


def container_env(container: Mapping[str, Any], pod: Mapping[str, Any]) -> dict[str, str]:
    """The container's own variables: values, and the downward-API fields a pod of ours reads."""
    fields = {"metadata.namespace": pod["metadata"]["namespace"], "metadata.name": f"{pod['metadata']['name']}-0",
              "spec.nodeName": "node-1", "status.podIP": "10.244.0.7", "spec.serviceAccountName":
              pod["spec"].get("serviceAccountName", "default")}
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


# ---------------------------------------------------------------------------------------------- the containers


@dataclass(frozen=True)
class Container:
    overlay: str
    deployment: str
    namespace: str
    spec: dict[str, Any]
    pod: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.overlay}: Deployment {self.deployment}, container {self.spec['name']}"

    @property
    def service_links_enabled(self) -> bool:
        return bool(self.pod["spec"].get("enableServiceLinks", True))

    def command(self) -> list[str]:
        command = [*(self.spec.get("command") or image_entrypoint()), *self.spec.get("args", [])]
        assert command[0] == "cardquota", f"{self.name}: runs {command[0]!r}, not cardquota"
        return [str(CARDQUOTA), *command[1:]]


def containers(overlay: str, rendered: list[dict[str, Any]]) -> list[Container]:
    found = []
    for deployment in (obj for obj in rendered if obj["kind"] == "Deployment"):
        template = deployment["spec"]["template"]
        pod = {"metadata": {**template.get("metadata", {}), "name": deployment["metadata"]["name"],
                            "namespace": deployment["metadata"]["namespace"]}, "spec": template["spec"]}
        for spec in [*template["spec"].get("initContainers", []), *template["spec"]["containers"]]:
            found.append(Container(overlay, deployment["metadata"]["name"], deployment["metadata"]["namespace"],
                                   spec, pod))
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def local_ports(container: Container, env: dict[str, str]) -> tuple[dict[str, str], dict[str, int]]:
    """The container's ``env`` with each port it declares moved to a free local one (a variable whose value is a
    declared port is where it listens), and the local port by port name and number."""
    moved = {str(port["containerPort"]): free_port() for port in container.spec.get("ports", [])}
    by_name = {port["name"]: moved[str(port["containerPort"])] for port in container.spec.get("ports", [])
               if port.get("name")}
    return {name: str(moved.get(value, value)) for name, value in env.items()}, by_name | moved


def mounts(container: Container, rendered: list[dict[str, Any]], folder: Path) -> dict[str, Path]:
    """Each volume the container mounts, as a local folder (a ConfigMap's keys written as files; an emptyDir
    empty), by mount path."""
    volumes = {volume["name"]: volume for volume in container.pod["spec"].get("volumes", [])}
    configmaps = {obj["metadata"]["name"]: obj for obj in rendered if obj["kind"] == "ConfigMap"
                  and obj["metadata"]["namespace"] == container.namespace}
    local: dict[str, Path] = {}
    for index, mount in enumerate(container.spec.get("volumeMounts", [])):
        path = folder / f"volume-{index}"
        path.mkdir()
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            for key, text in configmaps[volume["configMap"]["name"]].get("data", {}).items():
                (path / key).write_text(text)
        local[mount["mountPath"].rstrip("/")] = path
    return local


def mounted(value: str, local: Mapping[str, Path]) -> str:
    """``value`` with a path under a mount path made the local folder's."""
    for mount_path, path in local.items():
        if value == mount_path or value.startswith(f"{mount_path}/"):
            return f"{path}{value.removeprefix(mount_path)}"
    return value


def kubeconfig(folder: Path) -> Path:
    host, port = UNREACHABLE_API
    return Path(write_kubeconfig(folder, f"https://{host}:{port}", insecure=True))


@dataclass
class Started:
    container: Container
    env: dict[str, str]
    process: subprocess.Popen[str]
    probe: str | None
    """The liveness probe's local URL, when the container declares one."""


def start(container: Container, rendered: list[dict[str, Any]], folder: Path, *, links: bool) -> Started:
    local = mounts(container, rendered, folder)
    own = {name: mounted(value, local) for name, value in container_env(container.spec, container.pod).items()}
    own, ports = local_ports(container, own)
    env = {**injected(container.namespace, rendered, links=links), **own}  # its own win over links, as in the kubelet
    probe = (container.spec.get("livenessProbe") or {}).get("httpGet")
    url = f"http://127.0.0.1:{ports[str(probe['port'])]}{probe.get('path', '/')}" if probe else None
    base = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "KUBECONFIG": str(kubeconfig(folder)),
            "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    executable, *arguments = container.command()  # the local script, wherever this checkout lives (even in /tmp)
    command = [executable, *(mounted(argument, local) for argument in arguments)]
    process = subprocess.Popen(command, env={**base, **env}, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=folder)
    return Started(container, env, process, url)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def outcome(started: Started) -> tuple[str, str]:
    """``("exited", stderr)`` or ``("served", stderr)`` (still running :data:`SERVE_SECONDS` after answering its
    liveness probe; then stopped); fails when it does neither in time."""
    process = started.process
    deadline = time.monotonic() + EXIT_SECONDS
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return "exited", process.communicate(timeout=10)[1]
            if started.probe is not None and _answers(started.probe):
                time.sleep(SERVE_SECONDS)
                assert process.poll() is None, f"{started.container.name}: stopped after answering its probe " \
                                               f"(exit {process.returncode}): {process.communicate()[1]}"
                process.terminate()
                return "served", process.communicate(timeout=10)[1]
            time.sleep(0.1)
        pytest.fail(f"{started.container.name}: neither exited nor served within {EXIT_SECONDS:.0f} s")
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def blames_the_environment(stderr: str, env: Mapping[str, str]) -> list[str]:
    """The variables (cardquota's, or any a Service could set) and link values ``stderr`` names."""
    names = [name for name in env if name.startswith("CARDQUOTA_") or is_service_link_name(name)]
    blamed = [name for name in names if re.search(rf"\b{re.escape(name)}\b", stderr)]
    return blamed + [phrase for phrase in ("service link", "tcp://10.96.") if phrase in stderr]


def check(started: Started, result: str, stderr: str) -> None:
    name = started.container.name
    assert "Traceback" not in stderr, f"{name}:\n{stderr}"
    assert not blames_the_environment(stderr, started.env), f"{name}:\n{stderr}"
    if result == "exited":
        errors = [line for line in stderr.splitlines() if line.startswith("cardquota: ")]
        assert started.process.returncode == 2, f"{name}: exit {started.process.returncode}:\n{stderr}"
        assert errors == [stderr.splitlines()[-1]], f"{name}: not one error line, last:\n{stderr}"
        assert errors[0].startswith("cardquota: error: cluster: "), f"{name}: {errors[0]}"


@contextlib.contextmanager
def running(started: list[Started]) -> Iterator[list[Started]]:
    try:
        yield started
    finally:
        for each in started:
            if each.process.poll() is None:
                each.process.kill()
                each.process.communicate()


# --------------------------------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {overlay: render(overlay) for overlay in OVERLAYS}


@pytest.mark.parametrize("links", [False, True], ids=["links-as-shipped", "links-forced-on"])
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_starts_with_the_env_kubernetes_gives_it(overlay: str, links: bool, rendered: dict[
        str, list[dict[str, Any]]], tmp_path: Path) -> None:
    if not CARDQUOTA.exists():
        pytest.skip(f"no cardquota console script beside {sys.executable} (pip install -e . installs it)")
    objects = rendered[overlay]
    found = containers(overlay, objects)
    assert found, f"{overlay}: no Deployment"
    folders = [tmp_path / str(index) for index in range(len(found))]
    for folder in folders:
        folder.mkdir()
    with running([start(container, objects, folder, links=links or container.service_links_enabled)
                  for container, folder in zip(found, folders, strict=True)]) as started:
        if links:  # the forced run really does hand the processes the names that once broke them
            every = {name for each in started for name in each.env}
            assert {"CARDQUOTA_PORT", "CARDQUOTA_SERVICE_HOST", "CARDQUOTA_PORT_443_TCP_ADDR"} <= every
            if overlay == "dev-extender":
                assert "CARDQUOTA_EXTENDER_PORT" in every
        results = {each.container.name: outcome(each) for each in started}
        for each in started:
            check(each, *results[each.container.name])
    served = {name for name, (result, _) in results.items() if result == "served"}
    if overlay == "dev-extender":  # the extender needs no API server to serve; the operator does
        assert served == {f"{overlay}: Deployment cardquota-extender, container extender"}
    elif overlay == "production":  # the controller (--role controller) needs no certificate: it answers its
        # liveness probe while it retries the API server (then exits 2, as the webhooks do at once)
        assert served == {f"{overlay}: Deployment cardquota-controller, container controller"}
    else:
        assert served == set()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_we_ship_gets_no_service_links(overlay: str, rendered: dict[str, list[dict[str, Any]]]) -> None:
    for container in containers(overlay, rendered[overlay]):
        assert container.pod["spec"].get("enableServiceLinks") is False, container.name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_rule_knows_every_link_name_the_kubelet_makes(overlay: str,
                                                          rendered: dict[str, list[dict[str, Any]]]) -> None:
    names = {name for obj in rendered[overlay] if obj["kind"] == "Namespace"
             for name in injected(obj["metadata"]["name"], rendered[overlay], links=True)}
    assert "CARDQUOTA_SERVICE_PORT_WEBHOOK" in names
    assert all(is_service_link_name(name) for name in names), sorted(n for n in names if not is_service_link_name(n))
