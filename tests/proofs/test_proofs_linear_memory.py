"""The linear-memory statement: its memories against hand values, its estimators on known
thresholds, the finite-d predictions against simulation, the optimal memory against the plain
LP, the statement in miniature, its output and its refusals."""

import math

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.generators.errors import RecallLabError
from recall_lab.proofs import linear_memory as lm
from recall_lab.proofs import memory_prediction as mp
from recall_lab.proofs import optimal_memory as om
from recall_lab.proofs import thresholds as th
from recall_lab.proofs.evidence import Evidence
from recall_lab.proofs.registry import prepare, resolve
from recall_lab.proofs.thresholds import PairStream


def test_correlation_memory_against_hand_values():
    # W = y1 x1^T + y2 x2^T = [[2, 0], [1, 1]] for x1 = (2, 0), x2 = (1, 1), y1 = e1, y2 = e2
    x = np.array([[2.0, 0.0], [1.0, 1.0]])
    y = np.eye(2)
    s = lm.correlation_scores(x, y, slice(0, 2))
    # query x1: W x1 = (4, 2); query x2: W x2 = (2, 2): its target ties its distractor
    assert np.array_equal(s, np.array([[4.0, 2.0], [2.0, 2.0]]))
    assert not lm.top1_all(x, y)  # a tie is not a retrieval
    assert lm.top1_all(x[:1], y[:1])
    assert lm.target_ranks(x, y).tolist() == [0, 0]  # nothing scores strictly above
    assert lm.list_size(100) == 5 and lm.list_size(3) == 1


def test_lp_finds_a_memory_where_the_correlation_matrix_fails():
    # the pairs above: some W retrieves both (e.g. W = [[1, -1], [0, 2]]: scores (2, 0), (0, 2))
    x = np.array([[2.0, 0.0], [1.0, 1.0]])
    assert lm.lp_top1_feasible(x, np.eye(2))
    # two equal keys with different targets: no linear map separates them
    assert not lm.lp_top1_feasible(np.array([[1.0, 0.0], [1.0, 0.0]]), np.eye(2))


@pytest.mark.parametrize("threshold", [1, 2, 7, 64, 1000])
@pytest.mark.parametrize("start", [2, 5, 300])
def test_search_recovers_a_step_exactly(threshold, start):
    calls = []

    def passes(n):
        calls.append(n)
        return n <= threshold

    found, censored = lm.largest_passing(passes, start, 5000)
    assert (found, censored) == (threshold, False)
    assert len(calls) <= 2 * math.log2(5000) + 2
    assert lm.largest_passing(lambda n: True, 3, 40) == (40, True)


def test_synthetic_step_function_check():
    res = lm.synthetic_check(seed=3)
    assert res["exact"] and res["median"] == res["true_median"] == 137
    assert res["lo"] <= 137 <= res["hi"] and res["ok"]


def test_constant():
    assert lm.constant(100.0, 30) == pytest.approx(900 / (100 * math.log(100)))


def test_probit_fit_recovers_a_known_curve():
    x = np.log(np.arange(50, 200, 5, dtype=float))
    alpha, beta = 30.0, -6.0  # n_1/2 = exp(5)
    m = np.full(len(x), 1e6)
    k = m * stats.norm.cdf(alpha + beta * x)
    a, b = th.probit_fit(x, k[None, :], m[None, :])
    assert a[0] == pytest.approx(alpha, rel=1e-4) and b[0] == pytest.approx(beta, rel=1e-4)
    assert th.n_half_of(a, b)[0] == pytest.approx(math.exp(5), rel=1e-4)
    assert lm.probit_self_test(seed=0)["ok"]


def test_first_failure_and_last_success_see_a_regained_recall():
    grid = np.array([10, 11, 12, 13, 14])
    succ = np.array([[1, 0, 1, 1, 0],   # lost at 11, regained at 12-13
                     [1, 1, 1, 0, 0],
                     [0, 0, 0, 0, 0]])  # fails everywhere: last success censored below
    t = th.ProbitThreshold("all_pairs", 8, grid, succ, np.ones(5, dtype=int), 12.0, 11.0,
                           13.0, -5.0, 0.0)
    assert t.first_failure().tolist() == [11, 13, 10]
    assert t.last_success().tolist() == [13, 12, 9]
    summary = t.summary(np.random.default_rng(0))
    assert summary["lost_and_regained"] == 1
    assert summary["last_success"]["censored"] == 1


def test_limits_are_8_and_2():
    assert mp.limits() == {"single_query": pytest.approx(2.0), "all_pairs": pytest.approx(8.0)}


def test_predictions_against_simulation_at_d_32():
    # the finite-d predictions against 40 seeds of the real memory: each within 5% of the
    # measured 95% interval (the decision rule's "supported" tolerance)
    rng = np.random.default_rng(5)
    for crit in mp.CRITERIA:
        measured = th.measure(crit, 32, 40, 0, 2 * 32 * 32, rng, resamples=400).summary(rng)
        pred = mp.n_half(crit, 32)
        assert lm.gap(pred, measured) <= 0.05, (crit, pred, measured["n_half"])
    # the recall probability falls with n, and the two criteria are ordered
    assert mp.recall_probability(32, 50) > mp.recall_probability(32, 100)
    assert mp.n_half("all_pairs", 32) < mp.n_half("single_query", 32)


