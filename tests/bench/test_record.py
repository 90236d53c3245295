"""The benchmark result format (recall_lab.bench.record) and `recall-lab bench --json`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from recall_lab.bench import record
from recall_lab.cli import app
from tests.cli_checks import fails_with

runner = CliRunner()


def test_summarise_percentiles_by_hand():
    # 5 sorted values 1..5: rank r = q (n - 1) -> p20 at 0.8 -> 1.8, p80 at 3.2 -> 4.2
    assert record.summarise([5.0, 1.0, 4.0, 2.0, 3.0]) == {
        "median": 3.0, "p20": 1.8, "p80": 4.2, "reps": 5}
    # 4 values 1..4 (unsorted): median 2.5; p20 at rank 0.6 -> 1.6; p80 at rank 2.4 -> 3.4
    s = record.summarise([4.0, 1.0, 3.0, 2.0])
    assert s["reps"] == 4 and s["median"] == 2.5
    assert s["p20"] == pytest.approx(1.6) and s["p80"] == pytest.approx(3.4)
    assert record.summarise([0.25]) == {"median": 0.25, "p20": 0.25, "p80": 0.25, "reps": 1}
    with pytest.raises(ValueError):
        record.summarise([])


def test_time_reps_counts_calls():
    calls = []
    times = record.time_reps(lambda: calls.append(1), reps=4, warmup=2)
    assert len(calls) == 6 and len(times) == 4 and all(t >= 0 for t in times)


def test_machine_info_keys():
    info = record.machine_info(peers=["pyarrow", "surely-not-installed-xyz"])
    for key in ("cpu_model", "cpu_cores", "torch_threads", "torch", "device", "python", "loadavg"):
        assert key in info
    import torch

    assert info["torch"] == torch.__version__ and info["torch_threads"] == torch.get_num_threads()
    assert info["cpu_model"] and info["cpu_cores"] >= 1 and len(info["loadavg"]) == 3
    import pyarrow

    assert info["peers"] == {"pyarrow": pyarrow.__version__, "surely-not-installed-xyz": None}


def test_bench_json_file_and_refusal(tmp_path, monkeypatch):
    import recall_lab.bench.generate as gen_bench

    def fake_run(console, quick):
        assert quick
        return {"cases": {"x": {"seconds": record.summarise([1.0, 3.0])}}}

    monkeypatch.setattr(gen_bench, "run", fake_run)
    monkeypatch.setattr(gen_bench, "PEERS", ("pyarrow",), raising=False)
    out = tmp_path / "b.json"
    r = runner.invoke(app, ["bench", "generate", "--quick", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert set(data) == {"machine", "generate"}
    assert data["generate"] == {"cases": {"x": {"seconds": {"median": 2.0, "p20": 1.4,
                                                            "p80": 2.6, "reps": 2}}}}
    assert "pyarrow" in data["machine"]["peers"] and "loadavg_end" in data["machine"]
    before = out.read_bytes()
    fails_with(["bench", "generate", "--quick", "--json", out], "--force")
    fails_with(["bench", "generate", "--quick", "--out", out], "--force")  # the alias
    assert out.read_bytes() == before
    r = runner.invoke(app, ["bench", "generate", "--quick", "--json", str(out), "--force"])
    assert r.exit_code == 0, r.output
