"""The thread default, measured (`recall-lab bench threads`): training steps at 1 thread, 2
threads and the default (`device.default_threads`, what `train` takes without --threads), on
the machine as found and beside one busy process the bench starts, interleaved.

Shapes (each a run config built as the lab builds it, timed by `estimate.probe_steps`: warm-up
steps (`WARMUP`), then the median of the timed steps (`STEPS`), forward + backward + AdamW):
- tour: `train --model mamba --task passkey` (the README's first training line; its 100 steps
  and warm-up 50 do not change a step's time);
- zoo-frontier: its largest table, 32 pairs, `mamba2` state 4, batch 32;
- zoology-fig2: its transformer at batch 512, vocabulary 8,192, length 64, d_model 64, 2 layers
  (experiments/zoology/zoology-fig2.toml).

Every measurement is a fresh process (``python -m recall_lab.bench.threads --child ARM``: torch
threads set before the first step, OMP_NUM_THREADS unset as for a user) that times every shape
in a rotated order; the arms' processes alternate in a rotated order within each round and
condition, so that load that drifts over the minutes falls on every arm alike. Each round runs
both conditions: "as found", then "one busy process" (a Python loop the bench starts and
stops). The 1-minute load average and the default's pick are recorded beside every figure.
Result per condition and shape: each arm's median over rounds of its median step, and the
default's over the better of 1 and 2 threads (the goal: at most 1.10).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from recall_lab.bench.record import summarise

ARMS = ("1", "2", "default")
CONDITIONS = ("as found", "one busy process")
SHAPES = ("tour", "zoo-frontier", "zoology-fig2")
# timed, after WARMUP: a tour step is ~20 ms on 2 threads, where 5 steps left a median that
# moved 20% between two processes with the same threads (docs/performance.md, "The thread
# default")
STEPS = {"tour": 20, "zoo-frontier": 20, "zoology-fig2": 3}
WARMUP = {"tour": 1, "zoo-frontier": 1, "zoology-fig2": 1}
GOAL = 1.10
ROOT = Path(__file__).resolve().parents[2]
SPIN = "while True:\n    pass\n"


def shape_config(name: str):
    """The run config of a shape (see the module docstring)."""
    from recall_lab.experiments.grid import load_experiment
    from recall_lab.runs import run_config_from_tables

    if name == "tour":
        return run_config_from_tables({"model": {"name": "mamba"},
                                       "task": {"preset": "passkey"},
                                       "train": {"steps": 100, "warmup": 50, "device": "cpu"}},
                                      "tour")
    if name == "zoo-frontier":
        return run_config_from_tables({"model": {"name": "mamba2", "d_state": 4, "k": 8},
                                       "task": {"levels": [[32, 32]], "values": 16},
                                       "train": {"batch_size": 32, "device": "cpu"}},
                                      "zoo-frontier")
    cfg = load_experiment("zoology-fig2").runs[0].config
    return cfg.model_copy(update={"train": cfg.train.model_copy(update={"device": "cpu"})})


def child(arm: str, order: list[str]) -> dict:
    """One measurement process: its thread count, then every shape's median step."""
    import torch

    from recall_lab.device import default_threads
    from recall_lab.experiments.estimate import probe_steps
    from recall_lab.ssm import retain_freed_memory

    retain_freed_memory()  # as `train` does
    load = os.getloadavg()[0]
    threads = default_threads() if arm == "default" else int(arm)
    torch.set_num_threads(threads)
    steps = {}
    for name in order:
        cfg = shape_config(name)
        steps[name] = probe_steps(cfg, steps=STEPS[name], warmup=WARMUP[name], threads=None,
                                  forward=False).step_s
    return {"arm": arm, "threads": threads, "load_start": load, "step_s": steps,
            "load_end": os.getloadavg()[0]}


def _measure(arm: str, order: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-m", "recall_lab.bench.threads", "--child", arm,
                          "--order", ",".join(order)], capture_output=True, text=True,
                         cwd=ROOT, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"bench threads child {arm} failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def schedule(r: int) -> list[tuple[str, list[str]]]:
    """Round r's arms in their order, each with its shapes' order. Both rotate with the round,
    so that over any 3 rounds every arm goes first once and times every shape first once (a
    shape timed after zoology-fig2's large batch is not the same measurement as one timed
    first, and an arm that always met it there would carry that into its ratio)."""
    arms = list(ARMS[r % 3:] + ARMS[:r % 3])
    out = []
    for arm in arms:
        k = (2 * r + ARMS.index(arm)) % len(SHAPES)
        out.append((arm, list(SHAPES[k:] + SHAPES[:k])))
    return out


