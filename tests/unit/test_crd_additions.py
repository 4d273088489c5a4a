"""cardquota's additions to Volcano's Queue, PodGroup and Job CRDs, applied to what each supported Volcano release
really installs (rebuilt from tests/data/volcano_crd_facts.json: volcano-sh/volcano config/crd/volcano/bases at
v1.13.0, v1.14.4, v1.15.1, v1.16.0-alpha.1 and master): every upstream fact survives, the patch only adds, it is
idempotent, undone exactly by the uninstall patch, and refused by the API server when the CRD moved under it."""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from volcano_crds import every_crd_and_release, facts, flatten, patched_crd, releases, upstream_crd

from cardquota.core import crd_additions
from cardquota.core.crd_additions import ADDITIONS, JOB_CRD, PODGROUP_CRD, QUEUE_CRD, State

CASES = list(every_crd_and_release())
VERSION_OF = {QUEUE_CRD: "v1beta1", PODGROUP_CRD: "v1beta1", JOB_CRD: "v1alpha1"}


def _ids(case: tuple[str, str]) -> str:
    return f"{case[0].split('.')[0]}-{case[1]}"


def test_the_facts_cover_every_supported_release() -> None:
    assert releases() == ["v1.13.0", "v1.14.4", "v1.15.1", "v1.16.0-alpha.1", "master"]
    for crd, release in CASES:
        assert len(facts(crd, release)) > 50, (crd, release)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_every_upstream_fact_survives_the_patch(case: tuple[str, str]) -> None:
    crd, release = case
    after = flatten(patched_crd(crd, release))
    kept = {path: value for path, value in facts(crd, release).items() if after.get(path) == value}
    assert kept == facts(crd, release)  # 100 % of upstream's paths, defaults, validations, subresources, columns


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_the_patch_only_adds_our_nodes(case: tuple[str, str]) -> None:
    crd, release = case
    added = set(flatten(patched_crd(crd, release))) - set(facts(crd, release)) - {"metadata/resourceVersion"}
    version = f"spec/versions/[name={VERSION_OF[crd]}]"
    ours = [f"{version}/schema/openAPIV3Schema/properties/spec/properties/dra/",
            *(f"{version}/additionalPrinterColumns/[name={a.column['name']}]/" for a in ADDITIONS[crd]
              if isinstance(a, crd_additions.ColumnAddition))]
    assert added
    assert [path for path in added if not any(path.startswith(prefix) for prefix in ours)] == []


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_install_is_idempotent_and_uninstall_restores_upstream_exactly(case: tuple[str, str]) -> None:
    crd, release = case
    patched = patched_crd(crd, release)
    assert crd_additions.install_patch(patched) == []
    assert crd_additions.missing(patched) == []
    assert {state.state for state in crd_additions.inspect(patched)} == {State.PRESENT}
    removed = jsonpatch.apply_patch(patched, crd_additions.uninstall_patch(patched))
    assert removed == upstream_crd(crd, release, resource_version="1")
    assert crd_additions.uninstall_patch(removed) == []
    assert [s.label for s in crd_additions.missing(removed)] == [a.label for a in ADDITIONS[crd]]


def test_volcano_podgroup_has_no_status_subresource_and_keeps_none() -> None:
    """Volcano's scheduler writes PodGroup status with a plain update (pkg/scheduler/cache/cache.go,
    PodGroups().Update): a status subresource would drop those writes and no Volcano job would start."""
    for release in releases():
        patched = patched_crd(PODGROUP_CRD, release)
        assert patched["spec"]["versions"][0]["subresources"] == {}, release


def test_queue_keeps_volcano_fields_that_a_whole_crd_replacement_lost() -> None:
    """Since v1.14: spec.dequeueStrategy (enum fifo|traverse, default traverse); weight defaults to 1."""
    spec = patched_crd(QUEUE_CRD, "v1.15.1")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["dequeueStrategy"] == {"type": "string", "enum": ["fifo", "traverse"],
                                                      "default": "traverse"}
    assert spec["properties"]["weight"]["default"] == 1
    assert "dra" in spec["properties"]
    assert "dequeueStrategy" not in patched_crd(QUEUE_CRD, "v1.13.0")["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"]["properties"]["spec"]["properties"]


