"""The overwrite frontier's reading (experiments/overwrite/overwrite.toml): each row's seeds
solved at four tables that hold the live keys at 8 and vary the writes, beside the plain tables
of 8 and 16 pairs:

    8 live, 8 written      plain MQAR, 8 pairs (the zoo-frontier's archived cell)
    8 live, 12 written     forgetting MQAR, 8 pairs + 4 updates
    8 live, 16 written     forgetting MQAR, 8 pairs + 8 updates
    16 live, 16 written    plain MQAR, 16 pairs (archived)

`reading(dirs)` builds on `report.build_report` (its groups' Wilson intervals, its claims'
verdicts) and places each group at its row and table; `figure` draws seeds solved per table,
one line per row, rows ordered by their state per layer; `page` writes the generated
docs/results/overwrite/README.md (the question, the answer so far, every claim's verdict, the
runs and their time). A row or table with runs still to train is marked interrupted, never
read as a result. Written by `scripts/overwrite_page.py`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from recall_lab.experiments.report import build_report

TABLES = ("8 live, 8 written", "8 live, 12 written", "8 live, 16 written",
          "16 live, 16 written")
QUESTION = ("Does a layer's recall depend on the pairs written or on the pairs live? An additive "
            "memory keeps the stale value beside the new one and should read like a table of "
            "every write; a delta rule that erases before it writes should read like a table "
            "of the live keys.")


def table_of(config: dict[str, Any]) -> str | None:
    """The table of a run's flat config (report.RunRecord.config), or None for another."""
    if config.get("task.generator") == "forgetting-mqar":
        live = config.get("task.kwargs.num_kv_pairs")
        updates = config.get("task.kwargs.num_updates") or 0
        if isinstance(live, int) and isinstance(updates, int):
            name = f"{live} live, {live + updates} written"
            return name if name in TABLES else None
        return None
    levels = config.get("task.levels")
    if isinstance(levels, (list, tuple)) and len(levels) == 1:
        pairs = levels[0][1] if isinstance(levels[0], (list, tuple)) else None
        name = f"{pairs} live, {pairs} written"
        return name if name in TABLES else None
    return None


def row_of(config: dict[str, Any]) -> str:
    """A row's name: the model and the options that set its state ("deltanet num_heads=4
    expand_k=0.25", "mamba2 d_state=1")."""
    name = str(config.get("model.name"))
    opts = [f"{k.rpartition('.')[2]}={v:g}" if isinstance(v, float) else
            f"{k.rpartition('.')[2]}={v}"
            for k, v in sorted(config.items()) if k.startswith("model.mixer_kwargs.")]
    if name.startswith("mamba2") and config.get("model.d_state") is not None:
        opts.insert(0, f"d_state={config['model.d_state']}")
    return " ".join([name, *opts])


def reading(dirs: list[str | Path]) -> dict:
    """Every row's counts at the four tables, the claims' verdicts and the runs' time."""
    rep = build_report(dirs)  # grouped by every field that varies but the seed
    rows: dict[str, dict] = {}
    done = planned = 0
    seconds = 0.0  # the forgetting cells' training loops (the plain cells are archived)
    for g in rep["groups"]:
        cfg = g.runs[0].config
        table = table_of(cfg)
        if table is None:
            continue
        row = rows.setdefault(row_of(cfg), {"row": row_of(cfg), "state": g.state.numbers,
                                            "state_text": g.state.text(), "tables": {}})
        finished = [r for r in g.runs if r.status == "done"]
        done += len(finished)
        planned += len(g.runs)
        if cfg.get("task.generator") == "forgetting-mqar":
            seconds += sum(float((r.summary or {}).get("loop_s_total")
                             or (r.summary or {}).get("wall_s_this_session") or 0.0)
                       for r in finished)
        s = g.solved
        row["tables"][table] = {"k": s.k, "n": s.n, "lo": s.lo, "hi": s.hi,
                                "planned": len(g.runs), "failed": g.counts["failed"],
                                "complete": len(finished) == len(g.runs)}
    ordered = sorted(rows.values(), key=lambda r: (r["state"] is None,
                                                   r["state"] if r["state"] is not None else 0,
                                                   r["row"]))
    return {"rows": ordered, "tables": list(TABLES), "checks": rep["checks"],
            "runs_done": done, "runs_planned": planned, "train_s": seconds,
            "solve_at": rep["solve_at"]}


LEVEL = 0.05  # two-sided Fisher, as the claims' "not separable"
FORGET, LIVE, WRITTEN = "8 live, 16 written", "8 live, 8 written", "16 live, 16 written"
TWELVE = "8 live, 12 written"


def _fisher(a: dict, b: dict) -> float:
    from scipy.stats import fisher_exact

    return float(fisher_exact([[a["k"], a["n"] - a["k"]], [b["k"], b["n"] - b["k"]]]).pvalue)


