"""The dry runs' wall-time estimate (recall_lab/experiments/estimate.py): a run's seconds from
its probe, one probe per distinct model and shape, phases one after another, runs laid out on
the workers."""

import pytest

from recall_lab.experiments import estimate as est
from recall_lab.experiments.grid import expand
from recall_lab.progress import makespan


def _exp(tiny, grid):
    return expand({**tiny, "grid": grid}, "e")


def test_a_runs_seconds_are_its_steps_and_evaluations_at_the_probes_times(tiny):
    cfg = _exp(tiny, {"train.seed": [0]}).runs[0].config  # 6 steps, eval every 3 on 8, test 8
    p = est.Probe("m", step_s=0.5, forward_s=0.2, batch=4, length=12, device="cpu")
    assert est.run_seconds(cfg, p) == pytest.approx(6 * 0.5 + (2 * 8 + 8) * 0.2 / 4)


def test_one_probe_per_shape_and_the_runs_laid_out_on_the_workers(tiny, monkeypatch):
    seen = []

    def fake(cfg, steps, threads, label):
        seen.append((label, cfg.task.levels))
        return est.Probe(label, 1.0, 0.0, 4, 1, "cpu")

    monkeypatch.setattr(est, "probe_steps", fake)
    exp = _exp(tiny, {"train.seed": [0, 1, 2], "train.lr": [1e-3, 3e-3],
                      "model.d_state": [4, 8]})
    pilot = _exp(tiny, {"train.lr": [1e-3, 3e-3]})
    runs = [(est.run_label(r), r.config) for r in exp.runs]
    out = est.estimate([[(est.run_label(r), r.config) for r in pilot.runs], runs], workers=2)
    # seeds and lrs share a probe; d_state changes the model; the pilot's shape (tiny's
    # d_state 4, no swept model field: labelled by the model's name) is probed once, first
    assert [label for label, _ in seen] == ["mamba", "d_state=8"]
    assert [(p["label"], p["runs"]) for p in out["probes"]] == [("mamba", 8), ("d_state=8", 6)]
    # every run: 6 steps at 1 s; the pilot's 2 on 2 workers, then 12 runs on 2 workers
    assert out["wall_s"] == pytest.approx(6 + 6 * 6) and out["run_s"] == pytest.approx(14 * 6)
    text = "\n".join(est.estimate_lines(out))
    assert text.startswith("estimated wall time: 42s on 2 workers x 1 thread (14 runs")
    assert "probe d_state=8 at 4 x 1 on cpu: 1,000 ms a step" in text


def test_makespan_hands_each_run_to_the_first_free_worker():
    assert makespan([], [3, 3, 3], 2) == 6
    assert makespan([5], [1, 1, 1], 2) == 5  # the idle worker takes all three
    assert makespan([1, 2, 3], [], 2) == 4  # more running than workers: the third waits
