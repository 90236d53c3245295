"""A user's mixer, from a clean checkout, through every command (eval in new processes), with
no registration code anywhere: `train --mixer`, a 4-run `sweep --workers 2` (spawned workers),
`eval` and `eval --decode`, `report --check` testing a claim about it (a mixer that raises in
a worker is recorded as failed and the other runs go on); and `recall-lab check`
passing on it and failing (exit 1) on its leaking variant. The mixer package is only on
PYTHONPATH (examples/mixer-package), as a user's package in development would be."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recall_lab.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mixer-package"
SMALL = ["--d-model", "16", "--batch-size", "8", "--eval-every", "5", "--eval-samples", "16",
         "--device", "cpu", "--task", "mini-mqar"]


def cli(*args, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE), "OMP_NUM_THREADS": "1",
           "COLUMNS": "200"}
    r = subprocess.run([sys.executable, "-m", "recall_lab.cli", *map(str, args)], cwd=cwd,
                       env=env, capture_output=True, text=True, timeout=600)
    if ok:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


SWEEP = """
name = "ret"
[model]
d_model = 16
[train]
steps = 10
batch_size = 8
warmup = 2
eval_every = 5
eval_samples = 16
test_samples = 32
device = "cpu"
[task]
preset = "mini-mqar"
[grid]
"model" = [
    { name = "retention", mixer = "retention_mixer:Retention", mixer_kwargs = { heads = 2 } },
    { name = "mamba" },
    { name = "broken", mixer = "retention_mixer:Retention", mixer_kwargs = { heads = 0 } },
]
"train.seed" = [0, 1]

[[report.expect]]
claim = "retention's accuracy is a probability"
a = { "model.name" = "retention" }
value = 0.0
"""


def in_process(*args, monkeypatch) -> str:
    """A command in this process (saves a process start where a new process proves nothing)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.slow
def test_a_users_mixer_through_every_command(tmp_path, monkeypatch):
    run = tmp_path / "runs" / "ret"
    in_process("train", "--mixer", "retention_mixer:Retention", "--mixer-kwargs",
               '{"heads": 2}', "--steps", "10", "--out", run, *SMALL, monkeypatch=monkeypatch)
    cfg = json.loads((run / "config.json").read_text())["model"]
    assert (cfg["name"], cfg["arch"], cfg["mixer"], cfg["mixer_kwargs"]) == (
        "Retention", "mixer", "retention_mixer:Retention", {"heads": 2})

    dest = tmp_path / "e.json"
    r = cli("eval", run, "--n", "8", "--batch-size", "4", "--decode", "--out", dest,
            cwd=tmp_path)
    res = json.loads(dest.read_text())
    assert res["decode"]["acc_equal"] is True and abs(res["decode"]["loss"] - res["loss"]) < 1e-4

    exp = tmp_path / "ret.toml"
    exp.write_text(SWEEP)
    r = cli("sweep", exp, "--workers", "2", "--out", tmp_path / "sweep", cwd=tmp_path, ok=False)
    assert r.returncode == 2, r.stdout + r.stderr  # the exit code counts the failed runs
    index = json.loads((tmp_path / "sweep" / "ret" / "sweep.json").read_text())
    status = {e["name"]: e["status"] for e in index["runs"]}
    assert sorted(status.values()) == ["done"] * 4 + ["failed"] * 2  # the broken mixer's two
    assert all(s == "failed" for name, s in status.items() if name.startswith("broken"))
    out = in_process("report", tmp_path / "sweep" / "ret", "--check", "--no-plots",
                     monkeypatch=monkeypatch)
    assert "retention's accuracy is a probability" in out and "PASS" in out

    # the module gone: one line, exit 2, nothing written
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    env = {**os.environ, "PYTHONPATH": "", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "recall_lab.cli", "eval", str(run), "--n", "8"],
                       cwd=moved, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "retention_mixer does not import" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_check_passes_the_example_and_flags_the_leak(tmp_path):
    out = tmp_path / "ok.json"
    cli("check", "retention_mixer:Retention", "--no-speed", "--require-learning", "--json", out,
        cwd=tmp_path)
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert all(r["passed"] for r in rows.values())
    assert float(rows["learning gate"]["value"].split()[2]) >= 0.9

    bad = tmp_path / "leak.json"
    r = cli("check", "retention_mixer:LeakyRetention", "--no-learning", "--no-speed", "--json",
            bad, cwd=tmp_path, ok=False)
    assert r.returncode == 1
    rows = {r["name"]: r for r in json.loads(bad.read_text())["rows"]}
    assert rows["causality"]["passed"] is False and rows["decode = parallel"]["passed"] is False
    assert float(rows["causality"]["value"].split()[2]) > 1e-3  # a leak moves far more