def test_decision_rules():
    pred = [{"d": 64, "n_half": 100.0}, {"d": 128, "n_half": 400.0}]
    row = [{"d": 64, "n_half": 100.0, "n_half_lo": 95.0, "n_half_hi": 105.0},
           {"d": 128, "n_half": 380.0, "n_half_lo": 370.0, "n_half_hi": 390.0}]
    got = lm.rule(row, pred)  # 128: (400 - 390) / 380 = 0.026
    assert got["verdict"] == "supported" and got["gaps"][64] == 0.0
    row[1].update(n_half_lo=330.0, n_half_hi=350.0)
    assert lm.rule(row, pred)["verdict"] == "contradicted"  # 50 / 380 > 0.10
    row[1].update(n_half_lo=360.0, n_half_hi=370.0)  # 30 / 380 = 0.079
    assert lm.rule(row, pred)["verdict"] == "not decided"
    assert lm.rule(row[:1], pred)["verdict"] == "not decided"  # one d >= 64 only
    opt = [{"d": 24, "n_star": 1, "c_lo": 1.9, "c_hi": 2.1},
           {"d": 32, "n_star": 1, "c_lo": 1.85, "c_hi": 2.15}]
    assert lm.optimal_rule(opt)["verdict"] == "supported"
    opt[1]["c_lo"] = 1.0
    assert lm.optimal_rule(opt)["verdict"] == "not decided at these d"


def test_optimal_memory_is_exact_against_the_plain_lp():
    log = om.LPLog()
    cap, censored = om.capacity(8, 0, 0, 10, 200, 60.0, log)
    x, y = PairStream(0, 8, om.SEED_OFFSET).first(cap + 1)
    assert not censored
    assert lm.lp_top1_feasible(x[:cap], y[:cap]) and not lm.lp_top1_feasible(x, y)
    for n in (cap - 3, cap + 3):
        assert om.feasible(*PairStream(0, 8, 3).first(n)) == \
            lm.lp_top1_feasible(*PairStream(0, 8, 3).first(n))


def test_time_limit_is_not_a_capacity():
    x, y = PairStream(0, 8, 3).first(30)  # infeasible: the first-order step cannot certify it
    with pytest.raises(om.NotFinished, match="not finished at d = 8"):
        om.feasible(x, y, time_limit=1e-9)
    res = CliRunner().invoke(app, ["prove", "linear_memory", "--d", "8", "--seeds", "2",
                                   "--lp-time-limit", "1e-9"])
    assert res.exit_code == 2, res.output
    assert "not finished at d = 8" in res.output and res.output.count("error:") == 1


def test_statement_in_miniature():
    ev = lm.check(dims=[8, 16], seeds=3)
    assert ev.passed and ev.name == "linear_memory" and ev.finding
    pairs = {t["d"]: t for t in ev.details["all_pairs"]}
    single = {t["d"]: t for t in ev.details["single_query"]}
    assert set(pairs) == {8, 16}
    # the thresholds grow with d, and one query is recalled further than all of them
    assert pairs[16]["n_half"] > pairs[8]["n_half"] >= 2
    assert single[8]["n_half"] > pairs[8]["n_half"]
    opt = ev.details["optimal"][0]
    assert opt["d"] == 8 and opt["n_star"] >= pairs[8]["n_half"]  # the best map beats the CMM
    assert ev.details["rules"]["all_pairs"]["verdict"] == "not decided"  # no d >= 64 measured
    # a list of one at d = 8 is a top-1 point
    assert ev.details["listwise_all"][0]["top1_point"]


def test_output_separates_the_self_test_from_the_finding(monkeypatch):
    def fake(scale="small", seed=0, **options):
        return Evidence(name="linear_memory", statement="s", checked="c", measured="m",
                        passed=True, finding="all pairs: contradicted")

    monkeypatch.setattr(lm, "check", fake)
    res = CliRunner().invoke(app, ["prove", "linear_memory"])
    assert res.exit_code == 0, res.output
    assert "self-test PASS" in res.output and "all pairs: contradicted" in res.output


def test_linear_memory_is_on_request_only():
    assert "linear_memory" not in resolve(None)
    assert resolve(["linear_memory"]) == ["linear_memory"]


@pytest.mark.parametrize(("args", "message"), [
    (["--d", "2"], "--d must be an integer in"),
    (["--d", "8.5"], "Invalid value for '--d'"),
    (["--seeds", "1"], "--seeds must be an integer >= 2"),
    (["--lp-time-limit", "0"], "--lp-time-limit must be a positive"),
    (["--n-max", "1"], "--n-max must lie in"),
    (["--scale", "huge"], "unknown scale"),
    (["--d", "1024", "--n-max", "10000000"], "GiB available"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    res = CliRunner().invoke(app, ["prove", "linear_memory", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert res.output.count("error:") == 1


def test_options_need_a_statement_that_takes_them():
    with pytest.raises(RecallLabError, match="--d apply only to linear_memory"):
        prepare(["cisa"], "small", dims=[8])


def test_flat_compares_ratios_and_has_nothing_to_say_without_thresholds():
    """`--d 512` alone measures no listwise threshold (they stop at LIST_MAX_D): `flat` of none
    is None, where it raised on an empty max() after the whole run."""
    def t(d, lo, hi):
        return lm.Threshold("list_pair", d, [], 0, (lo + hi) / 2, lo, hi, np.zeros(1))

    assert lm.flat([]) is None
    assert lm.flat([t(8, 60, 70), t(16, 250, 270)]) is True  # 0.94-1.09 and 0.98-1.05 meet
    assert lm.flat([t(8, 60, 62), t(16, 270, 280)]) is False  # 0.94-0.97 and 1.05-1.09 do not
    assert lm.LIST_MAX_D < 512
