"""Top-1 thresholds of a d x d linear associative memory against their finite-d predictions.

The memory (Barnfield, Kim, Nichani, Lee, Lu, "Sharp capacity thresholds in linear associative
memory: from winner-take-all to listwise retrieval", arXiv 2605.05189, 2026): store n pairs
(x_i, y_i), keys and targets i.i.d. N(0, I_d), in a d x d matrix W and read target scores
``y_c^T W x_j`` over the n stored targets c. Proved there: top-1 retrieval needs the scale
d^2 ~ n log n for every linear memory, and the correlation-matrix memory W = sum_i y_i x_i^T
(what linear attention writes) reaches it; listwise retrieval needs only d^2 ~ n.

What `check()` measures (every number in `Evidence.details`):

1. **The correlation-matrix memory's two top-1 thresholds as probabilities**
   (`recall_lab.proofs.thresholds`): (a) all n pairs recalled, (b) a single query recalled. Per
   d, 40 seeds on a grid of n; a probit curve in ln n and its n_1/2 with a 95% bootstrap
   interval over seeds; for (a) also each seed's first failure and last success on the grid,
   whose medians differ because a seed can lose full recall and regain it as pairs are added.
   c(d) = d^2 / (n_1/2 ln n_1/2).
2. **Their finite-d predictions** (`recall_lab.proofs.memory_prediction`): an extreme-value
   model of the Gaussian scores with no fitted parameter, whose large-d limits are c = 8 (all
   pairs) and c = 2 (single query).
3. **The decision rule**, written before the comparison runs (docs/results/memory-theory,
   section 0): gap(d) = the distance from the prediction to the measured interval over the
   measured n_1/2 (0 inside); over the measured d >= 64, *supported* when every gap <= 0.05
   (at least two d), *contradicted* when some gap > 0.10, else *not decided*.
4. **The optimal linear memory** (`recall_lab.proofs.optimal_memory`): per seed the largest n
   at which some W recalls every pair top-1 (an LP solved by constraint generation, exact both
   ways), its median over seeds with a bootstrap interval and c_opt(d), against c = 2 (p ln p =
   d^2 / 2, arXiv 2605.10795): *supported* when the intervals at the two largest measured d lie
   inside [1.8, 2.2], else *not decided at these d*. An LP that hits its time limit is reported
   as "not finished at d = ...", never as a capacity, and the command then exits 2.
5. **Listwise thresholds**, f = 0.05 (the target among the top ceil(f n) candidates), each
   seed's largest passing n by doubling and bisection, per pair (half of the first 256 pairs)
   and all pairs, 20 seeds, d <= 256; a row whose list at its n* holds one candidate is a top-1
   point and is marked so (`top1_point`) and left out of the flatness check.
6. **Self-tests** (the statement's PASS): the bisection returns known per-seed step thresholds
   exactly, and the probit fit's interval holds the known n_1/2 of outcomes drawn from a probit
   curve. PASS says the estimators are sound; the findings are in words beside it.

Scales: `small` d = 8 .. 128, the optimal memory at d = 8 (10 seeds); `large` d = 8 .. 512 and
the optimal memory at d = 8, 12, 16, 24, 32. Measured times are in docs/proofs.md. `dims` picks
d from any value in [4, 1024] (the optimal memory runs at those of the scale's optimal-memory
d); `n_max`, `seeds` and `lp_time_limit` override the rest; `validate` refuses bad values before
any work.
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
from recall_lab.proofs import memory_prediction, optimal_memory, thresholds
from recall_lab.proofs.evidence import Evidence
from recall_lab.proofs.thresholds import PairStream, constant, median_interval

__all__ = ["PairStream", "check", "constant", "largest_passing", "median_interval", "plan",
           "validate"]

F_LIST = 0.05  # the listwise fraction
PER_PAIR_QUERIES = 256  # pairs scored per n for the per-pair listwise criterion
BOOTSTRAP = 2000
D_RANGE = (4, 1024)
N_RANGE = (2, 10_000_000)
MIN_SEEDS = 2
RULE_FROM = 64  # the decision rule reads the measured d >= 64
SUPPORT_GAP, CONTRADICT_GAP = 0.05, 0.10
OPT_BAND = (1.8, 2.2)  # c_opt inside this at the two largest d: supported
LP_TIME_LIMIT = 120.0  # seconds per LP
LP_SEEDS = 10
GRID = {
    "small": {"dims": (8, 16, 32, 64, 128), "seeds": 40, "list_seeds": 20, "lp_dims": (8,)},
    "large": {"dims": (8, 16, 32, 64, 128, 256, 512), "seeds": 40, "list_seeds": 20,
              "lp_dims": (8, 12, 16, 24, 32)},
}
LIST_MAX_D = 256  # listwise thresholds are measured up to this d
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
                                  "list_all": listwise_all}


# ---- the threshold estimator ---------------------------------------------------------------------

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
        if self.criterion.startswith("list"):
            out["list_size"] = list_size(math.floor(self.median))
            out["top1_point"] = out["list_size"] == 1  # a list of one is top-1
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


def measure(criterion: str, d: int, seeds: int, seed: int, n_max: int,
            rng: np.random.Generator) -> Threshold:
    """Each seed's largest passing n under `criterion` at dimension d by doubling and bisection
    (the memory at n holds the seed's first n pairs), and the median over seeds with its
    bootstrap interval. Exact for a criterion that, once lost, stays lost; full recall is not
    such a criterion (a seed can lose and regain it), so the top-1 thresholds are measured as
    probabilities instead (`thresholds`)."""
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


def probit_self_test(seed: int, seeds: int = 40, n_half: float = 100.0, width: float = 0.2
                     ) -> dict[str, Any]:
    """The probit fit on outcomes with a known curve: each seed's latent threshold is
    n_half exp(width z), z ~ N(0, 1), and it succeeds at n when n <= its threshold, so
    P(n) = Phi((ln n_half - ln n) / width) exactly. The fit's interval must hold n_half."""
    rng = np.random.default_rng([seed, 71])
    tau = n_half * np.exp(width * rng.standard_normal(seeds))
    grid = thresholds.geometric_grid(n_half, (0.5, 1.7), 1.03)
    succ = (grid[None, :] <= tau[:, None]).astype(int)
    ln = np.log(grid.astype(float))
    a, b = thresholds.probit_fit(ln, succ.sum(0)[None, :], np.full((1, len(grid)), seeds))
    mult = rng.multinomial(seeds, np.full(seeds, 1.0 / seeds), size=thresholds.BOOTSTRAP)
    ab, bb = thresholds.probit_fit(ln, mult @ succ, mult.sum(1)[:, None] * np.ones(len(grid)))
    boot = thresholds.n_half_of(ab, bb)
    lo, hi = float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))
    fit = float(thresholds.n_half_of(a, b)[0])
    return {"true_n_half": n_half, "n_half": fit, "lo": lo, "hi": hi,
            "slope": float(b[0]), "true_slope": -1 / width, "ok": lo <= n_half <= hi}


