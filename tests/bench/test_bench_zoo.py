"""`bench/zoo.py`: every zoo mixer's chunked model row beside its loop row (same weights, outputs
equal), the lab's mamba / mamba2 rows, the ratios computed from the rows (the 2026 families'
over deltanet's too), and the core rows (ours chunked, ours loop, FLA's naive op where
installed) compute the same recurrence."""

from __future__ import annotations

import io

import pytest
import torch
from rich.console import Console

from recall_lab.bench import BENCHES, zoo


@pytest.fixture(scope="module")
def result():
    return zoo.run(Console(file=io.StringIO()), True, shapes=[(2, 12)], reps=1, peak=50.0)


def test_rows_cover_every_mixer_and_the_ratios_come_from_them(result):
    assert "zoo" in BENCHES
    rows = {(r["mixer"], r["impl"]): r for r in result["model"]}
    assert {("mamba", "default"), ("mamba2", "default")} <= rows.keys()
    for name in zoo.ZOO:
        fast, loop = rows[name, "default"], rows[name, "recurrent"]
        assert loop["max_err"] < 1e-4  # the loop is the same model
        assert fast["vs_loop"] == pytest.approx(fast["tokens_per_s"] / loop["tokens_per_s"])
        assert fast["mamba2_over"] == pytest.approx(
            rows["mamba2", "default"]["tokens_per_s"] / fast["tokens_per_s"])
        assert fast["gflops"] == pytest.approx(6 * fast["params"] * 24 / fast["time"]["median"]
                                               / 1e9)
    assert {r["mixer"] for r in result["core"]} == set(zoo.ZOO)
    for name in zoo.NEW:  # the 2026 families over deltanet's row at the same shape
        assert rows[name, "default"]["vs_deltanet"] == pytest.approx(
            rows[name, "default"]["tokens_per_s"] / rows["deltanet", "default"]["tokens_per_s"])


def test_core_cases_compute_the_same_recurrence():
    pytest.importorskip("einops")  # FLA's naive modules import it
    for name, impls in zoo.core_cases(2, 12).items():
        outs = {impl: fn().detach() for impl, fn in impls.items()}
        # hyena and mamba3 have no naive function by their authors' groups
        assert name in ("hyena", "mamba3") or "fla naive" in outs or not zoo._fla_naive("gla")
        for impl, o in outs.items():
            torch.testing.assert_close(o, outs["loop"], rtol=1e-4, atol=1e-5,
                                       msg=f"{name} {impl}")
