"""Corollary 3.1, Remark 3.1 and Lemma B.1: a fixed-state SSM cannot hold more than |U| tables.

Two kinds of evidence:

- `symbolic()` derives, with sympy, the error bound ``Pr[err] >= 1 - |U|/|V|^n`` from Eq. 25-28
  and the state-size condition of Remark 3.1, ``|U| = 2^b >= |V|^n  <=>  b >= n log2|V|``.
- `exhaustive_success()` takes an arbitrary finite-state update rule ``u: U x tokens -> U`` on a
  tiny multi-query joint recall instance, runs it over the information component of *every* one of
  the ``|V|^n`` tables (fixed block order, as in Lemma B.1), and measures the exact success rate of
  (a) the best possible readout ``G: U -> V^n`` of the final state (Lemma B.1: every fixed-state
  model's answers are some ``G(U_m)``), and (b) the model's own readout ``r`` run through a fixed
  inquiry permutation. Both must be ``<= |U|/|V|^n``. `register_rule` is a rule with ``|V|^j``
  states that keeps the last ``j`` values: it attains the bound with equality for every ``j``.

The inquiry here carries no teacher-forced values (the paper's Fig. 2 layout, ``B a ? b ?``): with
teacher forcing the state after the information component is no longer the only carrier of the
table and Lemma B.1 does not apply as stated.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import sympy as sp

from recall_lab.generators.errors import RecallLabError
from recall_lab.proofs.evidence import Evidence

# (final_states [N], tables [N, n]) -> predicted tables [N, n]. Honest readouts use states only.
Readout = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class TinyRecall:
    """A tiny multi-query joint recall instance with a fixed information-component order.

    Token alphabet: values ``0..V-1``, then contexts, then keys, then SEP. ``n_contexts = 1`` is
    multi-query associative recall.
    """

    n_contexts: int
    n_keys: int
    n_values: int

    def __post_init__(self) -> None:
        if min(self.n_contexts, self.n_keys) < 1 or self.n_values < 2:
            raise RecallLabError("a tiny recall instance needs >= 1 context, >= 1 key, >= 2 values")
        if self.n_values**self.n > 2_000_000:
            raise RecallLabError(
                f"|V|^n = {self.n_values}^{self.n} tables is too many to enumerate")

    @property
    def n(self) -> int:
        return self.n_contexts * self.n_keys

    @property
    def n_tokens(self) -> int:
        return self.n_values + self.n_contexts + self.n_keys + 1

    @property
    def sep(self) -> int:
        return self.n_tokens - 1

    def context_token(self, c: int) -> int:
        return self.n_values + c

    def key_token(self, k: int) -> int:
        return self.n_values + self.n_contexts + k

    def all_tables(self) -> np.ndarray:
        """Every table, row-major entries (context-major), shape [|V|^n, n]."""
        grids = itertools.product(range(self.n_values), repeat=self.n)
        return np.array(list(grids), dtype=np.int64).reshape(-1, self.n)

    def information(self, tables: np.ndarray) -> np.ndarray:
        """Information component in the fixed order ``c0 k0 v k1 v .. c1 k0 v ..``, [N, m]."""
        cols: list[np.ndarray] = []
        n_rows = tables.shape[0]
        for c in range(self.n_contexts):
            cols.append(np.full(n_rows, self.context_token(c)))
            for k in range(self.n_keys):
                cols.append(np.full(n_rows, self.key_token(k)))
                cols.append(tables[:, c * self.n_keys + k])
        return np.stack(cols, axis=1).astype(np.int64)

    def inquiry(self, seed: int = 0) -> tuple[list[int], list[int | None]]:
        """A fixed inquiry permutation: tokens and, per token, the entry it asks (or None)."""
        rng = np.random.default_rng(seed)
        tokens: list[int] = [self.sep]
        asks: list[int | None] = [None]
        for c in rng.permutation(self.n_contexts):
            tokens.append(self.context_token(int(c)))
            asks.append(None)
            for k in rng.permutation(self.n_keys):
                tokens.append(self.key_token(int(k)))
                asks.append(int(c) * self.n_keys + int(k))
        return tokens, asks


def run_rule(rule: np.ndarray, tokens: np.ndarray, init: np.ndarray | None = None) -> np.ndarray:
    """States after every token: ``U_i = rule[U_{i-1}, x_i]``, vectorised over rows, [N, m]."""
    state = np.zeros(tokens.shape[0], dtype=np.int64) if init is None else init.copy()
    out = np.empty(tokens.shape, dtype=np.int64)
    for t in range(tokens.shape[1]):
        state = rule[state, tokens[:, t]]
        out[:, t] = state
    return out


def best_readout(final: np.ndarray, tables: np.ndarray) -> np.ndarray:
    """The best G: U -> V^n. Tables are equally likely, so G(u) may be any table reaching u."""
    _, first, inverse = np.unique(final, return_index=True, return_inverse=True)
    return tables[first[inverse.reshape(-1)]]


def ssm_readout(inst: TinyRecall, rule: np.ndarray, out_rule: np.ndarray, seed: int = 0) -> Readout:
    """The model's own answers: run ``rule`` on through a fixed inquiry, emit ``out_rule[U_i]``."""
    tokens, asks = inst.inquiry(seed)

    def readout(final: np.ndarray, tables: np.ndarray) -> np.ndarray:
        seq = np.broadcast_to(np.array(tokens, dtype=np.int64), (final.shape[0], len(tokens)))
        states = run_rule(rule, seq, init=final)
        pred = np.empty_like(tables)
        for t, entry in enumerate(asks):
            if entry is not None:
                pred[:, entry] = out_rule[states[:, t]]
        return pred

    return readout


