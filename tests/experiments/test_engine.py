"""The sweep engine: every run trained once; a second sweep does nothing; an interrupted run is
resumed (same result as uninterrupted); a new grid value adds only its run; a failing run is
recorded and the others finish; Ray gives the same summaries as the local pool."""

import importlib.util
import json

import pytest

from recall_lab import checkpoint as ck
from recall_lab.experiments.engine import read_index, run_sweep
from recall_lab.experiments.grid import expand
from recall_lab.generators.errors import RecallLabError
from recall_lab.train import train_run

from .conftest import Recorder

TIMING = {"wall_s_this_session", "tokens_per_s_this_session", "resumed_from", "segments",
          "loop_s_total", "wall_s_total", "segments_untimed"}


def _summary(folder):
    s = json.loads((folder / ck.SUMMARY).read_text())
    return {k: v for k, v in s.items() if k not in TIMING}


def test_skip_resume_and_add_one_value(tmp_path, tiny):
    tiny["grid"] = {"model.name": ["mamba", "mamba+hax"], "train.seed": [0]}
    exp = expand(tiny, "x")
    # an interrupted run of the grid: killed after step 5, last checkpoint at step 3
    interrupted = next(r for r in exp.runs if r.config.model.name == "mamba+hax")
    folder = tmp_path / "tiny" / interrupted.name

    class Killed(Exception):
        pass

    def kill(step):
        if step == 5:
            raise Killed

    with pytest.raises(Killed):
        train_run(interrupted.config, folder, on_step=kill)
    assert not (folder / ck.SUMMARY).exists()

    rec = Recorder()
    index = run_sweep(exp, tmp_path, workers=2, monitor=rec)
    assert index["counts"] == {"runs": 2, "ran": 2, "skipped": 0, "left": 0, "done": 2, "failed": 0}
    assert sorted(rec.todo) == sorted(r.name for r in exp.runs)
    assert json.loads((folder / ck.SUMMARY).read_text())["resumed_from"] == 3
    # the resumed run equals one trained without interruption
    train_run(interrupted.config, tmp_path / "straight")
    assert _summary(folder) == _summary(tmp_path / "straight")
    assert (folder / ck.METRICS).read_text() == (tmp_path / "straight" / ck.METRICS).read_text()
    on_disk = read_index(tmp_path / "tiny")
    assert {e["name"]: e["status"] for e in on_disk["runs"]} == {r.name: "done" for r in exp.runs}
    assert all(e["test"] == _summary(tmp_path / "tiny" / e["name"])["test"]
               for e in on_disk["runs"])

    # a second sweep does nothing
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "tiny").rglob("*.safetensors")}
    rec = Recorder()
    index = run_sweep(exp, tmp_path, workers=2, monitor=rec)
    assert index["counts"]["ran"] == 0 and index["counts"]["skipped"] == 2 and rec.todo == []
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes

    # one more seed: only its two runs are trained
    tiny["grid"]["train.seed"] = [0, 1]
    bigger = expand(tiny, "x")
    rec = Recorder()
    index = run_sweep(bigger, tmp_path, workers=1, monitor=rec)
    new = sorted(r.name for r in bigger.runs if r.config.train.seed == 1)
    assert sorted(rec.todo) == new and sorted(n for n, _ in rec.ended) == new
    assert index["counts"] == {"runs": 4, "ran": 2, "skipped": 2, "left": 0, "done": 4, "failed": 0}
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes


def test_a_failing_run_is_recorded_and_the_rest_finish(tmp_path, tiny):
    # k = 64 is longer than the 14-token samples: that run fails when it starts training
    tiny["model"]["name"] = "mamba+hax"
    tiny["grid"] = {"model.k": [4, 64, 2]}
    exp = expand(tiny, "x")
    rec = Recorder()
    index = run_sweep(exp, tmp_path, workers=2, monitor=rec)
    assert index["counts"]["failed"] == 1 and index["counts"]["done"] == 2
    by_k = {e["values"]["model.k"]: e for e in read_index(tmp_path / "tiny")["runs"]}
    assert by_k[64]["status"] == "failed"
    assert "k=64 is larger than the sequence" in by_k[64]["error"]
    assert by_k[4]["status"] == by_k[2]["status"] == "done"
    assert (tmp_path / "tiny" / by_k[2]["name"] / ck.SUMMARY).is_file()
    # a failed run is tried again by the next sweep; finished ones are not
    index = run_sweep(exp, tmp_path, workers=1)
    assert index["counts"]["ran"] == 1 and index["counts"]["failed"] == 1


