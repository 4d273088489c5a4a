"""The local control plane's binaries, built from their Go modules (``make control-plane``), and their pins
(``make control-plane-pin``).

Every version comes from ``versions.env``; ``modules/<component>/go.mod`` and ``go.sum`` (written by ``pin`` from it,
committed) fix each component's whole module graph, so a build anywhere compiles the same sources, checked against
the same hashes, with only the module proxy to reach (no checksum database: ``go.sum`` is the check). The binaries
land in a cache folder outside the repository, one per pin set (``<cache>/<digest>``): a second build with the same
pins finds them there and returns at once; Go's own module and build caches make a rebuild after a pin change cheap.

Usage: ``build.py build [--cache DIR]`` (prints the folder), ``build.py pin``, ``build.py where [--cache DIR]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSIONS = HERE / "versions.env"
MODULES = HERE / "modules"
RECIPE = "2"
"""Bumped when what a build produces changes without a pin changing (flags, assets): a new cache folder."""

KUBERNETES_STAGING = (
    "api", "apiextensions-apiserver", "apimachinery", "apiserver", "cli-runtime", "client-go", "cloud-provider",
    "cluster-bootstrap", "code-generator", "component-base", "component-helpers", "controller-manager", "cri-api",
    "cri-client", "csi-translation-lib", "dynamic-resource-allocation", "endpointslice", "externaljwt", "kms",
    "kube-aggregator", "kube-controller-manager", "kube-proxy", "kube-scheduler", "kubectl", "kubelet", "metrics",
    "mount-utils", "pod-security-admission", "sample-apiserver", "sample-cli-plugin", "sample-controller",
)
"""The modules k8s.io/kubernetes's go.mod replaces with ./staging/src/k8s.io/<name> (v1.35's list): outside its
repository each must be replaced by its published release instead."""


def read_versions(path: Path = VERSIONS) -> dict[str, str]:
    """``NAME=value`` lines; ``#`` starts a comment line."""
    versions: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.strip() or not value.strip():
            raise SystemExit(f"{path}:{number}: expected NAME=value, got {line!r}")
        versions[name.strip()] = value.strip()
    return versions


@dataclass(frozen=True)
class Component:
    """One Go module of ours that requires an upstream module and builds some of its main packages."""

    name: str
    module: str
    version: str
    packages: tuple[str, ...]
    """Import paths of the main packages, each built to ``bin/<last path element>`` unless renamed."""
    renamed: Mapping[str, str] = field(default_factory=dict)
    """Import path → binary name, where the last path element is not the name (``cmd/scheduler`` → vc-scheduler)."""
    replaces: tuple[tuple[str, str], ...] = ()
    ldflags: tuple[str, ...] = ()

    def go_mod(self) -> str:
        """The go.mod ``pin`` starts from: ``go get`` fills in the rest of the graph."""
        lines = [f"module cardquota.invalid/control-plane/{self.name}", "", "go 1.24.0", "",
                 f"require {self.module} {self.version}", ""]
        if self.replaces:
            lines += ["replace (", *[f"\t{old} => {new}" for old, new in self.replaces], ")", ""]
        return "\n".join(lines)

    def binary(self, package: str) -> str:
        return self.renamed.get(package, package.rsplit("/", 1)[-1])


def _kubernetes_ldflags(version: str) -> tuple[str, ...]:
    """What Kubernetes's build stamps into its binaries (hack/lib/version.sh): the API server reports it at
    /version, and clients (kubectl's skew warning, Volcano's feature checks) read it."""
    major, minor = version.lstrip("v").split(".")[:2]
    stamped = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean",
               "buildDate": "1970-01-01T00:00:00Z"}
    return tuple(f"-X {package}.{key}={value}" for package in ("k8s.io/component-base/version",
                                                               "k8s.io/client-go/pkg/version")
                 for key, value in stamped.items())


