"""Training loop: learning, kill-and-resume == uninterrupted (bitwise, CPU), checkpoint round trip,
no unpickling, schedule."""

import json
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from recall_lab import checkpoint as ck
from recall_lab.config import RunConfig, TrainConfig
from recall_lab.evaluate import batch_metrics
from recall_lab.generators import TaskSpec
from recall_lab.generators.errors import RecallLabError
from recall_lab.models import build_model, model_config
from recall_lab.train import lr_at, train_run

SPEC = TaskSpec(levels=((3, 3),), values=4)  # 3 key-value pairs, 4 values: 14 tokens


def _cfg(name="mamba+hax", steps=6, **train) -> RunConfig:
    t = {"steps": steps, "batch_size": 4, "eval_every": 2, "eval_samples": 8, "test_samples": 8,
         "warmup": 2, "device": "cpu", **train}
    m = model_config(name, SPEC.vocab().size, d_model=16, d_state=4, k=4, lsh_bits=2)
    return RunConfig(model=m, train=TrainConfig(**t), task=SPEC, task_name="tiny")


class Killed(Exception):
    pass


def _kill_at(step):
    def hook(s):
        if s == step:
            raise Killed

    return hook


@pytest.mark.parametrize("name", ["mamba+hax", "mamba2+ks"])
def test_kill_and_resume_is_bit_identical(tmp_path, name):
    cfg = _cfg(name, steps=7, eval_every=3)
    full = train_run(cfg, tmp_path / "a")
    with pytest.raises(Killed):  # dies after step 5; last checkpoint is step 3
        train_run(cfg, tmp_path / "b", on_step=_kill_at(5))
    assert json.loads((tmp_path / "b" / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 3
    resumed = train_run(cfg, tmp_path / "b", resume=True)
    assert resumed["resumed_from"] == 3
    for f in (ck.MODEL, ck.BEST):
        a, b = load_file(tmp_path / "a" / f), load_file(tmp_path / "b" / f)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ra, rb = load_file(tmp_path / "a" / ck.RESUME), load_file(tmp_path / "b" / ck.RESUME)
    assert all(torch.equal(ra[k], rb[k]) for k in ra)  # AdamW moments and RNG too
    assert (tmp_path / "a" / ck.METRICS).read_text() == (tmp_path / "b" / ck.METRICS).read_text()
    assert full["test"] == resumed["test"] and full["best_step"] == resumed["best_step"]


def test_same_seed_same_weights_other_seed_differs(tmp_path):
    train_run(_cfg(steps=2), tmp_path / "a")
    train_run(_cfg(steps=2), tmp_path / "b")
    train_run(_cfg(steps=2, seed=1), tmp_path / "c")
    a, b, c = (load_file(tmp_path / r / ck.MODEL) for r in "abc")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_checkpoint_round_trip_without_unpickling(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = build_model("mamba+hax", 20, d_model=16, d_state=4, k=4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, 20, (2, 9))
    model(ids).logits.sum().backward()
    opt.step()
    best = {"acc": 0.5, "loss": 1.0, "step": 6}
    ck.save_resume(tmp_path / "r.safetensors", model, opt, {"step": 7, "best": best})
    ck.save_weights(tmp_path / "w.safetensors", model)
    rng = torch.get_rng_state()

    def boom(*a, **k):
        raise AssertionError("unpickling attempted")

    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    monkeypatch.setattr(pickle, "Unpickler", boom)
    monkeypatch.setattr(torch, "load", boom)
    torch.manual_seed(1)
    model2 = build_model("mamba+hax", 20, d_model=16, d_state=4, k=4)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    info = ck.load_resume(tmp_path / "r.safetensors", model2, opt2)
    assert info == {"step": 7, "best": best}
    assert torch.equal(torch.get_rng_state(), rng)
    for (n, p), (_, p2) in zip(model.named_parameters(), model2.named_parameters(), strict=True):
        assert torch.equal(p, p2), n
        s, s2 = opt.state[p], opt2.state[p2]
        assert all(torch.equal(torch.as_tensor(s[k]), torch.as_tensor(s2[k])) for k in s)
    model3 = build_model("mamba+hax", 20, d_model=16, d_state=4, k=4)
    ck.load_weights(tmp_path / "w.safetensors", model3)
    model.eval()
    model3.eval()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, model3(ids).logits)


def test_corrupt_and_missing_checkpoints_raise_one_clear_error(tmp_path):
    model = build_model("mamba", 20, d_model=16, d_state=4)
    with pytest.raises(RecallLabError, match="missing"):
        ck.load_weights(tmp_path / "nope.safetensors", model)
    bad = tmp_path / "bad.safetensors"
    ck.save_weights(bad, model)
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(RecallLabError, match="corrupt"):
        ck.load_weights(bad, model)
    other = tmp_path / "other.safetensors"
    ck.save_weights(other, build_model("mamba", 20, d_model=32, d_state=4))
    with pytest.raises(RecallLabError, match="does not fit"):
        ck.load_weights(other, model)


def test_lr_schedule():
    t = TrainConfig(steps=110, lr=1.0, warmup=10, schedule="cosine", min_lr=0.1)
    assert [lr_at(s, t) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert lr_at(10, t) == pytest.approx(1.0)
    assert lr_at(60, t) == pytest.approx(0.55)
    assert lr_at(110, t) == pytest.approx(0.1)
    c = TrainConfig(steps=110, lr=1.0, warmup=10)
    assert {lr_at(s, c) for s in range(10, 110)} == {1.0}


def test_metrics_per_sample_accuracy_and_exact_match():
    # sample 0: 2 targets, 1 right; sample 1: 1 target, right -> acc (0.5 + 1) / 2, exact 1/2
    targets = torch.tensor([[-100, 1, 2, -100], [0, -100, -100, -100]])
    logits = torch.full((2, 4, 3), -5.0)
    logits[0, 1, 1] = logits[0, 2, 0] = logits[1, 0, 0] = 5.0
    m = batch_metrics(logits, targets)
    assert float(m["acc_sum"]) / float(m["n_samples"]) == pytest.approx(0.75)
    assert int(m["exact"]) == 1 and int(m["n_targets"]) == 3
    ref = torch.nn.functional.cross_entropy(logits.reshape(-1, 3), targets.reshape(-1),
                                            reduction="sum")
    assert float(m["ce_sum"]) == pytest.approx(float(ref))


def test_ks_ranking_loss_enters_the_objective(tmp_path):
    """alpha scales the logged aux term into the loss: loss = ce + alpha * aux."""
    train_run(_cfg("mamba+ks", steps=2, alpha=0.5), tmp_path / "r")
    rows = [json.loads(x) for x in (tmp_path / "r" / ck.METRICS).read_text().splitlines()]
    tr = [r for r in rows if r["split"] == "train"][0]
    assert tr["aux"] > 0
    assert tr["loss"] == pytest.approx(tr["ce"] + 0.5 * tr["aux"], rel=1e-5)


def test_tiny_model_learns_tiny_mqar_to_full_accuracy(tmp_path):
    """A real learning test: 2 key-value pairs over 8 values, fresh samples every step, scored
    on unseen samples. Chance is 1/8 per key; knowing only which values occur (no key-value
    binding) gives about 0.78, so 1.0 needs recall."""
    spec = TaskSpec(levels=((2, 2),), values=8)
    m = model_config("mamba", spec.vocab().size, d_model=32, d_state=8)
    t = TrainConfig(steps=200, batch_size=32, lr=1e-2, warmup=20, eval_every=50,
                    eval_samples=64, test_samples=256, device="cpu")
    summary = train_run(RunConfig(model=m, train=t, task=spec), tmp_path / "r")
    assert summary["test"]["acc"] == 1.0
    assert summary["test"]["exact"] == 1.0
    first = json.loads((tmp_path / "r" / ck.METRICS).read_text().splitlines()[0])
    assert first["acc"] < 0.9  # it did have to learn (train accuracy over the first 50 steps)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kill -9 as on Linux")
def test_kill_9_of_the_cli_then_resume_matches_an_uninterrupted_run(tmp_path):
    """`recall-lab train` killed with SIGKILL at whatever step it has reached (after its first
    checkpoint): `train --resume` ends with the same weights and metrics as a run never killed."""
    from typer.testing import CliRunner

    from recall_lab.cli import app

    task = tmp_path / "task.toml"
    task.write_text("[task]\nlevels = [[3, 3]]\nvalues = 4\n")
    args = ["train", "--model", "mamba", "--task", str(task), "--d-model", "16", "--steps", "60",
            "--batch-size", "2", "--eval-every", "4", "--eval-samples", "4", "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "recall_lab.cli", *args, "--out", str(killed)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if (killed / ck.RESUME).is_file():
                break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert (killed / ck.RESUME).is_file(), "the run ended before its first checkpoint"
    step = ck.check_resume_info(killed / ck.RESUME, ck.load_tensors(killed / ck.RESUME)[1])["step"]
    assert step < 60, "the run ended before the kill"
    runner = CliRunner()
    r = runner.invoke(app, ["train", "--out", str(killed), "--resume"])
    assert r.exit_code == 0, r.output
    full = tmp_path / "full"
    r = runner.invoke(app, [*args, "--out", str(full)])
    assert r.exit_code == 0, r.output
    assert json.loads((killed / ck.SUMMARY).read_text())["resumed_from"] == step
    for f in (ck.MODEL, ck.BEST):
        a, b = load_file(full / f), load_file(killed / f)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (full / ck.METRICS).read_text() == (killed / ck.METRICS).read_text()
