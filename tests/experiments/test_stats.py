"""Solve-rate statistics against values worked out by hand (Wilson interval from its formula,
Fisher's exact test from the hypergeometric sum), steps to solve from metrics.jsonl, survival,
the frontier, solve-rate and frontier claims, the runs DataFrame, pre-registered claims, and the
report's refusals (unknown metric, a single run's folder without --out)."""

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from recall_lab import checkpoint as ck
from recall_lab.cli import app
from recall_lab.experiments import claims, stats
from recall_lab.experiments.engine import read_index, run_sweep
from recall_lab.experiments.grid import expand
from recall_lab.experiments.report import build_report, runs_frame, write_report
from tests.cli_checks import snapshot

Z = 1.959963984540054  # the 97.5% normal quantile


def wilson_by_hand(k, n):
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (9, 10), (10, 10), (1, 3), (5, 12)])
def test_wilson_interval_matches_the_formula(k, n):
    r = stats.wilson(k, n)
    lo, hi = wilson_by_hand(k, n)
    assert (r.k, r.n) == (k, n)
    assert r.lo == pytest.approx(max(lo, 0.0), abs=1e-9)
    assert r.hi == pytest.approx(min(hi, 1.0), abs=1e-9)


def test_wilson_known_values_and_empty():
    # 9 of 10: [0.596, 0.982]; 10 of 10: lower bound n / (n + z^2) = 10 / 13.84 = 0.722
    assert stats.wilson(9, 10).text() == "9/10 [0.60, 0.98]"
    assert stats.wilson(10, 10).lo == pytest.approx(10 / (10 + Z * Z))
    assert stats.wilson(0, 0).text() == "0/0" and stats.wilson(0, 0).lo is None


def fisher_greater_by_hand(a, n1, b, n2):
    """P(X >= a) for X ~ hypergeometric(n1 + n2 balls, a + b solved, n1 drawn)."""
    total, solved = n1 + n2, a + b
    denom = math.comb(total, n1)
    return sum(math.comb(solved, x) * math.comb(total - solved, n1 - x)
               for x in range(a, min(solved, n1) + 1)) / denom


@pytest.mark.parametrize("a,n1,b,n2", [(9, 10, 3, 10), (5, 10, 5, 10), (3, 12, 0, 12),
                                       (10, 10, 0, 10)])
def test_fisher_one_sided_matches_the_hypergeometric_sum(a, n1, b, n2):
    ra, rb = stats.wilson(a, n1), stats.wilson(b, n2)
    assert stats.fisher(ra, rb) == pytest.approx(fisher_greater_by_hand(a, n1, b, n2))
    # "less" is the mirror image
    assert stats.fisher(rb, ra, "less") == pytest.approx(fisher_greater_by_hand(a, n1, b, n2))


