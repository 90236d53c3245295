"""The report's figures (matplotlib, Agg): bars per group with the reference numbers beside ours,
the metric against each numeric grouping field with a std band, the validation curves of the
runs each group's best lr selected, and the solve-rate figures: seeds solved against each numeric
field (Wilson 95% band), survival (fraction of seeds solved against training samples), the
learning-rate window (solve rate against lr, one line per group), and the frontier (largest table
solved in >= half the seeds) against state size."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from recall_lab import checkpoint as ck  # noqa: E402
from recall_lab.analysis.plots import save_figure  # noqa: E402
from recall_lab.experiments import stats  # noqa: E402
from recall_lab.experiments.grid import numeric  # noqa: E402


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


def _line_name(rep: dict, g, axis: str | None) -> str:
    others = [f for f in rep["by"] if f != axis]
    name = " / ".join(str(g.values[f]) for f in others) or "all"
    if axis == "task.levels":  # MQAR (w = 1) and MQJR (w = 2) tables are separate curves
        name = f"{name} / w={len(g.values[axis])}"
    return name


def _finish_rate(fig, ax, title: str, path: Path) -> Path:
    """The common end of the solve-rate figures: a [0, 1] axis, grid, legend, title, file."""
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title)
    return save_figure(fig, path)


def plot_solved_axis(rep: dict, axis: str, path: Path) -> Path:
    """Seeds solved against one numeric grouping field, with the Wilson 95% interval shaded."""
    lines: dict[str, list] = {}
    for g in rep["groups"]:
        if g.solved.n:
            lines.setdefault(_line_name(rep, g, axis), []).append(
                (numeric(axis, g.values[axis]), g.solved))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, pts in lines.items():
        pts.sort(key=lambda p: p[0])
        x = [p[0] for p in pts]
        (line,) = ax.plot(x, [p[1].k / p[1].n for p in pts], marker="o", label=name)
        ax.fill_between(x, [p[1].lo for p in pts], [p[1].hi for p in pts],
                        color=line.get_color(), alpha=0.15)
    ax.set_xlabel(f"{axis} (table size: entries)" if axis == "task.levels" else axis)
    if axis in ("task.levels", "model.d_state"):
        ax.set_xscale("log", base=2)
    ax.set_ylabel(f"seeds solved ({rep['metric']} >= {rep['solve_at']:g})")
    return _finish_rate(fig, ax, f"solve rate vs {axis} (band: Wilson 95%)", path)


def plot_survival(rep: dict, path: Path) -> Path:
    """Fraction of each group's seeds solved by each number of training samples (steps x
    batch): speed and reliability in one picture."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for g in rep["groups"]:
        if not g.selected:
            continue
        samples = [None if s is None else s * int(r.config.get("train.batch_size") or 1)
                   for s, r in zip(g.solve_steps, g.selected, strict=True)]
        budget = max(int(r.config.get("train.steps") or 0)
                     * int(r.config.get("train.batch_size") or 1) for r in g.selected)
        grid = sorted({0, budget, *[s for s in samples if s is not None]})
        ax.step(grid, stats.survival(samples, grid), where="post",
                label=f"{g.label} ({g.solved.k}/{g.solved.n})")
    ax.set_xlabel("training samples (steps x batch)")
    ax.set_ylabel("fraction of seeds solved")
    return _finish_rate(fig, ax, f"survival: seeds solved ({rep['metric']} >= "
                        f"{rep['solve_at']:g}) by samples", path)


def plot_window(rep: dict, path: Path) -> Path:
    """Solve rate against the learning rate, one line per group (every lr's seeds), Wilson 95%
    error bars: the learnability window."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for g in rep["groups"]:
        pts = sorted((lr, r) for lr, r in g.lr_solved.items() if r.n)
        if not pts:
            continue
        x = [p[0] for p in pts]
        y = [p[1].k / p[1].n for p in pts]
        err = [[yy - p[1].lo for yy, p in zip(y, pts, strict=True)],
               [p[1].hi - yy for yy, p in zip(y, pts, strict=True)]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=g.label)
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("seeds solved")
    return _finish_rate(fig, ax, "learning-rate window (Wilson 95% bars)", path)


def state_numbers(values: dict, config: dict) -> float | None:
    """Recurrent state per layer in numbers (d_model x expand x d_state) of an SSM run."""
    if config.get("model.arch") not in ("mamba", "mamba2") or not config.get("model.d_state"):
        return None
    return float(config["model.d_model"] * config["model.expand"] * config["model.d_state"])


def plot_frontier(rep: dict, path: Path) -> Path:
    """The largest table solved in >= half the seeds against the state size in numbers per
    layer, one line per model (SSM groups that sweep task.levels)."""
    lines: dict[str, dict[float, list]] = {}
    for g in rep["groups"]:
        if not g.selected or not g.solved.n:
            continue
        numbers = state_numbers(g.values, g.selected[0].config)
        size = numeric("task.levels", g.values["task.levels"])
        if numbers is None or size is None:
            continue
        name = str(g.values.get("model.name", g.label))
        lines.setdefault(name, {}).setdefault(numbers, []).append((size, g.solved))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, by_state in lines.items():
        xs = sorted(by_state)
        ax.plot(xs, [stats.frontier(by_state[x]) or 0.0 for x in xs], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("state per layer (numbers: d_model x expand x d_state)")
    ax.set_ylabel("frontier: largest table solved in >= 50% of seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("capacity frontier vs state size (0: no table solved)")
    return save_figure(fig, path)


def report_figures(rep: dict, out: Path) -> list[Path]:
    paths = [plot_bars(rep, out / "report-bars.png")]
    numeric_axes = []
    for axis in rep["by"]:
        vals = [g.values[axis] for g in rep["groups"]]
        nums = [numeric(axis, v) for v in vals]
        if None not in nums and len(set(nums)) > 1:
            numeric_axes.append(axis)
            safe = axis.replace(".", "_")
            paths.append(plot_axis(rep, axis, out / f"report-{safe}.png"))
            paths.append(plot_solved_axis(rep, axis, out / f"report-solved-{safe}.png"))
    if any((r.folder / ck.METRICS).is_file() for g in rep["groups"] for r in g.selected):
        paths.append(plot_curves(rep, out / "report-curves.png"))
        paths.append(plot_survival(rep, out / "report-survival.png"))
    if any(len(g.lr_solved) > 1 for g in rep["groups"]):
        paths.append(plot_window(rep, out / "report-window.png"))
    if "task.levels" in numeric_axes and "model.d_state" in rep["by"]:
        paths.append(plot_frontier(rep, out / "report-frontier.png"))
    return paths
