"""Output read by a person stays whole when stdout is a pipe: no truncated table cells ('…'), no
escape codes, and progress as plain lines (a live bar prints nothing until the end there)."""

import json
import subprocess
import sys

TINY_TASK = '[task]\nlevels = [[3, 3]]\nvalues = 4\n'


def _piped(*args, cwd=None):
    r = subprocess.run([sys.executable, "-m", "recall_lab.cli", *args], capture_output=True,
                       text=True, cwd=cwd, env=None)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_presets_table_is_not_cut():
    out = _piped("presets")
    assert "…" not in out and "\x1b[" not in out
    assert "train/valid/test" in out and "1,440,000/14,400/14,400" in out


def test_piped_train_prints_plain_progress_and_whole_cells(tmp_path):
    task = tmp_path / "task.toml"
    task.write_text(TINY_TASK)
    out = _piped("train", "--model", "mamba", "--task", str(task), "--steps", "4",
                 "--eval-every", "2", "--eval-samples", "8", "--batch-size", "4",
                 "--d-model", "16", "--device", "cpu", "--out", str(tmp_path / "r"))
    assert "…" not in out and "\x1b[" not in out
    assert "mamba: step 4/4" in out  # the plain progress line
    # 4 steps under the default warm-up of 500: one line says the lr never reached its peak
    assert out.count("warning: the warm-up (500 steps) is as long as the run (4 steps)") == 1
    assert "--warmup" in out
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert f"{summary['n_params']:,}" in out  # the whole parameter count (was cut to "2000…")


def test_piped_sweep_prints_one_line_per_run(tmp_path):
    exp = tmp_path / "e.toml"
    exp.write_text('[model]\nname = "mamba"\nd_model = 16\nd_state = 4\n'
                   '[train]\nsteps = 2\nbatch_size = 2\neval_every = 2\neval_samples = 4\n'
                   'test_samples = 4\ndevice = "cpu"\n' + TINY_TASK
                   + '[grid]\n"train.seed" = [0, 1]\n')
    out = _piped("sweep", str(exp), "--out", str(tmp_path / "runs"), "--dry-run")
    assert "…" not in out and "to train: 2 runs" in out
    # the estimate, with the probe it came from (one shape: one probe for both runs)
    assert "estimated wall time: " in out and "on 1 worker x 1 thread (2 runs" in out
    assert out.count("  probe mamba at 2 x 14 on cpu: ") == 1
    assert "; 2 runs" in " ".join(out.split())  # the probe's line may wrap (its start-up)
    assert all(len(line) <= 100 for line in out.splitlines() if "estimate" in line)
    out = _piped("sweep", str(exp), "--out", str(tmp_path / "runs"))
    assert "…" not in out and "\x1b[" not in out
    assert "e: 2 runs: 2 to run\n" in out  # nothing "finished already"
    assert out.count("done s") == 2 and "2 of 2 runs done" in out


def test_sweep_names_run_folders_outside_the_grid(tmp_path):
    exp = tmp_path / "e.toml"
    exp.write_text('[model]\nname = "mamba"\nd_model = 16\nd_state = 4\n'
                   '[train]\nsteps = 2\nbatch_size = 2\neval_every = 2\neval_samples = 4\n'
                   'test_samples = 4\ndevice = "cpu"\n' + TINY_TASK
                   + '[grid]\n"train.seed" = [0]\n')
    stale = tmp_path / "runs" / "e" / "s9-0badc0de"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    out = _piped("sweep", str(exp), "--out", str(tmp_path / "runs"), "--dry-run",
                 "--no-estimate")
    assert "estimated" not in out and "1 run folders in" in out and "s9-0badc0de" in out
    assert (stale / "config.json").read_text() == "{}"


def test_warmup_note_only_when_the_run_never_leaves_its_warmup():
    from recall_lab.commands.training import warmup_note
    from recall_lab.config import TrainConfig

    assert warmup_note(TrainConfig(steps=300, warmup=100)) is None
    assert warmup_note(TrainConfig(steps=301, warmup=300)) is None
    for steps in (300, 299):
        note = warmup_note(TrainConfig(steps=steps, warmup=300))
        assert note is not None and f"({steps:,} steps)" in note and "--warmup" in note