def test_steps_to_solve_survival_quantiles_frontier(tmp_path):
    rows = [{"step": 100, "split": "train", "acc": 0.99},  # train rows do not count
            {"step": 100, "split": "valid", "acc": 0.40},
            {"step": 200, "split": "valid", "acc": 0.96},
            {"step": 300, "split": "valid", "acc": 0.99}]
    (tmp_path / ck.METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert stats.steps_to_solve(tmp_path, 0.95) == 200
    assert stats.steps_to_solve(tmp_path, 0.99) == 300
    assert stats.steps_to_solve(tmp_path, 0.999, fallback=250) == 250
    assert stats.survival([100, None, 300, 200], [0, 150, 300, 1000]) == [0, 0.25, 0.75, 0.75]
    assert stats.quantiles([100, 200, 300, 400]) == (175.0, 250.0, 325.0)
    w = stats.wilson
    assert stats.frontier([(4, w(10, 10)), (8, w(5, 10)), (16, w(4, 10)), (32, w(6, 10))]) == 32
    assert stats.frontier([(4, w(4, 10)), (8, w(0, 10))]) is None
    # the range the seeds allow: the largest table whose Wilson interval lies at or above one
    # half (10/10: [0.72, 1.00]), and the largest it reaches (4/10: [0.17, 0.69]; 0/10 tops at
    # 0.28); the point frontier (6/10 at 8) lies between
    pts = [(4, w(10, 10)), (8, w(6, 10)), (16, w(4, 10)), (32, w(0, 10))]
    assert stats.frontier(pts) == 8 and stats.frontier_range(pts) == (4, 16)
    assert stats.frontier_range([(4, w(4, 10)), (8, w(0, 10))]) == (0, 4)
    assert stats.frontier_range([(4, w(0, 10))]) == (0, 0)


# ---- the report ---------------------------------------------------------------------------------

# model -> table entries -> per-seed test accuracies (3 seeds) and the step each reached 0.95
ACC = {"mamba": {4: [0.99, 0.97, 0.42], 8: [0.43, 0.41, 0.97]},
       "mamba+hax": {4: [0.99, 0.99, 0.99], 8: [0.99, 0.98, 0.96]}}
STEP = {0.99: 300, 0.98: 200, 0.97: 400, 0.96: 500}


@pytest.fixture
def table_sweep(tmp_path, tiny):
    tiny["grid"] = {"model.name": ["mamba", "mamba+hax"], "task.levels": [[[4, 4]], [[8, 8]]],
                    "train.seed": [0, 1, 2]}
    tiny["report"] = {"solve_at": 0.95, "expect": [
        {"claim": "hax solves the 8-table", "stat": "solved", "a": {"model.name": "mamba+hax"},
         "value": 0.4, "at": {"task.levels": [[8, 8]]}},
        {"claim": "hax beats mamba at 8", "stat": "solved", "a": {"model.name": "mamba+hax"},
         "b": {"model.name": "mamba"}, "op": ">", "at": {"task.levels": [[8, 8]]}},
        {"claim": "hax frontier beyond mamba's", "stat": "frontier",
         "a": {"model.name": "mamba+hax"}, "b": {"model.name": "mamba"}, "op": ">"},
    ]}
    exp = expand(tiny, "x")
    root = tmp_path / "x"
    entries = []
    for run in exp.runs:
        size = run.config.task.levels[0][1]
        acc = ACC[run.config.model.name][size][run.config.train.seed]
        folder = root / run.name
        folder.mkdir(parents=True)
        ck.write_json(folder / ck.CONFIG, run.config.to_json())
        solved_at = STEP.get(acc)
        curve = [{"step": s, "split": "valid", "acc": 0.96 if solved_at and s >= solved_at
                  else 0.4} for s in (100, 200, 300, 400, 500)]
        (folder / ck.METRICS).write_text("".join(json.dumps(r) + "\n" for r in curve))
        ck.write_json(folder / ck.SUMMARY, {"best_step": 500, "valid": {"acc": acc, "loss": 0},
                                            "test": {"acc": acc, "loss": 0}})
        entries.append({"name": run.name, "status": "done", "config": run.config.to_json(),
                        "registration": None})
    ck.write_json(root / "sweep.json", {"experiment": "x", "report": exp.report, "runs": entries})
    return root


def test_report_counts_seeds_solved_with_intervals_and_steps(table_sweep):
    rep = build_report([table_sweep])
    g = {g.label: g for g in rep["groups"]}
    m8 = g["mamba / levels=8"]
    assert (m8.solved.k, m8.solved.n) == (1, 3) and m8.solve_steps == [None, None, 400]
    h8 = g["mamba+hax / levels=8"]
    assert (h8.solved.k, h8.solved.n) == (3, 3) and h8.solve_steps == [300, 200, 500]
    assert h8.steps_q == (250.0, 300.0, 400.0)
    lo, hi = wilson_by_hand(1, 3)
    assert (m8.solved.lo, m8.solved.hi) == pytest.approx((lo, hi))
    # claims: 3/3 has a Wilson lower bound 3 / (3 + z^2) = 0.438 >= 0.4; Fisher 3/3 vs 1/3:
    # p = C(4,3) C(2,0) / C(6,3) = 4 / 20 = 0.2, not < 0.05; frontiers: hax 8 > mamba 4
    checks = rep["checks"]
    assert [c["ok"] for c in checks] == [True, False, True], checks
    assert "p = 0.2" in checks[1]["detail"]
    assert "required: a's frontier > b's; found: a 8, b 4" in checks[2]["detail"]
    # at 3 seeds the intervals allow either frontier anywhere from 0 (3/3's lower bound 0.438
    # is below one half) to 8 (1/3's upper bound 0.79 is above it)
    assert checks[2]["detail"].endswith("the seeds' Wilson intervals allow a 0-8, b 0-8")
    # a higher threshold: mamba's 0.97 seed no longer counts
    rep = build_report([table_sweep], solve_at=0.98)
    assert {g.label: g.solved.k for g in rep["groups"]}["mamba / levels=8"] == 0


def test_report_files_carry_the_solve_rates(table_sweep, tmp_path):
    rep = build_report([table_sweep])
    paths = write_report(rep, tmp_path / "out")
    names = {p.name for p in paths}
    assert {"report-survival.png", "report-solved-task_levels.png"} <= names
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| mamba+hax | 8 |" in md and "3/3 [0.44, 1.00] | 300 [250, 400] |" in md
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["groups"][0]["solved"]["k"] == 2 and data["solve_at"] == 0.95


def test_report_md_pivots_seeds_solved_by_table(table_sweep, tmp_path):
    """report.md's table of seeds solved by row (a group's values less task.levels) and table,
    with each row's frontier and the range its seeds' Wilson intervals allow."""
    rep = build_report([table_sweep])
    write_report(rep, tmp_path / "out", plots=False)
    lines = (tmp_path / "out" / "report.md").read_text().splitlines()
    i = lines.index("## Seeds solved by table")
    start = next(j for j in range(i, len(lines)) if lines[j].startswith("| row"))
    end = lines.index("", start)
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[start:end]]
    del cells[1]  # the | --- | line
    assert cells[0][0] == "row" and cells[0][-3:] == ["table 4", "table 8", "frontier [range]"]

    def rate(k, n):
        lo, hi = wilson_by_hand(k, n)
        return f"{k}/{n} [{max(lo, 0):.2f}, {min(hi, 1):.2f}]"

    rows = {c[0]: c for c in cells[1:]}
    assert set(rows) == {"mamba", "mamba+hax"}
    # mamba: 2/3 then 1/3, frontier 4; 2/3's interval [0.21, 0.94] reaches one half but no
    # interval lies above it (3 seeds), 1/3's [0.06, 0.79] reaches it: range 0-8
    assert rows["mamba"][-3:] == [rate(2, 3), rate(1, 3), "4 [0, 8]"]
    assert rows["mamba+hax"][-3:] == [rate(3, 3), rate(3, 3), "8 [0, 8]"]
    # the terminal prints the same lines (piped: cells whole)
    r = CliRunner().invoke(app, ["report", str(table_sweep), "--no-plots", "--out",
                                 str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    assert "seeds solved by table" in r.output and "frontier [range]" in r.output
    out = r.output[r.output.index("seeds solved by table"):]
    line = next(ln for ln in out.splitlines() if ln.strip("│┃ ").startswith("mamba+hax"))
    assert [c.strip() for c in line.strip("│┃ ").split("│")][-1] == "8 [0, 8]"


def test_runs_frame_one_row_per_run(table_sweep):
    df = runs_frame([table_sweep])
    assert len(df) == 12
    assert {"model.name", "train.seed", "test.acc", "solved", "steps_to_solve",
            "samples_to_solve"} <= set(df.columns)
    # pandas and the report agree on the counts
    solved = df.groupby(["model.name", "task.levels"])["solved"].sum().to_dict()
    assert solved[("mamba", "[[8, 8]]")] == 1 and solved[("mamba+hax", "[[4, 4]]")] == 3
    row = df[(df["model.name"] == "mamba") & (df["test.acc"] == 0.97)].iloc[0]
    assert row["steps_to_solve"] == 400 and row["samples_to_solve"] == 400 * 4


def test_bad_stat_claims_cannot_be_checked(table_sweep):
    bad = [{"stat": "median", "a": {"model.name": "mamba"}, "value": 0.5},
           {"stat": "solved", "a": {"model.name": "mamba"}, "value": 0.5, "margin": 0.1,
            "at": {"task.levels": [[4, 4]]}},
           {"stat": "mean", "a": {"model.name": "mamba"}, "b": {"model.name": "mamba+hax"},
            "op": "~", "at": {"task.levels": [[4, 4]]}}]
    checks = build_report([table_sweep], experiment={"report": {"expect": bad}})["checks"]
    assert [c["ok"] for c in checks] == [False, False, False]
    assert all(c["detail"].startswith("cannot check") for c in checks), checks


# ---- pre-registration ---------------------------------------------------------------------------

def test_registry_status_by_hand(tmp_path):
    spec = {"claim": "a beats b", "a": {"model.name": "a"}, "b": {"model.name": "b"}}
    first = claims.register(tmp_path, [spec])
    assert claims.register(tmp_path, [spec]) == first  # unchanged claims: no new entry
    registry = claims.read_registry(tmp_path)
    assert len(registry["registrations"]) == 1
    # runs that store no registration hash: covered by the sweep's record only
    assert claims.status(spec, [first, first], registry)["status"] == "time only"
    sha = registry["registrations"][0]["sha256"]
    assert sha == claims.content_hash(registry["registrations"][0])
    later = "2999-01-01T00:00:00+00:00"
    st = claims.status(spec, [first, first], registry, [later, later], [sha, sha])
    assert st["status"] == "pre-registered" and st["bound"] == 2
    assert claims.status(spec, [None, None], registry)["status"] == "not recorded"
    edited = {**spec, "margin": 0.1}
    second = claims.register(tmp_path, [edited])
    registry = claims.read_registry(tmp_path)
    st = claims.status(edited, [first, second], registry)
    assert st["status"] == "after runs" and "1 of its 2" in st["text"] and st["changed"]
    sha2 = registry["registrations"][1]["sha256"]
    assert claims.status(edited, [second], registry, [later], [sha2])["status"] == \
        "pre-registered"


def test_status_of_runs_launched_under_another_experiments_claims(tmp_path):
    """A claim that compares with another experiment's runs (ks-oracle against capacity): those
    runs carry the other registry's id. One launched after the claim's first registration (its
    sweep recorded when) counts as covered; one with no launch time, or launched before, does
    not."""
    spec = {"claim": "oracle beats hax", "a": {"model.name": "oracle"}}
    for name in ("own", "other"):
        (tmp_path / name).mkdir()
    own = claims.register(tmp_path / "own", [spec])
    other = claims.register(tmp_path / "other", [{"claim": "something else"}])
    registry = claims.read_registry(tmp_path / "own")
    registry["registrations"] += claims.read_registry(tmp_path / "other")["registrations"]
    fixed = registry["registrations"][0]["time"]
    before, after = "2000-01-01T00:00:00+00:00", "2999-01-01T00:00:00+00:00"
    assert before < fixed < after
    st = claims.status(spec, [own, other, other], registry, launched=[after, after, after])
    assert st["status"] == "time only" and "all 3 runs" not in st["text"]
    # bound by hash: runs launched under another registration (the other experiment's hash)
    # are covered by time only, never "pre-registered"; all three under this one are
    own_sha, other_sha = (r["sha256"] for r in registry["registrations"])
    st = claims.status(spec, [own, other, other], registry, [after] * 3,
                       [own_sha, other_sha, other_sha])
    assert st["status"] == "time only" and "2 of its 3 runs" in st["text"]
    assert st["bound"] == 1
    st = claims.status(spec, [own] * 3, registry, [after] * 3, [own_sha] * 3)
    assert st["status"] == "pre-registered" and "all 3 runs" in st["text"]
    # bound means launched strictly after: a run launched before, or claims.json edited after
    # the run stored its hash, is not
    assert claims.status(spec, [own], registry, [before], [own_sha])["status"] != \
        "pre-registered"
    tampered = {"registrations": [{**registry["registrations"][0], "time": before},
                                  registry["registrations"][1]]}
    st = claims.status(spec, [own], tampered, [after], [own_sha])
    assert st["status"] == "time only"
    assert "edited" in claims.check_binding(own_sha, after, tampered)["why"]
    st = claims.status(spec, [own, other, other], registry, launched=[after, None, before])
    assert st["status"] == "after runs" and "2 of its 3" in st["text"]
    st = claims.status(spec, [own, other], registry)  # no launch times: as before
    assert st["status"] == "after runs" and "1 of its 2" in st["text"]


def test_an_unfinished_run_passed_over_keeps_its_launch_record(tmp_path, tiny):
    """A run launched by one sweep and left unfinished keeps the claims it was launched under and
    its launch time through a later sweep that does not run it (here `--only` leaves it), so the
    sweep that finally resumes it still knows them (capacity lost two runs' records that way)."""
    from recall_lab.experiments.grid import parse_only

    tiny["grid"] = {"train.seed": [0, 1]}
    tiny["report"] = {"expect": [{"claim": "c", "a": {}, "value": 0.0}]}
    exp = expand(tiny, "x")
    folder = tmp_path / exp.name
    run_sweep(exp, tmp_path)
    seed1 = next(r.name for r in exp.runs if r.config.train.seed == 1)
    (folder / seed1 / ck.SUMMARY).unlink()  # as if its sweep had been killed mid-run
    first = {e["name"]: e for e in read_index(folder)["runs"]}[seed1]
    assert first["registration"] and first["launched"]
    run_sweep(exp, tmp_path, only=parse_only(["train.seed=0"]))
    left = {e["name"]: e for e in read_index(folder)["runs"]}[seed1]
    assert left["status"] == "pending"
    assert (left["registration"], left["launched"]) == (first["registration"], first["launched"])


def test_sweep_registers_claims_before_its_runs(tmp_path, tiny):
    tiny["grid"] = {"train.seed": [0, 1]}
    tiny["report"] = {"expect": [{"claim": "mamba learns something", "a": {},
                                  "value": 0.0}]}
    exp = expand(tiny, "x")
    run_sweep(exp, tmp_path)
    folder = tmp_path / exp.name
    registry = claims.read_registry(folder)
    (reg,) = registry["registrations"]
    index = read_index(folder)
    assert {e["registration"] for e in index["runs"]} == {reg["id"]}
    # each run's launch time is recorded, and is not before the claims were
    assert all(e["launched"] >= reg["time"] for e in index["runs"])
    assert reg["claims"][0]["claim"] == "mamba learns something"
    # the registration is older than every run's files
    first = min(p.stat().st_mtime for p in folder.rglob(ck.CONFIG))
    assert (folder / claims.CLAIMS).stat().st_mtime <= first
    # each run stores the registration's content hash in its own config.json, launched after
    assert index["registration"]["sha256"] == reg["sha256"] == claims.content_hash(reg)
    for e in index["runs"]:
        stored = ck.read_json(folder / e["name"] / ck.CONFIG)["registration"]
        assert stored["sha256"] == reg["sha256"] and e["launched"] > reg["time"]
    rep = build_report([folder])
    assert rep["checks"][0]["registered"]["status"] == "pre-registered"
    # the claim edited after the runs: the report says so (and the claim still checks)
    edited = {"report": {"expect": [{"claim": "mamba learns something", "a": {},
                                     "value": 0.01}]}}
    claims.register(folder, edited["report"]["expect"])
    rep = build_report([folder], experiment=edited)
    st = rep["checks"][0]["registered"]
    assert st["status"] == "after runs" and st["changed"]


# ---- the report's refusals (CLI) ----------------------------------------------------------------

def test_unknown_metric_is_refused_and_nothing_written(table_sweep):
    before = snapshot(table_sweep)
    r = CliRunner().invoke(app, ["report", str(table_sweep), "--metric", "test.nope"])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "unknown metric 'test.nope'" in lines[0], lines
    assert "test.acc" in lines[0]
    assert snapshot(table_sweep) == before


def test_single_run_folder_needs_out(table_sweep, tmp_path):
    run = next(p for p in table_sweep.iterdir() if (p / ck.CONFIG).is_file())
    before = snapshot(run)
    r = CliRunner().invoke(app, ["report", str(run)])
    assert r.exit_code == 2 and "single run's folder: pass --out" in r.stderr, r.output
    assert snapshot(run) == before
    r = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "one"),
                                 "--no-plots"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "one" / "report.md").is_file() and snapshot(run) == before


