"""`recall-lab bench decode`: per-token decode time and decode-state bytes against the context
length L, for the models whose inference cost the papers argue about (the joint-recall paper:
a fixed-size state for the sparse hybrids instead of a KV cache that grows with L).

Each model (registry defaults: 2 layers, d_model 64, k 64; `max_len` = the longest length, which
fixes D's gap) is built in eval mode and fed one random token at a time from an empty cache
(`RecallLM.step`, batch 1, one torch thread). At every length L of the ladder (powers of two from
1K to `max_len`, or from max_len/16 when max_len < 16K) the next `REPS` steps are timed one by
one (`record.summarise`: median, p20, p80) in process CPU time, "cpu_seconds" (what the step
computes; on a shared machine the wall time, "seconds", also holds the wait for a core), and the
cache's bytes are read (`DecodeCache.nbytes`, the tensors it holds; the KV cache grows by
doubling its capacity). The growth exponents are least-squares slopes against log(L) of
log(median CPU time) ("time_exponent"), of the wall time and of log(bytes): 0 for a cost that
does not grow with L, 1 for one linear in L. Every token up to the longest L is stepped (no
shortcut), so a run costs, per model, max_len steps.

`figure(results, path)` draws both curves per model (a PNG for docs/results/decode).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from rich.table import Table

from recall_lab.bench.record import summarise

MODELS = ("mamba", "mamba2", "mamba+hax", "mamba2+hax", "mamba+sw", "samba", "attamba",
          "mamba2-attn-se", "transformer")
MAX_LEN, QUICK_MAX_LEN = 65536, 2048
REPS = 16
VOCAB = 64


def ladder(max_len: int) -> list[int]:
    """The lengths measured: 1K, 2K, ... up to max_len (from max_len / 16 when max_len < 16K)."""
    start = max(8, min(1024, max_len // 16))
    out = [start]
    while out[-1] * 2 <= max_len:
        out.append(out[-1] * 2)
    return out


def slope(lengths: list[int], values: list[float]) -> float:
    """Least-squares slope of log(value) against log(L)."""
    return float(np.polyfit(np.log(lengths), np.log(values), 1)[0])


@torch.no_grad()
def measure(name: str, lengths: list[int], reps: int | None = None) -> dict:
    from recall_lab.models import build_model
    from recall_lab.models.decode import state_growth

    reps = reps or REPS
    total = lengths[-1] + reps
    torch.manual_seed(0)
    model = build_model(name, VOCAB, max_len=total).eval()
    ids = torch.randint(3, VOCAB, (total,), generator=torch.Generator().manual_seed(0))
    cache = model.allocate_cache(1, total)
    rows, t = [], 0
    for length in lengths:
        while t < length:
            model.step(ids[t:t + 1], cache)
            t += 1
        wall, cpu = [], []
        for _ in range(reps):
            start, start_cpu = time.perf_counter(), time.process_time()
            model.step(ids[t:t + 1], cache)
            cpu.append(time.process_time() - start_cpu)
            wall.append(time.perf_counter() - start)
            t += 1
        rows.append({"L": length, "seconds": summarise(wall), "cpu_seconds": summarise(cpu),
                     "bytes": cache.nbytes()})
    med = [r["cpu_seconds"]["median"] for r in rows]
    wall_med = [r["seconds"]["median"] for r in rows]
    return {"model": name, "state": state_growth(model), "rows": rows,
            "time_exponent": slope(lengths, med) if len(lengths) > 1 else None,
            "wall_exponent": slope(lengths, wall_med) if len(lengths) > 1 else None,
            "bytes_exponent": slope(lengths, [r["bytes"] for r in rows])
            if len(lengths) > 1 else None}


def run(console: Any, quick: bool, max_len: int | None = None,
        models: tuple[str, ...] | None = None) -> dict:
    models = models or MODELS
    max_len = max_len or (QUICK_MAX_LEN if quick else MAX_LEN)
    lengths = ladder(max_len)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        results = [measure(name, lengths) for name in models]
    finally:
        torch.set_num_threads(before)
    table = Table(title=f"decode: CPU ms per token and state at L = {lengths[0]} .. "
                        f"{lengths[-1]} (batch 1, 1 thread)")
    table.add_column("model")
    table.add_column("state")
    for length in (lengths[0], lengths[-1]):
        table.add_column(f"ms @ {length}", justify="right")
    for length in (lengths[0], lengths[-1]):
        table.add_column(f"MB @ {length}", justify="right")
    table.add_column("time exp.", justify="right")
    table.add_column("bytes exp.", justify="right")
    for r in results:
        first, last = r["rows"][0], r["rows"][-1]
        table.add_row(r["model"], r["state"], f"{first['cpu_seconds']['median'] * 1e3:.2f}",
                      f"{last['cpu_seconds']['median'] * 1e3:.2f}", f"{first['bytes'] / 2**20:.2f}",
                      f"{last['bytes'] / 2**20:.2f}", _exp(r["time_exponent"]),
                      _exp(r["bytes_exponent"]))
    console.print(table)
    return {"lengths": lengths, "reps": REPS, "threads": 1, "vocab": VOCAB, "models": results}


def figure(results: dict, path) -> Any:
    """Per-token time and state bytes against L, log-log, one line per model."""
    from recall_lab.analysis.plots import plt, save_figure

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in results["models"]:
        xs = [row["L"] for row in r["rows"]]
        label = f"{r['model']} ({_exp(r['time_exponent'])}, {_exp(r['bytes_exponent'])})"
        axes[0].plot(xs, [row["cpu_seconds"]["median"] * 1e3 for row in r["rows"]], "o-",
                     label=label)
        axes[1].plot(xs, [row["bytes"] / 2**20 for row in r["rows"]], "o-", label=r["model"])
    for ax, what in zip(axes, ("CPU ms per token (median)", "decode state (MiB)"),
                        strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context length L")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7, title="model (time exp., bytes exp.)", title_fontsize=7)
    return save_figure(fig, path)


def _exp(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.2f}"