def test_the_patch_is_guarded_against_a_crd_changed_since_it_was_read() -> None:
    installed = upstream_crd(QUEUE_CRD, "v1.15.1", resource_version="41")
    patch = crd_additions.install_patch(installed)
    assert patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}
    assert {"op": "test", "path": "/spec/versions/0/name", "value": "v1beta1"} in patch
    moved = copy.deepcopy(installed)
    moved["spec"]["versions"].insert(0, {"name": "v1", "served": False, "storage": False})
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, patch)
    newer = copy.deepcopy(installed)
    newer["metadata"]["resourceVersion"] = "42"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(newer, patch)


def test_a_spec_dra_that_volcano_itself_defines_is_left_alone() -> None:
    """If a Volcano release ships its own spec.dra (the DRA queue quota design is upstream's proposal), its
    schema wins: we neither overwrite nor remove it, and say so."""
    installed = upstream_crd(QUEUE_CRD, "master", resource_version="1")
    theirs = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    installed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["dra"] = theirs
    states = {state.label: state.state for state in crd_additions.inspect(installed)}
    assert states == {"schema spec.dra": State.FOREIGN, "column CARD-QUOTA": State.MISSING,
                      "column CARD-USAGE": State.MISSING}
    patched = jsonpatch.apply_patch(installed, crd_additions.install_patch(installed))
    assert patched["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "dra"] == theirs
    removed = jsonpatch.apply_patch(patched, crd_additions.uninstall_patch(patched))
    assert removed == installed


def test_a_column_of_the_same_name_but_another_meaning_is_left_alone() -> None:
    installed = upstream_crd(PODGROUP_CRD, "v1.15.1")
    foreign: dict[str, Any] = {"name": "CARD-REQUEST", "type": "string", "jsonPath": ".spec.cards"}
    installed["spec"]["versions"][0]["additionalPrinterColumns"].append(foreign)
    assert crd_additions.install_patch(installed) == []
    assert crd_additions.uninstall_patch(installed) == []
    assert [s.state for s in crd_additions.inspect(installed)] == [State.FOREIGN]


def test_only_a_half_installed_crd_gets_the_rest() -> None:
    installed = patched_crd(QUEUE_CRD, "v1.14.4")
    columns = installed["spec"]["versions"][0]["additionalPrinterColumns"]
    installed["spec"]["versions"][0]["additionalPrinterColumns"] = [c for c in columns if c["name"] != "CARD-USAGE"]
    patch = crd_additions.install_patch(installed)
    assert [op for op in patch if op["op"] != "test"] == [
        {"op": "add", "path": "/spec/versions/0/additionalPrinterColumns/-",
         "value": dict(next(a.column for a in ADDITIONS[QUEUE_CRD] if a.label == "column CARD-USAGE"))}]


def test_unserved_versions_and_unknown_crds_are_not_touched() -> None:
    installed = upstream_crd(QUEUE_CRD, "v1.15.1")
    installed["spec"]["versions"][0]["served"] = False
    assert crd_additions.install_patch(installed) == []
    assert crd_additions.inspect(installed) == []
    other = upstream_crd(QUEUE_CRD, "v1.15.1")
    other["metadata"]["name"] = "queues.example.com"
    assert crd_additions.install_patch(other) == []


@pytest.mark.parametrize("broken", [{}, {"spec": None}, {"metadata": {"name": QUEUE_CRD}, "spec": {"versions": "x"}},
                                    {"metadata": {"name": QUEUE_CRD}, "spec": {"versions": [{"name": "v1beta1"}]}}])
def test_malformed_crds_give_an_answer_not_a_crash(broken: dict[str, Any]) -> None:
    states = crd_additions.inspect(broken)
    assert all(state.state in {State.UNREACHABLE, State.MISSING} for state in states)
    patch = crd_additions.install_patch(broken)
    assert all(not op["path"].endswith("/dra") for op in patch)


def test_a_schema_without_spec_properties_gets_them_created() -> None:
    installed: dict[str, Any] = {"metadata": {"name": QUEUE_CRD}, "spec": {"versions": [
        {"name": "v1beta1", "served": True, "schema": {"openAPIV3Schema": {
            "type": "object", "properties": {"spec": {"type": "object"}}}}}]}}
    patched = jsonpatch.apply_patch(installed, crd_additions.install_patch(installed))
    spec = patched["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["dra"] == crd_additions.DRA_SCHEMA
    assert [c["name"] for c in patched["spec"]["versions"][0]["additionalPrinterColumns"]] == ["CARD-QUOTA",
                                                                                           "CARD-USAGE"]
    assert crd_additions.install_patch(patched) == []


# ------------------------------------------------------------------------------- what we ship and tell people to run

REPO = Path(__file__).resolve().parents[2]


def _shipped_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / name for name in listed.split() if name.endswith((".md", ".yaml", ".yml", ".sh")) or
            name in {"Makefile", "Dockerfile"}]


def test_no_file_we_ship_is_a_volcano_crd() -> None:
    for path in _shipped_text_files():
        if path.suffix in {".yaml", ".yml"} and path.exists() and "templates" not in path.relative_to(REPO).parts:
            # (a Helm chart's templates are Go templates, not YAML: the chart's rendered objects are checked in
            # tests/unit/test_chart.py, which renders every option)
            for document in yaml.safe_load_all(path.read_text()):
                if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                    assert document["metadata"]["name"] not in crd_additions.CRD_NAMES, path


@pytest.mark.parametrize("dangerous", [
    re.compile(r"kubectl (apply|create|replace|delete)\b[^\n]*-f\s+\S*crds/?\s"),
    re.compile(r"kubectl delete\b[^\n]*\bcrds?\b"),
    re.compile(r"kubectl delete\b[^\n]*(queues|podgroups|jobs)\.(scheduling|batch)\.volcano\.sh"),
])
def test_no_instruction_replaces_or_deletes_volcano_crds(dangerous: re.Pattern[str]) -> None:
    """Deleting a CRD deletes every object of it: every Queue, PodGroup and Job."""
    for path in _shipped_text_files():
        if path.exists():
            assert not dangerous.search(path.read_text() + "\n"), path


def test_the_volcano_the_makefile_installs_is_a_release_we_test_against() -> None:
    makefile = (REPO / "Makefile").read_text()
    (version,) = re.findall(r"^VOLCANO_VERSION \?= (\S+)$", makefile, re.MULTILINE)
    assert version in releases()
    deploy = makefile[makefile.index("\ndeploy:"):makefile.index("\nundeploy:")]
    assert "kubectl-cardquota crd install" in deploy
    assert "apply -f" not in deploy


@given(case=st.sampled_from(CASES), drop=st.sets(st.integers(min_value=0, max_value=2)), junk=st.booleans())
def test_any_partial_state_installs_to_the_patched_crd_and_uninstalls_to_upstream(
        case: tuple[str, str], drop: set[int], junk: bool) -> None:
    """Whatever part of our additions a CRD lost (and whatever unreadable column someone added), install brings
    back exactly the patched CRD and uninstall exactly upstream's (plus what was not ours)."""
    crd, release = case
    patched = patched_crd(crd, release)
    version = patched["spec"]["versions"][0]
    ours = ADDITIONS[crd]
    for position in sorted(drop, reverse=True):
        if position >= len(ours):
            continue
        addition = ours[position]
        if isinstance(addition, crd_additions.ColumnAddition):
            version["additionalPrinterColumns"].remove(dict(addition.column))
        else:
            del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][addition.name]
    if junk:
        version["additionalPrinterColumns"].insert(0, "not a column")
    repaired = jsonpatch.apply_patch(patched, crd_additions.install_patch(patched))
    assert [s.label for s in crd_additions.missing(repaired)] == []
    if not junk:  # (a list holding a non-object is addressed by index, not by name: the paths differ)
        after = flatten(repaired)
        assert {p: v for p, v in facts(crd, release).items() if after.get(p) == v} == facts(crd, release)
    removed = jsonpatch.apply_patch(repaired, crd_additions.uninstall_patch(repaired))
    upstream = upstream_crd(crd, release, resource_version="1")
    if junk:
        upstream["spec"]["versions"][0]["additionalPrinterColumns"].insert(0, "not a column")
    assert removed == upstream