def test_fisher_power_exact_against_simulation_and_science_md():
    import numpy as np
    from scipy.stats import fisher_exact

    rng = np.random.default_rng(0)
    n, sims, hits = 10, 2000, 0
    for _ in range(sims):
        a, b = rng.binomial(n, 0.9), rng.binomial(n, 0.3)
        hits += fisher_exact([[a, n - a], [b, n - b]], alternative="greater").pvalue < 0.05
    exact = stats.fisher_power(0.9, 0.3, n)
    assert abs(exact - hits / sims) < 3 * math.sqrt(exact * (1 - exact) / sims)
    # SCIENCE.md's simulated figures are for the two-sided test: 68% (10 seeds), 89% (15)
    assert stats.fisher_power(0.9, 0.3, 10, alternative="two-sided") == pytest.approx(0.68,
                                                                                      abs=0.02)
    assert stats.fisher_power(0.9, 0.3, 15, alternative="two-sided") == pytest.approx(0.89,
                                                                                      abs=0.02)
    assert stats.fisher_power(0.5, 0.5, 10) < 0.05  # no difference: at most the level
    n80 = stats.seeds_for_power(0.9, 0.3, 0.8)
    assert stats.fisher_power(0.9, 0.3, n80) >= 0.8 > stats.fisher_power(0.9, 0.3, n80 - 1)


