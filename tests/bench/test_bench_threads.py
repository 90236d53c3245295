"""`recall-lab bench threads` and the thread default it measures: the default's rule on given
machine states, its summary arithmetic on synthetic records, and how `train` says its choice."""

import pytest

from recall_lab.bench import BENCHES, threads
from recall_lab.device import default_threads, idle_cores, usable_cpus


def test_the_default_takes_the_idle_cores_at_least_one_at_most_all():
    assert default_threads(idle=1.9, cores=2) == 2  # nothing else running
    assert default_threads(idle=0.9, cores=2) == 1  # one other busy process
    assert default_threads(idle=0.0, cores=2) == 1  # a loaded machine
    assert default_threads(idle=7.6, cores=2) == 2
    assert default_threads(idle=5.4, cores=16) == 5
    idle = idle_cores(0.05)  # this machine, now: a share of its usable CPUs
    assert idle is None or 0.0 <= idle <= len(usable_cpus())


def test_set_threads_says_how_it_chose(monkeypatch):
    import torch

    from recall_lab.commands.training import set_threads

    before = torch.get_num_threads()
    try:
        assert set_threads(1) == "1 torch thread (--threads)"
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert set_threads(None).endswith("(OMP_NUM_THREADS)")
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.setattr("recall_lab.threads.default_threads", lambda: 1)
        assert set_threads(None).startswith("1 torch thread (of ")
        assert set_threads(None).endswith(" cores, those idle at the start; --threads sets it)")
    finally:
        torch.set_num_threads(before)


def _rec(cond, arm, threads_used, tour, load=1.0):
    return {"condition": cond, "arm": arm, "threads": threads_used, "load_start": load,
            "load_end": load + 1, "step_s": {"tour": tour, "zoo-frontier": 1.0,
                                             "zoology-fig2": 2.0}}


def test_the_summary_compares_the_default_with_the_better_fixed_count():
    assert "threads" in BENCHES
    recs = [_rec("as found", "1", 1, 0.30), _rec("as found", "2", 2, 0.20),
            _rec("as found", "default", 2, 0.21), _rec("as found", "1", 1, 0.32),
            _rec("as found", "2", 2, 0.22), _rec("as found", "default", 2, 0.23),
            _rec("one busy process", "1", 1, 0.3, load=2), _rec("one busy process", "2", 2, 0.6),
            _rec("one busy process", "default", 1, 0.36)]
    out = threads.summary(recs)
    idle = out["cells"]["as found / tour"]
    assert idle["arms"]["2"]["median"] == pytest.approx(0.21)
    assert idle["default_over_best"] == pytest.approx(0.22 / 0.21)
    assert idle["two_over_one"] == pytest.approx(0.21 / 0.31) and idle["default_threads"] == [2]
    busy = out["cells"]["one busy process / tour"]
    assert busy["default_over_best"] == pytest.approx(1.2)
    assert busy["load"] == [1, 2, 3]  # min, median, max
    assert out["cells"]["one busy process / zoology-fig2"]["default_over_best"] == 1.0
    assert not out["met"]  # 1.2 > the goal's 1.10


def test_every_arm_goes_first_and_meets_every_shape_first_over_three_rounds():
    rounds = [threads.schedule(r) for r in range(3)]
    assert {rnd[0][0] for rnd in rounds} == set(threads.ARMS)
    for arm in threads.ARMS:
        firsts = {order[0] for rnd in rounds for a, order in rnd if a == arm}
        assert firsts == set(threads.SHAPES), arm
    for rnd in rounds:  # each round: every arm once, every shape once per arm
        assert sorted(a for a, _ in rnd) == sorted(threads.ARMS)
        assert all(sorted(o) == sorted(threads.SHAPES) for _, o in rnd)
