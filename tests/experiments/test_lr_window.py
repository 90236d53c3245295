"""`lr-window` (recall_lab/experiments/lr_window.py): the ladder's growth at an edge and its
bounds, each lr's settlement against the best on hand-built records, records at the same config
counted instead of retrained, selection kept apart from confirmation, every bad input one line
through the CLI with nothing written, and an interrupted window resumed without retraining."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy.stats import fisher_exact
from torch import nn

from recall_lab.experiments import engine
from recall_lab.experiments import lr_window as lw
from recall_lab.experiments import place as pl
from recall_lab.experiments.claims import read_registry
from recall_lab.experiments.reference import read_protocol
from recall_lab.generators.errors import RecallLabError
from tests.cli_checks import fails_with

from .place_fixtures import make_reference

ROOT = Path(__file__).resolve().parents[2]
MIXER, KWARGS = "gla", {"num_heads": 4}  # one of the tiny reference's rows


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # the rows solve 8/8 at 2 pairs; at 3 pairs GLA with 4 heads solves 8/8, the others 0/8
    outcomes = {"transformer": {2.0: 8, 3.0: 0}, "gla / num_heads=4": {2.0: 8, 3.0: 8},
                "gla / num_heads=1": {2.0: 8, 3.0: 0}}
    ref = make_reference(tmp_path_factory.mktemp("ref") / "ref", outcomes)
    return ref, read_protocol(ref)


# ---- the ladder ---------------------------------------------------------------------------------

def test_the_ladder_grows_by_half_a_decade_at_an_edge_and_stops_at_its_bounds():
    ladder = list(lw.LADDER)
    assert ladder == [3e-4, 1e-3, 3e-3, 1e-2, 3e-2]
    assert lw.grow(ladder, 3e-3) == (ladder, None)  # inside: no growth
    assert lw.grow(ladder, None) == (ladder, None)
    up, note = lw.grow(ladder, 3e-2)
    assert up == [*ladder, 1e-1] and "upper end: 0.1 added" in note
    down, note = lw.grow(ladder, 3e-4)
    assert down == [1e-4, *ladder] and "lower end: 0.0001 added" in note
    # at a bound the ladder stays and the note says which bound stopped it
    assert lw.grow(up, 1e-1) == (up, "the best lr 0.1 is at the ladder's upper end and the "
                                     "bound 0.1 stops the ladder there (0.3 is outside it)")
    stopped, note = lw.grow(down, 1e-4)
    assert stopped == down and "bound 0.0001 stops" in note
    # half decades alternate 1 and 3; an lr off that series moves by sqrt(10)
    assert [lw.half_decade(x, 1) for x in (1e-3, 3e-3)] == [3e-3, 1e-2]
    assert [lw.half_decade(x, -1) for x in (1e-3, 3e-3)] == [3e-4, 1e-3]
    assert lw.half_decade(2e-3, 1) == pytest.approx(2e-3 * 10 ** 0.5, rel=0.02)


@pytest.mark.parametrize("lrs, needle", [
    ([1e-3, -1e-2], "every lr must be positive"),
    ([0.0], "every lr must be positive"),
    ([3e-3, 1e-3], "must be sorted from small to large with no lr twice: 0.001 follows 0.003"),
    ([1e-3, 1e-3], "no lr twice"),
])
def test_a_bad_ladder_is_refused(lrs, needle):
    with pytest.raises(RecallLabError, match=needle):
        lw.check_ladder(lrs)


# ---- settlement per lr, on hand-built records ---------------------------------------------------

def _records(protocol, outcomes: dict[float, tuple[int, int]], seeds: int = 8,
             confirm: dict[float, tuple[int, int]] | None = None):
    """The window's runs at table 3: per lr (seeds solved, seeds done), the first `solved` of
    the done seeds solved; the rest not run. `confirm`: the same for confirmation seeds."""
    table = pl.mixer_table(MIXER, KWARGS)
    lrs = sorted(outcomes)
    exp = lw.window_experiment(protocol, table, 3.0, lrs, list(range(seeds)))
    recs = pl.records(exp, Path("/nonexistent"))
    if confirm:
        for lr in confirm:
            recs += pl.records(lw.window_experiment(protocol, table, 3.0, [lr],
                                                    lw.confirm_seeds(confirm[lr][1]),
                                                    lw.CONFIRMATION), Path("/nonexistent"))
    for r in recs:
        lr, seed = r.config["train.lr"], r.config["train.seed"]
        book = confirm if seed >= lw.CONFIRM_FROM else outcomes
        solved, done = book[lr]
        i = seed - lw.CONFIRM_FROM if seed >= lw.CONFIRM_FROM else seed
        if i < done:
            acc = 1.0 if i < solved else 0.3
            r.status, r.summary = "done", {"valid": {"acc": acc}, "test": {"acc": acc},
                                           "steps": 6, "stopped_at": 6, "best_step": 6}
    return recs, lrs


def _fisher_more(a: tuple[int, int], b: tuple[int, int]) -> float:
    return fisher_exact([[a[0], a[1] - a[0]], [b[0], b[1] - b[0]]],
                        alternative="greater").pvalue


def test_each_lr_stops_exactly_when_its_comparison_with_the_best_is_settled(tiny):
    _, protocol = tiny
    outcomes = {1e-3: (8, 8), 3e-3: (0, 4), 1e-2: (1, 2), 3e-2: (8, 8)}
    recs, lrs = _records(protocol, outcomes)
    state = lw.assess(recs, lrs, protocol)
    by = {r["lr"]: r for r in state["rungs"]}
    # 8/8 at 1e-3 and 3e-2: the tie goes to the smaller lr
    assert state["best"] == 1e-3 and by[1e-3]["verdict"] == "best"
    # 0/4 with 4 seeds to come: even 4/8 is below the level, so it is settled outside
    assert _fisher_more((8, 8), (4, 8)) < 0.05
    assert by[3e-3]["verdict"] == "outside" and by[3e-3]["status"] == "settled"
    assert by[3e-3]["p_best_more"] == pytest.approx(_fisher_more((8, 8), (0, 4)))
    # 1/2 with 6 to come: 1/8 would separate it, 7/8 would not: open, and it takes seeds
    assert _fisher_more((8, 8), (1, 8)) < 0.05 <= _fisher_more((8, 8), (7, 8))
    assert by[1e-2]["verdict"] == "open" and by[1e-2]["status"] == "open"
    assert by[3e-2]["verdict"] == "in window" and by[3e-2]["status"] == "complete"
    assert by[1e-3]["status"] == "complete"  # the best has no seed left to give
    assert state["window"] == [1e-3, 3e-2] and not state["contiguous"]
    assert state["width_decades"] == pytest.approx(math.log10(3e-2 / 1e-3))
    assert state["edge"] and state["reaches_end"] and not state["settled"]
    assert lw.next_seeds(state, set(), 1) == {(2,): [1e-2]}
    assert lw.next_seeds(state, {(1e-2, 2)}, 2) == {(3, 4): [1e-2]}


def test_the_best_lr_takes_seeds_while_a_comparison_with_it_is_open(tiny):
    _, protocol = tiny
    recs, lrs = _records(protocol, {1e-3: (2, 2), 3e-3: (0, 2), 1e-2: (0, 2)})
    state = lw.assess(recs, lrs, protocol)
    by = {r["lr"]: r for r in state["rungs"]}
    assert state["best"] == 1e-3 and state["edge"]  # 1e-3 is the lower end
    # 2/2 against 0/2 is not separable (p = 1/6); 6 more seeds each could make it so
    assert _fisher_more((2, 2), (0, 2)) >= 0.05
    assert by[3e-3]["status"] == by[1e-2]["status"] == by[1e-3]["status"] == "open"
    assert lw.next_seeds(state, set(), 1) == {(2,): [1e-3, 3e-3, 1e-2]}


def test_no_seed_solved_anywhere_is_no_window(tiny):
    _, protocol = tiny
    recs, lrs = _records(protocol, {1e-3: (0, 8), 3e-3: (0, 8)})
    state = lw.assess(recs, lrs, protocol)
    assert not state["solved_any"] and lw.window_text(state) == "none: no seed solved at any lr"


# ---- selection kept apart from confirmation -----------------------------------------------------

def test_confirmation_seeds_never_choose_the_lr_and_only_they_confirm_it(tiny):
    _, protocol = tiny
    # the window: 6/8 at 1e-3, 8/8 at 3e-3; confirmation seeds at 1e-3 solve 8/8 and at
    # 3e-3 only 1/8: were they pooled, 1e-3 would be the best lr (14/16 against 9/16)
    recs, lrs = _records(protocol, {1e-3: (6, 8), 3e-3: (8, 8)},
                         confirm={1e-3: (8, 8), 3e-3: (1, 8)})
    state = lw.assess(recs, lrs, protocol)
    assert state["best"] == 3e-3
    assert {r["lr"]: r["solved"]["n"] for r in state["rungs"]} == {1e-3: 8, 3e-3: 8}
    conf = lw.confirmation(recs, state["best"], protocol)
    assert (conf["solved"]["k"], conf["solved"]["n"]) == (1, 8)
    assert [s["seed"] for s in conf["seeds"]] == list(range(100, 108))
    # the confirmation seeds are fresh: none is a window seed, however many the window takes
    assert set(lw.confirm_seeds(8)).isdisjoint(lw.window_seeds(protocol, 99))
    with pytest.raises(RecallLabError, match="where the confirmation seeds start"):
        lw.window_seeds(protocol, 101)
    with pytest.raises(RecallLabError, match="--confirm must be between 0 and 100"):
        lw.confirm_seeds(-1)
    # the rule is written where the plan and claims are
    assert "never confirm" in lw.RULE and "only the confirmation seeds" in lw.RULE
    claims = lw.make_claims("x", "3 pairs", 0.05, 8)
    assert claims[-1]["kind"] == "confirmation" and "100-107" in claims[-1]["claim"]


# ---- records at the same config count -----------------------------------------------------------

def test_a_window_run_is_a_placement_cell_but_for_its_lr(tiny):
    _, protocol = tiny
    table = pl.mixer_table("rwkv7", {"head_size": 4})
    for size in (2.0, 3.0):
        win = lw.window_experiment(protocol, table, size, [1e-3, 1e-2], [0, 1, 2])
        for lr in (1e-3, 1e-2):
            cells = pl.cells_experiment(protocol, table, [size], [0, 1, 2], lr)
            assert {r.hash for r in win.runs if r.config.train.lr == lr} == \
                {r.hash for r in cells.runs}


def test_the_placed_rwkv7_cells_count_at_their_lr(tmp_path):
    """RWKV-7's placement at 16 pairs (frontier-2026, lr 1e-2), given as a records folder, is
    found run for run under the zoo-frontier's protocol (the shipped place.toml and experiment
    file; the archives themselves take seconds to unpack), and no other lr has a record."""
    placement = ROOT / "docs/results/frontier-2026/rwkv7"
    answer = json.loads((placement / "answer.json").read_text())
    cell = next(c for c in answer["cells"] if c["size"] == 16)
    placed = {p.name for p in (placement / "cells").glob("s*-levels16-*")
              if (p / "summary.json").is_file()}
    assert len(placed) == cell["solved"]["n"] > 0
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "place.toml").write_bytes((ROOT / "docs/results/zoo-frontier/place.toml").read_bytes())
    (ref / "zoo-frontier.toml").write_bytes(
        (ROOT / "experiments/zoo-frontier/zoo-frontier.toml").read_bytes())
    protocol = read_protocol(ref)
    exp = lw.window_experiment(protocol, pl.mixer_table("rwkv7", {"head_size": 4}), 16.0,
                               [3e-3, 1e-2], protocol.seeds)
    lw.check_records([placement], exp.runs[0].config.to_json())  # its own config: accepted
    found = lw.find_reusable(exp, [("rwkv7", placement)])
    runs = [r for r in exp.runs if r.name in found]
    assert {r.hash for r in runs} == {n.rsplit("-", 1)[1] for n in placed}
    assert {r.config.train.lr for r in runs} == {1e-2}
    assert {found[r.name][1] for r in runs} == {f"cells/{n}" for n in placed}


def test_a_dry_run_counts_the_references_records_and_writes_nothing(tiny, tmp_path):
    ref, _ = tiny
    out = tmp_path / "out"
    answer = lw.lr_window(MIXER, KWARGS, table=3, lrs=[1e-3, 3e-3, 1e-2], reference=ref,
                          out=out, dry_run=True)
    assert not out.exists()
    # the reference's GLA row ran 8 seeds at 3e-3: they count, nothing else does
    assert {k: n for k, n in answer["reused"].items() if n} == {"0.003": 8}
    assert answer["runs_ladder"] == 3 * 8 - 8
    assert answer["widest"] == [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]
    assert answer["runs_growth"] == 4 * 8 and answer["runs_confirm"] == 8
    window, confirm = answer["phases"]
    assert len(window) == 7 * 8 - 8 and len(confirm) == 8


def test_the_command_prints_the_plan_in_100_columns(tiny, monkeypatch):
    from typer.testing import CliRunner

    from recall_lab.cli import app

    ref, _ = tiny
    monkeypatch.chdir(ref.parent)  # short relative paths, as a user types them
    out = ref.parent / "out"
    r = CliRunner().invoke(app, ["lr-window", MIXER, "--kwargs", json.dumps(KWARGS), "--table",
                                 "3", "--lrs", "1e-3,3e-3,1e-2", "--reference", ref.name,
                                 "--out", "out", "--dry-run", "--no-estimate"],
                           env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    assert all(len(line) <= 100 for line in r.stdout.splitlines())
    text = " ".join(r.stdout.split())
    assert "records that count (not retrained): 8 at lr 0.003" in text
    assert "runs at most: 16 on the ladder, 32 more if it grows to both bounds, 8 to confirm" \
        in text
    assert "rule: Selection kept apart from confirmation" in text and not out.exists()


# ---- bad input ----------------------------------------------------------------------------------

class Bounded(nn.Module):
    """A mixer that takes at most `l_max` tokens."""

    def __init__(self, d_model: int, l_max: int = 8, layer_idx: int | None = None) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.proj(x)


def test_bad_input_is_one_line_and_writes_nothing(tiny, tmp_path):
    ref, _ = tiny
    out = tmp_path / "out"
    base = ["lr-window", MIXER, "--kwargs", json.dumps(KWARGS), "--reference", ref, "--out",
            out, "--no-check", "--no-estimate"]
    fails_with([*base, "--table", "3", "--lrs", "1e-3,-1e-2"], "every lr must be positive")
    fails_with([*base, "--table", "3", "--lrs", "3e-3,1e-3"], "must be sorted")
    fails_with([*base, "--table", "5"], "unknown table 5: the reference's tables are 2, 3")
    fails_with([*base, "--table", "3", "--seeds", "0"], "--seeds must be >= 1, got 0")
    fails_with(["lr-window", f"{__name__}:Bounded", "--kwargs", '{"l_max": 4}', "--table", "3",
                "--reference", ref, "--out", out, "--dry-run"],
               "l_max = 4 is shorter than the 3 pairs table's")
    other = tmp_path / "other"  # the reference's attention runs only: another config
    other.mkdir()
    for run in ref.glob("*"):
        cfg = run / "config.json"
        if cfg.is_file() and json.loads(cfg.read_text())["model"]["name"] == "transformer":
            (other / run.name).mkdir()
            (other / run.name / "config.json").write_bytes(cfg.read_bytes())
    fails_with([*base, "--table", "3", "--records", other],
               f"records folder {other} belongs to another config")
    assert not out.exists()


# ---- a whole window, interrupted and resumed ----------------------------------------------------

def test_an_interrupted_window_resumes_without_retraining(tiny, tmp_path, monkeypatch):
    """Real 6-step runs through the sweep engine, run in this process (its pool replaced by a
    loop over `engine.execute`). The reference's 8/8 at 3e-3 count as that lr's seeds; the
    runs here (6 steps) do not solve, so 3e-3 is the best lr, at the ladder's lower end, and
    the ladder grows to 1e-3; then one confirmation seed at 3e-3."""
    ref, _ = tiny
    out = tmp_path / "out"
    trained: list[str] = []

    def inline(payloads, workers, threads, monitor, on_result):
        for p in payloads:
            trained.append(p["name"])
            on_result(engine.execute(p))

    monkeypatch.setattr(engine, "_local", inline)
    real = lw.run_sweep
    calls: list[int] = []

    def first_call(exp, root, **kw):
        regs = read_registry(Path(root))["registrations"]
        assert regs and any("never confirm" in c["spec"]["rule"] for c in regs[0]["claims"])
        index = real(exp, root, **kw)
        calls.append(index["counts"]["ran"])
        raise KeyboardInterrupt  # as Ctrl-C after the first round

    monkeypatch.setattr(lw, "run_sweep", first_call)
    kw = dict(table=3, lrs=[3e-3, 1e-2], seeds=2, confirm=1, reference=ref, check=False,
              out=out, plots=False)
    with pytest.raises(KeyboardInterrupt):
        lw.lr_window(MIXER, KWARGS, **kw)
    # the ladder grew to 1e-3 before the first round (3e-3, 2/2 from the reference, was at its
    # lower end); the round gave seed 0 to 1e-3 and 1e-2
    assert calls == [2] and len(trained) == 2
    folder = next(out.glob("lr-window-*"))
    first = folder / "window" / trained[0]
    assert json.loads((folder / "lr-window.json").read_text())["ladder"] == [1e-3, 3e-3, 1e-2]
    before = (first / "summary.json").read_bytes()
    monkeypatch.setattr(lw, "run_sweep", real)
    answer = lw.lr_window(MIXER, KWARGS, **kw)
    assert (first / "summary.json").read_bytes() == before
    assert len(trained) == len(set(trained))  # no run trained twice
    by = {r["lr"]: r for r in answer["rungs"]}
    assert answer["ladder"] == [1e-3, 3e-3, 1e-2] and answer["best"] == 3e-3
    assert by[3e-3]["solved"]["k"] == 2 and all(s["reused"] for s in by[3e-3]["seeds"])
    # 2/2 against 0/1 is not separable whatever the second seed does: settled after one seed
    assert _fisher_more((2, 2), (0, 2)) >= 0.05
    assert by[1e-2]["status"] == by[1e-3]["status"] == "settled"
    assert by[1e-2]["solved"]["n"] == by[1e-3]["solved"]["n"] == 1
    assert answer["window"] == [1e-3, 3e-3, 1e-2] and not answer["edge"]
    assert answer["confirmation"]["lr"] == 3e-3 and answer["confirmation"]["solved"]["n"] == 1
    assert sorted(trained) == sorted(r["name"] for r in answer["runs"] if not r["reused"])
    assert len(trained) == 3  # 1e-2 seed 0, 1e-3 seed 0, confirmation seed 100
    assert answer["registration"]["runs"] == 3 == answer["registration"]["bound"]
    report = (folder / "report.md").read_text()
    assert lw.RULE.format(first=lw.CONFIRM_FROM) in report
    assert report.count("| window |") == 4 and report.count("| confirm |") == 1
    assert "0.001 added" in report


def test_the_figure_draws_each_lr_its_ladder_ends_and_the_confirmation(tiny, tmp_path):
    from recall_lab.experiments.lr_window_plot import window_figure

    _, protocol = tiny
    recs, lrs = _records(protocol, {1e-4: (0, 3), 1e-3: (8, 8), 3e-3: (5, 8), 1e-2: (0, 0)},
                         confirm={1e-3: (6, 8)})
    state = lw.assess(recs, lrs, protocol)
    answer = {**state, "label": "gla", "table_name": "3 pairs", "bounds": list(lw.BOUNDS),
              "confirmation": lw.confirmation(recs, state["best"], protocol)}
    path, ax = window_figure([answer], tmp_path / "w.png")
    assert path.is_file() and ax.get_xscale() == "log"
    rates = [ln for ln in ax.lines if ln.get_gid() == "rate"]
    got = sorted((float(ln.get_xdata()[0]), float(ln.get_ydata()[0])) for ln in rates)
    assert got == [(1e-4, 0.0), (1e-3, 1.0), (3e-3, 5 / 8)]  # 1e-2 ran no seed: no point
    filled = {float(ln.get_xdata()[0]) for ln in rates if ln.get_markerfacecolor() != "white"}
    assert filled == set(state["window"]) == {1e-3, 3e-3}
    ends = [ln for ln in ax.lines if ln.get_gid() == "ladder-end"]
    assert sorted({float(ln.get_xdata()[0]) for ln in ends}) == [1e-4, 1e-2] and len(ends) == 4
    assert {ln.get_color() for ln in ends if float(ln.get_xdata()[0]) == 1e-4} == {"0.5"}
    star = [ln for ln in ax.lines if ln.get_gid() == "confirmation"]
    assert len(star) == 1 and float(star[0].get_ydata()[0]) == 6 / 8
    assert float(star[0].get_xdata()[0]) == pytest.approx(1e-3 * 1.08)
