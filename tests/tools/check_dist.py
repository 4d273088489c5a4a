"""Checks the release artifacts ``make dist`` built: the sdist and the pure wheel (built from that sdist), installed
into a fresh virtualenv, run as a user runs them.

    python tests/tools/check_dist.py build/dist

What it proves:

- the wheel is complete: it is installed alone (``--no-deps --no-index``) into a fresh virtualenv, and every module
  of the installed ``cardquota`` imports there from the wheel's copy (never from the source tree, never from the
  developer's editable install);
- its entry points work: ``cardquota --version`` prints the package version, ``cardquota --help`` and
  ``kubectl-cardquota --help`` exit 0, and where a ``kubectl`` is on PATH, ``kubectl cardquota --help`` runs the
  plugin (kubectl runs any executable named ``kubectl-<name>`` on PATH as ``kubectl <name>``);
- its metadata lists the runtime dependencies of pyproject.toml, each satisfied by what is installed beside it;
- the sdist holds every module of the wheel (``python -m build`` builds the wheel from the sdist, so a file missing
  from the sdist would be missing from the wheel too).

What it does not prove: that pip resolves the dependencies from an index (the fresh virtualenv sees the
development virtualenv's packages through a ``.pth`` line instead, so no network is needed: constraints.txt and
tests/unit/test_release.py pin and check the ranges), nor anything about the compiled wheel the image ships
(``make compiled``; the compiled suite runs against it).

Exit 0 when every check passes; otherwise 1, one line per failed check.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import tomllib
import venv
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ("cardquota", "kubectl-cardquota")

IMPORT_EVERY_MODULE = """
import importlib, json, pathlib
import cardquota
root = pathlib.Path(cardquota.__file__).parent
# Every .py file (pkgutil.walk_packages skips operator/ and webhooks/, namespace subpackages without __init__.py);
# __main__ runs the CLI when imported.
names = sorted(".".join(("cardquota", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
               for path in root.rglob("*.py") if path.name != "__main__.py")
print(json.dumps({name: getattr(importlib.import_module(name), "__file__", None) or "" for name in names}))
"""


DEPENDENCIES_MET = """
import importlib.metadata as md, sys
from packaging.requirements import Requirement
unmet = []
for line in md.requires("cardquota") or []:
    requirement = Requirement(line)
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        continue
    try:
        version = md.version(requirement.name)
    except md.PackageNotFoundError:
        unmet.append(f"{requirement}: not installed")
        continue
    if not requirement.specifier.contains(version, prereleases=True):
        unmet.append(f"{requirement}: {version} installed")
print("\\n".join(unmet))
"""


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project


def _one(folder: Path, pattern: str, failures: list[str]) -> Path | None:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        failures.append(f"expected one {pattern} in {folder}, found {[path.name for path in found]}")
        return None
    return found[0]


def _run(command: list[str], cwd: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=120, check=False)


def check_archives(wheel: Path, sdist: Path, version: str, failures: list[str]) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = email.parser.Parser().parsestr(archive.read(f"cardquota-{version}.dist-info/METADATA").decode())
        entry_points = archive.read(f"cardquota-{version}.dist-info/entry_points.txt").decode()
    if metadata["Version"] != version:
        failures.append(f"the wheel's metadata says version {metadata['Version']}, pyproject.toml {version}")
    declared = sorted(str(requirement).split(";")[0].strip().replace(" ", "")
                      for requirement in _project()["dependencies"])  # type: ignore[attr-defined]
    listed = sorted(line.split(";")[0].strip().replace(" ", "") for line in metadata.get_all("Requires-Dist") or []
                    if "extra ==" not in line)
    if listed != declared:
        failures.append(f"the wheel requires {listed}, pyproject.toml declares {declared}")
    for script in SCRIPTS:
        if f"\n{script} = " not in f"\n{entry_points}":
            failures.append(f"the wheel has no console script {script}")
    with tarfile.open(sdist) as archive:
        in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    modules = [name for name in names if name.startswith("cardquota/") and name.endswith(".py")]
    missing = [name for name in modules if name not in in_sdist]
    if missing:
        failures.append(f"modules of the wheel missing from the sdist: {missing}")
    for needed in ("pyproject.toml", "setup.py", "LICENSE", "README.md"):
        if needed not in in_sdist:
            failures.append(f"the sdist has no {needed}")


def check_installed(wheel: Path, version: str, failures: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="cardquota-dist-") as scratch:
        root = Path(scratch)
        env_dir = root / "venv"
        venv.EnvBuilder(with_pip=False).create(env_dir)
        python = env_dir / "bin" / "python"
        installed = _run([sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check",
                          "install", "--quiet", "--no-deps", "--no-index", str(wheel)], root, dict(os.environ))
        if installed.returncode != 0:
            failures.append(f"pip could not install the wheel: {installed.stderr.strip()[-400:]}")
            return
        purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            root, dict(os.environ)).stdout.strip())
        # The dependencies, from the development virtualenv: a plain path line, so that virtualenv's own .pth
        # files (the editable install of the source tree among them) are not run.
        (purelib / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        environ = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
        environ["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{environ.get('PATH', '')}"
        bin_dir = env_dir / "bin"

        shown = _run([str(bin_dir / "cardquota"), "--version"], root, environ)
        if (shown.returncode, shown.stdout.strip()) != (0, f"cardquota {version}"):
            failures.append(f"cardquota --version: exit {shown.returncode}, {shown.stdout.strip()!r} "
                            f"{shown.stderr.strip()[-300:]!r}")
        for script in SCRIPTS:
            helped = _run([str(bin_dir / script), "--help"], root, environ)
            if helped.returncode != 0 or "usage:" not in helped.stdout:
                failures.append(f"{script} --help: exit {helped.returncode}: {helped.stderr.strip()[-300:]}")
        kubectl = shutil.which("kubectl", path=environ["PATH"])
        if kubectl is not None:
            plugin = _run([kubectl, "cardquota", "--help"], root, environ)
            if plugin.returncode != 0 or "usage: kubectl cardquota" not in plugin.stdout:
                failures.append(f"kubectl cardquota --help: exit {plugin.returncode}: {plugin.stderr.strip()[-300:]}")
        else:
            print("check_dist: no kubectl on PATH: 'kubectl cardquota' not tried (kubectl-cardquota --help was)")

        imported = _run([str(python), "-c", IMPORT_EVERY_MODULE], root, environ)
        if imported.returncode != 0:
            failures.append(f"a module of the installed wheel does not import: {imported.stderr.strip()[-400:]}")
        else:
            import json

            files: dict[str, str] = json.loads(imported.stdout)
            outside = sorted(name for name, file in files.items() if file and not file.startswith(str(purelib)))
            if outside:
                failures.append(f"modules imported from outside the installed wheel: {outside}")
            for subpackage in ("cardquota.core", "cardquota.operator", "cardquota.webhooks", "cardquota.cli"):
                if not any(name.startswith(subpackage + ".") for name in files):
                    failures.append(f"the installed wheel has no module under {subpackage}")
        unmet = _run([str(python), "-c", DEPENDENCIES_MET], root, environ)
        if unmet.returncode != 0 or unmet.stdout.strip():
            failures.append(f"runtime dependencies not met: {(unmet.stdout + unmet.stderr).strip()[-400:]}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: check_dist.py DIST_DIR", file=sys.stderr)
        return 2
    folder = Path(argv[0]).resolve()
    version = str(_project()["version"])
    failures: list[str] = []
    wheel = _one(folder, f"cardquota-{version}-py3-none-any.whl", failures)
    sdist = _one(folder, f"cardquota-{version}.tar.gz", failures)
    if wheel is not None and sdist is not None:
        check_archives(wheel, sdist, version, failures)
        check_installed(wheel, version, failures)
    for failure in failures:
        print(f"check_dist: {failure}", file=sys.stderr)
    if not failures:
        print(f"check_dist: {wheel.name if wheel else ''} and {sdist.name if sdist else ''}: complete; installed "
              "alone into a fresh virtualenv, every module imports and both commands run")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
