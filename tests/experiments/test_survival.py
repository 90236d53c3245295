"""Steps to solve as time to event, unsolved runs right-censored at their last step: the
Kaplan-Meier curve, its log-log Greenwood band and median interval, the restricted mean and its
standard error, and the log-rank test, each against values worked out by hand and against a
second implementation (scipy.stats.ecdf / scipy.stats.logrank on CensoredData, lifelines'
numerical restricted mean); then the report's columns and the log-rank claim."""

import json
import math
import sys
import warnings

import pytest
from scipy import stats as ss
from typer.testing import CliRunner

from recall_lab import checkpoint as ck
from recall_lab.cli import app
from recall_lab.experiments import stats
from recall_lab.experiments.grid import expand
from recall_lab.experiments.report import build_report, write_report

Z = 1.959963984540054  # the 97.5% normal quantile

# six seeds: four solve (steps 200..500), two end unsolved at step 2500
T = [300, 200, 500, 2500, 2500, 400]
E = [True, True, True, False, False, True]


def test_kaplan_meier_against_the_product_limit_and_greenwood_by_hand():
    km = stats.kaplan_meier(T, E)
    # at risk 6, 5, 4, 3 at the four solves, one each: S = 5/6, 4/6, 3/6, 2/6
    assert km.times == (0.0, 200.0, 300.0, 400.0, 500.0, 2500.0)
    assert km.solved == pytest.approx([0, 1 / 6, 2 / 6, 3 / 6, 4 / 6, 4 / 6])
    assert (km.n, km.events) == (6, 4)
    # Greenwood: V(t) = sum d / (n (n - d)); log-log band S^exp(+-z sqrt(V) / log S)
    v, surv = 0.0, 1.0
    for n, t in zip((6, 5, 4, 3), (200, 300, 400, 500), strict=True):
        v += 1 / (n * (n - 1))
        surv *= (n - 1) / n
        c = Z * math.sqrt(v) / math.log(surv)
        band = sorted((surv ** math.exp(c), surv ** math.exp(-c)))
        i = km.times.index(t)
        assert (1 - km.hi[i], 1 - km.lo[i]) == pytest.approx(band), t
    # median: the first step at which fewer than half remain unsolved (S(400) = 1/2 is not)
    assert km.median == 500
    # its interval: where the band's edges fall below one half; the upper edge never does
    lower_s = [1 - h for h in km.hi]
    assert km.median_lo == next(t for t, s in zip(km.times, lower_s, strict=True) if s < 0.5)
    assert km.median_hi is None and km.median_text() == "500 [200, >2500]"


def test_kaplan_meier_against_scipy_ecdf_on_censored_data():
    km = stats.kaplan_meier(T, E)
    data = ss.CensoredData(uncensored=[t for t, e in zip(T, E, strict=True) if e],
                           right=[t for t, e in zip(T, E, strict=True) if not e])
    res = ss.ecdf(data)
    ci = res.sf.confidence_interval(method="log-log")
    for t, s, lo, hi in zip(res.sf.quantiles, res.sf.probabilities, ci.low.probabilities,
                            ci.high.probabilities, strict=True):
        i = km.times.index(float(t))
        assert 1 - km.solved[i] == pytest.approx(s)
        assert (1 - km.hi[i], 1 - km.lo[i]) == pytest.approx((lo, hi))


def test_restricted_mean_by_hand_against_lifelines_and_the_uncensored_identity():
    from lifelines import KaplanMeierFitter
    from lifelines.utils import restricted_mean_survival_time

    km = stats.kaplan_meier(T, E)
    # area under S on [0, 2500]: 200 * 1 + 100 * (5 + 4 + 3) / 6 + 2000 * 2 / 6
    area = 200 + 100 * 12 / 6 + 2000 * 2 / 6
    assert km.horizon == 2500 and km.rmst == pytest.approx(area)
    # SE: A_i = area from each solve to 2500; Var = sum A_i^2 d_i / (n_i (n_i - d_i))
    tail = {500: 2000 * 2 / 6}
    tail[400] = tail[500] + 100 * 3 / 6
    tail[300] = tail[400] + 100 * 4 / 6
    tail[200] = tail[300] + 100 * 5 / 6
    var = sum(tail[t] ** 2 / (n * (n - 1)) for t, n in ((200, 6), (300, 5), (400, 4), (500, 3)))
    assert km.rmst_se == pytest.approx(math.sqrt(var))
    assert (km.rmst_lo, km.rmst_hi) == pytest.approx((area - Z * math.sqrt(var),
                                                      area + Z * math.sqrt(var)))
    # lifelines integrates its fitted curve numerically: the same area
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = KaplanMeierFitter().fit(T, E)
        assert restricted_mean_survival_time(fitted, t=2500) == pytest.approx(area, rel=1e-6)
    # nothing censored: the restricted mean is the sample mean, its variance sum (x - m)^2 / n^2
    xs = [120.0, 340.0, 560.0, 780.0, 1000.0, 1500.0, 1900.0]
    km = stats.kaplan_meier(xs, [True] * len(xs))
    m = sum(xs) / len(xs)
    assert km.rmst == pytest.approx(m)
    assert km.rmst_se ** 2 == pytest.approx(sum((x - m) ** 2 for x in xs) / len(xs) ** 2)
    assert stats.kaplan_meier([], []) is None


