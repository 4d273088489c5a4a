"""Every Kubernetes object we ship or show, validated strictly (an unknown field is an error, as `kubectl apply
--validate=strict` would say) by kubernetes-validate's schemas, for every Kubernetes version it ships from 1.30 up
to the newest: the rendered overlays (manifests/overlays/*, with `kubectl kustomize`), the files the kustomizations
list as resources, crds/ (its example ConfigMaps, and any CustomResourceDefinition), and examples/, including the pod
templates inside the Volcano Jobs there.

Custom resources kubernetes-validate cannot know are listed in EXPECTED_UNKNOWN with the reason; any other kind it
does not know fails the test, and so does an entry of that list that nothing uses any more.

validate_strict() is the reusable part: one object, one Kubernetes version, every error message. It loads each
version's definitions once (about 1.5 MB of JSON) and each kind's validator once, so the whole module runs in
seconds; the package's own kubernetes_validate.validate() rereads both on every call and stops at the first error.
"""

from __future__ import annotations

import copy
import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate.utils as kv
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
KUBECTL = shutil.which("kubectl")
OLDEST = "1.30"

# (apiVersion, kind) -> why kubernetes-validate has no schema for it. It maps an apiVersion to a schema file by the
# group's first label only ("scheduling.volcano.sh/v1beta1" -> "scheduling-v1beta1"), so from Kubernetes 1.37 on it
# would check a Volcano PodGroup against Kubernetes' own scheduling.k8s.io PodGroup and fail on the apiVersion enum;
# validate_strict() calls a schema whose apiVersion enum lacks the object's apiVersion unknown instead.
EXPECTED_UNKNOWN: dict[tuple[str, str], str] = {
    ("scheduling.volcano.sh/v1beta1", "Queue"): "Volcano CRD (scheduling.volcano.sh), installed with Volcano",
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): "Volcano CRD; not Kubernetes' own scheduling.k8s.io PodGroup",
    ("batch.volcano.sh/v1alpha1", "Job"): "Volcano CRD (its tasks' pod templates are checked here as PodTemplateSpec)",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "Prometheus Operator CRD (components/metrics)",
    ("builtin", "ReplacementTransformer"): "kustomize's configuration of its replacements (transformers/namespace), "
                                            "read by kustomize, never sent to a cluster",
    ("builtin", "PatchTransformer"): "kustomize's patch taking the namespace off cluster-scoped kinds it does not know "
                                      "(transformers/namespace), read by kustomize, never sent to a cluster",
}


def _minor(version: str) -> tuple[int, int]:
    major, minor = kv.major_minor(version.removeprefix("v")).split(".")
    return int(major), int(minor)


@functools.cache
def _shipped() -> dict[str, str]:
    """major.minor -> the full version naming its schema folder (v1.30.0-local-strict)."""
    return {kv.major_minor(full): full for full in kv.all_versions()}


def supported_versions() -> list[str]:
    """The Kubernetes versions (major.minor) kubernetes-validate ships schemas for, from 1.30 up to the newest."""
    return sorted((version for version in _shipped() if _minor(version) >= _minor(OLDEST)), key=_minor)


VERSIONS = supported_versions()


def _folder(version: str) -> tuple[str, str]:
    """(major.minor, the strict schema folder inside the package) of a version such as "1.30", "v1.30" or "1.30.2"."""
    wanted = kv.major_minor(version.removeprefix("v"))
    if wanted not in _shipped():
        raise kv.VersionNotSupportedError(version=wanted)
    return wanted, f"kubernetes-json-schema/v{_shipped()[wanted]}-local-strict"


@functools.cache
def _definitions(version: str) -> tuple[str, Registry[Any]]:
    """The $id of a version's strict _definitions.json, and a registry holding it (every kind's schema refers to it)."""
    wanted, folder = _folder(version)
    definitions = kv.schema_contents(f"{folder}/_definitions.json", wanted)
    resource = Resource.from_contents(definitions, default_specification=DRAFT202012)
    return definitions["$id"], resource @ Registry()


@functools.cache
def _kind_validator(version: str, api_version: str, kind: str) -> jsonschema.Draft202012Validator | None:
    """The strict validator of a top-level kind, or None where kubernetes-validate has no schema for it."""
    wanted, folder = _folder(version)
    # the package's own file naming: drop the group's domain, "rbac.authorization.k8s.io/v1" -> "rbac-v1"
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv.schema_contents(f"{folder}/{kind.lower()}-{group_version}.json", wanted)
    except FileNotFoundError:
        return None
    allowed = schema.get("properties", {}).get("apiVersion", {}).get("enum")
    if allowed is not None and api_version not in allowed:
        return None  # another group's kind of the same name and version (see EXPECTED_UNKNOWN)
    registry = Resource.from_contents(schema, default_specification=DRAFT202012) @ _definitions(version)[1]
    return jsonschema.Draft202012Validator(schema, registry=registry)


