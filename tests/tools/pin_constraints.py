"""Writes constraints.txt: every runtime dependency of cardquota pinned, as pip resolves pyproject.toml's ranges for
the image's platform (CPython 3.11, manylinux x86_64: ``python:3.11-slim``) today. ``make constraints`` runs it.

    python tests/tools/pin_constraints.py constraints.txt

The resolution is pip's own (``pip install --dry-run --report``: nothing is installed or written but the report),
from the package index pip is configured with (PyPI), binary wheels only, so it is what the image's
``pip install -c constraints.txt`` will find. The file's header records the requirement strings it was resolved
from; tests/unit/test_release.py fails when pyproject.toml's dependencies no longer match them (run
``make constraints`` again) or when a pin falls outside its range.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON_VERSION = "3.11"
PLATFORM = "manylinux2014_x86_64"
FROM_PREFIX = "# from: "
"""The header line naming pyproject.toml's requirement strings the pins were resolved from (one line each)."""


def dependencies() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [str(requirement) for requirement in project["dependencies"]]


def resolve(requirements: list[str]) -> list[tuple[str, str]]:
    """(name, version) of every distribution pip would install for the requirements, sorted by name."""
    with tempfile.TemporaryDirectory(prefix="cardquota-pins-") as scratch:
        report = Path(scratch) / "report.json"
        # --target is what pip asks for with --platform; --dry-run writes nothing there.
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--dry-run",
                        "--ignore-installed", "--report", str(report), "--target", str(Path(scratch) / "unused"),
                        "--python-version", PYTHON_VERSION, "--platform", PLATFORM, "--implementation", "cp",
                        "--only-binary=:all:", *requirements], check=True)
        installed = json.loads(report.read_text())["install"]
    return sorted(((item["metadata"]["name"], item["metadata"]["version"]) for item in installed),
                  key=lambda pin: pin[0].lower())


def render(requirements: list[str], pins: list[tuple[str, str]]) -> str:
    header = [
        "# Pinned runtime dependencies of cardquota: pyproject.toml's and everything they pull in, resolved by pip for",
        f"# CPython {PYTHON_VERSION} on {PLATFORM} (the image's python:{PYTHON_VERSION}-slim). The Dockerfile installs",
        "# the wheel with -c constraints.txt, so two image builds get the same versions. Regenerate: make constraints",
        *(f"{FROM_PREFIX}{requirement}" for requirement in requirements),
    ]
    return "\n".join([*header, *(f"{name}=={version}" for name, version in pins)]) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: pin_constraints.py OUTPUT", file=sys.stderr)
        return 2
    requirements = dependencies()
    try:
        pins = resolve(requirements)
    except subprocess.CalledProcessError as error:
        print(f"pin_constraints: pip could not resolve the dependencies (exit {error.returncode})", file=sys.stderr)
        return 1
    Path(argv[0]).write_text(render(requirements, pins))
    print(f"pin_constraints: {len(pins)} distributions pinned in {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
