"""The optimal linear memory's top-1 capacity: does *some* d x d matrix W recall every pair?

Pairs as in `thresholds` (x_i, y_i i.i.d. N(0, I_d)). Some W recalls all n pairs top-1 iff the
max-margin problem

    maximise t  subject to  (y_j - y_c)^T W x_j >= t  for every j and c != j,
                            -1 <= W_ab <= 1,  t <= 1

has t* > 0 (scale any strict solution into the box). It has n (n - 1) constraints of d^2 + 1
dense coefficients each, too many to hand to an LP solver at d = 32, so it is solved by
constraint generation, which is exact both ways:

- solve the LP on a subset of the constraints (scipy's HiGHS); its optimum t_R bounds t* above;
- t_R <= `TOL`: infeasible, certified by the subset alone (dropping constraints can only raise t);
- else check the subset's W on all n (n - 1) constraints: all margins > 0 certifies feasibility;
- else add, per query, the `ADD` constraints with the smallest margins below t_R, and repeat.

A first-order step comes first: L-BFGS on the squared hinge loss sum (1 - margin)_+^2 from the
correlation matrix. Where it reaches a W with every margin > 0, that W is the certificate and no
LP is solved. Otherwise the first subset is the 1.5 d^2 constraints with the smallest margins at
its end point (where the hinge loss's gradient lives: a certificate of infeasibility, at most
d^2 + 1 constraints, is usually among them) and each query's worst one.

A seed's capacity is exact: feasibility can only be lost as pairs are added (each pair only adds
constraints), so a certified feasible n beside a certified infeasible n + 1 pins it
(`capacity`). HiGHS stops at `time_limit` seconds per LP; a hit is recorded as "not finished",
never as a capacity. On the pairs of d = 8, 12 and 16 (3 seeds each) the capacities equal those
of plain constraint generation without the first-order step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize

from recall_lab.experiments.memory import largest_passing
from recall_lab.generators.errors import RecallLabError
from recall_lab.proofs.thresholds import PairStream

TOL = 1e-9
ADD = 8
HINGE_ITERS = 2000
SUPPORT = 1.5  # the first LP's constraints, in units of d^2
MAX_ROUNDS = 200
SEED_OFFSET = 20_000  # the optimal memory's streams are seeds 20,000 + s


class NotFinished(RecallLabError):
    """A solver time limit was hit: the capacity at this d is unknown."""


@dataclass
class LPLog:
    """What the solves cost: LPs solved, rounds, CPU seconds, the largest LP."""

    lps: int = 0
    rounds: int = 0
    seconds: float = 0.0
    max_rows: int = 0
    per_n: dict[int, float] = field(default_factory=dict)


def margins(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[n, n]: (y_j - y_c)^T W x_j for query j (rows) and target c (columns); the diagonal 0."""
    s = (x @ w.T) @ y.T  # s[j, c] = y_c^T W x_j
    return np.diag(s)[:, None] - s


def hinge_descent(x: np.ndarray, y: np.ndarray, iters: int = HINGE_ITERS
                  ) -> tuple[np.ndarray, np.ndarray]:
    """L-BFGS on sum over j, c != j of (1 - margin_jc)_+^2 from W = Y^T X scaled to unit margins
    on average. Returns (W, margins with the diagonal at +inf)."""
    n, d = x.shape
    off = ~np.eye(n, dtype=bool)

    def loss(flat: np.ndarray) -> tuple[float, np.ndarray]:
        m = margins(flat.reshape(d, d), x, y)
        g = np.where(off, np.maximum(0.0, 1.0 - m), 0.0)  # (1 - m)_+ per constraint
        # d/dW of -sum g (y_j - y_c)^T W x_j, times 2: rows u_j = rowsum_j y_j - (G Y)_j
        u = g.sum(1)[:, None] * y - g @ y
        return float((g * g).sum()), (-2.0 * (u.T @ x)).ravel()

    w0 = y.T @ x
    m0 = margins(w0, x, y)[off]
    w0 = w0 / max(float(np.mean(np.abs(m0))), 1e-12)
    res = optimize.minimize(loss, w0.ravel(), jac=True, method="L-BFGS-B",
                            options={"maxiter": iters, "gtol": 1e-12, "ftol": 0.0})
    w = res.x.reshape(d, d)
    m = margins(w, x, y)
    np.fill_diagonal(m, np.inf)
    return w, m


