"""The linear-memory statement: its memories against hand values, its threshold estimator on
step functions, the statement in miniature and its refusals."""

import math

import numpy as np
import pytest
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.generators.errors import RecallLabError
from recall_lab.proofs import linear_memory as lm
from recall_lab.proofs.registry import prepare, resolve


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


def test_constant_and_limit_fit():
    assert lm.constant(100.0, 30) == pytest.approx(900 / (100 * math.log(100)))
    ds = [32, 64, 128, 256]
    c_inf, a = lm.fit_limit(ds, [2.0 + 3.0 / math.log(d) for d in ds])
    assert c_inf == pytest.approx(2.0) and a == pytest.approx(3.0)


def test_statement_in_miniature():
    ev = lm.check(dims=[8, 16], seeds=3)
    assert ev.passed and ev.name == "linear_memory"
    top = {t["d"]: t for t in ev.details["top1"]}
    assert set(top) == {8, 16}
    # the threshold grows with d, and every seed's capacity is a real retrieval
    assert top[16]["n_star"] > top[8]["n_star"] >= 2
    lp = ev.details["lp_top1"][0]
    assert lp["d"] == 8 and lp["n_star"] >= top[8]["n_star"]  # the best map beats the CMM
    assert ev.details["rule"]["verdict"] == "not decided at these d"  # no d >= 32 measured


def test_linear_memory_is_on_request_only():
    assert "linear_memory" not in resolve(None)
    assert resolve(["linear_memory"]) == ["linear_memory"]


@pytest.mark.parametrize(("args", "message"), [
    (["--d", "2"], "--d must lie in"),
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
