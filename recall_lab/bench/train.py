"""Training throughput of every named model at the mini configuration, side by side in one run.

For each model (seed 004 Table 1 rows, default sizes: hidden 64, k 64) on the `mini-mqjr` task,
in a fresh subprocess (``python -m recall_lab.bench.train --case MODEL BATCH STEPS``) with one
torch thread: a process-wide warm-up (3 steps of plain `mamba`), one warm-up step of the model,
then `steps` full training steps (forward, loss incl. the KS ranking term, backward, clipping,
AdamW) on the same fixed batches. Per step: wall time and the process's CPU time (CPU time does
not count the time the process waits for a core, so on a shared machine its ratios are the
steadier ones). Both summarised by ``record.summarise`` (median, p20, p80); tokens/s (padded batch
tokens) and the ratio to plain `mamba` from the medians of the same run. With 2 intra-op threads
under load the same steps were measured 5-10x slower and far noisier.

Then, in its own subprocess (``--breakdown BATCH LENGTH D_QK``), a breakdown of one HAX branch
layer at the same shape (batch x length, d_qk = the mixer's state size, v = d_inner = 128 wide, k =
64 = LSH 32 + KS 32, training mode): CPU ms per part (torch.profiler record_function ranges: wall
time on the one thread, so inflated alike by machine load; mean of 5 steps after 2 warm-ups): LSH
indices, KS scores (MLP), KS causal top-n, KS ranking loss, union, the attention op forward, and
the backward of the attention + KS scorer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from recall_lab.bench.record import summarise

PARTS = ("lsh indices", "ks scores", "ks top-n", "ks loss", "union", "attention fwd",
         "backward")


def _time_model(name: str, batch: int, steps: int) -> dict:
    import torch

    from generators import get_preset
    from recall_lab.config import TrainConfig
    from recall_lab.data import batch_at
    from recall_lab.models import build_model
    from recall_lab.train import objective

    torch.set_num_threads(1)
    defaults = TrainConfig()  # the training step's alpha and clipping, as `recall-lab train`
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    spec = get_preset("mini-mqjr")
    batches = [batch_at(spec, batch, 0, s, device) for s in range(2)]

    def timed(model_name: str, n: int) -> tuple[list[float], list[float], object]:
        torch.manual_seed(0)
        model = build_model(model_name, spec.vocab().size, max_len=spec.max_len).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        wall, cpu = [], []
        for i in range(n + 1):
            x, y = batches[i % len(batches)]
            t0, c0 = time.perf_counter(), time.process_time()
            out = model(x)
            loss = objective(out, y, defaults.alpha)[0]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), defaults.grad_clip)
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i:  # the first step pays one-off costs (allocations, kernel compilation)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        return wall, cpu, model

    timed("mamba", 3)  # process-wide warm-up, not reported
    wall, cpu, model = timed(name, steps)
    return {"model": name, "params": model.n_params(), "wall_s": wall, "cpu_s": cpu,
            "tokens": batches[0][0].numel(), "length": batches[0][0].shape[1],
            "device": str(device), "loadavg_after": os.getloadavg()[0]}


def _child(*args: object, device: str = "auto") -> dict | None:
    """Run ``python -m recall_lab.bench.train ARGS`` with one thread; its last stdout line (JSON).
    Its stderr (torch.profiler's start/stop lines among others) stays out of the printed tables.
    The child trains on a GPU when it sees one: ``device="cpu"`` hides any."""
    cmd = [sys.executable, "-m", "recall_lab.bench.train", *map(str, args)]
    hide = {"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}
    res = subprocess.run(cmd, capture_output=True, text=True, check=False,
                         env={**os.environ, "OMP_NUM_THREADS": "1", **hide})
    if res.returncode != 0:
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])


def _spawn(name: str, batch: int, steps: int, device: str = "auto") -> dict | None:
    out = _child("--case", name, batch, steps, device=device)
    if out is not None:
        out["wall_s"], out["cpu_s"] = summarise(out["wall_s"]), summarise(out["cpu_s"])
    return out


def branch_breakdown(batch: int, length: int, d_qk: int, d_v: int = 128, reps: int = 5) -> dict:
    """Milliseconds per part of one HAX branch layer's training step (module docstring)."""
    import torch
    from torch.profiler import profile, record_function

    from recall_lab.attention import make_pattern, sparse_attention
    from recall_lab.attention.patterns import causal_topk_indices, ks_ranking_loss, union_indices

    torch.set_num_threads(1)
    torch.manual_seed(0)
    q, k = (torch.randn(batch, 1, length, d_qk, requires_grad=True) for _ in range(2))
    v = torch.randn(batch, 1, length, d_v, requires_grad=True)
    lsh, ks = make_pattern("hax", 64, dim=d_qk).train().parts

    def step() -> None:
        with record_function("lsh indices"):
            a, _ = lsh(q, k)
        with record_function("ks scores"):  # as KSPattern.forward does
            inp = ks.inputs(q, k)
            with torch.no_grad():
                x = ks.mlp(inp).squeeze(-1)
        with record_function("ks top-n"):
            b = causal_topk_indices(x, ks.budget)
        with record_function("ks loss"):
            aux = ks_ranking_loss(x, q, k, ks.budget, ks.scale, score_at=lambda sel: ks.mlp(
                inp.gather(-2, sel[..., None].expand(*sel.shape, inp.shape[-1]))).squeeze(-1))
        with record_function("union"):
            idx = union_indices(a, b)
        with record_function("attention fwd"):
            out = sparse_attention(q, k, v, idx, scale=d_qk**-0.5)
        with record_function("backward"):
            (out.square().mean() + aux).backward()

    for _ in range(2):
        step()
    with profile() as prof:
        for _ in range(reps):
            step()
    ms = {e.key: e.cpu_time_total / reps / 1e3 for e in prof.key_averages() if e.key in PARTS}
    return {"batch": batch, "length": length, "d_qk": d_qk, "d_v": d_v,
            "ms": {p: ms.get(p) for p in PARTS}}


def run(console, quick: bool, device: str = "auto") -> dict:
    """``device``: "cpu" (`bench train`, hides any GPU from the cases), "cuda" (`--device
    cuda`) or "auto" (a GPU when the cases see one)."""
    import torch
    from rich.table import Table

    batch = 8 if quick else 32
    # Env RECALL_LAB_BENCH_STEPS: more timed steps per model where 5 are too noisy for a ratio.
    steps = 3 if quick else int(os.environ.get("RECALL_LAB_BENCH_STEPS", "5"))
    from recall_lab.models import PAPER_MODELS

    # Env RECALL_LAB_BENCH_MODELS (e.g. "mamba,mamba+hax") narrows a run on a loaded machine.
    names = [m for m in PAPER_MODELS
             if m in os.environ.get("RECALL_LAB_BENCH_MODELS", m).split(",")]
    rows = []
    with console.status("timing training steps") as status:
        for name in names:
            status.update(f"timing {name}")
            r = _spawn(name, batch, steps, device=device)
            rows.append(r if r is not None else {"model": name, "failed": True})
    ok = [r for r in rows if not r.get("failed")]
    base = next((r for r in ok if r["model"] == "mamba"), None)
    length = ok[0]["length"] if ok else None
    device = ok[0]["device"] if ok else "?"
    table = Table(title=f"training throughput, mini-mqjr, batch {batch} x {length}, {device}, "
                  f"1 thread, {steps} steps per model (medians; p20-p80 of wall ms)")
    for col in ("model", "params", "ms/step", "p20-p80", "tokens/s", "vs mamba",
                "cpu ms/step", "vs mamba (cpu)"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        if r.get("failed"):
            table.add_row(r["model"], "failed", *["-"] * 6)
            continue
        r["tokens_per_s"] = r["tokens"] / r["wall_s"]["median"]
        r["vs_mamba"] = base and r["tokens_per_s"] / (base["tokens"] / base["wall_s"]["median"])
        r["vs_mamba_cpu"] = base and base["cpu_s"]["median"] / r["cpu_s"]["median"]
        table.add_row(r["model"], f"{r['params']:,}", f"{r['wall_s']['median'] * 1e3:.0f}",
                      f"{r['wall_s']['p20'] * 1e3:.0f}-{r['wall_s']['p80'] * 1e3:.0f}",
                      f"{r['tokens_per_s']:,.0f}",
                      "-" if r["vs_mamba"] is None else f"{r['vs_mamba']:.2f}x",
                      f"{r['cpu_s']['median'] * 1e3:.0f}",
                      "-" if r["vs_mamba_cpu"] is None else f"{r['vs_mamba_cpu']:.2f}x")
    console.print(table)
    breakdown = []
    if length is not None and (device == "cpu" or not torch.cuda.is_available()):
        for d_qk, label in ((16, "mamba+hax"), (64, "mamba2+hax")):
            b = _child("--breakdown", batch, length, d_qk, device="cpu") or {
                "batch": batch, "length": length, "d_qk": d_qk, "ms": dict.fromkeys(PARTS)}
            b["model"] = label
            breakdown.append(b)
        bt = Table(title=f"one HAX branch layer, training step, batch {batch} x {length}: "
                         "ms per part (profiler, mean of 5)")
        bt.add_column("part")
        for b in breakdown:
            bt.add_column(f"{b['model']} (d_qk {b['d_qk']})", justify="right")
        for part in PARTS:
            bt.add_row(part, *(f"{b['ms'][part]:.1f}" if b["ms"][part] is not None
                               else "-" for b in breakdown))
        bt.add_row("total", *(f"{sum(v or 0 for v in b['ms'].values()):.1f}"
                              for b in breakdown))
        console.print(bt)
    return {"device": device, "task": "mini-mqjr", "batch": batch, "steps": steps,
            "threads": 1, "rows": rows, "hax_branch_ms": breakdown}


def _main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs=3, metavar=("MODEL", "BATCH", "STEPS"))
    ap.add_argument("--breakdown", nargs=3, type=int, metavar=("BATCH", "LENGTH", "D_QK"))
    args = ap.parse_args(argv)
    if args.case:
        name, batch, steps = args.case
        print(json.dumps(_time_model(name, int(batch), int(steps))))
    elif args.breakdown:
        print(json.dumps(branch_breakdown(*args.breakdown)))
    else:
        from rich.console import Console

        print(json.dumps(run(Console(), quick=True), indent=2))


if __name__ == "__main__":
    _main(sys.argv[1:])