def feasible(x: np.ndarray, y: np.ndarray, time_limit: float = 60.0,
             log: LPLog | None = None) -> bool:
    """Whether some W recalls all n pairs top-1 (module docstring). Raises `NotFinished` when one
    LP hits `time_limit` seconds."""
    n, d = x.shape
    if n < 2:
        return True
    log = log if log is not None else LPLog()
    start = time.process_time()
    w, m = hinge_descent(x, y)
    if m.min() > 0:
        log.seconds += time.process_time() - start
        return True
    # the most violated constraints at the hinge loss's end point: about the size of a Gordan
    # certificate (at most d^2 + 1 constraints), then per query its worst one
    first = min(n * (n - 1), int(SUPPORT * d * d))
    flat_j, flat_c = np.unravel_index(np.argsort(m, axis=None)[:first], m.shape)
    active = set(zip(flat_j.tolist(), flat_c.tolist(), strict=True))
    active |= {(j, int(c)) for j, c in enumerate(np.argmin(m, axis=1))}
    cost = np.zeros(d * d + 1)
    cost[-1] = -1.0
    bounds = [(-1.0, 1.0)] * (d * d) + [(None, 1.0)]
    try:
        for _ in range(MAX_ROUNDS):
            j, c = (np.array(v) for v in zip(*sorted(active), strict=True))
            a = ((y[j] - y[c])[:, :, None] * x[j][:, None, :]).reshape(len(j), d * d)
            a_ub = np.hstack([-a, np.ones((len(j), 1))])
            res = optimize.linprog(cost, A_ub=a_ub, b_ub=np.zeros(len(j)), bounds=bounds,
                                   method="highs", options={"time_limit": time_limit})
            log.lps += 1
            log.rounds += 1
            log.max_rows = max(log.max_rows, len(j))
            if res.status == 1:
                raise NotFinished(f"not finished at d = {d}: an LP hit its {time_limit:g} s "
                                  f"time limit at n = {n}")
            if res.status != 0:
                raise RecallLabError(f"the LP at d = {d}, n = {n} failed: {res.message}")
            t = -res.fun
            if t <= TOL:
                return False
            m = margins(res.x[:-1].reshape(d, d), x, y)
            np.fill_diagonal(m, np.inf)
            if m.min() > 0:
                return True
            worst = np.argsort(m, axis=1)[:, :ADD]
            new = {(jj, int(cc)) for jj in range(n) for cc in worst[jj]
                   if m[jj, cc] < t - TOL} - active
            if not new:
                raise RecallLabError(f"constraint generation stalled at d = {d}, n = {n}")
            active |= new
        raise RecallLabError(f"constraint generation did not converge at d = {d}, n = {n} "
                             f"in {MAX_ROUNDS} rounds")
    finally:
        log.seconds += time.process_time() - start


def hinge_certified(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether the first-order step alone finds a W with every margin > 0 (a certificate of
    feasibility; False says nothing)."""
    return x.shape[0] < 2 or bool(hinge_descent(x, y)[1].min() > 0)


def capacity(d: int, s: int, seed: int, start: int, n_max: int, time_limit: float,
             log: LPLog) -> tuple[int, bool]:
    """One seed's exact optimal-memory capacity (the largest feasible n), and whether n_max was
    itself feasible (censored). Feasibility only shrinks as pairs are added, so a certified
    feasible n beside a certified infeasible n + 1 pins it: the largest n the first-order step
    certifies (doubling and bisection on its certificates), then exact checks (`feasible`)
    upward from n + 1 until one is infeasible."""
    stream = PairStream(seed, d, SEED_OFFSET + s)

    def exact(n: int) -> bool:
        t0 = time.process_time()
        ok = feasible(*stream.first(n), time_limit=time_limit, log=log)
        log.per_n[n] = max(log.per_n.get(n, 0.0), time.process_time() - t0)
        return ok

    n, censored = largest_passing(lambda k: hinge_certified(*stream.first(k)), start, n_max)
    if censored:
        return n, True
    while exact(n + 1):
        n += 1
        if n >= n_max:
            return n, True
    return n, False
