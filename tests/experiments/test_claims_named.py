"""Named claim ops (more, fewer, as many, rate at least, rate at most) on hand-built groups: each
passes, fails and settles as its test says; Newcombe's interval against the paper's own table;
the symbols keep their verdicts and their claims' hashes; bad claims give one line; every claim
says in words what it tests and, failing, what was required and what was found. And `report`'s
held-out overlap: a column per group and a warning above 1%."""

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recall_lab import checkpoint as ck
from recall_lab.cli import app
from recall_lab.commands import shell
from recall_lab.experiments import claims, stats
from recall_lab.experiments.grid import expand
from recall_lab.experiments.report import Group, RunRecord, build_report, write_report
from recall_lab.experiments.verdicts import check_expectations, evaluate_claim, three_way
from tests.cli_checks import fails_with

Z = 1.959963984540054  # the 97.5% normal quantile
RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def group(name: str, k: int, n: int, missing: int = 0) -> Group:
    """A report group of n finished seeds, k of them solved, and `missing` unfinished runs."""
    runs = [RunRecord(f"{name}-s{i}", Path("/nonexistent"), "done", {"model.name": name},
                      {"test": {"acc": 1.0 if i < k else 0.5}}) for i in range(n)]
    runs += [RunRecord(f"{name}-m{i}", Path("/nonexistent"), "missing", {"model.name": name})
             for i in range(missing)]
    g = Group((name,), {"model.name": name}, name, runs)
    g.lrs, g.best_lr = {1e-3: 0.5}, 1e-3
    g.selected = runs[:n]
    g.mean = (k + 0.5 * (n - k)) / n if n else None
    g.solved = stats.wilson(k, n)
    return g


def check(a: Group, b: Group | None, **claim) -> dict:
    spec = {"claim": "c", "stat": "solved", "a": {"model.name": a.label}, **claim}
    if b is not None:
        spec["b"] = {"model.name": b.label}
    return evaluate_claim([a] + ([b] if b is not None else []), spec).result


def wilson_by_hand(k, n):
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return max(centre - half, 0.0), min(centre + half, 1.0)


def newcombe_by_hand(a, m, b, n):
    """Newcombe (1998) method 10 from its formula, on the Wilson intervals above."""
    p1, p2 = a / m, b / n
    (l1, u1), (l2, u2) = wilson_by_hand(a, m), wilson_by_hand(b, n)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2
                                                                          + (p2 - l2) ** 2)


# Newcombe, Statistics in Medicine 17:873 (1998), Table II, method 10 (score, no continuity
# correction), its eight examples (a)-(h), to the paper's four decimals
TABLE_II = [((56, 70, 48, 80), (0.0524, 0.3339)), ((9, 10, 3, 10), (0.1705, 0.8090)),
            ((6, 7, 2, 7), (0.0582, 0.8062)), ((5, 56, 0, 29), (-0.0381, 0.1926)),
            ((0, 10, 0, 20), (-0.1611, 0.2775)), ((0, 10, 0, 10), (-0.2775, 0.2775)),
            ((10, 10, 0, 20), (0.6791, 1.0000)), ((10, 10, 0, 10), (0.6075, 1.0000))]


@pytest.mark.parametrize("counts,paper", TABLE_II)
def test_newcombe_interval_matches_the_papers_table(counts, paper):
    a, m, b, n = counts
    d = stats.newcombe(stats.wilson(a, m), stats.wilson(b, n))
    assert d.diff == pytest.approx(a / m - b / n)
    assert (round(d.lo, 4), round(d.hi, 4)) == paper
    assert (d.lo, d.hi) == pytest.approx(newcombe_by_hand(a, m, b, n), abs=1e-9)


