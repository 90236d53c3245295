"""Statistics that fit recall runs, whose outcomes are bimodal (a run jumps to ~1.0 or stays on
the plateau): seeds solved out of seeds run with a Wilson interval, Fisher's exact test between
two solve rates, steps-to-solve per seed, survival curves, and the table-size frontier
(SCIENCE.md "Statistics that fit").

Intervals and tests come from scipy.stats; this module only decides what is counted:
- a run is *solved* when its test metric (the best checkpoint's) reaches `solve_at`
  (default 0.95; for a loss metric, when it falls to `solve_at` or below);
- its *steps to solve* are the first evaluation step whose held-out (valid) accuracy reaches the
  threshold, read from `metrics.jsonl`; a solved run whose valid curve never reached it (test
  above, valid just below) counts its best checkpoint's step;
- *samples to solve* = steps to solve x batch size (comparable across batch sizes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from recall_lab import checkpoint as ck

SOLVE_AT = 0.95
LEVEL = 0.05  # the significance level of claims on differences, unless a claim states its own


@dataclass(frozen=True)
class SolveRate:
    """k of n seeds solved, with a Wilson interval at `confidence`."""

    k: int
    n: int
    lo: float | None
    hi: float | None
    confidence: float = 0.95

    @property
    def rate(self) -> float | None:
        return self.k / self.n if self.n else None

    def text(self) -> str:
        if not self.n:
            return "0/0"
        return f"{self.k}/{self.n} [{self.lo:.2f}, {self.hi:.2f}]"


def wilson(k: int, n: int, confidence: float = 0.95) -> SolveRate:
    """Seeds solved with the Wilson score interval (scipy.stats.binomtest); n = 0 gives no
    interval."""
    if n == 0:
        return SolveRate(0, 0, None, None, confidence)
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return SolveRate(k, n, float(ci.low), float(ci.high), confidence)


def fisher(a: SolveRate, b: SolveRate, alternative: str = "greater") -> float:
    """p-value of Fisher's exact test that a's solve rate is greater than b's ("greater"), less
    ("less"), or different ("two-sided"), on the 2x2 table solved / unsolved."""
    table = [[a.k, a.n - a.k], [b.k, b.n - b.k]]
    return float(stats.fisher_exact(table, alternative=alternative).pvalue)


def is_solved(value: float | None, solve_at: float, lower_is_better: bool = False) -> bool:
    if value is None or math.isnan(value):
        return False
    return value <= solve_at if lower_is_better else value >= solve_at


def steps_to_solve(folder: Path, solve_at: float, fallback: int | None = None) -> int | None:
    """First evaluation step whose held-out accuracy reaches `solve_at` (metrics.jsonl), else
    `fallback` (the best checkpoint's step of a run solved on the test set)."""
    path = Path(folder) / ck.METRICS
    if path.is_file():
        for row in ck.read_lines(path):
            acc = row.get("acc")
            if (row.get("split") == "valid" and isinstance(acc, (int, float))
                    and isinstance(row.get("step"), int) and acc >= solve_at):
                return int(row["step"])
    return fallback


def quantiles(xs: list[float]) -> tuple[float, float, float] | None:
    """(25th, 50th, 75th) percentiles (numpy's linear interpolation), None if empty."""
    if not xs:
        return None
    q = np.percentile(np.asarray(xs, dtype=float), [25, 50, 75])
    return float(q[0]), float(q[1]), float(q[2])


def survival(solve_steps: list[int | None], grid: list[int]) -> list[float]:
    """Fraction of the seeds (None = never solved) solved by each point of `grid`."""
    n = len(solve_steps)
    if n == 0:
        return [0.0 for _ in grid]
    return [sum(1 for s in solve_steps if s is not None and s <= g) / n for g in grid]


def frontier(points: list[tuple[float, SolveRate]], at_least: float = 0.5) -> float | None:
    """The largest table size whose solve rate is >= `at_least`, among `points` (size, rate);
    None when no size reaches it."""
    ok = [size for size, r in points if r.n and r.k / r.n >= at_least]
    return max(ok) if ok else None


def fisher_power(p_a: float, p_b: float, n_a: int, n_b: int | None = None,
                 level: float = LEVEL, alternative: str = "greater") -> float:
    """Exact power of the one-sided Fisher test "a solves more than b" at `level` when the true
    solve rates are p_a and p_b with n_a and n_b seeds: the probability, summed over every
    outcome (k_a, k_b) of the two binomials, that the test rejects. Choose the number of seeds
    from this before the runs (SCIENCE.md: 0.9 vs 0.3 needs ~15 seeds per arm for 89%)."""
    n_b = n_a if n_b is None else n_b
    pa = stats.binom.pmf(np.arange(n_a + 1), n_a, p_a)
    pb = stats.binom.pmf(np.arange(n_b + 1), n_b, p_b)
    power = 0.0
    for ka in range(n_a + 1):
        for kb in range(n_b + 1):
            if pa[ka] * pb[kb] == 0.0:
                continue
            p = stats.fisher_exact([[ka, n_a - ka], [kb, n_b - kb]],
                                   alternative=alternative).pvalue
            if p < level:
                power += pa[ka] * pb[kb]
    return float(power)


def seeds_for_power(p_a: float, p_b: float, power: float = 0.8, level: float = LEVEL,
                    max_seeds: int = 200) -> int | None:
    """The fewest seeds per arm whose exact Fisher power reaches `power` (None beyond
    `max_seeds`)."""
    for n in range(2, max_seeds + 1):
        if fisher_power(p_a, p_b, n, level=level) >= power:
            return n
    return None
