"""The docs' front page (docs/index.md) links every page of the site's navigation (mkdocs.yml's
`nav`): each top-level page, and each section's first page (its index); the README links the
pages a newcomer looks for first."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def nav_pages(text: str) -> list[str]:
    """mkdocs.yml's top-level nav pages: `  - Title: page.md`, and for a section (`  - Title:`
    alone) the first page listed under it."""
    nav = text[text.index("\nnav:\n") + 6:]
    pages, section = [], False
    for line in nav.splitlines():
        if line and not line.startswith(" "):
            break  # the next top-level key
        top = re.match(r"^  - (?:(?:\"[^\"]*\"|[^:]+):\s*)?(\S+\.md)\s*$", line)
        if top:
            pages.append(top.group(1))
            section = False
            continue
        if re.match(r"^  - [^:]+:\s*$", line):
            section = True
            continue
        first = re.match(r"^\s{4,}- (?:(?:\"[^\"]*\"|[^:]+):\s*)?(\S+\.md)\s*$", line)
        if section and first:
            pages.append(first.group(1))
            section = False
    return pages


def test_nav_pages_are_read_from_mkdocs_yml():
    pages = nav_pages((ROOT / "mkdocs.yml").read_text())
    assert pages[0] == "index.md" and "results/index.md" in pages and "seeds/index.md" in pages
    assert all((ROOT / "docs" / p).is_file() for p in pages), pages
    # a section's later pages are not top-level
    assert "results/recipe/README.md" not in pages


def test_the_front_page_links_every_page_of_the_nav():
    index = (ROOT / "docs" / "index.md").read_text()
    linked = set(re.findall(r"\]\(([^)#\s]+)", index))
    missing = [p for p in nav_pages((ROOT / "mkdocs.yml").read_text())
               if p != "index.md" and p not in linked]
    assert not missing, f"docs/index.md does not link {missing}"


def test_the_readme_links_the_pages_a_newcomer_looks_for():
    readme = (ROOT / "README.md").read_text()
    for page in ("python", "mixers", "zoo", "zoology", "place", "gpu", "commands"):
        assert f"](docs/{page}.md)" in readme, page
