"""The local control plane's pins (tests/e2e/local): versions.env is the one place a version is written, and the
committed go.mod of each component says the same (``make control-plane-pin`` writes them from it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from e2e.local import build

MODULES = build.MODULES


def _go_mod(name: str) -> str:
    return (MODULES / name / "go.mod").read_text()


def _requirement(text: str, module: str) -> str | None:
    """The version go.mod requires ``module`` at (a require line or a line of a require block)."""
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    return match.group(1) if match else None


def _replacement(text: str, module: str) -> str | None:
    match = re.search(rf"^\s*{re.escape(module)}\s+=>\s+(\S+)\s+(v\S+)\s*$", text, re.MULTILINE)
    return f"{match.group(1)} {match.group(2)}" if match else None


@pytest.mark.parametrize("component", build.components(build.read_versions()), ids=lambda c: c.name)
def test_each_component_requires_its_module_at_the_pinned_version(component: build.Component) -> None:
    text = _go_mod(component.name)
    assert _requirement(text, component.module) == component.version
    assert (MODULES / component.name / "go.sum").read_text().count(f"{component.module} {component.version} h1:") == 1


def test_kubernetes_staging_modules_are_replaced_by_their_releases_of_the_pinned_libraries() -> None:
    versions = build.read_versions()
    text = _go_mod("kubernetes")
    for name in build.KUBERNETES_STAGING:
        assert _replacement(text, f"k8s.io/{name}") == f"k8s.io/{name} {versions['KUBERNETES_LIBRARIES']}", name
    assert versions["KUBERNETES_LIBRARIES"].split(".")[1] == versions["KUBERNETES"].split(".")[1]  # same minor


def test_volcano_apis_come_from_the_pinned_release_and_volcanos_own_replaces_are_kept() -> None:
    versions = build.read_versions()
    text = _go_mod("volcano")
    assert _replacement(text, "volcano.sh/apis") == f"volcano.sh/apis {versions['VOLCANO_APIS']}"
    assert "./staging" not in text  # no module zip carries Volcano's staging folder
    # Volcano's go.mod pins the Kubernetes libraries by replace: a dependency's replaces do not apply to us.
    assert _replacement(text, "k8s.io/client-go") is not None


def test_etcd_siblings_are_at_the_etcd_version() -> None:
    etcd = build.read_versions()["ETCD"]
    text = _go_mod("etcd")
    for sibling in ("api/v3", "client/pkg/v3", "client/v3", "pkg/v3"):
        assert _replacement(text, f"go.etcd.io/etcd/{sibling}") == f"go.etcd.io/etcd/{sibling} {etcd}"


def test_the_cache_folder_changes_with_any_pin(tmp_path: Path) -> None:
    changed = tmp_path / "versions.env"
    changed.write_text(build.VERSIONS.read_text().replace("KWOK=", "KWOK=v0.0.0-other\n# was "))
    assert build.digest(changed) != build.digest()
    assert build.digest() == build.digest()


@pytest.mark.parametrize(("text", "problem"), [("KUBERNETES v1.35.4", "expected NAME=value"),
                                                ("KUBERNETES=", "expected NAME=value")])
def test_a_malformed_versions_line_is_refused_with_its_place(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "versions.env"
    path.write_text(f"# pins\n{text}\n")
    with pytest.raises(SystemExit, match=rf"versions.env:2: {problem}"):
        build.read_versions(path)


def test_kubernetes_binaries_are_stamped_with_their_version() -> None:
    versions = build.read_versions()
    kubernetes = next(c for c in build.components(versions) if c.name == "kubernetes")
    flags = " ".join(kubernetes.ldflags)
    assert f"k8s.io/component-base/version.gitVersion={versions['KUBERNETES']}" in flags
    assert f"k8s.io/component-base/version.gitMinor={versions['KUBERNETES'].split('.')[1]}" in flags
