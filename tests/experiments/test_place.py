"""`place` (recall_lab/experiments/place.py): the shipped reference loads from the package data,
the claims are recorded before the first run, a cell stops launching seeds exactly when no
outcome of its remaining seeds can change any of its verdicts (both directions, hand-built
outcomes), the cut rule gates the table it skips, bad input is refused with nothing written, and
an interrupted placement resumes with its finished runs."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest
from scipy.stats import fisher_exact
from torch import nn

from recall_lab.experiments import place as pl
from recall_lab.experiments.claims import read_registry
from recall_lab.experiments.reference import (
    open_reference,
    pick_lr,
    read_protocol,
    shipped_archive,
)
from recall_lab.experiments.report import RunRecord, load_runs
from recall_lab.generators.errors import RecallLabError
from tests.cli_checks import fails_with

from .place_fixtures import EXPERIMENT, PLACE, Peek, make_reference, mine_records

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "docs" / "results" / "zoo-frontier"


# ---- the shipped reference ----------------------------------------------------------------------

def test_the_shipped_reference_is_package_data_and_holds_the_zoo_frontier_records():
    archive = shipped_archive()
    assert archive.parent.parent == ROOT / "recall_lab" / "experiments"  # the package's folder
    with tarfile.open(archive, "r:xz") as tar:
        names = set(tar.getnames())
        index = json.loads(tar.extractfile("sweep.json").read())
    on_disk = json.loads((ZOO / "runs" / "sweep.json").read_text())
    assert index == on_disk  # the archive holds the committed records, not a stale copy
    runs = [e["name"] for e in on_disk["runs"]]
    assert len(runs) == 570
    assert {f"{r}/{f}" for r in runs for f in ("config.json", "summary.json",
                                               "metrics.jsonl")} <= names
    assert not any(n.endswith((".safetensors", ".pt")) for n in names)  # no weights
    with open_reference() as folder:
        protocol = read_protocol(folder)
        runs_loaded, _ = load_runs([folder])
    assert len(runs_loaded) == 570
    assert [t.size for t in protocol.tables] == [4, 8, 16, 32]
    assert [t.steps for t in protocol.tables] == [2500, 2500, 2500, 5000]
    assert protocol.seeds == list(range(10)) and protocol.solve_at == 0.95
    assert protocol.pilot["lrs"] == [1e-3, 3e-3, 1e-2] and protocol.pilot["seed"] == 30
    assert protocol.cut == {"levels": [[16, 16]], "size": 16, "at_least": 5, "skip": [32]}


def test_the_pilot_rule_gives_the_zoo_frontiers_lrs():
    """zoo-frontier-lr.toml's rule on its own records gives the lrs zoo-frontier.toml uses."""
    runs, _ = load_runs([ZOO / "lr-pilot" / "runs"])
    rows: dict[str, dict[float, float]] = {}
    for r in runs:
        row = json.dumps([r.config["model.name"], r.tables["model"].get("mixer_kwargs")],
                         sort_keys=True)
        rows.setdefault(row, {})[r.config["train.lr"]] = r.metric("valid.acc")
    picks = {json.loads(k)[0] + json.dumps(json.loads(k)[1], sort_keys=True): pick_lr(v, 0.01)
             for k, v in rows.items()}
    assert picks['linear-attn{"feature_dim": 2, "feature_map": "taylor"}'] == 3e-3
    assert picks['based{"feature_dim": 2}'] == 3e-3
    assert picks['based{"feature_dim": 8}'] == 1e-3
    assert picks['deltanet{"expand_k": 0.25, "num_heads": 4}'] == 1e-3
    assert picks['gla{"num_heads": 16}'] == 1e-3


def test_pick_lr_ties_go_to_the_smaller_lr():
    assert pick_lr({1e-3: 0.95, 3e-3: 0.955, 1e-2: 0.97}, 0.01) == 1e-2
    assert pick_lr({1e-3: 0.965, 3e-3: 0.955, 1e-2: 0.97}, 0.01) == 1e-3
    assert pick_lr({1e-3: None, 3e-3: None}, 0.01) is None


