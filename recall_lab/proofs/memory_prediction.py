"""Finite-d extreme-value predictions of the correlation-matrix memory's top-1 thresholds.

The model (as in `linear_memory`): keys x_i and targets y_i i.i.d. N(0, I_d), i = 1..n, the
memory W = sum_i y_i x_i^T, and query j scores target c by s_jc = y_c^T W x_j. Query j is
recalled top-1 when s_jj beats every s_jc, c != j. Two criteria:

- (a) **all pairs**: every one of the n queries is recalled; n_1/2(d) is the n at which this
  happens with probability 1/2;
- (b) **single query**: n_1/2(d) is the n at which a query is recalled with probability 1/2.

**Derivation.** Write A = |x_j|^2, B = |y_j|^2 and v = W x_j = A y_j + N with
N = sum_{i != j} y_i (x_i . x_j). Given the keys, N ~ N(0, S I_d) with S = sum_{i != j}
(x_i . x_j)^2 = A K, K ~ chi^2_{n-1} (each x_i . x_j / |x_j| is an independent N(0, 1)). Split
y_j . N = sqrt(B S) h and |N|^2 = S (h^2 + M) with h ~ N(0, 1) and M ~ chi^2_{d-1}; all of
A, B ~ chi^2_d, K, h and M are independent, and exactly

    target   T   = s_jj = B A + sqrt(B A K) h,
    |v|^2        = B A^2 + 2 A sqrt(B A K) h + A K (h^2 + M).

A distractor is s_jc = y_c . v_{-c} + |y_c|^2 (x_c . x_j), where v_{-c} is v without pair c's
term. Approximations, each stated:

1. v_{-c} is replaced by v (one of n terms), so y_c . v ~ N(0, |v|^2) given v;
2. |y_c|^2 (x_c . x_j) = R A^{1/2} g with R ~ chi^2_d and g ~ N(0, 1) independent of y_c . v
   (the y_c . v-direction's share of |y_c|^2, one of d terms, is ignored): given the query,
   s_jc ~ N(0, |v|^2 + R^2 A) mixed over R, with distribution function
   F(t) = E_R Phi(t / sqrt(|v|^2 + R^2 A));
3. given query j's own pair and v, its n - 1 distractors are independent (they share v and the
   query exactly, each other's pairs only through one term of v), so query j is recalled with
   probability F(T)^(n-1);
4. (a) only: failures of different queries are rare and independent (a Poisson count, clumping
   ignored): P(all n recalled) = exp(-n (1 - E[F(T)^(n-1)])).

So (b) solves E[F(T)^(n-1)] = 1/2 and (a) solves n (1 - E[F(T)^(n-1)]) = ln 2, for n treated as
a real number (K's degrees of freedom n - 1). The expectation is numerical: h on a 48-node
Gauss-Hermite rule; R = G^-1(Phi(z)) (G the chi^2_d distribution function) on a 16-node
Gauss-Hermite rule in z; (A, B, K, M) on 2^11 scrambled Sobol points mapped through their chi^2
quantile functions (a fixed seed: the prediction is a deterministic function of d). With 2^9 to
2^13 points or twice the nodes, n_1/2 at d = 16, 64, 256 moves by at most 0.6%. No parameter is
fitted to any measurement.

**Limits** (`limits()`, derived with sympy): for d -> infinity at d^2 = c n ln n the d^3 terms
vanish beside n d^2, so T ~ N(d^2, n d^2) and every distractor ~ N(0, n d^2). A single query
fails when its largest distractor (about sqrt(2 n d^2 ln n)) beats T ~ d^2: c = 2. All pairs: a
pair's margin T - s_jc ~ N(d^2, 2 n d^2) exceeds ~ n^2 comparisons' worth of luck,
d^4 / (4 n d^2) = 2 ln n: c = 8. The finite-d terms (B A^2, R^2 A, the chi^2 spreads of
A, B, M) are of order d^3 against n d^2 ~ d^4 / (c ln n), so they vanish only like c ln n / d.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp
from scipy import optimize, special, stats
from scipy.stats import qmc

HERMITE_NODES = 48
CHI_NODES = 16
SOBOL_LOG2 = 11  # 2048 draws of (A, B, K, M)
CRITERIA = ("all_pairs", "single_query")


def limits() -> dict[str, float]:
    """The large-d constants c = d^2 / (n ln n), from the leading-order tail equations.

    Single query: the target ~ d^2 against the largest of n N(0, n d^2) distractors,
    exp(-d^4 / (2 n d^2)) = 1 / n. All pairs: a margin N(d^2, 2 n d^2) against n^2 comparisons,
    exp(-d^4 / (4 n d^2)) = 1 / n^2. With d^2 = c n ln n both become linear in c."""
    c, n, d = sp.symbols("c n d", positive=True)
    ln_n = sp.log(n)
    single = sp.Eq(-d**4 / (2 * n * d**2), -ln_n)
    pairs = sp.Eq(-d**4 / (4 * n * d**2), -2 * ln_n)
    out = {}
    for name, eq in (("single_query", single), ("all_pairs", pairs)):
        sol = sp.solve(eq.subs(d, sp.sqrt(c * n * ln_n)), c)
        out[name] = float(sol[0])
    return out


@lru_cache(maxsize=8)
def _rules(d: int) -> dict[str, np.ndarray]:
    """Quadrature nodes and weights that do not depend on n (cached per d)."""
    h, wh = special.roots_hermitenorm(HERMITE_NODES)
    wh = wh / wh.sum()
    z, wz = special.roots_hermitenorm(CHI_NODES)
    r = stats.chi2.isf(special.ndtr(-z), d)  # R = G^-1(Phi(z)), z ~ N(0, 1): R ~ chi^2_d
    sob = qmc.Sobol(4, scramble=True, seed=np.random.default_rng([d, 74])).random_base2(SOBOL_LOG2)
    return {"h": h, "wh": wh, "r": r, "wr": wz / wz.sum(), "u": sob,
            "a": stats.chi2.ppf(sob[:, 0], d), "b": stats.chi2.ppf(sob[:, 1], d),
            "m": stats.chi2.ppf(sob[:, 3], d - 1)}


def recall_probability(d: int, n: float) -> float:
    """E[F(T)^(n-1)]: the model's probability that one query is recalled top-1 (module
    docstring), for n pairs stored in dimension d."""
    q = _rules(d)
    k = stats.chi2.ppf(q["u"][:, 2], max(n - 1.0, 1e-9))
    a, b, m = q["a"][:, None], q["b"][:, None], q["m"][:, None]
    k = k[:, None]
    h = q["h"][None, :]
    root = np.sqrt(b * a * k)
    t = b * a + root * h  # [draws, hermite]
    v2 = b * a * a + 2 * a * root * h + a * k * (h * h + m)
    var = v2[..., None] + (q["r"] ** 2)[None, None, :] * a[..., None]  # [draws, hermite, r]
    z = t[..., None] / np.sqrt(var)
    tail = special.ndtr(-z) @ q["wr"]  # 1 - F(T)
    head = special.ndtr(z) @ q["wr"]  # F(T), accurate where the tail is not small
    log_f = np.where(tail < 0.5, np.log1p(-np.minimum(tail, 0.5)),
                     np.log(np.maximum(head, 1e-300)))
    p = np.exp((n - 1.0) * log_f) @ q["wh"]  # over h
    return float(p.mean())


def criterion_value(criterion: str, d: int, n: float) -> float:
    """The probability the criterion holds at n: one query recalled, or all n recalled."""
    p = recall_probability(d, n)
    if criterion == "single_query":
        return p
    if criterion == "all_pairs":
        return math.exp(-n * (1.0 - p))
    raise ValueError(f"unknown criterion {criterion!r}")


def n_half(criterion: str, d: int) -> float:
    """The predicted n_1/2(d): the n (a real number >= 2) at which the criterion holds with
    probability 1/2, by Brent's method on ln n."""
    def g(log_n: float) -> float:
        return criterion_value(criterion, d, math.exp(log_n)) - 0.5

    lo = math.log(2.0)
    if g(lo) < 0:
        return 2.0
    hi = lo
    while g(hi) > 0:
        lo, hi = hi, hi + math.log(2.0)
        if hi > math.log(1e9):
            raise ValueError(f"no n_1/2 below 1e9 at d = {d}")
    return math.exp(optimize.brentq(g, lo, hi, xtol=1e-4))


def constant(n: float, d: int) -> float:
    return d * d / (n * math.log(n))


def predictions(dims: list[int] | tuple[int, ...]) -> dict[str, Any]:
    """n_1/2(d) and c(d) = d^2 / (n_1/2 ln n_1/2) for both criteria at every d, and the limits."""
    out: dict[str, Any] = {"limits": limits()}
    for crit in CRITERIA:
        rows = []
        for d in dims:
            n = n_half(crit, d)
            rows.append({"d": d, "n_half": n, "c": constant(n, d)})
        out[crit] = rows
    return out
