"""CLI of the models area: bad input ends with one line and exit 2, nothing is overwritten;
--help lists the options; a tiny train + eval round trip agrees with the library."""

import json

import pytest
from typer.testing import CliRunner

from recall_lab.cli import app
from tests.cli_checks import fails_with

runner = CliRunner()
TINY = '[task]\nlevels = [[3, 3]]\nvalues = 4\n'


@pytest.fixture
def tiny_task(tmp_path):
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return p


SMALL = ["--d-model", "16", "--steps", "2", "--batch-size", "2", "--eval-every", "1",
         "--eval-samples", "4", "--device", "cpu"]


def test_bad_inputs_exit_2_with_one_line(tmp_path, tiny_task):
    out = tmp_path / "run"
    base = ["train", "--out", str(out)]
    fails_with(base + ["--model", "gpt", "--task", "mini-mqar"], "unknown model")
    fails_with(base + ["--model", "mamba", "--task", "nope"], "unknown task")
    fails_with(base + ["--model", "mamba+sw", "--task", str(tiny_task), "--k", "1000"],
                "larger than the sequence")
    fails_with(base + ["--model", "mamba", "--task", "mini-mqar", "--batch-size", "1000000000"],
                "does not fit")
    fails_with(base + ["--model", "mamba", "--task", "mini-mqar", "--steps", "0"], "steps")
    fails_with(base + ["--model", "mamba", "--task", "mini-mqar", "--device", "tpu"], "device")
    fails_with(base + ["--task", "mini-mqar"], "no model")
    fails_with(base + ["--resume"], "does not exist")
    fails_with(base + ["--model", "mamba", "--config", str(tmp_path / "none.toml")],
                "does not exist")
    fails_with(["eval", str(tmp_path / "missing-run")], "does not exist")
    assert not out.exists()


def test_existing_run_is_not_overwritten(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "precious.txt").write_text("keep")
    line = fails_with(["train", "--model", "mamba", "--task", "mini-mqar", "--out", str(out)],
                      "already exists")
    # the command line's words, not the Python API's (force=True / resume=True)
    assert "pass --force to overwrite it or --resume to continue" in line, line
    assert "=True" not in line
    assert (out / "precious.txt").read_text() == "keep"


def test_train_eval_round_trip_and_corrupt_checkpoint(tmp_path, tiny_task):
    from recall_lab.evaluate import evaluate_run

    run = tmp_path / "run"
    r = runner.invoke(app, ["train", "--model", "mamba+hax", "--task", str(tiny_task),
                            "--out", str(run), "--k", "4", *SMALL])
    assert r.exit_code == 0, r.output
    summary = json.loads((run / "summary.json").read_text())
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["model"]["name"] == "mamba+hax" and cfg["train"]["steps"] == 2
    # the summary's test numbers are what evaluating the best checkpoint gives
    spec = __import__("recall_lab.generators", fromlist=["TaskSpec"]).TaskSpec
    again = evaluate_run(run, spec(levels=((3, 3),), values=4),
                         n=cfg["train"]["test_samples"], data_seed=0, device="cpu")
    assert again["acc"] == pytest.approx(summary["test"]["acc"], rel=1e-12)
    assert again["loss"] == pytest.approx(summary["test"]["loss"], rel=1e-5)
    assert again["exact"] == summary["test"]["exact"]

    # extrapolation to fewer pairs (same vocabulary) works and writes its JSON once
    other = tmp_path / "short.toml"
    other.write_text('[task]\nlevels = [[2, 2]]\nvalues = 4\n')
    r = runner.invoke(app, ["eval", str(run), "--task", str(other), "--n", "8",
                            "--device", "cpu"])
    assert r.exit_code == 0, r.output
    res = json.loads((run / "eval-short-n8-s0-best.json").read_text())
    assert res["n"] == 8 and 0.0 <= res["acc"] <= 1.0 and res["max_len"] == 10
    fails_with(["eval", str(run), "--task", str(other), "--n", "8"], "exists")
    bigger = tmp_path / "big.toml"
    bigger.write_text('[task]\nlevels = [[5, 5]]\nvalues = 4\n')
    fails_with(["eval", str(run), "--task", str(bigger)], "vocabulary")

    # a run cannot be silently replaced; a corrupt checkpoint is one line
    before = (run / "best.safetensors").read_bytes()
    fails_with(["train", "--model", "mamba", "--task", str(tiny_task), "--out", str(run)],
                "already exists")
    assert (run / "best.safetensors").read_bytes() == before
    (run / "best.safetensors").write_bytes(before[: len(before) // 3])
    fails_with(["eval", str(run), "--force"], "corrupt")
    (run / "resume.safetensors").write_bytes(b"\x00" * 10)
    fails_with(["train", "--out", str(run), "--resume"], "corrupt")


@pytest.mark.parametrize("cmd, options", [
    ("train", ["--model", "--task", "--steps", "--lr", "--batch-size", "--k", "--seed", "--out",
               "--device", "--eval-every", "--config", "--force", "--resume"]),
    ("eval", ["--task", "--n", "--checkpoint", "--out", "--force"]),
    ("demo", ["--out", "--steps", "--force"]),
    ("models", ["--task"]),
    ("info", ["--help"]),
])
def test_help_lists_options(cmd, options):
    r = runner.invoke(app, [cmd, "--help"], terminal_width=200)
    assert r.exit_code == 0
    for opt in options:
        assert opt in r.output, opt


def test_demo_writes_report_plot_sentence_and_refuses_to_overwrite(tmp_path):
    from recall_lab.experiments.demo import DEMO_MODELS, DEMO_PAIRS

    out = tmp_path / "demo"
    r = runner.invoke(app, ["demo", "--out", str(out), "--steps", "2", "--workers", "1"],
                      terminal_width=200)
    assert r.exit_code == 0, r.output
    demo = json.loads((out / "demo.json").read_text())
    assert demo["counts"]["done"] == len(DEMO_MODELS) * len(DEMO_PAIRS)
    assert " ".join(demo["sentence"].split()) in " ".join(r.output.split())
    rep = json.loads((out / "report.json").read_text())
    # one group per (model, table size); its mean is the single run's test accuracy
    assert len(rep["groups"]) == len(DEMO_MODELS) * len(DEMO_PAIRS)
    for g in rep["groups"]:
        (run,) = g["selected"]
        s = json.loads((out / run / "summary.json").read_text())
        assert g["mean"] == s["test"]["acc"]
        assert s["model"] == g["values"]["model.name"]
        assert f"{s['test']['acc']:.4f}" in r.output
    png = (out / "report-task_levels.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # every warning of report.md is in the terminal too, above the table
    md = (out / "report.md").read_text()
    warnings = [ln.strip("*") for ln in md.splitlines() if ln.startswith("**warning")]
    for line in warnings:
        assert line in r.output and r.output.index(line) < r.output.index("┏"), line
    figures = [p for p in out.glob("*.png")]
    assert f"{len(figures)} figures" in " ".join(r.output.split())
    fails_with(["demo", "--out", str(out), "--steps", "2"], "already exists")
    assert (out / "report-task_levels.png").read_bytes() == png
