"""The lr-window claims' verdicts (recall_lab/experiments/lr_window_verdicts.py) on hand-built
confirmation counts, against scipy's Fisher test and the claims file's own flip counts; and the
committed page's verdict table is what its records give (scripts/lr_window_page.py --check)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import fisher_exact

from recall_lab.experiments import lr_window_verdicts as lv
from recall_lab.experiments import stats

ROOT = Path(__file__).resolve().parents[2]
SPEC = lv.load(ROOT / "experiments" / "lr-window" / "contested-16.toml")


def _answer(k: int | None, n: int = 8) -> dict | None:
    if k is None:
        return None
    return {"confirmation": {"planned": n, "solved": {"k": k, "n": n, "text": f"{k}/{n}"}}}


def _verdict(a: int | None, b: int | None, claim: int = 0) -> lv.Verdict:
    c = SPEC["claim"][claim]
    return lv.verdicts(SPEC, {c["a"]: _answer(a), c["b"]: _answer(b)})[claim]


@pytest.mark.parametrize("kb", [8, 7, 6, 5])
def test_the_verdict_changes_exactly_at_the_registered_flip_count(kb):
    flip = SPEC["claim"][0]["flip_at"][str(kb)]
    assert _verdict(flip - 1, kb).verdict == "survives"
    assert _verdict(flip, kb).verdict == "changes"


@pytest.mark.parametrize("a, b", [(0, 8), (0, 4), (0, 3), (2, 8), (3, 6), (8, 0)])
def test_a_verdict_is_fishers_one_sided_test(a, b):
    p = fisher_exact([[a, 8 - a], [b, 8 - b]], alternative="less").pvalue
    v = _verdict(a, b)
    assert v.verdict == ("survives" if p < 0.05 else "changes")
    assert f"{a}/8" in v.detail and f"{b}/8" in v.detail


def test_an_unfinished_row_leaves_the_claim_open_and_says_what_keeps_it():
    v = _verdict(0, None)
    assert v.verdict == "open" and "survives if deltanet solves at least 4 of 8" in v.detail
    # a confirmation with seeds still to run is not finished
    partial = {"confirmation": {"planned": 8, "solved": {"k": 0, "n": 5}}}
    assert lv.confirmation(partial) is None
    assert _verdict(None, None).verdict == "open"


def test_the_committed_verdict_table_is_what_the_records_give():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "lr_window_page.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_table_counts_the_verdicts():
    rows = {r["name"]: None for r in SPEC["row"]}
    c = SPEC["claim"][0]
    rows[c["a"]], rows[c["b"]] = _answer(0), _answer(8)
    for a in rows.values():
        if a is not None:
            a.update(best=1e-2, edge=False, solved_any=True, window=[1e-2], width_decades=0.0,
                     contiguous=True, settled=True)
    text = "\n".join(lv.table_lines(SPEC, rows))
    n = len(SPEC["claim"])
    survive = sum(v.verdict == "survives" for v in lv.verdicts(SPEC, rows))
    assert survive >= 1
    assert f"**{survive} of {n} claims survive the lr window**" in text


def _budget_report(counts: dict[tuple[str, int], int], n: int = 8) -> dict:
    """A report.json with one group per (row, steps), `k` of `n` seeds solved."""
    groups = []
    for (row, steps), k in counts.items():
        groups.append({"values": {"model.name": row, "train.steps": steps},
                       "solved": {"k": k, "n": n, "lo": 0.0, "hi": 1.0},
                       "per_seed": [0.99] * k + [0.5] * (n - k),
                       "survival": {"horizon": float(steps), "median": None,
                                    "median_lo": None, "median_hi": None}})
    return {"groups": groups, "checks": []}


def _contested_answers(k_other: int = 8) -> dict:
    return {c["b"]: _answer(k_other) for c in SPEC["claim"]}


def test_budget_reading_keeps_the_verdict_where_the_longer_budget_solves_no_more():
    rows = {c["a"] for c in SPEC["claim"]}
    report = _budget_report({(r, s): 1 for r in rows for s in (2500, 5000)})
    text = "\n".join(lv.budget_lines(SPEC, _contested_answers(), report))
    assert text.count("not about the budget") == len(SPEC["claim"])
    assert "| 1/8 [0.00, 1.00] | 0.50-0.99 (median 0.50) | >2500 [>2500, >2500] |" in text


def test_budget_reading_re_reads_the_verdict_with_the_longer_budgets_count():
    """0/8 at 2,500 steps and 7/8 at 5,000 is "more" (p = 0.0007): the claim is re-read with
    7/8 against the other row's 8/8, not "fewer" (p = 0.5): it changes. 4/8 at 5,000 is also
    "more" than 0/8 (p = 0.038) and still "fewer" than 8/8 (p = 0.038): it survives."""
    c = SPEC["claim"][0]
    for k_long, want in ((7, "changes"), (4, "survives")):
        report = _budget_report({(c["a"], 2500): 0, (c["a"], 5000): k_long})
        lines = lv.budget_lines(SPEC, _contested_answers(), report)
        line = next(x for x in lines if x.startswith(f"- {c['claim']}"))
        p_more = fisher_exact([[k_long, 8 - k_long], [0, 8]], alternative="greater").pvalue
        p = fisher_exact([[k_long, 8 - k_long], [8, 0]], alternative="less").pvalue
        assert p_more < 0.05
        assert f"**{want}**" in line and f"p = {p:.2g}" in line, (line, p)


def _run(folder: Path, name: str, seed: int, steps: int, accs: list[float]) -> None:
    d = folder / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model": {"name": "rwkv7"},
                                               "train": {"seed": seed, "steps": steps}}))
    (d / "metrics.jsonl").write_text("".join(
        json.dumps({"step": 100 * (i + 1), "split": "valid", "acc": a}) + "\n"
        for i, a in enumerate(accs)))


def test_same_start_counts_the_longer_runs_that_repeat_their_twins_first_steps(tmp_path):
    """A 5,000-step run is its 2,500-step twin continued (constant lr after the warm-up): its
    validation rows up to the shorter budget must be the twin's, value for value."""
    _run(tmp_path, "a", 100, 200, [0.1, 0.2])
    _run(tmp_path, "b", 100, 400, [0.1, 0.2, 0.3, 0.4])
    _run(tmp_path, "c", 101, 200, [0.1, 0.2])
    _run(tmp_path, "d", 101, 400, [0.1, 0.25, 0.3, 0.4])  # differs before step 200
    _run(tmp_path, "e", 102, 400, [0.1, 0.2, 0.3, 0.4])  # no twin
    assert lv.same_start(tmp_path, (200, 400)) == (1, 2)


