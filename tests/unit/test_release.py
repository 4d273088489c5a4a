"""What a release is made of, read from the repository: one version everywhere (pyproject.toml, the CHANGELOG's
top entry, ``cardquota.__version__``, the image tag ``make image`` gives), pinned runtime constraints that cover
pyproject.toml's dependencies and satisfy their ranges (and that the image installs with), and no overlay naming an
image that could be pulled without the user having built and named it."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import cardquota

REPO = Path(__file__).resolve().parents[2]
PROJECT: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]
FROM_PREFIX = "# from: "  # tests/tools/pin_constraints.py's header line per requirement string

# ------------------------------------------------------------------------------------------------ one version


def changelog_versions(text: str) -> list[str]:
    """The versions of the CHANGELOG's entries, newest first (``## [0.1.0] — unreleased`` or ``— 2026-01-31``)."""
    return re.findall(r"^## \[(\d+\.\d+\.\d+[^\]]*)\](?: — (?:unreleased|\d{4}-\d{2}-\d{2}))?$", text, re.MULTILINE)


def test_the_changelog_top_entry_the_package_and_pyproject_name_one_version() -> None:
    versions = changelog_versions((REPO / "CHANGELOG.md").read_text())
    assert versions, "CHANGELOG.md has no '## [X.Y.Z] — unreleased|date' entry"
    assert versions[0] == VERSION == cardquota.__version__
    assert versions == sorted(versions, key=Version, reverse=True)  # newest first, no version twice
    assert len(set(versions)) == len(versions)


@pytest.mark.parametrize(("text", "expected"), [
    ("## [0.2.0] — unreleased\n\n## [0.1.0] — 2026-01-31\n", ["0.2.0", "0.1.0"]),
    ("## [Unreleased]\n## [1.0.0] — 2026-02-01\n", ["1.0.0"]),  # Keep a Changelog's Unreleased holds no version
    ("## 0.1.0\n", []),  # not the form: no brackets
])
def test_changelog_entries_are_read_in_the_keep_a_changelog_form(text: str, expected: list[str]) -> None:
    assert changelog_versions(text) == expected


