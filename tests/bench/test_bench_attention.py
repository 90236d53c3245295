"""`recall-lab bench attention`: the side-by-side rows (ours, ours on csr, dense, FlexAttention)
and their ratios, on fake case results."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from recall_lab.bench import attention as bench_attention

# seconds per step and peak MB of each method (the fake cases' medians)
FAKE = {"ours": (0.5, 10.0), "ours-csr": (1.0, 20.0), "dense": (5.0, 300.0),
        "seattn": (0.7, 12.0), "attamba-p8": (0.9, 15.0), "attamba-sqrt": (0.8, 14.0)}


def _fake_spawn(method, length, mode, timeout, batch=1):
    base = method.split("-")[-1] if method.endswith(("-ours", "-flex")) else None
    if base == "flex":
        sec, mb = 2.0, 5.0
    elif base == "ours":
        sec, mb = 1.0, 8.0
    else:
        sec, mb = FAKE[method]
    scale = length / 1024
    return {"time_s": {"median": sec * scale, "p20": sec * scale, "p80": sec * scale,
                       "reps": 1},
            "peak_mb": mb * scale, "memory_method": "fake", "block_sparsity": 50.0}


def test_rows_put_ours_csr_and_dense_side_by_side(monkeypatch):
    monkeypatch.setattr(bench_attention, "_spawn", _fake_spawn)
    console = Console(file=io.StringIO(), width=250, record=True)
    res = bench_attention.run(console, quick=True)
    text = console.export_text()
    assert "csr ms" in text and "sparse op backend" in text
    row = next(r for r in res["rows"] if r["B"] == 1 and r["L"] == 1024 and r["mode"] == "fwd")
    assert row["speedup"] == pytest.approx(10.0)  # dense 5.0 s / ours 0.5 s
    assert row["memory_ratio"] == pytest.approx(30.0)
    assert row["ours-csr_s"] == pytest.approx(1.0)
    flex = next(r for r in res["flex_rows"] if r["pattern"] == "sw" and r["L"] == 1024)
    assert flex["flex_over_ours"] == pytest.approx(2.0)
    assert res["exponents"]["ours fwd"]["time"] == pytest.approx(1.0)
    assert res["setup"]["sparse_backend"] in ("native", "csr")