def test_power_command_prints_the_exact_power_and_refuses_bad_rates():
    r = CliRunner().invoke(app, ["power", "0.9", "0.3", "--seeds", "3,10"])
    assert r.exit_code == 0, r.output
    # 3 seeds per arm can never reach 5% (the best table, 3/3 vs 0/3, gives p = 0.05)
    assert "│             3 │             0.000 │     0.000 │" in r.stdout
    assert f"{stats.fisher_power(0.9, 0.3, 10):.3f}" in r.stdout
    assert "seeds per arm for 80% power (one-sided): 10" in r.stdout
    for bad, needle in ((["0.9", "1.3"], "rate_b must be in [0, 1]"),
                        (["0.9", "0.3", "--seeds", "1,x"], "comma-separated integers")):
        r = CliRunner().invoke(app, ["power", *bad])
        assert r.exit_code == 2 and needle in r.stderr and "Traceback" not in r.output


def test_archive_rebuilds_the_report_and_resumes_the_sweep(tmp_path, tiny):
    import shutil

    from recall_lab.experiments.archive import archive_runs

    tiny["grid"] = {"train.seed": [0, 1]}
    exp = expand(tiny, "x")
    run_sweep(exp, tmp_path / "runs")
    sweep = tmp_path / "runs" / exp.name
    n = archive_runs(sweep, tmp_path / "archive")
    assert n == 2 and not list((tmp_path / "archive").rglob("*.safetensors"))
    a = build_report([sweep])
    b = build_report([tmp_path / "archive"])
    assert a["rows"] == b["rows"]
    # the archive copied back: the sweep finds every run finished and trains nothing
    shutil.copytree(tmp_path / "archive", tmp_path / "again" / exp.name)
    index = run_sweep(exp, tmp_path / "again")
    assert index["counts"]["ran"] == 0 and index["counts"]["done"] == 2
    r = CliRunner().invoke(app, ["archive", str(tmp_path / "nope"), str(tmp_path / "z")])
    assert r.exit_code == 2 and "not a sweep folder" in r.stderr


