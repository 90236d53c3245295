"""Several placements on one frontier: the rows of a reference (by default the shipped
zoo-frontier) and of finished placements (`recall-lab place`'s answer.json) in one table, one
figure (frontier against recurrent state per layer) and one list of the comparisons the
placements' claims settled. `scripts/frontier_2026.py` writes docs/results/frontier-2026/ from
these and packs the placements' cells into the shipped `frontier-2026` reference.

A row's cells and frontier are computed as `place` computes them (`place.row_frontier`,
`place.frontier_text`): a reference row from its groups, a placement from its answer. A
placement whose folder has no answer.json has not finished: it is listed with its runs so far
and no verdict.

The state is per layer everywhere (`state.LayerState.text`): where a model's layers differ
(Based: a sliding-window layer and a Taylor layer) each layer's count, not their mean; a count
that grows as log L (log-linear attention's Fenwick levels) always with its length, and its
counts at every table of the protocol in the same cell, so that one layer's several counts are
read as one layer at several lengths.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from recall_lab.experiments.grid import flatten
from recall_lab.experiments.lr_window import window_text
from recall_lab.experiments.place import (
    cells_experiment,
    frontier_text,
    mixer_table,
    rate_json,
    reference_rows,
    row_frontier,
    table_name,
)
from recall_lab.experiments.reference import Protocol, open_reference, read_protocol
from recall_lab.experiments.state import LayerState, run_state

ANSWER = "answer.json"
PLAN = "place.json"


@dataclass
class Entry:
    """One row of the combined table."""

    label: str
    source: str  # "zoo-frontier" (a reference row) or the placement's folder name
    state: dict  # state_dict's; numbers None: grows with the sequence
    lr: float | None
    cells: dict[float, dict]  # table size -> {"k", "n", "lo", "hi", "text"} (+ "note")
    frontier: dict  # place.row_frontier's
    claims: list[dict] = field(default_factory=list)
    # a "log L" state's count at each of the protocol's tables: size -> (numbers, tokens)
    lengths: dict[float, tuple[float, int]] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.label.split(" / ")[0]

    @property
    def placed(self) -> bool:
        return self.source != "reference"


def state_dict(s: LayerState) -> dict:
    """A state as an entry holds it: its count per layer (a mean where the layers differ:
    `layers` then holds each one's), growth, length (a "log L" count's) and table text."""
    return {"numbers": s.numbers, "growth": s.growth, "text": s.text(), "length": s.length,
            "layers": list(s.layers) if s.layers else None}


def _lengths(states: dict[float, LayerState]) -> dict[float, tuple[float, int]]:
    return {size: (st.numbers, st.length) for size, st in sorted(states.items())
            if st.growth == "log L" and st.numbers is not None and st.length}


_PROTOCOLS: dict[str, Protocol] = {}  # a reference's protocol, read once (opening it unpacks it)


def _protocol(reference: str | Path | None) -> Protocol:
    if str(reference) not in _PROTOCOLS:
        with open_reference(reference) as folder:
            _PROTOCOLS[str(reference)] = read_protocol(folder)
    return _PROTOCOLS[str(reference)]


def reference_entries(reference: str | Path | None = None) -> tuple[list[Entry], dict]:
    """The reference's rows as entries, and its protocol's tables {size: name}."""
    with open_reference(reference) as folder:
        protocol = read_protocol(folder)
        rows, _ = reference_rows(folder, protocol)
    _PROTOCOLS[str(reference)] = protocol
    out = []
    for r in rows:
        out.append(Entry(r.label, "reference", state_dict(r.state),
                         r.lr, {s: rate_json(g.solved) for s, g in sorted(r.cells.items())
                                if g.solved.n},
                         row_frontier(list(r.cells.values())), lengths=_lengths(r.states)))
    return out, {t.size: table_name(t.size, protocol) for t in protocol.tables}


def placement_entry(folder: Path, protocol: Protocol | None = None) -> Entry | None:
    """A finished placement's row (None: no answer.json yet). Its state is counted again from
    its configs (`state.run_state`), at each of `protocol`'s tables (default: the shipped
    zoo-frontier's) where it grows as log L: answer.json keeps one count, at the longest table
    the placement ran."""
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
    state, lengths = dict(a["state"]), {}
    if state.get("growth") == "log L" or state.get("numbers") is not None:
        state, lengths = _placement_state(a, protocol)
    return Entry(a["label"], Path(folder).name, state, a["lr"], cells, a["frontier"],
                 a["claims"], lengths)


def _placement_state(answer: dict, protocol: Protocol | None) -> tuple[dict, dict]:
    """A placement's state at the longest table it ran (as its answer gives it) and, for a
    "log L" state, its count at each of the protocol's tables."""
    protocol = protocol or _protocol(None)
    ran = sorted(float(c["size"]) for c in answer["cells"] if c["solved"] and c["solved"]["n"])
    sizes = [t.size for t in protocol.tables]
    log_l = answer["state"].get("growth") == "log L"
    exp = cells_experiment(protocol, mixer_table(answer["mixer"], answer.get("kwargs")),
                           sizes if log_l else [max(ran or sizes)], [0], answer["lr"] or 1e-3)
    states = {protocol.size_of(flatten(r.config.to_json())): run_state(r.config.to_json())
              for r in exp.runs}
    longest = states.get(max(ran), None) if ran else None
    if longest is None or longest.numbers != answer["state"]["numbers"]:
        return dict(answer["state"]), {}  # counted otherwise now: the answer's, as written
    return state_dict(longest), _lengths(states) if log_l else {}


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


