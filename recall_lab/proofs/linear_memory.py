"""Capacity thresholds of a d x d linear associative memory, measured with seeds.

The statement tested (Barnfield, Kim, Nichani, Lee, Lu, "Sharp capacity thresholds in linear
associative memory: from winner-take-all to listwise retrieval", arXiv 2605.05189, 2026): store n
pairs (x_i, y_i), keys and targets i.i.d. N(0, I_d), in a d x d matrix W and read target scores
``y_c^T W x_j`` over the n stored targets c.

- **Proved there**: top-1 retrieval (every target beats its largest distractor) needs the scale
  d^2 ~ n log n, for every linear memory; the correlation-matrix memory ``W = sum_i y_i x_i^T``
  (superposed outer products: what linear attention writes) reaches that scale through a sharp
  phase transition. Listwise retrieval (the target inside a candidate list that is a fixed
  fraction of the n candidates) needs only d^2 ~ n.
- **Conjectured there**: the sharp top-1 constant, d^2 ~ 2 n ln n, i.e. c(d) = d^2 / (n* ln n*)
  tends to 2. No numerical test of it had been published.

What `check()` measures (all numbers in `Evidence.details`):

1. **Top-1 threshold of the correlation-matrix memory.** Per seed one stream of pairs; at n the
   memory holds its first n pairs. A seed's capacity N_s is the largest n at which all n pairs
   are retrieved top-1, found by doubling then bisection on n (to the pair; the per-pair
   listwise search below stops at 1/128 of n): this assumes that full retrieval,
   once lost, stays lost as pairs are added (each pair only adds interference), and is exact for
   a step function (item 4). P(all n retrieved) is then the share of seeds with N_s >= n, and
   the threshold n*(d), where that share crosses 1/2, is the median of the N_s, with a 95%
   percentile bootstrap interval over seeds (2,000 resamples). c(d) = d^2 / (n* ln n*) with the
   interval mapped through the same formula.
2. **Listwise threshold**, f = 0.05: a pair is retrieved listwise when its target is among the
   top ceil(f n) of the n candidate scores. Two criteria, each thresholded as in 1: *per pair*
   (at least half of the pairs retrieved listwise; scored on at most 256 of them per n) and *all
   pairs* (every pair retrieved listwise). Reported: n* / d^2 per d with its interval. Expected
   (a Gaussian approximation, written here before the runs): per pair n* / d^2 -> 1 / z^2 with
   z = Phi^-1(1 - f), about 0.37, flat in d; all pairs keeps an extreme-value log factor (the
   worst of n pairs), so its n* / d^2 falls with d like the top-1 ratio does.
3. **The best linear memory at d <= 16**: top-1 retrieval by *some* W is a linear feasibility
   problem, ``(y_j - y_c)^T W x_j >= 1`` for every j and c != j (the max-margin map exists iff
   this is feasible), solved with scipy's HiGHS LP. Its threshold (as in 1) beside the
   correlation-matrix memory's, on the same pairs.
4. **The estimator on a synthetic step function**: per-seed thresholds drawn at random around a
   known median; the search must return every seed's threshold exactly and the bootstrap
   interval must contain the known median. This is the statement's PASS: the measurement is
   sound. PASS does not mean the conjecture holds.

**Decision rule for the conjecture (written before the first run):** fit
c(d) = c_inf + a / ln d by least squares over the measured d >= 32, and refit on each of the
2,000 bootstrap replicates (independent across d) for c_inf's 95% percentile interval. Verdict:
*contradicted* when 2 lies outside that interval; *supported* when 2 lies inside and the interval
is at most 1.0 wide; otherwise *not decided at these d*. The verdict is conditional on the
1 / ln d form of the finite-d correction, so c(d) itself and its trend are reported beside it.
The listwise ratio is called *flat* when the per-pair n* / d^2 intervals of all d share a point.

Scales: `small` d = 8 .. 128, 20 seeds, the LP at d = 8 (measured: 14 s of CPU on one core);
`large` adds d = 256 (77 s of CPU with d = 32 .. 128) and the LP at d = 16 (1.5 to 14 s of CPU
per LP, about 160 of them). `dims` and `n_max` override the grid (`recall-lab prove
linear_memory --d 16 --n-max 2000`); `validate` refuses bad values before any work.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats

from recall_lab.experiments.memory import largest_passing
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.limits import check_fits
from recall_lab.proofs.evidence import Evidence

F_LIST = 0.05  # the listwise fraction
PER_PAIR_QUERIES = 256  # pairs scored per n for the per-pair listwise criterion
BOOTSTRAP = 2000
CONJECTURE = 2.0
DECIDED_WIDTH = 1.0  # c_inf's interval at most this wide to call the conjecture supported
FIT_FROM = 32
D_RANGE = (4, 1024)
N_RANGE = (2, 10_000_000)
LP_MAX_D = 16
LP_MAX_ROWS = 400_000  # constraint rows n (n - 1) of one LP (8 bytes x d^2 each)
GRID = {
    "small": {"dims": (8, 16, 32, 64, 128), "seeds": 20, "lp_dims": (8,)},
    "large": {"dims": (8, 16, 32, 64, 128, 256), "seeds": 20, "lp_dims": (8, 16)},
}
# the per-pair listwise threshold (thousands of pairs at d >= 64) is searched to 1/128 of n, not
# to the pair: its interval over seeds is several percent wide
RESOLUTION = {"list_pair": 128}
_CHUNK = 1024  # queries scored at a time (bounds the score matrix at 1024 x n)

# A retrieval test: (keys [n, d], targets [n, d]) -> retrieved?
Criterion = Callable[[np.ndarray, np.ndarray], bool]


# ---- the memories and their criteria -------------------------------------------------------------

def correlation_scores(x: np.ndarray, y: np.ndarray, rows: slice) -> np.ndarray:
    """Scores ``y_c^T W x_j`` of the correlation-matrix memory W = Y^T X for the queries j in
    `rows` against all n targets c: [len(rows), n]."""
    w = y.T @ x  # [d, d]
    return (x[rows] @ w.T) @ y.T


def target_ranks(x: np.ndarray, y: np.ndarray, queries: int | None = None) -> np.ndarray:
    """Per query j (the first `queries`, default all n): how many of the n targets score strictly
    above its own target (0 = top-1), in chunks of queries."""
    n = x.shape[0]
    m = n if queries is None else min(n, queries)
    ranks = np.empty(m, dtype=np.int64)
    for lo in range(0, m, _CHUNK):
        hi = min(m, lo + _CHUNK)
        s = correlation_scores(x, y, slice(lo, hi))
        own = s[np.arange(hi - lo), np.arange(lo, hi)]
        ranks[lo:hi] = (s > own[:, None]).sum(1)
    return ranks


def top1_all(x: np.ndarray, y: np.ndarray) -> bool:
    """Every stored pair retrieved top-1 (ties count as failures: the target must beat every
    distractor)."""
    n = x.shape[0]
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        s = correlation_scores(x, y, slice(lo, hi))
        own = s[np.arange(hi - lo), np.arange(lo, hi)].copy()
        s[np.arange(hi - lo), np.arange(lo, hi)] = -np.inf
        if not np.all(own > s.max(1)):
            return False
    return True


def list_size(n: int, f: float = F_LIST) -> int:
    return max(1, math.ceil(f * n))


def listwise_per_pair(x: np.ndarray, y: np.ndarray) -> bool:
    """At least half of the (first 256) pairs have their target among the top ceil(f n)."""
    ranks = target_ranks(x, y, PER_PAIR_QUERIES)
    return bool(np.mean(ranks < list_size(x.shape[0])) >= 0.5)


def listwise_all(x: np.ndarray, y: np.ndarray) -> bool:
    """Every pair has its target among the top ceil(f n)."""
    return bool(np.all(target_ranks(x, y) < list_size(x.shape[0])))


def lp_top1_feasible(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether some d x d matrix W retrieves every pair top-1 with margin 1 (equivalently, with
    any positive margin): the LP ``(y_j - y_c)^T W x_j >= 1`` for all j, c != j, variables W."""
    n, d = x.shape
    j, c = np.nonzero(~np.eye(n, dtype=bool))
    # row (j, c): vec((y_j - y_c) x_j^T), matching W's row-major flattening
    rows = ((y[j] - y[c])[:, :, None] * x[j][:, None, :]).reshape(len(j), d * d)
    res = optimize.linprog(np.zeros(d * d), A_ub=-rows, b_ub=-np.ones(len(j)),
                           bounds=(None, None), method="highs")
    return res.status == 0


CRITERIA: dict[str, Criterion] = {"top1": top1_all, "list_pair": listwise_per_pair,
                                  "list_all": listwise_all, "lp_top1": lp_top1_feasible}


# ---- the threshold estimator ---------------------------------------------------------------------

def median_interval(values: Sequence[float], rng: np.random.Generator,
                    resamples: int = BOOTSTRAP) -> tuple[float, float, float, np.ndarray]:
    """(median, 2.5% and 97.5% percentile-bootstrap bounds, the bootstrap medians)."""
    v = np.asarray(values, dtype=float)
    boot = np.median(v[rng.integers(0, len(v), size=(resamples, len(v)))], axis=1)
    return float(np.median(v)), float(np.percentile(boot, 2.5)), \
        float(np.percentile(boot, 97.5)), boot


def constant(n: np.ndarray | float, d: int) -> np.ndarray | float:
    """c = d^2 / (n ln n) (inf where n <= 1)."""
    n = np.asarray(n, dtype=float)
    with np.errstate(divide="ignore"):
        out = np.where(n > 1, d * d / (n * np.log(np.maximum(n, 1.0 + 1e-12))), np.inf)
    return out if out.ndim else float(out)


@dataclass
class Threshold:
    """One criterion at one d: per-seed capacities and their median with its interval."""

    criterion: str
    d: int
    capacities: list[int]
    censored: int
    median: float
    lo: float
    hi: float
    boot: np.ndarray

    def summary(self) -> dict[str, Any]:
        d2 = self.d * self.d
        out = {"criterion": self.criterion, "d": self.d, "seeds": len(self.capacities),
               "capacities": self.capacities, "censored": self.censored,
               "n_star": self.median, "n_star_lo": self.lo, "n_star_hi": self.hi,
               "n_star_over_d2": self.median / d2, "ratio_lo": self.lo / d2,
               "ratio_hi": self.hi / d2}
        if self.criterion in ("top1", "lp_top1"):
            out.update(c=constant(self.median, self.d), c_lo=constant(self.hi, self.d),
                       c_hi=constant(self.lo, self.d))
        return out


def first_guess(criterion: str, d: int) -> int:
    """Where the doubling starts: near the expected threshold, so the search is short."""
    d2 = d * d
    if criterion == "list_pair":
        return max(2, int(0.3 * d2))
    if criterion == "list_all":
        return max(2, int(d2 / (1.6 + math.sqrt(2 * math.log(max(d2, 3)))) ** 2))
    return max(2, int(d2 / (2 * math.log(max(d2, 3)))))


class PairStream:
    """One seed's pairs, keys and targets each from their own generator, drawn as far as a
    search asks (the first n rows are the same however far it goes)."""

    def __init__(self, seed: int, d: int, s: int) -> None:
        self.rngs = (np.random.default_rng([seed, d, s, 0]), np.random.default_rng([seed, d, s, 1]))
        self.d = d
        self.x = np.empty((0, d))
        self.y = np.empty((0, d))

    def first(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if n > len(self.x):
            more = max(n, 2 * len(self.x)) - len(self.x)
            self.x = np.concatenate([self.x, self.rngs[0].standard_normal((more, self.d))])
            self.y = np.concatenate([self.y, self.rngs[1].standard_normal((more, self.d))])
        return self.x[:n], self.y[:n]


def measure(criterion: str, d: int, seeds: int, seed: int, n_max: int,
            rng: np.random.Generator) -> Threshold:
    """Each seed's capacity under `criterion` at dimension d (the memory at n holds the seed's
    first n pairs: every criterion and the LP see the same pairs), and the median over seeds
    with its bootstrap interval."""
    test = CRITERIA[criterion]
    caps, censored = [], 0
    for s in range(seeds):
        pairs = PairStream(seed, d, s)
        cap, cens = largest_passing(lambda n, p=pairs: test(*p.first(n)),
                                    first_guess(criterion, d), n_max,
                                    RESOLUTION.get(criterion, 1))
        caps.append(cap)
        censored += cens
    med, lo, hi, boot = median_interval(caps, rng)
    return Threshold(criterion, d, caps, censored, med, lo, hi, boot)


def synthetic_check(seed: int, seeds: int = 20, median: int = 137) -> dict[str, Any]:
    """The estimator on step functions with known per-seed thresholds: half the seeds below
    `median`, half above, the two middle ones at it, so the true median is `median`."""
    rng = np.random.default_rng([seed, 999])
    half = (seeds - 2) // 2
    below = rng.integers(median // 2, median, size=half)
    above = rng.integers(median + 1, 2 * median, size=seeds - 2 - half)
    truth = rng.permutation(np.concatenate([below, [median, median], above]))
    found = [largest_passing(lambda n, t=t: n <= t, 8, 10 * median)[0] for t in truth]
    med, lo, hi, _ = median_interval(found, rng)
    exact = [int(f) for f in found] == [int(t) for t in truth]
    return {"true_median": median, "true": truth.tolist(), "found": found, "exact": exact,
            "median": med, "lo": lo, "hi": hi, "covers": lo <= median <= hi,
            "ok": exact and med == median and lo <= median <= hi}


# ---- the decision rule ---------------------------------------------------------------------------

def fit_limit(ds: Sequence[int], cs: Sequence[float]) -> tuple[float, float]:
    """Least squares c(d) = c_inf + a / ln d: (c_inf, a)."""
    u = 1.0 / np.log(np.asarray(ds, dtype=float))
    a, c_inf = np.polyfit(u, np.asarray(cs, dtype=float), 1)
    return float(c_inf), float(a)


def verdict(top1: Sequence[Threshold]) -> dict[str, Any]:
    """The pre-written rule (module docstring) on the top-1 thresholds at d >= FIT_FROM."""
    used = [t for t in top1 if t.d >= FIT_FROM and not t.censored]
    if len(used) < 2:
        return {"verdict": "not decided at these d", "why": "fewer than 2 dimensions >= 32",
                "fit_dims": [t.d for t in used]}
    ds = [t.d for t in used]
    c_inf, a = fit_limit(ds, [constant(t.median, t.d) for t in used])
    reps = np.stack([constant(t.boot, t.d) for t in used], axis=1)  # [resamples, dims]
    reps = reps[np.all(np.isfinite(reps), axis=1)]
    boot = np.array([fit_limit(ds, row)[0] for row in reps])
    lo, hi = float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))
    if not lo <= CONJECTURE <= hi:
        word = "contradicted"
    elif hi - lo <= DECIDED_WIDTH:
        word = "supported"
    else:
        word = "not decided at these d"
    return {"verdict": word, "c_inf": c_inf, "a": a, "c_inf_lo": lo, "c_inf_hi": hi,
            "fit_dims": ds, "rule": f"2 outside c_inf's 95% interval: contradicted; inside and "
                                    f"the interval <= {DECIDED_WIDTH} wide: supported; "
                                    f"else not decided"}


def flat(ths: Sequence[Threshold]) -> bool:
    """The ratios n*/d^2 share a point: the largest lower bound <= the smallest upper bound."""
    return max(t.lo / t.d**2 for t in ths) <= min(t.hi / t.d**2 for t in ths)


# ---- inputs and the check ------------------------------------------------------------------------

def plan(scale: str, dims: Sequence[int] | None = None, n_max: int | None = None
         ) -> dict[str, Any]:
    """The grid a run will measure, after refusing bad input (one `RecallLabError`)."""
    if scale not in GRID:
        raise RecallLabError(f"unknown scale {scale!r}; choose from {', '.join(GRID)}")
    grid = dict(GRID[scale])
    if dims:
        bad = [d for d in dims if not D_RANGE[0] <= d <= D_RANGE[1]]
        if bad:
            raise RecallLabError(f"--d must lie in [{D_RANGE[0]}, {D_RANGE[1]}], got {bad[0]}")
        grid["dims"] = tuple(sorted(set(dims)))
        grid["lp_dims"] = tuple(d for d in grid["dims"] if d <= LP_MAX_D)[:1]
    if n_max is not None and not N_RANGE[0] <= n_max <= N_RANGE[1]:
        raise RecallLabError(f"--n-max must lie in [{N_RANGE[0]:,}, {N_RANGE[1]:,}], "
                             f"got {n_max:,}")
    # per d: the pairs searched over; the default reaches past every expected threshold
    grid["n_max"] = {d: n_max or 2 * d * d for d in grid["dims"]}
    need = max(4 * 8 * n * d + 8 * _CHUNK * n for d, n in grid["n_max"].items())
    check_fits(need, f"linear_memory's pairs at n_max = {max(grid['n_max'].values()):,}",
               "lower --n-max or --d")
    lp_rows = max((min(n, 2 * d * d) ** 2 for d, n in grid["n_max"].items()
                   if d in grid["lp_dims"]), default=0)
    if lp_rows > LP_MAX_ROWS:
        grid["lp_n_max"] = int(math.isqrt(LP_MAX_ROWS))
    return grid


