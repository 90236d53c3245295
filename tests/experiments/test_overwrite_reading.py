"""The overwrite frontier's reading (experiments/overwrite.py) on hand-made records: each run
lands at its row and table (plain 8 and 16 pairs, forgetting 8 + 4 and 8 + 8), the counts and
Wilson intervals are the seeds' own, rows are ordered by state, a table with runs still
missing is marked interrupted, and the page and figure are written from the same reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recall_lab.experiments import overwrite as ow
from recall_lab.experiments import stats
from recall_lab.experiments.grid import load_experiment

ROOT = Path(__file__).resolve().parents[2]
TOML = ROOT / "experiments" / "overwrite" / "overwrite.toml"


def _tag(cfg) -> str:
    task = cfg.task.model_dump() if hasattr(cfg.task, "model_dump") else {}
    kwargs = task.get("kwargs") or {}
    return f"u{kwargs['num_updates']}" if "num_updates" in kwargs else \
        f"p{cfg.task.levels[0][1]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run folders made from overwrite.toml's own grid (its configs as written), with summaries
    chosen by hand: (row, table tag) -> the accuracies of seeds 0, 1, 2 (None: launched, not
    finished)."""
    root = tmp_path_factory.mktemp("overwrite")
    plan = {("transformer", "p8"): [1.0, 1.0, 0.99],
            ("transformer", "u8"): [0.99, 0.2, 0.96],
            ("mamba2", "p8"): [0.97, 0.5, 0.96],
            ("mamba2", "u4"): [0.1, 0.2, None]}
    for run in load_experiment(TOML).runs:
        cfg = run.config
        key = (cfg.model.name, _tag(cfg))
        if key not in plan or cfg.train.seed > 2:
            continue
        folder = root / run.name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(cfg.to_json()))
        acc = plan[key][cfg.train.seed]
        if acc is not None:
            (folder / "summary.json").write_text(json.dumps(
                {"test": {"acc": acc}, "valid": {"acc": acc}, "steps": 10, "stopped_at": 10,
                 "best_step": 10, "loop_s_total": 2.0, "wall_s_this_session": 2.5}))
    return root


def test_each_run_lands_at_its_row_and_table(runs):
    read = ow.reading([runs])
    by_row = {r["row"]: r for r in read["rows"]}
    assert set(by_row) == {"transformer", "mamba2 d_state=1"}
    # the state orders the rows: mamba2's fixed state before attention's growing cache
    assert [r["row"] for r in read["rows"]] == ["mamba2 d_state=1", "transformer"]
    t = by_row["transformer"]["tables"]
    assert set(t) == {"8 live, 8 written", "8 live, 16 written"}
    cell = t["8 live, 16 written"]
    want = stats.wilson(2, 3)
    assert (cell["k"], cell["n"], cell["lo"], cell["hi"]) == (2, 3, want.lo, want.hi)
    assert cell["complete"]
    m = by_row["mamba2 d_state=1"]["tables"]
    assert (m["8 live, 8 written"]["k"], m["8 live, 8 written"]["n"]) == (2, 3)
    interrupted = m["8 live, 12 written"]
    assert (interrupted["k"], interrupted["n"], interrupted["planned"]) == (0, 2, 3)
    assert not interrupted["complete"]
    assert ow.cell_text(interrupted) == "0/2 so far (interrupted, 3 planned)"
    assert (read["runs_done"], read["runs_planned"]) == (11, 12)
    assert read["train_s"] == pytest.approx(2.0 * 5)  # the forgetting cells' loops only


def test_table_names_follow_the_live_keys_and_the_writes():
    assert ow.table_of({"task.levels": [[16, 16]]}) == "16 live, 16 written"
    assert ow.table_of({"task.generator": "forgetting-mqar", "task.kwargs.num_kv_pairs": 8,
                        "task.kwargs.num_updates": 4}) == "8 live, 12 written"
    assert ow.table_of({"task.levels": [[32, 32]]}) is None  # not one of the four


def test_the_page_and_figure_come_from_the_reading(runs, tmp_path):
    read = ow.reading([runs])
    text = ow.page(read, "RESUME-COMMAND")
    assert "**Interrupted**: 11 of 12 planned runs have finished" in text
    assert "Resume with `RESUME-COMMAND`" in text
    assert "| transformer (grows as L) | 3/3 [" in text and "| 2/3 [" in text
    assert "0/2 so far (interrupted, 3 planned)" in text
    path = ow.figure(read, tmp_path / "fig.png")
    assert path.stat().st_size > 1000


def _cell(k: int, n: int = 10, complete: bool = True) -> dict:
    return {"k": k, "n": n, "complete": complete}


@pytest.mark.parametrize("forget, live, written, starts", [
    (10, 10, 0, "like 8 live"),  # p = 1 against 10/10, 1.1e-5 against 0/10
    (0, 10, 0, "like 16 written"),
    (5, 10, 0, "between, separable from both"),  # p = 0.033 against each
    (6, 10, 4, "between, separable from neither"),
    (0, 10, 5, "below both"),
    (9, 10, 9, "no reading"),  # the plain tables themselves do not separate
    (0, 10, 10, "below both"),  # ... but a count below both is read all the same
])
def test_a_rows_reading_is_fishers_two_sided_test_against_its_plain_tables(
        forget, live, written, starts):
    from scipy.stats import fisher_exact

    row = {"tables": {ow.FORGET: _cell(forget), ow.LIVE: _cell(live),
                      ow.WRITTEN: _cell(written)}}
    text = ow.falls(row)
    assert text.startswith(starts), text
    if starts != "no reading":
        p = fisher_exact([[forget, 10 - forget], [live, 10 - live]]).pvalue
        assert f"p = {p:.2g} against 8 live" in text


def test_an_interrupted_row_is_not_read():
    row = {"tables": {ow.FORGET: _cell(3, 4, complete=False), ow.LIVE: _cell(10),
                      ow.WRITTEN: _cell(0)}}
    assert ow.falls(row) == "not read (interrupted)"


def test_more_writes_easier_lists_the_rows_fisher_separates():
    rows = [{"row": "a", "tables": {ow.FORGET: _cell(8), ow.TWELVE: _cell(0)}},
            {"row": "b", "tables": {ow.FORGET: _cell(5), ow.TWELVE: _cell(3)}},
            {"row": "c", "tables": {ow.FORGET: _cell(8), ow.TWELVE: _cell(0, 4, False)}}]
    assert ow.more_writes_easier({"rows": rows}) == ["a 8/10 against 0/10 (p = 0.00036)"]


def test_the_short_answer_splits_rows_by_fishers_test_against_their_plain_8_pairs():
    rows = [{"row": "a", "tables": {ow.FORGET: _cell(8), ow.TWELVE: _cell(1), ow.LIVE: _cell(10)}},
            {"row": "b", "tables": {ow.FORGET: _cell(1), ow.TWELVE: _cell(0), ow.LIVE: _cell(10)}}]
    twelve, sixteen = ow.short_answer({"rows": rows})
    assert "(not separable, like the live keys): `a` 8/10 against 10/10. Fewer" in sixteen
    assert sixteen.endswith("`b` 1/10 against 10/10.")
    assert "like the live keys): no row. Fewer" in twelve
