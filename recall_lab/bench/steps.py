"""The capacity experiment's training step, old code against new, side by side in one run.

    python recall_lab/bench/steps.py --old /path/to/old/tree [--new .] [--reps 3]

For each of `mamba`, `mamba2`, `transformer`, `mamba+hax`, `mamba2+hax` at the capacity config
(d_model 64, state 4, k 8, MQAR 8 pairs, batch 32, lr 3e-3), `--reps` rounds, each of which
starts a fresh process per (model, tree), alternating old and new, with PYTHONPATH set to that
tree and one torch thread. A child (``--case MODEL``: this file run by path, so it needs only the
public API that both trees have) trains 5 warm-up steps, then times 20 steps on fixed batches
and reports their medians: wall ms and CPU ms (process time: what the process computed, without
the time it waited for a core; on a shared machine its ratios are the steadier ones). The table
gives the median over rounds and old / new. Only the ratios of one interleaved run mean
anything on a loaded machine; absolute figures move with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODELS = ("mamba", "mamba2", "transformer", "mamba+hax", "mamba2+hax")


def _case(name: str, steps: int = 20) -> dict:
    import torch

    torch.set_num_threads(1)
    from recall_lab.data import DataSource
    from recall_lab.runs import build_run_model, run_config_from_tables
    from recall_lab.train import objective

    cfg = run_config_from_tables({
        "model": {"name": name, "d_state": 4, "k": 8},
        "train": {"batch_size": 32, "lr": 3e-3, "device": "cpu"},
        "task": {"levels": [[8, 8]], "values": 16}})
    torch.manual_seed(0)
    model = build_run_model(cfg)
    opt = torch.optim.AdamW(model.param_groups(cfg.train.weight_decay), lr=cfg.train.lr)
    data = DataSource.for_run(cfg)
    batches = [data.batch(s, 32, torch.device("cpu")) for s in range(4)]
    wall, cpu = [], []
    for i in range(5 + steps):
        x, y = batches[i % len(batches)]
        t0, c0 = time.perf_counter(), time.process_time()
        loss = objective(model(x), y, cfg.train.alpha)[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        opt.step()
        if i >= 5:
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return {"wall_ms": statistics.median(wall) * 1e3, "cpu_ms": statistics.median(cpu) * 1e3}


def _child(tree: str, name: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--case", name], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare(old: str, new: str, reps: int, models: tuple[str, ...]) -> dict:
    got: dict = {m: {"old": [], "new": []} for m in models}
    for _ in range(reps):
        for m in models:
            for which, tree in (("old", old), ("new", new)):
                got[m][which].append(_child(tree, m))
    table = {}
    for m in models:
        row = {}
        for which in ("old", "new"):
            for key in ("wall_ms", "cpu_ms"):
                row[f"{which}_{key}"] = statistics.median(r[key] for r in got[m][which])
        row["speedup_wall"] = row["old_wall_ms"] / row["new_wall_ms"]
        row["speedup_cpu"] = row["old_cpu_ms"] / row["new_cpu_ms"]
        table[m] = row
    return table


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case")
    ap.add_argument("--old")
    ap.add_argument("--new", default=".")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args(argv)
    if args.case:
        print(json.dumps(_case(args.case)))
        return
    if not args.old:
        ap.error("--old TREE is required (a checkout of the code to compare with)")
    models = tuple(args.models.split(","))
    table = compare(args.old, args.new, args.reps, models)
    print(f"{'model':<12} {'old ms':>8} {'new ms':>8} {'old/new':>8}   {'old cpu':>8} "
          f"{'new cpu':>8} {'old/new':>8}")
    for m, r in table.items():
        print(f"{m:<12} {r['old_wall_ms']:8.1f} {r['new_wall_ms']:8.1f} {r['speedup_wall']:7.2f}x"
              f"   {r['old_cpu_ms']:8.1f} {r['new_cpu_ms']:8.1f} {r['speedup_cpu']:7.2f}x")
    for side in ("old", "new"):
        for base, hyb in (("mamba", "mamba+hax"), ("mamba2", "mamba2+hax")):
            if base in table and hyb in table:
                ratio = table[base][f"{side}_cpu_ms"] / table[hyb][f"{side}_cpu_ms"]
                print(f"{side}: {hyb} at {ratio:.2f}x of {base} (cpu ms)")
    print(json.dumps(table))


if __name__ == "__main__":
    main(sys.argv[1:])
