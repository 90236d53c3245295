"""The documentation site builds in strict mode, so a broken link or a missing page fails CI.

`make docs` runs the same build; `make test` installs mkdocs, mkdocs-material and mkdocstrings.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250  # the README is a front door, the rest lives in docs/

needs_mkdocs = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("mkdocs", "material", "mkdocstrings")),
    reason="mkdocs, mkdocs-material or mkdocstrings not installed (pip install -e '.[docs]')",
)


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    # a subprocess, as `make docs` runs it: mkdocs sets up its logging (which strict mode
    # counts warnings with) per process; cwd = root, where the changelog snippet is found
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@needs_mkdocs
def test_site_builds_strict(tmp_path):
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    site = tmp_path / "site"
    # the pages users navigate and the results reports
    for page in ("index.html", "tasks.html", "seeds/003-attamba.html", "changelog.html",
                 "results/capacity/index.html"):
        assert (site / page).is_file(), page
    assert (site / "results/capacity/report-bars.png").is_file()
    # the changelog page includes CHANGELOG.md's text, not the snippet marker
    changelog = (site / "changelog.html").read_text()
    assert "Round two" in changelog and "--8&lt;--" not in changelog
    # one API page per module, rendered from its docstring by mkdocstrings
    spec = importlib.util.spec_from_file_location("mkdocs_api", ROOT / "mkdocs_api.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    modules = hook.modules()
    assert "recall_lab.generators.vocab" in modules and "recall_lab.ssm" in modules
    for name in modules:
        assert (site / "api" / (name.replace(".", "/") + ".html")).is_file(), name
    vocab = (site / "api/recall_lab/generators/vocab.html").read_text()
    assert "The token layout" in vocab
    # the command reference, generated from the CLI: every command, sub-groups included
    commands = (site / "commands.html").read_text()
    assert hook.COMMANDS_MARKER not in commands
    for path, _ in hook.command_paths():
        assert f"<code>{path}</code>" in commands, path


@needs_mkdocs
def test_broken_link_fails_the_build(tmp_path):
    # the same configuration over a copy of docs/ with one dead link: strict mode must refuse it
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    with (docs / "tasks.md").open("a") as f:
        f.write("\nSee [the missing page](no-such-page.md).\n")
    (tmp_path / "mkdocs.yml").write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\n")
    # the hook resolves beside the child config; a copy there generates no API pages (no
    # packages beside it), which keeps this build short
    shutil.copy(ROOT / "mkdocs_api.py", tmp_path / "mkdocs_api.py")
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr


def _hook():
    spec = importlib.util.spec_from_file_location("mkdocs_api", ROOT / "mkdocs_api.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


@needs_mkdocs
def test_command_reference_lists_every_option():
    """The generated page names every command (walked from the click group, sub-groups
    included) and every option of it with its help; the page in docs/ holds only the marker."""
    hook = _hook()
    page = hook.command_reference()
    paths = hook.command_paths()
    assert len(paths) > 10 and "recall-lab train" in dict(paths)
    sections = page.split("\n#")
    for path, cmd in paths:
        section = next((s for s in sections if s.lstrip("#").strip().startswith(f"`{path}`")),
                       None)
        assert section is not None, path
        for param in cmd.params:
            if param.param_type_name == "option" and not param.hidden:
                assert f"{param.opts[-1]}" in section, (path, param.opts)
                if param.help:
                    words = param.help.replace("\\[", "[").split()[:3]
                    text = " ".join(html.unescape(section).split())
                    assert " ".join(words) in text, (path, param.opts)
    assert (ROOT / "docs" / hook.COMMANDS_PAGE).read_text().count(hook.COMMANDS_MARKER) == 1
    # an added option shows up without an edit: the page is made from the app, not by hand
    import typer

    from recall_lab.cli import app

    extra = typer.Typer()
    extra.registered_commands += app.registered_commands

    @extra.command("made-up")
    def made_up(flag: int = typer.Option(7, help="A flag no one wrote down.")) -> None:
        """An invented command."""

    hook.cli_command = lambda: (extra, typer.main.get_command(extra))
    made = hook.command_reference()
    assert "recall-lab made-up" in made and "A flag no one wrote down." in made
    assert "[default: 7]" in made


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)
    assert "## What the lab has measured" in lines
    # the two set-up commands stay
    text = "\n".join(lines)
    assert "make demo" in text and "make test" in text
    # the README is read on the forge, outside the site's strict build: check its own links
    targets = re.findall(r"\]\(([^)#\s]+)[^)]*\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links into docs/"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing
