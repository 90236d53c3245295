"""Benchmark: runs per hour of the lab's grid, the old way beside the new, in one process.

The grid: seeds of `deltanet` and `rwkv7` at their 16-pair cells (the committed configs of
place-deltanet's and frontier-2026 rwkv7's seed-0 cells, the seed changed; batch 32 x 66
tokens), each trained by `train.train_run` (the lab's one way: data stream, evaluation every 100
steps, checkpoints) for `steps` steps into a temporary folder, one thread. The old way is the
mixers' torch chunked forms (`dplr_native.torch_forms()`, as before the native DPLR kernel), the
new way the default (the kernel). Runs alternate old / new per seed, the order flipped every
other seed, so a machine's drift falls on both. Runs per hour = 3600 / the median run's wall
seconds, on one worker of one thread; the ratio new / old is the promise (a 2,500-step run
scales with its steps, the start-up aside).

Beside it, every zoo family's model row (`bench zoo`'s: 2 pre-norm blocks at d_model 64, each
mixer at its default options, forward + backward) at the cell's 32 x 66, old and new: the
tokens/s each way and the ratio, so that no row is slower than before.

Each pair's held-out accuracy at the end is recorded both ways (the same run on two kernels:
float rounding apart, the numbers should be close; the replay of whole placements is
`recall-lab verify --table`).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from recall_lab.bench.record import summarise

ROOT = Path(__file__).resolve().parents[2]
CELLS = {"deltanet": "docs/results/place-deltanet/cells/s0-levels16-steps2500-bbb8630a",
         "rwkv7": "docs/results/frontier-2026/rwkv7/cells/s0-levels16-steps2500-c2c24e23"}
SEEDS, STEPS = 8, 300
QUICK_SEEDS, QUICK_STEPS = 2, 100
ROW_SHAPE = (32, 66)
GOAL_RUNS = 2.0  # runs per hour, new over old, for deltanet and rwkv7
GOAL_DELTANET = 0.8  # rwkv7 and gated-deltaproduct model rows over deltanet's
WAYS = ("old", "new")


def cell_config(name: str, seed: int, steps: int):
    """The committed 16-pair cell of `name` with `seed` and `steps` (nothing else changed)."""
    from recall_lab.generators.errors import RecallLabError
    from recall_lab.runs import load_run_config

    folder = ROOT / CELLS[name]
    if not (folder / "config.json").is_file():
        raise RecallLabError(f"bench grid trains the committed cells of a clone of the "
                             f"repository: {folder / 'config.json'} is missing")
    cfg = load_run_config(folder)
    train = cfg.train.model_copy(update={"seed": seed, "data_seed": seed, "steps": steps})
    return cfg.model_copy(update={"train": train})


def train_once(name: str, seed: int, steps: int, way: str) -> dict:
    """One run of the grid, the `way` given; its wall seconds and held-out accuracy."""
    from recall_lab.mixers import dplr_native
    from recall_lab.train import train_run

    cfg = cell_config(name, seed, steps)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        if way == "old":
            with dplr_native.torch_forms():
                summary = train_run(cfg, Path(tmp) / "run")
        else:
            summary = train_run(cfg, Path(tmp) / "run")
        wall = time.perf_counter() - t0
    return {"model": name, "seed": seed, "way": way, "steps": steps, "wall_s": wall,
            "valid_acc": summary["valid"]["acc"], "test_acc": summary["test"]["acc"]}


def family_rows(reps: int, families: tuple[str, ...] | None = None) -> list[dict]:
    """Every zoo family's model row (or `families`') at ROW_SHAPE, old and new."""
    from recall_lab.bench.zoo import ZOO, model_row
    from recall_lab.mixers import dplr_native

    rows = []
    for name in families or ZOO:
        with dplr_native.torch_forms():
            old, _ = model_row(name, None, *ROW_SHAPE, reps)
        new, _ = model_row(name, None, *ROW_SHAPE, reps)
        rows.append({"mixer": name, "old_tokens_per_s": old["tokens_per_s"],
                     "new_tokens_per_s": new["tokens_per_s"],
                     "ratio": new["tokens_per_s"] / old["tokens_per_s"],
                     "old": old["time"], "new": new["time"]})
    base = next((r for r in rows if r["mixer"] == "deltanet"), None)
    for r in rows:
        r["vs_deltanet"] = base and r["new_tokens_per_s"] / base["new_tokens_per_s"]
    return rows


def run(console, quick: bool, seeds: int | None = None, steps: int | None = None,
        models: tuple[str, ...] = tuple(CELLS), reps: int | None = None,
        families: tuple[str, ...] | None = None) -> dict:
    """The tables above; `seeds`, `steps`, `models`, `reps` and `families` narrow the run (the
    tests)."""
    import torch
    from rich.table import Table

    torch.set_num_threads(1)
    seeds = seeds or (QUICK_SEEDS if quick else SEEDS)
    steps = steps or (QUICK_STEPS if quick else STEPS)
    reps = reps or (3 if quick else 7)
    runs = []
    with console.status("training the grid") as status:
        for seed in range(seeds):
            for name in models:
                for way in (WAYS if seed % 2 == 0 else WAYS[::-1]):
                    status.update(f"{name} seed {seed}, {way} way ({steps} steps)")
                    runs.append(train_once(name, seed, steps, way))
    per_model = []
    table = Table(title=f"the grid: {seeds} seeds x {steps} steps at the 16-pair cell (32 x 66),"
                        " 1 thread; runs per hour of one worker")
    for col in ("model", "old s/run", "new s/run", "old runs/h", "new runs/h", "new / old",
                "max |d test|"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name in models:
        walls = {w: summarise([r["wall_s"] for r in runs if r["model"] == name
                               and r["way"] == w]) for w in WAYS}
        pairs = {}
        for r in runs:
            if r["model"] == name:
                pairs.setdefault(r["seed"], {})[r["way"]] = r["test_acc"]
        drift = max(abs(p["old"] - p["new"]) for p in pairs.values())
        per_hour = {w: 3600 / walls[w]["median"] for w in WAYS}
        row = {"model": name, "wall_s": walls, "runs_per_hour": per_hour,
               "ratio": per_hour["new"] / per_hour["old"], "max_test_acc_diff": drift}
        per_model.append(row)
        table.add_row(name, f"{walls['old']['median']:.1f}", f"{walls['new']['median']:.1f}",
                      f"{per_hour['old']:.0f}", f"{per_hour['new']:.0f}",
                      f"{row['ratio']:.2f}x", f"{drift:.3f}")
    console.print(table)
    with console.status("timing the zoo's model rows, old and new"):
        rows = family_rows(reps, families)
    ft = Table(title=f"every zoo family's model row at {ROW_SHAPE[0]} x {ROW_SHAPE[1]}, "
                     "tokens/s, old (torch forms) and new")
    for col in ("mixer", "old", "new", "new / old", "/ deltanet"):
        ft.add_column(col, justify="left" if col == "mixer" else "right")
    for r in rows:
        ft.add_row(r["mixer"], f"{r['old_tokens_per_s']:,.0f}", f"{r['new_tokens_per_s']:,.0f}",
                   f"{r['ratio']:.2f}x",
                   "-" if r["vs_deltanet"] is None else f"{r['vs_deltanet']:.2f}")
    console.print(ft)
    console.print(f"goals: runs per hour new / old >= {GOAL_RUNS:g} for deltanet and rwkv7; "
                  f"rwkv7 and gated-deltaproduct >= {GOAL_DELTANET:g} of deltanet's model row; "
                  "no row slower than before", highlight=False)
    return {"seeds": seeds, "steps": steps, "threads": 1, "cells": CELLS, "runs": runs,
            "models": per_model, "rows": rows, "row_shape": list(ROW_SHAPE),
            "goals": {"runs_per_hour_ratio": GOAL_RUNS, "vs_deltanet": GOAL_DELTANET},
            "loadavg_after": os.getloadavg()[0]}