def run(console, quick: bool, rounds: int | None = None) -> dict:
    rounds = rounds or (1 if quick else 3)
    records: list[dict] = []
    t0 = time.time()
    for r in range(rounds):
        for cond in CONDITIONS:
            spin = (subprocess.Popen([sys.executable, "-c", SPIN]) if cond != "as found"
                    else None)
            try:
                for arm, order in schedule(r):
                    rec = _measure(arm, order)
                    records.append({"round": r, "condition": cond, **rec})
                    console.print(f"round {r + 1}/{rounds}, {cond}, threads {arm} "
                                  f"(-> {rec['threads']}): "
                                  + ", ".join(f"{s} {rec['step_s'][s] * 1e3:,.0f} ms"
                                              for s in SHAPES)
                                  + f"; load {rec['load_start']:.1f}", highlight=False)
            finally:
                if spin is not None:
                    spin.kill()
                    spin.wait()
    results = summary(records)
    results["wall_s"] = time.time() - t0
    results["records"] = records
    _table(console, results)
    return results


def summary(records: list[dict]) -> dict:
    """Per condition and shape: each arm's `summarise` over rounds, the default's threads and
    its ratio to the better fixed count, and the load averages seen."""
    cells = {}
    for cond in CONDITIONS:
        mine = [r for r in records if r["condition"] == cond]
        if not mine:
            continue
        loads = [x for r in mine for x in (r["load_start"], r["load_end"])]
        for shape in SHAPES:
            arms = {a: summarise([r["step_s"][shape] for r in mine if r["arm"] == a])
                    for a in ARMS if any(r["arm"] == a for r in mine)}
            best = min(arms[a]["median"] for a in ("1", "2") if a in arms)
            picks = sorted({r["threads"] for r in mine if r["arm"] == "default"})
            cells[f"{cond} / {shape}"] = {
                "condition": cond, "shape": shape, "arms": arms, "default_threads": picks,
                "default_over_best": arms["default"]["median"] / best if "default" in arms
                else None,
                "two_over_one": arms["2"]["median"] / arms["1"]["median"]
                if "1" in arms and "2" in arms else None,
                "load": [min(loads), statistics.median(loads), max(loads)]}
    return {"goal": GOAL, "cells": cells,
            "met": all(c["default_over_best"] is not None and c["default_over_best"] <= GOAL
                       for c in cells.values())}


def _table(console, results: dict) -> None:
    from rich.table import Table

    table = Table(title="median step (ms) by torch threads; default = device.default_threads",
                  caption="default/best: the default's median over the better of 1 and 2 "
                  f"threads (goal <= {GOAL:.2f}); load: 1-minute load average, min-max")
    for col in ("condition", "shape", "1", "2", "default (threads)", "default/best", "load"):
        table.add_column(col, justify="left" if col in ("condition", "shape") else "right")
    for c in results["cells"].values():
        a = c["arms"]
        table.add_row(c["condition"], c["shape"],
                      *(f"{a[k]['median'] * 1e3:,.0f}" if k in a else "-" for k in ("1", "2")),
                      (f"{a['default']['median'] * 1e3:,.0f} "
                       f"({'/'.join(map(str, c['default_threads']))})" if "default" in a
                       else "-"),
                      "-" if c["default_over_best"] is None else f"{c['default_over_best']:.2f}",
                      f"{c['load'][0]:.1f}-{c['load'][2]:.1f}")
    console.print(table)


def markdown(results: dict) -> str:
    """The summary as a Markdown table (docs/performance.md's)."""
    lines = ["| condition | shape | 1 thread | 2 threads | default (its threads) | default / "
             "better | 2 / 1 | load average |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in results["cells"].values():
        ms = {k: f"{v['median'] * 1e3:,.0f} ms" for k, v in c["arms"].items()}
        lines.append(f"| {c['condition']} | {c['shape']} | {ms.get('1', '-')} | "
                     f"{ms.get('2', '-')} | {ms.get('default', '-')} "
                     f"({'/'.join(map(str, c['default_threads']))}) | "
                     f"{c['default_over_best']:.2f} | {c['two_over_one']:.2f} | "
                     f"{c['load'][0]:.1f}-{c['load'][2]:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", choices=ARMS, required=True)
    p.add_argument("--order", default=",".join(SHAPES))
    args = p.parse_args(argv)
    print(json.dumps(child(args.child, args.order.split(","))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
