"""experiments/ has one folder per study: every experiment file lives in one, its bare name
still finds it (`recall-lab sweep NAME`), names are unique across folders, `experiments list`
groups its rows by folder, `copy` keeps a base in another study resolvable, and an old path
(`experiments/capacity.toml`) fails in one line naming the new place."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.commands import shell
from recall_lab.experiments import shipped
from recall_lab.experiments.grid import load_experiment
from recall_lab.experiments.shipped import NOT_EXPERIMENTS
from recall_lab.generators.errors import RecallLabError

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
runner = CliRunner()


def experiment_files() -> list[Path]:
    return sorted(p for p in EXPERIMENTS.rglob("*.toml")
                  if p.relative_to(EXPERIMENTS).parts[0] not in NOT_EXPERIMENTS)


def test_every_experiment_is_in_a_study_folder_and_names_are_unique():
    files = experiment_files()
    assert len(files) > 40 and not list(EXPERIMENTS.glob("*.toml"))  # none left at the top
    assert all(len(p.relative_to(EXPERIMENTS).parts) == 2 for p in files)
    twice = [n for n, k in Counter(p.stem for p in files).items() if k > 1]
    assert not twice, twice  # a bare name must name one file
    assert shipped.shipped_names() == sorted(p.stem for p in files)


def test_every_bare_name_finds_its_file():
    for path in experiment_files():
        assert shipped.shipped_path(path.stem).resolve() == path.resolve()
        assert shipped.shipped_path(f"{path.stem}.toml").resolve() == path.resolve()
        assert shipped.study(shipped.shipped_path(path.stem)) == path.parent.name


def test_replications_and_tasks_are_not_listed():
    others = [p.stem for d in NOT_EXPERIMENTS for p in (EXPERIMENTS / d).glob("*.toml")]
    assert others and not set(others) & set(shipped.shipped_names())


def test_every_base_resolves_to_an_experiment_file():
    """The `base` chains after the move: each names a file that exists (leak-audit's base is in
    table1/)."""
    files = {p.resolve() for p in experiment_files()}
    across = []
    for path in experiment_files():
        chain = [p.resolve() for p in shipped.base_chain(path)]
        assert all(p in files for p in chain), (path, chain)
        across += [path.stem for p in chain[1:] if p.parent != path.resolve().parent]
    assert across == ["leak-audit"]


def test_a_name_in_two_folders_is_one_line_of_error(tmp_path, monkeypatch):
    for study in ("a", "b"):
        (tmp_path / study).mkdir()
        (tmp_path / study / "same.toml").write_text("[train]\nsteps = 1\n")
    monkeypatch.setattr(shipped, "shipped_dir", lambda: tmp_path)
    with pytest.raises(RecallLabError, match=r"two shipped experiments are named 'same': "
                                             r"a/same.toml and b/same.toml"):
        shipped.shipped_names()


def test_list_groups_the_rows_by_study(monkeypatch):
    monkeypatch.setattr(shell.console, "width", 250)
    out = runner.invoke(app, ["experiments", "list"]).stdout
    lines = out.splitlines()
    heads = [i for i, line in enumerate(lines) if re.search(r"│ [A-Za-z0-9+._-]+/ ", line)]
    studies = [re.search(r"│ (\S+)/ ", lines[i]).group(1) for i in heads]
    assert studies == sorted({p.parent.name for p in experiment_files()})
    # each experiment's row lies below its own study's heading, before the next one
    for path in experiment_files():
        row = next(i for i, line in enumerate(lines) if f"│   {path.stem} " in line)
        above = max(i for i in heads if i < row)
        assert studies[heads.index(above)] == path.parent.name, path


def test_copy_keeps_one_study_flat_and_a_base_elsewhere_resolvable(tmp_path):
    flat = shipped.copy_shipped("capacity-narrow-queries", tmp_path / "flat")
    assert flat == [tmp_path / "flat" / "capacity-narrow-queries.toml",
                    tmp_path / "flat" / "capacity-narrow.toml"]
    written = shipped.copy_shipped("leak-audit", tmp_path / "mine")
    assert written == [tmp_path / "mine" / "leak-audit" / "leak-audit.toml",
                       tmp_path / "mine" / "table1" / "mini-table1-v1.toml"]
    for name, copied in (("capacity-narrow-queries", flat[0]), ("leak-audit", written[0])):
        here, there = load_experiment(copied), load_experiment(name)
        assert [r.hash for r in here.runs] == [r.hash for r in there.runs]  # the same runs


def test_an_old_path_names_the_new_place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecallLabError, match=r"^experiment file experiments/capacity.toml does "
                       r"not exist; `recall-lab sweep capacity` runs the shipped one "
                       r"\(experiments/capacity/capacity.toml in a checkout\)$"):
        load_experiment("experiments/capacity.toml")