def test_budget_summary_says_whether_a_row_solved_more_at_the_longer_budget():
    rows = list(dict.fromkeys(c["a"] for c in SPEC["claim"]))
    same = _budget_report({(r, s): 1 for r in rows for s in (2500, 5000)})
    assert "not about the budget" in lv.budget_summary(SPEC, same)
    assert all(f"{r} 1/8 (against 1/8)" in lv.budget_summary(SPEC, same) for r in rows)
    moved = _budget_report({**{(r, s): 0 for r in rows for s in (2500, 5000)},
                            (rows[0], 5000): 6})  # 6/8 against 0/8: p = 0.0035
    assert "re-read" in lv.budget_summary(SPEC, moved)
    assert "has not finished" in lv.budget_summary(SPEC, _budget_report({(rows[0], 2500): 0}))


def _window(label: str, counts: dict[float, tuple[int, int]], best: float, edge: bool = False,
            reused: float | None = None) -> dict:
    rungs = [{"lr": lr, "solved": {"k": k, "n": n, "text": f"{k}/{n}",
                                   "lo": stats.wilson(k, n).lo, "hi": stats.wilson(k, n).hi},
              "seeds": [{"seed": i, "acc": 0.5, "reused": "reference" if lr == reused else None}
                        for i in range(n)]}
             for lr, (k, n) in sorted(counts.items())]
    return {"label": label, "table": 32.0, "table_name": "32 pairs", "best": best,
            "seeds": [0, 1, 2], "rungs": rungs, "ladder": sorted(counts), "edge": edge,
            "window": sorted(counts), "width_decades": 2.0, "solved_any": True,
            "contiguous": True, "settled": True}


def test_band_lines_read_each_exploratory_window_by_lr():
    a = _window("deltanet / num_heads=4", {3e-4: (0, 3), 1e-3: (1, 3), 3e-3: (2, 3)}, 3e-3,
                edge=True, reused=1e-3)
    b = _window("kda / num_heads=4", {1e-3: (0, 3), 3e-3: (1, 3), 1e-2: (0, 3)}, 3e-3)
    text = "\n".join(lv.band_lines([a, b]))
    head = text.splitlines()[0]
    assert "| 0.0003 | 0.001 | 0.003 | 0.01 |" in head  # the union of the ladders, in order
    row_a = next(x for x in text.splitlines() if x.startswith("| `deltanet"))
    w = {k: stats.wilson(k, 3) for k in range(4)}
    iv = {k: f"[{r.lo:.2f}, {r.hi:.2f}]" for k, r in w.items()}
    assert (f"| 0/3 {iv[0]}, 0.50 | 1/3 {iv[1]}, 0.50 (reused) | **2/3** {iv[2]}, 0.50 | - |"
            in row_a and "(edge)" in row_a)
    row_b = next(x for x in text.splitlines() if x.startswith("| `kda"))
    assert (f"| - | 0/3 {iv[0]}, 0.50 | **1/3** {iv[1]}, 0.50 | 0/3 {iv[0]}, 0.50 |" in row_b
            and "(edge)" not in row_b)
    assert lv.band_lines([]) == ["Not measured yet."]
