"""The verdicts of an lr-window claims file (experiments/lr-window/contested-16.toml): each claim
compares two rows' confirmation seeds, each row at its own best lr, by the one-sided Fisher test
the placements used, and says whether the registered verdict survives the window or changes.

    survives   the test still gives the registered direction (p < level)
    changes    it does not: not separable, or the other way
    open       a row's window or confirmation has not finished; the line says which count of
               the contested row would change the verdict (the file's `flip_at`, written
               before the runs)

Also the page's two other generated blocks: the budget measurement (`budget_lines`,
`budget_summary`, `same_start`: the contested rows' confirmation seeds at twice the budget) and
the exploratory windows of the 32-pair band (`band_lines`).

Read by `scripts/lr_window_page.py`, which writes the verdict table into
docs/results/lr-window/README.md and the figure of every measured row."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from scipy.stats import fisher_exact

from recall_lab import checkpoint as ck
from recall_lab.config import read_toml
from recall_lab.experiments import lr_window as lw


@dataclass(frozen=True)
class Verdict:
    claim: str
    a: str
    b: str
    registered: str
    verdict: str  # "survives", "changes" or "open"
    detail: str


def confirmation(answer: dict | None) -> tuple[int, int] | None:
    """(solved, run) of a row's confirmation seeds, or None where it has not finished."""
    conf = (answer or {}).get("confirmation") or {}
    solved = conf.get("solved") or {}
    if not solved.get("n") or solved["n"] < conf.get("planned", 0):
        return None
    return int(solved["k"]), int(solved["n"])


def _p(a: tuple[int, int], b: tuple[int, int], direction: str) -> float:
    alt = {"fewer": "less", "more": "greater"}[direction]
    return float(fisher_exact([[a[0], a[1] - a[0]], [b[0], b[1] - b[0]]],
                              alternative=alt).pvalue)


def verdicts(spec: dict, answers: dict[str, dict | None]) -> list[Verdict]:
    """Each claim of `spec` (a claims file read as TOML) on the rows' answers (window.json by
    row name; None: not measured)."""
    level = float(spec.get("level", 0.05))
    out = []
    for c in spec["claim"]:
        a, b = confirmation(answers.get(c["a"])), confirmation(answers.get(c["b"]))
        reg = c["registered_verdict"]
        if a is None or b is None:
            waiting = [n for n, x in ((c["a"], a), (c["b"], b)) if x is None]
            if a is not None:  # the contested row's count is in: the other row's that keeps it
                n = a[1]
                keep = [kb for kb in range(n + 1) if _p(a, (kb, n), reg) < level]
                then = (f"{c['a']} {a[0]}/{n}: it survives if {c['b']} solves at least "
                        f"{min(keep)} of {n}" if keep else
                        f"{c['a']} {a[0]}/{n}: it changes whatever {c['b']} solves")
            else:
                then = f"it changes if {c['a']} solves at least " + ", ".join(
                    f"{k} of 8 ({c['b']} {kb}/8)" for kb, k in
                    sorted(c["flip_at"].items(), key=lambda x: -int(x[0])))
            out.append(Verdict(c["claim"], c["a"], c["b"], reg, "open",
                               f"waits for {' and '.join(waiting)}'s confirmation; {then}"))
            continue
        p = _p(a, b, reg)
        verdict = "survives" if p < level else "changes"
        out.append(Verdict(c["claim"], c["a"], c["b"], reg, verdict,
                           f"{c['a']} {a[0]}/{a[1]} against {c['b']} {b[0]}/{b[1]}: one-sided "
                           f"Fisher p = {p:.2g} {'<' if p < level else '>='} {level:g}"))
    return out


def read_answers(spec: dict, folder: Path) -> dict[str, dict | None]:
    """Each row's committed window.json (`folder`/NAME/window.json), None where absent."""
    out: dict[str, dict | None] = {}
    for row in spec["row"]:
        path = Path(folder) / row["name"] / lw.ANSWER
        out[row["name"]] = json.loads(path.read_text()) if path.is_file() else None
    return out


