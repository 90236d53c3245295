"""Training throughput of every named model at the mini configuration, side by side in one run.

For each model (HAX paper Table 1 rows, default sizes: hidden 64, k 64) on the `mini-mqjr` task,
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

Roofline: every row also gives its effective GFLOP/s, 6 x parameters x tokens per step (the
dense rule of thumb for forward + backward; it leaves out the scans' and attention's own FLOPs,
so it is a lower bound) over the step's median wall time, and that over the peak of one thread's
float32 matmul measured in the same run (512 x 512 x 512, fastest of 20; printed).

Time-to-answer (env ``RECALL_LAB_BENCH_ANSWER=1``; minutes, so off by default): the capacity
experiment's `transformer` and `mamba` cells at 8 pairs (experiments/capacity/capacity.toml:
batch 32, warm-up 500, up to 2500 steps, early stop at held-out accuracy 0.99), seed 0, each
trained by `train_run` in a fresh one-thread process (``--answer MODEL``): wall time from the
process's start to its summary (imports and the final test included), the step it stopped at and
its test accuracy. Fixed seeds make the step count deterministic, so two commits' times compare
where their step counts agree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from recall_lab.bench.record import summarise

_START = time.perf_counter()  # a child's start, for time-to-answer

PARTS = ("lsh indices", "ks scores", "ks top-n", "ks loss", "union", "attention fwd",
         "backward")


def _time_model(name: str, batch: int, steps: int) -> dict:
    import torch

    from recall_lab.config import TrainConfig
    from recall_lab.data import batch_at
    from recall_lab.generators import get_preset
    from recall_lab.models import build_model
    from recall_lab.train import make_optimizer, objective, optimizer_step

    torch.set_num_threads(1)
    defaults = TrainConfig()  # the training step's alpha and clipping, as `recall-lab train`
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    spec = get_preset("mini-mqjr")
    batches = [batch_at(spec, batch, 0, s, device) for s in range(2)]

    def timed(model_name: str, n: int) -> tuple[list[float], list[float], object]:
        torch.manual_seed(0)
        model = build_model(model_name, spec.vocab().size, max_len=spec.max_len).to(device)
        opt = make_optimizer(model, defaults.weight_decay, 1e-3, defaults.betas)
        wall, cpu = [], []
        for i in range(n + 1):
            x, y = batches[i % len(batches)]
            t0, c0 = time.perf_counter(), time.process_time()
            out = model(x)
            loss = objective(out, y, defaults.alpha)[0]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            optimizer_step(model, opt, defaults.grad_clip)
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


def matmul_peak(size: int = 512, reps: int = 20) -> float:
    """GFLOP/s of one thread's float32 matmul at size^3: the fastest of `reps` (on a shared
    machine the fastest is the one least slowed by other jobs)."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(3):
        a @ b
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2 * size**3 / min(ts) / 1e9


def capacity_cell(name: str, seed: int = 0):
    """The run config of the capacity experiment's `name` cell at 8 pairs, state 4, `seed`."""
    from pathlib import Path

    from recall_lab.experiments.grid import load_experiment

    toml = Path(__file__).resolve().parents[2] / "experiments" / "capacity" / "capacity.toml"
    cells = [r.config for r in load_experiment(toml).runs
             if r.config.model.name == name and r.config.model.d_state == 4
             and [list(lv) for lv in r.config.task.levels] == [[8, 8]]
             and r.config.train.seed == seed]
    if len(cells) != 1:
        raise RuntimeError(f"capacity.toml has {len(cells)} cells for {name}, 8 pairs, state 4, "
                           f"seed {seed}; expected 1")
    return cells[0]