def test_frontier_claim_refuses_a_cut_short_sweep(table_sweep):
    """With a table whose runs are unfinished, the frontier would be capped at the largest
    finished table: the claim cannot be checked (and says where)."""
    index = json.loads((table_sweep / "sweep.json").read_text())
    victim = next(e["name"] for e in index["runs"] if "levels8" in e["name"]
                  and e["config"]["model"]["name"] == "mamba")
    (table_sweep / victim / ck.SUMMARY).unlink()
    checks = build_report([table_sweep])["checks"]
    assert not checks[2]["ok"] and "unfinished runs at mamba / levels=8" in checks[2]["detail"]
    # the frontier is open, not failed: mamba's 8-table is 1/3 or 2/3 as its unfinished seed
    # ends, so its frontier 4 or 8 and "hax's 8 > mamba's" either way. The Fisher claim is
    # settled: hax 3/3 against mamba 1/3 gives p = 0.2 and against 2/3 p = C(5,3) / C(6,3) = 0.5,
    # both >= 0.05, so no outcome of the unfinished seed passes it
    assert [c["verdict"] for c in checks] == ["pass", "fail", "open"], checks
    assert "1 of its 6 runs not finished" in checks[1]["detail"]
    assert "settled" in checks[1]["detail"] and "settled" not in checks[2]["detail"]


