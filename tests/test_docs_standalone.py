"""The product stands on its own: the README, the docs, the experiment files, the notebooks and the
code's comments and help name nothing outside the repository (no `../shared/...`, no design notes
beside it), no paper by its file number ("seed 004", "paper 003_..."), and no tracker number
("issue 26"). Papers are named by the short names of docs/references.md.

`LEAD_CLEANS_LAST` lists the offences of files being rewritten by others at the time this test
was written; it may only shrink (an entry whose file is clean fails the test until removed).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What the product is made of (CHANGELOG.md keeps its history, in words, and is not scanned).
PRODUCT_GLOBS = (
    "README.md", "mkdocs.yml", "mkdocs_api.py", "docs/**/*.md", "experiments/**/*.toml",
    "notebooks/*.ipynb", "recall_lab/**/*.py", "recall_lab/**/*.c", "recall_lab/**/*.h",
    "generators/*.py", "proofs/*.py",
)

OFFENCES = {
    "a path outside the repository": re.compile(
        r"\.\./shared\b|(?<![\w./-])shared/|/work/shared|\b(?:DESIGN|SCIENCE|MECHANISMS)\.md\b"),
    "a paper by its file number": re.compile(
        r"\b(?:seeds?|papers?) 00[0-4]\b|\b00[0-4]_(?:[0-9a-f]{16}|…)", re.IGNORECASE),
    "a tracker number": re.compile(r"\bissues? #?\d+\b", re.IGNORECASE),
}

# Files others edit now; the lead cleans them last. path -> offending lines found when listed.
LEAD_CLEANS_LAST: dict[str, int] = {}

LINK = re.compile(r"\]\(([^)\s#]+)")
CODE_PATH = re.compile(r"`(\.\./[^`\s]*)`")


def product_files() -> list[Path]:
    files = {p for g in PRODUCT_GLOBS for p in ROOT.glob(g) if p.is_file()}
    return sorted(p for p in files if ".venv" not in p.parts and "site" not in p.parts)


def offences(text: str) -> list[tuple[int, str, str]]:
    """(line number, kind, the offending text) of every offence in `text`."""
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        for kind, pattern in OFFENCES.items():
            found += [(no, kind, m.group(0)) for m in pattern.finditer(line)]
    return found


def links_leaving(path: Path, text: str, root: Path = ROOT) -> list[str]:
    """Relative link targets and `../` paths in Markdown `text` at `path` that resolve outside
    `root`."""
    out = []
    for target in LINK.findall(text) + CODE_PATH.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        resolved = (path.parent / target).resolve()
        if not resolved.is_relative_to(root.resolve()):
            out.append(target)
    return out


def test_the_checks_can_fail(tmp_path):
    text = ("See `../shared/DESIGN.md` and shared/papers/, as in seed 004 Table 1 and\n"
            "paper 003_0da5156041619c0c.txt (issue 26, Issue 24 item 4).\n"
            "Fine: the shared 2-core machine, seeds 0-9, 2_000_000 steps, "
            "the joint-recall paper.\n")
    kinds = [k for _, k, _ in offences(text)]
    assert kinds.count("a path outside the repository") == 3
    assert kinds.count("a paper by its file number") == 2
    assert kinds.count("a tracker number") == 2
    assert all(no in (1, 2) for no, _, _ in offences(text))
    page = tmp_path / "repo" / "docs" / "page.md"
    page.parent.mkdir(parents=True)
    md = "[in](../README.md) [out](../../x.md) `../../../etc` [web](https://a.b/../c)"
    assert links_leaving(page, md, tmp_path / "repo") == ["../../x.md", "../../../etc"]


def test_product_stands_alone():
    bad = []
    for path in product_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel in LEAD_CLEANS_LAST:
            continue
        text = path.read_text(encoding="utf-8")
        bad += [f"{rel}:{no}: {kind}: {what!r}" for no, kind, what in offences(text)]
        if path.suffix == ".md":
            bad += [f"{rel}: a link leaving the repository: {t}" for t in links_leaving(path, text)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("rel", sorted(LEAD_CLEANS_LAST))
def test_allow_list_only_shrinks(rel):
    path = ROOT / rel
    found = len({no for no, _, _ in offences(path.read_text(encoding="utf-8"))}) \
        if path.is_file() else 0
    assert found, f"{rel} is clean now: remove it from LEAD_CLEANS_LAST"
    assert found <= LEAD_CLEANS_LAST[rel], (
        f"{rel}: {found} offending lines, more than the {LEAD_CLEANS_LAST[rel]} listed")


def test_readme_and_index_link_the_references():
    for page, link in (("README.md", "docs/references.md"), ("docs/index.md", "references.md")):
        assert f"]({link})" in (ROOT / page).read_text(), page
    refs = (ROOT / "docs/references.md").read_text()
    # every paper of the lab: a short name, its title and an arXiv id or the words saying so
    for short, title in (("the joint-recall paper (HAX)", "Context-Dependent Sparse Attention"),
                         ("DeciMamba", "Exploring the Length Extrapolation Potential of Mamba"),
                         ("Attamba", "Attending To Multi-Token States"),
                         ("SE-Attn (Expansion Span)", "Combining Fading Memory and Retrieval")):
        row = next((r for r in refs.splitlines() if r.startswith(f"| {short} |")), None)
        assert row is not None and title in row, short
        assert re.search(r"\[\d{4}\.\d{5}\]\(https://arxiv\.org/abs/\d{4}\.\d{5}\)", row), short
