"""The documentation site (docs/, mkdocs.yml) builds with ``mkdocs build --strict``, and the README gets a user to
the right page: a broken link, a missing anchor, a page left out of the nav or a README link to nothing fails.

This directory is outside tests/unit and tests/integration, so ``make test`` runs it once (not again in the pass
against the compiled core, which changes nothing here)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from user_docs import REPO, section, user_docs

MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``mkdocs build --strict`` writes it (strict: every warning, such as a broken link, fails it)."""
    built = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f",
                             str(REPO / "mkdocs.yml"), "-d", str(built)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return built


def nav_pages(entries: list[Any]) -> Iterator[str]:
    for entry in entries:
        value = entry if isinstance(entry, str) else next(iter(entry.values()))
        if isinstance(value, list):
            yield from nav_pages(value)
        else:
            yield value


def page_html(site: Path, page: str) -> str:
    """The built HTML of docs/<page> (use_directory_urls: docs/x.md is x/index.html)."""
    stem = page.removesuffix(".md")
    return (site / ("index.html" if stem == "index" else f"{stem}/index.html")).read_text()


def test_the_site_builds_strict_and_its_nav_lists_every_page_once(site: Path) -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["strict"] is True
    listed = list(nav_pages(config["nav"]))
    assert sorted(listed) == sorted(path.name for path in (REPO / "docs").glob("*.md"))
    assert len(set(listed)) == len(listed)
    for page in listed:
        assert "<h1" in page_html(site, page), page


def test_every_link_of_the_readme_reaches_a_file_and_its_anchor(site: Path) -> None:
    """The README is not part of the site, so mkdocs does not check it: its links to docs/ pages and their anchors
    are checked here against the built site."""
    readme = (REPO / "README.md").read_text()
    links = [link for link in MARKDOWN_LINK.findall(readme) if "://" not in link]
    assert links
    for link in links:
        target, _, anchor = link.partition("#")
        assert (REPO / target).exists(), link
        if anchor:
            assert target.startswith("docs/"), link
            assert f'id="{anchor}"' in page_html(site, target.removeprefix("docs/")), link


def test_the_readme_is_one_short_page_that_names_every_reference_page() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    linked = {link.partition("#")[0] for link in MARKDOWN_LINK.findall(readme)}
    for page in (REPO / "docs").glob("*.md"):
        if page.name != "index.md":
            assert f"docs/{page.name}" in linked, page.name


def test_the_readme_installs_in_at_most_ten_steps_each_saying_what_it_changes() -> None:
    steps = re.split(r"^\d+\. ", section("Install on a cluster running Volcano"), flags=re.MULTILINE)[1:]
    assert 5 <= len(steps) <= 10
    for step in steps:
        assert "change" in step.lower(), step
    assert "https://github.com/volcano-sh/volcano/pull/4706" in (REPO / "README.md").read_text()


def test_where_the_docs_say_mkdocs_serve_they_say_how_to_get_mkdocs(tmp_path: Path) -> None:
    """Issue 43: "built as a site with MkDocs (`mkdocs serve`)", but MkDocs comes only with the test extra. Each
    paragraph (or table row) naming ``mkdocs serve`` says how to get it: ``make docs-serve``, whose dry run installs
    the test extra (which has mkdocs) into the virtualenv before it serves, or ``pip install -e '.[test]'``."""
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(re.match(r"mkdocs\b", requirement) for requirement in extra)
    named = 0
    for name, text in user_docs().items():
        for paragraph in re.split(r"\n\s*\n|\n(?=\|)", text):
            if "mkdocs serve" in paragraph or "docs-serve" in paragraph:
                named += 1
                assert "make docs-serve" in paragraph or "pip install -e '.[test]'" in paragraph, (name, paragraph)
    assert named >= 2
    venv = tmp_path / "venv"
    planned = subprocess.run(["make", "-n", "--no-print-directory", "docs-serve", f"VENV={venv}"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.splitlines()
    install = next(index for index, line in enumerate(planned) if "install -e '.[test]'" in line)
    assert planned[-1] == f"{venv}/bin/mkdocs serve"
    assert install < len(planned) - 1
