"""Statistics that fit recall runs, whose outcomes are bimodal (a run jumps to ~1.0 or stays on
the plateau): seeds solved out of seeds run with a Wilson interval, Fisher's exact test between
two solve rates, the difference of two solve rates with Newcombe's hybrid score interval,
steps-to-solve per seed, survival curves, and the table-size frontier with the range its seeds'
intervals allow.

Intervals and tests come from scipy.stats; this module only decides what is counted:
- a run is *solved* when its test metric (the best checkpoint's) reaches `solve_at`
  (default 0.95; for a loss metric, when it falls to `solve_at` or below);
- its *steps to solve* are the first evaluation step whose held-out (valid) accuracy reaches the
  threshold, read from `metrics.jsonl`; a solved run whose valid curve never reached it (test
  above, valid just below) counts its best checkpoint's step;
- *samples to solve* = steps to solve x batch size (comparable across batch sizes).

Survival (time to event): a run's steps to solve are its event time; a run that ends unsolved is
right-censored at its last step, so the runs the budget cut off count as "not solved by then",
not as "never". Per group: the Kaplan-Meier curve with its exponential-Greenwood (log-log) 95%
band and median (the first step at which fewer than half the seeds remain unsolved; its interval
where the band crosses one half), from `lifelines`; the restricted mean steps to solve up to the
group's last observed step (the area under the KM curve) with the Klein-Moeschberger standard
error; and the log-rank test between two groups (lifelines' chi-square, one-sided by the sign of
observed minus expected solves).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from recall_lab import checkpoint as ck
from recall_lab.generators.errors import RecallLabError

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


@dataclass(frozen=True)
class Difference:
    """a's solve rate minus b's with the Newcombe hybrid score interval at `confidence`."""

    diff: float
    lo: float
    hi: float
    confidence: float = 0.95


def newcombe(a: SolveRate, b: SolveRate, confidence: float = 0.95) -> Difference:
    """The difference of two solve rates, a's minus b's, with the hybrid score interval of
    Newcombe (1998, Statistics in Medicine 17:873, method 10), built from each group's Wilson
    interval at `confidence` (l, u): lower = d - sqrt((p_a - l_a)^2 + (u_b - p_b)^2), upper =
    d + sqrt((u_a - p_a)^2 + (p_b - l_b)^2). Its lower bound at 95% is the one-sided
    non-inferiority test at 2.5%. Both groups need seeds (n > 0)."""
    if not a.n or not b.n:
        raise RecallLabError("a difference of solve rates needs seeds in both groups")
    wa, wb = wilson(a.k, a.n, confidence), wilson(b.k, b.n, confidence)
    pa, pb = a.k / a.n, b.k / b.n
    d = pa - pb
    lo = d - math.sqrt((pa - wa.lo) ** 2 + (wb.hi - pb) ** 2)
    hi = d + math.sqrt((wa.hi - pa) ** 2 + (pb - wb.lo) ** 2)
    return Difference(d, lo, hi, confidence)


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


def frontier_range(points: list[tuple[float, SolveRate]],
                   at_least: float = 0.5) -> tuple[float, float]:
    """The frontiers the seeds' sampling error allows: the largest table size whose Wilson
    interval lies at or above `at_least` (its lower bound), and the largest whose interval reaches
    it (its upper bound); 0 where none does. `frontier` lies between the two, since every
    interval holds its rate; a frontier that turns on one seed shows as a wide range."""
    def largest(bound: str) -> float:
        ok = [size for size, r in points if r.n and getattr(r, bound) >= at_least]
        return max(ok) if ok else 0

    return largest("lo"), largest("hi")


def fisher_power(p_a: float, p_b: float, n_a: int, n_b: int | None = None,
                 level: float = LEVEL, alternative: str = "greater") -> float:
    """Exact power of the one-sided Fisher test "a solves more than b" at `level` when the true
    solve rates are p_a and p_b with n_a and n_b seeds: the probability, summed over every
    outcome (k_a, k_b) of the two binomials, that the test rejects. Choose the number of seeds
    from this before the runs (with the two-sided test, 0.9 vs 0.3 needs ~15 seeds per arm for
    89% power)."""
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


# ---- survival: steps to solve as time to event, unsolved runs right-censored ------------------

@dataclass(frozen=True)
class Survival:
    """Kaplan-Meier estimate of one group's steps to solve. `times` holds 0 and every step where
    a run solved or was censored; `solved` is the fraction solved by each (1 - S(t)), with its
    band `lo`-`hi`. Medians and bounds are None where not reached within the runs (the curve or
    band never falls below one half); the restricted mean is over [0, horizon]."""

    n: int
    events: int
    times: tuple[float, ...]
    solved: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    median: float | None
    median_lo: float | None
    median_hi: float | None
    horizon: float
    rmst: float
    rmst_se: float
    rmst_lo: float
    rmst_hi: float
    confidence: float = 0.95

    def median_text(self) -> str:
        def fmt(x: float | None) -> str:
            return f">{self.horizon:g}" if x is None else f"{x:g}"
        if self.n < 2:  # one run: its step, and no interval ("100 [100, 100]" said one)
            return f"{fmt(self.median)} (1 seed: no interval)"
        return f"{fmt(self.median)} [{fmt(self.median_lo)}, {fmt(self.median_hi)}]"

    def rmst_text(self) -> str:
        if self.n < 2:
            return f"{self.rmst:.0f} (1 seed: no interval)"
        return f"{self.rmst:.0f} [{self.rmst_lo:.0f}, {self.rmst_hi:.0f}]"


class NoLifelines(RecallLabError):
    """The survival statistics need lifelines, which this environment lacks."""


def _need_lifelines() -> None:
    """lifelines is imported inside the functions that use it, not at the top: it takes ~3 s to
    import (`report` start-up), and the GPU machine's environment does not have it. Without it,
    one clear line (the report leaves its survival columns empty: `report.aggregate`)."""
    try:
        import lifelines  # noqa: F401
    except ImportError:
        raise NoLifelines("survival statistics need lifelines: pip install 'lifelines>=0.27'") \
            from None


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def kaplan_meier(durations: list[float], events: list[bool], confidence: float = 0.95,
                 horizon: float | None = None) -> Survival | None:
    """The Kaplan-Meier estimate of time to solve (`events`: True = solved at that duration,
    False = censored there), None for no runs. `horizon` (default: the last duration) bounds
    the restricted mean."""
    if not durations:
        return None
    if len(durations) != len(events):
        raise ValueError("durations and events differ in length")
    _need_lifelines()
    from lifelines import KaplanMeierFitter
    from lifelines.utils import median_survival_times

    t = np.asarray(durations, dtype=float)
    e = np.asarray(events, dtype=bool)
    km = KaplanMeierFitter(alpha=1.0 - confidence).fit(t, e)
    sf = km.survival_function_.iloc[:, 0]
    band = km.confidence_interval_
    mid = median_survival_times(band)
    tau = float(t.max() if horizon is None else horizon)
    rmst, se = restricted_mean(km.event_table, sf, tau)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    return Survival(
        n=len(t), events=int(e.sum()), times=tuple(float(x) for x in sf.index),
        solved=tuple(float(1 - x) for x in sf.values),
        lo=tuple(float(1 - x) for x in band.iloc[:, 1].values),
        hi=tuple(float(1 - x) for x in band.iloc[:, 0].values),
        median=_finite(km.median_survival_time_), median_lo=_finite(mid.iloc[0, 0]),
        median_hi=_finite(mid.iloc[0, 1]), horizon=tau, rmst=rmst, rmst_se=se,
        rmst_lo=max(0.0, rmst - z * se), rmst_hi=min(tau, rmst + z * se), confidence=confidence)


def restricted_mean(table, sf, tau: float) -> tuple[float, float]:
    """Restricted mean time to solve, the area under the KM survival step function `sf` over
    [0, tau], and its standard error (Klein & Moeschberger, Sec. 4.5): Var = sum over event
    times t_i <= tau of A_i^2 d_i / (n_i (n_i - d_i)), A_i the area from t_i to tau (0 where
    n_i = d_i: the curve is 0 after). `table` is lifelines' event table (observed, at_risk)."""
    times = np.asarray(sf.index, dtype=float)
    surv = np.asarray(sf.values, dtype=float)
    keep = times <= tau
    times, surv = times[keep], surv[keep]
    widths = np.diff(np.append(times, tau))
    pieces = surv * widths  # S is constant on [t_i, t_i+1)
    area = float(pieces.sum())
    tail = np.cumsum(pieces[::-1])[::-1]  # area from t_i to tau
    d = table["observed"].reindex(times).to_numpy(dtype=float)
    n = table["at_risk"].reindex(times).to_numpy(dtype=float)
    var = 0.0
    for a_i, d_i, n_i in zip(tail, d, n, strict=True):
        if d_i > 0 and n_i > d_i:
            var += a_i * a_i * d_i / (n_i * (n_i - d_i))
    return area, math.sqrt(var)


