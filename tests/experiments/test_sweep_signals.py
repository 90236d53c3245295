"""SIGTERM to a running `sweep` stops it as Ctrl-C does (issue 28): its workers are stopped, its
index is saved with the unfinished runs pending, it exits 143 with one line, and Python's
resource tracker has no leaked semaphore to warn about."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

EXP = ('name = "term"\n[model]\nname = "mamba"\nd_model = 16\nd_state = 4\n'
       '[train]\nsteps = 100000\nbatch_size = 2\neval_every = 1\neval_samples = 4\n'
       'test_samples = 4\ndevice = "cpu"\n[task]\nlevels = [[3, 3]]\nvalues = 4\n'
       '[grid]\n"train.seed" = [0, 1]\n')


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and spawn as on Linux")
def test_sigterm_to_sweep_stops_it_cleanly(tmp_path):
    exp = tmp_path / "term.toml"
    exp.write_text(EXP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "recall_lab.cli", "sweep", str(exp),
                             "--out", str(tmp_path / "runs"), "--workers", "2"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    folder = tmp_path / "runs" / "term"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            started = list(folder.glob("*/resume.safetensors"))  # a worker is training
            if started:
                break
            time.sleep(0.2)
        assert proc.poll() is None and started, "the sweep did not start training"
    finally:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)  # to EOF: the resource tracker writes here too
    assert proc.returncode == 143, err
    assert "leaked semaphore" not in err and "Traceback" not in err, err
    assert [x for x in err.splitlines() if x.strip()] == ["terminated"], err
    index = json.loads((folder / "sweep.json").read_text())
    assert {r["status"] for r in index["runs"]} == {"pending"}  # resumed by the next sweep


# the same tiny sweep with runs that end (40 steps, an evaluation every 4)
KILL9 = (EXP.replace('name = "term"', 'name = "k9"').replace("steps = 100000", "steps = 40")
         .replace("eval_every = 1", "eval_every = 4")
         .replace("test_samples = 4", "test_samples = 8"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kill -9 as on Linux")
def test_kill_9_of_sweep_then_rerun_matches_an_uninterrupted_sweep(tmp_path):
    """`sweep` killed with SIGKILL while a run trains (after its first checkpoint), then run again:
    every run ends with the weights, metrics and summary of a sweep never killed (the killed
    run resumes from its checkpoint; its workers die with their parent)."""
    from safetensors.torch import load_file

    from recall_lab import checkpoint as ck

    exp = tmp_path / "k9.toml"
    exp.write_text(KILL9)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}

    def sweep(out, **kw):
        return subprocess.Popen([sys.executable, "-m", "recall_lab.cli", "sweep", str(exp),
                                 "--out", str(out), "--workers", "1"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                **kw)

    killed = tmp_path / "killed"
    proc = sweep(killed)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if list((killed / "k9").glob("*/" + ck.RESUME)):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the sweep ended before it could be killed"
    finally:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert not all((f / ck.SUMMARY).is_file() for f in (killed / "k9").glob("s*") if f.is_dir()), \
        "killed too late: nothing was interrupted"
    # the resumed and the uninterrupted sweep side by side (one worker each, the suite's time)
    for again in [sweep(out) for out in (killed, tmp_path / "whole")]:
        _, err = again.communicate(timeout=300)
        assert again.returncode == 0, err
    runs = sorted(p.name for p in (tmp_path / "whole" / "k9").glob("s*") if p.is_dir())
    assert len(runs) == 2
    for name in runs:
        a, b = killed / "k9" / name, tmp_path / "whole" / "k9" / name
        assert (a / ck.METRICS).read_text() == (b / ck.METRICS).read_text(), name
        assert json.loads((a / ck.SUMMARY).read_text())["test"] == \
            json.loads((b / ck.SUMMARY).read_text())["test"], name
        wa, wb = load_file(a / ck.MODEL), load_file(b / ck.MODEL)
        assert wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa), name
