"""The lr-window figure: share of seeds solved against lr on a log axis, one line per row (an
lr window's answer, `lr_window.py`), each lr's Wilson 95% interval as a bar, the lrs in the
window filled and the others hollow, each row's ladder ends marked by short ticks at the top
and bottom of the axes (a bound of the ladder's growth in grey), and the confirmation seeds'
share at the best lr as a star with its own interval. matplotlib (Agg), imported when drawn."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from recall_lab.analysis.plots import save_figure  # noqa: E402

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf")


def window_figure(answers: list[dict], path: Path):
    """Write the figure to `path`; returns (path, axes) so a test can read the drawn points
    back (gid "rate" per lr point, "ladder-end" per end tick, "confirmation" per star)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2 + 0.25 * len(answers)))
    ticks: set[float] = set()
    for i, a in enumerate(answers):
        c = COLOURS[i % len(COLOURS)]
        pts = [r for r in a["rungs"] if r["solved"]["n"]]
        xs = [r["lr"] for r in pts]
        ys = [r["solved"]["k"] / r["solved"]["n"] for r in pts]
        lo = [y - r["solved"]["lo"] for y, r in zip(ys, pts, strict=True)]
        hi = [r["solved"]["hi"] - y for y, r in zip(ys, pts, strict=True)]
        shift = 1 + 0.04 * (i - (len(answers) - 1) / 2)  # rows side by side at one lr
        xs_s = [x * shift for x in xs]
        ax.plot(xs_s, ys, "-", color=c, lw=1.2, label=a["label"])
        ax.errorbar(xs_s, ys, yerr=[lo, hi], fmt="none", ecolor=c, capsize=3, lw=1)
        for x, y, r in zip(xs_s, ys, pts, strict=True):
            inside = r["verdict"] in ("best", "in window")
            ax.plot([x], [y], "o", ms=6, color=c, mfc=c if inside else "white", mew=1.5,
                    gid="rate")
        for end in (a["ladder"][0], a["ladder"][-1]):
            bounded = any(abs(end - b) <= 1e-9 * b for b in a["bounds"])
            for y0, marker in ((0, "^"), (1, "v")):
                ax.plot([end * shift], [y0], marker, color="0.5" if bounded else c, ms=7,
                        transform=ax.get_xaxis_transform(), clip_on=False, gid="ladder-end")
        conf = a.get("confirmation")
        if conf and conf["solved"]["n"]:
            s = conf["solved"]
            y = s["k"] / s["n"]
            x = conf["lr"] * shift * 1.08  # beside the window's point at that lr
            ax.errorbar([x], [y], yerr=[[y - s["lo"]], [s["hi"] - y]], fmt="none", ecolor=c,
                        capsize=3, lw=1)
            ax.plot([x], [y], "*", ms=11, color=c, gid="confirmation",
                    label=f"{a['label']}: {s['n']} fresh seeds")
        ticks |= set(a["ladder"])
    ax.set_xscale("log")
    ax.set_xticks(sorted(ticks), [f"{x:.2g}" for x in sorted(ticks)])
    ax.minorticks_off()
    ax.set_ylim(-0.04, 1.04)
    ax.set_xlabel("learning rate (triangles: each row's ladder ends; grey: a bound)")
    ax.set_ylabel("share of seeds solved (Wilson 95%)")
    if answers:
        ax.set_title(f"lr window at {answers[0]['table_name']}: filled = in the window",
                     fontsize=10)
    # under the axes, two columns: beside them, long row labels squeeze the axes to a strip
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
              frameon=False)
    if any((a.get("confirmation") or {}).get("solved", {}).get("n") for a in answers):
        ax.set_title(ax.get_title() + "; stars: fresh seeds at the best lr", fontsize=10)
    return save_figure(fig, path), ax