# ---- settlement by hand-built outcomes ----------------------------------------------------------

MIXER, KWARGS = "gla", {"num_heads": 2}  # its recurrent state lies between the two GLA rows


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    ref = make_reference(tmp_path_factory.mktemp("ref") / "ref")
    protocol = read_protocol(ref)
    rows, groups = pl.reference_rows(ref, protocol)
    return ref, protocol, rows, groups


def _mine(protocol, outcomes: dict[float, tuple[int, int]], seeds: int = 8) -> list[RunRecord]:
    """The mixer's runs: per table (seeds solved, seeds done); the rest not run."""
    return mine_records(protocol, MIXER, KWARGS, outcomes, seeds)


def _cells(tiny, outcomes, place_toml=None):
    _, protocol, rows, groups = tiny
    if place_toml is not None:
        protocol = place_toml
    state = pl.run_state(pl.cells_experiment(protocol, pl.mixer_table(MIXER, KWARGS), [2.0],
                                             [0], 3e-3).runs[0].config.to_json())
    label = pl.mixer_row_label(MIXER, KWARGS)
    claims = pl.make_claims(label, state, rows, [2.0, 3.0], protocol)
    cells, verdicts, cut = pl.evaluate(_mine(protocol, outcomes), groups, claims, protocol,
                                       label)
    return cells, verdicts, cut, claims


def test_the_claims_compare_with_the_rows_nearest_below_and_above_in_state(tiny):
    _, _, rows, _ = tiny
    *_, claims = _cells(tiny, {})
    solved = [c for c in claims if c["kind"] == "solved"]
    assert {(c["size"], c["b"]["place.row"]) for c in solved} == {
        (s, r) for s in (2.0, 3.0) for r in ("gla / num_heads=4", "gla / num_heads=1")}
    states = {r.label: r.state.numbers for r in rows}
    mine = pl.run_state(pl.cells_experiment(tiny[1], pl.mixer_table(MIXER, KWARGS), [2.0], [0],
                                            3e-3).runs[0].config.to_json()).numbers
    assert states["gla / num_heads=4"] < mine < states["gla / num_heads=1"]
    assert all("more, fewer" in c["claim"] and "not separable" in c["claim"] for c in solved)


# The rows solved 8/8 at table 2 and 0/8 at table 3. One-sided Fisher at 0.05 (scipy, 8 seeds a
# side): k/8 against 8/8 is "fewer" for k <= 4 (p = 0.0385 at 4, 0.1 at 5); k/8 against 0/8 is
# "more" for k >= 4.
@pytest.mark.parametrize("outcome, status, verdict", [
    ((5, 5), "settled", "not separable"),  # 5..8 of 8 are all not separable: stop, 3 saved
    ((4, 4), "open", "open"),  # 4 of 8 would be "fewer", 5 of 8 not: not before
    ((0, 4), "settled", "fewer"),  # 0..4 of 8: all "fewer"
    ((0, 3), "open", "open"),  # 5 of 8 would be not separable
    ((8, 8), "complete", "not separable"),
])
def test_a_cell_against_solved_rows_stops_exactly_when_settled(tiny, outcome, status, verdict):
    assert fisher_exact([[4, 4], [8, 0]], alternative="less").pvalue < 0.05
    assert fisher_exact([[5, 3], [8, 0]], alternative="less").pvalue >= 0.05
    cells, verdicts, *_ = _cells(tiny, {2.0: outcome})
    assert cells[2.0].status == status
    assert {v["verdict"] for v in verdicts if v.get("size") == 2.0} == {verdict}
    assert cells[2.0].todo == list(range(outcome[1], 8))


