"""Top-1 thresholds of the correlation-matrix memory as probabilities: a grid of n, many seeds, a
probit curve, and the per-seed first failure and last success beside it.

Per seed one stream of Gaussian pairs (`PairStream`); at n the memory W = sum_{i <= n} y_i x_i^T
holds the stream's first n pairs. Two criteria at every n of a grid:

- **all pairs**: every one of the n pairs is recalled top-1 (its target beats every other
  stored target; a tie is a failure). A seed can lose full recall and regain it as pairs are
  added, so each seed's *first failure* (the smallest grid n where it fails) and *last success*
  (the largest grid n where it succeeds) are reported beside the curve. Where the grid skips
  integers they bound the exact ones: a failure between two grid points is not seen, so the
  first failure on the grid is at or above the exact one and the last success at or below;
- **single query**: the share of queries recalled top-1, scored on the first `QUERIES` pairs.

The curve: P(n) = Phi(alpha + beta ln n) fitted by maximum likelihood (Fisher scoring) to the
pooled counts over seeds; n_1/2 = exp(-alpha / beta), the n at which P = 1/2. Its interval is a
95% percentile bootstrap over seeds (a seed's outcomes at different n share its pairs, so seeds,
not outcomes, are resampled).

The grid (geometric, rounded to integers, so every n near a small threshold is on it) is placed by
a pilot that sees no outcome of the main seeds: `PILOT_SEEDS` extra streams, each seed's largest
n with all pairs recalled found by doubling and bisection (all pairs), or the smallest grid point
of a coarse geometric scan where under half the pilot queries are recalled (single query).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from recall_lab.experiments.memory import largest_passing

QUERIES = 128  # queries scored per n for the single-query criterion
PILOT_SEEDS = 8
PILOT_OFFSET = 10_000  # pilot streams are seeds 10,000 + k: never a measured seed
STEP = {"all_pairs": 1.03, "single_query": 1.06}  # the grid's ratio between neighbours
SPAN = {"all_pairs": (0.5, 1.7), "single_query": (0.6, 1.6)}  # the grid around the pilot's n
BOOTSTRAP = 1000
MEDIAN_BOOTSTRAP = 2000  # resamples of a median's interval
_CHUNK = 1024
_STOP_CHUNK = 64  # queries per chunk when the first failure ends the check


class PairStream:
    """One seed's pairs, keys and targets each from their own generator, drawn as far as asked
    (the first n rows are the same however far it goes)."""

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


def recalled(x: np.ndarray, y: np.ndarray, queries: int | None = None,
             w: np.ndarray | None = None, stop: bool = False) -> np.ndarray:
    """Per query j (the first `queries`, default all n): is its own target's score strictly above
    every other stored target's, under W = sum_i y_i x_i^T (`w` when the caller holds it)?
    Bool [queries]. With `stop`, queries after the first chunk holding a failure are left False
    (enough to say that not all are recalled)."""
    n = x.shape[0]
    m = n if queries is None else min(n, queries)
    w = y.T @ x if w is None else w  # [d, d]
    out = np.zeros(m, dtype=bool)
    chunk = _STOP_CHUNK if stop else _CHUNK
    for lo in range(0, m, chunk):
        hi = min(m, lo + chunk)
        s = (x[lo:hi] @ w.T) @ y.T  # [hi - lo, n]
        rows = np.arange(hi - lo)
        own = s[rows, np.arange(lo, hi)].copy()
        s[rows, np.arange(lo, hi)] = -np.inf
        out[lo:hi] = own > s.max(1)
        if stop and not out[lo:hi].all():
            break
    return out


def all_recalled(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> bool:
    return bool(recalled(x, y, w=w, stop=True).all())


def geometric_grid(centre: float, span: tuple[float, float], step: float) -> np.ndarray:
    """Integers from span[0] centre (at least 2) to span[1] centre (at least centre + 8) in
    ratios of `step` (every integer where the ratio would skip none)."""
    lo, hi = max(2.0, span[0] * centre), max(centre + 8.0, span[1] * centre)
    count = int(math.ceil(math.log(hi / lo) / math.log(step))) + 1
    return np.unique(np.round(np.geomspace(lo, hi, count)).astype(int))


def pilot_centre(criterion: str, d: int, seed: int, n_max: int) -> float:
    """Where the grid is centred, from `PILOT_SEEDS` streams no measured seed uses."""
    streams = [PairStream(seed, d, PILOT_OFFSET + k) for k in range(PILOT_SEEDS)]
    start = max(2, int(d * d / (10 * math.log(max(d * d, 3)))))
    caps = [largest_passing(lambda n, p=p: all_recalled(*p.first(n)), start, n_max)[0]
            for p in streams]
    centre = float(np.median(caps))
    if criterion == "all_pairs":
        return centre
    n = centre
    while n < n_max:
        share = np.mean([recalled(*p.first(int(n)), QUERIES).mean() for p in streams])
        if share < 0.5:
            return n / 1.2  # the midpoint of the last bracket, on a log scale
        n *= 1.44
    return float(n_max)


def median_interval(values: Sequence[float], rng: np.random.Generator,
                    resamples: int = MEDIAN_BOOTSTRAP) -> tuple[float, float, float, np.ndarray]:
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


# ---- the probit fit ------------------------------------------------------------------------------

def probit_fit(x: np.ndarray, k: np.ndarray, m: np.ndarray, iters: int = 60
               ) -> tuple[np.ndarray, np.ndarray]:
    """Maximum-likelihood P = Phi(alpha + beta x) for successes k of trials m at points x, for a
    batch of data sets at once (k, m: [batch, points]); Fisher scoring. Returns (alpha, beta),
    each [batch]."""
    from scipy.special import ndtr, ndtri

    k = np.atleast_2d(np.asarray(k, dtype=float))
    m = np.atleast_2d(np.asarray(m, dtype=float))
    xc = x - x.mean()
    share = k.sum(1) / np.maximum(m.sum(1), 1)
    # start: a line through the pooled share with a moderate slope
    beta = np.full(len(k), -4.0 / max(np.ptp(xc), 1e-9))
    alpha = ndtri(np.clip(share, 0.05, 0.95))
    for _ in range(iters):
        eta = np.clip(alpha[:, None] + beta[:, None] * xc[None, :], -30, 30)
        p = np.clip(ndtr(eta), 1e-12, 1 - 1e-12)
        dens = np.exp(-0.5 * eta**2) / math.sqrt(2 * math.pi)
        r = (k - m * p) * dens / (p * (1 - p))
        w = m * dens**2 / (p * (1 - p))
        g0, g1 = r.sum(1), (r * xc).sum(1)
        i00, i01, i11 = w.sum(1), (w * xc).sum(1), (w * xc * xc).sum(1)
        det = i00 * i11 - i01**2
        det = np.where(np.abs(det) < 1e-300, 1e-300, det)
        da = (i11 * g0 - i01 * g1) / det
        db = (i00 * g1 - i01 * g0) / det
        # a step never moves the midpoint further than the grid or flips the slope's sign
        scale = np.minimum(1.0, 0.5 * np.abs(beta) / np.maximum(np.abs(db), 1e-300))
        alpha, beta = alpha + scale * da, beta + scale * db
        if np.all(np.abs(scale * da) < 1e-10) and np.all(np.abs(scale * db) < 1e-10):
            break
    return alpha - beta * x.mean(), beta


def n_half_of(alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """exp(-alpha / beta); NaN where the curve does not fall with n (beta >= 0: no crossing)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        out = np.exp(-alpha / beta)
    return np.where(beta < 0, out, np.nan)