def test_claims_no_unfinished_run_can_turn_are_settled(table_sweep):
    """Unfinished runs leave a claim open only while some outcome of them could turn it. With
    one of hax's three 8-pair seeds unfinished (the other two solved) and mamba's 8-table at 1/3,
    hand-computed: hax's Wilson lower bound is 0.208 at 2/3 and 0.438 at 3/3, across 0.4: open;
    Fisher p = 0.5 at 2/3 and 0.2 at 3/3 against 1/3: settled fail; hax's frontier is 8 at 2/3
    and at 3/3 and mamba's 4, so "8 > 4": settled pass."""
    index = json.loads((table_sweep / "sweep.json").read_text())
    victim = next(e["name"] for e in index["runs"] if "levels8" in e["name"]
                  and e["config"]["model"]["name"] == "mamba+hax")
    (table_sweep / victim / ck.SUMMARY).unlink()
    checks = build_report([table_sweep])["checks"]
    assert [c["verdict"] for c in checks] == ["open", "fail", "pass"], checks
    assert [c["ok"] for c in checks] == [False, False, True]
    assert "settled" not in checks[0]["detail"]
    assert "between 8 and 8" in checks[2]["detail"] and "between 4 and 4" in checks[2]["detail"]
    lo2, _ = wilson_by_hand(2, 3)
    lo3, _ = wilson_by_hand(3, 3)
    assert lo2 < 0.4 <= lo3  # the hand values the docstring quotes straddle the claim
    assert fisher_greater_by_hand(2, 3, 1, 3) == pytest.approx(0.5)
    assert fisher_greater_by_hand(3, 3, 1, 3) == pytest.approx(0.2)