def test_more_and_fewer_are_the_one_sided_fisher_tests_of_the_symbols():
    for ka, kb in [(10, 2), (9, 3), (5, 4), (0, 6), (3, 10)]:
        a, b = group("a", ka, 10), group("b", kb, 10)
        for named, symbol in (("more", ">"), ("fewer", "<")):
            got, sym = check(a, b, op=named), check(a, b, op=symbol)
            assert got["verdict"] == sym["verdict"], (ka, kb, named)
            alt = "greater" if named == "more" else "less"
            p = stats.fisher(a.solved, b.solved, alt)
            assert got["verdict"] == ("pass" if p < 0.05 else "fail")
            assert got["detail"].endswith(f"found: p = {p:.3g}")
    # 10/10 against 2/10: p = C(12,10) C(8,0) / C(20,10) = 66 / 184756
    res = check(group("a", 10, 10), group("b", 2, 10), op="more")
    assert res["verdict"] == "pass" and f"p = {66 / 184756:.3g}" in res["detail"]
    assert res["tests"] == ("a solves significantly more seeds than b: one-sided Fisher exact "
                            "test at 0.05")


def test_as_many_passes_fails_and_says_when_the_seeds_are_too_few():
    # 20/20 against 18/20: lower bound -0.0765 (by hand) >= -0.2
    lo, _ = newcombe_by_hand(20, 20, 18, 20)
    res = check(group("a", 20, 20), group("b", 18, 20), op="as many", margin=0.2)
    assert lo == pytest.approx(-0.0765, abs=1e-4)
    assert res["verdict"] == "pass" and f"found: {lo:+.3f}" in res["detail"]
    assert "required: lower bound >= -0.2" in res["detail"]
    # 10/20 against 18/20: the difference itself is beyond the margin
    res = check(group("a", 10, 20), group("b", 18, 20), op="as many", margin=0.2)
    assert res["verdict"] == "fail" and "too wide" not in res["detail"]
    # 0/3 against 0/3: equal, but 3 seeds give a lower bound of -0.5615 (the Wilson upper
    # bound of 0/3, z^2 / (3 + z^2)): the line says the seeds are too few to show it
    res = check(group("a", 0, 3), group("b", 0, 3), op="as many", margin=0.2)
    assert res["verdict"] == "fail"
    assert f"found: {-Z * Z / (3 + Z * Z):+.3f}" in res["detail"]
    assert "3 and 3 seeds leave the interval too wide to show it" in res["detail"]
    assert res["tests"].startswith("a solves at least as many seeds as b within 0.2")
    # the level sets the interval: at level 0.5 (a 50% interval) 20/20 against 20/20 passes
    # a margin its 95% interval misses
    tight = check(group("a", 20, 20), group("b", 20, 20), op="as many", margin=0.03,
                  level=0.5)
    wide = check(group("a", 20, 20), group("b", 20, 20), op="as many", margin=0.03)
    assert (tight["verdict"], wide["verdict"]) == ("pass", "fail")


def test_as_many_settles_when_no_unfinished_seed_can_turn_it():
    # a: 0/3 finished + 1 unfinished against b 3/3: a at 0/4 or 1/4 fails either way
    res = check(group("a", 0, 3, missing=1), group("b", 3, 3), op="as many", margin=0.2)
    assert res["verdict"] == "fail" and "settled" in res["detail"]
    for k in (0, 1):
        assert newcombe_by_hand(k, 4, 3, 3)[0] < -0.2
    # a: 30/30 + 1 unfinished against b 20/30: a at 30/31 or 31/31 passes either way
    res = check(group("a", 30, 30, missing=1), group("b", 20, 30), op="as many", margin=0.2)
    assert res["verdict"] == "pass" and "settled" in res["detail"]
    assert min(newcombe_by_hand(k, 31, 20, 30)[0] for k in (30, 31)) >= -0.2
    # a: 19/19 + 1 unfinished against b 20/20: 20/20 passes (-0.161), 19/20 fails: open
    res = check(group("a", 19, 19, missing=1), group("b", 20, 20), op="as many", margin=0.2)
    assert res["verdict"] == "open"
    assert newcombe_by_hand(20, 20, 20, 20)[0] >= -0.2 > newcombe_by_hand(19, 20, 20, 20)[0]