# ---- one criterion at one d ----------------------------------------------------------------------

@dataclass
class ProbitThreshold:
    """One criterion at one d: the grid, each seed's outcome there, the fit and its interval."""

    criterion: str
    d: int
    grid: np.ndarray
    successes: np.ndarray  # [seeds, grid]: recalled (all pairs: 0/1; single query: queries)
    trials: np.ndarray  # [grid]: trials per seed at each n
    n_half: float
    lo: float
    hi: float
    slope: float
    seconds: float
    dropped: int = 0  # bootstrap resamples whose fitted curve does not fall with n

    @property
    def seeds(self) -> int:
        return self.successes.shape[0]

    def first_failure(self) -> np.ndarray:
        """Per seed the smallest grid n where not all pairs are recalled (the grid's top + 1 if
        none fails: censored)."""
        fail = self.successes == 0
        idx = np.where(fail.any(1), fail.argmax(1), -1)
        return np.where(idx >= 0, self.grid[np.maximum(idx, 0)], self.grid[-1] + 1)

    def last_success(self) -> np.ndarray:
        """Per seed the largest grid n where all pairs are recalled (the grid's bottom - 1 if
        none: censored)."""
        ok = self.successes > 0
        rev = ok[:, ::-1]
        idx = np.where(ok.any(1), len(self.grid) - 1 - rev.argmax(1), -1)
        return np.where(idx >= 0, self.grid[np.maximum(idx, 0)], self.grid[0] - 1)

    def summary(self, rng: np.random.Generator) -> dict[str, Any]:
        out: dict[str, Any] = {
            "criterion": self.criterion, "d": self.d, "seeds": self.seeds,
            "grid": self.grid.tolist(), "trials": self.trials.tolist(),
            "successes": self.successes.tolist(), "n_half": self.n_half,
            "n_half_lo": self.lo, "n_half_hi": self.hi, "slope": self.slope,
            "c": constant(self.n_half, self.d), "c_lo": constant(self.hi, self.d),
            "c_hi": constant(self.lo, self.d), "seconds": self.seconds,
            "bootstrap_dropped": self.dropped,
            "grid_step": STEP[self.criterion]}
        if self.criterion == "all_pairs":
            first, last = self.first_failure(), self.last_success()
            for name, v, cens in (("first_failure", first, first > self.grid[-1]),
                                  ("last_success", last, last < self.grid[0])):
                med, lo, hi, _ = median_interval(v, rng)
                out[name] = {"median": med, "lo": lo, "hi": hi, "per_seed": v.tolist(),
                             "censored": int(cens.sum())}
            out["lost_and_regained"] = int(np.sum(first < last))
            out["pooled_share"] = (self.successes.sum(0) / self.seeds).tolist()
        else:
            out["pooled_share"] = (self.successes.sum(0) / (self.seeds * self.trials)).tolist()
        return out


