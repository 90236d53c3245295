"""The best-of-lr figure in zoology's style (metric against lr), with every seed's point: each
seed's runs joined by a thin line, its own pick (zoology's one-seed point) ringed, the solve
threshold dashed. One panel per group. matplotlib (Agg), imported only when drawn."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from recall_lab.analysis.plots import save_figure  # noqa: E402
from recall_lab.experiments.best_of_lr import BestOfLr  # noqa: E402


def plot_best_of_lr(results: list[BestOfLr], path: Path, metric: str):
    """Write the figure to `path`; returns (path, the figure's axes) so a test can read the
    drawn points back."""
    shown = [b for b in results if b.points]
    n = max(len(shown), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n + 1.2, 3.6), squeeze=False, sharey=True)
    colours = plt.get_cmap("tab10").colors
    for ax, b in zip(axes[0], shown, strict=False):
        for i, p in enumerate(b.points):
            c = colours[i % len(colours)]
            xs = list(b.lrs)
            ax.plot(xs, [p.by_lr[lr] for lr in xs], "-", color=c, lw=0.8, alpha=0.6)
            ax.plot(xs, [p.by_lr[lr] for lr in xs], "o", color=c, ms=4,
                    label=f"seed {p.seed}", gid="seed-point")
            ax.plot([p.lr], [p.value], "o", mfc="none", mec=c, ms=11, mew=1.5,
                    gid="seed-pick")
        ax.axhline(b.solve_at, color="0.4", ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_xticks(b.lrs, [f"{lr:.2g}" for lr in b.lrs])
        ax.minorticks_off()
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("learning rate")
        lo, med, hi = b.spread
        ax.set_title(f"{b.label}\n{len(b.points)} seeds: one-seed point {lo:.2f}-{hi:.2f}",
                     fontsize=9)
    if not shown:
        axes[0][0].text(0.5, 0.5, "no seed finished at every lr", ha="center", va="center",
                        transform=axes[0][0].transAxes)
    axes[0][0].set_ylabel(metric)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        axes[0][-1].legend(handles, labels, fontsize=7, loc="upper left",  # outside: never
                           bbox_to_anchor=(1.02, 1.0), frameon=False,  # over a point
                           title="ringed: the seed's\nown pick", title_fontsize=7)
    ax_list = list(axes[0])
    return save_figure(fig, path), ax_list
