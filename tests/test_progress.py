"""recall_lab.progress driven by a fake clock (no sleeps, no threads): the ETA from measured
step times, never "0s" while work remains, piped lines at most every 30 s and only on change,
and the start line's words about runs finished before."""

import io

import pytest
from rich.console import Console

from recall_lab import progress as pg


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def tick(self, dt: float) -> None:
        self.t += dt


def _piped() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=100), buf  # a file: not a terminal


def _done(steps: int, wall: float) -> dict:
    return {"status": "done", "summary": {"valid": {"acc": 1.0}, "test": {"acc": 1.0},
                                          "steps": steps, "stopped_at": steps,
                                          "wall_s_this_session": wall}}


def test_eta_comes_from_step_times_not_the_start_up():
    clock = Clock()
    eta = pg.Eta({"a": 500, "b": 500, "c": 500}, workers=2, clock=clock)
    eta.running("a")
    clock.tick(30)  # start-up: spawn, imports, held-out sets
    eta.step("a", 1, 500)
    assert eta.seconds_left() is None and eta.text() == "eta: timing the first steps"
    clock.tick(20)
    eta.step("a", 101, 500)  # 0.2 s a step; the 30 s before step 1 are not steps
    # a: 399 steps left at 0.2 s on one worker; b and c queued, 500 x 0.2 s each, no overhead
    # measured yet: b takes the idle worker (100 s), c the one that frees first (a's, 79.8 s)
    assert eta.seconds_left() == pytest.approx(399 * 0.2 + 100)
    clock.tick(5)  # time since the last report counts as done
    assert eta.seconds_left() == pytest.approx(399 * 0.2 - 5 + 100)


def test_eta_adds_the_overheads_measured_on_finished_runs():
    clock = Clock()
    eta = pg.Eta({"a": 100, "b": 100}, workers=1, clock=clock)
    eta.running("a")
    clock.tick(10)
    eta.step("a", 1, 100)  # start-up 10 s, of which 1 step at 1 s/step: head 9 s
    clock.tick(99)
    eta.step("a", 100, 100)
    clock.tick(6)  # the test set and the length tests: tail 6 s
    eta.finished("a")
    assert eta.overheads() == pytest.approx((9.0, 6.0))
    assert eta.seconds_left() == pytest.approx(9 + 100 + 6)  # b: head + steps + tail
    eta.running("b")
    clock.tick(4)  # 4 s into b's start-up: 5 s of it left
    assert eta.seconds_left() == pytest.approx(5 + 100 + 6)
    eta.step("c", 1, 100)  # a run that fails 50 s after its first step: no final evaluation
    clock.tick(50)
    eta.finished("c", failed=True)
    assert eta.overheads() == pytest.approx((9.0, 6.0))


def test_eta_never_reads_zero_while_work_remains():
    clock = Clock()
    eta = pg.Eta({"a": 10}, clock=clock)
    eta.running("a")
    eta.step("a", 1, 10)
    clock.tick(9)
    eta.step("a", 10, 10)  # the last step: the final evaluation is still to come
    clock.tick(7)
    assert eta.remaining() and eta.seconds_left() == 0.0
    assert eta.text() == "eta: finishing" and "0s" not in eta.text()
    eta.finished("a")
    assert not eta.remaining() and eta.text() == ""
    # the train bar: after the last step it says what it is doing, not an ETA
    bar = pg.TrainProgress(*_piped()[:1], "m", 10, clock=clock, poll=None)
    for s in (1, 10):
        clock.tick(1)
        bar({"step": s, "steps": 10, "loss": 1.0, "acc": 0.5, "tokens_per_s": 10.0})
    assert bar.line().endswith("evaluating on the test set") and "0s" not in bar.eta_text()