def state_text(e: Entry) -> str:
    """The table's "state per layer" cell: the state's text and, for a "log L" state, its
    counts at every table of the protocol ("512 at 66 tokens (log L); one layer, at each
    table: 384 / 448 / 512 / 576 at 18 / 34 / 66 / 130 tokens")."""
    text = e.state["text"]
    if len(e.lengths) > 1:
        counts = " / ".join(f"{n:,.0f}" for n, _ in e.lengths.values())
        tokens = " / ".join(f"{t}" for _, t in e.lengths.values())
        text += f"; one layer, at each table: {counts} at {tokens} tokens"
    return text


def layers_note(entries: list[Entry]) -> str:
    """A sentence for the rows whose layers differ: their order and x are the layers' mean."""
    mixed = sorted(e.label for e in entries if e.state.get("layers"))
    if not mixed:
        return ""
    return (f"{', '.join(f'`{m}`' for m in mixed)}: the two layers hold different states "
            "(each layer's count is given); the table's order and the figure's x use their mean.")


def cell_text(e: Entry, size: float) -> str:
    c = e.cells.get(size)
    return "-" if c is None else c["text"] + c.get("note", "")


def table_lines(entries: list[Entry], names: dict[float, str],
                windows: dict[str, str] | None = None) -> list[str]:
    """The combined table; with `windows` (a row's label -> its measured lr window,
    `windows_from`), a window column beside the lr ("not measured" for the other rows)."""
    sizes = sorted(names)
    extra = windows is not None
    head = ("| row | from | state per layer | lr | " + ("lr window | " if extra else "")
            + " | ".join(names[s] for s in sizes) + " | frontier [range] |")
    lines = [head, "|" + " --- |" * (len(sizes) + 5 + extra)]
    for e in sorted(entries, key=sort_key):
        lr = "-" if e.lr is None else f"{e.lr:g}"
        window = f"{(windows or {}).get(label_key(e.label), 'not measured')} | " if extra \
            else ""
        src = "zoo-frontier" if not e.placed else f"placed ({e.source})"
        name = f"**`{e.label}`**" if e.placed else f"`{e.label}`"
        lines.append(f"| {name} | {src} | {state_text(e)} | {lr} | {window}"
                     + " | ".join(cell_text(e, s) for s in sizes)
                     + f" | {frontier_text(e.frontier)} |")
    return lines


def label_key(label: str) -> str:
    """A row label with its options in one order: "deltanet / expand_k=0.25 / num_heads=4" and
    "deltanet / num_heads=4 / expand_k=0.25" name one row."""
    family, *opts = label.split(" / ")
    return " / ".join([family, *sorted(opts)])


EXPLORATORY_SEEDS = 5  # fewer seeds per lr than this: a window that cannot separate lrs


def windows_from(folder: Path) -> dict[str, str]:
    """Each measured lr window under `folder` (its */window.json, as `recall-lab lr-window`
    writes it), by row (`label_key`): "1e-3 to 3e-3 (0.5 decades) at 16 pairs", a row's
    windows at several tables in table order, joined by "; ". A window with fewer than
    EXPLORATORY_SEEDS seeds per lr says "(exploratory: at most N seeds per lr)": with 3 seeds, 3/3
    against 0/3 is one-sided Fisher p = 0.05, so no lr can fall outside it."""
    found: dict[str, list[tuple[float, str]]] = {}
    for path in sorted(Path(folder).glob("*/window.json")):
        a = json.loads(path.read_text())
        text = f"{window_text(a)} at {a['table_name']}"
        seeds = len(a.get("seeds") or [])
        if 0 < seeds < EXPLORATORY_SEEDS:
            text += f" (exploratory: at most {seeds} seeds per lr)"
        found.setdefault(label_key(a["label"]), []).append((float(a.get("table", 0)), text))
    return {row: "; ".join(t for _, t in sorted(ws)) for row, ws in found.items()}


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
FOCUS = (64, 8192)  # the state axis; rows beyond it (or growing) stand in a panel to its right
# reference rows: one hue per family, lighter for the smaller state, and one marker per family
FAMILY_STYLE = {
    "based": ("o", ("#6baed6", "#2171b5", "#08306b")),
    "deltanet": ("s", ("#fd8d3c", "#d94801", "#7f2704")),
    "gated-deltanet": ("^", ("#74c476", "#238b45", "#00441b")),
    "gla": ("v", ("#9e9ac8", "#6a51a3", "#3f007d")),
    "linear-attn": ("<", ("#c9a66b", "#a6761d", "#5c3f0c")),
    "mamba2": (">", ("#f7a3c9", "#e7298a", "#91003f")),
}
OTHER_STYLE = ("8", ("#bdbdbd", "#969696", "#636363", "#252525"))  # a family not listed above
# placed rows: bold, a black edge, a marker and a colour no other row has
PLACED_STYLE = (("#d62728", "*"), ("#17becf", "P"), ("#bcbd22", "X"), ("#1f1f9f", "D"),
                ("#e6ab02", "h"), ("#000000", "p"), ("#7f0000", "H"), ("#ff00ff", "d"))


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