def measure(criterion: str, d: int, seeds: int, seed: int, n_max: int,
            rng: np.random.Generator, grid: np.ndarray | None = None,
            resamples: int = BOOTSTRAP) -> ProbitThreshold:
    """The criterion on a grid of n (the pilot's, unless given) for `seeds` streams, the probit
    fit and its bootstrap interval over seeds."""
    start = time.process_time()
    if grid is None:
        centre = pilot_centre(criterion, d, seed, n_max)
        grid = geometric_grid(centre, SPAN[criterion], STEP[criterion])
    grid = grid[grid <= n_max]
    if len(grid) < 2:
        grid = np.array([max(2, n_max - 1), n_max])
    trials = (np.ones(len(grid), dtype=int) if criterion == "all_pairs"
              else np.minimum(grid, QUERIES))
    succ = np.zeros((seeds, len(grid)), dtype=int)
    for s in range(seeds):
        x_all, y_all = PairStream(seed, d, s).first(int(grid[-1]))
        w, held = np.zeros((d, d)), 0  # W of the first `held` pairs, grown along the grid
        for g, n in enumerate(grid):
            w += y_all[held:n].T @ x_all[held:n]
            held = int(n)
            x, y = x_all[:n], y_all[:n]
            if criterion == "all_pairs":
                succ[s, g] = int(all_recalled(x, y, w))
            else:
                succ[s, g] = int(recalled(x, y, QUERIES, w).sum())
    ln = np.log(grid.astype(float))
    a, b = probit_fit(ln, succ.sum(0)[None, :], (seeds * trials)[None, :])
    mult = rng.multinomial(seeds, np.full(seeds, 1.0 / seeds), size=resamples)  # [B, seeds]
    ab, bb = probit_fit(ln, mult @ succ, mult.sum(1)[:, None] * trials[None, :])
    boot = n_half_of(ab, bb)
    kept = boot[np.isfinite(boot)]  # a resample without a falling curve has no n_1/2
    return ProbitThreshold(criterion, d, grid, succ, trials, float(n_half_of(a, b)[0]),
                           float(np.percentile(kept, 2.5)), float(np.percentile(kept, 97.5)),
                           float(b[0]), time.process_time() - start,
                           int(len(boot) - len(kept)))
