"""What one seed at the best lr hides: zoology's way of reporting a cell, computed for every seed.

zoology's figures report, per cell, one training seed at the best of a grid of learning rates.
Given a group's runs at several lrs and several seeds (a report group: `report.aggregate`), this
module takes each seed that finished at *every* lr in turn as if it were the only one, picks its
lr as zoology does (the best held-out accuracy among that seed's runs) and reads the reported
metric there: one "zoology point" per seed. Their spread across seeds (min, median, max, and how
many reach the solve threshold) is how far a one-seed point can move; the lab's own answer for
the same runs (the lr chosen once for all seeds on their mean held-out metric, and the seeds
solved there with a Wilson interval) stands beside it.

Here the lr is picked on the validation twin of the metric and the point read on the test
metric; zoology picks and reads on one held-out set, which can only raise its point.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from recall_lab.experiments import stats


@dataclass
class SeedPoint:
    """One seed as zoology would report it: its value at every lr, the lr its own held-out
    metric picks, and the reported metric there."""

    seed: int
    by_lr: dict[float, float]  # lr -> reported metric (test)
    valid_by_lr: dict[float, float]  # lr -> the metric's validation twin (picks the lr)
    lr: float
    value: float


@dataclass
class BestOfLr:
    label: str
    lrs: list[float]
    points: list[SeedPoint] = field(default_factory=list)  # seeds finished at every lr
    partial: list[int] = field(default_factory=list)  # seeds missing at some lr: left out
    solve_at: float = stats.SOLVE_AT
    lower: bool = False  # a loss: lower is better
    lab_lr: float | None = None  # the report's lr (best mean held-out metric over seeds)
    lab_solved: stats.SolveRate = field(default_factory=lambda: stats.wilson(0, 0))
    lab_mean: float | None = None

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]

    @property
    def spread(self) -> tuple[float, float, float] | None:
        """(min, median, max) of the zoology points over seeds; None without a point."""
        xs = self.values
        return (min(xs), statistics.median(xs), max(xs)) if xs else None

    @property
    def points_solved(self) -> int:
        return sum(stats.is_solved(x, self.solve_at, self.lower) for x in self.values)

    def solved_at(self, lr: float) -> int:
        """How many of these seeds solved at `lr`: the window a one-seed point does not show."""
        return sum(stats.is_solved(p.by_lr[lr], self.solve_at, self.lower) for p in self.points)


def _pick(valid_by_lr: dict[float, float], lower: bool) -> float:
    """The lr with the best held-out metric; a tie goes to the smaller lr (sorted order)."""
    best = None
    for lr in sorted(valid_by_lr):
        v = valid_by_lr[lr]
        if best is None or (v < valid_by_lr[best] if lower else v > valid_by_lr[best]):
            best = lr
    assert best is not None
    return best


def best_of_lr(groups: list, metric: str, solve_at: float) -> list[BestOfLr]:
    """One `BestOfLr` per group that ran more than one lr. `groups`: report.py's `Group`s (not
    imported here: report.py imports this module, and imports point one way)."""
    split, _, leaf = metric.partition(".")
    select, lower = f"valid.{leaf}", leaf == "loss"
    out = []
    for g in groups:
        lrs = sorted({r.config.get("train.lr") for r in g.runs
                      if r.config.get("train.lr") is not None})
        if len(lrs) < 2:
            continue
        seeds: dict[int, dict[float, tuple[float, float]]] = {}
        for r in g.runs:
            test, valid = r.metric(metric), r.metric(select)
            if r.status == "done" and test is not None and valid is not None:
                seeds.setdefault(int(r.config.get("train.seed", 0)), {})[
                    r.config["train.lr"]] = (test, valid)
        every = {r.config.get("train.seed", 0) for r in g.runs}
        res = BestOfLr(g.label, lrs, solve_at=solve_at, lower=lower, lab_lr=g.best_lr,
                       lab_solved=g.solved, lab_mean=g.mean)
        for seed in sorted(every):
            got = seeds.get(int(seed), {})
            if set(got) != set(lrs):
                res.partial.append(int(seed))
                continue
            valid = {lr: v for lr, (_, v) in got.items()}
            lr = _pick(valid, lower)
            res.points.append(SeedPoint(int(seed), {lr_: t for lr_, (t, _) in got.items()},
                                        valid, lr, got[lr][0]))
        out.append(res)
    return out


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def lines(results: list[BestOfLr], metric: str) -> list[str]:
    """The comparison in words, one block per group (markdown list lines)."""
    out = []
    for b in results:
        n = len(b.points)
        head = (f"**{b.label}**: {n} seed{'s' if n != 1 else ''} finished at all "
                f"{len(b.lrs)} lrs ({', '.join(_g(lr) for lr in b.lrs)})")
        if b.partial:
            head += f"; seeds {', '.join(map(str, b.partial))} left out (not at every lr)"
        out.append(f"- {head}")
        if not n:
            continue
        each = ", ".join(f"seed {p.seed} {p.value:.3f} (lr {_g(p.lr)})" for p in b.points)
        out.append(f"  - one seed at its own best lr, as zoology reports a cell ({metric}): "
                   f"{each}")
        lo, med, hi = b.spread
        out.append(f"  - across the {n} seeds that one-seed point ranges from {lo:.3f} to "
                   f"{hi:.3f} (median {med:.3f}, range {hi - lo:.3f}); {b.points_solved} of {n} "
                   f"points reach {b.solve_at:g}")
        window = ", ".join(f"lr {_g(lr)} {b.solved_at(lr)}/{n}" for lr in b.lrs)
        out.append(f"  - seeds solved at each lr, the same {n} seeds: {window}")
        picks = sorted({p.lr for p in b.points})
        out.append(f"  - the seeds' own picks: lr {', '.join(_g(lr) for lr in picks)}; the "
                   f"lab's report picks lr {_g(b.lab_lr)} for all seeds (best mean held-out "
                   f"metric) and finds {b.lab_solved.text()} solved (Wilson "
                   f"{b.lab_solved.confidence:.0%}), mean {_g(b.lab_mean)}")
    return out


def markdown(results: list[BestOfLr], metric: str) -> str:
    body = lines(results, metric) or ["- no group ran more than one lr"]
    tables: list[str] = []
    for b in results:  # one table per group: groups may have run different lrs
        if not b.points:
            continue
        tables += ["", f"**{b.label}**", "",
                   "| seed | " + " | ".join(f"lr {_g(lr)}" for lr in b.lrs)
                   + " | picked lr | point |",
                   "| ---: | " + " | ".join("---:" for _ in b.lrs) + " | ---: | ---: |"]
        tables += [f"| {p.seed} | " + " | ".join(f"{p.by_lr[lr]:.3f}" for lr in b.lrs)
                   + f" | {_g(p.lr)} | {p.value:.3f} |" for p in b.points]
    return "\n".join(["# What one seed at the best lr hides", "",
                      "zoology's figures report each cell as one seed at the best lr of a grid. "
                      "Here each seed that finished at every lr is taken in turn as that one "
                      "seed: its lr is the one with its best held-out metric, its point the "
                      f"reported metric ({metric}) there.", "", *body, *tables]) + "\n"


def to_json(results: list[BestOfLr]) -> list[dict]:
    return [{"label": b.label, "lrs": b.lrs, "partial_seeds": b.partial,
             "solve_at": b.solve_at, "points": [
                 {"seed": p.seed, "lr": p.lr, "value": p.value,
                  "by_lr": {str(k): v for k, v in p.by_lr.items()},
                  "valid_by_lr": {str(k): v for k, v in p.valid_by_lr.items()}}
                 for p in b.points],
             "spread": list(b.spread) if b.spread else None, "points_solved": b.points_solved,
             "solved_by_lr": {str(lr): b.solved_at(lr) for lr in b.lrs},
             "lab_lr": b.lab_lr, "lab_mean": b.lab_mean,
             "lab_solved": {"k": b.lab_solved.k, "n": b.lab_solved.n, "lo": b.lab_solved.lo,
                            "hi": b.lab_solved.hi}}
            for b in results]