def falls(row: dict, table: str = FORGET) -> str:
    """Where a row's count at a forgetting `table` falls between its plain tables: "like 8
    live" (not separable from its 8-pair count, separable from its 16-pair count), "like 16
    written" (the other way), "between" (separable from neither, or from both and between
    them), "below both" / "above both" (separable from both, outside them: the format, not the
    writes). Where the plain tables are not separable from each other, only "below both" /
    "above both" can be read. Read only when the three cells are complete."""
    cells = [row["tables"].get(t) for t in (table, LIVE, WRITTEN)]
    if any(c is None or not c["complete"] or not c["n"] for c in cells):
        return "not read (interrupted)"
    f, live, written = cells
    p_live, p_written = _fisher(f, live), _fisher(f, written)
    ps = f"p = {p_live:.2g} against 8 live, {p_written:.2g} against 16 written"
    share = f["k"] / f["n"]
    shares = (live["k"] / live["n"], written["k"] / written["n"])
    if p_live < LEVEL and p_written < LEVEL and not min(shares) <= share <= max(shares):
        return f"{'below' if share < min(shares) else 'above'} both ({ps})"
    if _fisher(live, written) >= LEVEL:
        return (f"no reading: its plain tables are not separable (p = "
                f"{_fisher(live, written):.2g}; {ps})")
    if p_live >= LEVEL > p_written:
        return f"like 8 live ({ps})"
    if p_written >= LEVEL > p_live:
        return f"like 16 written ({ps})"
    if p_live >= LEVEL and p_written >= LEVEL:
        return f"between, separable from neither ({ps})"
    return f"between, separable from both ({ps})"


def short_answer(read: dict) -> list[str]:
    """The answer in short, one sentence per forgetting table: the rows whose count there is
    not separable from their own plain 8-pair count (as the live keys would have it) and the
    rows that solve fewer seeds than it (one-sided Fisher at LEVEL), with their counts."""
    from scipy.stats import fisher_exact

    out = []
    for table, what in ((TWELVE, "8 live keys + 4 updates (12 writes)"),
                        (FORGET, "8 live keys + 8 updates (16 writes)")):
        same, fewer = [], []
        for row in read["rows"]:
            f, live = row["tables"].get(table), row["tables"].get(LIVE)
            if not f or not live or not (f["complete"] and live["complete"]):
                continue
            text = f"`{row['row']}` {f['k']}/{f['n']} against {live['k']}/{live['n']}"
            p = float(fisher_exact([[f["k"], f["n"] - f["k"]],
                                    [live["k"], live["n"] - live["k"]]], alternative="less"
                                   ).pvalue)
            (fewer if p < LEVEL else same).append(text)
        out.append(f"At {what}: as many seeds as their plain 8-pair table (not separable, "
                   f"like the live keys): {'; '.join(same) or 'no row'}. Fewer (one-sided "
                   f"Fisher at {LEVEL:g}): {'; '.join(fewer) or 'no row'}.")
    return out


def more_writes_easier(read: dict) -> list[str]:
    """The rows whose complete 16-written count is above their 12-written count (one-sided
    Fisher below LEVEL), as "row a/n against b/n (p = ...)"."""
    from scipy.stats import fisher_exact

    out = []
    for row in read["rows"]:
        hi, lo = row["tables"].get(FORGET), row["tables"].get(TWELVE)
        if not hi or not lo or not (hi["complete"] and lo["complete"] and hi["n"] and lo["n"]):
            continue
        p = float(fisher_exact([[hi["k"], hi["n"] - hi["k"]], [lo["k"], lo["n"] - lo["k"]]],
                               alternative="greater").pvalue)
        if p < LEVEL:
            out.append(f"{row['row']} {hi['k']}/{hi['n']} against {lo['k']}/{lo['n']} "
                       f"(p = {p:.2g})")
    return out


def cell_text(cell: dict | None) -> str:
    """"7/10 [0.40, 0.89]", "3/4 so far (interrupted, 10 planned)" or "-"."""
    if cell is None:
        return "-"
    if cell["n"] == 0:
        return f"not run ({cell['planned']} planned)"
    text = f"{cell['k']}/{cell['n']} [{cell['lo']:.2f}, {cell['hi']:.2f}]"
    return text if cell["complete"] else f"{cell['k']}/{cell['n']} so far (interrupted, " \
        f"{cell['planned']} planned)"