def test_more_settles_like_its_symbol():
    a, b = group("a", 2, 3, missing=1), group("b", 1, 3)
    got, sym = check(a, b, op="more"), check(a, b, op=">")
    # 2/4 or 3/4 against 1/3: p >= 0.05 either way
    assert got["verdict"] == sym["verdict"] == "fail" and "settled" in got["detail"]


def test_rate_at_least_and_at_most_read_the_wilson_bounds():
    lo, hi = wilson_by_hand(2, 3)
    res = check(group("t", 2, 3), None, op="rate at least", value=0.5)
    sym = check(group("t", 2, 3), None, op=">=", value=0.5)
    assert res["verdict"] == sym["verdict"] == "fail"
    # the line, now saying what was required and what was found
    assert res["detail"] == (f"t solved 2/3 [0.21, 0.94] (Wilson 95%); required: Wilson 95% "
                             f"lower bound >= 0.5; found: {lo:.3f}")
    assert sym["detail"] == res["detail"] and round(lo, 3) == 0.208
    assert check(group("t", 2, 3), None, op="rate at most", value=0.95)["verdict"] == "pass"
    assert check(group("t", 2, 3), None, op="rate at most", value=0.9)["verdict"] == "fail"
    assert hi < 0.95 and hi > 0.9
    # settled: 10/10 + 1 unfinished has its lower bound above 0.6 at 10/11 and 11/11
    res = check(group("t", 10, 10, missing=1), None, op="rate at least", value=0.6)
    assert res["verdict"] == "pass" and "settled" in res["detail"]
    assert wilson_by_hand(10, 11)[0] >= 0.6


def test_symbols_keep_their_verdicts_and_their_claims_hashes():
    """The symbols' verdicts on hand-built groups as before (Fisher and Wilson by hand), and
    every committed claim's hash recomputes to the one its sweep registered."""
    a, b = group("a", 9, 10), group("b", 3, 10)
    # one-sided Fisher 9/10 vs 3/10: the hypergeometric tail P(X >= 9), 12 solved of 20
    tail = sum(math.comb(12, x) * math.comb(8, 10 - x) for x in range(9, 11)) / math.comb(20, 10)
    assert stats.fisher(a.solved, b.solved) == pytest.approx(tail) and tail < 0.05
    want = {">": "pass", ">=": "pass", "<": "fail", "<=": "fail", "~": "fail"}
    assert {op: check(a, b, op=op)["verdict"] for op in want} == want
    assert check(a, None, op=">=", value=0.55)["verdict"] == "pass"  # lower 0.596
    assert check(a, None, op="<=", value=0.95)["verdict"] == "fail"  # upper 0.982
    registries = sorted(RESULTS.glob("*/runs/claims.json")) + sorted(
        RESULTS.glob("*/*/runs/claims.json"))
    assert len(registries) >= 5
    n = 0
    for path in registries:
        for reg in json.loads(path.read_text())["registrations"]:
            for c in reg["claims"]:
                assert claims.claim_hash(c["spec"]) == c["sha256"], (path, c["claim"])
                n += 1
    assert n >= 20


def test_a_committed_report_keeps_its_verdicts_and_registrations():
    """mixer-example's report rebuilt from its records: every claim's verdict and registration
    status as its committed report.json holds them, but that its runs, recorded before runs
    stored the claims' hash, are now bound by time only: "pre-registered" then reads "time
    only" (the committed report is history and keeps its word)."""
    folder = RESULTS / "mixer-example"
    committed = json.loads((folder / "report.json").read_text())["checks"]
    rebuilt = build_report([folder / "runs"])["checks"]
    now = {"pre-registered": "time only"}
    assert [(c["claim"], c["verdict"], c["registered"]["status"]) for c in rebuilt] == [
        (c["claim"], c["verdict"], now.get(c["registered"]["status"], c["registered"]["status"]))
        for c in committed]
    assert any(c["registered"]["status"] == "time only" for c in rebuilt)
    assert all(c["tests"] for c in rebuilt)


