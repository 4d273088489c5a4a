"""What users read: the README and the documentation site's pages (docs/*.md), and the sections in them.

The tests that hold the documentation's examples to what the commands print, and its facts to the code, find a
section by its heading wherever it is, so moving a section between the README and docs/ does not lose the test."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"^(#{1,6}) (.+)$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)


def user_doc_paths() -> list[Path]:
    """The README, then every page of the documentation site."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def user_docs() -> dict[str, str]:
    """Each file's path relative to the repository → its text."""
    return {str(path.relative_to(REPO)): path.read_text() for path in user_doc_paths()}


def all_user_docs() -> str:
    """The README and every page, one after the other."""
    return "\n".join(user_docs().values())


def _headings(text: str) -> list[re.Match[str]]:
    """Markdown headings outside code blocks (a ``# comment`` in a shell block is not one)."""
    fenced = [match.span() for match in FENCE.finditer(text)]
    return [match for match in HEADING.finditer(text)
            if not any(start <= match.start() < end for start, end in fenced)]


def section(title: str) -> str:
    """The text under the one heading (any level) whose title starts with ``title``, up to the next heading of the
    same or a higher level; an AssertionError unless exactly one heading in the README and docs/ matches."""
    found = []
    for name, text in user_docs().items():
        headings = _headings(text)
        for index, match in enumerate(headings):
            if match.group(2).startswith(title):
                level = len(match.group(1))
                end = next((later.start() for later in headings[index + 1:] if len(later.group(1)) <= level),
                           len(text))
                found.append((name, text[match.end():end]))
    assert len(found) == 1, f"{title!r}: {len(found)} sections in the README and docs/ ({[n for n, _ in found]})"
    return found[0][1]