def time_to_answer(name: str, seed: int = 0) -> dict:
    """Train the capacity experiment's `name` cell at 8 pairs (state 4) to its stop rule in a
    temporary folder; wall time from this process's start (module docstring)."""
    import tempfile
    from pathlib import Path

    import torch

    from recall_lab.train import train_run

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        summary = train_run(capacity_cell(name, seed), Path(tmp) / "run")
    return {"model": name, "seed": seed, "stopped_at": summary["stopped_at"],
            "stopped": summary["stopped"], "test_acc": summary["test"]["acc"],
            "train_s": summary["wall_s_this_session"],
            "wall_s": time.perf_counter() - _START}


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
    peak = _child("--peak", device="cpu")
    ok = [r for r in rows if not r.get("failed")]
    base = next((r for r in ok if r["model"] == "mamba"), None)
    length = ok[0]["length"] if ok else None
    device = ok[0]["device"] if ok else "?"
    table = Table(title=f"training throughput, mini-mqjr, batch {batch} x {length}, {device}, "
                  f"1 thread, {steps} steps per model (medians; p20-p80 of wall ms)")
    for col in ("model", "params", "ms/step", "p20-p80", "tokens/s", "vs mamba",
                "cpu ms/step", "vs mamba (cpu)", "GFLOP/s", "of peak"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        if r.get("failed"):
            table.add_row(r["model"], "failed", *["-"] * 8)
            continue
        r["gflops"] = 6 * r["params"] * r["tokens"] / r["wall_s"]["median"] / 1e9
        r["of_peak"] = peak and r["gflops"] / peak["gflops"]
        r["tokens_per_s"] = r["tokens"] / r["wall_s"]["median"]
        r["vs_mamba"] = base and r["tokens_per_s"] / (base["tokens"] / base["wall_s"]["median"])
        r["vs_mamba_cpu"] = base and base["cpu_s"]["median"] / r["cpu_s"]["median"]
        table.add_row(r["model"], f"{r['params']:,}", f"{r['wall_s']['median'] * 1e3:.0f}",
                      f"{r['wall_s']['p20'] * 1e3:.0f}-{r['wall_s']['p80'] * 1e3:.0f}",
                      f"{r['tokens_per_s']:,.0f}",
                      "-" if r["vs_mamba"] is None else f"{r['vs_mamba']:.2f}x",
                      f"{r['cpu_s']['median'] * 1e3:.0f}",
                      "-" if r["vs_mamba_cpu"] is None else f"{r['vs_mamba_cpu']:.2f}x",
                      f"{r['gflops']:.1f}", "-" if not r["of_peak"] else f"{r['of_peak']:.0%}")
    console.print(table)
    if peak:
        console.print(f"peak: one thread's float32 matmul 512^3, {peak['gflops']:.1f} GFLOP/s; "
                      "GFLOP/s = 6 x params x tokens / step time (a lower bound)",
                      highlight=False)
    answers = []
    if os.environ.get("RECALL_LAB_BENCH_ANSWER") == "1":
        for name in ("transformer", "mamba"):
            status_line = f"time-to-answer: training capacity's {name} cell (minutes)"
            with console.status(status_line):
                answers.append(_child("--answer", name, device="cpu")
                               or {"model": name, "failed": True})
        at = Table(title="time-to-answer: capacity cells at 8 pairs, seed 0, to held-out acc "
                         "0.99 (or 2500 steps), 1 thread")
        for col in ("model", "stopped at", "test acc", "training s", "wall s"):
            at.add_column(col, justify="left" if col == "model" else "right")
        for a in answers:
            if a.get("failed"):
                at.add_row(a["model"], "failed", "-", "-", "-")
            else:
                at.add_row(a["model"], f"{a['stopped_at']} ({a['stopped']})",
                           f"{a['test_acc']:.3f}", f"{a['train_s']:.1f}", f"{a['wall_s']:.1f}")
        console.print(at)
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
            "threads": 1, "rows": rows, "hax_branch_ms": breakdown,
            "matmul_peak_gflops": peak and peak["gflops"], "time_to_answer": answers}


def _main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs=3, metavar=("MODEL", "BATCH", "STEPS"))
    ap.add_argument("--breakdown", nargs=3, type=int, metavar=("BATCH", "LENGTH", "D_QK"))
    ap.add_argument("--peak", action="store_true")
    ap.add_argument("--answer", metavar="MODEL")
    args = ap.parse_args(argv)
    if args.peak:
        print(json.dumps({"gflops": matmul_peak()}))
    elif args.answer:
        print(json.dumps(time_to_answer(args.answer)))
    elif args.case:
        name, batch, steps = args.case
        print(json.dumps(_time_model(name, int(batch), int(steps))))
    elif args.breakdown:
        print(json.dumps(branch_breakdown(*args.breakdown)))
    else:
        from rich.console import Console

        print(json.dumps(run(Console(), quick=True), indent=2))


if __name__ == "__main__":
    _main(sys.argv[1:])
