"""The report's figures (matplotlib, Agg): bars per group (the mean over seeds, one dot per seed,
+/- std clipped to [0, 1] for accuracies) with the reference numbers beside ours, the metric
against each numeric grouping field (one dot per seed, the std band clipped likewise), the
validation curves of the runs each group's best lr selected, and the solve-rate figures: seeds
solved against each numeric field (Wilson 95% band), survival (the Kaplan-Meier fraction of
seeds solved against training steps, with its 95% band; a row with no seed solved is named in
words in its panel, "no seed solved within N steps", rather than drawn as a flat line at 0), the
learning-rate window (solve rate against lr), and against the recurrent state per layer in
numbers (experiments/state.py: `recall-lab models`' count over the layers; the short
convolutions' caches are not on the axis):
the seeds solved (one line per model family through its state sizes, one panel per table) and
the frontier (largest table solved in >= half the seeds); rows whose state grows with the
sequence (attention) are dashed lines at their value in both.

Read across figures: each *row* (a group's values less the facet field, e.g. "mamba / d_state=4")
keeps one colour in every figure of a report (a line through several rows, e.g. against d_state,
takes its first row's; a family's line against state takes the family's hue, its points their
rows' shades); rows of one model share its hue, in shades. One quantity has one axis scale in
every figure (`axis_scale`: the table size and d_state on log2, in the accuracy and the
solve-rate figures alike). Figures
with more than one table size draw one small panel per size (the facet field: `task.levels` when
it varies; otherwise, past `MAX_LINES` groups, the first grouping field that is not the model),
at most `MAX_LINES` lines a panel, and put the legend outside the axes.

Readable by a person: no figure wider than `MAX_WIDTH` inches (more groups than bars fit: the
solved grid, rows x tables with k/n in each cell, or rows of bars); every solve-rate axis reads
"share of seeds solved"; lines on the same points drawn side by side with a marker each
(`dodged`); markers whole inside the axes; a reference value the source does not give written
"not reported", and the reference's legend entry naming the task it was measured on."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    EngFormatter,
    FuncFormatter,
    LogLocator,
    NullFormatter,
)

from recall_lab import checkpoint as ck  # noqa: E402
from recall_lab.analysis.plots import save_figure  # noqa: E402
from recall_lab.experiments import stats  # noqa: E402
from recall_lab.experiments.grid import format_value, group_label, numeric  # noqa: E402

MAX_LINES = 8  # lines per panel; more are split over further panels
HUES = [*plt.get_cmap("tab10").colors, *plt.get_cmap("Dark2").colors]
MAX_WIDTH = 16.0  # inches: no figure is wider (zoo-frontier's 57 bars in one row were 43)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")  # lines of a panel: one shape each
SOLVED = "share of seeds solved"  # every solve-rate axis (0 to 1: a share, not a count)
NOT_REPORTED = "not reported"  # a reference value the source does not give


# ---- rows, panels and colours -------------------------------------------------------------------

def facet_field(rep: dict) -> str | None:
    """The field the figures split into panels: `task.levels` when it varies (one panel per
    table size); else, when there are more groups than fit one panel, the first grouping field
    that is not the model and varies; else None."""
    groups = rep["groups"]

    def varies(f: str) -> bool:
        return len({repr(g.values.get(f)) for g in groups}) > 1

    if "task.levels" in rep["by"] and varies("task.levels"):
        return "task.levels"
    if len(groups) > MAX_LINES:
        for f in rep["by"]:
            if f != "model.name" and varies(f):
                return f
    return None


def row_label(rep: dict, g, facet: str | None = None) -> str:
    """A group's row: its values less the facet field."""
    return group_label({f: v for f, v in g.values.items() if f != facet})


def panel_label(field: str | None, value: Any) -> str:
    if field is None:
        return ""
    if field == "task.levels":
        size = numeric(field, value)
        return f"table {size:g} entries" if size is not None else format_value(value)
    return f"{field.rsplit('.', 1)[1]}={format_value(value)}"


def _shade(colour, f: float) -> tuple[float, float, float]:
    """`colour` darkened towards black (f < 0) or lightened towards white (f > 0)."""
    r, g, b = to_rgb(colour)
    if f < 0:
        return (r * (1 + f), g * (1 + f), b * (1 + f))
    return (r + (1 - r) * f, g + (1 - g) * f, b + (1 - b) * f)


def _sort_key(values: dict[str, Any]) -> tuple:
    return tuple((0, num, "") if (num := numeric(f, v)) is not None else (1, 0.0, repr(v))
                 for f, v in values.items())


@dataclass
class Palette:
    """One colour per row of a report (kept across its figures) and one hue per model."""

    facet: str | None
    rows: dict[str, tuple]
    hues: dict[str, tuple]

    def row(self, label: str):
        return self.rows.get(label)

    def model(self, name: str):
        return self.hues.get(name)


def palette(rep: dict) -> Palette:
    """Rows of one model (`model.name`) share its hue, from dark to light in the order of their
    other values (e.g. d_state 1, 4, 16); without a model field every row gets its own hue."""
    facet = facet_field(rep)
    by_hue: dict[str, dict[str, dict]] = {}
    for g in rep["groups"]:
        values = {f: v for f, v in g.values.items() if f != facet}
        hue = (format_value(g.values["model.name"]) if "model.name" in g.values
               else group_label(values))
        by_hue.setdefault(hue, {})[group_label(values)] = values
    rows: dict[str, tuple] = {}
    hues: dict[str, tuple] = {}
    for i, (hue, members) in enumerate(by_hue.items()):
        base = HUES[i % len(HUES)]
        hues[hue] = to_rgb(base)
        ordered = sorted(members, key=lambda lab: _sort_key(members[lab]))
        m = len(ordered)
        for j, lab in enumerate(ordered):
            rows[lab] = to_rgb(base) if m == 1 else _shade(base, -0.35 + 0.8 * j / (m - 1))
    return Palette(facet, rows, hues)


def _line_colour(pal: Palette, rep: dict, groups: list):
    """The colour of a line through `groups` (in x order): their row's when they share one,
    else the first group's row's (lines through other rows start at rows of their own, so the
    lines of a figure keep distinct colours)."""
    return pal.row(row_label(rep, groups[0], pal.facet))