@pytest.mark.parametrize("outcome, status, verdict", [
    ((4, 4), "settled", "more"),  # 4..8 of 8 against 0/8: all "more"
    ((3, 3), "open", "open"),  # 3 of 8 would not be separable
    ((0, 5), "settled", "not separable"),  # at most 3 of 8
])
def test_a_cell_against_unsolved_rows_stops_exactly_when_settled(tiny, outcome, status,
                                                                 verdict):
    assert fisher_exact([[4, 4], [0, 8]], alternative="greater").pvalue < 0.05
    assert fisher_exact([[3, 5], [0, 8]], alternative="greater").pvalue >= 0.05
    cells, verdicts, *_ = _cells(tiny, {3.0: outcome})
    assert cells[3.0].status == status
    assert {v["verdict"] for v in verdicts if v.get("size") == 3.0} == {verdict}


def test_the_cut_rule_gates_the_table_it_skips(tiny, tmp_path):
    ref = make_reference(tmp_path / "ref", place=PLACE + '[cut]\n"task.levels" = [[2, 2]]\n'
                         'at_least = 5\nskip = [[[3, 3]]]\n')
    protocol = read_protocol(ref)
    # table 2 settled (5 of 5 solved against 8/8) and its count decided: table 3 runs
    cells, _, cut, _ = _cells(tiny, {2.0: (5, 5)}, protocol)
    assert cut == "run" and cells[3.0].status == "open"
    # 4 of 4: the count can still go either way: table 2 stays open, table 3 waits
    cells, _, cut, _ = _cells(tiny, {2.0: (4, 4)}, protocol)
    assert cut is None and cells[2.0].status == "open" and cells[3.0].status == "waiting"
    # 0 of 4 solved, 4 to run: at most 4 < 5: cut; table 3 leaves the evaluation
    cells, verdicts, cut, _ = _cells(tiny, {2.0: (0, 4)}, protocol)
    assert cut == "cut" and cells[3.0].status == "cut" and cells[3.0].group is None
    assert {v["verdict"] for v in verdicts if v.get("size") == 3.0} == {"not run"}


def test_next_round_takes_each_open_cells_next_seeds(tiny):
    cells, *_ = _cells(tiny, {2.0: (0, 3), 3.0: (1, 1)})
    assert {c.status for c in cells.values()} == {"open"}
    assert pl.next_round(cells, set(), workers=1) == {(3,): [2.0], (1,): [3.0]}
    assert pl.next_round(cells, set(), workers=2) == {(3, 4): [2.0], (1, 2): [3.0]}
    assert pl.next_round(cells, {(2.0, 3), (3.0, 1)}, workers=1) == {(4,): [2.0], (2,): [3.0]}


# ---- bad input ----------------------------------------------------------------------------------

def test_bad_input_is_one_line_and_writes_nothing(tiny, tmp_path):
    ref = tiny[0]
    out = tmp_path / "out"
    fails_with(["place", MIXER, "--kwargs", '{"num_heads": 2}', "--reference", ref,
                "--tables", "5", "--no-check", "--out", out], "unknown table 5")
    fails_with(["place", MIXER, "--kwargs", '{"num_heads": 2, "colour": 1}', "--reference",
                ref, "--no-check", "--out", out], "colour")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "place.toml").write_text(PLACE)  # a protocol, but no records
    (empty / "tiny-frontier.toml").write_text(EXPERIMENT)
    fails_with(["place", MIXER, "--reference", empty, "--no-check", "--out", out],
               "no runs found")
    fails_with(["place", MIXER, "--reference", tmp_path / "nowhere", "--out", out],
               "is neither a folder nor a shipped reference (zoo-frontier, frontier-2026, "
               "overwrite-2026)")
    assert not out.exists()


