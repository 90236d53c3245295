"""mkdocs hook: one API page per module of `recall_lab` (its generators and proofs included),
and the command reference of `commands.md`.

The pages are generated at build time from the source tree (mkdocstrings renders each module's
docstrings), so a module that is added, split or removed changes the API reference without an
edit here or in `mkdocs.yml`: a hand-written list would break the strict build on every move.
The command reference is typer's own Markdown generator run over the app (every command and
sub-command with every option, its type, default and help), put where `commands.md` holds
`COMMANDS_MARKER`; nothing of it is written by hand.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent
PACKAGES = ("recall_lab",)
SECTIONS = ("recall_lab.generators", "recall_lab.proofs")
# the CLI's typer glue has no library API; its commands are documented in commands.md
SKIP = ("recall_lab.cli", "recall_lab.commands")
COMMANDS_PAGE = "commands.md"
COMMANDS_MARKER = "<!-- the command reference, generated from the CLI by mkdocs_api.py -->"


class _DocstringIndexing(logging.Filter):
    """Drop autorefs' "no cross-reference target" warnings raised from the API pages only.

    Docstrings are written for a terminal, where ``keys[b][h][p]`` is indexing; Markdown reads
    ``[b][h]`` as a reference link. The hand-written pages keep the strict check.
    """

    _API_MISS = re.compile(r"(^|: )api/\S+\.md: .*Could not find cross-reference target")

    def filter(self, record: logging.LogRecord) -> bool:
        return not self._API_MISS.search(record.getMessage())


_FILTER = _DocstringIndexing()


def modules() -> list[str]:
    """Dotted names of every public module, packages first, in file order."""
    names = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(parts)
            skipped = any(name == s or name.startswith(s + ".") for s in SKIP)
            if skipped or any(p.startswith("_") for p in parts):
                continue
            names.append(name)
    return names


def _page(name: str) -> str:
    return "api/" + name.replace(".", "/") + ".md"


def on_config(config):
    """Append the API reference to the nav: one section per package, one page per module."""
    # strict mode counts warnings in a handler on the "mkdocs" logger, added before on_config
    for handler in logging.getLogger("mkdocs").handlers:
        handler.addFilter(_FILTER)
    sections: dict[str, list] = {}
    for name in modules():  # the generators and the proofs keep sections of their own
        key = next((s for s in SECTIONS if name == s or name.startswith(s + ".")), PACKAGES[0])
        sections.setdefault(key, []).append({name: _page(name)})
    config["nav"].append({"API reference": [{pkg: pages} for pkg, pages in sections.items()]})
    return config


def on_files(files, config):
    for name in modules():
        files.append(File.generated(config, _page(name), content=f"# `{name}`\n\n::: {name}\n"))
    return files


def cli_command():
    """The `recall-lab` app as its click group (the app's own command objects, as typer builds
    them for a run)."""
    import typer

    from recall_lab.cli import app

    return app, typer.main.get_command(app)


def command_paths() -> list[tuple[str, object]]:
    """("recall-lab sub [subsub]", command) for every command of the app, sub-groups walked,
    in the order `--help` lists them."""
    _, group = cli_command()
    out: list[tuple[str, object]] = []

    def walk(cmd, path: str) -> None:
        out.append((path, cmd))
        for name in getattr(cmd, "commands", None) and cmd.list_commands(None) or ():
            walk(cmd.get_command(None, name), f"{path} {name}")

    walk(group, "recall-lab")
    return out


def command_reference() -> str:
    """The command reference in Markdown: typer's docs generator over the app."""
    import typer
    from typer.cli import MARKUP_MODE_KEY, get_docs_for_click

    app, group = cli_command()
    ctx = typer.Context(group, info_name="recall-lab")
    ctx.ensure_object(dict)[MARKUP_MODE_KEY] = getattr(app, "rich_markup_mode", None)
    return get_docs_for_click(obj=group, ctx=ctx, indent=1, name="recall-lab").strip() + "\n"


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == COMMANDS_PAGE:
        if COMMANDS_MARKER not in markdown:
            raise ValueError(f"{COMMANDS_PAGE} lost its marker {COMMANDS_MARKER!r}")
        markdown = markdown.replace(COMMANDS_MARKER, command_reference())
    return markdown