@dataclass
class Line:
    panel: str  # panel title ("" = the figure has one panel)
    label: str  # legend entry (lines with the same label share one entry)
    colour: Any
    data: Any
    order: tuple = ()  # the panel's place (panels sorted by it)


def draw_panels(lines: list[Line], draw: Callable, path: Path, *, title: str, xlabel: str,
                ylabel: str, rate: bool = False, xscale: tuple | None = None,
                eng: bool = False, annotate: Callable | None = None,
                legend_extra: dict[str, Any] | None = None) -> Path:
    """One small panel per panel key (at most MAX_LINES lines each: more are split over further
    panels), shared axes, labels on the outer panels, one legend outside on the right.
    `draw(ax, line)` draws a line and returns its legend handle (None: no entry);
    `annotate(ax, lines)`, once every panel is drawn and scaled, writes into a panel;
    `legend_extra`: further legend entries (label -> handle) for marks drawn with the lines."""
    panels: dict[str, list[Line]] = {}
    order: dict[str, tuple] = {}
    for ln in lines:
        panels.setdefault(ln.panel, []).append(ln)
        order.setdefault(ln.panel, ln.order)
    split: list[tuple[str, list[Line]]] = []
    for key in sorted(panels, key=lambda k: order[k]):
        labels = list(dict.fromkeys(ln.label for ln in panels[key]))
        chunks = [labels[i:i + MAX_LINES] for i in range(0, len(labels), MAX_LINES)] or [[]]
        for j, chunk in enumerate(chunks):
            part = f" ({j + 1}/{len(chunks)})" if len(chunks) > 1 else ""
            split.append((f"{key}{part}".strip(),
                          [ln for ln in panels[key] if ln.label in chunk]))
    if not split:
        split = [("", [])]
    n = len(split)
    ncols = 2 if n == 4 else min(n, 3)
    nrows = math.ceil(n / ncols)
    size = (6.5, 4.2) if n == 1 else (1.5 + 3.3 * ncols, 0.9 + 2.7 * nrows)
    fig, axes = plt.subplots(nrows, ncols, figsize=size, sharex=True, sharey=True, squeeze=False)
    handles: dict[str, Any] = {}
    flat = list(axes.flat)
    for ax, (key, panel_lines) in zip(flat, split, strict=False):
        for ln in panel_lines:
            h = draw(ax, ln)
            if h is not None:
                handles.setdefault(ln.label, h)
        if key:
            ax.set_title(key, fontsize=9)
        ax.grid(alpha=0.3)
        if rate:  # markers at 0 and 1 drawn whole, not cut by the axes' edges
            ax.set_ylim(-0.05, 1.05)
        if xscale:
            ax.set_xscale(*xscale[:1], **(xscale[1] if len(xscale) > 1 else {}))
        if eng and xscale and xscale[0] == "log":  # powers of 2 written out (512, 1,024,
            ax.xaxis.set_major_locator(LogLocator(base=2))  # ...), no minor labels: within a
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
            ax.xaxis.set_minor_formatter(NullFormatter())  # decade they overlap
            # slanted: across 2^9 to 2^17 (HAX's slots) 32,768 and 131,072 ran into each other
            ax.tick_params(axis="x", labelrotation=30)
        elif eng:  # 160k, not 160000 (long tick labels run into each other)
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    if annotate is not None:
        for ax, (_, panel_lines) in zip(flat, split, strict=False):
            annotate(ax, panel_lines)
    for ax in flat[n:]:
        ax.set_visible(False)
    for col in range(ncols):  # the lowest visible panel of each column carries the x labels
        last = max(r for r in range(nrows) if r * ncols + col < n)
        axes[last][col].set_xlabel(xlabel, fontsize=8)
        axes[last][col].tick_params(labelbottom=True)
    for r in range(nrows):
        axes[r][0].set_ylabel(ylabel, fontsize=8)
    handles.update(legend_extra or {})
    if handles:
        axes[0][ncols - 1].legend(list(handles.values()), list(handles), loc="upper left",
                                  bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False)
    if n == 1:  # over one panel: long lines wrapped (a legend outside narrows the axes, and a
        # 66-character title ran past the figure's left edge)
        ax = axes[0][0]
        ax.set_title("\n".join(textwrap.fill(line, TITLE_WIDTH)
                                for line in title.split("\n")), fontsize=10)
        # a long legend narrows the axes: a title wider than what is left of them starts at
        # their left edge and runs on over the legend's room (centred, it was cut at the left)
        renderer = fig.canvas.get_renderer()
        legend = ax.get_legend()
        room = fig.get_figwidth() - 1.2 - (
            legend.get_window_extent(renderer).width / fig.dpi if legend else 0.0)
        if ax.title.get_window_extent(renderer).width / fig.dpi > room:
            ax.title.set_horizontalalignment("left")
            ax.title.set_x(0.0)
    else:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def _panel_of(pal: Palette, g, skip: str | None = None) -> tuple[str, tuple]:
    """A group's panel (its facet value) and the panel's place; none when the figure's x axis
    is the facet field itself (`skip`)."""
    if pal.facet is None or pal.facet == skip:
        return "", ()
    value = g.values.get(pal.facet)
    num = numeric(pal.facet, value)
    return panel_label(pal.facet, value), ((0, num) if num is not None else (1, repr(value)))


# ---- figures ------------------------------------------------------------------------------------

LOG2_AXES = ("task.levels", "model.d_state")  # drawn on log2 in every figure (`axis_scale`)
LOG_AXES = ("train.lr",)  # log10, as the learning-rate window
TITLE_WIDTH = 60  # characters per line of a one-panel figure's title
SEED_DOT = "0.1"  # the bars' per-seed dots: one colour over every row's bar


def bounded(metric: str) -> bool:
    """Whether `metric` lies in [0, 1]: an accuracy (its last part `acc`, or starting or ending
    with it), whose bars, error bars and bands are clipped to [0, 1]."""
    leaf = metric.rsplit(".", 1)[-1]
    return leaf.startswith("acc") or leaf.endswith("acc")