@pytest.mark.parametrize("claim,needle", [
    ({"op": "most"}, "stat = 'solved' takes op >=, >, <=, <, ~, more, fewer, as many"),
    ({"op": "as many"}, "op 'as many' needs margin"),
    ({"op": "as many", "margin": 1.5}, "a fraction between 0 and 1"),
    ({"op": "more", "value": 0.5, "b": None}, "op 'more' compares a with a group: give b"),
    ({"op": "rate at least"}, "op 'rate at least' compares a's solve rate with a number"),
    ({"op": ">", "margin": 0.1}, "margin is for op = 'as many' only"),
    ({"op": "more", "stat": "mean"}, "op 'more' is for stat = 'solved'; stat = 'mean' takes "
                                     ">=, >, <=, <"),
    ({"op": "more", "stat": "logrank"}, "stat = 'logrank' takes >=, >, <=, <, ~"),
    ({"op": "~", "value": 0.5, "b": None}, "op '~' (no difference detected) compares two groups"),
])
def test_bad_claims_give_one_line(claim, needle):
    a, b = group("a", 3, 3), group("b", 0, 3)
    spec = {"claim": "c", "stat": "solved", "a": {"model.name": "a"},
            "b": {"model.name": "b"}, **claim}
    if spec.get("b") is None:
        del spec["b"]
    res = check_expectations([a, b], [spec])[0]
    assert res["verdict"] == "fail" and res["detail"].startswith("cannot check: ")
    assert needle in res["detail"] and "\n" not in res["detail"]
    assert res["tests"] is None


def test_sweep_refuses_a_claim_that_could_never_be_checked(tmp_path):
    """Before any run and before its claims are registered: one line, exit 2, nothing written."""
    toml = tmp_path / "bad.toml"
    toml.write_text('name = "bad"\n[model]\nname = "mamba"\nd_model = 16\n'
                    '[train]\nsteps = 2\n[task]\nlevels = [[3, 3]]\nvalues = 4\n'
                    '[grid]\n"train.seed" = [0, 1]\n'
                    '[[report.expect]]\nclaim = "as many"\nstat = "solved"\n'
                    'a = { "train.seed" = 0 }\nb = { "train.seed" = 1 }\nop = "as many"\n')
    line = fails_with(["sweep", toml, "--out", tmp_path / "runs"], "op 'as many' needs margin")
    assert line.startswith("error: [[report.expect]] 1 (as many): ")
    assert not (tmp_path / "runs").exists()


def test_three_way_reads_the_fisher_tests_of_both_directions():
    """place's three-way verdict still names both one-sided p values (its report prints them)."""
    a, b = group("a", 10, 10), group("b", 2, 10)
    v = three_way([a, b], {"claim": "x", "a": {"model.name": "a"}, "b": {"model.name": "b"}})
    p_more, p_less = (stats.fisher(a.solved, b.solved, alt) for alt in ("greater", "less"))
    assert v["verdict"] == "more" and v["final"]
    assert v["detail"] == (f"a 10/10 [0.72, 1.00] vs b 2/10 [0.06, 0.51]; more: Fisher "
                           f"one-sided p = {p_more:.3g} < 0.05; fewer: Fisher one-sided p = "
                           f"{p_less:.3g} >= 0.05")


# ---- held-out overlap in the report ------------------------------------------------------------