@dataclass(frozen=True)
class LogRank:
    """The log-rank test between groups a and b: chi-square (1 df), two-sided p, observed minus
    expected solves of a (> 0: a solves sooner), and the one-sided p of "a solves sooner"."""

    chi2: float
    p_two: float
    o_minus_e: float
    p_sooner: float
    p_later: float


def logrank(a: tuple[list[float], list[bool]], b: tuple[list[float], list[bool]]) -> LogRank:
    """Log-rank test of two groups' (durations, events), from lifelines; the one-sided p-values
    are the normal tail of +/- sqrt(chi2), signed by a's observed minus expected solves."""
    _need_lifelines()
    from lifelines.statistics import logrank_test

    ta, ea = np.asarray(a[0], dtype=float), np.asarray(a[1], dtype=bool)
    tb, eb = np.asarray(b[0], dtype=float), np.asarray(b[1], dtype=bool)
    if not len(ta) or not len(tb):
        raise ValueError("the log-rank test needs runs in both groups")
    if not ea.any() and not eb.any():  # no run solved: nothing to compare
        return LogRank(0.0, 1.0, 0.0, 1.0, 1.0)
    res = logrank_test(ta, tb, event_observed_A=ea, event_observed_B=eb)
    chi2 = float(res.test_statistic)
    # a's observed minus expected solves: at each solve time, a's share of those at risk
    o_e = 0.0
    for t in np.unique(np.concatenate([ta[ea], tb[eb]])):
        at_a, at_b = float((ta >= t).sum()), float((tb >= t).sum())
        d_a, d = float(((ta == t) & ea).sum()), float(((ta == t) & ea).sum()
                                                     + ((tb == t) & eb).sum())
        o_e += d_a - d * at_a / (at_a + at_b)
    zval = math.copysign(math.sqrt(max(chi2, 0.0)), o_e) if o_e else 0.0
    return LogRank(chi2, float(res.p_value), o_e, float(stats.norm.sf(zval)),
                   float(stats.norm.cdf(zval)))