def test_a_mixer_that_fails_a_correctness_row_is_refused_before_training(tiny, tmp_path):
    with pytest.raises(RecallLabError, match="fails the check row"):
        pl.place(f"{Peek.__module__}:Peek", reference=tiny[0], out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---- a whole placement, interrupted and resumed -------------------------------------------------

def test_claims_come_first_and_a_stopped_placement_resumes(tiny, tmp_path, monkeypatch):
    ref = make_reference(tmp_path / "ref")  # the rows solve 8/8 at 2 pairs, 0/8 at 3
    out = tmp_path / "out"
    real = pl.run_sweep
    calls: list[tuple[str, int]] = []

    def first_call(exp, root, **kw):
        if not calls:  # nothing ran yet: the claims are already recorded
            regs = read_registry(Path(root))["registrations"]
            assert regs and regs[0]["claims"]
        index = real(exp, root, **kw)
        calls.append((exp.name, index["counts"]["ran"]))
        if exp.name == "cells":
            raise KeyboardInterrupt  # as Ctrl-C after the first round
        return index

    monkeypatch.setattr(pl, "run_sweep", first_call)
    # 4 seeds at 3 pairs against 0/8: 3 of 4 would be "more" (p = 0.018), so one unsolved seed
    # cannot settle the cell; two can (at most 2 of 4: p = 0.09, not separable)
    assert fisher_exact([[3, 1], [0, 8]], alternative="greater").pvalue < 0.05
    assert fisher_exact([[2, 2], [0, 8]], alternative="greater").pvalue >= 0.05
    with pytest.raises(KeyboardInterrupt):
        pl.place(MIXER, KWARGS, tables=[3.0], seeds=4, reference=ref, check=False, out=out,
                 plots=False)
    assert calls == [("pilot", 1), ("cells", 1)]
    folder = next(out.glob("place-*"))
    first = next((folder / "cells").glob("s0-*"))
    before = (first / "summary.json").read_bytes()

    def again(exp, root, **kw):
        index = real(exp, root, **kw)
        calls.append((exp.name, index["counts"]["ran"]))
        return index

    monkeypatch.setattr(pl, "run_sweep", again)
    answer = pl.place(MIXER, KWARGS, tables=[3.0], seeds=4, reference=ref, check=False,
                      out=out)
    assert (first / "summary.json").read_bytes() == before  # reused, not trained again
    assert calls[2:] == [("pilot", 0), ("cells", 1)]
    reg = answer["registration"]
    assert reg["before_every_run"] and reg["claims_recorded"] <= reg["first_run_launched"]
    # every run (1 pilot, 2 cells) stores the claims' content hash and was launched after them;
    # the pilot's and cells' sweeps name the placement's claims, not empty ones of their own
    regs = read_registry(folder)["registrations"]
    assert reg["runs"] == reg["bound"] == 3 and reg["sha256"] == regs[-1]["sha256"]
    for sub in ("pilot", "cells"):
        index = json.loads((folder / sub / "sweep.json").read_text())
        assert index["registration"]["sha256"] == regs[-1]["sha256"]
        assert not (folder / sub / "claims.json").exists()
    assert "pre-registered" in (folder / "report.md").read_text()
    # its record: the schema's, hash-bound claims, this machine, the time over segments
    from recall_lab.experiments.records import read_record

    record = read_record(folder)
    assert record["claims"]["binding"] == "hash" and record["claims"]["runs_bound"] == 3
    assert record["machine"]["cores"] and record["time"]["runs"] == 3
    assert [len(e["seeds_run"]) for e in record["evaluation_results"]] == [2]
    cell = answer["cells"][0]
    # the 6-step runs do not solve (test accuracy < 0.9): stopped after 2 of 4 seeds
    assert cell["solved"]["k"] == 0
    assert cell["status"] == "settled" and cell["solved"]["n"] == 2 and cell["not_run"] == 2
    assert answer["runs"] == {**answer["runs"], "planned": 4, "trained": 2, "saved": 2}
    assert {"report.md", "row.md", "answer.json", "claims.json", "place.json",
            "place-solved-state.png", "place-frontier.png"} <= {p.name for p in folder.iterdir()}
    assert [Path(p).name for p in answer["figures"]] == ["place-solved-state.png",
                                                         "place-frontier.png"]
    row = (folder / "row.md").read_text().splitlines()[-1]
    assert row.startswith("| `gla / num_heads=2` (") and "0/2 [0.00, 0.66] (stopped, 2 not run)" \
        in row


def test_a_zoo_row_placed_again_gets_its_archived_configs():
    """DeltaNet with 4 heads of key width 4, placed against the shipped zoo-frontier: its pilot
    runs are the lr pilot's and its cells (at the lr the pilot's rule picked there, 1e-3) the
    zoo-frontier's, config for config (same hashes), so each trains to the archived numbers."""
    kwargs = {"num_heads": 4, "expand_k": 0.25}
    table = pl.mixer_table("deltanet", kwargs)
    with open_reference() as folder:
        protocol = read_protocol(folder)
    cells = pl.cells_experiment(protocol, table, [4.0, 8.0, 16.0, 32.0], protocol.seeds, 1e-3)
    archived = json.loads((ZOO / "runs" / "sweep.json").read_text())["runs"]
    mine = {e["hash"] for e in archived if e["config"]["model"]["name"] == "deltanet"
            and e["config"]["model"]["mixer_kwargs"] == kwargs}
    assert len(mine) == 40 and {r.hash for r in cells.runs} == mine
    pilot = pl.pilot_experiment(protocol, table)
    runs, _ = load_runs([ZOO / "lr-pilot" / "runs"])
    pilot_archived = {r.folder.name.rsplit("-", 1)[1] for r in runs
                      if r.tables["model"].get("mixer_kwargs") == kwargs
                      and r.config["model.name"] == "deltanet"}
    assert len(pilot_archived) == 3 and {r.hash for r in pilot.runs} == pilot_archived


def test_a_dry_run_prints_the_plan_and_writes_nothing(tiny, tmp_path):
    from typer.testing import CliRunner

    from recall_lab.cli import app

    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["place", MIXER, "--kwargs", '{"num_heads": 2}', "--reference",
                                 str(tiny[0]), "--dry-run", "--no-estimate", "--out",
                                 str(out)])
    assert r.exit_code == 0, r.output
    claims = [x for x in r.stdout.splitlines() if x.startswith("claim ")]
    assert len(claims) == 6  # 2 tables x 2 neighbours, and 2 frontier claims
    assert "up to 16 cell runs" in " ".join(r.stdout.split()) and not out.exists()
    assert "estimated" not in r.stdout  # --no-estimate


