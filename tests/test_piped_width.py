"""Output a person reads fits 100 columns (or COLUMNS) when it is not a terminal, and loses no
content doing so: every word of a wide rendering (250 columns) is found whole in the narrow one,
so nothing was cut ("…") or folded mid-word. Every command's `--help`, and the representative
outputs of the commands that print tables and sentences."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.commands import shell

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
NARROW, WIDE = 100, 250
BOX = re.compile(r"[\u2500-\u257f]")  # rich's table and panel borders


def command_paths(group=None, prefix=()):
    """Every command and sub-command of the app, as argument lists."""
    group = group or typer.main.get_command(app)
    for name, cmd in sorted(group.commands.items()):
        if getattr(cmd, "hidden", False):
            continue
        yield [*prefix, name]
        if hasattr(cmd, "commands"):
            yield from command_paths(cmd, (*prefix, name))


def words(text: str) -> Counter:
    return Counter(BOX.sub(" ", text).split())


def rendered(args: list[str], width: int, monkeypatch) -> str:
    """`recall-lab ARGS` with stdout captured (not a terminal) at `width` columns."""
    monkeypatch.setattr(shell.console, "width", width)
    r = runner.invoke(app, args, env={"COLUMNS": str(width)})
    assert r.exit_code == 0, (args, r.output)
    return r.stdout


def assert_fits_and_whole(args: list[str], monkeypatch) -> None:
    narrow, wide = rendered(args, NARROW, monkeypatch), rendered(args, WIDE, monkeypatch)
    too_wide = [line for line in narrow.splitlines() if len(line) > NARROW]
    assert not too_wide, (args, too_wide[:3])
    assert "…" not in narrow, args
    lost = words(wide) - words(narrow)
    assert not lost, (args, sorted(lost)[:10])


def test_every_help_fits_100_columns_and_keeps_every_word(monkeypatch):
    paths = [[]] + list(command_paths())
    assert len(paths) > 20  # every command, not a few
    for path in paths:
        assert_fits_and_whole([*path, "--help"], monkeypatch)


def test_help_wraps_the_docstrings_at_word_boundaries(monkeypatch):
    """A docstring's own line breaks are gone: `check`'s sentence reads on one line when wide
    (it was printed as 'causality, padding and' / 'length')."""
    wide = rendered(["--help"], WIDE, monkeypatch)
    assert "causality, padding and length" in wide


@pytest.mark.parametrize("args", [["presets"], ["info"], ["experiments", "list"]])
def test_tables_and_lines_fit_100_columns(args, monkeypatch):
    assert_fits_and_whole(args, monkeypatch)


def test_presets_keeps_its_brackets(monkeypatch):
    out = rendered(["presets"], WIDE, monkeypatch)
    assert "[task] generator = NAME with [task.kwargs]" in out


def test_info_names_the_kernels_in_words(monkeypatch):
    out = rendered(["info"], WIDE, monkeypatch)
    assert "{'" not in out and "threads)" not in out.replace("(1 threads)", "")
    assert "(1 threads)" not in out


def test_report_splits_its_table_to_fit(tmp_path, monkeypatch):
    """A committed experiment's report: its many columns become tables that each fit, with the
    group columns repeated, and every number of the wide table is still there."""
    runs = tmp_path / "runs"
    shutil.copytree(ROOT / "docs" / "results" / "mini-ml3" / "runs", runs)
    args = ["report", str(runs), "--out", str(tmp_path / "out"), "--no-plots"]
    assert_fits_and_whole(args, monkeypatch)
    narrow = rendered(args, NARROW, monkeypatch)
    assert narrow.count("the same groups, continued") >= 1


def test_show_and_a_dry_run_fit_100_columns(tmp_path, monkeypatch):
    data = tmp_path / "d"
    r = runner.invoke(app, ["generate", "mini-mqjr", "--out", str(data), "--train", "8",
                            "--valid", "8", "--test", "8", "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert_fits_and_whole(["show", str(data), "--index", "0"], monkeypatch)
    exp = tmp_path / "e.toml"
    exp.write_text('name = "a-rather-long-experiment-name-for-the-title"\n'
                   '[model]\nname = "mamba"\nd_model = 16\n[train]\nsteps = 2\n'
                   '[task]\nlevels = [[3, 3]]\nvalues = 4\n'
                   '[grid]\n"model.name" = ["mamba", "mamba+hax", "transformer"]\n'
                   '"train.lr" = [0.001, 0.003]\n"train.seed" = [0, 1]\n')
    assert_fits_and_whole(["sweep", str(exp), "--out", str(tmp_path / "runs"), "--dry-run",
                           "--no-estimate"],
                          monkeypatch)
