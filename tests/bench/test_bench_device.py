"""`recall-lab bench --device`: on the CPU nothing changes (the same bench functions, called
the same way, the same JSON); a device that is not there is one error line, exit 2."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import recall_lab.bench.attention as attention_bench
import recall_lab.bench.train as train_bench
from recall_lab.bench import run_bench
from recall_lab.cli import app
from tests.cli_checks import fails_with

runner = CliRunner()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_one_error_line(tmp_path):
    for which in (["attention"], ["ssm"], ["train"], []):
        fails_with(["bench", *which, "--device", "cuda", "--json", tmp_path / "x.json"],
                   "CUDA is not available")
    assert not (tmp_path / "x.json").exists()


def test_unknown_device_is_one_error_line():
    fails_with(["bench", "attention", "--device", "tpu9"], "device")


def test_cpu_device_runs_the_cpu_bench_unchanged(tmp_path, monkeypatch):
    calls = []

    def fake_run(console, quick):  # the CPU bench's own signature: no device argument
        calls.append(quick)
        return {"rows": [{"L": 256, "ours_s": 0.5}]}

    monkeypatch.setattr(attention_bench, "run", fake_run)
    outs = []
    for extra in ([], ["--device", "cpu"]):
        out = tmp_path / f"b{len(outs)}.json"
        r = runner.invoke(app, ["bench", "attention", "--quick", "--json", str(out), *extra])
        assert r.exit_code == 0, r.output
        outs.append(json.loads(out.read_text()))
    assert calls == [True, True]
    assert outs[0]["attention"] == outs[1]["attention"] == {"rows": [{"L": 256, "ours_s": 0.5}]}
    assert "bench_device" not in outs[0]["machine"] and "bench_device" not in outs[1]["machine"]


def test_cpu_train_bench_hides_any_gpu_from_its_cases(monkeypatch):
    seen = {}
    monkeypatch.setattr(train_bench, "run", lambda console, quick, device="auto":
                        seen.setdefault("device", device) and {})
    run_bench("train", None, True)
    assert seen["device"] == "cpu"
    env = {}

    def fake_subprocess_run(cmd, **kw):
        env.update(kw["env"])
        raise OSError("not started")

    monkeypatch.setattr(train_bench.subprocess, "run", fake_subprocess_run)
    with pytest.raises(OSError):
        train_bench._child("--case", "mamba", 1, 1, device="cpu")
    assert env["CUDA_VISIBLE_DEVICES"] == ""