def test_a_run_without_step_reports_is_timed_from_its_summary():
    clock = Clock()  # Ray's tasks send no step events
    eta = pg.Eta({"a": 50, "b": 50}, clock=clock)
    eta.running("a")
    clock.tick(30)
    eta.finished("a", 50, 25.0)
    assert eta.seconds_left() == pytest.approx(50 * 0.5)


def test_piped_lines_at_most_every_30s_and_only_on_change():
    console, buf = _piped()
    clock = Clock()
    state = {"k": 0}
    t = pg.Ticker(console, lambda: f"line {state['k']} at {clock():.0f}", lambda: state["k"],
                  poll=None, clock=clock)
    assert t.tick()  # the first line at once
    state["k"] = 1
    clock.tick(29)
    assert not t.tick()  # changed, but 29 s after the last line
    clock.tick(1)
    assert t.tick()
    clock.tick(300)
    assert not t.tick()  # 300 s and nothing but the clock changed
    state["k"] = 2
    assert t.tick()
    assert buf.getvalue().splitlines() == ["line 0 at 1000", "line 1 at 1030", "line 2 at 1330"]


def test_piped_sweep_prints_a_line_per_30s_of_progress_with_its_eta():
    console, buf = _piped()
    clock = Clock()
    bar = pg.SweepProgress(console, "pilot", clock=clock, poll=None)
    bar.start(2, ["a", "b"], finished=0, steps={"a": 100, "b": 100}, workers=2)
    for name in ("a", "b"):
        bar.running(name)
    for s in range(1, 60):  # a report a second: 59 s of steps, two progress lines
        clock.tick(1)
        bar.step("a", s, 100)
        bar.step("b", s, 100)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "pilot: 2 runs: 2 to run"
    progress = lines[1:]  # at once, then 30 s later (a's report of step 30 ticks it)
    assert len(progress) == 2
    assert progress[0] == ("pilot: 0 done, 1 running, 0 failed of 2, elapsed 0s, eta: timing "
                           "the first steps")
    # 70 steps left at the 1 s a step both runs measured, on two workers
    assert progress[1] == "pilot: 0 done, 2 running, 0 failed of 2, elapsed 30s, eta 1m10s"
    clock.tick(120)  # the steps since the last line (to 59), then a long wait
    bar._refresh()
    assert buf.getvalue().splitlines()[3].endswith("elapsed 2m59s, eta: finishing")
    clock.tick(600)  # nothing new to say: no line
    bar._refresh()
    assert len(buf.getvalue().splitlines()) == 4
    bar.close()


def test_the_start_line_says_finished_only_of_runs_that_finished():
    console, buf = _piped()
    pg.SweepProgress(console, "cells", left="not in this round", poll=None).start(
        12, ["a", "b"], finished=0, left=10)
    pg.SweepProgress(console, "s", poll=None).start(5, ["a"], finished=3, left=1)
    pg.SweepProgress(console, "t", poll=None).start(3, [], finished=3)
    assert buf.getvalue().splitlines() == [
        "cells: 12 runs: 2 to run, 10 not in this round",
        "s: 5 runs: 1 to run, 3 finished before this sweep, 1 left out by --only",
        "t: 3 runs: 0 to run, 3 finished before this sweep"]


def test_a_finished_run_prints_its_line_and_moves_the_eta():
    console, buf = _piped()
    clock = Clock()
    bar = pg.SweepProgress(console, "demo", clock=clock, poll=None)
    bar.start(2, ["a", "b"], steps={"a": 10, "b": 10}, workers=1)
    bar.running("a")
    bar.step("a", 1, 10)
    clock.tick(9)
    bar.step("a", 10, 10)
    clock.tick(2)
    bar.finished("a", _done(10, 9.0))
    assert "done a: valid 1.000 test 1.000 (steps at step 10)" in buf.getvalue()
    assert bar.seconds_left() == pytest.approx(10 + 2)  # b: 10 steps at 1 s, tail 2 s
    assert "1 done, 0 running, 0 failed of 2" in bar.line()
    bar.close()
