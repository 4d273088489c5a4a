"""kubectl against the end-to-end cluster, and polling until the cluster has converged."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class Kubectl:
    """kubectl against the test cluster; every call has a timeout and returns what kubectl printed."""

    env: dict[str, str]

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, env=self.env,
                                timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def apply(self, manifest: dict[str, Any], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", stdin=json.dumps(manifest), check=check)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        where = ["-n", namespace] if namespace else []
        result: dict[str, Any] = json.loads(self.run("get", kind, name, *where, "-o", "json").stdout)
        return result


def until(probe: Callable[[], T | None], *, timeout: float = 120, every: float = 2, what: str = "") -> T:
    """Poll until ``probe`` returns something other than None (a cluster converges; it does not answer at once)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or probe}")
        time.sleep(every)