def test_a_dry_runs_estimate_is_the_pilot_then_the_cells_from_a_probe_per_table(
        tiny, tmp_path, monkeypatch):
    from recall_lab import api
    from recall_lab.experiments import estimate as est

    lengths = []

    def probe(cfg, steps, threads, label):  # 1 s a step, whatever the shape
        lengths.append(cfg.task.max_len)
        return est.Probe(label, 1.0, 0.0, cfg.train.batch_size, cfg.task.max_len, "cpu")

    monkeypatch.setattr(est, "probe_steps", probe)
    monkeypatch.setattr(est, "probe_startup", lambda cfg, p, threads: 2.0)
    monkeypatch.setattr(est, "worker_start", lambda: 3.0)
    plan = api.place(MIXER, KWARGS, reference=tiny[0], out=tmp_path / "out", dry_run=True,
                     workers=2, quiet=True)
    e = plan["estimate"]
    assert "experiments" not in plan and not (tmp_path / "out").exists()
    assert e["runs"] == plan["pilot_runs"] + plan["cell_runs"] and e["workers"] == 2
    assert len(lengths) == len(set(lengths)) == len(plan["tables"])  # one probe a shape
    assert e["wall_s"] < e["run_s"]  # two workers
    # start-up in: the pilot, then the cells, each starting its workers (3 s each; the pilot's
    # one run starts one), and each run's own 2 s beside its 6 steps of 1 s
    runs = plan["pilot_runs"] + plan["cell_runs"]
    started = min(2, plan["pilot_runs"]) + min(2, plan["cell_runs"])
    assert e["startup"] == {"worker_s": 3.0, "phases": 2}
    assert e["run_s"] == pytest.approx(runs * (6 + 2) + started * 3.0)


# ---- censoring: `--tables` below the protocol's ------------------------------------------------

