"""Claims evaluated and settled: one module for `report` (`report --check`) and `place`.

Claims have three jobs, one module each: registration before the runs (`claims.py`), evaluation
and settlement (here), and rendering (`report.py`, `place.py`). This module reads a report's
groups (`report.aggregate`) and decides, per claim, "pass", "fail" or "open", and whether a claim
whose runs have not all finished is already *settled*: no outcome of its unfinished runs can
change its verdict (`_settled`: every count of the unfinished seeds that could solve, or the two
ends of a frontier).

On top of the pass / fail claims of experiment files, `three_way` gives the verdict `place`
writes before its runs: a's seeds solved against b's are **more** or **fewer** (one-sided Fisher
at `level` in that direction) or **not separable**; never a pass on "no difference found". It is
the two one-sided claims (op ">" and "<") evaluated and settled as above. `frontier_compare`
sets two rows' frontier ranges (the frontiers their seeds' Wilson intervals allow) side by side:
beyond, short of, or not separable, settled by the two ends of each unfinished cell (the range's
ends only grow as more seeds solve).
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field
from typing import Any

from recall_lab.experiments import claims as prereg
from recall_lab.experiments import stats
from recall_lab.experiments.grid import flatten, numeric
from recall_lab.generators.errors import RecallLabError

# report.py's Group, by name only: report.py (and engine.py, which checks claims before a sweep)
# import this module, and imports point one way
Group = Any

OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
# The named comparisons of seeds solved (stat = "solved" only), beside the symbols, which keep
# their spelling and meaning (a claim's registration hash includes its op): "more" / "fewer" are
# the one-sided Fisher tests of ">" / "<"; "rate at least" / "rate at most" the Wilson bounds of
# ">=" / "<=" against a value; "as many" (within `margin`) is a non-inferiority test that no
# symbol spells. Means, frontiers and log-rank claims keep the symbols: a mean or a frontier is
# one number compared with another (no test across seeds), and the log-rank's < / > read as
# "sooner" / "later" in their printed line.
NAMED = {"more": ">", "fewer": "<", "as many": None, "rate at least": ">=", "rate at most": "<="}
AGAINST_B = ("more", "fewer", "as many")
WORDS = {">=": "at least", ">": "more than", "<=": "at most", "<": "less than"}


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _select(groups: list[Group], selector: dict, what: str) -> Group:
    sel = flatten(selector)
    found = [g for g in groups
             if all(_key(g.runs[0].config.get(f)) == _key(v) for f, v in sel.items())]
    if len(found) != 1:
        raise RecallLabError(f"{what} {sel} matches {len(found)} groups, not one")
    return found[0]


STATS = ("mean", "solved", "frontier", "logrank")
TESTS = {">": "greater", ">=": "greater", "<": "less", "<=": "less", "~": "two-sided",
         "more": "greater", "fewer": "less"}


def ops_for(stat: str) -> tuple[str, ...]:
    """The ops a claim of `stat` takes."""
    return (*OPS, *(("~",) if stat in ("solved", "logrank") else ()),
            *(NAMED if stat == "solved" else ()))


def validate(e: dict, stat: str, op: str) -> None:
    """One clear line for an op that does not fit the claim's stat or its other keys."""
    if op not in ops_for(stat):
        if op in NAMED:
            raise RecallLabError(f"op {op!r} is for stat = 'solved'; stat = {stat!r} takes "
                                 f"{', '.join(ops_for(stat))}")
        raise RecallLabError(f"stat = {stat!r} takes op {', '.join(ops_for(stat))}; got {op!r}")
    if stat == "logrank" and ("value" in e or "margin" in e):
        raise RecallLabError("stat = 'logrank' compares two groups: give b, no value or margin")
    if op == "~" and "b" not in e:
        raise RecallLabError("op '~' (no difference detected) compares two groups: give b, not "
                             "value")
    if stat != "solved":
        return
    if op in AGAINST_B and "b" not in e:
        raise RecallLabError(f"op {op!r} compares a with a group: give b, not value (a rate "
                             "against a number: op = 'rate at least' or 'rate at most')")
    if op in ("rate at least", "rate at most") and "value" not in e:
        raise RecallLabError(f"op {op!r} compares a's solve rate with a number: give value, not "
                             "b (a against a group: op = 'more', 'fewer' or 'as many')")
    if op == "as many":
        m = e.get("margin")
        if m is None:
            raise RecallLabError("op 'as many' needs margin: how much lower a's solve rate may "
                                 "be than b's and still count, a fraction (e.g. margin = 0.2)")
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 < m < 1:
            raise RecallLabError(f"margin of op 'as many' must be a fraction between 0 and 1, "
                                 f"got {m!r}")
    elif "margin" in e:
        raise RecallLabError("margin is for op = 'as many' only: the other solve-rate ops are "
                             "decided by their test")
    if "value" in e and op != "~":
        v = e["value"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            raise RecallLabError(f"value of a solve-rate claim is a rate between 0 and 1, "
                                 f"got {v!r}")


def check_spec(e: dict) -> None:
    """A claim's table read without any run: its keys, b or value, stat and op (one clear line
    for the first problem). `evaluate_claim` calls it, and `sweep` before the claims are
    registered, so a claim that could never be checked is refused before any run."""
    if not isinstance(e, dict):
        raise RecallLabError(f"a claim is a table ([[report.expect]]), got {e!r}")
    unknown = set(e) - {"claim", "a", "b", "value", "op", "margin", "at", "stat", "level"}
    if unknown:
        raise RecallLabError(f"unknown key {sorted(unknown)[0]!r}")
    if ("b" in e) == ("value" in e):
        raise RecallLabError("give b (a group) or value (a number), not both")
    stat = e.get("stat", "mean")
    if stat not in STATS:
        raise RecallLabError(f"stat must be one of {', '.join(STATS)}, got {stat!r}")
    validate(e, stat, e.get("op", ">="))


def _pct(x: float) -> str:
    return f"{x:.0%}"


def describe(e: dict) -> str:
    """What a claim's op tests, in words (its printed line's "tests:")."""
    stat, op = e.get("stat", "mean"), e.get("op", ">=")
    level = float(e.get("level", stats.LEVEL))
    margin = float(e.get("margin", 0.0))
    plus = f" + {margin:g}" if margin else ""
    if stat == "solved":
        op = NAMED.get(op) or op
        if "value" in e:
            v = float(e["value"])
            if op in (">=", ">"):
                return (f"a's solve rate is {'at least' if op == '>=' else 'above'} {v:g}: its "
                        f"Wilson 95% lower bound {op} {v:g}")
            return (f"a's solve rate is {'at most' if op == '<=' else 'below'} {v:g}: its "
                    f"Wilson 95% upper bound {op} {v:g}")
        if e.get("op") == "as many":
            return (f"a solves at least as many seeds as b within {margin:g} (non-inferiority): "
                    f"the Newcombe {_pct(1 - level)} interval of a's solve rate minus b's has "
                    f"its lower bound >= -{margin:g}")
        if op == "~":
            return (f"no difference detected between a's and b's seeds solved: two-sided "
                    f"Fisher p >= {level:g} (not evidence that they are equal)")
        word = "more" if TESTS[op] == "greater" else "fewer"
        same = (f" (op {op!r} on seeds solved is this test, as {op[0]!r} is)"
                if op in (">=", "<=") else "")
        return (f"a solves significantly {word} seeds than b: one-sided Fisher exact test at "
                f"{level:g}{same}")
    if stat == "logrank":
        if op == "~":
            return (f"no difference detected in steps to solve: two-sided log-rank p >= "
                    f"{level:g} (unsolved seeds censored at their last step)")
        word = "fewer" if op in ("<", "<=") else "more"
        return (f"a solves in significantly {word} steps than b (unsolved seeds censored at "
                f"their last step): one-sided log-rank test at {level:g}")
    rhs = "b's" if "b" in e else f"{float(e['value']):g}"
    if stat == "frontier":
        return (f"a's frontier (the largest table solved in >= half its seeds) is {WORDS[op]} "
                f"{rhs}{plus}: the frontiers compared as numbers, no test")
    return (f"a's mean over its seeds is {WORDS[op]} {rhs}{plus}: the means compared as "
            "numbers, no test across seeds")


def _restrict(groups: list[Group], at: dict) -> list[Group]:
    pool = groups
    for f, want in flatten(at or {}).items():
        vals = [g.runs[0].config.get(f) for g in pool]
        if want in ("max", "min"):  # by size for task.levels (the largest table)
            ranked = [v for v in vals if numeric(f, v) is not None]
            if not ranked:
                raise RecallLabError(f"at: {f} has no numeric values for {want}")
            want = (max if want == "max" else min)(ranked, key=lambda v: numeric(f, v))
        pool = [g for g, v in zip(pool, vals, strict=True) if _key(v) == _key(want)]
    return pool


def claim_groups(groups: list[Group], claim: dict) -> list[Group]:
    """The groups a claim compares: its `a` (and `b`), each exactly one group after `at`."""
    pool = _restrict(groups, claim.get("at") or {})
    found = [_select(pool, claim["a"], "a")]
    if "b" in claim:
        found.append(_select(pool, claim["b"], "b"))
    return found


class ClaimOpen(RecallLabError):
    """A claim whose runs have not finished: neither passed nor failed yet."""


def _finished(g: Group) -> Group:
    if g.mean is None:
        raise ClaimOpen(f"{g.label} has no finished run")
    return g


def _check_mean(pool: list[Group], e: dict, op: str) -> tuple[bool, str, list[Group]]:
    a = _finished(_select(pool, e["a"], "a"))
    margin = float(e.get("margin", 0.0))
    plus = f" + {margin:g}" if margin else ""
    if "b" in e:
        b = _finished(_select(pool, e["b"], "b"))
        rhs, used = b.mean + margin, [a, b]
        head = f"{a.label} mean {a.mean:.4f} vs {b.label} {b.mean:.4f}"
        required = f"a's mean {op} b's{plus}" + (f" = {rhs:.4f}" if margin else "")
        found = f"a {a.mean:.4f}, b {b.mean:.4f}"
    else:
        rhs, used = float(e["value"]) + margin, [a]
        head = f"{a.label} mean {a.mean:.4f}"
        required = f"a's mean {op} {float(e['value']):.4f}{plus}"
        found = f"{a.mean:.4f}"
    return OPS[op](a.mean, rhs), f"{head}; required: {required}; found: {found}", used


def _check_solved(pool: list[Group], e: dict, op: str,
                  level: float) -> tuple[bool, str, list[Group]]:
    """Solve-rate claims: against a value on the Wilson interval (>=, rate at least: its lower
    bound reaches the value; <=, rate at most: its upper bound stays below), against a group by
    Fisher's exact test at `level` (>, >=, more: a solves more; <, <=, fewer: fewer; ~: no
    difference detected, two-sided) or by the Newcombe interval of the difference (as many:
    its lower bound at 1 - level stays above -margin)."""
    a = _finished(_select(pool, e["a"], "a"))
    if "value" in e:
        ok, detail = _solved_verdict(a.label, a.solved, None, None, e, op, level)
        return ok, detail, [a]
    b = _finished(_select(pool, e["b"], "b"))
    ok, detail = _solved_verdict(a.label, a.solved, b.label, b.solved, e, op, level)
    return ok, detail, [a, b]


def _solved_verdict(la: str, ra: stats.SolveRate, lb: str | None, rb: stats.SolveRate | None,
                    e: dict, op: str, level: float) -> tuple[bool, str]:
    """(verdict, "NUMBERS; required: ...; found: ...") of a solve-rate claim."""
    if op == "as many":
        return _as_many(la, ra, lb, rb, float(e["margin"]), level)
    op = NAMED.get(op) or op
    if rb is None:
        value = float(e["value"])
        if op in (">=", ">"):
            ok, bound, x = OPS[op](ra.lo, value), "lower", ra.lo
        elif op in ("<=", "<"):
            ok, bound, x = OPS[op](ra.hi, value), "upper", ra.hi
        else:
            raise RecallLabError("op '~' needs b (a group), not value")
        conf = f"Wilson {ra.confidence:.0%}"
        return ok, (f"{la} solved {ra.text()} ({conf}); required: {conf} {bound} bound {op} "
                    f"{value:g}; found: {x:.3f}")
    p = stats.fisher(ra, rb, TESTS[op])
    if op == "~":
        ok = p >= level
        required = f"no difference detected, two-sided Fisher p >= {level:g}"
    else:
        word = "more" if TESTS[op] == "greater" else "fewer"
        ok = p < level
        required = f"a solves {word}, one-sided Fisher p < {level:g}"
    return ok, f"{la} {ra.text()} vs {lb} {rb.text()}; required: {required}; found: p = {p:.3g}"


def _fisher_text(word: str, p: float, level: float) -> str:
    """One direction of `three_way`'s detail (place's report prints it)."""
    return f"{word}: Fisher one-sided p = {p:.3g} {'<' if p < level else '>='} {level:g}"


def _as_many(la: str, ra: stats.SolveRate, lb: str | None, rb: stats.SolveRate | None,
             margin: float, level: float) -> tuple[bool, str]:
    """Non-inferiority: the Newcombe interval of a's rate minus b's at 1 - level, its lower bound
    against -margin; where it fails though the observed difference is within the margin, the
    line says that the seeds are too few to show it."""
    if rb is None:
        raise RecallLabError("op 'as many' needs b (a group), not value")
    d = stats.newcombe(ra, rb, 1 - level)
    ok = d.lo >= -margin
    why = ""
    if not ok and d.diff >= -margin:
        why = (f" (the observed difference {d.diff:+.3f} is within the margin, but {ra.n} and "
               f"{rb.n} seeds leave the interval too wide to show it)")
    return ok, (f"{la} {ra.text()} vs {lb} {rb.text()}; a - b {d.diff:+.3f} [{d.lo:+.3f}, "
                f"{d.hi:+.3f}] (Newcombe {d.confidence:.0%}); required: lower bound >= "
                f"{-margin:+g}; found: {d.lo:+.3f}{why}")


def _check_logrank(pool: list[Group], e: dict, op: str,
                   level: float) -> tuple[bool, str, list[Group]]:
    """Time-to-solve claims by the log-rank test at `level`, unsolved seeds censored at their
    last step: op compares steps to solve (<, <=: a solves sooner than b; >, >=: later; ~: no
    difference detected, two-sided)."""
    if "margin" in e or "value" in e:
        raise RecallLabError("stat = 'logrank' compares two groups: give b, no value or margin")
    a = _finished(_select(pool, e["a"], "a"))
    b = _finished(_select(pool, e["b"], "b"))
    lr = stats.logrank((a.durations, a.events), (b.durations, b.events))  # needs lifelines
    medians = (f"{a.label} KM median {a.survival.median_text()} vs {b.label} "
               f"{b.survival.median_text()} steps; log-rank chi2 = {lr.chi2:.3g}")
    if op == "~":
        ok = lr.p_two >= level
        return ok, (f"{medians}; required: no difference detected, two-sided p >= {level:g}; "
                    f"found: p = {lr.p_two:.3g}"), [a, b]
    word, p = ("sooner", lr.p_sooner) if op in ("<", "<=") else ("later", lr.p_later)
    ok = p < level
    return ok, (f"{medians}; required: a solves {word}, one-sided p < {level:g}; found: "
                f"p = {p:.3g}"), [a, b]


def _completed(g: Group, extra: int) -> stats.SolveRate:
    """g's seeds solved were `extra` of its unfinished runs to end solved and the rest not."""
    r = g.solved
    return stats.wilson(r.k + extra, r.n + g.counts["missing"], r.confidence)


def table_size(g: Group) -> float | None:
    """A group's table size: the one a protocol gave it (`Group.size`), else its task.levels'
    number of entries (None: no table)."""
    return g.size if g.size is not None else numeric("task.levels", g.values.get("task.levels"))


def _frontier_of(pool: list[Group], selector: dict, what: str,
                 fill: bool | None = None) -> tuple[float, list[Group], tuple[float, float]]:
    sel = flatten(selector)
    matching = [g for g in pool
                if all(_key(g.runs[0].config.get(f)) == _key(v) for f, v in sel.items())
                and table_size(g) is not None]
    # a frontier over a cut-short sweep would be capped at the largest finished table: refuse,
    # unless `fill` says how every unfinished run ends (the bounds `_settled` tries)
    unfinished = [g.label for g in matching if g.mean is None or g.counts["missing"]]
    if unfinished and fill is None:
        raise ClaimOpen(f"{what} {sel}: unfinished runs at {', '.join(unfinished)}")
    found = matching
    if not found:
        raise RecallLabError(f"{what} {sel} matches no finished group with a task.levels axis")
    pts = [(table_size(g),
            g.solved if fill is None else _completed(g, g.counts["missing"] if fill else 0))
           for g in found]
    return stats.frontier(pts) or 0.0, found, stats.frontier_range(pts)


def _check_frontier(pool: list[Group], e: dict, op: str) -> tuple[bool, str, list[Group]]:
    """Frontier claims: the largest table (entries) solved in >= half the seeds, over the groups
    that `a` (and `b`) select across task.levels; 0 when none is."""
    fa, used, range_a = _frontier_of(pool, e["a"], "a")
    margin = float(e.get("margin", 0.0))
    plus = f" + {margin:g}" if margin else ""
    ranges = f"a {range_a[0]:g}-{range_a[1]:g}"
    head = f"frontier of {flatten(e['a'])} {fa:g}"
    if "b" in e:
        fb, used_b, range_b = _frontier_of(pool, e["b"], "b")
        used = used + used_b
        rhs = fb + margin
        head += f" vs of {flatten(e['b'])} {fb:g}"
        required = f"a's frontier {op} b's{plus}" + (f" = {rhs:g}" if margin else "")
        found = f"a {fa:g}, b {fb:g}"
        ranges += f", b {range_b[0]:g}-{range_b[1]:g}"
    else:
        rhs = float(e["value"]) + margin
        required = f"a's frontier {op} {float(e['value']):g}{plus}"
        found = f"{fa:g}"
    # the verdict reads the point frontiers (as declared); the ranges say how far one seed more
    # or less at the 50% line could move them
    detail = (f"{head}; required: {required}; found: {found}; the seeds' Wilson intervals "
              f"allow {ranges}")
    return OPS[op](fa, rhs), detail, used


def _settled(pool: list[Group], e: dict, stat: str, op: str,
             level: float) -> tuple[bool, str, list[Group]] | None:
    """A claim with unfinished runs whose verdict no outcome of those runs can change: that
    verdict, why, and the groups it read; else None. Solve-rate claims try every count of the
    unfinished seeds solving (one Fisher or Wilson check per count); frontier claims the two
    ends per row (every unfinished run solved, none), enough because a row's frontier only grows
    as more of its seeds solve and the comparison is monotone in each frontier. Only groups with
    one lr: with more, the unfinished runs could change which lr is reported. Means and log-rank
    claims stay open."""
    try:
        if stat == "solved":
            return _settled_solved(pool, e, op, level)
        if stat == "frontier" and op in OPS:
            return _settled_frontier(pool, e, op)
    except RecallLabError:  # ClaimOpen included: then the claim stays as it was
        return None
    return None


def _settled_solved(pool: list[Group], e: dict, op: str,
                    level: float) -> tuple[bool, str, list[Group]] | None:
    groups = [_select(pool, e[s], s) for s in ("a", "b") if s in e]
    if any(len(g.lrs) > 1 for g in groups):
        return None
    labels = [g.label for g in groups] + [None]
    outcomes = set()
    for extra in _counts([g.counts["missing"] for g in groups]):
        rates = [_completed(g, x) for g, x in zip(groups, extra, strict=True)]
        if any(r.n == 0 for r in rates):
            return None
        rates.append(None)
        outcomes.add(_solved_verdict(labels[0], rates[0], labels[1], rates[1], e, op,
                                     level)[0])
    if len(outcomes) != 1:
        return None
    return outcomes.pop(), "for every number of the unfinished seeds that could solve", groups


def _settled_frontier(pool: list[Group], e: dict,
                      op: str) -> tuple[bool, str, list[Group]] | None:
    ends: dict[str, tuple[float, float]] = {}
    read: list[Group] = []
    for s in ("a", "b"):
        if s in e:
            (lo, used, _), (hi, _, _) = (_frontier_of(pool, e[s], s, fill)
                                         for fill in (False, True))
            if any(len(g.lrs) > 1 for g in used):
                return None
            ends[s], read = (lo, hi), read + used
    margin = float(e.get("margin", 0.0))
    rhs = (ends["b"] if "b" in e else (float(e["value"]),) * 2)
    outcomes = {OPS[op](fa, fb + margin) for fa in ends["a"] for fb in rhs}
    if len(outcomes) != 1:
        return None
    rng = "frontier of {} between {:g} and {:g} whatever the unfinished runs give"
    text = rng.format(flatten(e["a"]), *ends["a"])
    if "b" in e:
        text += ", of {} between {:g} and {:g}".format(flatten(e["b"]), *ends["b"])
    return outcomes.pop(), text, read


def _counts(missing: list[int]) -> list[tuple[int, ...]]:
    """Every combination of how many of each group's unfinished seeds solve."""
    combos: list[tuple[int, ...]] = [()]
    for m in missing:
        combos = [c + (x,) for c in combos for x in range(m + 1)]
    return combos


@dataclass
class Evaluation:
    """One claim evaluated: `result` is `check_expectations`' dict for it; `settled` says that
    runs of its rows are unfinished and no outcome of theirs can change the verdict; `missing`
    counts those runs; `used` the groups it read."""

    result: dict
    settled: bool = False
    missing: int = 0
    used: list = field(default_factory=list)
    checked: bool = False  # its numbers were read (not "cannot check"): `used` is a (and b)
    tail: str = ""  # what follows the numbers in its detail: unfinished runs, settlement


def unfinished_text(groups: list[Group]) -> str:
    """"; 1 of its 13 runs not finished" for runs that started (a run folder or a launch on
    record) and did not finish, "not run" for runs never started: a seed nobody launched is not
    an unfinished run."""
    runs = [r for g in groups for r in g.runs]
    missing = [r for r in runs if r.status == "missing"]
    started = sum(1 for r in missing if r.launched or r.folder.exists())
    parts = [(n, what) for n, what in ((started, "not finished"),
                                       (len(missing) - started, "not run")) if n]
    if len(parts) == 1:
        return f"; {parts[0][0]} of its {len(runs)} runs {parts[0][1]}"
    return (f"; of its {len(runs)} runs, {' and '.join(f'{n} {w}' for n, w in parts)}"
            if parts else "")


def evaluate_claim(groups: list[Group], e: dict, index: int = 0,
                   registry: dict | None = None) -> Evaluation:
    """One claim of `check_expectations` (its `index` names an unnamed claim)."""
    claim = e.get("claim") or f"expectation {index + 1}"
    used: list[Group] = []
    settled_now, missing, checked, tail, tests = False, 0, False, "", None
    try:
        check_spec(e)
        stat, op = e.get("stat", "mean"), e.get("op", ">=")
        tests = describe(e)
        level = float(e.get("level", stats.LEVEL))
        pool = _restrict(groups, e.get("at") or {})
        if stat == "solved":
            ok, detail, used = _check_solved(pool, e, op, level)
        elif stat == "logrank":
            ok, detail, used = _check_logrank(pool, e, op, level)
        elif stat == "frontier":
            ok, detail, used = _check_frontier(pool, e, op)
        else:
            ok, detail, used = _check_mean(pool, e, op)
        checked = True
        missing = sum(g.counts["missing"] for g in used)
        verdict = "pass" if ok else "fail"
        if missing:  # the unfinished seeds may still turn it, unless no outcome can
            tail = unfinished_text(used)
            settled = _settled(pool, e, stat, op, level)
            verdict = "open" if settled is None else "pass" if settled[0] else "fail"
            if settled is not None:
                settled_now = True
                ok, tail = settled[0], f"{tail}; settled: {settled[1]}"
            detail += tail
    except ClaimOpen as exc:
        settled = _settled(pool, e, stat, op, level)  # pool is set before anything raises
        ok, verdict, detail = False, "open", f"cannot check yet: {exc}"
        if settled is not None:
            settled_now = True
            ok, verdict, used = settled[0], "pass" if settled[0] else "fail", settled[2]
            detail = f"{exc}; settled: {settled[1]}"
            missing = sum(g.counts["missing"] for g in used)
    except (RecallLabError, KeyError, TypeError, ValueError) as exc:
        ok, verdict, detail = False, "fail", f"cannot check: {exc}"
    done = [r for g in used for r in g.runs if r.status == "done"]
    result = {"claim": claim, "ok": bool(ok and verdict == "pass"), "verdict": verdict,
              "detail": detail, "tests": tests, "stat": e.get("stat", "mean"),
              "registered": prereg.status(e, [r.registration for r in done], registry or {},
                                          [r.launched for r in done],
                                          [r.bound for r in done])}
    return Evaluation(result, settled_now, missing, used, checked, tail)


def check_expectations(groups: list[Group], expects: list[dict],
                       registry: dict | None = None) -> list[dict]:
    """One result per claim: {"claim", "ok", "verdict", "detail", "tests", "stat",
    "registered"}; `tests` says in words what its op tests (None where the claim cannot be
    read), `detail` the numbers, then "required: ...; found: ...".
    `verdict` is "pass", "fail" (the numbers say no, or the claim cannot be evaluated: no such
    group, a bad key) or "open" (a run of its rows has not finished, so the seeds still to come
    could turn it; a claim no outcome of its unfinished runs can turn is passed or failed, and
    its detail says "settled": `_settled`); `ok` is verdict == "pass". `stat` is "mean"
    (default: the test mean, optionally + margin), "solved" (seeds solved; Wilson interval or
    Fisher test), "frontier" (largest table solved in >= half the seeds) or "logrank" (steps to
    solve, unsolved seeds censored: a solves sooner or later than b by the log-rank test). The
    ops: >=, >, <=, < for every stat, ~ (no difference detected) for the tests, and for "solved"
    the named ones (`NAMED`: more, fewer, as many, rate at least, rate at most)."""
    return [evaluate_claim(groups, e, i, registry).result for i, e in enumerate(expects)]


# ---- place's verdicts -------------------------------------------------------------------------

THREE_WAY = ("more", "fewer", "not separable")


def three_way(groups: list[Group], spec: dict) -> dict:
    """a's seeds solved against b's (`spec`: "claim", "a", "b", optional "at" and "level"):
    "more" or "fewer" where the one-sided Fisher test in that direction is below `level`, else
    "not separable"; "open" while an outcome of the unfinished seeds could still change it.
    Returns {"claim", "verdict", "settled", "final", "detail", "missing"}: `final` when every
    run of both rows finished, `settled` when some did not and the verdict holds for every
    outcome of theirs; "cannot check" where a group is missing."""
    base = {k: v for k, v in spec.items() if k in ("claim", "a", "b", "at", "level")}
    more = evaluate_claim(groups, {**base, "stat": "solved", "op": ">"})
    fewer = evaluate_claim(groups, {**base, "stat": "solved", "op": "<"})
    out = {"claim": spec.get("claim"), "missing": max(more.missing, fewer.missing)}
    if any(x.result["detail"].startswith("cannot check:") for x in (more, fewer)):
        return {**out, "verdict": "cannot check", "settled": False, "final": False,
                "detail": more.result["detail"]}
    vm, vf = more.result["verdict"], fewer.result["verdict"]
    if vm == "pass":
        verdict = "more"
    elif vf == "pass":
        verdict = "fewer"
    elif vm == "fail" and vf == "fail":
        verdict = "not separable"
    else:
        verdict = "open"
    decided = verdict != "open"
    final = decided and out["missing"] == 0
    # a's and b's seeds solved, both one-sided tests' p, then what is unfinished or settled
    detail = more.result["detail"]
    if more.checked and fewer.checked:
        a, b = more.used
        level = float(spec.get("level", stats.LEVEL))
        detail = (f"{a.label} {a.solved.text()} vs {b.label} {b.solved.text()}; "
                  f"{_fisher_text('more', stats.fisher(a.solved, b.solved, 'greater'), level)}; "
                  f"{_fisher_text('fewer', stats.fisher(a.solved, b.solved, 'less'), level)}"
                  f"{more.tail}")
    return {**out, "verdict": verdict, "settled": decided and not final, "final": final,
            "detail": detail}


def frontier_points(cells: list[Group], fill: bool | None = None
                    ) -> list[tuple[float, stats.SolveRate]]:
    """(table size, seeds solved) per cell of one row; `fill` True / False: as if every
    unfinished run of the cell solved / did not (None: the finished seeds as they are)."""
    return [(table_size(g),
             g.solved if fill is None else _completed(g, g.counts["missing"] if fill else 0))
            for g in cells if table_size(g) is not None]


def range_verdict(a: tuple[float, float], b: tuple[float, float]) -> str:
    if a[0] > b[1]:
        return "beyond"
    if a[1] < b[0]:
        return "short of"
    return "not separable"


# an unrun table's three possible outcomes, as (its Wilson lower bound, upper bound) against
# the frontier's half: surely solved, either way, surely not
_OUTCOMES = ((1.0, 1.0), (0.0, 1.0), (0.0, 0.0))


def free_tables(points: list[tuple[float, stats.SolveRate]], unrun: list[float]) -> list[float]:
    """The unrun tables whose outcome could move a row's frontier range. Read as the frontier
    is read, solving is taken to fall with the table's size: an unrun table above a run table
    that was surely not solved (its Wilson upper bound below half) is not solved either, and
    one below a run table surely solved cannot move the largest solved table. Every other
    unrun table is free (above the largest table run: always free)."""
    at_half = 0.5
    out = []
    for u in sorted(unrun):
        if any(size < u and r.n and r.hi < at_half for size, r in points):
            continue
        if any(size > u and r.n and r.lo >= at_half for size, r in points):
            continue
        out.append(u)
    return out


def censored_ranges(points: list[tuple[float, stats.SolveRate]],
                    free: list[float]) -> set[tuple[float, float]]:
    """Every frontier range the free unrun tables' outcomes allow (each surely solved, either
    way or surely not), with the run tables' points as they are."""
    import itertools

    ranges = set()
    for outcome in itertools.product(_OUTCOMES, repeat=len(free)):
        extra = [(size, stats.SolveRate(1, 1, lo, hi)) for size, (lo, hi)
                 in zip(free, outcome, strict=True)]
        ranges.add(tuple(stats.frontier_range(points + extra)))
    return ranges


def frontier_compare(a: list[Group], b: list[Group], unrun: list[float] = ()) -> dict:
    """Row a's frontier range (its cells: one group per table) against row b's: "beyond" (a's
    range lies above b's), "short of" (below) or "not separable" (they overlap). Settled
    where unfinished runs remain but both ends (every unfinished run solved, none) give the
    same verdict: both ends of a range only grow as more seeds solve.

    `unrun`: tables of the protocol that row a did not run (`place --tables`). Where one of
    them could move a's range (`free_tables`), a's frontier is censored there, and the verdict
    must hold for every outcome of those tables; else it is "not decidable with these tables"
    (final: no seed of the tables that ran can decide it). Returns {"verdict", "settled",
    "final", "a", "b"} with each row's point frontier and range over its finished seeds (a's
    with "censored": the free tables, empty when none)."""
    now = {}
    for side, cells in (("a", a), ("b", b)):
        pts = frontier_points(cells)
        now[side] = {"frontier": stats.frontier(pts) or 0.0, "range": stats.frontier_range(pts)}
    free = free_tables(frontier_points(a), list(unrun))
    now["a"]["censored"] = free
    now["a"]["ran_to"] = max((size for size, _ in frontier_points(a)), default=0.0)
    missing = sum(g.counts["missing"] for g in [*a, *b])
    fills = (None,) if not missing else (False, True)
    per_end = []  # the verdicts each end of the unfinished seeds allows over the free tables
    for fa in fills:
        a_pts = frontier_points(a, fa)
        for fb in fills:
            b_range = stats.frontier_range(frontier_points(b, fb))
            per_end.append({range_verdict(r, b_range)
                            for r in censored_ranges(a_pts, free_tables(a_pts, list(unrun)))})
    every = set().union(*per_end)
    if len(every) == 1:
        return {"verdict": every.pop(), "settled": bool(missing), "final": not missing, **now}
    if all(len(v) > 1 for v in per_end):  # the tables not run decide it, whatever the seeds
        return {"verdict": NOT_DECIDABLE, "settled": bool(missing), "final": not missing,
                **now}
    return {"verdict": "open", "settled": False, "final": False, **now}


NOT_DECIDABLE = "not decidable with these tables"
