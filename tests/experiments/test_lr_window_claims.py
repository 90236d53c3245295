"""experiments/lr-window/contested-16.toml, the claims written before the 16-pair re-test: its
rows are the placements' and the zoo-frontier's own configs, its protocol is lr-window's
defaults, and each claim's flip counts are what Fisher's test says (so no count can be read
after the fact as close enough)."""

from __future__ import annotations

import json
from pathlib import Path

import tomllib
from scipy.stats import fisher_exact

from recall_lab.experiments import lr_window as lw

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ROOT / "experiments" / "lr-window" / "contested-16.toml"


def test_the_claims_file_names_the_placed_rows_and_lr_windows_protocol():
    spec = tomllib.loads(CLAIMS.read_text())
    rows = {r["name"]: r for r in spec["row"]}
    for name in ("rwkv7", "gated-deltaproduct"):
        answer = json.loads((ROOT / "docs/results/frontier-2026" / name / "answer.json")
                            .read_text())
        assert (rows[name]["mixer"], rows[name]["kwargs"]) == (answer["mixer"], answer["kwargs"])
    zoo = tomllib.loads((ROOT / "experiments/zoo-frontier/zoo-frontier.toml").read_text())
    zoo_rows = [m for link in zoo["link"] for m in link.get("model", [])]
    for name in ("deltanet", "gated-deltanet"):
        assert {"name": name, "mixer_kwargs": rows[name]["kwargs"]} in zoo_rows
    assert spec["ladder"] == list(lw.LADDER) and spec["bounds"] == list(lw.BOUNDS)
    assert spec["confirm_seeds"] == lw.confirm_seeds(lw.CONFIRM)
    for c in spec["claim"]:
        assert c["a"] in rows and c["b"] in rows


def test_each_claims_flip_counts_are_fishers():
    spec = tomllib.loads(CLAIMS.read_text())
    n = len(spec["confirm_seeds"])
    for c in spec["claim"]:
        for kb, k_flip in c["flip_at"].items():
            kb = int(kb)

            def p(k: int, kb: int = kb) -> float:
                return fisher_exact([[k, n - k], [kb, n - kb]], alternative="less").pvalue

            # fewer while the contested row solves fewer than k_flip; not separable from it on
            assert p(k_flip - 1) < spec["level"] <= p(k_flip), (c["claim"], kb)
