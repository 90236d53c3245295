"""Cor. 3.1 / Lemma B.1: exact success of arbitrary finite-state rules never beats |U|/|V|^n."""

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.proofs.capacity import (
    TinyRecall,
    bound,
    check,
    exhaustive_success,
    register_readout,
    register_rule,
    ssm_readout,
    symbolic,
)

INSTANCES = [TinyRecall(1, 2, 2), TinyRecall(2, 2, 2), TinyRecall(1, 3, 3), TinyRecall(2, 1, 3)]


@st.composite
def rules(draw):
    inst = draw(st.sampled_from(INSTANCES))
    n_states = draw(st.integers(1, 12))
    rule = np.array(draw(st.lists(st.integers(0, n_states - 1),
                                  min_size=n_states * inst.n_tokens,
                                  max_size=n_states * inst.n_tokens))).reshape(n_states, -1)
    out_rule = np.array(draw(st.lists(st.integers(0, inst.n_values - 1),
                                      min_size=n_states, max_size=n_states)))
    return inst, rule, out_rule


def _reference_reached(inst, rule):
    """Loop over every table and token: the number of distinct final states."""
    finals = set()
    for table in itertools.product(range(inst.n_values), repeat=inst.n):
        state = 0
        for tok in inst.information(np.array([table]))[0]:
            state = rule[state, tok]
        finals.add(int(state))
    return len(finals)


@given(rules())
def test_best_readout_never_beats_bound(case):
    inst, rule, out_rule = case
    best = exhaustive_success(inst, rule)
    assert best["success"] <= bound(rule.shape[0], inst.n_values, inst.n) + 1e-12
    # The best G is right on exactly one table per reachable state (checked by a plain loop).
    assert best["success"] * inst.n_values**inst.n == _reference_reached(inst, rule)
    own = exhaustive_success(inst, rule, ssm_readout(inst, rule, out_rule))
    assert own["within_bound"]
    assert own["success"] <= best["success"] + 1e-12  # the model's readout is one particular G


def test_register_attains_bound_for_every_length():
    inst = TinyRecall(2, 2, 3)
    for j in range(inst.n + 1):
        res = exhaustive_success(inst, register_rule(inst, j), register_readout(inst, j))
        assert res["success"] == res["bound"] == 3**j / 3**inst.n


def test_readout_that_peeks_at_the_table_is_flagged():
    """A readout that is not a function of the final state (not a fixed-state SSM) beats the
    bound, and the check reports the violation."""
    inst = TinyRecall(2, 2, 2)
    res = exhaustive_success(inst, register_rule(inst, 1), lambda final, tables: tables.copy())
    assert res["success"] == 1.0
    assert res["bound"] == 2 / 16
    assert not res["within_bound"]


def test_symbolic_derivation():
    sym = symbolic()
    assert sym["zero_error_condition"] == "b >= n*log(V)/log(2)"
    assert all(sym["checks"].values())


def test_check_small_passes_with_numbers():
    ev = check("small")
    assert ev.passed
    assert ev.details["violations"] == 0
    assert 0 < ev.details["max_success_over_bound_best_readout"] <= 1.0
    assert ev.details["rules_checked"] == 160


def test_bound_at_paper_scale():
    """n = 256 entries over |V| = 16 values: |V|^n = 2^1024 overflows a float. With |U| = 2^b
    states the bound is 2^(b - 1024), derived here by exponent arithmetic (math.ldexp)."""
    import math

    assert bound(2**1023, 16, 256) == 0.5
    assert bound(2**1024, 16, 256) == 1.0
    for b in (0, 1, 500, 1000, 1022, 1023, 1024, 1025, 2048):
        assert bound(2**b, 16, 256) == math.ldexp(1.0, min(b - 1024, 0))
    # beyond the float range on both sides, still correctly rounded: 1 / 2^1100 underflows to 0
    assert bound(1, 2, 1100) == 0.0
    assert bound(3, 2**600, 2) == math.ldexp(3.0, -1200) == 0.0