def test_logrank_chi_square_by_hand_and_against_scipy():
    # a solves at 1 and 2; b solves at 3 and is censored at 4. At t = 1: 4 at risk (2 of a),
    # E_a = 1/2, V = 2*2*1*3 / (16*3) = 1/4; t = 2: 3 at risk (1 of a), E_a = 1/3,
    # V = 1*2*1*2 / (9*2) = 2/9; t = 3: none of a at risk. O - E = 2 - 5/6 = 7/6,
    # V = 17/36: chi2 = (49/36) / (17/36) = 49/17
    a, b = ([1, 2], [True, True]), ([3, 4], [True, False])
    lr = stats.logrank(a, b)
    assert lr.chi2 == pytest.approx(49 / 17)
    assert lr.o_minus_e == pytest.approx(7 / 6)
    assert lr.p_two == pytest.approx(ss.chi2.sf(49 / 17, 1))
    assert lr.p_sooner == pytest.approx(ss.norm.sf(math.sqrt(49 / 17)))
    cases = [(a, b), ((T, E), ([500, 2500, 2500, 700, 2500, 2500], [1, 0, 0, 1, 0, 0])),
             (([100, 200, 2500], [1, 1, 0]), ([150, 250, 300, 2500], [1, 1, 1, 0]))]
    for x, y in cases:
        lr = stats.logrank(x, y)

        def cens(d):
            return ss.CensoredData(uncensored=[t for t, e in zip(*d, strict=True) if e],
                                   right=[t for t, e in zip(*d, strict=True) if not e])

        # scipy's "greater": x's solve (failure) rate is greater, i.e. x solves sooner
        sooner = ss.logrank(cens(x), cens(y), alternative="greater")
        later = ss.logrank(cens(x), cens(y), alternative="less")
        assert lr.chi2 == pytest.approx(float(sooner.statistic) ** 2)
        assert lr.p_sooner == pytest.approx(float(sooner.pvalue))
        assert lr.p_later == pytest.approx(float(later.pvalue))
        assert lr.p_two == pytest.approx(float(ss.logrank(cens(x), cens(y)).pvalue))
    # nobody solved: nothing to tell apart
    none = stats.logrank(([5, 5], [False, False]), ([5], [False]))
    assert (none.chi2, none.p_sooner, none.p_later) == (0.0, 1.0, 1.0)


# ---- the report ---------------------------------------------------------------------------------

# per model, the step each of 6 seeds solves at (None: unsolved at its last step, 1000)
SOLVE = {"mamba+hax": [100, 200, 200, 300, None, 400],
         "mamba": [500, None, None, 700, None, None]}
LAST = 1000


