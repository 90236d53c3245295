"""`rl.train` and `rl.evaluate` apply the command line's thread policy (recall_lab/threads.py):
a script ran 8x slower than the CLI on torch's default threads and malloc before they did."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

import recall_lab as rl
from recall_lab import threads
from recall_lab.cli import app

TASK = {"levels": [[2, 2]], "values": 8}
TRAIN = {"steps": 2, "batch_size": 4, "warmup": 1, "eval_every": 2, "eval_samples": 8,
         "test_samples": 8, "device": "cpu"}


@pytest.fixture
def policy(monkeypatch):
    """The policy's own choice made known (3 threads: neither torch's default here nor the
    suite's 1), OMP_NUM_THREADS unset as on a user's machine; torch's count put back after."""
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "default_threads", lambda: 3)
    yield 3
    torch.set_num_threads(before)


def test_api_and_cli_train_set_the_same_threads(policy, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    run = rl.train({"model": {"name": "mamba", "d_model": 16}, "task": TASK, "train": TRAIN},
                   quiet=True, out="api")
    api_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    result = CliRunner().invoke(app, ["train", "--model", "mamba", "--d-model", "16", "--task",
                                      "mini-mqar", "--steps", "2", "--warmup", "1", "--out",
                                      "cli"])
    assert result.exit_code == 0, result.output
    assert api_threads == torch.get_num_threads() == policy
    assert f"{policy} torch threads" in result.output  # the header says how it chose
    torch.set_num_threads(1)
    rl.evaluate(run, n=8)
    assert torch.get_num_threads() == policy
    rl.evaluate(run, n=8, threads=2)
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_threads_is_one_line_in_python_words(bad, tmp_path):
    with pytest.raises(rl.RecallLabError, match=r"^threads= must be an integer >= 1"):
        rl.train({"model": {"name": "mamba", "d_model": 16}, "task": TASK, "train": TRAIN},
                 quiet=True, out=tmp_path / "x", threads=bad)
    assert not (tmp_path / "x").exists()
