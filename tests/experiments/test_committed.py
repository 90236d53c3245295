"""`experiments list` says what the committed records say: each experiment's runs and their time
come from docs/results (recall_lab/experiments/committed.py), and no description claims a run
state the records contradict."""

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.experiments.committed import committed_records, duration
from recall_lab.experiments.shipped import by_study, shipped_path, short, summary

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


def test_the_records_are_counted_from_the_run_folders():
    records = committed_records()
    rec = records["mini-ml3"]
    summaries = list((RESULTS / "mini-ml3" / "runs").glob("*/summary.json"))
    assert rec.runs == len(summaries) == 12
    seconds = sum(json.loads(p.read_text())["wall_s_this_session"] for p in summaries)
    assert abs(rec.run_s - seconds) < 1e-6
    assert rec.folders == ["docs/results/mini-ml3/runs"]
    # a sweep run in pieces: every committed run, whatever its last call ran
    assert records["zoo-frontier"].runs == 570


def test_no_description_says_not_run_where_runs_are_committed():
    records = committed_records()
    for names in by_study().values():
        for name in names:
            text = shipped_path(name).read_text()
            if name in records:
                assert not re.search(r"not run yet|not yet run|not run in this repository", text,
                                 re.I), name


def test_the_list_prints_each_experiments_runs_and_time():
    r = CliRunner().invoke(app, ["experiments", "list"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    rec = committed_records()["mini-ml3"]
    row = next(line for line in r.stdout.splitlines() if " mini-ml3 " in line)
    assert f"{rec.runs} of {rec.planned}" in row and duration(rec.run_s) in row
    row = next(line for line in r.stdout.splitlines() if " tiny " in line)
    assert " none " in row
    # commands in a comment are not prose: tiny's about stops before them
    assert "recall-lab sweep" not in summary(shipped_path("tiny"))


def test_the_list_is_short_by_default_and_whole_with_long(monkeypatch):
    from recall_lab.commands import shell

    monkeypatch.setattr(shell.console, "width", 100)
    runner = CliRunner()
    short_out = runner.invoke(app, ["experiments", "list"], env={"COLUMNS": "100"}).stdout
    long_out = runner.invoke(app, ["experiments", "list", "--long"],
                             env={"COLUMNS": "100"}).stdout
    studies = by_study()
    assert len(short_out.splitlines()) < len(long_out.splitlines())
    # at most one screen (50 lines) per study by default
    assert len(short_out.splitlines()) <= 50 * len(studies)
    text = summary(shipped_path("capacity"))
    assert len(short(text)) <= 100 and short(text) != text
    assert short("One sentence (with an aside). Two.") == "One sentence."


def test_the_demo_section_quotes_capacity_as_its_report_has_it():
    """docs/experiments.md's demo section: the capacity numbers it quotes are report.json's,
    and it quotes no demo accuracy (no record of one is committed)."""
    text = (ROOT / "docs" / "experiments.md").read_text()
    section = text.split("## `recall-lab demo`", 1)[1].split("\n## ", 1)[0]
    section = " ".join(section.split())
    found = re.search(r"Mamba with state 1 solves (\d+) of (\d+) seeds at 8 pairs and "
                      r"attention (\d+) of (\d+)", section)
    assert found, section
    rep = json.loads((RESULTS / "capacity" / "report.json").read_text())
    groups = {g["label"]: g["solved"] for g in rep["groups"]}
    mamba, attention = groups["mamba / levels=8 / d_state=1"], groups["transformer / levels=8"]
    assert [int(x) for x in found.groups()] == [mamba["k"], mamba["n"], attention["k"],
                                                attention["n"]]
    assert not re.search(r"\b0\.\d{3}\b", section)  # no accuracy without a record