def styles(entries: list[Entry]) -> dict[str, tuple[str, str, float, float]]:
    """Each fixed-state row's (colour, marker, marker size, line width): a reference row its
    family's marker in its family's hue, darker for a larger state; a placed row bold in a
    colour and marker of its own. No two rows share both colour and marker, and no two
    families (nor any placed row) share a colour."""
    out: dict[str, tuple[str, str, float, float]] = {}
    ref = sorted((e for e in entries if not e.placed), key=lambda e: (e.family,
                                                                       e.state["numbers"]))
    by_family: dict[str, list[Entry]] = {}
    for e in ref:
        by_family.setdefault(e.family, []).append(e)
    others = 0
    for fam, rows in by_family.items():
        marker, shades = FAMILY_STYLE.get(fam, OTHER_STYLE)
        if fam not in FAMILY_STYLE:  # an unlisted family: greys, one shade per row
            shades = shades[others:] + shades[:others]
            others += len(rows)
        for i, e in enumerate(rows):
            # spread the family's rows over its shades: two rows take the lightest and darkest
            k = 0 if len(rows) == 1 else round(i * (len(shades) - 1) / (len(rows) - 1))
            out[e.label] = (shades[min(k, len(shades) - 1)], marker, 8, 1.2)
    placed = sorted((e for e in entries if e.placed), key=lambda e: e.label)
    for i, e in enumerate(placed):
        c, m = PLACED_STYLE[i % len(PLACED_STYLE)]
        out[e.label] = (c, m, 12 if m == "*" else 9, 2.2)
    return out


def _beyond(e: Entry) -> bool:
    n = e.state.get("numbers")
    return n is None or n > FOCUS[1] or n < FOCUS[0]


