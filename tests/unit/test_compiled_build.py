"""The optional compiled build (setup.py, ``CARDQUOTA_COMPILE=1``): which modules it compiles, and that the suite
run by ``make test-compiled`` really runs against them (``CARDQUOTA_EXPECT_COMPILED=1``) while every other run is
against the interpreted sources (no compiled module left beside them)."""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _setup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cardquota_setup", REPO / "setup.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    cwd = Path.cwd()
    os.chdir(REPO)  # setup.py names the modules relative to the repository, as setuptools runs it
    try:
        spec.loader.exec_module(module)
        module.listed = module.compiled_modules()
    finally:
        os.chdir(cwd)
    return module


SETUP = _setup()


def _module_name(path: str) -> str:
    return ".".join(Path(path).with_suffix("").parts).removesuffix(".__init__")


def test_every_core_module_is_compiled_but_the_few_left_interpreted_with_a_reason() -> None:
    core = sorted(str(path.relative_to(REPO)) for path in (REPO / "cardquota" / "core").rglob("*.py"))
    interpreted = sorted(str(path) for path in SETUP.INTERPRETED)
    edges = ["cardquota/webhooks/admission.py", "cardquota/webhooks/review.py",  # (on every admission's path)
             "cardquota/runtime/latency.py"]
    assert sorted(SETUP.listed + interpreted) == sorted(core + edges)
    assert set(SETUP.listed).isdisjoint(interpreted)
    assert all(reason.strip() for reason in SETUP.INTERPRETED.values())
    assert "cardquota/core/policies/pod.py" in SETUP.listed  # the admission path
    assert "cardquota/core/ledger.py" in SETUP.listed


def test_without_the_variable_setup_builds_no_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CARDQUOTA_COMPILE", raising=False)
    assert SETUP.extensions() == []
    monkeypatch.setenv("CARDQUOTA_COMPILE", "0")
    assert SETUP.extensions() == []


def test_the_suite_runs_against_the_build_it_says() -> None:
    expected = os.environ.get("CARDQUOTA_EXPECT_COMPILED") == "1"
    loaded = {path: importlib.import_module(_module_name(path)).__file__ or "" for path in SETUP.listed}
    compiled = sorted(path for path, file in loaded.items() if not file.endswith(".py"))
    assert compiled == (sorted(loaded) if expected else [])
    for path in SETUP.INTERPRETED:  # always the source, compiled build or not
        assert (importlib.import_module(_module_name(str(path))).__file__ or "").endswith(".py")


def test_the_image_builds_the_compiled_wheel_by_default_with_what_setup_asks_for() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "ARG COMPILE=1" in dockerfile
    assert "CARDQUOTA_COMPILE=$COMPILE" in dockerfile
    assert "COPY pyproject.toml setup.py" in dockerfile
    for requirement in SETUP.BUILD_REQUIREMENTS:
        assert requirement in dockerfile, requirement
    assert "gcc" in dockerfile
    assert "!setup.py" in (REPO / ".dockerignore").read_text()
