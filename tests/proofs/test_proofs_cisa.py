"""Prop. 3.3 checks: a fixed window of k first-layer states holds at most |U|^k tables."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.proofs.capacity import TinyRecall, exhaustive_success, register_rule
from recall_lab.proofs.cisa import (
    block_ends,
    block_register_readout,
    bound,
    check,
    symbolic,
    value_positions,
    window_success,
)

INSTANCES = [TinyRecall(2, 2, 2), TinyRecall(3, 1, 2), TinyRecall(2, 2, 3)]


@st.composite
def models(draw):
    inst = draw(st.sampled_from(INSTANCES))
    m = inst.n_contexts * (1 + 2 * inst.n_keys)
    n_states = draw(st.integers(1, 6))
    rule = np.array(draw(st.lists(st.integers(0, n_states - 1),
                                  min_size=n_states * inst.n_tokens,
                                  max_size=n_states * inst.n_tokens))).reshape(n_states, -1)
    window = draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=3, unique=True))
    return inst, rule, sorted(window)


@given(models())
def test_fixed_window_never_beats_bound(case):
    inst, rule, window = case
    res = window_success(inst, rule, window)
    assert res["success"] <= bound(rule.shape[0], len(window), inst.n_values, inst.n) + 1e-12
    assert res["within_bound"] and res["context_independent"]


@given(models())
def test_window_on_last_state_is_the_capacity_case(case):
    inst, rule, _ = case
    m = inst.n_contexts * (1 + 2 * inst.n_keys)
    last = window_success(inst, rule, [m - 1])["success"]
    assert last == exhaustive_success(inst, rule)["success"]


def test_block_registers_attain_bound():
    inst = TinyRecall(3, 2, 2)
    res = window_success(inst, register_rule(inst, inst.n_keys), block_ends(inst),
                         block_register_readout(inst))
    assert res["success"] == 1.0
    assert res["bound"] == min(1.0, (2**2) ** 3 / 2**6)


def test_query_dependent_window_breaks_the_premise_and_is_flagged():
    """LSH-like access: each query reads the state at its own entry's value. It beats
    |U|^k/|V|^n with |U| = |V|, k = 1, so the bound check must report a violation."""
    inst = TinyRecall(2, 3, 2)
    where = value_positions(inst)
    res = window_success(inst, register_rule(inst, 1), lambda e: [where[e]],
                         lambda e, seen: seen[:, 0])
    assert res["success"] == 1.0
    assert res["bound"] == 2 / 2**6
    assert not res["within_bound"] and not res["context_independent"]


def test_symbolic_counting():
    sym = symbolic()
    assert sym["b_min"] == "n*log(V)/(k*log(2))"
    assert sym["total_work"] == "n**2*log(V)/log(2)"
    assert all(sym["checks"].values())


def test_check_small_passes():
    ev = check("small")
    assert ev.passed and ev.details["violations"] == 0
    assert ev.details["query_dependent_window"]["success"] == 1.0


def test_bound_at_paper_scale():
    """|V|^n = 16^256 = 2^1024 (beyond a float): k states of b bits give 2^(k b - 1024)."""
    import math

    assert bound(2**1023, 1, 16, 256) == 0.5
    assert bound(2**1024, 1, 16, 256) == 1.0
    for k, b in ((4, 255), (4, 256), (32, 31), (32, 32), (64, 16), (8, 100)):
        assert bound(2**b, k, 16, 256) == math.ldexp(1.0, min(k * b - 1024, 0))
