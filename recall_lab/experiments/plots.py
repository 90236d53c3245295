"""The report's figures (matplotlib, Agg): bars per group with the reference numbers beside ours,
the metric against each numeric grouping field with a std band, and the validation curves of the
runs each group's best lr selected."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from recall_lab import checkpoint as ck  # noqa: E402
from recall_lab.analysis.plots import save_figure  # noqa: E402
from recall_lab.experiments.report import numeric  # noqa: E402


def plot_bars(rep: dict, path: Path) -> Path:
    groups, metric = rep["groups"], rep["metric"]
    ref = (rep["reference"] or {}).get("values") or {}
    has_ref = any(g.label in ref for g in groups)
    width = 0.4 if has_ref else 0.7
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(groups) + 2), 4.2))
    xs = range(len(groups))
    ours = [g.mean if g.mean is not None else 0.0 for g in groups]
    errs = [g.std or 0.0 for g in groups]
    shift = -width / 2 if has_ref else 0.0
    ax.bar([x + shift for x in xs], ours, width, yerr=errs, capsize=3, label="ours (mean +/- std)")
    if has_ref:
        ax.bar([x + width / 2 for x in xs], [ref.get(g.label, 0.0) for g in groups], width,
               hatch="//", alpha=0.6, label=rep["reference"].get("source", "reference"))
    for x, g in zip(xs, groups, strict=True):
        if g.mean is None:
            ax.text(x + shift, 0.01, "none", ha="center", fontsize=7, rotation=90)
    ax.set_xticks(list(xs), [g.label for g in groups], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel(metric)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{metric} at the best lr per group")
    return save_figure(fig, path)


def plot_axis(rep: dict, axis: str, path: Path) -> Path:
    """Metric vs one numeric grouping field (task.levels as table size); one line per
    combination of the other fields."""
    others = [f for f in rep["by"] if f != axis]
    lines: dict[str, list] = {}
    for g in rep["groups"]:
        name = " / ".join(str(g.values[f]) for f in others) or rep["metric"]
        if axis == "task.levels":  # MQAR (w = 1) and MQJR (w = 2) tables are separate curves
            name = f"{name} / w={len(g.values[axis])}"
        if g.mean is not None:
            lines.setdefault(name, []).append((numeric(axis, g.values[axis]), g.mean,
                                               g.std or 0.0))
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for name, pts in lines.items():
        pts.sort()
        x, m, s = zip(*pts, strict=True)
        (line,) = ax.plot(x, m, marker="o", label=name)
        ax.fill_between(x, [a - b for a, b in zip(m, s, strict=True)],
                        [a + b for a, b in zip(m, s, strict=True)], color=line.get_color(),
                        alpha=0.2)
    ax.set_xlabel(f"{axis} (table size: entries)" if axis == "task.levels" else axis)
    ax.set_ylabel(rep["metric"])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{rep['metric']} vs {axis} (band: +/- std over seeds)")
    return save_figure(fig, path)


def plot_curves(rep: dict, path: Path) -> Path:
    """Held-out accuracy against step for every selected run (one colour per group)."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, g in enumerate(rep["groups"]):
        for j, r in enumerate(g.selected):
            rows = [x for x in ck.read_lines(r.folder / ck.METRICS) if x.get("split") == "valid"]
            if rows:
                ax.plot([x["step"] for x in rows], [x["acc"] for x in rows],
                        color=colors[i % len(colors)], alpha=0.8, lw=1,
                        label=f"{g.label} (lr {g.best_lr:g})" if j == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("held-out accuracy")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.set_title("validation curves of the selected runs (one line per seed)")
    return save_figure(fig, path)


def report_figures(rep: dict, out: Path) -> list[Path]:
    paths = [plot_bars(rep, out / "report-bars.png")]
    for axis in rep["by"]:
        vals = [g.values[axis] for g in rep["groups"]]
        nums = [numeric(axis, v) for v in vals]
        if None not in nums and len(set(nums)) > 1:
            safe = axis.replace(".", "_")
            paths.append(plot_axis(rep, axis, out / f"report-{safe}.png"))
    if any((r.folder / ck.METRICS).is_file() for g in rep["groups"] for r in g.selected):
        paths.append(plot_curves(rep, out / "report-curves.png"))
    return paths