def std_span(mean: float, std: float | None, unit: bool) -> tuple[float, float]:
    """mean -/+ std, clipped to [0, 1] where the metric is `bounded` (`unit`): an accuracy of
    0.95 +/- 0.13 is drawn up to 1.0, never 1.08."""
    lo, hi = mean - (std or 0.0), mean + (std or 0.0)
    return (max(0.0, lo), min(1.0, hi)) if unit else (lo, hi)


def seed_values(rep: dict, g) -> list[float]:
    """A group's finished seeds' values of the report's metric (its selected runs at the best
    lr, in seed order; report.json's `per_seed` less the runs without the metric): the dots."""
    return [v for r in g.selected if (v := r.metric(rep["metric"])) is not None]


def axis_scale(axis: str) -> dict[str, Any]:
    """The x scale of one numeric grouping field, the same in every figure that has it on its
    x axis (the metric's and the solve rate's): log2 with the powers of 2 written out for the
    table size and d_state, log10 for the lr (as the learning-rate window draws it), linear
    otherwise."""
    if axis in LOG2_AXES:
        return {"xscale": ("log", {"base": 2}), "eng": True}
    return {"xscale": ("log",)} if axis in LOG_AXES else {}


def _spread(x: float, n: int, width: float) -> list[float]:
    """n x positions spread evenly over the middle 60% of a bar at x (one seed each)."""
    if n < 2:
        return [x] * n
    return [x + width * 0.6 * (i / (n - 1) - 0.5) for i in range(n)]


LEGEND_WIDTH = 44  # characters per line of a long legend entry
BAR_WIDTH = 0.7  # inches per group in the bar figure, beside 3.5 for the labels and legend
BARS_PER_ROW = int((MAX_WIDTH - 3.5) / BAR_WIDTH)  # more: rows of bars, or the solved grid


def reference_label(rep: dict) -> str:
    """The legend's words for the reference bars: its source and the task its numbers were
    measured on (the [reference] table's `task`), which need not be this report's."""
    ref = rep["reference"] or {}
    task = ref.get("task")
    words = (f"reference: {ref.get('source', 'reference')}; "
             + (f"measured on {task}" if task else "its task not recorded"))
    return textwrap.fill(words, LEGEND_WIDTH)  # a legend beside the axes never wider than them


def _bars(ax, rep: dict, groups: list, pal: Palette, unit: bool, has_ref: bool) -> dict:
    """One row of bars (see `plot_bars`) in `ax`; the legend's handles."""
    ref = (rep["reference"] or {}).get("values") or {}
    width = 0.4 if has_ref else 0.7
    xs = [x - width / 2 if has_ref else float(x) for x in range(len(groups))]
    rows = [row_label(rep, g, pal.facet) for g in groups]
    bars = ax.bar(xs, [g.mean if g.mean is not None else 0.0 for g in groups], width,
                  color=[pal.row(r) for r in rows], zorder=2)
    handles: dict[str, Any] = {}
    if pal.facet:  # a row's colour over several bars: the legend says which row it is
        for r, patch in zip(rows, bars.patches, strict=True):
            handles.setdefault(r, patch)
    spread = [(x, g) for x, g in zip(xs, groups, strict=True)
              if g.mean is not None and g.std is not None]
    if spread:
        spans = [std_span(g.mean, g.std, unit) for _, g in spread]
        err = ax.errorbar([x for x, _ in spread], [g.mean for _, g in spread],
                          yerr=[[g.mean - lo for (_, g), (lo, _) in zip(spread, spans,
                                                                       strict=True)],
                                [hi - g.mean for (_, g), (_, hi) in zip(spread, spans,
                                                                       strict=True)]],
                          fmt="none", ecolor="0.3", elinewidth=1, capsize=3, zorder=3)
        handles["+/- std over seeds" + (" (clipped to [0, 1])" if unit else "")] = err
    dots = None
    for x, g in zip(xs, groups, strict=True):
        vals = seed_values(rep, g)
        if vals:
            dots = ax.scatter(_spread(x, len(vals), width), vals, s=14, color=SEED_DOT,
                              edgecolors="white", linewidths=0.6, zorder=4,
                              gid=f"seeds:{g.label}")
        else:
            ax.text(x, 0.01, "none", ha="center", fontsize=7, rotation=90)
    if dots is not None:
        handles["one seed"] = dots
    if has_ref:
        given = [(x + width, ref[g.label]) for x, g in zip(xs, groups, strict=True)
                 if g.label in ref]
        handles[reference_label(rep)] = ax.bar(
            [x for x, _ in given], [v for _, v in given], width, hatch="//", color="0.85",
            edgecolor="0.35", zorder=2)
        for x, g in zip(xs, groups, strict=True):  # never a bar of 0, never a gap unexplained
            if g.label not in ref:
                ax.text(x + width, 0.02, NOT_REPORTED, ha="center", va="bottom", rotation=90,
                        fontsize=7, color="0.35", gid="not-reported")
    ax.set_xticks([x + width / 2 if has_ref else x for x in xs], [g.label for g in groups],
                  rotation=45, ha="right", fontsize=8)
    ax.set_ylabel(rep["metric"])
    if unit:
        ax.set_ylim(-0.04, 1.06)
    ax.grid(axis="y", alpha=0.3)
    return handles