@functools.cache
def _definition_validator(version: str, definition: str) -> jsonschema.Draft202012Validator:
    definitions_id, registry = _definitions(version)
    return jsonschema.Draft202012Validator({"$ref": f"{definitions_id}#/$defs/{definition}"}, registry=registry)


def _messages(validator: jsonschema.Draft202012Validator, value: Any) -> list[str]:
    errors = sorted(validator.iter_errors(value), key=lambda error: (error.json_path, error.message))
    return [f"{error.json_path}: {error.message}" for error in errors]


def validate_strict(obj: dict[str, Any], version: str) -> list[str]:
    """Every strict-schema error of one Kubernetes object for one Kubernetes version ("1.30", "v1.30" and "1.30.4"
    name the same schemas), as "$.json.path: message"; [] when it is valid. Raises kubernetes_validate's
    SchemaNotFoundError when the package has no schema for the object's apiVersion and kind (a custom resource; a
    CustomResourceDefinition itself is built-in and validated, its openAPIV3Schema too), VersionNotSupportedError
    for a version it ships no schemas for."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    validator = _kind_validator(version, api_version, kind)
    if validator is None:
        raise kv.SchemaNotFoundError(kind=kind, version=_folder(version)[0], api_version=api_version)
    return _messages(validator, obj)


def validate_strict_definition(value: Any, definition: str, version: str) -> list[str]:
    """Like validate_strict() for a built-in type embedded in another object, named as in the OpenAPI definitions
    ("io.k8s.api.core.v1.PodTemplateSpec")."""
    return _messages(_definition_validator(version, definition), value)


# --- what we ship and show --------------------------------------------------------------------------------------


def _documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


@functools.cache
def _render(overlay: str) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    result = subprocess.run([KUBECTL, "kustomize", str(MANIFESTS / "overlays" / overlay)], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def _kustomize_resource_files() -> list[Path]:
    """The files the kustomizations under manifests/ list as resources: whole objects (patches are not)."""
    files = set()
    for kustomization in MANIFESTS.rglob("kustomization.yaml"):
        for entry in yaml.safe_load(kustomization.read_text()).get("resources", []):
            path = (kustomization.parent / entry).resolve()
            if path.is_file():
                files.add(path)
    return sorted(files)


OVERLAYS = sorted(path.name for path in (MANIFESTS / "overlays").iterdir() if (path / "kustomization.yaml").is_file())
FILES = sorted({*_kustomize_resource_files(), *(REPO / "crds").rglob("*.yaml"), *(REPO / "examples").rglob("*.yaml")})


def _name(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{obj.get('kind')}/{metadata.get('name') or metadata.get('generateName') or '?'}"


def _problems(objects: list[dict[str, Any]], version: str) -> tuple[list[str], int]:
    """(what is wrong with the objects at this version, how many were validated)."""
    problems, validated = [], 0
    for obj in objects:
        key = (obj.get("apiVersion", ""), obj.get("kind", ""))
        try:
            errors = validate_strict(obj, version)
        except kv.SchemaNotFoundError:
            if key not in EXPECTED_UNKNOWN:
                problems.append(f"{_name(obj)}: kubernetes-validate has no {version} schema for {key[0]} {key[1]} "
                                "(a built-in kind must validate; a custom resource goes into EXPECTED_UNKNOWN)")
            continue
        validated += 1
        if key in EXPECTED_UNKNOWN:
            problems.append(f"{_name(obj)}: {key[0]} {key[1]} is in EXPECTED_UNKNOWN but has a {version} schema now")
        problems += [f"{_name(obj)}: {error}" for error in errors]
    return problems, validated


def _report(where: str, version: str, problems: list[str]) -> str:
    return f"{where} against Kubernetes {version} (strict):\n  " + "\n  ".join(problems)


# --- the tests --------------------------------------------------------------------------------------------------


def test_versions_run_from_1_30_to_the_newest_shipped() -> None:
    assert OLDEST in VERSIONS
    assert VERSIONS[-1] == kv.major_minor(kv.latest_version())
    minors = [_minor(version) for version in VERSIONS]
    assert minors == [(1, minor) for minor in range(30, 30 + len(minors))], "a Kubernetes minor version is missing"


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (kubectl kustomize renders the overlays)")
@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_overlay_validates_strictly(version: str, overlay: str) -> None:
    problems, validated = _problems(_render(overlay), version)
    assert not problems, _report(f"manifests/overlays/{overlay}", version, problems)
    assert validated >= 10, f"only {validated} objects of {overlay} were validated"


@pytest.mark.parametrize("path", FILES, ids=lambda path: str(path.relative_to(REPO)))
@pytest.mark.parametrize("version", VERSIONS)
def test_shipped_file_validates_strictly(version: str, path: Path) -> None:
    problems, _ = _problems(_documents(path), version)
    assert not problems, _report(str(path.relative_to(REPO)), version, problems)


@pytest.mark.parametrize("version", VERSIONS)
def test_pod_templates_of_the_example_volcano_jobs_validate_strictly(version: str) -> None:
    problems, checked = [], 0
    for path in sorted((REPO / "examples").rglob("*.yaml")):
        for job in _documents(path):
            if (job.get("apiVersion"), job.get("kind")) != ("batch.volcano.sh/v1alpha1", "Job"):
                continue
            for index, task in enumerate(job["spec"].get("tasks", [])):
                checked += 1
                errors = validate_strict_definition(task["template"], "io.k8s.api.core.v1.PodTemplateSpec", version)
                problems += [f"{path.relative_to(REPO)}: {_name(job)} tasks[{index}].template {error}"
                             for error in errors]
    assert not problems, _report("examples/ Volcano Job pod templates", version, problems)
    assert checked, "no Volcano Job task in examples/"


def test_every_expected_unknown_kind_is_still_shipped_and_still_unknown() -> None:
    objects = [document for path in FILES for document in _documents(path)]
    if KUBECTL is not None:
        objects += [obj for overlay in OVERLAYS for obj in _render(overlay)]
    seen = {(obj.get("apiVersion"), obj.get("kind")) for obj in objects}
    assert not set(EXPECTED_UNKNOWN) - seen, "EXPECTED_UNKNOWN lists kinds nothing ships any more"
    for api_version, kind in EXPECTED_UNKNOWN:
        for version in VERSIONS:
            with pytest.raises(kv.SchemaNotFoundError):
                validate_strict({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}, version)


DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "planted", "namespace": "default", "labels": {"app": "planted"}},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "planted"}},
        "template": {
            "metadata": {"labels": {"app": "planted"}},
            "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
        },
    },
}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_planted_unknown_field_is_reported(version: str) -> None:
    assert validate_strict(DEPLOYMENT, version) == []
    kv.validate(DEPLOYMENT, version, strict=True)  # the package's own entry point agrees
    bad = copy.deepcopy(DEPLOYMENT)
    bad["spec"]["template"]["spec"]["containers"][0]["bogus"] = True
    assert validate_strict(bad, version) == [
        "$.spec.template.spec.containers[0]: Additional properties are not allowed ('bogus' was unexpected)"]
    with pytest.raises(kv.ValidationError, match="'bogus' was unexpected"):
        kv.validate(bad, version, strict=True)


CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"cards": {"type": "integer", "minimum": 0, "default": 0}}}}}},
        }],
    },
}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_crd_is_validated_down_to_its_openapi_schema(version: str) -> None:
    assert validate_strict(CRD, version) == []
    bad = copy.deepcopy(CRD)
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["cards"]["defualt"] = 0
    assert validate_strict(bad, version) == [
        "$.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.cards: "
        "Additional properties are not allowed ('defualt' was unexpected)"]


def test_an_unknown_version_is_refused() -> None:
    with pytest.raises(kv.VersionNotSupportedError):
        validate_strict(DEPLOYMENT, "1.2")


@pytest.mark.parametrize("version", VERSIONS)
def test_volcano_crds_after_our_patch_validate_strictly(version: str) -> None:
    """What `kubectl cardquota crd install` leaves in the cluster: each supported Volcano release's Queue, PodGroup
    and Job CRD (tests/volcano_crds.py) with our additions, as a CustomResourceDefinition object."""
    from volcano_crds import every_crd_and_release, patched_crd

    problems = []
    for crd, release in every_crd_and_release():
        patched = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   **patched_crd(crd, release)}
        problems += [f"{crd} {release}: {message}" for message in validate_strict(patched, version)]
    assert problems == []