@pytest.fixture
def overlapping(tmp_path, tiny):
    """Two models, two seeds each; mamba's held-out rows were partly trained on (one seed 34% /
    29%), the transformer's 0.2% at most; no run of a third folder records it."""
    tiny["grid"] = {"model.name": ["mamba", "transformer"], "train.seed": [0, 1]}
    exp = expand(tiny, "x")
    seen = {("mamba", 0): (0.0, 0.005), ("mamba", 1): (0.34, 0.29),
            ("transformer", 0): (0.0, 0.002), ("transformer", 1): (0.0, 0.0)}
    root = tmp_path / "runs"
    for run in exp.runs:
        folder = root / run.name
        folder.mkdir(parents=True)
        ck.write_json(folder / ck.CONFIG, run.config.to_json())
        valid, test = seen[(run.config.model.name, run.config.train.seed)]
        ck.write_json(folder / ck.SUMMARY, {
            "valid": {"acc": 0.5}, "test": {"acc": 0.5}, "steps": 6,
            "held_out_in_training": {"train_rows_checked": 24, "valid": valid, "test": test}})
    return root


def test_report_shows_each_groups_overlap_and_warns_above_one_percent(overlapping, tmp_path,
                                                                      monkeypatch):
    rep = build_report([overlapping])
    got = {g.label: g.overlap for g in rep["groups"]}
    assert got["mamba"] == {"valid": 0.34, "test": 0.29, "rows": 24}  # the largest run's
    assert got["transformer"] == {"valid": 0.0, "test": 0.002, "rows": 24}
    write_report(rep, tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| held-out overlap (valid / test) |" in md
    assert "| 34.0% / 29.0% |" in md and "| 0.0% / 0.2% |" in md
    assert ("**warning: held-out overlap mamba: valid 34.0%, test 29.0% also occur in "
            "training (first 24 training samples checked)**") in md
    assert "warning: held-out overlap transformer" not in md  # 0.2% is below 1%
    rows = (tmp_path / "out" / "report.csv").read_text().splitlines()
    head = rows[0].split(",")
    by = {r.split(",")[head.index("label")]: r.split(",") for r in rows[1:]}
    assert by["mamba"][head.index("overlap_valid")] == "0.34"
    assert by["mamba"][head.index("overlap_test")] == "0.29"
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {g["label"]: g["held_out_in_training"]["valid"] for g in data["groups"]} == {
        "mamba": 0.34, "transformer": 0.0}
    monkeypatch.setattr(shell.console, "width", 100)  # piped: 100 columns
    r = CliRunner().invoke(app, ["report", str(overlapping), "--no-plots", "--out",
                                 str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    warn = next(i for i, ln in enumerate(lines) if ln.startswith("warning: held-out overlap"))
    table = next(i for i, ln in enumerate(lines) if "at the best lr per group" in ln)
    assert warn < table  # above the tables
    # wrapped at 100 columns: the line, then how many training samples the check read
    assert " ".join(" ".join(lines[warn:warn + 2]).split()) == (
        "warning: held-out overlap mamba: valid 34.0%, test 29.0% also occur in training (first "
        "24 training samples checked)")
    # the header may wrap at its spaces (a table never splits a token, commands/fit.py)
    assert "held-out overlap" in r.stdout and "valid / test" in r.stdout
    assert "34.0% / 29.0%" in r.stdout
    assert max(len(ln) for ln in lines) <= 100


def test_report_without_overlap_records_says_not_recorded(overlapping, tmp_path):
    for summary in overlapping.glob("*/summary.json"):
        data = json.loads(summary.read_text())
        del data["held_out_in_training"]
        summary.write_text(json.dumps(data))
    rep = build_report([overlapping])
    assert all(g.overlap is None for g in rep["groups"])
    write_report(rep, tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Held-out overlap: not recorded by these runs." in md
    assert "held-out overlap (valid / test)" not in md and "warning" not in md
    r = CliRunner().invoke(app, ["report", str(overlapping), "--no-plots", "--out",
                                 str(tmp_path / "cli")])
    assert r.exit_code == 0 and "held-out overlap: not recorded by these runs" in r.stdout
