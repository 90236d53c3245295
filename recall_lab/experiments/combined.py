"""Several placements on one frontier: the rows of a reference (by default the shipped
zoo-frontier) and of finished placements (`recall-lab place`'s answer.json) in one table, one
figure (frontier against recurrent state per layer) and one list of the comparisons the
placements' claims settled. `scripts/frontier_2026.py` writes docs/results/frontier-2026/ from
these and packs the placements' cells into the shipped `frontier-2026` reference.

A row's cells and frontier are computed as `place` computes them (`place.row_frontier`,
`place.frontier_text`): a reference row from its groups, a placement from its answer. A
placement whose folder has no answer.json has not finished: it is listed with its runs so far
and no verdict.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from recall_lab.experiments.place import (
    frontier_text,
    rate_json,
    reference_rows,
    row_frontier,
    state_json,
    table_name,
)
from recall_lab.experiments.place_plots import LEGEND_IN, MARKERS, MUTED
from recall_lab.experiments.reference import open_reference, read_protocol

ANSWER = "answer.json"
PLAN = "place.json"


@dataclass
class Entry:
    """One row of the combined table."""

    label: str
    source: str  # "zoo-frontier" (a reference row) or the placement's folder name
    state: dict  # {"numbers", "growth", "text"}; numbers None: grows with the sequence
    lr: float | None
    cells: dict[float, dict]  # table size -> {"k", "n", "lo", "hi", "text"} (+ "note")
    frontier: dict  # place.row_frontier's
    claims: list[dict] = field(default_factory=list)

    @property
    def family(self) -> str:
        return self.label.split(" / ")[0]

    @property
    def placed(self) -> bool:
        return self.source != "reference"


def reference_entries(reference: str | Path | None = None) -> tuple[list[Entry], dict]:
    """The reference's rows as entries, and its protocol's tables {size: name}."""
    with open_reference(reference) as folder:
        protocol = read_protocol(folder)
        rows, _ = reference_rows(folder, protocol)
    out = []
    for r in rows:
        out.append(Entry(r.label, "reference", state_json(r.state),
                         r.lr, {s: rate_json(g.solved) for s, g in sorted(r.cells.items())
                                if g.solved.n},
                         row_frontier(list(r.cells.values()))))
    return out, {t.size: table_name(t.size, protocol) for t in protocol.tables}


def placement_entry(folder: Path) -> Entry | None:
    """A finished placement's row (None: no answer.json yet)."""
    path = Path(folder) / ANSWER
    if not path.is_file():
        return None
    a = json.loads(path.read_text())
    cells = {}
    for c in a["cells"]:
        if c["solved"] is None or not c["solved"]["n"]:
            continue
        note = f" (stopped, {c['not_run']} not run)" if c["status"] == "settled" else ""
        cells[float(c["size"])] = {**c["solved"], "note": note}
    return Entry(a["label"], Path(folder).name, a["state"], a["lr"], cells, a["frontier"],
                 a["claims"])


def progress(folder: Path) -> dict:
    """An unfinished placement's state: claims recorded, cell runs finished of those planned."""
    plan = json.loads((Path(folder) / PLAN).read_text()) if (Path(folder) / PLAN).is_file() \
        else {}
    index = Path(folder) / "cells" / "sweep.json"
    runs = json.loads(index.read_text()).get("runs", []) if index.is_file() else []
    done = [e for e in runs if (Path(folder) / "cells" / e["name"] / "summary.json").is_file()]
    return {"label": plan.get("label"), "claims": len(plan.get("claims") or []),
            "recorded": plan.get("written"), "done": len(done),
            "planned": len(plan.get("tables") or []) * len(plan.get("seeds") or [])}


def sort_key(e: Entry) -> tuple:
    n = e.state.get("numbers")
    return (n is None, n or 0.0, e.placed, e.label)


def cell_text(e: Entry, size: float) -> str:
    c = e.cells.get(size)
    return "-" if c is None else c["text"] + c.get("note", "")


