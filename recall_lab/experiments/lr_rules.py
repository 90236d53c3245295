"""The lr ladder and the lr pilot's rule 2: pure functions that `lr_window` (the window over
a ladder) and `place` (the pilot) share.

- The ladder: half-decade steps (1 and 3 alternate within a decade: 3e-4, 1e-3, 3e-3, ...),
  grown by half a decade on the side where the best lr sits at an end, never past BOUNDS
  (1e-4, 1e-1); a bound that stops it is said.
- Pilot rule 2, for new placements: 2 seeds per lr (PILOT_SEEDS), the lrs ranked by their mean
  held-out accuracy by `reference.pick_lr`'s written rule, an edge winner extending the grid
  as the ladder grows; the placement's boundary table, where the window is measured.
"""

from __future__ import annotations

import json
import math

from recall_lab.experiments import stats
from recall_lab.experiments.reference import PILOT_SEEDS as PILOT_SEEDS  # re-exported
from recall_lab.experiments.reference import pick_lr
from recall_lab.generators.errors import RecallLabError

LADDER = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)  # half-decade steps
BOUNDS = (1e-4, 1e-1)  # the ladder never grows past these
_EPS = 1e-9


def beyond(lr: float, bounds: tuple[float, float] = BOUNDS) -> bool:
    """Whether `lr` lies outside `bounds` (up to rounding)."""
    return lr < bounds[0] * (1 - _EPS) or lr > bounds[1] * (1 + _EPS)


def check_ladder(lrs: list[float]) -> list[float]:
    """The ladder as given, or one clear line: positive, finite and strictly increasing."""
    lrs = [float(x) for x in lrs]
    if not lrs:
        raise RecallLabError("the lr ladder is empty: give --lrs, e.g. 3e-4,1e-3,3e-3")
    for x in lrs:
        if not math.isfinite(x) or x <= 0:
            raise RecallLabError(f"the lr ladder holds {x:g}: every lr must be positive")
    for a, b in zip(lrs, lrs[1:], strict=False):
        if b <= a:
            raise RecallLabError(f"the lr ladder must be sorted from small to large with no lr "
                                 f"twice: {b:g} follows {a:g}")
    return lrs


def half_decade(lr: float, side: int) -> float:
    """The lr half a decade below (side -1) or above (+1): 1 and 3 alternate within a decade
    (1e-3 -> 3e-3 -> 1e-2); an lr off that series moves by sqrt(10), to 2 significant
    digits."""
    e = math.floor(math.log10(lr) + _EPS)
    m = lr / 10 ** e
    if abs(m - 1) < 1e-6:
        return float(f"{3 * 10 ** (e - 1) if side < 0 else 3 * 10 ** e:.6g}")
    if abs(m - 3) < 1e-6:
        return float(f"{10 ** e if side < 0 else 10 ** (e + 1):.6g}")
    return float(f"{lr * 10 ** (0.5 * side):.2g}")


def grow(ladder: list[float], best: float | None,
         bounds: tuple[float, float] = BOUNDS) -> tuple[list[float], str | None]:
    """The ladder grown by half a decade on the side where `best` sits at its end (the lower
    end first where the ladder has one lr), and what happened in words; None where the best is
    inside (or there is none)."""
    if best is None or best not in (ladder[0], ladder[-1]):
        return ladder, None
    side = -1 if best == ladder[0] else 1
    nxt = half_decade(best, side)
    lo, hi = bounds
    end = "lower" if side < 0 else "upper"
    if beyond(nxt, bounds):
        bound = lo if side < 0 else hi
        return ladder, (f"the best lr {best:g} is at the ladder's {end} end and the bound "
                        f"{bound:g} stops the ladder there ({nxt:g} is outside it)")
    new = [nxt, *ladder] if side < 0 else [*ladder, nxt]
    return new, f"the best lr {best:g} was at the ladder's {end} end: {nxt:g} added"


# ---- pilot rule 2 (for new placements) ----------------------------------------------------------

# rule 2's two seeds per pilot lr: reference.PILOT_SEEDS (a place.toml may declare rule 2)


def pilot_rule_2(accs: dict[float, list[float | None]], tie: float,
                 bounds: tuple[float, float] = BOUNDS) -> dict:
    """The pilot's rule, version 2, on its runs' held-out accuracies (lr -> one per seed, None
    for a run not finished): each lr's mean over its seeds (None until all finished), the lr
    picked from the means by `reference.pick_lr`'s written rule (the best mean; a difference
    below `tie` is a tie, and a tie goes to the smaller lr), whether it is interior, and, where
    it is at an end of the grid, the lr that extends the grid there (`grow`: half a decade,
    within `bounds`) or the bound that stops it. `extend` is None once the winner is interior
    or a bound stops the grid: the pilot is then done. One seed per lr reads rule 1's pilot the
    same way (its pick unchanged: the mean of one accuracy is that accuracy)."""
    grid = sorted(accs)
    means = {lr: (sum(v) / len(v) if v and all(x is not None for x in v) else None)
             for lr, v in ((lr, accs[lr]) for lr in grid)}
    lr = pick_lr(means, tie)
    grown, note = grow(grid, lr, bounds)
    added = [x for x in grown if x not in grid]
    return {"rule": 2, "accs": {lr: list(accs[lr]) for lr in grid}, "means": means, "lr": lr,
            "interior": lr is not None and lr not in (grid[0], grid[-1]),
            "extend": added[0] if added else None, "note": note,
            "bounded": note is not None and not added}


def boundary_table(cells: dict[float, stats.SolveRate]) -> float | None:
    """The placement's boundary table (where `place --lr-window` measures the window): the
    largest table with some but not all of its seeds solved; where every table is all or
    nothing, the smallest table not solved in every seed (the first past the frontier); None
    where every table is solved in every seed."""
    some = [size for size, r in cells.items() if r.n and 0 < r.k < r.n]
    if some:
        return max(some)
    short = [size for size, r in cells.items() if r.n and r.k < r.n]
    return min(short) if short else None


def pilot_lines(pilot: dict, mixer: str, kwargs: dict | None, table: float | None) -> list[str]:
    """What a placement's report says of its pilot under rule 2: each lr's accuracies and mean,
    whether the winner is interior, and, where it is not, the lr-window command at the
    boundary table."""
    each = "; ".join(
        f"{lr:g}: " + (f"{m:.3f}" if m is not None else "-") + " ("
        + ", ".join("-" if a is None else f"{a:.3f}" for a in pilot["accs"][lr]) + ")"
        for lr, m in pilot["means"].items())
    out = [f"pilot, rule 2 (mean held-out accuracy over {max(map(len, pilot['accs'].values()))} "
           f"seeds per lr): {each}"]
    lr = pilot["lr"]
    if lr is None:
        return [*out, "no pilot lr finished"]
    if pilot["interior"]:
        return [*out, f"lr {lr:g}: interior (a grid lr on each side scored lower)"]
    side = "lower" if lr == min(pilot["means"]) else "upper"
    out.append(f"lr {lr:g}: at the grid's {side} end"
               + (f" ({pilot['note']})" if pilot["note"] else ""))
    if table is not None:
        args = f" --kwargs '{json.dumps(kwargs)}'" if kwargs else ""
        out.append(f"the verdicts may be about the lr: measure the window at the boundary "
                   f"table, recall-lab lr-window {mixer}{args} --table {table:g}")
    return out