def table_lines(spec: dict, answers: dict[str, dict | None]) -> list[str]:
    """The rows' windows and confirmations, then the claims' verdicts, as markdown."""
    lines = ["| row | registered | best lr | window | confirmation at the best lr |",
             "| --- | --- | --- | --- | --- |"]
    for row in spec["row"]:
        a = answers.get(row["name"])
        if a is None:
            lines.append(f"| `{row['name']}` | {row['registered']} | not measured | - | - |")
            continue
        conf = confirmation(a)
        conf_text = (a["confirmation"]["solved"]["text"] if conf is not None
                     else "not finished")
        best = "-" if a.get("best") is None else f"{a['best']:g}"
        lines.append(f"| `{row['name']}` | {row['registered']} | {best}"
                     f"{' (edge)' if a.get('edge') else ''} | {lw.window_text(a)} | "
                     f"{conf_text} |")
    vs = verdicts(spec, answers)
    count = {k: sum(v.verdict == k for v in vs) for k in ("survives", "changes", "open")}
    lines += ["", f"**{count['survives']} of {len(vs)} claims survive the lr window**, "
              f"{count['changes']} change, {count['open']} open.", "",
              "| claim (registered verdict) | now | why |", "| --- | --- | --- |"]
    for v in vs:
        lines.append(f"| {v.claim} ({v.registered}) | **{v.verdict}** | {v.detail} |")
    return lines


def _budget_group(report: dict, row: str, steps: int) -> dict | None:
    """The report group of `row` (model.name) at `steps` (train.steps), None if not run."""
    for g in report["groups"]:
        v = g["values"]
        if v.get("model.name") == row and v.get("train.steps") == steps:
            return g
    return None


def _steps_text(surv: dict | None) -> str:
    """Kaplan-Meier median steps to solve [95%], ">H" where not reached by the budget H."""
    if not surv:
        return "-"

    def fmt(x):
        return f">{surv['horizon']:g}" if x is None else f"{x:g}"
    return f"{fmt(surv['median'])} [{fmt(surv['median_lo'])}, {fmt(surv['median_hi'])}]"


def same_start(folder: Path, budgets: tuple[int, int]) -> tuple[int, int]:
    """(identical, pairs): of the runs under `folder` at the longer budget that have a twin at
    the shorter one (same model name and seed), how many repeat the twin's validation rows up
    to the shorter budget exactly. The lr is constant after the warm-up and the data stream is
    the seed's, so a longer run is its shorter twin continued; this checks it on the records."""
    short, long_ = budgets
    runs: dict[tuple[str, int, int], list] = {}
    for cfg in sorted(Path(folder).glob(f"*/{ck.CONFIG}")):
        c = json.loads(cfg.read_text())
        key = (c["model"]["name"], int(c["train"]["seed"]), int(c["train"]["steps"]))
        rows = [(r["step"], r.get("acc"), r.get("loss")) for r in ck.read_lines(cfg.parent /
                                                                                 ck.METRICS)
                if r.get("split") == "valid" and isinstance(r.get("step"), int)
                and r["step"] <= short]
        runs[key] = rows
    pairs = [(rows, runs[(m, s, short)]) for (m, s, steps), rows in runs.items()
             if steps == long_ and (m, s, short) in runs]
    return sum(a == b for a, b in pairs), len(pairs)


def budget_lines(spec: dict, answers: dict[str, dict | None], report: dict,
                 budgets: tuple[int, int] = (2500, 5000),
                 same: tuple[int, int] | None = None) -> list[str]:
    """The budget measurement (experiments/lr-window/double-budget-16.toml, its report.json):
    each contested row's confirmation seeds at the budget and at twice it, the claims, and each
    contested verdict re-read with the longer budget's count where it solved more (the rule its
    file wrote before the runs); the other rows keep their confirmation counts at the budget."""
    short, long_ = budgets
    level = float(spec.get("level", 0.05))
    rows = list(dict.fromkeys(c["a"] for c in spec["claim"]))
    lines = ["| row | steps | seeds solved | held-out accuracy per seed | "
             "median steps to solve (Kaplan-Meier) |", "| --- | --- | --- | --- | --- |"]
    counts: dict[tuple[str, int], tuple[int, int]] = {}
    for row in rows:
        for steps in budgets:
            g = _budget_group(report, row, steps)
            if g is None:
                lines.append(f"| `{row}` | {steps:,} | not run | - | - |")
                continue
            k, n = int(g["solved"]["k"]), int(g["solved"]["n"])
            counts[(row, steps)] = (k, n)
            acc = g.get("per_seed") or []
            acc_text = (f"{min(acc):.2f}-{max(acc):.2f} (median {statistics.median(acc):.2f})"
                        if acc else "-")
            lines.append(f"| `{row}` | {steps:,} | {k}/{n} [{g['solved']['lo']:.2f}, "
                         f"{g['solved']['hi']:.2f}] | {acc_text} | "
                         f"{_steps_text(g.get('survival'))} |")
    if same is not None:
        lines += ["", f"The {long_:,}-step runs continue their {short:,}-step twins: validation "
                      f"rows to step {short:,} identical in {same[0]} of {same[1]} pairs."]
    lines += ["", "| claim (registered before the runs) | verdict | detail |",
              "| --- | --- | --- |"]
    for c in report.get("checks", []):
        lines.append(f"| {c['claim']} | **{c['verdict']}** | {c['detail']} |")
    lines += [""]
    for c in spec["claim"]:
        a_short, a_long = counts.get((c["a"], short)), counts.get((c["a"], long_))
        b = confirmation(answers.get(c["b"]))
        if a_short is None or a_long is None or b is None:
            lines.append(f"- {c['claim']}: open (a count has not finished).")
            continue
        more = _p(a_long, a_short, "more") < level
        if not more:
            lines.append(f"- {c['claim']}: not about the budget ({c['a']} {a_long[0]}/"
                         f"{a_long[1]} at {long_:,} steps against {a_short[0]}/{a_short[1]} "
                         f"at {short:,}: not more, so the verdict stands as read above).")
            continue
        p = _p(a_long, b, c["registered_verdict"])
        lines.append(f"- {c['claim']}: re-read with {long_:,} steps, {c['a']} {a_long[0]}/"
                     f"{a_long[1]} against {c['b']} {b[0]}/{b[1]} at {short:,}: one-sided "
                     f"Fisher p = {p:.2g}, **{'survives' if p < level else 'changes'}** "
                     f"(the budget moved the count).")
    return lines


