"""``make e2e-local``: the end-to-end tests against a real control plane on this machine, then nothing left behind.

1. It enters namespaces of its own (``unshare``: network, mount, PID), so every address, mount and process of the
   run is private to it: when it ends, the kernel ends every process it started (the PID namespace's init is this
   script) and drops every mount and network device with them. It needs root (CI's machines and these are).
2. Inside: a tmpfs for the run's state, the pods' bridge, etcd, kube-apiserver, kube-controller-manager, kwok (its
   GPU nodes below) and the host kubelet (:mod:`e2e.local.kubelet`), which runs Volcano's and cardquota's
   Deployments as processes.
3. Volcano, from its own installer manifest (the module ``make control-plane`` built it from), as ``make volcano``
   installs it on a cluster: its scheduler, controllers and admission webhooks, each waited for.
4. ``pytest tests/e2e`` (or the command after ``--``) with the run's kubeconfig and context named
   (``CARDQUOTA_E2E_CONTEXT``: the suite changes this cluster only) and ``CARDQUOTA_E2E_LOCAL`` set, so the fixtures
   install cardquota as the README says and know its pods are the host kubelet's.
5. Every process stopped by PID, newest first; the logs stay in ``build/e2e-local/`` (each component's, each pod's).

Usage: ``run.py --control-plane DIR [--logs DIR] [--nodes N] [-- command ...]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
REPO = TESTS.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from e2e.local import controlplane, kubelet, rest  # noqa: E402

INSIDE = "CARDQUOTA_LOCAL_INSIDE"
GPU_NODE = "kwok-a100-0"
"""The node the suite makes look like a GPU node (CARDQUOTA_E2E_NODE): kwok's, so pods bound to it go Running."""


def _enter_namespaces(argv: Sequence[str]) -> int:
    if os.geteuid() != 0:
        print("make e2e-local runs the control plane in namespaces of its own (network, mount, PID), which needs "
              "root; run it as root (CI does)", file=sys.stderr)
        return 1
    for tool in ("unshare", "nsenter", "ip", "setpriv", "chroot", "mount"):
        if shutil.which(tool) is None:
            print(f"make e2e-local needs `{tool}` (Debian: util-linux, iproute2, coreutils)", file=sys.stderr)
            return 1
    command = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--mount", "--uts",
               "--propagation", "private", "--", sys.executable, __file__, *argv]
    return subprocess.run(command, env={**os.environ, INSIDE: "1"}).returncode


def _kubectl(layout: controlplane.Layout, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run([layout.tool("kubectl"), f"--kubeconfig={layout.admin_kubeconfig}", *args],
                            input=stdin, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def _wait(what: str, probe: Callable[[], bool], timeout: float, check: Callable[[], None]) -> None:
    """Until ``probe`` holds; ``check`` (that every component still runs) each time before."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check()
        if probe():
            return
        time.sleep(1)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def _gpu_nodes(api: rest.Api, count: int) -> None:
    """kwok nodes with A100 labels and cards (the first is the suite's GPU node) and plain CPU nodes."""
    for index in range(count):
        name = f"kwok-a100-{index}"
        labels = {"nvidia.com/gpu.product": "NVIDIA-A100", "nvidia.com/gpu.count": "8",
                  "nvidia.com/gpu.memory": "81920"}
        api.create("/api/v1/nodes", controlplane.kwok_node(name, labels, {"nvidia.com/gpu": "8"}))
    api.create("/api/v1/nodes", controlplane.kwok_node("kwok-cpu-0", {}, {}))


def _install_volcano(layout: controlplane.Layout, volcano: Path, plane: controlplane.ControlPlane) -> None:
    """Volcano's installer manifest, applied as ``make volcano`` applies the release's, and its pods waited for."""
    _kubectl(layout, "apply", "--server-side", "-f", str(volcano / "volcano-development.yaml"))
    for deployment in ("volcano-admission", "volcano-controllers", "volcano-scheduler"):
        _wait(f"deployment volcano-system/{deployment}", functools.partial(_available, layout, deployment), 300,
              plane.processes.check)


def _available(layout: controlplane.Layout, deployment: str) -> bool:
    out = _kubectl(layout, "-n", "volcano-system", "get", "deployment", deployment, "-o",
                   "jsonpath={.status.availableReplicas}")
    return out.strip() not in ("", "0")


def inside(args: argparse.Namespace) -> int:
    bin_dir = args.control_plane / "bin"
    shutil.rmtree(args.logs, ignore_errors=True)  # this run's logs only
    args.logs.mkdir(parents=True)
    state = Path(tempfile.mkdtemp(prefix="cardquota-local-"))
    controlplane.sh("mount", "-t", "tmpfs", "-o", "mode=755", "cardquota-local", str(state))
    layout = controlplane.Layout(state=state, logs=args.logs, bin=bin_dir)
    controlplane.network()
    started = time.monotonic()
    code = 1
    with controlplane.running(layout) as plane:
        api = rest.admin(layout.pki, "127.0.0.1", controlplane.API_PORT)
        venv_bin = Path(sys.executable).parent
        host = kubelet.HostKubelet(api, state, args.logs,
                                   kubelet.images(bin_dir, args.control_plane / "volcano", venv_bin, REPO))
        try:
            host.register()
            host.start()
            _gpu_nodes(api, args.nodes)
            _install_volcano(layout, args.control_plane / "volcano", plane)
            print(f"[e2e-local] control plane and Volcano up in {time.monotonic() - started:.0f} s", flush=True)
            env = {**os.environ, "KUBECONFIG": str(layout.admin_kubeconfig),
                   "CARDQUOTA_E2E_CONTEXT": controlplane.CONTEXT, "CARDQUOTA_E2E": "1",
                   "CARDQUOTA_E2E_LOCAL": str(state), "CARDQUOTA_E2E_NODE": GPU_NODE,
                   "CARDQUOTA_E2E_AUDIT_LOG": str(layout.audit_log),
                   "PATH": f"{bin_dir}:{venv_bin}:{os.environ.get('PATH', '')}"}
            env.pop(INSIDE, None)
            code = subprocess.run(args.command or [str(venv_bin / "pytest"), "tests/e2e", "-v"], cwd=REPO,
                                  env=env).returncode
        finally:
            host.stop()
    print(f"[e2e-local] stopped; logs in {args.logs}", flush=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--control-plane", type=Path, required=True, help="the folder `make control-plane` built")
    parser.add_argument("--logs", type=Path, default=REPO / "build" / "e2e-local")
    parser.add_argument("--nodes", type=int, default=1, help="kwok GPU nodes (8 A100 each; the suite's tests, "
                        "written for kind's one node, assume one)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="after --: what to run (default pytest tests/e2e)")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if os.environ.get(INSIDE) != "1":
        return _enter_namespaces(argv)
    return inside(args)


if __name__ == "__main__":
    sys.exit(main())