def bound(n_states: int, n_values: int, n: int) -> float:
    """Corollary 3.1: the success rate of any fixed-state SSM is at most |U| / |V|^n.

    Exact integer arithmetic (a `Fraction`), rounded to a float once at the end: at the paper's
    scale |V|^n = 16^256 = 2^1024 is beyond the float range, so `float(|V|) ** n` overflowed.
    """
    return exact_ratio(int(n_states), int(n_values) ** int(n))


def exact_ratio(num: int, den: int) -> float:
    """min(1, num / den) for non-negative integers of any size, correctly rounded."""
    if num < 0 or den < 1:
        raise RecallLabError(f"a bound needs counts >= 0 and > 0, got {num} / {den}")
    return float(min(Fraction(1), Fraction(num, den)))


def exhaustive_success(
    inst: TinyRecall, rule: np.ndarray, readout: Readout | None = None
) -> dict[str, Any]:
    """Exact success rate over all |V|^n tables of `readout` (default: the best G) on `rule`."""
    rule = np.asarray(rule, dtype=np.int64)
    if rule.ndim != 2 or rule.shape[1] != inst.n_tokens:
        raise RecallLabError(f"update rule must have shape [|U|, {inst.n_tokens}]")
    if rule.min() < 0 or rule.max() >= rule.shape[0]:
        raise RecallLabError("update rule maps outside its state set")
    tables = inst.all_tables()
    final = run_rule(rule, inst.information(tables))[:, -1]
    pred = (readout or best_readout)(final, tables)
    success = float(np.mean(np.all(pred == tables, axis=1)))
    limit = bound(rule.shape[0], inst.n_values, inst.n)
    return {
        "states": int(rule.shape[0]),
        "tables": int(tables.shape[0]),
        "reached_states": int(np.unique(final).size),
        "success": success,
        "bound": limit,
        "within_bound": success <= limit + 1e-12,
    }


def register_rule(inst: TinyRecall, j: int) -> np.ndarray:
    """A rule with |V|^j states that keeps the last j values seen (a base-|V| shift register)."""
    if not 0 <= j <= inst.n:
        raise RecallLabError(f"register length must be in [0, {inst.n}]")
    n_states = inst.n_values**j
    rule = np.tile(np.arange(n_states, dtype=np.int64)[:, None], (1, inst.n_tokens))
    for v in range(inst.n_values):
        rule[:, v] = (np.arange(n_states) * inst.n_values + v) % n_states
    return rule


def register_readout(inst: TinyRecall, j: int) -> Readout:
    """Decode the register: the last j entries exactly, the rest guessed as value 0."""

    def readout(final: np.ndarray, tables: np.ndarray) -> np.ndarray:
        pred = np.zeros_like(tables)
        state = final.copy()
        for entry in range(inst.n - 1, inst.n - 1 - j, -1):
            pred[:, entry] = state % inst.n_values
            state //= inst.n_values
        return pred

    return readout


