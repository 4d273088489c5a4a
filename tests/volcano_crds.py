"""Volcano's own Queue, PodGroup and Job CRDs, per release, rebuilt from the facts in tests/data.

tests/data/volcano_crd_facts.json holds, for each supported Volcano release, every value of the three CRDs but their
descriptions (written by tests/tools/volcano_crd_facts.py from volcano-sh/volcano config/crd/volcano/bases at the
tags it names). ``upstream_crd`` rebuilds a CRD from them, so tests can apply cardquota's patch to what a user of
that Volcano release really has installed, and check that every upstream fact survives it.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch

from cardquota.core import crd_additions

FACTS_FILE = Path(__file__).resolve().parent / "data" / "volcano_crd_facts.json"
LEFT_OUT = {"description", "creationTimestamp", "annotations"}
"""Keys whose values are prose or bookkeeping, not rules a cluster enforces."""
_NAMED = re.compile(r"^\[name=(.*)\]$")
_INDEXED = re.compile(r"^\[(\d+)\]$")


def flatten(node: Any, path: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every leaf of ``node`` as ``{"a/b/[name=x]/c": value}``: lists of named objects by name, other lists of
    objects by index, lists of scalars as one leaf; empty maps are leaves too (``subresources: {}``)."""
    facts: dict[str, Any] = {}
    if isinstance(node, dict):
        if not node:
            facts["/".join(path)] = {}
        for key, value in node.items():
            assert "/" not in key, key
            if key not in LEFT_OUT:
                facts.update(flatten(value, (*path, key)))
    elif isinstance(node, list) and node and all(isinstance(item, dict) and "name" in item for item in node):
        for item in node:
            facts.update(flatten(item, (*path, f"[name={item['name']}]")))
    elif isinstance(node, list) and any(isinstance(item, (dict, list)) for item in node):
        for index, item in enumerate(node):
            facts.update(flatten(item, (*path, f"[{index}]")))
    else:
        facts["/".join(path)] = node
    return facts


@functools.cache
def _document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(FACTS_FILE.read_text())
    return document


def releases() -> list[str]:
    return list(_document()["releases"])


def facts(crd: str, release: str) -> dict[str, Any]:
    """The facts of ``crd`` in ``release``: path -> value."""
    assert release in releases(), release
    return {path: value for path, value, found_in in _document()["crds"][crd]
            if found_in == "all" or release in found_in}


def _child(container: Any, segment: str, make: type) -> Any:
    named, indexed = _NAMED.match(segment), _INDEXED.match(segment)
    if named or indexed:
        assert isinstance(container, list)
        if named:
            for item in container:
                if item.get("name") == named.group(1):
                    return item
            container.append({"name": named.group(1)})
            return container[-1]
        position = int(indexed.group(1))  # type: ignore[union-attr]
        while len(container) <= position:
            container.append(make())
        return container[position]
    assert isinstance(container, dict)
    return container.setdefault(segment, make())


def _unflatten(found: dict[str, Any]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path, value in found.items():
        segments = path.split("/")
        node: Any = root
        for segment, following in itertools.pairwise(segments):
            node = _child(node, segment, list if following.startswith("[") else dict)
        last = segments[-1]
        if last.startswith("["):
            _child(node, last, dict)
            named, indexed = _NAMED.match(last), _INDEXED.match(last)
            position = int(indexed.group(1)) if indexed else next(i for i, item in enumerate(node)
                                                              if item.get("name") == named.group(1))  # type: ignore[union-attr]
            node[position] = copy.deepcopy(value)
        else:
            node[last] = copy.deepcopy(value)
    return root


@functools.cache
def _upstream(crd: str, release: str) -> str:
    rebuilt = _unflatten(facts(crd, release))
    assert flatten(rebuilt) == facts(crd, release), "the facts rebuild into the same CRD"
    return json.dumps(rebuilt)


def upstream_crd(crd: str, release: str, resource_version: str = "") -> dict[str, Any]:
    """Volcano's ``crd`` as ``release`` installs it (descriptions left out), as the API server would return it."""
    rebuilt: dict[str, Any] = json.loads(_upstream(crd, release))
    if resource_version:
        rebuilt["metadata"]["resourceVersion"] = resource_version
    return rebuilt


def patched_crd(crd: str, release: str) -> dict[str, Any]:
    """``upstream_crd`` after cardquota's install patch."""
    installed = upstream_crd(crd, release, resource_version="1")
    patched: dict[str, Any] = jsonpatch.apply_patch(installed, crd_additions.install_patch(installed))
    return patched


def every_crd_and_release() -> Iterator[tuple[str, str]]:
    for crd in crd_additions.CRD_NAMES:
        for release in releases():
            yield crd, release
