"""The layering holds: the core imports only the standard library and itself; the webhooks and the controllers do
not import each other (what they share is in cardquota/runtime, which imports neither; cardquota/processes.py puts
them together); operator/ shadows nothing."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "cardquota" / "core"
# Pure computation only: no files, network, processes, clocks or threads in the core.
ALLOWED_STDLIB = {
    "__future__", "collections", "dataclasses", "enum", "fractions", "json", "math", "re", "typing", "decimal",
    "functools", "itertools", "operator", "difflib", "yaml", "ipaddress", "string", "copy", "warnings", "types",
    "bisect",
    "gc", "contextlib",  # gc only to pause the cyclic collector while a full build allocates many acyclic views
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.add("<relative>")
    return found


@pytest.mark.parametrize("module", sorted(CORE.rglob("*.py")), ids=lambda p: p.name)
def test_core_imports_only_pure_stdlib_and_itself(module: Path) -> None:
    outside = {
        name for name in _imports(module)
        if not name.startswith("cardquota.core") and name.split(".")[0] not in ALLOWED_STDLIB
    }
    assert outside == set(), f"{module.relative_to(REPO)} imports {sorted(outside)}"


LAYERS = {
    "operator": {"cardquota.webhooks"},
    "webhooks": {"cardquota.operator"},
    "cardquota/runtime": {"cardquota.operator", "cardquota.webhooks", "cardquota.processes", "cardquota.cli"},
}
"""Folder → the packages its modules must not import (import-linter cannot see the namespace subpackages)."""


@pytest.mark.parametrize("module", sorted(path for folder in LAYERS for path in (REPO / folder).glob("*.py")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_webhooks_and_the_controllers_do_not_import_each_other(module: Path) -> None:
    folder = module.parent.relative_to(REPO).as_posix()
    crossing = {name for name in _imports(module)
                if any(name == forbidden or name.startswith(f"{forbidden}.") for forbidden in LAYERS[folder])}
    assert crossing == set(), f"{module.relative_to(REPO)} imports {sorted(crossing)}"


@pytest.mark.parametrize("folder", ["operator", "webhooks"])
def test_adapter_folders_ship_inside_the_distribution(folder: str) -> None:
    package = importlib.import_module(f"cardquota.{folder}")
    assert [Path(entry).resolve() for entry in package.__path__] == [REPO / folder]


@pytest.mark.parametrize("folder", ["operator", "webhooks"])
def test_adapter_folders_are_not_top_level_packages(folder: str) -> None:
    assert not (REPO / folder / "__init__.py").exists()


@pytest.mark.parametrize(
    "command",
    [
        # -m imports runpy → contextlib → collections → operator *after* the working directory is on sys.path:
        # a regular package named operator at the repository root would break Python itself here.
        ["-m", "cardquota", "--version"],
        ["-c", "import operator, cardquota.operator; print(operator.itemgetter(0)([7]))"],
    ],
)
def test_operator_folder_does_not_shadow_the_standard_library_from_the_repository_root(command: list[str]) -> None:
    result = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() in ("cardquota 0.1.0", "7")


def test_wheel_ships_the_core_and_no_top_level_operator(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(tmp_path),
         str(REPO)], capture_output=True, text=True, timeout=300,
        env={name: value for name, value in os.environ.items() if name != "CARDQUOTA_COMPILE"},  # the pure wheel
    )
    if result.returncode != 0 and "setuptools" in result.stderr.lower():
        pytest.skip(f"no usable setuptools in this environment to build a wheel offline: {result.stderr[-200:]}")
    assert result.returncode == 0, result.stderr
    [wheel] = tmp_path.glob("cardquota-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "cardquota/core/ledger.py" in names
    assert "cardquota/cli/main.py" in names
    assert not [name for name in names if name.split("/")[0] in ("operator", "webhooks", "tests", "bench")]
    # Every module of the source tree is in the wheel (an editable install would hide a forgotten subpackage).
    sources = {f"cardquota/{path.relative_to(REPO / 'cardquota').as_posix()}"
               for path in (REPO / "cardquota").rglob("*.py") if "__pycache__" not in path.parts}
    sources |= {f"cardquota/{folder}/{path.name}" for folder in ("operator", "webhooks")
                for path in (REPO / folder).glob("*.py")}
    assert sorted(sources - set(names)) == []