def components(versions: Mapping[str, str]) -> tuple[Component, ...]:
    kubernetes, libraries, etcd = versions["KUBERNETES"], versions["KUBERNETES_LIBRARIES"], versions["ETCD"]
    volcano = versions["VOLCANO"]
    return (
        Component("kubernetes", "k8s.io/kubernetes", kubernetes,
                  ("k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager",
                   "k8s.io/kubernetes/cmd/kubectl"),
                  replaces=tuple((f"k8s.io/{name}", f"k8s.io/{name} {libraries}") for name in KUBERNETES_STAGING),
                  ldflags=_kubernetes_ldflags(kubernetes)),
        Component("etcd", "go.etcd.io/etcd/server/v3", etcd, ("go.etcd.io/etcd/server/v3",),
                  renamed={"go.etcd.io/etcd/server/v3": "etcd"},
                  replaces=tuple((f"go.etcd.io/etcd/{name}", f"go.etcd.io/etcd/{name} {etcd}")
                                 for name in ("api/v3", "client/pkg/v3", "client/v3", "pkg/v3"))),
        Component("volcano", "volcano.sh/volcano", volcano,
                  ("volcano.sh/volcano/cmd/scheduler", "volcano.sh/volcano/cmd/controller-manager",
                   "volcano.sh/volcano/cmd/webhook-manager"),
                  renamed={"volcano.sh/volcano/cmd/scheduler": "vc-scheduler",
                           "volcano.sh/volcano/cmd/controller-manager": "vc-controller-manager",
                           "volcano.sh/volcano/cmd/webhook-manager": "vc-webhook-manager"},
                  replaces=(("volcano.sh/apis", f"volcano.sh/apis {versions['VOLCANO_APIS']}"),),
                  ldflags=(f"-X volcano.sh/volcano/pkg/version.Version={volcano}",
                           "-X volcano.sh/volcano/pkg/version.GitSHA=module-proxy")),
        Component("kwok", "sigs.k8s.io/kwok", versions["KWOK"], ("sigs.k8s.io/kwok/cmd/kwok",)),
        Component("kustomize", "sigs.k8s.io/kustomize/kustomize/v5", versions["KUSTOMIZE"],
                  ("sigs.k8s.io/kustomize/kustomize/v5",), renamed={"sigs.k8s.io/kustomize/kustomize/v5": "kustomize"}),
    )


def _go_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The module proxy only (no checksum database reachable: the committed go.sum is the check), no cgo (static
    binaries, as the projects' own release builds), this machine's Go."""
    env = {**os.environ, "GOSUMDB": "off", "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false"}
    env.update(extra or {})
    return env


def _go(args: Sequence[str], cwd: Path, extra: Mapping[str, str] | None = None) -> str:
    result = subprocess.run(["go", *args], cwd=cwd, env=_go_env(extra), capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"go {' '.join(args)} (in {cwd}) failed:\n{result.stderr.strip()[-4000:]}")
    return result.stdout


def _upstream_replaces(component: Component, work: Path) -> tuple[tuple[str, str], ...]:
    """Volcano's own replace directives (all but the one to its staging folder, which ``component`` replaces with a
    published release): a dependency's replaces do not apply to the module requiring it, so they are repeated."""
    text = _go(["mod", "download", "-json", f"{component.module}@{component.version}"], work)
    upstream = Path(json.loads(text)["GoMod"]).read_text()
    inside, replaces = False, []
    for line in upstream.splitlines():
        line = line.split("//", 1)[0].strip()
        if line.startswith("replace ("):
            inside = True
        elif inside and line == ")":
            inside = False
        elif inside and "=>" in line:
            old, new = (part.strip() for part in line.split("=>"))
            if not new.startswith("."):
                replaces.append((old, new))
    own = {old for old, _ in component.replaces}
    return tuple((old, new) for old, new in replaces if old not in own) + component.replaces


def pin(versions: Mapping[str, str]) -> None:
    """Write modules/<name>/go.mod and go.sum for each component from versions.env (asks the module proxy)."""
    for component in components(versions):
        with tempfile.TemporaryDirectory() as folder:
            work = Path(folder)
            if component.name == "volcano":
                component = dataclasses.replace(component, replaces=_upstream_replaces(component, work))
            (work / "go.mod").write_text(component.go_mod())
            _go(["get", *[f"{package}@{component.version}" for package in component.packages]], work,
                {"GOFLAGS": "-mod=mod"})
            target = MODULES / component.name
            target.mkdir(parents=True, exist_ok=True)
            for name in ("go.mod", "go.sum"):
                shutil.copyfile(work / name, target / name)
        print(f"pinned {component.name}: {component.module} {component.version}")