@pytest.mark.slow  # starting a local Ray instance takes tens of seconds on 2 cores
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
def test_ray_engine_gives_the_local_summaries(tmp_path, tiny):
    tiny["grid"] = {"model.name": ["mamba", "mamba+hax"]}
    exp = expand(tiny, "x")
    local = run_sweep(exp, tmp_path / "local", workers=2)
    ray = run_sweep(exp, tmp_path / "ray", workers=2, engine="ray")
    assert local["counts"] == ray["counts"] == {"runs": 2, "ran": 2, "skipped": 0, "left": 0,
                                                "done": 2, "failed": 0}
    for run in exp.runs:
        a = _summary(tmp_path / "local" / "tiny" / run.name)
        b = _summary(tmp_path / "ray" / "tiny" / run.name)
        assert a == b


def test_an_interrupted_sweep_stops_its_workers_and_leaves_runs_pending(tmp_path, tiny):
    import multiprocessing

    tiny["grid"] = {"train.steps": [2, 3000, 3001]}
    exp = expand(tiny, "x")

    class Interrupt(Recorder):
        def finished(self, name, result):  # Ctrl-C arriving when the first run is done
            super().finished(name, result)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(exp, tmp_path, workers=2, monitor=Interrupt())
    # the worker still training was stopped, not left to take the next run
    assert [p for p in multiprocessing.active_children() if p.name.startswith("SpawnProcess")] \
        == []
    status = {e["values"]["train.steps"]: e["status"]
              for e in read_index(tmp_path / "tiny")["runs"]}
    assert status == {2: "done", 3000: "pending", 3001: "pending"}
    long_run = next(r for r in exp.runs if r.config.train.steps == 3000)
    assert not (tmp_path / "tiny" / long_run.name / ck.SUMMARY).exists()


def test_a_warm_worker_gives_each_run_the_weights_of_a_fresh_process(tmp_path, tiny):
    """Pool workers run many configs each (engine.execute in one process): a run's weights must
    not depend on what that process ran before. Two configs in one process, in both orders,
    after torch's RNG and thread count were disturbed: byte-identical weights."""
    import torch

    from recall_lab.experiments.engine import execute

    tiny["grid"] = {"model.name": ["mamba+hax", "mamba2"], "train.seed": [1]}
    runs = expand(tiny, "x").runs
    weights = {}
    before = torch.get_num_threads()
    try:
        for order in (runs, runs[::-1]):
            tag = "ab" if order is runs else "ba"
            torch.manual_seed(123)
            torch.rand(7)
            for r in order:
                job = {"name": r.name, "config": r.config.to_json(), "threads": 1,
                       "dir": str(tmp_path / tag / r.name), "resume": False}
                result = execute(job)
                assert result["status"] == "done", result.get("traceback")
                assert result["wall_s"] >= result["summary"]["wall_s_this_session"]
                weights[tag, r.name] = (tmp_path / tag / r.name / ck.MODEL).read_bytes()
                torch.set_num_threads(2)  # left behind for the next run
    finally:
        torch.set_num_threads(before)
    for r in runs:
        assert weights["ab", r.name] == weights["ba", r.name]


def test_the_sweep_records_its_time_outside_training(tmp_path, tiny):
    tiny["grid"] = {"model.name": ["mamba"], "train.seed": [0, 1]}
    index = run_sweep(expand(tiny, "x"), tmp_path, workers=1)
    tm = index["timing"]
    assert tm["runs"] == 2 and tm["workers"] == 1
    assert 0 < tm["train_s"] < tm["wall_s"]
    assert tm["overhead_per_run_s"] == pytest.approx((tm["wall_s"] - tm["train_s"]) / 2)


def test_only_runs_a_slice_and_the_rest_stay_pending(tmp_path, tiny):
    """--only: the matching unfinished runs train, the others stay listed as pending; a later
    sweep without it trains just those; a rule matching nothing is refused before any write."""
    from recall_lab.experiments.grid import parse_only

    tiny["grid"] = {"model.name": ["mamba", "mamba+sw"], "train.seed": [0, 1]}
    exp = expand(tiny, "x")
    rec = Recorder()
    index = run_sweep(exp, tmp_path, monitor=rec, only=parse_only(["model.name=mamba+sw"]))
    sw = sorted(r.name for r in exp.runs if r.config.model.name == "mamba+sw")
    assert sorted(rec.todo) == sw
    status = {e["name"]: e["status"] for e in index["runs"]}
    assert status == {r.name: "done" if r.name in sw else "pending" for r in exp.runs}
    # the two unfinished runs outside the slice are "left", not counted as already done
    assert index["counts"] == {"runs": 4, "ran": 2, "skipped": 0, "left": 2, "done": 2,
                               "failed": 0}
    rec = Recorder()
    run_sweep(exp, tmp_path, monitor=rec)
    assert sorted(rec.todo) == sorted(r.name for r in exp.runs if r.name not in sw)
    before = (tmp_path / "tiny" / "sweep.json").read_bytes()
    with pytest.raises(RecallLabError, match="matches none"):
        run_sweep(exp, tmp_path, only=parse_only(["train.seed=7"]))
    assert (tmp_path / "tiny" / "sweep.json").read_bytes() == before
    with pytest.raises(RecallLabError, match="FIELD=VALUE"):
        parse_only(["model.name"])
    with pytest.raises(RecallLabError, match="unknown field"):
        parse_only(["model.nmae=mamba"])
    assert parse_only(["task.levels=[[16,16]]", "train.lr=3e-3"]) == {
        "task.levels": [[16, 16]], "train.lr": 3e-3}


