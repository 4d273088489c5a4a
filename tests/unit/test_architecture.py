"""The layering holds: the core imports only the standard library and itself; operator/ shadows nothing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "cardquota" / "core"
# Pure computation only: no files, network, processes, clocks or threads in the core.
ALLOWED_STDLIB = {
    "__future__", "collections", "dataclasses", "enum", "fractions", "json", "math", "re", "typing", "decimal",
    "functools", "itertools", "operator",
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


def test_adapter_folders_ship_inside_the_distribution() -> None:
    import cardquota.operator
    import cardquota.webhooks

    assert Path(cardquota.operator.__file__).parent == REPO / "operator"
    assert Path(cardquota.webhooks.__file__).parent == REPO / "webhooks"


def test_operator_folder_does_not_shadow_the_standard_library_from_the_repository_root() -> None:
    code = "import operator, cardquota.operator; print(operator.__file__); print(operator.itemgetter(0)([7]))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    stdlib_file, item = result.stdout.splitlines()
    assert not Path(stdlib_file).is_relative_to(REPO)
    assert item == "7"
