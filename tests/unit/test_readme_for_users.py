"""The README and the examples speak to users (issue 18 item 15): no "the seeds'", no design files that are not in
the repository; and the project has the LICENSE its pyproject declares."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
"""Of https://www.apache.org/licenses/LICENSE-2.0.txt, the standard text (202 lines)."""


def user_texts() -> dict[str, str]:
    paths = [REPO / "README.md", *sorted((REPO / "examples").rglob("*.yaml"))]
    return {str(path.relative_to(REPO)): path.read_text() for path in paths}


def test_no_seeds_in_what_users_read() -> None:
    for name, text in user_texts().items():
        assert not re.search(r"\bseeds?\b", text, re.IGNORECASE), name


def test_every_markdown_file_named_is_in_the_repository() -> None:
    for name, text in user_texts().items():
        for named in set(re.findall(r"[\w./-]+\.md\b", text)):
            assert (REPO / named).exists() or (REPO / Path(name).parent / named).exists(), f"{name}: {named}"


def test_the_license_is_the_one_pyproject_declares() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"]
    assert declared == {"text": "Apache-2.0"}
    license_text = (REPO / "LICENSE").read_bytes()
    assert hashlib.sha256(license_text).hexdigest() == APACHE_2_0_SHA256
    assert license_text.lstrip().startswith(b"Apache License\n")