@pytest.fixture
def race(tmp_path, tiny):
    tiny["grid"] = {"model.name": list(SOLVE), "train.seed": list(range(6))}
    tiny["report"] = {"solve_at": 0.95, "expect": [
        {"claim": "hax solves sooner", "stat": "logrank", "a": {"model.name": "mamba+hax"},
         "b": {"model.name": "mamba"}, "op": "<"},
        {"claim": "hax solves later", "stat": "logrank", "a": {"model.name": "mamba+hax"},
         "b": {"model.name": "mamba"}, "op": ">"},
        {"claim": "no difference", "stat": "logrank", "a": {"model.name": "mamba+hax"},
         "b": {"model.name": "mamba"}, "op": "~"},
        {"claim": "needs b", "stat": "logrank", "a": {"model.name": "mamba"}, "value": 1},
    ]}
    exp = expand(tiny, "race")
    root = tmp_path / "race"
    entries = []
    for run in exp.runs:
        step = SOLVE[run.config.model.name][run.config.train.seed]
        acc = 0.4 if step is None else 0.99
        folder = root / run.name
        folder.mkdir(parents=True)
        ck.write_json(folder / ck.CONFIG, run.config.to_json())
        curve = [{"step": s, "split": "valid",
                  "acc": 0.99 if step is not None and s >= step else 0.4}
                 for s in range(100, LAST + 1, 100)]
        (folder / ck.METRICS).write_text("".join(json.dumps(r) + "\n" for r in curve))
        ck.write_json(folder / ck.SUMMARY, {"steps": LAST, "stopped_at": LAST,
                                            "best_step": LAST, "valid": {"acc": acc},
                                            "test": {"acc": acc}})
        entries.append({"name": run.name, "status": "done", "config": run.config.to_json()})
    ck.write_json(root / "sweep.json", {"experiment": "race", "report": exp.report,
                                        "runs": entries})
    return root


def test_report_censors_unsolved_seeds_and_checks_logrank_claims(race, tmp_path):
    rep = build_report([race])
    g = {g.label: g for g in rep["groups"]}
    hax, base = g["mamba+hax"], g["mamba"]
    assert hax.durations == [100, 200, 200, 300, LAST, 400]
    assert hax.events == [True, True, True, True, False, True]
    assert base.durations == [500, LAST, LAST, 700, LAST, LAST]
    # the report's estimates are the estimator's on those times (tested above by hand)
    assert hax.survival == stats.kaplan_meier(hax.durations, hax.events)
    # 4 of 6 unsolved: the base's median is not reached
    assert base.survival.median is None and base.survival.median_text().startswith(">1000 [")
    lr = stats.logrank((hax.durations, hax.events), (base.durations, base.events))
    assert lr.p_sooner < 0.05  # the fixture is built so that the claim holds
    checks = {c["claim"]: c for c in rep["checks"]}
    assert checks["hax solves sooner"]["verdict"] == "pass"
    assert (f"required: a solves sooner, one-sided p < 0.05; found: p = {lr.p_sooner:.3g}"
            in checks["hax solves sooner"]["detail"])
    # hax: S = 5/6 after 100, 3/6 after 200 (not below one half), 2/6 after 300: median 300
    assert "mamba+hax KM median 300 [" in checks["hax solves sooner"]["detail"]
    assert checks["hax solves later"]["verdict"] == "fail"
    assert checks["no difference"]["verdict"] == "fail"
    assert f"two-sided p >= 0.05; found: p = {lr.p_two:.3g}" in checks["no difference"]["detail"]
    assert lr.p_two < 0.05
    assert checks["needs b"]["detail"].startswith("cannot check: stat = 'logrank' compares")
    # files: the KM columns in the table, the numbers in the JSON and CSV
    write_report(rep, tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"| {hax.survival.median_text()} | {hax.survival.rmst_text()} |" in md
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    sv = {x["label"]: x["survival"] for x in data["groups"]}
    assert sv["mamba"]["median"] is None and sv["mamba+hax"]["median"] == hax.survival.median
    assert sv["mamba+hax"]["rmst"] == pytest.approx(hax.survival.rmst)


def test_check_prints_km_medians_and_logrank_claims(race):
    r = CliRunner().invoke(app, ["report", str(race), "--check", "--no-plots"])
    assert r.exit_code == 1, r.output  # three of the four claims fail
    rep = build_report([race])
    for g in rep["groups"]:
        assert g.survival.median_text() in r.stdout
    assert "KM median steps" in r.stdout
    assert "PASS hax solves sooner" in r.stdout and "log-rank chi2 =" in r.stdout
    assert "FAIL hax solves later" in r.stdout


def test_without_lifelines_the_report_leaves_km_empty_and_says_why(race, monkeypatch):
    """The GPU machine's environment lacks lifelines: the report still builds, its KM columns
    empty, and a log-rank claim cannot be checked, with the reason in one line."""
    monkeypatch.setitem(sys.modules, "lifelines", None)  # import lifelines -> ImportError
    rep = build_report([race])
    assert {r["km_text"] for r in rep["rows"]} == {"-"}
    assert all(g.survival is None for g in rep["groups"])
    check = rep["checks"][0]
    assert check["verdict"] == "fail"
    assert check["detail"] == ("cannot check: survival statistics need lifelines: pip install "
                               "'lifelines>=0.27'")
