"""`train --warmup N` sets the warm-up (recorded in config.json) and the warm-up note is printed
only when the run is no longer than its warm-up."""

import json

from typer.testing import CliRunner

from recall_lab.cli import app

runner = CliRunner()
SMALL = ["--model", "mamba", "--steps", "4", "--eval-every", "2", "--eval-samples", "8",
         "--batch-size", "4", "--d-model", "16", "--device", "cpu"]


def test_warmup_flag_reaches_the_config_and_silences_the_note(tmp_path):
    task = tmp_path / "t.toml"
    task.write_text("[task]\nlevels = [[3, 3]]\nvalues = 4\n")
    r = runner.invoke(app, ["train", *SMALL, "--task", str(task), "--warmup", "2",
                            "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "a" / "config.json").read_text())["train"]["warmup"] == 2
    assert "warning: the warm-up" not in r.output
    r = runner.invoke(app, ["train", *SMALL, "--task", str(task), "--warmup", "4",
                            "--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    assert "warning: the warm-up (4 steps) is as long as the run (4 steps)" in r.output
