"""`bench/grid.py`: the grid's runs train the committed 16-pair cells (their configs, seed and
steps changed only), both ways, interleaved; runs per hour and the ratios come from the runs'
wall times; the family rows' ratios from their tokens/s; the old way takes the torch forms and
the new the native kernel; a clone without the committed cells gets one line."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from recall_lab.bench import BENCHES, grid
from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import dplr_native
from recall_lab.runs import load_run_config


@pytest.fixture(scope="module")
def result():
    return grid.run(Console(file=io.StringIO()), True, seeds=2, steps=3, models=("deltanet",),
                    reps=1, families=("deltanet", "rwkv7"))


def test_the_grid_runs_both_ways_and_the_ratios_come_from_the_runs(result):
    assert "grid" in BENCHES
    runs = result["runs"]
    # seed 0 old then new, seed 1 new then old
    assert [(r["seed"], r["way"]) for r in runs] == [(0, "old"), (0, "new"), (1, "new"),
                                                     (1, "old")]
    (row,) = result["models"]
    for way in grid.WAYS:
        walls = sorted(r["wall_s"] for r in runs if r["way"] == way)
        assert row["wall_s"][way]["median"] == pytest.approx(sum(walls) / 2)
        assert row["runs_per_hour"][way] == pytest.approx(3600 / row["wall_s"][way]["median"])
    assert row["ratio"] == pytest.approx(row["runs_per_hour"]["new"]
                                         / row["runs_per_hour"]["old"])
    # the same runs on two kernels: after 3 steps the held-out numbers agree closely
    assert row["max_test_acc_diff"] < 0.02
    rows = {r["mixer"]: r for r in result["rows"]}
    assert set(rows) == {"deltanet", "rwkv7"}
    for r in rows.values():
        assert r["ratio"] == pytest.approx(r["new_tokens_per_s"] / r["old_tokens_per_s"])
    assert rows["rwkv7"]["vs_deltanet"] == pytest.approx(
        rows["rwkv7"]["new_tokens_per_s"] / rows["deltanet"]["new_tokens_per_s"])


def test_the_cells_are_the_committed_configs_with_seed_and_steps_changed():
    for name, folder in grid.CELLS.items():
        committed = load_run_config(grid.ROOT / folder).to_json()
        cfg = grid.cell_config(name, 3, 50).to_json()
        assert cfg["train"].pop("seed") == 3 and cfg["train"].pop("data_seed") == 3
        assert cfg["train"].pop("steps") == 50
        for key in ("seed", "data_seed", "steps"):
            committed["train"].pop(key)
        assert cfg == committed


def test_the_old_way_takes_the_torch_forms(monkeypatch):
    from recall_lab import native

    if not native.available():
        pytest.skip("native kernels not built: both ways take the torch forms")
    calls = []
    real = dplr_native.dplr
    monkeypatch.setattr(dplr_native, "dplr", lambda *a: calls.append(1) or real(*a))
    grid.train_once("rwkv7", 0, 1, "old")
    assert not calls
    grid.train_once("rwkv7", 0, 1, "new")
    assert calls


def test_a_missing_cell_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(grid, "ROOT", tmp_path)
    with pytest.raises(RecallLabError, match="bench grid trains the committed cells"):
        grid.cell_config("deltanet", 0, 10)
