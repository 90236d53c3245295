"""Draw docs/results/memory-theory's figures from `recall-lab prove linear_memory --out F.json`.

    python scripts/memory_theory_figures.py F.json [G.json ...] OUT_DIR

Several files are merged by d (a later file's row for a d replaces an earlier one's); the fit
drawn is the last file's.

- collapse.png: P(all n pairs retrieved top-1) against n ln n / d^2, one line per d (the share
  of seeds whose capacity is >= n, read off each seed's measured capacity); if the scale law
  d^2 ~ n log n holds, the lines fall on one curve;
- constant.png: c(d) = d^2 / (n* ln n*) with its bootstrap interval against d (log2), the
  conjectured 2 dashed; beside it the listwise ratio n* / d^2 (per pair and all pairs) with
  their intervals, and the best linear map's (LP) c(d) where it was measured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROWS = ("top1", "listwise_per_pair", "listwise_all", "lp_top1")


def load(paths: list[Path]) -> dict:
    merged: dict = {}
    for path in paths:
        data = json.loads(path.read_text())
        found = [r for r in data["results"] if r["name"] == "linear_memory"]
        if not found:
            raise SystemExit(f"error: {path} holds no linear_memory evidence")
        details = found[0]["details"]
        for key in ROWS:
            by_d = {r["d"]: r for r in merged.get(key, [])}
            by_d.update({r["d"]: r for r in details[key]})
            details[key] = [by_d[d] for d in sorted(by_d)]
        merged = details
    return merged


def collapse(details: dict, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    colours = plt.get_cmap("viridis")
    rows = details["top1"]
    for i, row in enumerate(rows):
        d, caps = row["d"], np.sort(np.asarray(row["capacities"], dtype=float))
        ns = np.arange(2, int(caps.max()) + 2)
        share = [(caps >= n).mean() for n in ns]  # P(all n retrieved), per the seeds
        ax.step(ns * np.log(ns) / d**2, share, where="post", lw=1.5,
                color=colours(i / max(1, len(rows) - 1)), label=f"d = {d}")
    ax.axhline(0.5, color="#999999", lw=0.8, ls=":")
    ax.axvline(0.5, color="#d62728", lw=1, ls="--", label="conjecture: n ln n / d^2 = 1/2")
    ax.set_xlabel("n ln n / d^2 (load on the top-1 scale)")
    ax.set_ylabel(f"P(all n pairs retrieved top-1)\nshare of {rows[0]['seeds']} seeds")
    ax.set_title("correlation-matrix memory, Gaussian pairs: top-1 retrieval against load",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    path = out / "collapse.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def constants(details: dict, out: Path) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, label, colour in (("top1", "correlation-matrix memory", "#1f77b4"),
                               ("lp_top1", "best linear map (LP)", "#ff7f0e")):
        rows = details[key]
        if not rows:
            continue
        d = [r["d"] for r in rows]
        c = [r["c"] for r in rows]
        left.errorbar(d, c, yerr=[[ci - r["c_lo"] for ci, r in zip(c, rows, strict=True)],
                                  [r["c_hi"] - ci for ci, r in zip(c, rows, strict=True)]],
                      marker="o", capsize=3, color=colour, label=label)
    rule = details["rule"]
    if "c_inf" in rule:
        ds = np.geomspace(min(rule["fit_dims"]), 4096, 50)
        left.plot(ds, rule["c_inf"] + rule["a"] / np.log(ds), color="#1f77b4", ls=":", lw=1,
                  label=f"fit c_inf + a / ln d (d >= {min(rule['fit_dims'])}): c_inf "
                        f"{rule['c_inf']:.1f} [{rule['c_inf_lo']:.1f}, {rule['c_inf_hi']:.1f}]")
    left.axhline(2.0, color="#d62728", ls="--", lw=1, label="conjectured constant 2")
    left.set_xscale("log", base=2)
    left.set_xlabel("d")
    left.set_ylabel("c(d) = d^2 / (n* ln n*)")
    left.set_title("top-1 constant (bars: 95% bootstrap over seeds)", fontsize=10)
    left.grid(alpha=0.3)
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    for key, label, colour in (("listwise_per_pair", "half the pairs in the top 5%", "#2ca02c"),
                               ("listwise_all", "every pair in the top 5%", "#9467bd"),
                               ("top1", "top-1 (every pair)", "#1f77b4")):
        rows = details[key]
        d = [r["d"] for r in rows]
        ratio = [r["n_star_over_d2"] for r in rows]
        right.errorbar(d, ratio, yerr=[[q - r["ratio_lo"] for q, r in zip(ratio, rows,
                                                                          strict=True)],
                                       [r["ratio_hi"] - q for q, r in zip(ratio, rows,
                                                                          strict=True)]],
                       marker="o", capsize=3, color=colour, label=label)
    right.axhline(details["listwise_expected_ratio"], color="#2ca02c", ls=":", lw=1,
                  label=f"Gaussian approximation 1 / z^2 = "
                        f"{details['listwise_expected_ratio']:.2f}")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("d")
    right.set_ylabel("n* / d^2")
    right.set_title("threshold per d^2 (flat: the d^2 ~ n scale)", fontsize=10)
    right.grid(alpha=0.3)
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    path = out / "constant.png"
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
