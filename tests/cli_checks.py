"""Shared checks of the command line's promises: bad input ends in one `error:` line and exit 2,
and nothing on disk changes."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from recall_lab.cli import app

runner = CliRunner()


def fails_with(args, needle: str) -> str:
    """Run the CLI with `args`; assert exit 2, exactly one stderr line starting with `error:`
    that contains `needle`, and no traceback. Returns that line."""
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in r.output
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` with its bytes (to show that nothing changed)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}
