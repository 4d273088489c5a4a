"""Counting calls and measuring memory in tests and benchmarks: the work a piece of code does, not its time."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest


def counting(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> Callable[[], int]:
    """Count the calls of ``owner.name`` from now on; returns a function that says how many so far."""
    original = getattr(owner, name)
    count = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return lambda: count


def peak_bytes(action: Callable[[], object]) -> int:
    """Memory ``action`` allocated at its peak beyond what was allocated before it (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        action()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def kept_bytes(build: Callable[[], object]) -> tuple[int, object]:
    """Memory still allocated once ``build`` has returned and the garbage it made is collected (tracemalloc), and
    what it built (kept alive by the caller while it counts)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        built = build()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, built
    finally:
        tracemalloc.stop()
