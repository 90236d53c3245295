"""Time that adds up: a run resumed twice reports its training loop summed over its three
segments (each timed to its last checkpoint), and a summary from before segments were recorded
counts its earlier segment as untimed, never as zero."""

from __future__ import annotations

import importlib
import types

import pytest

from recall_lab.config import RunConfig, TrainConfig
from recall_lab.experiments.timing import run_time, time_text, total_time
from recall_lab.generators import TaskSpec
from recall_lab.models import model_config
from recall_lab.train import train_run

train_mod = importlib.import_module("recall_lab.train")  # the package's `train` is rl.train

SPEC = TaskSpec(levels=((3, 3),), values=4)
STEP_S = 10.0  # what the fake clock charges for one optimizer step


class Killed(Exception):
    pass


def _cfg() -> RunConfig:
    t = {"steps": 10, "batch_size": 4, "eval_every": 2, "eval_samples": 8, "test_samples": 8,
         "warmup": 2, "device": "cpu"}
    m = model_config("mamba+hax", SPEC.vocab().size, d_model=16, d_state=4, k=4, lsh_bits=2)
    return RunConfig(model=m, train=TrainConfig(**t), task=SPEC, task_name="tiny")


def test_a_run_resumed_twice_sums_its_three_segments(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(train_mod, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    def tick(kill_at=None):
        def on_step(step):
            clock[0] += STEP_S  # only training steps cost time on this clock
            if step == kill_at:
                raise Killed
        return on_step

    out = tmp_path / "run"
    with pytest.raises(Killed):  # killed after step 5: its last checkpoint is step 4
        train_run(_cfg(), out, on_step=tick(5))
    with pytest.raises(Killed):  # resumed at 4, killed after 7: last checkpoint at 6
        train_run(_cfg(), out, resume=True, on_step=tick(7))
    summary = train_run(_cfg(), out, resume=True, on_step=tick())
    segs = summary["segments"]
    assert [(s["from_step"], s["to_step"]) for s in segs] == [(0, 4), (4, 6), (6, 10)]
    # each segment to its last checkpoint: the steps redone after a kill (5 and 7) not counted
    assert [s["loop_s"] for s in segs] == [4 * STEP_S, 2 * STEP_S, 4 * STEP_S]
    assert summary["loop_s_total"] == 10 * STEP_S  # every step once
    assert summary["wall_s_this_session"] == 4 * STEP_S  # the last segment alone, as before
    assert summary["segments_untimed"] == 0 and all(s["start"] and s["end"] for s in segs)
    t = run_time(summary)
    assert (t["loop_s"], t["segments"], t["untimed"]) == (10 * STEP_S, 3, 0)
    one = {"wall_s_this_session": 5.0, "resumed_from": None, "steps": 10}
    text = time_text(total_time([summary, one]))
    assert text.startswith("Training loops: 105 s over 4 segments (1 run resumed), 2 runs")
    assert "untimed" not in text and "estimate" not in text


def test_a_summary_from_before_segments_counts_its_earlier_segment_as_untimed():
    old = {"wall_s_this_session": 30.0, "resumed_from": 1000, "steps": 4000,
           "stopped_at": 4000}
    t = run_time(old)
    assert (t["loop_s"], t["segments"], t["untimed"], t["untimed_steps"]) == (30.0, 2, 1, 1000)
    total = total_time([old, {"wall_s_this_session": 7.0, "steps": 100}])
    assert total["loop_s"] == 37.0 and total["segments"] == 3 and total["resumed"] == 1
    assert total["untimed_estimate_s"] == pytest.approx(1000 * 30.0 / 3000)
    text = time_text(total)
    assert "37 s over 3 segments" in text
    assert "the earlier segment (1,000 steps)" in text and "10 s" in text and "estimate" in text
