"""What one seed at the best lr hides (experiments/best_of_lr.py): each seed taken as zoology's
one seed, against values worked out by hand from the fixture's table."""

import json
from pathlib import Path

import pytest

from recall_lab.experiments import stats
from recall_lab.experiments.best_of_lr import best_of_lr
from recall_lab.experiments.report import Group, RunRecord, build_report, write_report
from tests.experiments.test_report import sweep_dir  # noqa: F401  (the fixture)


def test_each_seed_at_its_own_best_lr(sweep_dir):  # noqa: F811
    rep = build_report([sweep_dir], best_of_lr=True)
    got = {b.label: b for b in rep["best_of_lr"]}
    # mamba (test_report's RESULTS): every seed's valid is higher at 3e-3 (0.8 > 0.5, 0.7 > 0.6,
    # 0.9 > 0.7), so each seed's point is its test there: 0.7, 0.9, 0.8
    m = got["mamba"]
    assert [(p.seed, p.lr, p.value) for p in m.points] == [
        (0, 3e-3, pytest.approx(0.7)), (1, 3e-3, pytest.approx(0.9)),
        (2, 3e-3, pytest.approx(0.8))]
    assert m.spread == pytest.approx((0.7, 0.8, 0.9)) and m.partial == []
    assert m.lab_lr == 3e-3 and (m.lab_solved.k, m.lab_solved.n) == (0, 3)
    # mamba+hax: seed 0 ran both lrs (valid 0.90 at 1e-3 > 0.85: test 0.60); seed 1 is
    # missing at 3e-3 and seed 2 failed at 1e-3: left out, never read as a point
    h = got["mamba+hax"]
    assert [(p.seed, p.lr, p.value) for p in h.points] == [(0, 1e-3, pytest.approx(0.6))]
    assert h.partial == [1, 2]


def test_report_md_is_unchanged_and_the_figure_has_every_seed(sweep_dir, tmp_path):  # noqa: F811
    write_report(build_report([sweep_dir]), tmp_path / "plain", plots=False)
    rep = build_report([sweep_dir], best_of_lr=True)
    paths = write_report(rep, tmp_path / "bol", plots=False)
    names = {p.name for p in paths}
    assert {"best-of-lr.md", "best-of-lr.json"} <= names
    for name in ("report.md", "report.csv", "report.json"):  # the report's own files stay
        assert (tmp_path / "bol" / name).read_text() == (tmp_path / "plain" / name).read_text()
    data = json.loads((tmp_path / "bol" / "best-of-lr.json").read_text())
    assert {d["label"]: d["points_solved"] for d in data} == {"mamba": 0, "mamba+hax": 0}
    md = (tmp_path / "bol" / "best-of-lr.md").read_text()
    assert "ranges from 0.700 to 0.900" in md and "seeds 1, 2 left out" in md
    from recall_lab.experiments.best_of_lr_plot import plot_best_of_lr

    path, axes = plot_best_of_lr(rep["best_of_lr"], tmp_path / "f.png", "test.acc")
    assert path.is_file()
    seeds = [ln for ax in axes for ln in ax.get_lines() if ln.get_gid() == "seed-point"]
    assert sorted(len(ln.get_xdata()) for ln in seeds) == [2, 2, 2, 2]  # 3 + 1 seeds, 2 lrs
    picks = [(ln.get_xdata()[0], ln.get_ydata()[0]) for ax in axes for ln in ax.get_lines()
             if ln.get_gid() == "seed-pick"]
    want = sorted([(3e-3, 0.7), (3e-3, 0.9), (3e-3, 0.8), (1e-3, 0.6)])
    assert [x for p in sorted(picks) for x in p] == pytest.approx([x for p in want for x in p])


def _run(seed: int, lr: float, valid: float, test: float) -> RunRecord:
    return RunRecord(f"s{seed}-{lr}", Path("."), "done", {"train.lr": lr, "train.seed": seed},
                     {"valid": {"acc": valid}, "test": {"acc": test}})


def test_seeds_that_pick_different_lrs_and_a_tie():
    # seeds 0 and 1 are best at 1e-2 (solved there), seeds 2 and 3 at 1e-3 (not solved there
    # nor at 1e-2); seed 4 ties (0.5 at both): the tie goes to the smaller lr, 1e-3
    table = {0: ((0.2, 0.1), (0.99, 0.98)), 1: ((0.3, 0.2), (0.97, 0.96)),
             2: ((0.6, 0.55), (0.4, 0.35)), 3: ((0.7, 0.62), (0.25, 0.2)),
             4: ((0.5, 0.45), (0.5, 0.9))}
    g = Group((), {}, "x")
    for seed, ((v1, t1), (v2, t2)) in table.items():
        g.runs += [_run(seed, 1e-3, v1, t1), _run(seed, 1e-2, v2, t2)]
    g.best_lr, g.solved, g.mean = 1e-2, stats.wilson(2, 5), 0.0
    (b,) = best_of_lr([g], "test.acc", 0.95)
    assert [(p.seed, p.lr, p.value) for p in b.points] == [
        (0, 1e-2, 0.98), (1, 1e-2, 0.96), (2, 1e-3, 0.55), (3, 1e-3, 0.62), (4, 1e-3, 0.45)]
    assert b.points_solved == 2 and b.spread == pytest.approx((0.45, 0.62, 0.98))
    # the window behind the points: at 1e-3 no seed solves, at 1e-2 seeds 0 and 1 (0.98, 0.96)
    assert (b.solved_at(1e-3), b.solved_at(1e-2)) == (0, 2)
    from recall_lab.experiments.best_of_lr import lines

    assert "  - seeds solved at each lr, the same 5 seeds: lr 0.001 0/5, lr 0.01 2/5" in lines(
        [b], "test.acc")
    # one lr only: nothing to pick, no entry
    one = Group((), {}, "y", runs=[_run(0, 1e-3, 0.5, 0.5)])
    assert best_of_lr([one], "test.acc", 0.95) == []
