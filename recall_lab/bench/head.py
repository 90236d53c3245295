"""Benchmark: the training step with logits only at the scored positions (models/lm.py
`forward_scored`) beside the full output head, at zoology's vocabulary and at a lab one.

Cases: `transformer` (2 layers, d_model 64, one head, its MLP) on zoology's MQAR at (64, 4)
with vocabulary 8,192 (4 of 64 positions scored per row) and on the lab's `mini-mqar` preset
(vocabulary 27). One process, one torch thread; per case the two heads are built from the same
seed and timed interleaved (full, scored, full, ...) on the same fixed batch: forward, loss,
backward, clipping, AdamW (`train.objective`, `train.optimizer_step`). One warm-up step each,
then `reps` steps; medians by `record.summarise`; the ratio is full / scored (above 1: the
scored head is faster). The loss of the first step is recorded for both (equal up to float
rounding: the same objective). On a shared machine absolute figures are upper bounds; the
ratio comes from one run.
"""

from __future__ import annotations

import os
import time

from recall_lab.bench.record import summarise

THREADS = int(os.environ.get("RECALL_LAB_BENCH_THREADS", "1"))
BATCH = 32
ZOOLOGY = {"generator": "zoology-mqar", "kwargs": {
    "vocab_size": 8192, "input_seq_len": 64, "num_kv_pairs": 4, "power_a": 0.01,
    "random_non_queries": False}}
CASES = (("zoology (64, 4)", ZOOLOGY), ("mini-mqar", {"preset": "mini-mqar"}))


def _step_fn(spec, scored: bool, batch: int):
    import torch

    from recall_lab.config import TrainConfig
    from recall_lab.data import batch_at
    from recall_lab.models import build_model
    from recall_lab.models.lm import scored_positions
    from recall_lab.train import make_optimizer, objective, optimizer_step

    t = TrainConfig()
    torch.manual_seed(0)
    model = build_model("transformer", spec.vocab().size, d_model=64, n_heads=1,
                        max_len=spec.max_len)
    opt = make_optimizer(model, t.weight_decay, 1e-3, t.betas)
    x, y = batch_at(spec, batch, 0, 0)
    at, yc = scored_positions(y)

    def step() -> float:
        out = model(x, at=at) if scored else model(x)
        loss = objective(out, yc if scored else y, t.alpha)[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        optimizer_step(model, opt, t.grad_clip)
        return float(loss.detach())

    return step


def run(console, quick: bool, reps: int | None = None, batch: int = BATCH) -> dict:
    import torch
    from rich.table import Table

    from recall_lab.config import task_from_table

    torch.set_num_threads(THREADS)
    reps = reps or (5 if quick else 20)
    rows = []
    for label, table in CASES:
        spec = task_from_table(table)[0]
        steps = {"full": _step_fn(spec, False, batch), "scored": _step_fn(spec, True, batch)}
        first = {k: fn() for k, fn in steps.items()}  # the warm-up step; its loss recorded
        times: dict[str, list[float]] = {"full": [], "scored": []}
        for _ in range(reps):
            for k, fn in steps.items():
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
        full, scored = summarise(times["full"]), summarise(times["scored"])
        rows.append({"task": label, "vocab": spec.vocab().size, "length": spec.max_len,
                     "batch": batch, "full": full, "scored": scored,
                     "ratio": full["median"] / scored["median"],
                     "first_loss": first})
    out = Table(title=f"training step, full head vs scored positions (transformer d_model 64, "
                      f"batch {batch}, {THREADS} thread)")
    for col in ("task", "vocab", "full ms", "scored ms", "full / scored"):
        out.add_column(col, justify="left" if col == "task" else "right")
    for r in rows:
        out.add_row(r["task"], f"{r['vocab']:,}", f"{1e3 * r['full']['median']:.1f}",
                    f"{1e3 * r['scored']['median']:.1f}", f"{r['ratio']:.2f}x")
    console.print(out)
    return {"threads": THREADS, "rows": rows}
