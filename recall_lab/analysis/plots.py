"""PNG figures (matplotlib, Agg backend): hidden-attention maps on a log scale with a threshold
(DeciMamba Fig. 2-3 style, the map normalised by its largest |entry|), and mean distance against
evaluation length, absolute and normalised (Fig. 4 style), optionally with the Delta-sum curve
(Fig. 2 right)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from recall_lab.generators.errors import RecallLabError  # noqa: E402


def save_figure(fig, path: str | Path, dpi: int = 110) -> Path:
    """Lay out, write atomically (a temporary file renamed into place, so a reader never sees
    half a PNG) and close `fig`; every figure of the lab goes through here."""
    path = Path(path)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def log_map(matrix: torch.Tensor | np.ndarray, threshold: float = 1e-3) -> np.ndarray:
    """log10(|M| / max |M|) over the lower triangle, clipped below at log10(threshold); entries
    above the diagonal are NaN (drawn blank)."""
    if not 0 < threshold < 1:
        raise RecallLabError(f"threshold must lie in (0, 1), got {threshold}")
    m = np.abs(np.asarray(torch.as_tensor(matrix).detach().to(torch.float64).cpu()))
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise RecallLabError(f"need one square map, got shape {m.shape}")
    m = np.tril(m)  # a causal map: anything above the diagonal is not part of it
    top = m.max() if m.size else 0.0
    out = np.full(m.shape, math.log10(threshold))
    if top > 0:
        with np.errstate(divide="ignore"):
            out = np.maximum(np.log10(m / top), math.log10(threshold))
    out[np.triu_indices(m.shape[0], 1)] = np.nan
    return out


def plot_attention_map(matrix: torch.Tensor | np.ndarray, path: str | Path, *, title: str = "",
                       threshold: float = 1e-3, mean_distance: torch.Tensor | None = None,
                       ) -> Path:
    """One hidden-attention map [L, L]; with `mean_distance` [L] the curve j = i - MD_i is drawn
    in red (DeciMamba Fig. 3: its horizontal gap to the diagonal is the mean distance)."""
    path = Path(path)
    img = log_map(matrix, threshold)
    L = img.shape[0]
    fig, ax = plt.subplots(figsize=(6.2, 5.2))
    im = ax.imshow(img, interpolation="none", aspect="auto", cmap="turbo",
                   vmin=math.log10(threshold), vmax=0.0)
    ax.plot([0, L - 1], [0, L - 1], color="white", lw=0.6, alpha=0.6)
    if mean_distance is not None:
        md = np.asarray(torch.as_tensor(mean_distance).detach().cpu(), dtype=np.float64)
        rows = np.arange(L)
        ax.plot(rows - md, rows, color="red", lw=1.2, label="i - mean distance")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("key position j")
    ax.set_ylabel("query position i")
    ax.set_title(title or "hidden attention", fontsize=10)
    fig.colorbar(im, ax=ax, label=f"log10 |alpha| / max (threshold 1e{math.log10(threshold):.0f})")
    return save_figure(fig, path)


Series = Mapping[str, Sequence[Mapping[str, float]]]


def plot_mean_distance(series: Series, path: str | Path, *, key: str = "md_last",
                       train_lengths: Mapping[str, int] | None = None, title: str = "",
                       delta_sum: bool = False) -> Path:
    """Mean distance vs evaluation length, one line per series (e.g. per training length or per
    layer): left absolute (`key`), right normalised (`key + "_norm"`), and with `delta_sum` a
    third panel of `delta_sum_last`. Rows need "length" and those keys; dashed verticals mark
    `train_lengths[name]`."""
    path = Path(path)
    panels = [(key, "mean distance (tokens)"), (key + "_norm", "mean distance / length")]
    if delta_sum:
        panels.append(("delta_sum_last", "sum_{k=2..L} Delta_k (channel mean)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 4.0))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    train_lengths = dict(train_lengths or {})
    distinct = len(set(train_lengths.values()))
    if distinct == 1:  # one training length for every series: one black line
        for ax in axes:
            ax.axvline(next(iter(train_lengths.values())), color="black", ls="--", lw=0.8)
    for s, (name, rows) in enumerate(series.items()):
        rows = sorted(rows, key=lambda r: r["length"])
        if not rows:
            continue
        color = colors[s % len(colors)]
        x = [r["length"] for r in rows]
        for ax, (k, _) in zip(axes, panels, strict=True):
            y = [r.get(k, float("nan")) for r in rows]
            ax.plot(x, y, marker="o", color=color, label=name)
            if distinct > 1 and name in train_lengths:
                ax.axvline(train_lengths[name], color=color, ls="--", lw=0.8)
    for ax, (_, label) in zip(axes, panels, strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("evaluation length L")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    return save_figure(fig, path)


def plot_learning_curves(curves: Mapping[str, Sequence[Mapping]], png: str | Path, title: str,
                         chance: float) -> Path:
    """Held-out accuracy (left) and train / held-out cross-entropy (right) against step, one
    colour per run; `curves` maps a run's name to its metrics.jsonl rows."""
    png = Path(png)
    fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(10, 4))
    for mname, rows in curves.items():
        valid = [r for r in rows if r["split"] == "valid"]
        train = [r for r in rows if r["split"] == "train"]
        line, = ax_acc.plot([r["step"] for r in valid], [r["acc"] for r in valid], marker="o",
                            label=f"{mname} (held-out)")
        ax_loss.plot([r["step"] for r in train], [r["ce"] for r in train], color=line.get_color(),
                     label=f"{mname} train CE")
        ax_loss.plot([r["step"] for r in valid], [r["loss"] for r in valid], "--",
                     color=line.get_color(), label=f"{mname} held-out CE")
    ax_acc.axhline(chance, color="grey", linestyle=":", label="chance")
    ax_acc.set(xlabel="step", ylabel="per-sample accuracy", title="held-out accuracy")
    ax_loss.set(xlabel="step", ylabel="cross-entropy on values", title="loss")
    for ax in (ax_acc, ax_loss):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    return save_figure(fig, png, dpi=120)