def figure(read: dict, path: Path) -> Path:
    """Seeds solved (share, Wilson 95%) at the four tables, one line per row, rows ordered by
    state; an interrupted cell is drawn hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    n = max(len(read["rows"]), 1)
    for i, row in enumerate(read["rows"]):
        xs, ys, lo, hi, hollow = [], [], [], [], []
        for j, table in enumerate(TABLES):
            cell = row["tables"].get(table)
            if not cell or not cell["n"]:
                continue
            x = j + (i - (n - 1) / 2) * 0.04  # rows side by side within a table
            share = cell["k"] / cell["n"]
            xs.append(x)
            ys.append(share)
            lo.append(share - cell["lo"])
            hi.append(cell["hi"] - share)
            hollow.append(not cell["complete"])
        if not xs:
            continue
        line = ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, linewidth=1.2,
                           label=f"{row['row']} ({row['state_text']})")
        colour = line[0].get_color()
        for x, y, h in zip(xs, ys, hollow, strict=True):
            if h:  # above the row's own filled marker
                ax.plot([x], [y], marker="o", linestyle="none", markerfacecolor="white",
                        markeredgecolor=colour, zorder=5)
    ax.set_xticks(range(len(TABLES)), [t.replace(", ", "\n") for t in TABLES])
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel(f"share of seeds solved (test acc >= {read['solve_at']:g})")
    ax.set_title("Overwriting: seeds solved as the writes grow with the live keys held at 8"
                 + ("" if all(c["complete"] for r in read["rows"] for c in r["tables"].values())
                    else "\n(hollow: interrupted, seeds so far)"))
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2,
              frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def _hm(seconds: float) -> str:
    minutes = int(math.ceil(seconds / 60))
    return f"{minutes // 60} h {minutes % 60:02d} min"


def page(read: dict, command: str, figure_name: str = "overwrite.png") -> str:
    """docs/results/overwrite/README.md, generated."""
    complete = read["runs_done"] == read["runs_planned"]
    verdicts = {v: sum(c["verdict"] == v for c in read["checks"])
                for v in ("pass", "fail", "open")}
    out = ["# The overwrite frontier: pairs written against pairs live", "",
           "Generated by `python scripts/overwrite_page.py` from the runs' records; do not edit.",
           "", "## The question", "", QUESTION, "",
           "## The answer in short" if complete else "## The answer so far", ""]
    if complete:
        for line in short_answer(read):
            out += [line, ""]
        out += ["The plain and the forgetting tables differ in format as well as in writes (the "
                "lab's joint-recall layout against zoology's split vocabulary, keys 1-63 and "
                "values 64-127), so \"fewer\" reads the format and the overwrites together; "
                "the control row says the forgetting format is learnable at this budget.", ""]
        out.append(f"Every planned run finished ({read['runs_done']}). Of the "
                   f"{len(read['checks'])} claims registered before the first run: "
                   f"{verdicts['pass']} pass, {verdicts['fail']} fail (each below).")
    else:
        out.append(f"**Interrupted**: {read['runs_done']} of {read['runs_planned']} planned "
                   f"runs have finished, so no row is read yet; claims: {verdicts['pass']} "
                   f"pass, {verdicts['fail']} fail, {verdicts['open']} open (a claim stays "
                   f"open while a run it reads is unfinished). Resume with `{command}`.")
    out += ["", f"![seeds solved per table]({figure_name})", "",
            "The table's last two columns read each row's forgetting counts against its own "
            "plain tables (two-sided Fisher at 0.05): like 8 live, like 16 written, between, "
            "or below / above both (the forgetting format, not the number of writes); "
            "attention (the control) says whether the format itself is learnable at this "
            "budget.", "",
            "| row (state per layer) | " + " | ".join(TABLES)
            + " | 12 written reads | 16 written reads |",
            "| --- |" + " --- |" * (len(TABLES) + 2)]
    for row in read["rows"]:
        cells = [cell_text(row["tables"].get(t)) for t in TABLES]
        out.append(f"| {row['row']} ({row['state_text']}) | " + " | ".join(cells)
                   + f" | {falls(row, TWELVE)} | {falls(row)} |")
    noticed = more_writes_easier(read)
    if noticed:
        out += ["", "## Noticed after the runs (not a registered claim)", "",
                "More writes were easier: these rows solved more seeds at 8 live + 8 updates "
                "than at 8 live + 4 updates (one-sided Fisher at 0.05): "
                + "; ".join(noticed) + ". With 8 updates of 8 keys every live pair is "
                "written again in the update block, so the last 16 tokens before the queries "
                "hold the whole live table and the first block can be ignored; with 4 updates "
                "a query's answer lies in either block. The two forgetting tables differ in "
                "that, not only in their number of writes: a question for a table with the "
                "updates spread over the context, not a result."]
    out += ["", "## Every claim", ""]
    for c in read["checks"]:
        out.append(f"- {c['verdict'].upper()}: {c['claim']}. {c['detail']}")
    out += ["", "## The runs", "",
            f"{read['runs_done']} of {read['runs_planned']} planned runs finished. The plain "
            "tables' runs are the zoo-frontier's and the 2026 placements' archived records, "
            f"not retrained; the forgetting cells' training loops took {_hm(read['train_s'])} "
            "in all (one thread each).", ""]
    return "\n".join(out)