def test_the_changelog_states_the_compatibility_policy_and_the_annotations_origin() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    assert "## Version and compatibility policy" in text
    assert "https://github.com/volcano-sh/volcano/pull/4706" in text
    for annotation in ("volcano.sh/card.quota", "volcano.sh/card.request", "volcano.sh/card.name"):
        assert annotation in text
    # The supported minimum is the one the manifests are validated from (tests/unit/test_validate_manifests.py).
    assert "| Kubernetes |" in text
    assert "1.30 and later" in text


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")
def test_make_image_tags_the_package_version() -> None:
    shown = subprocess.run(["make", "-n", "--no-print-directory", "image", "DOCKER=docker"], cwd=REPO,
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"-t cardquota:{VERSION} " in shown
    assert f"org.opencontainers.image.version={VERSION} " in shown


# ------------------------------------------------------------------------------------------------ constraints


def constraint_pins(text: str) -> dict[str, Version]:
    """name (canonical) → pinned version of a constraints file; every line a comment or ``name==version``."""
    pins: dict[str, Version] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"not a pin: {line}"
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"{name} pinned twice"
        pins[name] = Version(specifier.version)
    return pins


def unmet(requirements: list[str], pins: dict[str, Version]) -> list[str]:
    """The requirements the pins leave out or pin outside their range (markers for other platforms skipped)."""
    missing = []
    for line in requirements:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        pinned = pins.get(canonicalize_name(requirement.name))
        if pinned is None or not requirement.specifier.contains(pinned, prereleases=True):
            missing.append(f"{requirement}: {pinned or 'not pinned'}")
    return missing


CONSTRAINTS = (REPO / "constraints.txt").read_text()


def test_the_constraints_pin_every_runtime_dependency_within_its_range() -> None:
    assert unmet(PROJECT["dependencies"], constraint_pins(CONSTRAINTS)) == []


def test_the_constraints_were_resolved_from_the_dependencies_pyproject_declares_now() -> None:
    recorded = [line.removeprefix(FROM_PREFIX) for line in CONSTRAINTS.splitlines() if line.startswith(FROM_PREFIX)]
    assert recorded == PROJECT["dependencies"], "pyproject.toml's dependencies changed: run make constraints"


@pytest.mark.parametrize(("requirements", "pins", "expected"), [
    (["kopf>=1.37"], "kopf==1.45.2\n", []),
    (["kopf>=1.37"], "Kopf==1.36\n", ["kopf>=1.37: 1.36"]),  # names compared canonically, range enforced
    (["prometheus-client>=0.19"], "prometheus_client==0.26.0\n", []),
    (["jsonpatch>=1.33"], "# jsonpatch==1.48\n", ["jsonpatch>=1.33: not pinned"]),
    (["tomli>=2; python_version < '3.0'"], "", []),  # a marker false here: not needed
])
def test_unmet_requirements_are_found(requirements: list[str], pins: str, expected: list[str]) -> None:
    assert unmet(requirements, constraint_pins(pins)) == expected


def test_a_constraints_line_that_is_not_a_pin_is_refused() -> None:
    with pytest.raises(AssertionError, match="not a pin"):
        constraint_pins("kopf>=1.37\n")


def test_the_image_installs_the_wheel_with_the_constraints() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^COPY constraints\.txt (\S+)$", dockerfile, re.MULTILINE)
    install = re.search(r"pip install --constraint (\S+) /tmp/\*\.whl", dockerfile)
    assert install is not None
    copied = re.search(r"^COPY constraints\.txt (\S+)$", dockerfile, re.MULTILINE)
    assert copied is not None
    assert install.group(1) == copied.group(1)


# ------------------------------------------------------------------------------------------------ overlay images

RESERVED = ".invalid"  # RFC 2606: a top-level domain that never resolves, so no registry can answer for it


def overlay_images() -> dict[str, tuple[dict[str, Any], str]]:
    overlays = {}
    for kustomization in sorted((REPO / "manifests" / "overlays").glob("*/kustomization.yaml")):
        text = kustomization.read_text()
        document = yaml.safe_load(text)
        for image in document.get("images", []):
            overlays[f"{kustomization.parent.name}:{image['name']}"] = (image, text)
    return overlays


def unpublished_image_problem(image: dict[str, Any], overlay_text: str) -> str | None:
    """Why an overlay's image entry could pull an image the user did not build and name, or None.

    A local image (no registry host in its name) is accepted only with ``imagePullPolicy: Never`` (kind loads it);
    any other must be under a ``.invalid`` host, the placeholder the user replaces, tagged with the package
    version."""
    name = image.get("newName", image["name"])
    host = name.split("/", 1)[0] if "/" in name else ""
    if not host or ("." not in host and ":" not in host and host != "localhost"):
        if "value: Never" in overlay_text:
            return None
        return f"{name} is pulled from Docker Hub's library, where nothing of ours is published"
    if not host.endswith(RESERVED):
        return f"{name} names a registry where the image is not published: leave a {RESERVED} placeholder"
    if image.get("newTag") != VERSION:
        return f"{name} is tagged {image.get('newTag')}, not the package version {VERSION}"
    return None


def test_no_overlay_names_an_image_that_is_not_published() -> None:
    overlays = overlay_images()
    assert "production:cardquota" in overlays
    assert {key: unpublished_image_problem(*entry) for key, entry in overlays.items()} == dict.fromkeys(overlays)


@pytest.mark.parametrize(("image", "text", "problem"), [
    ({"name": "cardquota", "newName": "ghcr.io/cardquota/cardquota", "newTag": "0.1.0"}, "",
     "names a registry where the image is not published"),
    ({"name": "cardquota", "newName": "cardquota", "newTag": "dev"}, "", "Docker Hub"),
    ({"name": "cardquota", "newName": "cardquota", "newTag": "dev"}, "value: Never", None),
    ({"name": "cardquota", "newName": "registry.invalid/x/cardquota", "newTag": "0.0.9"}, "", "not the package"),
    ({"name": "cardquota", "newName": "registry.invalid/x/cardquota", "newTag": VERSION}, "", None),
])
def test_an_image_that_could_be_pulled_unbuilt_is_told(image: dict[str, Any], text: str, problem: str | None) -> None:
    found = unpublished_image_problem(image, text)
    assert (found is None) if problem is None else (found is not None and problem in found)
