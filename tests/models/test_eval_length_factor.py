"""`eval --length-factor` on runs of tasks that grow and one that cannot."""

import json

from typer.testing import CliRunner

from recall_lab.cli import app
from tests.cli_checks import fails_with

runner = CliRunner()
SMALL = ["--steps", "2", "--eval-every", "2", "--eval-samples", "8", "--batch-size", "4",
         "--d-model", "16", "--device", "cpu"]


def _train(tmp_path, task_toml: str, name: str):
    task = tmp_path / f"{name}.toml"
    task.write_text(task_toml)
    out = tmp_path / name
    r = runner.invoke(app, ["train", "--model", "mamba", "--task", str(task), "--out", str(out),
                            *SMALL])
    assert r.exit_code == 0, r.output
    return out


def test_zoology_mqar_run_evaluates_at_twice_its_length(tmp_path):
    run = _train(tmp_path, '[task]\ngenerator = "zoology-mqar"\n[task.kwargs]\n'
                 'vocab_size = 64\ninput_seq_len = 16\nnum_kv_pairs = 2\n', "zq")
    r = runner.invoke(app, ["eval", str(run), "--length-factor", "2", "--n", "8"])
    assert r.exit_code == 0, r.output
    res = json.loads((run / "eval-task-x2-n8-s0-best.json").read_text())
    assert res["max_len"] == 32 and res["n"] == 8


def test_mqar_run_without_filler_says_what_would_work(tmp_path):
    run = _train(tmp_path, "[task]\nlevels = [[3, 3]]\nvalues = 4\n", "mq")
    line = fails_with(["eval", run, "--length-factor", "2", "--n", "8"],
                      "cannot be lengthened with filler")
    assert "filler_ids" in line and "zoology-mqar" in line and "--task" in line