def _censored(tiny, solved_at_2: int):
    """The mixer run at table 2 only (8 seeds, `solved_at_2` solved) against the tiny
    reference, whose rows solve 8/8 at table 2 and 0/8 at table 3: frontier 2 [2, 2]."""
    _, protocol, rows, groups = tiny
    state = pl.run_state(pl.cells_experiment(protocol, pl.mixer_table(MIXER, KWARGS), [2.0],
                                             [0], 3e-3).runs[0].config.to_json())
    label = pl.mixer_row_label(MIXER, KWARGS)
    claims = pl.make_claims(label, state, rows, [2.0], protocol)
    mine = [r for r in _mine(protocol, {2.0: (solved_at_2, 8)})
            if r.config["task.levels"][0][1] == 2]
    cells, verdicts, _ = pl.evaluate(mine, groups, claims, protocol, label, [2.0])
    return [v for v in verdicts if v["kind"] == "frontier"]


def test_a_frontier_that_reaches_the_largest_table_run_is_not_decidable(tiny):
    """8/8 at table 2, table 3 not run: 3 could be solved (range [3, 3]: beyond the rows'
    [2, 2]), either way ([2, 3]: not separable) or not ([2, 2]): no verdict holds for all."""
    verdicts = _censored(tiny, 8)
    assert verdicts and {v["verdict"] for v in verdicts} == {"not decidable with these tables"}
    a = verdicts[0]["a_frontier"]
    assert a["censored"] == [3.0] and a["ran_to"] == 2.0
    assert pl.frontier_text(a) == "at least 2 [2+, 2+] (tables above 2 not run)"
    assert pl.frontier_text({"frontier": 2.0, "range": [2.0, 2.0], "censored": []}) == "2 [2, 2]"


def test_a_frontier_that_ends_below_the_largest_table_run_is_known(tiny):
    """0/8 at table 2 (Wilson upper bound 0.32 < 1/2): table 3, above it, counts as not solved,
    so the range [0, 0] is known and "short of" the rows' [2, 2] holds."""
    verdicts = _censored(tiny, 0)
    assert {v["verdict"] for v in verdicts} == {"short of"}
    assert verdicts[0]["a_frontier"]["censored"] == []


def test_a_seed_never_started_is_not_run_not_unfinished(tiny):
    from recall_lab.experiments.verdicts import unfinished_text

    cells, verdicts, *_ = _cells(tiny, {2.0: (0, 3)})  # seeds 3-7: no folder, no launch
    assert unfinished_text([cells[2.0].group]) == "; 5 of its 8 runs not run"
    assert all("not finished" not in v.get("detail", "") for v in verdicts)


class Bounded(nn.Module):
    """Causal, but it takes at most `l_max` tokens, failing past them as zoology's Hyena does
    (an AttributeError from deep inside its filter)."""

    def __init__(self, d_model: int, l_max: int = 1024, layer_idx: int | None = None) -> None:
        super().__init__()
        self.l_max = l_max
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        if x.shape[1] > self.l_max:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute 'max_l'")
        return self.proj(x)


class Limited(Bounded):
    def __init__(self, d_model: int, window: int = 1024, layer_idx: int | None = None) -> None:
        super().__init__(d_model, window, layer_idx)


@pytest.mark.parametrize("target, kwargs, needle", [
    ("Bounded", '{"l_max": 4}', "l_max = 4 is shorter than the 3 pairs table's"),
    ("Limited", '{"window": 4}', "cannot run the 3 pairs table's 14 tokens"),
])
def test_a_mixer_that_cannot_take_the_longest_table_is_refused_in_a_dry_run(
        tiny, tmp_path, target, kwargs, needle):
    out = tmp_path / "out"
    line = fails_with(["place", f"{__name__}:{target}", "--kwargs", kwargs, "--reference",
                       tiny[0], "--dry-run", "--out", out], needle)
    assert target != "Limited" or "AttributeError" in line
    assert not out.exists()