def test_frontier_only_grows_as_seeds_solve():
    """`_settled` tries a row's frontier at its two ends (no unfinished run solved, every one):
    that is enough only if solving one more seed of any table never lowers the frontier."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = rng.integers(1, 6, size=4)
        k = [int(rng.integers(0, m + 1)) for m in n]
        pts = [(2.0 ** (i + 2), stats.wilson(k[i], int(n[i]))) for i in range(4)]
        f = stats.frontier(pts) or 0.0
        i = int(rng.integers(0, 4))
        if k[i] < n[i]:
            pts[i] = (pts[i][0], stats.wilson(k[i] + 1, int(n[i])))
            assert (stats.frontier(pts) or 0.0) >= f


def test_verdicts_pass_fail_and_open(table_sweep):
    """A claim is open while a run of its rows is unfinished, failed when its numbers say no or
    it cannot be evaluated for another reason (a bad key), passed when they say yes."""
    checks = build_report([table_sweep])["checks"]
    assert [c["verdict"] for c in checks] == ["pass", "fail", "pass"], checks
    assert [c["ok"] for c in checks] == [True, False, True]
    bad = [{"stat": "median", "a": {"model.name": "mamba"}, "value": 0.5}]
    checks = build_report([table_sweep], experiment={"report": {"expect": bad}})["checks"]
    assert checks[0]["verdict"] == "fail"
    # a group with no finished run at all: open
    index = json.loads((table_sweep / "sweep.json").read_text())
    for e in index["runs"]:
        if e["config"]["model"]["name"] == "mamba+hax" and "levels8" in e["name"]:
            (table_sweep / e["name"] / ck.SUMMARY).unlink()
    checks = build_report([table_sweep])["checks"]
    # ... except the Fisher claim: even hax 3/3 against mamba's 1/3 has p = 0.2 >= 0.05, so no
    # outcome of hax's unfinished seeds can pass it
    assert [c["verdict"] for c in checks] == ["open", "fail", "open"], checks
    assert checks[0]["detail"].startswith("cannot check yet: mamba+hax / levels=8")
    assert "settled" in checks[1]["detail"]
