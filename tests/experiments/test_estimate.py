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
    out = est.estimate([[(est.run_label(r), r.config) for r in pilot.runs], runs], workers=2,
                       startup=False)
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


def test_the_estimate_includes_start_up_a_worker_per_phase_and_a_run_each(tiny, monkeypatch):
    """tiny was estimated at 1 min 10 s and took 295 s: a worker's start (a process importing
    torch and the lab) and a run's own (model, data, held-out sets, checkpoints, test set,
    length tests) were not counted. Both are now, each measured once: here 7 s a worker and
    5 s a run of 6 steps at 1 s."""
    monkeypatch.setattr(est, "probe_steps",
                        lambda cfg, steps, threads, label: est.Probe(label, 1.0, 0.0, 4, 1,
                                                                     "cpu"))
    monkeypatch.setattr(est, "probe_startup", lambda cfg, probe, threads: 5.0)
    monkeypatch.setattr(est, "worker_start", lambda: 7.0)
    pilot = _exp(tiny, {"train.lr": [1e-3, 3e-3]})
    cells = _exp(tiny, {"train.seed": [0, 1, 2, 3, 4]})
    out = est.estimate([[(est.run_label(r), r.config) for r in pilot.runs],
                        [(est.run_label(r), r.config) for r in cells.runs]], workers=2)
    # pilot: 2 workers start (7 s), one run each (6 + 5 s); cells: 2 start, 5 runs of 11 s on 2
    assert out["wall_s"] == pytest.approx((7 + 11) + (7 + 3 * 11))
    assert out["run_s"] == pytest.approx(7 * 11 + 2 * 7 + 2 * 7)
    assert out["startup"] == {"worker_s": 7.0, "phases": 2}
    assert [p["startup_s"] for p in out["probes"]] == [5.0]
    text = " ".join(" ".join(est.estimate_lines(out)).split())
    assert "start-up included: 7.0 s to start each worker of each sweep (2 phases)" in text
    assert "5.0 s of start-up a run" in text


def test_a_runs_own_start_up_is_measured_by_a_one_step_run(tiny, tmp_path, monkeypatch):
    """`probe_startup` trains one step of the run's shape into a temporary folder: it takes
    more than nothing (a model, data and held-out sets are built) and leaves nothing behind."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its temporary folder goes here
    cfg = _exp(tiny, {"train.seed": [0]}).runs[0].config
    p = est.Probe("m", step_s=0.0, forward_s=0.0, batch=4, length=12, device="cpu")
    took = est.probe_startup(cfg, p, threads=1)
    assert took > 0.0
    assert not list(tmp_path.glob("recall-lab-startup-*"))


def test_estimate_lines_fit_the_width_they_are_given_and_are_printed_as_they_are(
        tmp_path, monkeypatch):
    """At 80 columns the estimate was wrapped at 100 and then again by the console: ragged
    lines such as "(median of 3); 10" / "runs". Each line fits the width asked for, and the
    command prints them at the console's width without re-wrapping them: every continued line
    keeps its indent."""
    from typer.testing import CliRunner

    from recall_lab.cli import app
    from recall_lab.commands import shell

    monkeypatch.setattr(est, "probe_steps",
                        lambda cfg, steps, threads, label: est.Probe(
                            "a-model-label-long-enough-to-wrap", 0.0123, 0.0045, 4, 12, "cpu"))
    monkeypatch.setattr(est, "probe_startup", lambda cfg, probe, threads: 0.25)
    monkeypatch.setattr(est, "worker_start", lambda: 3.5)
    exp = tmp_path / "e.toml"
    exp.write_text('name = "e"\n[model]\nname = "mamba"\nd_model = 16\n[train]\nsteps = 6\n'
                   '[task]\nlevels = [[3, 3]]\nvalues = 4\n[grid]\n"train.seed" = [0, 1]\n')
    for width in (80, 100):
        monkeypatch.setattr(shell.console, "width", width)
        r = CliRunner().invoke(app, ["sweep", str(exp), "--dry-run", "--out",
                                     str(tmp_path / "out")], env={"COLUMNS": str(width)})
        assert r.exit_code == 0, r.output
        lines = r.stdout.splitlines()
        first = next(i for i, ln in enumerate(lines) if ln.startswith("estimated wall time"))
        para = lines[first:]
        assert len(para) >= 3 and all(len(ln) <= width for ln in para), para
        assert all(ln.startswith("  ") for ln in para[1:]), para  # none re-wrapped
        assert "start-up included" in " ".join(" ".join(para).split())