def test_a_log_l_state_meets_the_rows_nearest_its_count_at_each_tables_length(tiny):
    """log-linear attention's state grows by a constant per doubling of L: at each table it is
    compared with the fixed-state rows nearest its count at that table's length, and the claim
    says so (the frontier with the longest table's count)."""
    from recall_lab.experiments.state import LayerState

    _, protocol, rows, _ = tiny
    counts = sorted(r.state.numbers for r in rows if r.state and r.state.numbers is not None)
    lo, hi = counts[0], counts[-1]
    states = {2.0: LayerState(lo / 2, "log L", length=10),
              3.0: LayerState(hi * 2, "log L", length=14)}
    claims = pl.make_claims("loglin", states[3.0], rows, [2.0, 3.0], protocol, states)
    by_size = {s: {c["b"]["place.row"] for c in claims if c.get("size") == s} for s in (2.0, 3.0)}
    smallest = {r.label for r in rows if r.state and r.state.numbers == lo}
    largest = {r.label for r in rows if r.state and r.state.numbers == hi}
    assert by_size[2.0] == smallest and by_size[3.0] == largest
    assert all("its count at this table's length" in c["claim"] for c in claims
               if c["kind"] == "solved")
    assert any("at the longest table" in c["claim"] for c in claims if c["kind"] == "frontier")


# ---- the dry run says what the chosen tables can decide ------------------------------------------

