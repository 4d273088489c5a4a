"""plugins/cardquota.yaml against krew's manifest rules (kubernetes-sigs/krew at db921d5, v0.4.5-12:
internal/index/validation/validate.go ``ValidatePlugin``, ``validatePlatform``, ``validateFiles``,
``validateSelector``, ``IsSafePluginName``; cmd/validate-krew-manifest/main.go ``validateManifestFile``,
``isOverlappingPlatformSelectors``, ``allPlatforms``, ``validateLicenseFileExists``), as tests/tools/krew_manifest.py
encodes them: the template as committed, a copy filled from an archive built here, and one broken manifest per
rule, each refused with that rule's message."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("krew_manifest", REPO / "tests" / "tools" / "krew_manifest.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KREW = _load()
TEMPLATE = yaml.safe_load((REPO / "plugins" / "cardquota.yaml").read_text())
DIGEST = "a" * 64


def filled() -> dict[str, Any]:
    plugin = copy.deepcopy(TEMPLATE)
    plugin["spec"]["platforms"][0].update(uri="https://releases.example/cardquota-krew.tar.gz", sha256=DIGEST)
    return plugin


def test_the_template_follows_krews_rules_with_placeholders_for_what_the_build_fills() -> None:
    assert KREW.manifest_problems(REPO / "plugins" / "cardquota.yaml", TEMPLATE, template=True) == []
    assert TEMPLATE["spec"]["version"] == f"v{VERSION}"
    # The placeholders are not a manifest krew accepts: only the filled copy is.
    assert KREW.manifest_problems(REPO / "plugins" / "cardquota.yaml", TEMPLATE) != []


def test_the_plugin_runs_on_linux_and_macos_and_not_windows() -> None:
    (platform,) = TEMPLATE["spec"]["platforms"]
    selected = [pair for pair in KREW.ALL_PLATFORMS if KREW.selector_matches(platform["selector"], *pair)]
    assert {os_name for os_name, _ in selected} == {"linux", "darwin"}
    assert len(selected) == 8  # every architecture krew ships for on those two


def test_make_krew_builds_an_archive_and_fills_the_manifest_krews_rules_accept(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / f"cardquota-{VERSION}-py3-none-any.whl").write_bytes(b"a wheel")
    assert KREW.make(dist, tmp_path / "krew", "https://releases.example/v1/") == []
    archive = tmp_path / "krew" / f"cardquota-krew-{VERSION}.tar.gz"
    plugin = yaml.safe_load((tmp_path / "krew" / "cardquota.yaml").read_text())
    (platform,) = plugin["spec"]["platforms"]
    assert platform["uri"] == f"https://releases.example/v1/{archive.name}"
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    first = archive.read_bytes()
    assert KREW.make(dist, tmp_path / "krew", "https://releases.example/v1") == []
    assert archive.read_bytes() == first  # the same inputs give the same bytes (and so the same sha256)


def test_make_krew_without_the_wheel_says_so(tmp_path: Path) -> None:
    (problem,) = KREW.make(tmp_path, tmp_path / "krew", "https://releases.example")
    assert "make dist" in problem


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(plugin: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = plugin
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is KeyError:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return change


def _second_platform(selector: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def change(plugin: dict[str, Any]) -> None:
        plugin["spec"]["platforms"].append({**copy.deepcopy(plugin["spec"]["platforms"][0]), "selector": selector})
    return change


BROKEN = [
    ("apiVersion", _set("apiVersion", "krew.googlecontainertools.github.com/v1alpha1"), "apiVersion="),
    ("kind", _set("kind", "Plugins"), "only 'Plugin' is supported"),
    ("name", _set("metadata.name", "card-quota"), "plugin should be named 'cardquota'"),
    ("no short description", _set("spec.shortDescription", ""), "should have a short description"),
    ("line break", _set("spec.shortDescription", "Card quotas\nfor Volcano"), "line breaks"),
    ("long", _set("spec.shortDescription", "x" * 51), "longer than 50"),
    ("no platform", _set("spec.platforms", []), "should have a platform specified"),
    ("no version", _set("spec.version", KeyError), "should have a version specified"),
    ("no v", _set("spec.version", VERSION), "failed to parse plugin version"),
    ("two parts", _set("spec.version", "v0.1"), "failed to parse plugin version"),
    ("no uri", _set("spec.platforms.0.uri", ""), "`uri` has to be set"),
    ("no sha256", _set("spec.platforms.0.sha256", ""), "`sha256` sum has to be set"),
    ("upper-case sha256", _set("spec.platforms.0.sha256", "A" * 64), "is not valid"),
    ("no bin", _set("spec.platforms.0.bin", ""), "`bin` has to be set"),
    ("empty files", _set("spec.platforms.0.files", []), "`files` has to be unspecified or non-empty"),
    ("no from", _set("spec.platforms.0.files", [{"to": "."}]), "`from` field has to be set"),
    ("no to", _set("spec.platforms.0.files", [{"from": "*"}]), "`to` field has to be set"),
    ("no selector", _set("spec.platforms.0.selector", KeyError), "nil selector is not supported"),
    ("empty selector", _set("spec.platforms.0.selector", {}), "empty selector is not supported"),
    ("selector key", _set("spec.platforms.0.selector", {"matchLabels": {"distro": "debian"}}), "'distro' not"),
    ("empty matchLabels", _set("spec.platforms.0.selector", {"matchLabels": {}, "matchExpressions": [
        {"key": "os", "operator": "In", "values": ["linux"]}]}), "`matchLabels` specified but empty"),
    ("unsupported platform", _set("spec.platforms.0.selector", {"matchLabels": {"os": "plan9"}}),
     "doesn't match any supported platform"),
    ("overlap", _second_platform({"matchLabels": {"os": "linux", "arch": "arm64"}}), "overlapping selectors"),
]


@pytest.mark.parametrize(("change", "message"), [pytest.param(change, message, id=name)
                                                 for name, change, message in BROKEN])
def test_a_manifest_breaking_one_rule_is_refused_with_that_rule(change: Callable[[dict[str, Any]], None],
                                                                message: str) -> None:
    assert KREW.manifest_problems(Path("cardquota.yaml"), filled()) == []
    plugin = filled()
    change(plugin)
    problems = KREW.manifest_problems(Path("cardquota.yaml"), plugin)
    assert any(message in problem for problem in problems), problems


@pytest.mark.parametrize(("file_name", "message"), [
    ("cardquota.yml", "expected manifest extension '.yaml'"),
    ("card.quota.yaml", "is not allowed"),
    ("CON.yaml", "is not allowed"),  # a Windows device name
])
def test_the_file_name_is_the_plugin_name(file_name: str, message: str) -> None:
    plugin = filled()
    plugin["metadata"]["name"] = Path(file_name).stem
    assert any(message in problem for problem in KREW.manifest_problems(Path(file_name), plugin))


def test_a_non_overlapping_second_platform_is_accepted() -> None:
    plugin = filled()
    _second_platform({"matchLabels": {"os": "windows", "arch": "amd64"}})(plugin)
    assert KREW.manifest_problems(Path("cardquota.yaml"), plugin) == []


def _archive(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    wheel = tmp_path / f"cardquota-{VERSION}-py3-none-any.whl"
    wheel.write_bytes(b"a wheel")
    archive = KREW.build_archive(wheel, tmp_path)
    plugin = copy.deepcopy(TEMPLATE)
    plugin["spec"]["platforms"][0].update(uri=f"https://releases.example/{archive.name}",
                                          sha256=hashlib.sha256(archive.read_bytes()).hexdigest())
    return archive, plugin


def test_the_archive_holds_an_executable_bin_and_a_license_that_files_copy(tmp_path: Path) -> None:
    archive, plugin = _archive(tmp_path)
    assert KREW.archive_problems(plugin, archive) == []
    plugin["spec"]["platforms"][0]["sha256"] = DIGEST
    assert any("is not the archive's" in problem for problem in KREW.archive_problems(plugin, archive))
    plugin["spec"]["platforms"][0]["files"] = [{"from": "kubectl-cardquota", "to": "."}]
    assert any("no LICENSE" in problem for problem in KREW.archive_problems(plugin, archive))
    plugin["spec"]["platforms"][0]["bin"] = "constraints.txt"
    assert any("is not among the installed files" in problem for problem in KREW.archive_problems(plugin, archive))


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
def test_the_launcher_says_what_it_needs_when_python_is_missing_or_too_old(tmp_path: Path) -> None:
    launcher = REPO / "plugins" / "kubectl-cardquota"
    assert subprocess.run(["sh", "-n", str(launcher)], check=False).returncode == 0
    assert os.access(launcher, os.X_OK)
    environ = {**os.environ, "CARDQUOTA_PYTHON": str(tmp_path / "no-python")}
    completed = subprocess.run([str(launcher), "--version"], env=environ, capture_output=True, text=True,
                               timeout=60, check=False)
    assert completed.returncode == 1
    assert "needs Python 3.11 or later" in completed.stderr
    assert not (REPO / "plugins" / "venv").exists()