def table_lines(entries: list[Entry], names: dict[float, str]) -> list[str]:
    sizes = sorted(names)
    head = ("| row | from | state per layer | lr | " + " | ".join(names[s] for s in sizes)
            + " | frontier [range] |")
    lines = [head, "|" + " --- |" * (len(sizes) + 5)]
    for e in sorted(entries, key=sort_key):
        lr = "-" if e.lr is None else f"{e.lr:g}"
        src = "zoo-frontier" if not e.placed else f"placed ({e.source})"
        name = f"**`{e.label}`**" if e.placed else f"`{e.label}`"
        lines.append(f"| {name} | {src} | {e.state['text']} | {lr} | "
                     + " | ".join(cell_text(e, s) for s in sizes)
                     + f" | {frontier_text(e.frontier)} |")
    return lines


_RATE = re.compile(r" at [0-9.]+ (\d+/\d+ \[[0-9.]+, [0-9.]+\])")
_P = re.compile(r"(more|fewer): Fisher one-sided p = ([0-9.e+-]+)")


def _evidence(c: dict) -> str:
    if c.get("kind") == "frontier":
        a, b = c.get("a_frontier"), c.get("b_frontier")
        return "" if not (a and b) else f"{frontier_text(a)} vs {frontier_text(b)}"
    detail = c.get("detail", "")
    rates = _RATE.findall(detail)
    ps = "; ".join(f"{k} p = {v}" for k, v in _P.findall(detail))
    return (" vs ".join(rates) + (f" ({ps})" if ps else "")) if len(rates) == 2 else detail


def settled_lines(entries: list[Entry]) -> list[str]:
    """Every claim of every placement with a verdict, one line each (its full text is in the
    placement's report.md); the claims still open are counted."""
    lines = ["| placed row | comparison | against | verdict | placed vs against |",
             "| --- | --- | --- | --- | --- |"]
    opened = {}
    for e in sorted((e for e in entries if e.placed), key=lambda e: e.label):
        for c in e.claims:
            if c["verdict"] == "open":
                opened[e.label] = opened.get(e.label, 0) + 1
                continue
            what = ("frontier" if c.get("kind") == "frontier"
                    else f"seeds solved at {c['size']:g} pairs")
            word = c["verdict"] + (" (settled)" if c.get("settled") and not c.get("final")
                                   else "")
            lines.append(f"| `{e.label}` | {what} | `{c['b']}` | **{word}** | {_evidence(c)} |")
    if opened:
        lines += ["", "Still open (not settled by the seeds that ran): "
                  + "; ".join(f"`{k}` {v}" for k, v in sorted(opened.items())) + "."]
    return lines


# ---- the figure ---------------------------------------------------------------------------------

DODGE = 0.3  # powers of 2 between rows at one state (at most 0.9 across a group)
AXES_IN = 8.0  # the axes' width in inches (the figure: with the legend, under 16)
PLACED_STYLE = (("#d62728", "*"), ("#1f77b4", "P"), ("#2ca02c", "X"), ("#9467bd", "D"),
                ("#ff7f0e", "h"), ("#8c564b", "p"))  # bold, one per placed row


def point(e: Entry) -> tuple[float, float, float]:
    """A row's frontier and its range on the figure's y axis (0.5: "none")."""
    f = e.frontier
    lo, hi = f["range"]
    return (f["frontier"] or 0.5, lo or 0.5, hi or 0.5)


def positions(entries: list[Entry]) -> dict[str, float]:
    """Each fixed-state row's x on the figure: its state, except that rows at one state whose
    ranges meet are spread apart (their markers and bars would hide each other), placed rows
    last; rows at one state whose ranges are apart stay at their state."""
    xs: dict[str, float] = {}
    for x in sorted({e.state["numbers"] for e in entries}):
        here = sorted((e for e in entries if e.state["numbers"] == x), key=lambda e: point(e)[1:])
        groups: list[list[Entry]] = []
        top = -math.inf
        for e in here:
            _, lo, hi = point(e)
            if lo > top:
                groups.append([])
            groups[-1].append(e)
            top = max(top, hi)
        for group in groups:
            group.sort(key=lambda e: (e.placed, e.label))
            step = min(DODGE, 0.9 / max(len(group) - 1, 1))
            for i, e in enumerate(group):
                xs[e.label] = x * 2 ** (step * (i - (len(group) - 1) / 2))
    return xs


