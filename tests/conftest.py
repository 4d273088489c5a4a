"""Test-wide settings: hypothesis profiles (``--slow`` for long property runs), and the kmock cluster fixture."""

from __future__ import annotations

import os
from typing import Any

import pytest
from builders import gpu_node
from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=200, deadline=None)
settings.register_profile("ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("slow", max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", help="run property tests with 10,000 examples each")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--slow"):
        settings.load_profile("slow")
    elif os.environ.get("CI"):
        settings.load_profile("ci")
    else:
        settings.load_profile("default")


@pytest.fixture
def empty_volcano_kmock(kmock: Any) -> Any:
    """kmock serving core kinds and Volcano's queues and podgroups, empty."""
    kmock.resources.load_bundled()
    for plural, kind in (("queues", "Queue"), ("podgroups", "PodGroup")):
        kmock.resources[f"scheduling.volcano.sh/v1beta1/{plural}"] = {
            "namespaced": plural == "podgroups", "kind": kind, "singular": kind.lower(),
            "verbs": ["list", "watch", "get", "patch", "create", "delete"], "subresources": ["status"]}
    return kmock


@pytest.fixture
def volcano_kmock(empty_volcano_kmock: Any) -> Any:
    """kmock serving core kinds and Volcano's queues and podgroups, with one A100 node."""
    empty_volcano_kmock.objects["v1/nodes", None, "a100-1"] = gpu_node("a100-1", "NVIDIA-A100", 8)
    return empty_volcano_kmock