def test_only_repeated_on_one_field_is_an_or(tmp_path, tiny):
    """--only: the same field given twice selects either value (an OR); different fields AND;
    a list value (task.levels) stays one value, not alternatives."""
    from recall_lab.experiments.engine import plan
    from recall_lab.experiments.grid import parse_only

    tiny["grid"] = {"model.name": ["mamba", "mamba+sw", "transformer"], "train.seed": [0, 1]}
    exp = expand(tiny, "x")
    rule = parse_only(["model.name=mamba", "model.name=transformer", "train.seed=1"])
    assert rule == {"model.name": ("mamba", "transformer"), "train.seed": 1}
    fresh = sorted(j.run.name for j in plan(exp, tmp_path, rule) if j.action == "fresh")
    assert fresh == sorted(r.name for r in exp.runs if r.config.train.seed == 1
                           and r.config.model.name in ("mamba", "transformer"))
    assert parse_only(["task.levels=[[16,16]]", "task.levels=[[8,8]]"]) == {
        "task.levels": ([[16, 16]], [[8, 8]])}


def test_a_renamed_run_with_the_same_config_is_found_again(tmp_path, tiny):
    """A grid edit that renames runs without changing their configs (here: train.steps becomes
    a linked axis, so every name gains a `steps` part) finds the finished runs again by their
    config hash: they are renamed on disk, not retrained, and keep the claims they were launched
    under; a run whose config did change is new. A dry run (`plan`) already shows them as done."""
    from recall_lab.experiments.engine import plan

    tiny["grid"] = {"model.name": ["mamba", "mamba+sw"], "train.seed": [0]}
    tiny["report"] = {"expect": [{"claim": "c", "a": {"model.name": "mamba"}, "value": 0.0}]}
    exp = expand(tiny, "x")
    run_sweep(exp, tmp_path)
    steps = tiny["train"]["steps"]
    weights = {r.hash: (tmp_path / "tiny" / r.name / ck.MODEL).read_bytes() for r in exp.runs}
    registered = {e["hash"]: e["registration"] for e in read_index(tmp_path / "tiny")["runs"]}

    del tiny["grid"]["model.name"]
    tiny["link"] = [{"model.name": ["mamba", "mamba+sw"], "train.steps": [steps, steps + 1]}]
    edited = expand(tiny, "x")
    kept = next(r for r in edited.runs if r.config.model.name == "mamba")
    changed = next(r for r in edited.runs if r.config.model.name == "mamba+sw")
    old_names = {r.name for r in exp.runs}
    assert kept.name not in old_names and kept.hash in weights and changed.hash not in weights
    actions = {j.run.name: j.action for j in plan(edited, tmp_path)}
    assert actions == {kept.name: "skip", changed.name: "fresh"}

    rec = Recorder()
    index = run_sweep(edited, tmp_path, monitor=rec)
    assert rec.todo == [changed.name]
    assert index["counts"] == {"runs": 2, "ran": 1, "skipped": 1, "left": 0, "done": 2, "failed": 0}
    folder = tmp_path / "tiny" / kept.name
    assert (folder / ck.MODEL).read_bytes() == weights[kept.hash]
    old_kept = next(r.name for r in exp.runs if r.hash == kept.hash)
    assert not (tmp_path / "tiny" / old_kept).exists()
    entries = {e["name"]: e for e in index["runs"]}
    assert entries[kept.name]["registration"] == registered[kept.hash] is not None
    # the other old run's config changed: it is left where it was, outside the grid
    old_other = next(r.name for r in exp.runs if r.hash != kept.hash)
    assert (tmp_path / "tiny" / old_other / ck.SUMMARY).is_file()