def figure(entries: list[Entry], names: dict[float, str], path: Path, title: str) -> Path:
    """frontier.png: the frontier (largest table solved in at least half the seeds) against
    recurrent state per layer, log2 on both axes, the state axis on FOCUS (64-8,192); the
    ranges its seeds' Wilson intervals allow as bars; reference rows in their family's hue
    (darker: larger state) and marker, placed rows bold, each in a colour and marker of its
    own; rows at one state whose ranges meet side by side; a censored frontier ("at least 16")
    as "16+" with an arrow up; a state that grows as log L at its count at the longest table
    its placement ran, with a thin line across its counts at the protocol's tables; rows whose
    layers differ at the mean of their layers (the legend gives each layer's count). The rows
    beyond the axis (a hybrid's large state, attention's growing one) stand in a panel on the
    right, each labelled with its state. The legend is under the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(names)
    inside = [e for e in entries if not _beyond(e)]
    beyond = sorted((e for e in entries if _beyond(e)),
                    key=lambda e: (e.state.get("numbers") is None, e.state.get("numbers") or 0))
    style = styles(inside)
    n_legend = (len(inside) + 1) // 2  # legend lines in each of its two columns
    fig = plt.figure(figsize=(11.5, 5.4 + 0.17 * n_legend))
    grid = fig.add_gridspec(2, 2, width_ratios=[7.0, 0.3 + 0.75 * max(len(beyond), 1)],
                            height_ratios=[4.4, 0.17 * n_legend + 0.2], wspace=0.05,
                            hspace=0.3)
    ax = fig.add_subplot(grid[0, 0])
    side = fig.add_subplot(grid[0, 1], sharey=ax)
    xs = positions(inside)
    for e in sorted(inside, key=lambda e: (e.placed, e.family, e.state["numbers"], e.label)):
        f, lo, hi = point(e)
        c, m, ms, lw = style[e.label]
        x = xs[e.label]
        label = f"{e.label}: {_legend_state(e)}" + (" (placed)" if e.placed else "")
        if e.frontier.get("censored"):
            label += f"; frontier at least {e.frontier['frontier']:g} (tables above " \
                     f"{e.frontier['ran_to']:g} not run)"
        ax.errorbar([x], [f], yerr=[[f - lo], [hi - f]], fmt=m, color=c, ms=ms, capsize=3,
                    lw=lw, zorder=5 if e.placed else 3, label=label,
                    mec="black" if e.placed else c, mew=0.7 if e.placed else 0)
        if len(e.lengths) > 1:  # one layer's counts at the protocol's tables
            counts = [n for n, _ in e.lengths.values()]
            ax.plot([min(counts), max(counts)], [f, f], color=c, lw=1.0, alpha=0.8, zorder=2)
            ax.plot(counts, [f] * len(counts), "|", color=c, ms=8, zorder=2)
            ax.annotate(f"log L: {min(counts):,.0f}-{max(counts):,.0f} at "
                        f"{min(t for _, t in e.lengths.values())}-"
                        f"{max(t for _, t in e.lengths.values())} tokens",
                        (max(counts), f), xytext=(4, -11), textcoords="offset points",
                        fontsize=7, color=c)
        if e.frontier.get("censored") and e.frontier["frontier"]:
            ax.annotate("", xy=(x, f * 2 ** 0.75), xytext=(x, f * 2 ** 0.12),
                        arrowprops={"arrowstyle": "-|>", "color": c, "lw": 1.8}, zorder=6)
            ax.annotate(f"{e.frontier['frontier']:g}+", (x, f * 2 ** 0.55), xytext=(5, 0),
                        textcoords="offset points", fontsize=8, color=c, fontweight="bold",
                        va="center")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlim(FOCUS[0], FOCUS[1] * 2 ** 0.35)
    none = any(point(e)[1] < min(sizes) for e in entries)  # a row solves no table: "none"
    ax.set_ylim((0.5 if none else min(sizes)) / 2 ** 0.4, max(sizes) * 2 ** 0.6)
    ax.set_yticks(list(sizes) + ([0.5] if none else []))
    ax.set_yticklabels([names[s] for s in sizes] + (["none"] if none else []))
    ticks = [2 ** k for k in range(int(math.log2(FOCUS[0])), int(math.log2(FOCUS[1])) + 1)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:,.0f}" for t in ticks], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("recurrent state per layer (numbers, log2; rows at one state side by side)")
    ax.set_ylabel("frontier: largest table solved\nin >= half the seeds [range]")
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    for i, e in enumerate(beyond):  # the rows beyond the axis, labelled where they stand
        f, lo, hi = point(e)
        ax_c = OTHER_STYLE[1][-1 - i % len(OTHER_STYLE[1])]
        side.errorbar([i], [f], yerr=[[f - lo], [hi - f]], fmt="o", color=ax_c, ms=7,
                      capsize=3, lw=1.2)
    side.set_xlim(-0.5, max(len(beyond), 1) - 0.5)
    side.set_xticks(range(len(beyond)))
    side.set_xticklabels([_beyond_label(e) for e in beyond], fontsize=7)
    side.tick_params(axis="y", labelleft=False)
    side.minorticks_off()
    side.grid(alpha=0.3, axis="y")
    side.set_title(f"beyond {FOCUS[1]:,}", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    legend_ax = fig.add_subplot(grid[1, :])
    legend_ax.axis("off")
    legend_ax.legend(handles, labels, loc="upper center", ncol=2, fontsize=7, frameon=False,
                     handletextpad=0.4, columnspacing=1.5, borderaxespad=0)
    fig.subplots_adjust(left=0.1, right=0.985, top=0.95, bottom=0.01)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def _legend_state(e: Entry) -> str:
    """The state as the legend gives it: per layer; each layer's where they differ (drawn at
    their mean); a log L count with its length."""
    if e.state.get("layers"):
        return (" / ".join(f"{n:,.0f}" for n in e.state["layers"])
                + " by layer (drawn at their mean)")
    n = e.state["numbers"]
    if e.state.get("growth") == "log L" and e.state.get("length"):
        return f"{n:,.0f} at {e.state['length']} tokens"
    return f"{n:,.0f}"


def _beyond_label(e: Entry) -> str:
    name = e.label.replace(" / ", "\n")
    n = e.state.get("numbers")
    return f"{name}\n" + (f"{n:,.0f} per layer" if n is not None
                          else e.state.get("text") or "state unknown")


__all__ = ["FOCUS", "Entry", "figure", "frontier_text", "layers_note", "placement_entry",
           "progress", "reference_entries", "settled_lines", "sort_key", "state_dict",
           "state_text", "styles", "table_lines"]
