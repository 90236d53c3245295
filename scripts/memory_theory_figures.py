"""Draw docs/results/memory-theory's figures from `recall-lab prove linear_memory --out F.json`.

    python scripts/memory_theory_figures.py F.json [G.json ...] OUT_DIR

Several files are merged by d (a later file's row for a d replaces an earlier one's).

- constant.png: left, c(d) = d^2 / (n_1/2 ln n_1/2) of the correlation-matrix memory for all
  pairs and for a single query, with their 95% bootstrap intervals, beside each finite-d
  prediction (`recall_lab.proofs.memory_prediction`, computed here at 12 d from 8 to 1024) and its
  limit (8, 2), on a log-d axis; right, the optimal memory's median capacity n* with its
  interval beside the n solving p ln p = d^2 / 2;
- collapse.png: the measured share of seeds recalling all n pairs (left) and of queries
  recalled (right) against n ln n / d^2, one line per d, with the fitted probit curves.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy import optimize, special  # noqa: E402

from recall_lab.proofs import memory_prediction as mp  # noqa: E402

ROWS = ("all_pairs", "single_query", "optimal")
CURVE_DIMS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024)
LABEL = {"all_pairs": "all pairs", "single_query": "a single query"}
COLOUR = {"all_pairs": "#1f77b4", "single_query": "#ff7f0e"}


def load(paths: list[Path]) -> dict:
    merged: dict = {key: [] for key in ROWS}
    for path in paths:
        data = json.loads(path.read_text())
        found = [r for r in data["results"] if r["name"] == "linear_memory"]
        if not found or "all_pairs" not in found[0]["details"]:
            raise SystemExit(f"error: {path} holds no linear_memory evidence of this version")
        details = found[0]["details"]
        for key in ROWS:
            by_d = {r["d"]: r for r in merged[key]}
            by_d.update({r["d"]: r for r in details[key]})
            merged[key] = [by_d[d] for d in sorted(by_d)]
        merged["limits"] = details["predicted"]["limits"]
    return merged


def p_log_p(d: float) -> float:
    """The p with p ln p = d^2 / 2."""
    return optimize.brentq(lambda p: p * math.log(p) - d * d / 2, 1.0 + 1e-9, 1e9)


def constants(details: dict, out: Path) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.0))
    curve_d = np.array(CURVE_DIMS)
    for crit in mp.CRITERIA:
        rows = details[crit]
        d = np.array([r["d"] for r in rows])
        c = np.array([r["c"] for r in rows])
        err = [c - [r["c_lo"] for r in rows], [r["c_hi"] for r in rows] - c]
        left.errorbar(d, c, yerr=err, marker="o", capsize=3, ls="none", color=COLOUR[crit],
                      label=f"{LABEL[crit]}: measured n_1/2")
        pred = [mp.constant(mp.n_half(crit, int(k)), int(k)) for k in curve_d]
        left.plot(curve_d, pred, color=COLOUR[crit], lw=1.2,
                  label=f"{LABEL[crit]}: finite-d prediction")
        left.axhline(details["limits"][crit], color=COLOUR[crit], ls="--", lw=0.9,
                     label=f"{LABEL[crit]}: limit {details['limits'][crit]:g}")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_yticks([1, 2, 4, 8, 16, 32], labels=["1", "2", "4", "8", "16", "32"])
    left.set_xlabel("d")
    left.set_ylabel("c(d) = d^2 / (n_1/2 ln n_1/2)")
    left.set_title("correlation-matrix memory (bars: 95% bootstrap over seeds)", fontsize=9)
    left.grid(alpha=0.3)
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False,
                ncol=2)
    rows = [r for r in details["optimal"] if "n_star" in r]
    if rows:
        d = np.array([r["d"] for r in rows])
        n = np.array([r["n_star"] for r in rows])
        err = [n - [r["n_star_lo"] for r in rows], [r["n_star_hi"] for r in rows] - n]
        right.errorbar(d, n, yerr=err, marker="o", capsize=3, ls="none", color="#2ca02c",
                       label=f"optimal memory: median capacity ({rows[0]['seeds']} seeds)")
        ds = np.linspace(d.min(), d.max(), 50)
        right.plot(ds, [p_log_p(k) for k in ds], color="#d62728", ls="--", lw=1,
                   label="p ln p = d^2 / 2")
        right.plot(ds, [optimize.brentq(lambda p, k=k: p * math.log(p) - k * k, 1.0 + 1e-9,
                                        1e9) for k in ds],
                   color="#7f7f7f", ls=":", lw=1, label="p ln p = d^2 (for reference)")
    right.set_xlabel("d")
    right.set_ylabel("pairs n")
    right.set_title("optimal linear memory (LP, every pair top-1)", fontsize=9)
    right.grid(alpha=0.3)
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    path = out / "constant.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def collapse(details: dict, out: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.8))
    colours = plt.get_cmap("viridis")
    for ax, crit in zip(axes, mp.CRITERIA, strict=True):
        rows = details[crit]
        for i, row in enumerate(rows):
            grid = np.asarray(row["grid"], dtype=float)
            load_ = grid * np.log(grid) / row["d"] ** 2
            colour = colours(i / max(1, len(rows) - 1))
            ax.plot(load_, row["pooled_share"], marker=".", ms=3, lw=0.8, color=colour,
                    label=f"d = {row['d']}")
            fine = np.geomspace(grid[0], grid[-1], 200)
            curve = special.ndtr(row["slope"] * (np.log(fine) - math.log(row["n_half"])))
            ax.plot(fine * np.log(fine) / row["d"] ** 2, curve, lw=1.6, alpha=0.5,
                    color=colour)
        ax.axvline(1 / details["limits"][crit], color="#d62728", ls="--", lw=1,
                   label=f"limit: n ln n / d^2 = 1/{details['limits'][crit]:g}")
        ax.axhline(0.5, color="#999999", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("n ln n / d^2")
        ax.set_ylabel("share of seeds recalling all pairs" if crit == "all_pairs"
                      else "share of queries recalled")
        ax.set_title(f"{LABEL[crit]}: measured (points) and probit fit", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
    path = out / "collapse.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python scripts/memory_theory_figures.py PROVE_JSON [...] OUT_DIR",
              file=sys.stderr)
        return 2
    details = load([Path(a) for a in argv[:-1]])
    out = Path(argv[-1])
    out.mkdir(parents=True, exist_ok=True)
    for path in (collapse(details, out), constants(details, out)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
