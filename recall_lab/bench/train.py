"""Training throughput of every named model at the mini configuration, side by side in one run.

For each model (seed 004 Table 1 rows, default sizes: hidden 64, k 64) on the `mini-mqjr` task:
a process-wide warm-up, one warm-up step per model, then the median wall time of `steps` full
training steps (forward, loss incl. the KS ranking term, backward, clipping, AdamW) on the same
fixed batches. Reports tokens/s (padded batch tokens) and the ratio to plain `mamba` measured in
the same run. On a shared CPU, run it with OMP_NUM_THREADS=1: with 2 intra-op threads under load
the same steps were measured 5-10x slower and far noisier.
"""

from __future__ import annotations

import statistics
import time


def _time_model(name: str, spec, batches, steps: int, device) -> dict:
    import torch

    from recall_lab.evaluate import batch_metrics
    from recall_lab.models import build_model

    torch.manual_seed(0)
    model = build_model(name, spec.vocab().size, max_len=spec.max_len).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for i in range(steps + 1):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        out = model(x)
        m = batch_metrics(out.logits, y)
        loss = m["ce_sum"] / m["n_targets"].clamp(min=1)
        if out.aux_loss is not None:
            loss = loss + 0.1 * out.aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i:  # the first step pays one-off costs (allocations, kernel compilation)
            times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    return {"model": name, "params": model.n_params(), "step_ms": sec * 1e3,
            "tokens_per_s": x.numel() / sec}


def run(console, quick: bool) -> dict:
    import torch
    from rich.table import Table

    from generators import get_preset
    from recall_lab.data import batch_at
    from recall_lab.models import PAPER_MODELS

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    spec = get_preset("mini-mqjr")
    batch = 8 if quick else 32
    steps = 3 if quick else 5
    batches = [batch_at(spec, batch, 0, s, device) for s in range(2)]
    rows = []
    with console.status("timing training steps") as status:
        _time_model("mamba", spec, batches, 3, device)  # process-wide warm-up, not reported
        for name in PAPER_MODELS:
            status.update(f"timing {name}")
            rows.append(_time_model(name, spec, batches, steps, device))
    base = next(r for r in rows if r["model"] == "mamba")["tokens_per_s"]
    table = Table(title=f"training throughput, mini-mqjr, batch {batch} x "
                  f"{batches[0][0].shape[1]}, {device}, median of {steps} steps")
    for col in ("model", "params", "ms/step", "tokens/s", "vs mamba"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        r["vs_mamba"] = r["tokens_per_s"] / base
        table.add_row(r["model"], f"{r['params']:,}", f"{r['step_ms']:.0f}",
                      f"{r['tokens_per_s']:,.0f}", f"{r['vs_mamba']:.2f}x")
    console.print(table)
    return {"device": str(device), "task": "mini-mqjr", "batch": batch, "steps": steps,
            "threads": torch.get_num_threads(), "rows": rows}