def digest(versions_file: Path = VERSIONS) -> str:
    """Names the cache folder: the pins (versions.env and every go.mod/go.sum) and the recipe."""
    hashed = hashlib.sha256(RECIPE.encode())
    for name, path in [("versions.env", versions_file),
                       *((p.relative_to(HERE).as_posix(), p) for p in sorted(MODULES.glob("*/go.*")))]:
        hashed.update(name.encode() + b"\0" + path.read_bytes())
    return hashed.hexdigest()[:16]


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cardquota" / "control-plane"


def where(cache: Path) -> Path:
    return cache / digest()


def _source(component: Component, work: Path) -> Path:
    """The module's files in Go's module cache."""
    return Path(json.loads(_go(["mod", "download", "-json", f"{component.module}@{component.version}"],
                               work))["Dir"])


KWOK_STAGES = ("node/fast/node-initialize.yaml", "pod/fast/pod-ready.yaml", "pod/fast/pod-delete.yaml")
"""kwok's own "fast" stages but ``pod-complete``, which ends every pod owned by a kind named ``Job`` at once —
Volcano's ``batch.volcano.sh`` Jobs too, whose pods are meant to run (and hold their cards) until stopped."""


def _kwok_assets(component: Component, work: Path, target: Path) -> None:
    source = _source(component, work) / "kustomize" / "stage"
    target.mkdir(parents=True, exist_ok=True)
    (target / "stages.yaml").write_text("---\n".join((source / stage).read_text() for stage in KWOK_STAGES))


def _volcano_assets(component: Component, work: Path, target: Path) -> None:
    """Volcano's installer manifest, its CRDs and the admission-secret script from the same module."""
    source = _source(component, work)
    (target / "crd").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "installer" / "volcano-development.yaml", target / "volcano-development.yaml")
    shutil.copyfile(source / "installer" / "dockerfile" / "webhook-manager" / "gen-admission-secret.sh",
                    target / "gen-admission-secret.sh")
    (target / "gen-admission-secret.sh").chmod(0o755)
    for crd in sorted((source / "config" / "crd" / "volcano" / "bases").glob("*.yaml")):
        shutil.copyfile(crd, target / "crd" / crd.name)


def build(cache: Path) -> Path:
    """Build every component into ``<cache>/<digest>`` unless a complete build is there; returns the folder."""
    versions = read_versions()
    folder = where(cache)
    done = folder / "complete"
    if done.exists():
        return folder
    started = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    for component in components(versions):
        work = folder / "src" / component.name
        work.mkdir(parents=True, exist_ok=True)
        for name in ("go.mod", "go.sum"):
            shutil.copyfile(MODULES / component.name / name, work / name)
        began = time.monotonic()
        for package in component.packages:
            _go(["build", "-mod=readonly", "-trimpath", "-ldflags", " ".join(("-s", "-w", *component.ldflags)),
                 "-o", str(bin_dir / component.binary(package)), package], work)
        print(f"built {component.name} {component.version} in {time.monotonic() - began:.0f} s", flush=True)
        if component.name == "volcano":
            _volcano_assets(component, work, folder / "volcano")
        elif component.name == "kwok":
            _kwok_assets(component, work, folder / "kwok")
    (folder / "versions.env").write_text(VERSIONS.read_text())
    done.write_text(f"{time.monotonic() - started:.0f}\n")
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("build", "pin", "where"))
    parser.add_argument("--cache", type=Path, default=None, help="cache folder (default ~/.cache/cardquota/"
                        "control-plane, or $CONTROL_PLANE_CACHE)")
    args = parser.parse_args(argv)
    cache = args.cache or Path(os.environ.get("CONTROL_PLANE_CACHE") or default_cache())
    if shutil.which("go") is None:
        print("the local control plane is built with Go (go1.24 or newer): `go` is not on PATH", file=sys.stderr)
        return 1
    if args.command == "pin":
        pin(read_versions())
    elif args.command == "where":
        print(where(cache))
    else:
        print(build(cache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
