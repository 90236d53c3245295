"""Streamed held-out sets against the training stream (issue 18): the overlap reported in the
summary equals a brute-force comparison of rows, and the CLI warns when it is not zero."""

import json

import numpy as np
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.data import STREAM_KEY, stream_overlap
from recall_lab.evaluate import held_out
from recall_lab.generators import TaskSpec, generate

SPEC = TaskSpec(levels=((3, 3),), values=4)  # few distinct samples: the stream repeats them


def _rows(x: np.ndarray) -> set[tuple[int, ...]]:
    return {tuple(int(t) for t in row if t != 0) for row in x}


def test_overlap_matches_brute_force():
    valid = held_out(SPEC, 40, 3, "valid")[0]
    test = held_out(SPEC, 40, 3, "test")[0]
    got = stream_overlap(SPEC, 8, 3, steps=30, held={"valid": valid, "test": test})
    train = set()
    for step in range(30):
        train |= _rows(generate(SPEC, 8, np.random.SeedSequence(3, spawn_key=(STREAM_KEY, step)))
                       .inputs)
    for name, x in (("valid", valid), ("test", test)):
        want = np.mean([tuple(int(t) for t in row if t != 0) in train for row in x])
        assert got[name] == want
    assert got["train_rows_checked"] == 240 and 0 < got["valid"] < 1
    big = TaskSpec(levels=((16, 16),), values=16)  # 16^16 tables: no repeats
    assert stream_overlap(big, 8, 0, 30, {"valid": held_out(big, 40, 0, "valid")[0]})["valid"] == 0


def test_cli_warns_when_held_out_rows_were_trained_on(tmp_path):
    task = tmp_path / "tiny.toml"
    task.write_text("[task]\nlevels = [[3, 3]]\nvalues = 4\n")
    r = CliRunner().invoke(app, ["train", "--model", "mamba", "--task", str(task), "--d-model",
                                 "16", "--steps", "40", "--batch-size", "8", "--eval-every",
                                 "40", "--eval-samples", "16", "--device", "cpu",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    seen = json.loads((tmp_path / "run" / "summary.json").read_text())["held_out_in_training"]
    assert seen["valid"] > 0 and "memorisation" in r.stdout