def plot_bars(rep: dict, path: Path, pal: Palette | None = None) -> Path:
    """One bar per group at the mean over its seeds, in its row's colour, one dark dot per
    seed over it (spread across the bar: bimodal seeds show as two clusters), +/- std as an
    error bar (clipped to [0, 1] for an accuracy), the reference's numbers as grey hatched bars
    beside ours ("not reported" where the reference has no number for a group). The legend
    names the dots, the error bars, the reference with the task it was measured on and, where
    rows span several bars (one panel key, e.g. the table size, per bar), each row's colour.
    More groups than fit `MAX_WIDTH` inches: with a facet field (the table size) and no
    reference, the solved grid (`plot_solved_grid`) instead; else rows of bars."""
    pal = pal or palette(rep)
    groups, metric = rep["groups"], rep["metric"]
    unit = bounded(metric)
    has_ref = any(g.label in ((rep["reference"] or {}).get("values") or {}) for g in groups)
    per_row = BARS_PER_ROW
    if len(groups) > per_row and pal.facet and not has_ref:
        return plot_solved_grid(rep, path, pal)
    per_row = math.ceil(len(groups) / max(1, math.ceil(len(groups) / per_row)))  # balanced
    chunks = [groups[i:i + per_row] for i in range(0, len(groups), per_row)] or [[]]
    # room on the right for the legend, and on the left for the first slanted label
    width = min(MAX_WIDTH, max(6.5, BAR_WIDTH * max(len(c) for c in chunks) + 3.5))
    fig, axes = plt.subplots(len(chunks), 1, figsize=(width, 4.2 * len(chunks)),
                             sharey=True, squeeze=False)
    handles: dict[str, Any] = {}
    for ax, chunk in zip(axes[:, 0], chunks, strict=True):
        for label, h in _bars(ax, rep, chunk, pal, unit, has_ref).items():
            handles.setdefault(label, h)
    axes[0][0].legend(list(handles.values()), list(handles), fontsize=7, loc="upper left",
                      bbox_to_anchor=(1.02, 1.0), frameon=False)
    axes[0][0].set_title(f"{metric} at the best lr per group\nbars: mean over seeds; dots: one "
                         "per seed", fontsize=10)
    fig.tight_layout()  # a first pass: the slanted labels move as the axes shrink (the second,
    return save_figure(fig, path)  # save_figure's, then fits the first label in the figure)