def gap(pred: float, row: dict[str, Any]) -> float:
    """Distance from the prediction to the measured interval, over the measured n_1/2."""
    lo, hi = row["n_half_lo"], row["n_half_hi"]
    return 0.0 if lo <= pred <= hi else min(abs(pred - lo), abs(pred - hi)) / row["n_half"]


def rule(measured: list[dict[str, Any]], predicted: list[dict[str, Any]]) -> dict[str, Any]:
    """The decision rule (module docstring, item 3) for one criterion."""
    pred = {p["d"]: p["n_half"] for p in predicted}
    gaps = {r["d"]: gap(pred[r["d"]], r) for r in measured}
    used = {d: g for d, g in gaps.items() if d >= RULE_FROM}
    if any(g > CONTRADICT_GAP for g in used.values()):
        word = "contradicted"
    elif len(used) >= 2 and all(g <= SUPPORT_GAP for g in used.values()):
        word = "supported"
    else:
        word = "not decided"
    return {"verdict": word, "gaps": gaps, "rule_dims": sorted(used),
            "rule": f"over d >= {RULE_FROM}: every gap <= {SUPPORT_GAP} (>= 2 d) supported; "
                    f"a gap > {CONTRADICT_GAP} contradicted; else not decided"}


def optimal_rule(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The optimal memory's rule (module docstring, item 4)."""
    done = [r for r in rows if "n_star" in r]
    top = sorted(done, key=lambda r: r["d"])[-2:]
    inside = len(top) == 2 and all(OPT_BAND[0] <= r["c_lo"] and r["c_hi"] <= OPT_BAND[1]
                                   for r in top)
    return {"verdict": "supported" if inside else "not decided at these d",
            "rule_dims": [r["d"] for r in top],
            "rule": f"c_opt's intervals at the two largest d inside {list(OPT_BAND)}: supported;"
                    f" else not decided at these d"}


def measure_optimal(d: int, seeds: int, seed: int, time_limit: float,
                    rng: np.random.Generator) -> dict[str, Any]:
    """The optimal memory's capacity per seed at d, the median with its interval, c_opt, and
    what the LPs cost; {"d", "not_finished"} when an LP hits its time limit."""
    log = optimal_memory.LPLog()
    start = time.process_time()
    caps = []
    guess = max(2, int(d * d / (1.5 * math.log(max(d * d, 3)))))
    try:
        for s in range(seeds):
            cap, censored = optimal_memory.capacity(d, s, seed, guess, 4 * d * d, time_limit,
                                                    log)
            if censored:
                raise RecallLabError(f"the optimal memory at d = {d} held all {4 * d * d} pairs")
            caps.append(cap)
            guess = int(np.median(caps))
    except optimal_memory.NotFinished as err:
        return {"d": d, "not_finished": str(err), "seeds_done": len(caps),
                "cpu_seconds": time.process_time() - start}
    med, lo, hi, _ = median_interval(caps, rng)
    return {"d": d, "seeds": seeds, "capacities": caps, "n_star": med, "n_star_lo": lo,
            "n_star_hi": hi, "c": constant(med, d), "c_lo": constant(hi, d),
            "c_hi": constant(lo, d), "lps": log.lps, "largest_lp_rows": log.max_rows,
            "cpu_seconds": time.process_time() - start,
            "slowest_feasibility_s": max(log.per_n.values(), default=0.0)}


def flat(ths: Sequence[Threshold]) -> bool | None:
    """The ratios n*/d^2 share a point: the largest lower bound <= the smallest upper bound.
    None without thresholds (every d asked for is above LIST_MAX_D, e.g. `--d 512` alone)."""
    if not ths:
        return None
    return max(t.lo / t.d**2 for t in ths) <= min(t.hi / t.d**2 for t in ths)


# ---- inputs and the check ------------------------------------------------------------------------

def plan(scale: str, dims: Sequence[int] | None = None, n_max: int | None = None,
         seeds: int | None = None, lp_time_limit: float | None = None) -> dict[str, Any]:
    """The grid a run will measure, after refusing bad input (one `RecallLabError`)."""
    if scale not in GRID:
        raise RecallLabError(f"unknown scale {scale!r}; choose from {', '.join(GRID)}")
    grid = dict(GRID[scale])
    if dims:
        bad = [d for d in dims if isinstance(d, bool) or not isinstance(d, int)
               or not D_RANGE[0] <= d <= D_RANGE[1]]
        if bad:
            raise RecallLabError(f"--d must be an integer in [{D_RANGE[0]}, {D_RANGE[1]}], "
                                 f"got {bad[0]!r}")
        grid["dims"] = tuple(sorted(set(dims)))
        grid["lp_dims"] = tuple(d for d in grid["dims"] if d in grid["lp_dims"])
    if seeds is not None:
        if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < MIN_SEEDS:
            raise RecallLabError(f"--seeds must be an integer >= {MIN_SEEDS}, got {seeds!r}")
        grid["seeds"] = grid["list_seeds"] = seeds
    if lp_time_limit is not None and not (isinstance(lp_time_limit, (int, float))
                                          and 0 < lp_time_limit < math.inf):
        raise RecallLabError(f"--lp-time-limit must be a positive number of seconds, "
                             f"got {lp_time_limit!r}")
    grid["lp_time_limit"] = float(lp_time_limit or LP_TIME_LIMIT)
    if n_max is not None and not N_RANGE[0] <= n_max <= N_RANGE[1]:
        raise RecallLabError(f"--n-max must lie in [{N_RANGE[0]:,}, {N_RANGE[1]:,}], "
                             f"got {n_max:,}")
    # per d: the most pairs any search or grid reaches; the default is past every threshold
    grid["n_max"] = {d: n_max or 2 * d * d for d in grid["dims"]}
    need = max(4 * 8 * n * d + 8 * _CHUNK * n for d, n in grid["n_max"].items())
    check_fits(need, f"linear_memory's pairs at n_max = {max(grid['n_max'].values()):,}",
               "lower --n-max or --d")
    return grid


def validate(scale: str = "small", dims: Sequence[int] | None = None,
             n_max: int | None = None, seeds: int | None = None,
             lp_time_limit: float | None = None) -> None:
    """Refuse bad input (unknown scale, d, n or seeds out of range, a size that does not fit)."""
    plan(scale, dims, n_max, seeds, lp_time_limit)


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def check(scale: str = "small", seed: int = 0, dims: Sequence[int] | None = None,
          n_max: int | None = None, seeds: int | None = None,
          lp_time_limit: float | None = None) -> Evidence:
    """Measure the thresholds and apply the rules (module docstring); PASS when the estimators'
    self-tests pass, the findings in words beside it."""
    start, cpu = time.perf_counter(), time.process_time()
    grid = plan(scale, dims, n_max, seeds, lp_time_limit)
    rng = np.random.default_rng([seed, 1])
    n_seeds = grid["seeds"]
    measured: dict[str, list[dict[str, Any]]] = {c: [] for c in memory_prediction.CRITERIA}
    for d in grid["dims"]:
        for crit in memory_prediction.CRITERIA:
            th = thresholds.measure(crit, d, n_seeds, seed, grid["n_max"][d], rng)
            measured[crit].append(th.summary(rng))
    predicted = memory_prediction.predictions(grid["dims"])
    rules = {c: rule(measured[c], predicted[c]) for c in memory_prediction.CRITERIA}
    pair, every = [], []
    for d in grid["dims"]:
        if d <= LIST_MAX_D:
            pair.append(measure("list_pair", d, grid["list_seeds"], seed, grid["n_max"][d], rng))
            every.append(measure("list_all", d, grid["list_seeds"], seed, grid["n_max"][d], rng))
    optimal, unfinished = [], []
    for d in grid["lp_dims"]:
        row = measure_optimal(d, min(LP_SEEDS, n_seeds), seed, grid["lp_time_limit"], rng)
        optimal.append(row)
        if "not_finished" in row:
            unfinished.append(row["not_finished"])
            break  # a larger d takes longer
    opt_rule = optimal_rule(optimal)
    synth, probit = synthetic_check(seed), probit_self_test(seed)

    def line(crit: str) -> str:
        pred = {p["d"]: p["n_half"] for p in predicted[crit]}
        return ", ".join(f"d={r['d']}: {_fmt(r['n_half'])} [{_fmt(r['n_half_lo'])}, "
                         f"{_fmt(r['n_half_hi'])}] ({_fmt(pred[r['d']])})" for r in measured[crit])

    lost = ", ".join(f"d={r['d']}: {_fmt(r['first_failure']['median'])} / "
                     f"{_fmt(r['last_success']['median'])}" for r in measured["all_pairs"])
    opt_text = "; ".join(
        f"d={r['d']}: {r['not_finished']}" if "not_finished" in r else
        f"d={r['d']}: n* {_fmt(r['n_star'])} [{_fmt(r['n_star_lo'])}, {_fmt(r['n_star_hi'])}], "
        f"c_opt {r['c']:.2f} [{r['c_lo']:.2f}, {r['c_hi']:.2f}]" for r in optimal)
    pair_flat = flat([t for t in pair if list_size(math.floor(t.median)) > 1] or pair)
    limits = predicted["limits"]
    finding = (f"all pairs (limit {limits['all_pairs']:g}): {rules['all_pairs']['verdict']}; "
               f"single query (limit {limits['single_query']:g}): "
               f"{rules['single_query']['verdict']}; optimal memory (c = 2): "
               f"{opt_rule['verdict']}"
               )
    return Evidence(
        name="linear_memory",
        statement=("arXiv 2605.05189: top-1 needs d^2 ~ n log n; the correlation matrix's "
                   "all-pairs and single-query n_1/2 against finite-d predictions (limits 8, 2); "
                   "the optimal memory against p ln p = d^2/2 (arXiv 2605.10795)"),
        checked=(f"correlation-matrix memory, Gaussian pairs, d in {list(grid['dims'])}, "
                 f"{n_seeds} seeds on a grid of n, probit n_1/2; optimal memory (LP) at d in "
                 f"{list(grid['lp_dims'])}; rules written before the runs; self-tests of the "
                 f"estimators"),
        measured=(f"all pairs n_1/2 [95%] (prediction): {line('all_pairs')}; first failure / "
                  f"last success medians: {lost}; single query n_1/2: {line('single_query')}; "
                  f"optimal memory: {opt_text or 'not run'}; self-tests: bisection exact "
                  f"{synth['exact']}, probit interval holds the known n_1/2 {probit['ok']}"),
        passed=bool(synth["ok"] and probit["ok"]),
        finding=finding,
        incomplete=unfinished,
        details={"all_pairs": measured["all_pairs"], "single_query": measured["single_query"],
                 "predicted": predicted, "rules": rules, "optimal": optimal,
                 "optimal_rule": opt_rule,
                 "listwise_per_pair": [t.summary() for t in pair],
                 "listwise_all": [t.summary() for t in every],
                 "listwise_flat": pair_flat,
                 "listwise_expected_ratio": 1 / float(stats.norm.ppf(1 - F_LIST)) ** 2,
                 "f": F_LIST, "synthetic": synth, "probit_self_test": probit,
                 "seeds": n_seeds, "n_max": grid["n_max"],
                 "cpu_seconds": time.process_time() - cpu},
        seconds=time.perf_counter() - start,
    )
