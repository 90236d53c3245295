"""`recall-lab mean-distance` / `attention-map` on a tiny trained hybrid run, and the evaluation
inputs they use."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from recall_lab.analysis import hidden_attention_loop, mean_distance_loop
from recall_lab.analysis.collect import capture, eval_inputs
from recall_lab.analysis.runs import load_run
from recall_lab.cli import app
from recall_lab.generators import TaskSpec

SPEC = TaskSpec(levels=((4, 6),), values=8, pools=(16,))
runner = CliRunner()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from recall_lab.config import RunConfig, TrainConfig
    from recall_lab.models import model_config
    from recall_lab.train import train_run

    out = tmp_path_factory.mktemp("runs") / "hax"
    cfg = RunConfig(
        model=model_config("mamba+hax", SPEC.vocab().size, d_model=16, k=8),
        train=TrainConfig(steps=2, batch_size=4, eval_every=2, eval_samples=8, test_samples=8,
                          warmup=0),
        task=SPEC,
    )
    train_run(cfg, out)
    return out


@pytest.mark.parametrize("length", [2, 7, 26, 90])
def test_eval_inputs_exact_length_in_vocab_and_stable(length):
    x = eval_inputs(SPEC, length, 3, seed=5)
    assert x.shape == (3, length)
    assert int(x.min()) >= 0 and int(x.max()) < SPEC.vocab().size
    assert bool((x[:, 0] == SPEC.vocab().BOS).all())
    assert torch.equal(x, eval_inputs(SPEC, length, 3, seed=5))
    assert torch.equal(x[1], eval_inputs(SPEC, length, 2, seed=5)[1])  # row r independent of n
    if length > SPEC.sample_length([16]):  # longer than any table: samples concatenated
        assert int((x == SPEC.vocab().BOS).sum(1).min()) >= 2


def test_mean_distance_command(run_dir):
    res = runner.invoke(app, ["mean-distance", str(run_dir), "--lengths", "12,40",
                              "--samples", "2"])
    assert res.exit_code == 0, res.output
    data = json.loads((run_dir / "analysis" / "mean_distance.json").read_text())
    png = (run_dir / "analysis" / "mean_distance.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    rows = data["rows"]
    assert {(r["length"], r["layer"], r["memory"]) for r in rows} == {
        (L, layer, mem) for L in (12, 40) for layer in (0, 1) for mem in ("ssm", "attention")}
    for r in rows:
        assert r["md_last_norm"] == pytest.approx(r["md_last"] / r["length"])
        assert 0 <= r["md_last"] <= r["length"] - 1
    # tie the table to the reference path: loop-built alpha, loop mean distance, per channel
    model, _ = load_run(run_dir)
    cap = capture(model, eval_inputs(SPEC, 40, 2, seed=0))
    alpha = hidden_attention_loop(cap.params[1])  # [2, c, 40, 40]
    ref = np.mean([float(mean_distance_loop(alpha[b, c])[-1])
                   for b in range(2) for c in range(alpha.shape[1])])
    row = next(r for r in rows if (r["length"], r["layer"], r["memory"]) == (40, 1, "ssm"))
    assert row["md_last"] == pytest.approx(ref, rel=1e-4)

    again = runner.invoke(app, ["mean-distance", str(run_dir), "--lengths", "12,40"])
    assert again.exit_code == 2 and "--force" in again.output and "Traceback" not in again.output
    forced = runner.invoke(app, ["mean-distance", str(run_dir), "--lengths", "12", "--force",
                                 "--last-only", "--samples", "1"])
    assert forced.exit_code == 0, forced.output
    assert "md_all" not in json.loads((run_dir / "analysis" / "mean_distance.json")
                                      .read_text())["rows"][0]


def test_attention_map_command(run_dir, tmp_path):
    for memory in ("ssm", "attention"):
        out = tmp_path / f"{memory}.png"
        res = runner.invoke(app, ["attention-map", str(run_dir), "--layer", "1", "--index", "1",
                                  "--length", "30", "--memory", memory, "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert out.read_bytes()[:4] == b"\x89PNG"
        res = runner.invoke(app, ["attention-map", str(run_dir), "--layer", "1",
                                  "--memory", memory, "--out", str(out)])
        assert res.exit_code == 2  # exists, no --force


@pytest.mark.parametrize("args", [
    ["mean-distance", "{run}", "--lengths", "a,b"],
    ["mean-distance", "{run}", "--lengths", "1"],
    ["mean-distance", "{run}/missing"],
    ["mean-distance", "{run}", "--task", "no-such-preset"],
    ["attention-map", "{run}", "--layer", "7"],
    ["attention-map", "{run}", "--layer", "0", "--channel", "999"],
    ["attention-map", "{run}", "--layer", "0", "--channel", "x"],
])
def test_bad_input_one_line_exit_2(run_dir, tmp_path, args):
    args = [a.replace("{run}", str(run_dir)) for a in args]
    if args[0] == "attention-map":
        args += ["--out", str(tmp_path / "x.png")]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) <= 2