def plot_solved_grid(rep: dict, path: Path, pal: Palette | None = None) -> Path:
    """Seeds solved as a grid, for a report with more groups than bars fit: one row per row of
    the report (its values less the facet field), one column per facet value (the table size),
    each cell coloured by the share of seeds solved and written "k/n" with the mean metric
    below; a cell no group ran is grey, "not run"."""
    import numpy as np

    pal = pal or palette(rep)
    facet = pal.facet
    rows = list(dict.fromkeys(row_label(rep, g, facet) for g in rep["groups"]))
    cols = sorted({repr(g.values.get(facet)): g.values.get(facet) for g in rep["groups"]}
                  .values(), key=lambda v: _sort_key({facet: v}))
    at = {(row_label(rep, g, facet), repr(g.values.get(facet))): g for g in rep["groups"]}
    share = np.full((len(rows), len(cols)), np.nan)
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            g = at.get((r, repr(c)))
            if g is not None and g.solved.n:
                share[i, j] = g.solved.k / g.solved.n
    label_in = 0.065 * max(len(r) for r in rows)  # inches for the longest row label
    width = min(MAX_WIDTH, 2.6 + label_in + 1.15 * len(cols))
    fig, ax = plt.subplots(figsize=(width, 1.6 + 0.34 * len(rows)))
    cmap = plt.get_cmap("Blues").with_extremes(bad="0.92")
    image = ax.imshow(np.ma.masked_invalid(share), cmap=cmap, vmin=0.0, vmax=1.0,
                      aspect="auto")
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            g = at.get((r, repr(c)))
            if g is None or not g.solved.n:
                text, dark = ("not run" if g is None else "no seed finished"), False
            else:
                text = f"{g.solved.k}/{g.solved.n}" + (
                    f"\n{g.mean:.2f}" if g.mean is not None else "")
                dark = share[i, j] > 0.6
            ax.text(j, i, text, ha="center", va="center", fontsize=7,
                    color="white" if dark else "black", gid=f"cell:{r}:{j}")
    ax.set_xticks(range(len(cols)), [panel_label(facet, c) for c in cols], fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.tick_params(length=0)
    bar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    bar.set_label(f"{SOLVED} ({rep['metric']} >= {rep['solve_at']:g})", fontsize=8)
    ax.set_title(f"seeds solved at the best lr per group (cell: k/n seeds; below it: mean "
                 f"{rep['metric']})", fontsize=10)
    return save_figure(fig, path)


def dodged(lines: list[Line], axis: str) -> dict[str, tuple[str, Any]]:
    """Each line's marker and x shift, so that lines on the same points (every row solved at
    the small tables, none at the large ones) show side by side, not one under the other: the
    i-th of n lines of a panel is moved by (i - (n - 1) / 2) x 4% of a power of 2 on a log2
    axis (table size, d_state; 10% of a decade on log10), else of the smallest spacing of its
    x values, and drawn with the i-th marker. label -> (marker, shift(x) function)."""
    by_panel: dict[str, list[str]] = {}
    for ln in lines:
        by_panel.setdefault(ln.panel, [])
        if ln.label not in by_panel[ln.panel]:
            by_panel[ln.panel].append(ln.label)
    xs = sorted({p[0] for ln in lines for p in ln.data})
    gaps = [b - a for a, b in zip(xs, xs[1:], strict=False) if b > a]
    out: dict[str, tuple[str, Any]] = {}
    for labels in by_panel.values():
        n = len(labels)
        for i, label in enumerate(labels):
            off = i - (n - 1) / 2
            if axis in LOG2_AXES:
                def shift(x, f=2.0 ** (0.04 * off)):
                    return x * f
            elif axis in LOG_AXES:
                def shift(x, f=10.0 ** (0.1 * off)):
                    return x * f
            else:
                def shift(x, d=0.04 * off * (min(gaps) if gaps else 1.0)):
                    return x + d
            out.setdefault(label, (MARKERS[i % len(MARKERS)], shift))
    return out


def _axis_lines(rep: dict, pal: Palette, axis: str, point) -> list[Line]:
    """Lines against one numeric grouping field: one per combination of the other fields (less
    the facet field, which makes the panels); `point(g)` gives a group's y data or None."""
    lines: dict[tuple[str, str], list] = {}
    meta: dict[tuple[str, str], tuple] = {}
    for g in rep["groups"]:
        y = point(g)
        if y is None or g.values[axis] is None:  # None: a model without the field
            continue
        panel, order = _panel_of(pal, g, skip=axis)
        name = group_label({f: v for f, v in g.values.items()
                       if f != axis and (f != pal.facet or pal.facet == axis)})
        if name == "all":
            name = rep["metric"]
        if axis == "task.levels":  # MQAR (w = 1) and MQJR (w = 2) tables are separate curves
            name = f"{name} / w={len(g.values[axis])}"
        lines.setdefault((panel, name), []).append((numeric(axis, g.values[axis]), y, g))
        meta[(panel, name)] = order
    out = []
    for (panel, name), pts in lines.items():
        pts.sort(key=lambda p: p[0])
        out.append(Line(panel, name, _line_colour(pal, rep, [p[2] for p in pts]),
                        [(p[0], p[1]) for p in pts], meta[(panel, name)]))
    return out


def _axis_label(axis: str) -> str:
    return f"{axis} (table size: entries)" if axis == "task.levels" else axis


def plot_axis(rep: dict, axis: str, path: Path, pal: Palette | None = None) -> Path:
    """Metric vs one numeric grouping field (task.levels as table size): the mean over seeds
    as a line, one dot per seed, +/- std as a band (clipped to [0, 1] for an accuracy)."""
    pal = pal or palette(rep)
    unit = bounded(rep["metric"])

    def draw(ax, ln: Line):
        x, m, s, seeds = zip(*[(p[0], *p[1]) for p in ln.data], strict=True)
        (h,) = ax.plot(x, m, marker="o", color=ln.colour, lw=1.3, ms=3)
        lo, hi = zip(*[std_span(a, b, unit) for a, b in zip(m, s, strict=True)], strict=True)
        ax.fill_between(x, lo, hi, color=h.get_color(), alpha=0.15)
        ax.scatter([xx for xx, vs in zip(x, seeds, strict=True) for _ in vs],
                   [v for vs in seeds for v in vs], s=9, color=h.get_color(), alpha=0.55,
                   linewidths=0, zorder=3, gid=f"seeds:{ln.label}")
        return h

    lines = _axis_lines(rep, pal, axis, lambda g: None if g.mean is None
                        else (g.mean, g.std, seed_values(rep, g)))
    clip = ", clipped to [0, 1]" if unit else ""
    return draw_panels(lines, draw, path, title=f"{rep['metric']} vs {axis}\n(dots: one per "
                       f"seed; band: +/- std over seeds{clip})", xlabel=_axis_label(axis),
                       ylabel=rep["metric"], rate=unit, **axis_scale(axis))


def plot_solved_axis(rep: dict, axis: str, path: Path, pal: Palette | None = None) -> Path:
    """The share of seeds solved against one numeric grouping field, with the Wilson 95%
    interval shaded; lines on the same points side by side (`dodged`), one marker each."""
    pal = pal or palette(rep)

    def draw(ax, ln: Line):
        marker, shift = styles[ln.label]
        x = [shift(p[0]) for p in ln.data]
        rates = [p[1] for p in ln.data]
        (h,) = ax.plot(x, [r.k / r.n for r in rates], marker=marker, color=ln.colour, lw=1.3,
                       ms=4)
        ax.fill_between(x, [r.lo for r in rates], [r.hi for r in rates], color=h.get_color(),
                        alpha=0.10)
        return h

    lines = _axis_lines(rep, pal, axis, lambda g: g.solved if g.solved.n else None)
    styles = dodged(lines, axis)
    return draw_panels(lines, draw, path, title=f"solve rate vs {axis} (band: Wilson 95%; "
                       "lines on the same points drawn side by side)",
                       xlabel=_axis_label(axis), ylabel=f"{SOLVED}\n({rep['metric']} >= "
                       f"{rep['solve_at']:g})", rate=True, **axis_scale(axis))


def _group_lines(rep: dict, pal: Palette, data) -> list[Line]:
    """One line per group with `data(g)` not None: its row's colour, its facet value's panel."""
    out = []
    for g in rep["groups"]:
        d = data(g)
        if d is None:
            continue
        panel, order = _panel_of(pal, g)
        out.append(Line(panel, row_label(rep, g, pal.facet), pal.row(row_label(rep, g,
                                                                             pal.facet)),
                        (g, d), order))
    return out


def plot_curves(rep: dict, path: Path, pal: Palette | None = None) -> Path:
    """Held-out accuracy against step for every selected run (thin lines, one colour per row)."""
    pal = pal or palette(rep)

    def curves(g):
        out = []
        for r in g.selected:
            if (r.folder / ck.METRICS).is_file():
                rows = [x for x in ck.read_lines(r.folder / ck.METRICS)
                        if x.get("split") == "valid"]
                if rows:
                    out.append(([x["step"] for x in rows], [x["acc"] for x in rows]))
        return out or None

    def draw(ax, ln: Line):
        h = None
        for xs, ys in ln.data[1]:
            (h,) = ax.plot(xs, ys, color=ln.colour, alpha=0.7, lw=0.8)
        return h

    return draw_panels(_group_lines(rep, pal, curves), draw, path,
                       title="validation curves of the selected runs (one line per seed)",
                       xlabel="step", ylabel="held-out accuracy")


CORNERS = {  # where a panel's words go: axes position, alignment
    "upper left": ((0.03, 0.97), "left", "top"),
    "lower right": ((0.97, 0.03), "right", "bottom"),
    "upper right": ((0.97, 0.97), "right", "top"),
    "lower left": ((0.03, 0.03), "left", "bottom"),
}


def _quiet_corner(ax, curves: list[tuple[list, list]], text: str, style: dict) -> None:
    """Write `text` (in a white box) in the corner of `ax` (CORNERS) where its box covers the
    fewest points of the step curves drawn there (each sampled at 400 steps along x and 20
    points up each rise; the first corner on ties)."""
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    data = []
    for times, ys in curves:
        for i in range(401):
            t = x0 + (x1 - x0) * i / 400
            if times[0] <= t <= times[-1]:
                data.append((t, ys[max(j for j, tt in enumerate(times) if tt <= t)]))
        data += [(times[k], ys[k - 1] + (ys[k] - ys[k - 1]) * i / 20)
                 for k in range(1, len(times)) for i in range(21)]
    pts = [((t - x0) / (x1 - x0), (y - y0) / (y1 - y0)) for t, y in data]
    renderer = ax.figure.canvas.get_renderer()
    best = None
    for (cx, cy), ha, va in CORNERS.values():
        t = ax.text(cx, cy, text, ha=ha, va=va, multialignment="left",
                    bbox={"facecolor": "white", "alpha": 0.75, "edgecolor": "0.8", "pad": 2},
                    **style)
        box = t.get_window_extent(renderer).transformed(ax.transAxes.inverted())
        n = sum(box.x0 <= px <= box.x1 and box.y0 <= py <= box.y1 for px, py in pts)
        if best is None or n < best[0]:
            if best is not None:
                best[1].remove()
            best = (n, t)
        else:
            t.remove()


def unsolved_text(lines: list[Line]) -> str | None:
    """The words for the rows of a panel that no seed solved (`lines`' data: (group, its
    Kaplan-Meier estimate)), by the step their longest seed trained to: "no seed solved within
    2,500 steps:" and the rows; None when every row solved some seed."""
    by_steps: dict[float, list[str]] = {}
    for ln in lines:
        km = ln.data[1]
        if not km.events:
            by_steps.setdefault(km.horizon, []).append(ln.label)
    return "\n".join(f"no seed solved within {steps:,.0f} steps:\n" + "\n".join(
        f"  {label}" for label in labels) for steps, labels in sorted(by_steps.items())) or None


def plot_survival(rep: dict, path: Path, pal: Palette | None = None) -> Path:
    """Kaplan-Meier fraction of each group's seeds solved by each training step (the steps
    every table counts), unsolved seeds censored at their last step, with the 95% band: speed
    and reliability in one picture. A row no seed solved is not drawn (its flat line at 0
    would hide the others'): its panel names it in words, "no seed solved within N steps"
    (N: the last step its seeds trained), in the middle of a panel where no row solved, else
    in the corner its curves leave free."""
    pal = pal or palette(rep)

    def draw(ax, ln: Line):
        km = ln.data[1]
        if not km.events:
            return None  # named in words (`words`)
        (h,) = ax.step(km.times, km.solved, where="post", color=ln.colour, lw=1.3)
        ax.fill_between(km.times, km.lo, km.hi, step="post", color=h.get_color(), alpha=0.12)
        return h

    def words(ax, panel: list[Line]) -> None:
        text = unsolved_text(panel)
        if text is None:
            return
        solved = [ln.data[1] for ln in panel if ln.data[1].events]
        last = max(ln.data[1].horizon for ln in panel)
        x0, x1 = ax.get_xlim()
        if x1 < last:  # the axis reaches the step the words name (no curve may: none solved)
            ax.set_xlim(min(x0, 0.0), last)
        style = {"fontsize": 7, "transform": ax.transAxes, "gid": "unsolved", "zorder": 5}
        if not solved:
            ax.text(0.5, 0.5, text, ha="center", va="center", multialignment="left", **style)
            return
        _quiet_corner(ax, [(km.times, km.solved) for km in solved], text, style)

    lines = _group_lines(rep, pal, lambda g: g.survival)
    if not pal.facet:  # one panel: the seeds solved in the legend
        for ln in lines:
            g = ln.data[0]
            ln.label = f"{ln.label} ({g.solved.k}/{g.solved.n})"
    return draw_panels(lines, draw, path, title=f"survival: seeds solved ({rep['metric']} >= "
                       f"{rep['solve_at']:g}), Kaplan-Meier, band 95%",
                       xlabel="training steps", ylabel=SOLVED, rate=True,
                       eng=True, annotate=words)


def plot_window(rep: dict, path: Path, pal: Palette | None = None) -> Path:
    """Solve rate against the learning rate, one line per group (every lr's seeds), Wilson 95%
    error bars: the learnability window."""
    pal = pal or palette(rep)

    def points(g):
        pts = sorted((lr, r) for lr, r in g.lr_solved.items() if r.n)
        return pts or None

    def draw(ax, ln: Line):
        pts = ln.data[1]
        x = [p[0] for p in pts]
        y = [p[1].k / p[1].n for p in pts]
        err = [[yy - p[1].lo for yy, p in zip(y, pts, strict=True)],
               [p[1].hi - yy for yy, p in zip(y, pts, strict=True)]]
        return ax.errorbar(x, y, yerr=err, marker="o", ms=3, capsize=3, color=ln.colour)

    return draw_panels(_group_lines(rep, pal, points), draw, path,
                       title="learning-rate window (Wilson 95% bars)", xlabel="learning rate",
                       ylabel=SOLVED, rate=True, xscale=("log",))


# ---- against state ------------------------------------------------------------------------------

# three short lines: the panels of a 2 x 2 figure are 3.3 inches wide
STATE_LABEL = ("recurrent state per layer (numbers,\nas recall-lab models counts; short-\n"
               "convolution caches not included)")


def _family(g) -> str:
    return format_value(g.values["model.name"]) if "model.name" in g.values else g.label


def _table_panel(pal: Palette, g) -> tuple[str, tuple]:
    """A group's panel in the figures against state: its table size, one panel each; one panel
    when the tables do not vary (another facet field would split a state axis by itself)."""
    return _panel_of(pal, g) if pal.facet == "task.levels" else ("", ())


def _grows_text(growth: str) -> str:
    return "state grows with the sequence" + ("" if growth == "L" else f", as {growth}")


def state_axis(rep: dict) -> bool:
    """Whether a report has a state axis: some model family (`model.name`) at two or more fixed
    states per layer."""
    sizes: dict[str, set] = {}
    for g in rep["groups"]:
        if g.state.numbers is not None:
            sizes.setdefault(_family(g), set()).add(g.state.numbers)
    return any(len(v) > 1 for v in sizes.values())


def _growing_name(rows: dict[str, str], row: str) -> str:
    """A growing row's legend name: its family's (`rows`: row -> family) where the family has
    one row (a transformer's d_state says nothing), else the row's."""
    return rows[row] if list(rows.values()).count(rows[row]) == 1 else row


def _growing_lines(rep: dict, pal: Palette, groups: list) -> list[Line]:
    """One dashed line at its solve rate per row whose state grows with the sequence, in each
    panel (table) it has a group in."""
    rows = {row_label(rep, g, pal.facet): _family(g) for g in groups}
    out = []
    for g in groups:
        row = row_label(rep, g, pal.facet)
        panel, order = _table_panel(pal, g)
        out.append(Line(panel, f"{_growing_name(rows, row)} ({_grows_text(g.state.growth)})",
                        pal.row(row), ("grows", g.solved), order))
    return out


def _draw_growing(ax, ln: Line):
    """A row whose state grows: its value as a dashed line across the panel (its Wilson band
    shaded where the value is a solve rate)."""
    value = ln.data[1]
    y = value.k / value.n if isinstance(value, stats.SolveRate) else value
    h = ax.axhline(y, color=ln.colour, ls="--", lw=1.2)
    if isinstance(value, stats.SolveRate):
        ax.axhspan(value.lo, value.hi, color=ln.colour, alpha=0.06, lw=0)
    return h


def plot_solved_state(rep: dict, path: Path, pal: Palette | None = None) -> Path:
    """Seeds solved against the state per layer (log x), one line per model family through its
    state sizes, one panel per table size, Wilson 95% band; each point in its row's colour, the
    line in the family's hue. Rows whose state grows with the sequence (attention) are dashed
    lines at their solve rate."""
    pal = pal or palette(rep)
    done = [g for g in rep["groups"] if g.solved.n]
    fams: dict[tuple[str, str], list] = {}
    order: dict[tuple[str, str], tuple] = {}
    for g in done:
        if g.state.numbers is None:
            continue
        panel, place = _table_panel(pal, g)
        fams.setdefault((panel, _family(g)), []).append(g)
        order[(panel, _family(g))] = place
    lines = []
    for (panel, name), gs in fams.items():
        gs.sort(key=lambda g: (g.state.numbers, _sort_key(g.values)))
        lines.append(Line(panel, name, pal.model(name) or pal.row(row_label(rep, gs[0],
                                                                             pal.facet)),
                          ("fixed", gs), order[(panel, name)]))
    lines += _growing_lines(rep, pal, [g for g in done if g.state.grows])

    def draw(ax, ln: Line):
        if ln.data[0] == "grows":
            return _draw_growing(ax, ln)
        gs = ln.data[1]
        x = [g.state.numbers for g in gs]
        rates = [g.solved for g in gs]
        (h,) = ax.plot(x, [r.k / r.n for r in rates], color=ln.colour, lw=1.3, marker="o",
                       ms=3)
        if len(x) > 1:
            ax.fill_between(x, [r.lo for r in rates], [r.hi for r in rates], color=ln.colour,
                            alpha=0.12)
        else:  # a band needs two points: one state size gets its interval as a bar
            ax.errorbar(x, [r.k / r.n for r in rates], yerr=[[r.k / r.n - r.lo for r in rates],
                                                             [r.hi - r.k / r.n for r in rates]],
                        color=ln.colour, capsize=3, lw=1, alpha=0.6)
        # each point in its row's colour, as the row is drawn in the report's other figures
        ax.scatter(x, [r.k / r.n for r in rates], s=16, zorder=3,
                   color=[pal.row(row_label(rep, g, pal.facet)) or ln.colour for g in gs])
        return h

    dashed = "; dashed: state grows with the sequence" if any(
        ln.data[0] == "grows" for ln in lines) else ""
    return draw_panels(lines, draw, path, title=f"solve rate vs state per layer (band: Wilson "
                       f"95%{dashed})", xlabel=STATE_LABEL,
                       ylabel=f"{SOLVED}\n({rep['metric']} >= {rep['solve_at']:g})",
                       rate=True, xscale=("log",), eng=True)


def _frontier_tables(rep: dict) -> tuple[dict[str, dict[float, list]],
                                          dict[str, tuple[list, str, str]]]:
    """Each group's (table size, seeds solved) over the groups that sweep task.levels: per model
    family with a fixed state, per state per layer; per row (its values less task.levels) whose
    state grows with the sequence, with how it grows and its family."""
    by_state: dict[str, dict[float, list]] = {}
    growing: dict[str, tuple[list, str, str]] = {}
    for g in rep["groups"]:
        size = numeric("task.levels", g.values.get("task.levels"))
        if not g.selected or not g.solved.n or size is None:
            continue
        if g.state.numbers is not None:
            by_state.setdefault(_family(g), {}).setdefault(g.state.numbers, []).append(
                (size, g.solved))
        elif g.state.grows:
            row = row_label(rep, g, "task.levels")
            growing.setdefault(row, ([], g.state.growth, _family(g)))[0].append(
                (size, g.solved))
    return by_state, growing


def frontier_points(rep: dict, tables: tuple | None = None
                    ) -> tuple[dict[str, dict[float, float]], dict[str, tuple[float, str, str]]]:
    """The frontier (largest table solved in >= half the seeds, `stats.frontier`; 0 when none
    is): per model family with a fixed state, per state per layer; per row whose state grows
    with the sequence, its frontier, how the state grows and its family (from `tables`, the
    `_frontier_tables` of `rep`, when the caller has them)."""
    by_state, growing = tables or _frontier_tables(rep)
    fixed = {name: {x: stats.frontier(pts) or 0.0 for x, pts in xs.items()}
             for name, xs in by_state.items()}
    return fixed, {row: (stats.frontier(pts) or 0.0, growth, family)
                   for row, (pts, growth, family) in growing.items()}


def plot_frontier(rep: dict, path: Path, pal: Palette | None = None) -> Path:
    """The largest table solved in >= half the seeds against the state per layer in numbers,
    one line per model family with a fixed state (in the family's hue), each point with a bar
    over the frontiers its seeds' Wilson intervals allow (`stats.frontier_range`); rows whose
    state grows with the sequence as dashed lines at their frontier (in the row's colour).
    With `report --memory` (rep["memory"]), each row's constructed capacities beside its point:
    hollow circles (random keys) just left of it, hollow triangles (designed keys) just right,
    thin bars over their Wilson ranges; the y axis then reaches down to the smallest."""
    pal = pal or palette(rep)
    tables = _frontier_tables(rep)
    fixed, growing = frontier_points(rep, tables)
    by_state = tables[0]
    lines = [Line("", name, pal.model(name), ("fixed", sorted(pts.items()), by_state[name]))
             for name, pts in fixed.items()]
    rows = {row: family for row, (_, _, family) in growing.items()}
    lines += [Line("", f"{_growing_name(rows, row)} ({_grows_text(growth)})", pal.row(row),
                   ("grows", value)) for row, (value, growth, _) in growing.items()]

    sizes = sorted({v for g in rep["groups"]
                    if (v := numeric("task.levels", g.values.get("task.levels"))) is not None})
    built = _memory_points(rep)
    marks = {"random": "o", "designed": "^"}
    floor = [v for pts in built.values() for p in pts for v in p[1:4] if v > 0]
    ticks = sorted(set(sizes) | {2 ** k for k in range(8) if floor and 2 ** k >= min(floor)
                                 and 2 ** k <= max(floor)})
    # "no table solved": one step below the smallest table or constructed capacity
    none = ticks[0] / 2 if ticks else 0.5

    def y(v: float) -> float:  # table size on log2, as every figure draws it
        return v or none

    def draw_memory(ax, ln: Line) -> None:
        """The family's rows as memories, beside their trained points (not on them)."""
        for keys, marker in marks.items():
            shift = 0.88 if keys == "random" else 1.13
            for x, n, lo, hi, family in built[keys]:
                if family != ln.label:
                    continue
                ax.scatter([x * shift], [y(n)], marker=marker, s=30, facecolors="none",
                           edgecolors=ln.colour, linewidths=1.2, zorder=4)
                ax.vlines([x * shift], [y(lo)], [y(hi)], color=ln.colour, lw=1, alpha=0.7)

    def draw(ax, ln: Line):
        if ln.data[0] == "fixed":
            draw_memory(ax, ln)
        if ln.data[0] == "grows":
            return _draw_growing(ax, Line(ln.panel, ln.label, ln.colour,
                                          ("grows", y(ln.data[1]))))
        pts, tables = ln.data[1], ln.data[2]
        (h,) = ax.plot([p[0] for p in pts], [y(p[1]) for p in pts], marker="o",
                       color=ln.colour)
        ranges = [stats.frontier_range(tables[x]) for x, _ in pts]
        ax.vlines([p[0] for p in pts], [y(r[0]) for r in ranges], [y(r[1]) for r in ranges],
                  color=ln.colour, alpha=0.35, lw=4)
        return h

    def log2_sizes(ax, _lines):
        ax.set_yscale("log", base=2)
        # a third of a power of 2 beyond "none" and the largest tick: markers drawn whole
        top = max([*ticks, *floor, 1.0])  # a constructed capacity may lie past the last tick
        ax.set_ylim(none / 2 ** 0.35, top * 2 ** 0.35)
        ax.set_yticks([none, *ticks], ["none", *(f"{v:g}" for v in ticks)])
        ax.yaxis.set_minor_formatter(NullFormatter())

    hollow = ("\nhollow: the layer as a memory, no decay (not a ceiling: a trained model can "
              "learn better keys)" if any(built.values()) else "")
    extra = {f"no-decay construction, {keys} keys": plt.Line2D(
        [], [], ls="none", marker=marker, mfc="none", mec="#555555", ms=6)
        for keys, marker in marks.items() if built[keys]}
    return draw_panels(lines, draw, path,
                       title="capacity frontier vs state per layer (none: no table solved)\n"
                             "bars: the frontiers the seeds' Wilson 95% intervals allow"
                             + hollow,
                       xlabel=STATE_LABEL,
                       ylabel="frontier: largest table solved\nin >= 50% of seeds",
                       xscale=("log",), eng=True, annotate=log2_sizes, legend_extra=extra)


def _memory_points(rep: dict) -> dict[str, list[tuple]]:
    """Per key set, (state per layer, capacity, range low, range high, family) of every row
    measured as a memory (`report --memory`)."""
    out: dict[str, list[tuple]] = {"random": [], "designed": []}
    for row in rep.get("memory") or []:
        mem = row["memory"]
        if mem.spec is None or row["state_numbers"] is None:
            continue
        for keys, cap in mem.capacities.items():
            out[keys].append((row["state_numbers"], cap.n, cap.lo, cap.hi, row["family"]))
    return out


def report_figures(rep: dict, out: Path) -> list[Path]:
    pal = palette(rep)
    paths = [plot_bars(rep, out / "report-bars.png", pal)]
    numeric_axes = []
    for axis in rep["by"]:
        # over the groups whose model has the field (a transformer has no d_state)
        vals = [g.values[axis] for g in rep["groups"] if g.values[axis] is not None]
        nums = [numeric(axis, v) for v in vals]
        if None not in nums and len(set(nums)) > 1:
            numeric_axes.append(axis)
            safe = axis.replace(".", "_")
            paths.append(plot_axis(rep, axis, out / f"report-{safe}.png", pal))
            paths.append(plot_solved_axis(rep, axis, out / f"report-solved-{safe}.png", pal))
    if any((r.folder / ck.METRICS).is_file() for g in rep["groups"] for r in g.selected):
        paths.append(plot_curves(rep, out / "report-curves.png", pal))
        paths.append(plot_survival(rep, out / "report-survival.png", pal))
    if any(len(g.lr_solved) > 1 for g in rep["groups"]):
        paths.append(plot_window(rep, out / "report-window.png", pal))
    if state_axis(rep):
        paths.append(plot_solved_state(rep, out / "report-solved-state.png", pal))
    # every family with a fixed state, not only Mamba's d_state (a single point says nothing)
    fixed, _ = frontier_points(rep)
    if "task.levels" in numeric_axes and sum(len(v) for v in fixed.values()) > 1:
        paths.append(plot_frontier(rep, out / "report-frontier.png", pal))
    return paths
