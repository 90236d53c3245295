"""Every warning of a report prints in the terminal above its table (`report`, `demo`): the
held-out overlap above 1% and each claim still open (recall_lab/experiments/report.py,
`terminal_warnings`)."""

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from recall_lab.cli import app

ROOT = Path(__file__).resolve().parents[2]


def _report(runs: Path, out: Path) -> str:
    r = CliRunner().invoke(app, ["report", str(runs), "--out", str(out), "--no-plots"])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_an_overlap_above_one_percent_warns_above_the_table(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(ROOT / "docs" / "results" / "mini-ml3" / "runs", runs)
    summary = next(runs.glob("transformer-*/summary.json"))
    data = json.loads(summary.read_text())
    data["held_out_in_training"].update(valid=0.5, test=0.25)
    summary.write_text(json.dumps(data))
    out = _report(runs, tmp_path / "out")
    line = "warning: held-out overlap transformer: valid 50.0%, test 25.0% also occur in training"
    assert line in out and out.index(line) < out.index("┏")
    # the line goes on to say how many training samples the check read, where it was capped
    assert f"**{line}" in (tmp_path / "out" / "report.md").read_text()


def test_an_open_claim_warns_above_the_table(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(ROOT / "docs" / "results" / "zoology-fig2" / "runs", runs)
    out = _report(runs, tmp_path / "out")
    first = out.index("warning: claim open (a run of its rows is unfinished): ")
    assert first < out.index("┏")
