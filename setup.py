"""The optional compiled build: with ``CARDQUOTA_COMPILE=1`` the pure core is compiled to C extensions with mypyc.

    pip install 'mypy>=2.4,<3' types-PyYAML 'setuptools>=77'          # BUILD_REQUIREMENTS
    CARDQUOTA_COMPILE=1 pip wheel --no-build-isolation --no-deps .      # a wheel for this Python and platform

Everything else about the package is in pyproject.toml; without the variable this file changes nothing (a pure
wheel, as before). The compiled modules behave as the interpreted ones: ``make test-compiled`` runs the unit and
integration suites against them. The Dockerfile builds the image with them; the README's "Compiled core" section
says what it buys (admission CPU per review) and what it costs (a C compiler and ~2 minutes of build).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup

CORE = Path("cardquota") / "core"
INTERPRETED = {
    CORE / "hashable.py": "subclasses dict, which mypyc compiles without complaint but wrongly (== between equals)",
    CORE / "doctor.py": "reads an installation once per CLI run; its tests replace its checks one by one",
}
"""Core modules left interpreted, each with the reason. Every other module of the core is compiled."""
WEBHOOKS = Path("cardquota") / "webhooks"
RUNTIME = Path("cardquota") / "runtime"
COMPILED_EDGES = (WEBHOOKS / "review.py", WEBHOOKS / "admission.py", RUNTIME / "latency.py")
"""Outside the core, the modules every admission runs through besides the policy — reading the review and writing
the answer; the decision per kind and failure mode; the latency it observes — are compiled too (none imports an I/O
library)."""
BUILD_REQUIREMENTS = ("mypy>=2.4,<3", "types-PyYAML", "setuptools>=77")
"""What the compiled build needs installed (mypyc comes with mypy; it type-checks the core, hence the stubs)."""


def compiled_modules() -> list[str]:
    return sorted([*(str(path) for path in CORE.rglob("*.py") if path not in INTERPRETED), *map(str, COMPILED_EDGES)])


def extensions() -> list[object]:
    if os.environ.get("CARDQUOTA_COMPILE", "") not in {"1", "true", "yes"}:
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        wanted = " ".join(f"'{requirement}'" for requirement in BUILD_REQUIREMENTS)
        sys.exit(f"CARDQUOTA_COMPILE=1 needs mypy in the build environment: pip install {wanted}, then build with "
                 "--no-build-isolation")
    return list(mypycify(compiled_modules(), opt_level="3"))


if __name__ == "__main__":  # as setuptools runs it (tests import this file for compiled_modules)
    setup(ext_modules=extensions())
