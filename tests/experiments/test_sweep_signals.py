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