def budget_summary(spec: dict, report: dict, budgets: tuple[int, int] = (2500, 5000)) -> str:
    """One sentence: each contested row's count at both budgets and whether the longer one
    solved more (one-sided Fisher), for pages that link the lr-window page's budget block."""
    short, long_ = budgets
    level = float(spec.get("level", 0.05))
    parts, more = [], []
    for row in dict.fromkeys(c["a"] for c in spec["claim"]):
        gs, gl = _budget_group(report, row, short), _budget_group(report, row, long_)
        if gs is None or gl is None:
            return f"The budget measurement has not finished ({row})."
        a = (int(gl["solved"]["k"]), int(gl["solved"]["n"]))
        b = (int(gs["solved"]["k"]), int(gs["solved"]["n"]))
        parts.append(f"{row} {a[0]}/{a[1]} (against {b[0]}/{b[1]})")
        more.append(_p(a, b, "more") < level)
    verdict = ("neither solved more seeds, so the verdicts are not about the budget"
               if not any(more) else "a row solved more seeds: its verdict is re-read there")
    return (f"At twice the budget ({long_:,} steps, the same confirmation seeds): "
            f"{', '.join(parts)} at {short:,}; {verdict}.")


def band_lines(answers: list[dict]) -> list[str]:
    """Exploratory windows at one table (each a window.json), one row each: seeds solved per lr
    (Wilson 95%) and their mean held-out accuracy over the union of the rows' ladders
    ("reused": counted from a reference's or placement's records, not retrained), the best lr
    in bold, the edge flag, the window's text."""
    if not answers:
        return ["Not measured yet."]
    lrs = sorted({r["lr"] for a in answers for r in a["rungs"]})
    lines = ["| row | " + " | ".join(f"{lr:g}" for lr in lrs) + " | best lr | window |",
             "| --- |" + " --- |" * (len(lrs) + 2)]
    for a in answers:
        by = {r["lr"]: r for r in a["rungs"] if r["solved"]["n"]}
        cells = []
        for lr in lrs:
            r = by.get(lr)
            if r is None:
                cells.append("-")
                continue
            sv = r["solved"]
            text = f"{sv['k']}/{sv['n']}"
            text = f"**{text}**" if lr == a.get("best") else text
            text += f" [{sv['lo']:.2f}, {sv['hi']:.2f}]"
            accs = [s["acc"] for s in r.get("seeds", []) if s.get("acc") is not None]
            if accs:
                text += f", {statistics.mean(accs):.2f}"
            if any(s.get("reused") for s in r.get("seeds", [])):
                text += " (reused)"
            cells.append(text)
        best = "-" if a.get("best") is None else f"{a['best']:g}"
        lines.append(f"| `{a['label']}` | " + " | ".join(cells) +
                     f" | {best}{' (edge)' if a.get('edge') else ''} | {lw.window_text(a)} |")
    return lines


def load(claims: Path) -> dict:
    return read_toml(Path(claims))


__all__ = ["Verdict", "band_lines", "budget_lines", "budget_summary", "confirmation", "load",
           "read_answers", "same_start", "table_lines", "verdicts"]