def validate(scale: str = "small", dims: Sequence[int] | None = None,
             n_max: int | None = None) -> None:
    """Refuse bad input (unknown scale, d or n out of range, a size that does not fit)."""
    plan(scale, dims, n_max)


def check(scale: str = "small", seed: int = 0, dims: Sequence[int] | None = None,
          n_max: int | None = None, seeds: int | None = None) -> Evidence:
    """Measure the thresholds (module docstring); PASS when the estimator is sound. `seeds`
    (default the scale's 20) exists for the test suite's miniature."""
    start = time.perf_counter()
    grid = plan(scale, dims, n_max)
    rng = np.random.default_rng([seed, 1])
    seeds = seeds or grid["seeds"]
    top1, pair, every, lp, lp_cmm = [], [], [], [], []
    for d in grid["dims"]:
        cap = grid["n_max"][d]
        top1.append(measure("top1", d, seeds, seed, cap, rng))
        pair.append(measure("list_pair", d, seeds, seed, cap, rng))
        every.append(measure("list_all", d, seeds, seed, cap, rng))
        if d in grid["lp_dims"]:
            lp_cap = min(cap, grid.get("lp_n_max", cap))
            lp.append(measure("lp_top1", d, seeds, seed, lp_cap, rng))
            lp_cmm.append(next(t for t in top1 if t.d == d))
    synth = synthetic_check(seed)
    rule = verdict(top1)
    z = float(stats.norm.ppf(1 - F_LIST))
    c_text = ", ".join(f"d={t.d}: {constant(t.median, t.d):.2f} "
                       f"[{constant(t.hi, t.d):.2f}, {constant(t.lo, t.d):.2f}]" for t in top1)
    ratio_text = ", ".join(f"{t.median / t.d**2:.3f}" for t in pair)
    lp_text = "; ".join(f"d={a.d}: LP n* {a.median:g} [{a.lo:g}, {a.hi:g}] vs CMM "
                        f"{b.median:g}" for a, b in zip(lp, lp_cmm, strict=True))
    inf_text = (f"c_inf {rule['c_inf']:.2f} [{rule['c_inf_lo']:.2f}, {rule['c_inf_hi']:.2f}]"
                if "c_inf" in rule else rule.get("why", ""))
    return Evidence(
        name="linear_memory",
        statement=("arXiv 2605.05189: top-1 needs d^2 ~ n log n (conjecture: d^2 ~ 2 n ln n); "
                   "listwise d^2 ~ n"),
        checked=(f"correlation-matrix memory, Gaussian pairs, d in {list(grid['dims'])}, "
                 f"{seeds} seeds each; best linear map (LP) at d in {list(grid['lp_dims'])}; "
                 f"the threshold estimator on a synthetic step function"),
        measured=(f"c(d) {c_text}; {inf_text}: conjecture {rule['verdict']}; listwise "
                  f"(f={F_LIST}) n*/d^2 {ratio_text} (flat: {flat(pair)}); {lp_text}; "
                  f"estimator exact on the step function: {synth['exact']}"),
        passed=bool(synth["ok"]),
        details={"top1": [t.summary() for t in top1],
                 "listwise_per_pair": [t.summary() for t in pair],
                 "listwise_all": [t.summary() for t in every],
                 "lp_top1": [t.summary() for t in lp],
                 "listwise_flat": flat(pair), "listwise_expected_ratio": 1 / z**2,
                 "f": F_LIST, "rule": rule, "synthetic": synth, "seeds": seeds,
                 "n_max": grid["n_max"]},
        seconds=time.perf_counter() - start,
    )
