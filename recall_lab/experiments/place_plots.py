"""The two figures of a placement (`recall-lab place`): seeds solved against recurrent state per
layer, one panel per table, with the placed mixer drawn over the reference's rows (Wilson 95%
bars); and the frontier against state (the point frontier, bars for the range its seeds' Wilson
intervals allow). One bold colour for the placed mixer, the reference rows muted (one shade
per family, a marker per row), rows whose state grows with the sequence as a dashed line, the
legend outside the axes in room of its own (never narrowing them), markers drawn whole inside
the axes, no figure wider than 16 inches (four tables: panels in two rows). matplotlib is
imported when a figure is drawn (about 0.9 s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recall_lab.experiments import stats

MINE = "#d62728"  # the placed mixer
# tab10's hues but its red (the placed mixer's), lightened 40% towards white: muted, yet one
# family's hue apart from the next (the greyed shades before were hard to tell apart)
MUTED = ("#79add2", "#ffb26e", "#80c680", "#bfa4d7", "#ba9a93", "#eeadda", "#b2b2b2",
         "#d7d77a", "#74d8e2")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
SOLVED = "share of seeds solved"
LEGEND_IN = 4.2  # inches of figure right of the axes for the legend


def _family(label: str) -> str:
    return label.split(" / ")[0]


def _styles(rows: list[Any]) -> dict[str, tuple[str, str]]:
    fams = sorted({_family(r.label) for r in rows})
    colour = {f: MUTED[i % len(MUTED)] for i, f in enumerate(fams)}
    out, seen = {}, {}
    for r in sorted(rows, key=lambda r: r.label):
        f = _family(r.label)
        seen[f] = seen.get(f, -1) + 1
        out[r.label] = (colour[f], MARKERS[seen[f] % len(MARKERS)])
    return out


MIN_LINE_SEEDS = 3  # fewer seeds than this: a level is drawn as a point with its interval


def _level(ax, y: float, lo: float, hi: float, n: int, x_at: float, **style) -> None:
    """A rate or frontier with no state position (a state that grows with the sequence): a
    horizontal line over its interval's band from MIN_LINE_SEEDS seeds on; from fewer, a point
    with its interval at the right of the axes, never a solid line that hides how few ran."""
    colour, label = style.pop("color"), style.pop("label")
    if n >= MIN_LINE_SEEDS:
        ax.axhline(y, color=colour, label=label, **style)
        ax.axhspan(lo, hi, color=colour, alpha=0.12, lw=0)
    else:
        ax.errorbar([x_at], [y], yerr=[[y - lo], [hi - y]], fmt="*", color=colour, ms=10,
                    capsize=3, lw=1.5, zorder=5, label=f"{label}, {n} seed{'s' * (n != 1)}")


def place_figures(answer: dict, rows: list[Any], folder: Path) -> list[Path]:
    """place-solved-state.png and place-frontier.png in `folder`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    def numbers(ax) -> None:  # 1,000 rather than 10^3; no labels on the minor ticks
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())

    sizes = answer["protocol"]["tables"]
    names = answer["protocol"]["names"]
    styles = _styles(rows)
    mine_x = answer["state"]["numbers"]
    fixed = [r for r in rows if r.state is not None and r.state.numbers is not None]
    grows = [r for r in rows if r.state is not None and r.state.grows]
    xs = [r.state.numbers for r in fixed] + ([mine_x] if mine_x else [])
    x_lo, x_hi = (min(xs) / 1.6, max(xs) * 1.6) if xs else (1.0, 10.0)
    paths = []

    # 1. seeds solved against state, one panel per table (four: two rows of two)
    ncols = 2 if len(sizes) == 4 else min(len(sizes), 3)
    nrows = -(-len(sizes) // ncols)
    panels_in = 3.3 * ncols + 0.8
    fig, axes = plt.subplots(nrows, ncols, figsize=(panels_in + LEGEND_IN, 2.9 * nrows + 0.8),
                             sharey=True, squeeze=False)
    for ax in axes.flat[len(sizes):]:
        ax.set_visible(False)
    cells = {c["size"]: c for c in answer["cells"]}
    for ax, size in zip(axes.flat, sizes, strict=False):
        for r in fixed:
            g = r.cells.get(size)
            if g is None or not g.solved.n:
                continue
            s = g.solved
            colour, marker = styles[r.label]
            ax.errorbar([r.state.numbers], [s.k / s.n], yerr=[[s.k / s.n - s.lo],
                        [s.hi - s.k / s.n]], fmt=marker, color=colour, ms=5, capsize=2,
                        lw=1, label=r.label, alpha=0.9)
        for r in grows:
            g = r.cells.get(size)
            if g is not None and g.solved.n:
                _level(ax, g.solved.k / g.solved.n, g.solved.lo, g.solved.hi, g.solved.n,
                       x_hi / 1.3, color="#7f7f7f", ls="--", lw=1,
                       label=f"{r.label} (grows with L)")
        c = cells.get(size)
        if c is not None and c["solved"] and c["solved"]["n"]:
            s = c["solved"]
            rate = s["k"] / s["n"]
            if mine_x:
                ax.errorbar([mine_x], [rate], yerr=[[rate - s["lo"]], [s["hi"] - rate]],
                            fmt="*", color=MINE, ms=12, capsize=3, lw=2, zorder=5,
                            label=f"{answer['label']} (placed)")
            else:
                _level(ax, rate, s["lo"], s["hi"], s["n"], x_hi / 1.5, color=MINE, lw=2,
                       label=f"{answer['label']} (placed)")
        ax.set_xscale("log")
        ax.set_xlim(x_lo, x_hi)
        numbers(ax)
        ax.set_ylim(-0.07, 1.07)
        ran = (answer.get("ran") or {}).get("tables", sizes)
        ax.set_title(names[f"{size:g}"] + (" (cut)" if c and c["status"] == "cut" else "")
                     + ("" if size in ran else " (placed mixer: not run)"), fontsize=10)
        ax.set_xlabel("recurrent state per layer (numbers)", fontsize=8)
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel(f"{SOLVED}\n(Wilson 95%)")
    handles, labels = {}, []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    right = panels_in / (panels_in + LEGEND_IN)
    fig.legend([handles[x] for x in labels], labels, loc="center left",
               bbox_to_anchor=(right + 0.01, 0.5), fontsize=7, frameon=False)
    fig.suptitle(f"{answer['label']} placed on {answer['reference']['name']}", fontsize=11)
    fig.tight_layout(rect=(0, 0, right, 0.96))
    path = Path(folder) / "place-solved-state.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)

    # 2. the frontier against state
    fig, ax = plt.subplots(figsize=(5.6 + LEGEND_IN, 3.8))
    for r in fixed:
        pts = [(s, g.solved) for s, g in r.cells.items() if g.solved.n]
        if not pts:
            continue
        f, lo, hi = _frontier(pts)
        colour, marker = styles[r.label]
        ax.errorbar([r.state.numbers], [f], yerr=[[f - lo], [hi - f]], fmt=marker,
                    color=colour, ms=6, capsize=3, lw=1, label=r.label)
    for r in grows:
        pts = [(s, g.solved) for s, g in r.cells.items() if g.solved.n]
        if pts:
            ax.axhline(_frontier(pts)[0] or 0.5, color="#7f7f7f", ls="--", lw=1,
                       label=f"{r.label} (grows with L)")
    fr = answer["frontier"]
    y = [fr["frontier"] or 0.5]
    lo, hi = fr["range"][0] or 0.5, fr["range"][1] or 0.5
    err = [[y[0] - lo], [hi - y[0]]]
    seeds = min((c["solved"]["n"] for c in answer["cells"] if c["solved"]), default=0)
    mine_label = f"{answer['label']} (placed)"
    if answer["state"].get("growth") == "log L":  # a count that grows as log L: where it sits
        mine_label += f", state {answer['state']['text']}: its count at the longest table"
    if fr.get("censored"):  # tables not run could raise it: say so, and point up
        mine_label += f": tables above {fr['ran_to']:g} not run"
    at = mine_x or x_hi / 1.5
    if mine_x:
        ax.errorbar([mine_x], y, yerr=err, fmt="*", color=MINE, ms=14, capsize=4, lw=2,
                    zorder=5, label=mine_label)
    else:
        _level(ax, y[0], lo, hi, seeds, at, color=MINE, lw=2, label=mine_label)
    if fr.get("censored"):
        ax.annotate("", xy=(at, max(fr["censored"])), xytext=(at, hi),
                    arrowprops={"arrowstyle": "->", "color": MINE, "ls": ":", "lw": 1.5})
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    # a third of a power of 2 beyond "none" and the largest table: markers drawn whole
    ax.set_ylim(0.5 / 2 ** 0.35, max(sizes) * 2 ** 0.35)
    ax.set_yticks([s for s in sizes] + [0.5])
    ax.set_yticklabels([f"{s:g}" for s in sizes] + ["none"])
    ax.set_xlim(x_lo, x_hi)
    numbers(ax)
    ax.set_xlabel("recurrent state per layer (numbers)")
    ax.set_ylabel("frontier: largest table solved\nin >= half the seeds [range]")
    ax.grid(alpha=0.3)
    right = 5.6 / (5.6 + LEGEND_IN)
    fig.legend(*ax.get_legend_handles_labels(), loc="center left",
               bbox_to_anchor=(right + 0.01, 0.5), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, right, 1))
    path = Path(folder) / "place-frontier.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
    return paths


def _frontier(points: list) -> tuple[float, float, float]:
    """(frontier, range low, range high); 0.5 stands for "none" on the log axis."""
    f = stats.frontier(points) or 0.5
    lo, hi = stats.frontier_range(points)
    return f, lo or 0.5, hi or 0.5