def figure(entries: list[Entry], names: dict[float, str], path: Path, title: str) -> Path:
    """frontier.png: the frontier (largest table solved in at least half the seeds) against
    recurrent state per layer, log2 on both axes; the ranges its seeds' Wilson intervals allow
    as bars; reference rows muted (one colour per family), placed rows bold with a marker of
    their own; rows whose state grows with the sequence (attention) as dashed lines; rows at
    one state whose ranges meet side by side; a state that grows as log L drawn at its
    count at the longest table its placement ran, with a caption line under its label; the
    legend outside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(names)
    fixed = [e for e in entries if e.state.get("numbers") is not None]
    grows = [e for e in entries if e.state.get("numbers") is None]
    fams = sorted({e.family for e in fixed if not e.placed})
    colour = {f: MUTED[i % len(MUTED)] for i, f in enumerate(fams)}
    seen: dict[str, int] = {}
    placed_i = 0
    styles = {}
    for e in sorted(fixed, key=lambda e: (e.placed, e.label)):
        if e.placed:
            styles[e.label] = (*PLACED_STYLE[placed_i % len(PLACED_STYLE)], 9, 2.0)
            placed_i += 1
        else:
            seen[e.family] = seen.get(e.family, -1) + 1
            styles[e.label] = (colour[e.family], MARKERS[seen[e.family] % len(MARKERS)], 6, 1.0)

    xs_all = [e.state["numbers"] for e in fixed]
    fig, ax = plt.subplots(figsize=(AXES_IN + LEGEND_IN + 0.8, 4.4))
    xs = positions(fixed)
    for e in sorted(fixed, key=lambda e: (e.placed, e.label)):
        f, lo, hi = point(e)
        c, m, ms, lw = styles[e.label]
        label = e.label + (" (placed)" if e.placed else "")
        if e.state.get("growth") == "log L":  # the caption line under its label
            label += f"\n  state grows as log L: drawn at {e.state['text'].split(' (')[0]}"
            label += ", its count at the longest table it ran"
        if e.frontier.get("censored"):
            label += f"\n  tables above {e.frontier['ran_to']:g} not run"
        ax.errorbar([xs[e.label]], [f], yerr=[[f - lo], [hi - f]], fmt=m, color=c, ms=ms,
                    capsize=3, lw=lw, zorder=5 if e.placed else 3, label=label,
                    mec="black" if e.placed else c, mew=0.6 if e.placed else 0)
    for e in grows:
        f = point(e)[0]
        ax.axhline(f, color="#7f7f7f", ls="--", lw=1, zorder=1,
                   label=f"{e.label} (state grows with L): the reference line")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    lo_x, hi_x = min(xs_all) / 2 ** 0.6, max(xs_all) * 2 ** 0.6
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(0.5 / 2 ** 0.4, max(sizes) * 2 ** 0.4)
    ax.set_yticks(list(sizes) + [0.5])
    ax.set_yticklabels([names[s] for s in sizes] + ["none"])
    ticks = [2 ** k for k in range(int(math.log2(lo_x)) + 1, int(math.log2(hi_x)) + 1)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:,.0f}" for t in ticks], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("recurrent state per layer (numbers, log2; rows at one state side by side)")
    ax.set_ylabel("frontier: largest table solved\nin >= half the seeds [range]")
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    width = AXES_IN + LEGEND_IN + 0.8
    right = AXES_IN / width
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: ("(state grows" not in labels[i],
                                                      "(placed)" in labels[i], labels[i]))
    fig.legend([handles[i] for i in order], [labels[i] for i in order], loc="center left",
               bbox_to_anchor=(right + 0.01, 0.5), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, right, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


__all__ = ["Entry", "figure", "frontier_text", "placement_entry", "progress", "reference_entries",
           "settled_lines", "sort_key", "table_lines"]