def symbolic() -> dict[str, Any]:
    """Derive Cor. 3.1 and Remark 3.1 with sympy and return the derived expressions and checks."""
    n_states, n_values, n, b = sp.symbols("U V n b", positive=True)
    success = n_states / n_values**n  # Eq. 28: each reachable state can be right on one table
    err = sp.simplify(1 - success)
    # Pr[err] = 0 needs success >= 1, i.e. 2^b >= V^n; log is monotone on positives.
    condition = sp.Ge(
        sp.expand_log(sp.log(2**b), force=True), sp.expand_log(sp.log(n_values**n), force=True)
    )
    b_min_set = sp.solve(condition, b)
    b_min = n * sp.log(n_values) / sp.log(2)
    at_threshold = sp.simplify(err.subs(n_states, 2**b).subs(b, b_min))
    one_bit_short = sp.simplify(err.subs(n_states, 2**b).subs(b, b_min - 1))
    growth = sp.limit(b_min / n, n, sp.oo)
    checks = {
        "solution_is_b_ge_nlog2V": sp.simplify(b_min_set.rhs - b_min) == 0
        if isinstance(b_min_set, sp.Rel) else False,
        "error_zero_at_threshold": at_threshold == 0,
        "error_half_one_bit_short": sp.simplify(one_bit_short - sp.Rational(1, 2)) == 0,
        "b_min_linear_in_n": sp.simplify(growth - sp.log(n_values) / sp.log(2)) == 0,
    }
    return {
        "error_bound": str(sp.Ge(sp.Symbol("Pr_err"), err)),
        "zero_error_condition": str(b_min_set),
        "b_min": str(b_min),
        "checks": {k: bool(v) for k, v in checks.items()},
        "ok": all(bool(v) for v in checks.values()),
    }


def random_rule(rng: np.random.Generator, n_states: int, n_tokens: int) -> np.ndarray:
    return rng.integers(0, n_states, size=(n_states, n_tokens), dtype=np.int64)


def check(scale: str = "small", seed: int = 0) -> Evidence:
    """Cor. 3.1 / Lemma B.1: symbolic derivation plus exhaustive tiny instances."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    sym = symbolic()
    instances = [TinyRecall(1, 3, 2), TinyRecall(2, 2, 2), TinyRecall(2, 2, 3), TinyRecall(2, 3, 2)]
    n_rules = 40 if scale == "small" else 400
    worst_ratio = 0.0
    worst_model_ratio = 0.0
    violations = 0
    rows = []
    for inst in instances:
        for _ in range(n_rules):
            n_states = int(rng.integers(1, 2 * inst.n_values**inst.n))
            rule = random_rule(rng, n_states, inst.n_tokens)
            out_rule = rng.integers(0, inst.n_values, size=n_states)
            best = exhaustive_success(inst, rule)
            own = exhaustive_success(inst, rule, ssm_readout(inst, rule, out_rule))
            violations += (not best["within_bound"]) + (not own["within_bound"])
            worst_ratio = max(worst_ratio, best["success"] / best["bound"])
            worst_model_ratio = max(worst_model_ratio, own["success"] / own["bound"])
        # The bound is tight: a j-value register has |V|^j states and exactly |V|^j / |V|^n success.
        attained = []
        for j in range(inst.n + 1):
            res = exhaustive_success(inst, register_rule(inst, j), register_readout(inst, j))
            attained.append(res["success"] == res["bound"])
        rows.append({"n_c": inst.n_contexts, "n_k": inst.n_keys, "V": inst.n_values,
                     "register_attains_bound_for_all_j": all(attained)})
    tight = all(r["register_attains_bound_for_all_j"] for r in rows)
    passed = sym["ok"] and violations == 0 and tight
    n_checked = n_rules * len(instances)
    return Evidence(
        name="capacity",
        statement="Cor. 3.1 / Rem. 3.1 / Lemma B.1: Pr[err] >= 1 - |U|/|V|^n, b >= n log|V|",
        checked=(f"sympy derivation; {n_checked} random update rules x all |V|^n tables on "
                 f"{len(instances)} tiny MQJR instances; register rule attains the bound"),
        measured=(f"max success/bound: best G {worst_ratio:.3f}, own readout "
                  f"{worst_model_ratio:.3f}; violations {violations}; bound attained: {tight}"),
        passed=passed,
        details={"symbolic": sym, "rules_checked": n_checked, "violations": violations,
                 "max_success_over_bound_best_readout": worst_ratio,
                 "max_success_over_bound_own_readout": worst_model_ratio, "instances": rows},
        seconds=time.perf_counter() - start,
    )
