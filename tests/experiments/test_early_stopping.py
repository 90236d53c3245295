"""Early stopping in train_run: at an accuracy threshold (zoology's 0.99 rule) or after a patience
of evaluations without a better checkpoint; the summary says why; a resumed run stops where the
uninterrupted one did."""

import importlib
import json

import pytest

from recall_lab import checkpoint as ck
from recall_lab.config import RunConfig, TrainConfig
from recall_lab.generators import TaskSpec
from recall_lab.models import model_config
from recall_lab.train import stop_reason, train_run

# the module (the package's `recall_lab.train` is the API's function)
train_mod = importlib.import_module("recall_lab.train")


def test_stop_reason_by_hand():
    t = TrainConfig(eval_every=10, stop_at=0.9, patience=2)
    assert stop_reason(t, {"acc": 0.95, "step": 30}, 30) == "stop_at"
    assert stop_reason(t, {"acc": 0.5, "step": 30}, 40) is None  # 1 evaluation without a better
    assert stop_reason(t, {"acc": 0.5, "step": 30}, 50) == "patience"  # 2 evaluations
    plain = TrainConfig(eval_every=10)
    assert stop_reason(plain, {"acc": 1.0, "step": 10}, 1000) is None


def _valid_rows(folder):
    rows = [json.loads(x) for x in (folder / ck.METRICS).read_text().splitlines()]
    return [r for r in rows if r["split"] == "valid"]


def test_stops_at_the_first_evaluation_that_reaches_the_threshold(tmp_path):
    # the learning test's setting (tests/models/test_train_resume.py): 2 pairs over 8 values
    # reaches accuracy 1.0 within 200 steps
    spec = TaskSpec(levels=((2, 2),), values=8)
    m = model_config("mamba", spec.vocab().size, d_model=32, d_state=8)
    t = TrainConfig(steps=600, batch_size=32, lr=1e-2, warmup=20, eval_every=25,
                    eval_samples=64, test_samples=64, device="cpu", stop_at=0.9)
    s = train_run(RunConfig(model=m, train=t, task=spec), tmp_path / "r")
    valid = _valid_rows(tmp_path / "r")
    assert s["stopped"] == "stop_at" and s["stopped_at"] == valid[-1]["step"] < 600
    assert valid[-1]["acc"] >= 0.9 and all(r["acc"] < 0.9 for r in valid[:-1])
    assert s["valid"]["acc"] == valid[-1]["acc"]


def _tiny(**train):
    spec = TaskSpec(levels=((3, 3),), values=4)
    m = model_config("mamba", spec.vocab().size, d_model=16, d_state=4)
    t = TrainConfig(steps=40, batch_size=4, eval_every=4, eval_samples=8, test_samples=16,
                    warmup=2, device="cpu", **train)
    return RunConfig(model=m, train=t, task=spec)


def test_patience_stops_after_evaluations_without_a_better_checkpoint(tmp_path, monkeypatch):
    accs = iter([0.5, 0.6, 0.6, 0.55, 0.58, 0.9, 0.9])  # scripted held-out accuracies
    real = train_mod.evaluate

    def scripted(model, x, *a, **k):
        out = real(model, x, *a, **k)
        if len(x) == 8:  # the held-out set (the test set has 16 samples)
            out = {**out, "acc": next(accs), "loss": 1.0}
        return out

    monkeypatch.setattr(train_mod, "evaluate", scripted)
    cfg = _tiny(patience=3)
    # evaluations at steps 4, 8, 12, 16, 20: best 0.6 at step 8 (equal acc, equal loss at 12 is
    # no better); 12, 16, 20 bring nothing -> stop after step 20
    s = train_run(cfg, tmp_path / "r")
    assert (s["stopped"], s["stopped_at"], s["best_step"]) == ("patience", 20, 8)
    assert [r["step"] for r in _valid_rows(tmp_path / "r")] == [4, 8, 12, 16, 20]


def test_a_stopped_run_resumed_before_its_summary_stops_at_once(tmp_path):
    cfg = _tiny(stop_at=0.01)  # any accuracy reaches it: stops at the first evaluation
    first = train_run(cfg, tmp_path / "r")
    assert (first["stopped"], first["stopped_at"]) == ("stop_at", 4)
    (tmp_path / "r" / ck.SUMMARY).unlink()  # as if killed between the checkpoint and summary
    again = train_run(cfg, tmp_path / "r", resume=True)
    assert (again["stopped"], again["stopped_at"]) == ("stop_at", 4)
    assert again["test"] == first["test"]
    assert [r["step"] for r in _valid_rows(tmp_path / "r")] == [4]


@pytest.mark.parametrize("bad", [{"stop_at": 1.5}, {"stop_at": 0}, {"patience": 0}])
def test_bad_early_stopping_values_are_rejected(bad):
    with pytest.raises(ValueError):
        TrainConfig(**bad)
