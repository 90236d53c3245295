"""Pilot rule 2 (`lr_rules.pilot_rule_2`, for new placements): lrs ranked by their mean held-out
accuracy over two seeds, an edge winner extending the grid by half a decade within the bounds,
and the report's lines recommending `lr-window` at the boundary table when the winner is not
interior; read on the two contested placements' own pilots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recall_lab.experiments import lr_rules as lw
from recall_lab.experiments import stats

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, end, extend", [("rwkv7", "upper", 3e-2),
                                               ("gated-deltaproduct", "lower", 3e-4)])
def test_the_contested_placements_pilots_were_won_at_an_edge(name, end, extend):
    answer = json.loads((ROOT / "docs/results/frontier-2026" / name / "answer.json").read_text())
    accs = {float(k): [v] for k, v in answer["pilot"].items()}
    pilot = lw.pilot_rule_2(accs, tie=0.01)
    assert pilot["lr"] == answer["lr"]  # one seed per lr: rule 1's pick, unchanged
    assert not pilot["interior"] and pilot["extend"] == extend and not pilot["bounded"]
    cells = {c["size"]: stats.wilson(c["solved"]["k"], c["solved"]["n"])
             for c in answer["cells"] if c["solved"]}
    table = lw.boundary_table(cells)
    # rwkv7: 7/8 at 8 pairs, 1/8 at 16; gated-deltaproduct: 8/8 at 8 pairs, 0/7 at 16
    some = [s for s, r in cells.items() if 0 < r.k < r.n]
    assert table == (max(some) if some else min(s for s, r in cells.items() if r.k < r.n))
    assert table == 16
    lines = lw.pilot_lines(pilot, answer["mixer"], answer["kwargs"], table)
    assert f"at the grid's {end} end" in lines[1]
    assert lines[-1].endswith(f"recall-lab lr-window {answer['mixer']} --kwargs "
                              f"'{json.dumps(answer['kwargs'])}' --table {table:g}")


def test_rule_2_ranks_by_the_mean_over_seeds():
    # seed 30 alone would pick 3e-3 (0.70 against 0.50); the means pick 1e-3 (0.745, 0.705)
    accs = {1e-3: [0.50, 0.99], 3e-3: [0.70, 0.71], 1e-2: [0.20, 0.30]}
    pilot = lw.pilot_rule_2(accs, tie=0.01)
    assert pilot["means"][1e-3] == pytest.approx(0.745) and pilot["lr"] == 1e-3
    assert pilot["extend"] == 3e-4 and "0.0003 added" in pilot["note"]
    # a tie (means within 0.01) goes to the smaller lr, as rule 1's
    tied = lw.pilot_rule_2({1e-3: [0.70, 0.71], 3e-3: [0.71, 0.71], 1e-2: [0.2, 0.2]}, 0.01)
    assert tied["lr"] == 1e-3
    # an lr with an unfinished seed has no mean and cannot win yet
    half = lw.pilot_rule_2({1e-3: [0.5, 0.5], 3e-3: [0.9, None], 1e-2: [0.4, 0.4]}, 0.01)
    assert half["means"][3e-3] is None and half["lr"] == 1e-3


def test_an_interior_winner_ends_the_pilot_and_a_bound_stops_the_grid():
    inside = lw.pilot_rule_2({1e-3: [0.5, 0.5], 3e-3: [0.9, 0.9], 1e-2: [0.4, 0.4]}, 0.01)
    assert inside["interior"] and inside["extend"] is None and inside["note"] is None
    assert lw.pilot_lines(inside, "x", None, 16)[-1] == \
        "lr 0.003: interior (a grid lr on each side scored lower)"
    low = lw.pilot_rule_2({1e-4: [0.9, 0.9], 3e-4: [0.5, 0.5]}, 0.01)
    assert low["bounded"] and low["extend"] is None and "bound 0.0001 stops" in low["note"]
    assert lw.boundary_table({4.0: stats.wilson(8, 8), 8.0: stats.wilson(8, 8)}) is None
    assert lw.boundary_table({4.0: stats.wilson(8, 8), 8.0: stats.wilson(0, 8),
                              16.0: stats.wilson(0, 8)}) == 8.0