def _dry(tiny, tmp_path, *extra):
    from typer.testing import CliRunner

    from recall_lab.cli import app

    r = CliRunner().invoke(app, ["place", MIXER, "--kwargs", '{"num_heads": 2}', "--reference",
                                 str(tiny[0]), "--dry-run", "--no-estimate", "--out",
                                 str(tmp_path / "out"), *extra], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    return text, [c for c in text.split("claim ")[1:]]


def test_a_dry_run_names_the_reference_it_places_against(tiny, tmp_path):
    """`place gla --reference frontier-2026 --dry-run` said "reference zoo-frontier" (the
    protocol's experiment name): the first line names the reference as the user gave it."""
    protocol = tiny[1]
    assert pl.reference_name("frontier-2026", protocol) == "frontier-2026"
    assert pl.reference_name(None, protocol) == "zoo-frontier"
    assert pl.reference_name(tiny[0], protocol) == f"{tiny[0]} (tiny-frontier)"
    text, _ = _dry(tiny, tmp_path)
    assert f"; reference {tiny[0]} (tiny-frontier);" in text.split(" claim 1")[0]


def test_each_claim_says_before_any_run_whether_these_tables_can_decide_it(tiny, tmp_path):
    """The tiny rows solve 8/8 at table 2 and 0/8 at 3: frontier 2 [2, 2]. All tables: every
    claim decidable. Table 2 alone (8 seeds): its claims decidable; a frontier claim only as
    "short of" (0/8 at 2 leaves 3 unsolved: [0, 0]; any other outcome leaves 3 free, where a
    solved 3 would be beyond and an unsolved one not separable). One seed at table 2 alone:
    no outcome is surely solved or surely not (Wilson [0.21, 1] and [0, 0.79]), so table 3 is
    always free and no frontier verdict can be decided."""
    _, claims = _dry(tiny, tmp_path)
    assert len(claims) == 6 and all(c.split(":")[0].endswith(f"({pl.DECIDABLE})")
                                    for c in claims)
    _, claims = _dry(tiny, tmp_path, "--tables", "2")
    solved = [c for c in claims if "seeds solved by" in c]
    front = [c for c in claims if ": frontier" in c]
    assert len(solved) == 2 and len(front) == 2
    assert all(f"({pl.DECIDABLE}): at 2 pairs" in c for c in solved)
    want = f"({pl.DECIDABLE} only as short of (beyond or not separable needs table 3)): "
    assert all(want in c for c in front), front
    _, claims = _dry(tiny, tmp_path, "--tables", "2", "--seeds", "1")
    front = [c for c in claims if ": frontier" in c]
    assert front and all("(not decidable with these tables): frontier" in c for c in front)


def test_every_neighbour_is_named_with_its_kwargs(tiny):
    """A row's label names what varies among the reference's rows ("rwkv7" alone where no
    other row had its head_size): claims name every row with all of its mixer's kwargs."""
    import dataclasses

    _, protocol, rows, _ = tiny
    assert pl.Row("rwkv7", kwargs={"head_size": 4}).name == "rwkv7 / head_size=4"
    assert pl.Row("deltanet / num_heads=4", kwargs={"num_heads": 4, "expand_k": 0.25}).name \
        == "deltanet / num_heads=4 / expand_k=0.25"
    assert {r.label: r.kwargs for r in rows if r.kwargs} == {
        "gla / num_heads=4": {"num_heads": 4}, "gla / num_heads=1": {"num_heads": 1}}
    # a row whose label leaves a kwarg out is named with it in every claim about it
    renamed = [dataclasses.replace(r, kwargs={**r.kwargs, "expand_k": 0.5}) if r.kwargs
               else r for r in rows]
    state = pl.run_state(pl.cells_experiment(protocol, pl.mixer_table(MIXER, KWARGS), [2.0],
                                             [0], 3e-3).runs[0].config.to_json())
    claims = pl.make_claims(pl.mixer_row_label(MIXER, KWARGS), state, renamed, [2.0], protocol)
    named = [c["claim"] for c in claims if c["b"]["place.row"].startswith("gla")]
    assert named and all(f"{c['b']['place.row']} / expand_k=0.5 (" in c["claim"]
                         for c in claims if c["b"]["place.row"].startswith("gla"))


def test_state_target_lists_the_kwargs_that_give_it(tiny, monkeypatch):
    """`recall-lab state gla --target N`: GLA's state per layer is (d_model expand_k) x
    (d_model expand_v) / num_heads (one (d_k/h) x (d_v/h) matrix per head): at the tiny
    reference's d_model 16, every set it lists gives N by that formula, and the first changes
    one kwarg; a target below every count is one line naming the smallest, exit 2."""
    from recall_lab.experiments import state_search as ss

    monkeypatch.setattr(ss, "INTS", (1, 2, 4))  # a small search: seconds
    monkeypatch.setattr(ss, "FLOATS", (0.5, 1.0))

    def formula(kw: dict) -> float:
        k, v = 16 * kw.get("expand_k", 0.5), 16 * kw.get("expand_v", 1.0)
        return k * v / kw.get("num_heads", 4)

    a = ss.search("gla", 64, reference=tiny[0])
    assert a["d_model"] == 16 and a["exact"]
    assert all(formula(o.kwargs) == 64 == o.state.numbers for o in a["exact"])
    assert a["exact"][0].changed == 1
    lines = ss.search_lines(a)
    assert lines[0].startswith("gla: recurrent state per layer at d_model 16")
    assert f"  {a['exact'][0].flag}" in lines
    b = ss.search("gla", 100, reference=tiny[0])  # none exact: the nearest on both sides
    assert not b["exact"] and formula(b["below"].kwargs) < 100 < formula(b["above"].kwargs)
    line = fails_with(["state", "gla", "--target", "1", "--reference", tiny[0]],
                      "below the smallest state per layer")
    count, kw = re.search(r"for gla: ([\d,]+) with --kwargs '(\{.*\})'", line).groups()
    assert formula(json.loads(kw)) == int(count.replace(",", "")) > 1
    assert ss.search("gla", 10**6, reference=tiny[0])["smallest"].kwargs == json.loads(kw)
    fails_with(["state", "mamba2", "--target", "256"], "built-in model")


def test_claims_give_each_layers_count_and_a_log_l_count_with_its_length():
    """One state convention in place's claims: per layer, each layer's count where they differ
    (Based's 384 and 2,925, never their mean 1,654.5) and a log L count with its length."""
    from recall_lab.experiments.state import LayerState

    based = pl.Row("based / feature_dim=8", kwargs={"feature_dim": 8},
                   state=LayerState((384 + 2925) / 2, "constant", layers=(384.0, 2925.0)))
    text = pl._who(based)
    assert text == "based / feature_dim=8 (384 (layer 1) / 2,925 (layer 2) per layer)"
    assert "1,654.5" not in text
    loglin = pl.Row("log-linear-mamba2", state=LayerState(512.0, "log L", length=66))
    assert pl._who(loglin) == "log-linear-mamba2 (512 at 66 tokens (log L) per layer)"
