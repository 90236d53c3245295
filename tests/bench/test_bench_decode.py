"""`recall-lab bench decode`: the length ladder, the growth exponent (a log-log slope checked on
known powers), and a tiny run through the CLI whose JSON says the constant-state model's bytes do
not grow while the Transformer's do."""

import json

import pytest
from typer.testing import CliRunner

from recall_lab.bench.decode import ladder, slope
from recall_lab.cli import app


def test_ladder_and_slope():
    assert ladder(65536) == [1024 * 2**i for i in range(7)]
    assert ladder(64) == [8, 16, 32, 64]
    xs = [8, 16, 32, 64]
    assert slope(xs, [3.0] * 4) == pytest.approx(0.0, abs=1e-12)
    assert slope(xs, [2.0 * x for x in xs]) == pytest.approx(1.0)
    assert slope(xs, [x**0.5 for x in xs]) == pytest.approx(0.5)


def test_bench_decode_json(tmp_path, monkeypatch):
    monkeypatch.setattr("recall_lab.bench.decode.MODELS", ("mamba+sw", "transformer"))
    monkeypatch.setattr("recall_lab.bench.decode.REPS", 2)
    out = tmp_path / "d.json"
    r = CliRunner().invoke(app, ["bench", "decode", "--max-len", "32", "--json", str(out)])
    assert r.exit_code == 0, r.output
    res = {m["model"]: m for m in json.loads(out.read_text())["decode"]["models"]}
    assert [row["L"] for row in res["mamba+sw"]["rows"]] == [8, 16, 32]
    assert res["mamba+sw"]["state"] == "constant"
    assert res["mamba+sw"]["bytes_exponent"] == pytest.approx(0, abs=1e-9)
    assert res["transformer"]["state"] == "L" and res["transformer"]["bytes_exponent"] > 0.3
