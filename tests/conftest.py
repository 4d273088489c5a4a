"""Test-wide settings: hypothesis profiles (``--slow`` for long property runs)."""

from __future__ import annotations

import os

import pytest
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
