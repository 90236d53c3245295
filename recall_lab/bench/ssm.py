"""Benchmark: SSM fast paths vs. the plain recurrence, forward+backward of a 2-layer stack.

Model: 2 pre-norm residual blocks x + mixer(rmsnorm(x)) on random [B, L, 64] inputs (no
embedding), loss = mean(y^2). Mamba: d_model 64, d_inner 128, state 16. Mamba2: 8 heads of headdim
16, state 32, chunk 64. "fast" is the mixer's default path on the device (`scan_backend`);
"reference" is the same mixer with the plain recurrence differentiated by autograd.

Each measurement runs in its own subprocess with torch.set_num_threads(2). Peak memory is the rise
of the process's resident-set high-water mark (resource.getrusage ru_maxrss) from after model and
input creation to after the timed steps: it counts everything the step allocated at its worst
moment, including allocator caching, at page granularity. Timings are wall-clock medians on a
machine whose cores may be shared with other work, so treat absolute figures as indicative; the
ratios come from one run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

CONFIGS = {
    "mamba": dict(d_model=64, d_inner=128, d_state=16),
    "mamba2": dict(d_model=64, d_inner=128, d_state=32, headdim=16, chunk_size=64),
    # same model, smaller SSD chunk: measured faster on CPU; shares mamba2's reference
    "mamba2-chunk32": dict(d_model=64, d_inner=128, d_state=32, headdim=16, chunk_size=32),
}
REF_OF = {"mamba2-chunk32": "mamba2"}
# (batch, length); the reference at the long setting runs on a shorter length (see REF_LEN)
SHAPES = [(16, 256), (64, 1058)]
# The autograd recurrence keeps every step's tensors: at B=64, L=1058 that is several GB per
# layer, so the reference is timed at this length instead (its cost per token does not depend
# on L: one step of the recurrence per token).
REF_LEN = {1058: 256}

_CHILD = r"""
import json, resource, statistics, sys, time
import torch
torch.set_num_threads(2)
from torch import nn
from recall_lab.ssm import MambaMixer, Mamba2Mixer, scan_backend
kind, impl, b, l, reps, cfg = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
    int(sys.argv[5]), json.loads(sys.argv[6])
kind = "mamba" if kind == "mamba" else "mamba2"
torch.manual_seed(0)
cls = MambaMixer if kind == "mamba" else Mamba2Mixer
blocks = nn.ModuleList([cls(**cfg, scan_impl=impl) for _ in range(2)])
norms = nn.ModuleList([nn.RMSNorm(cfg["d_model"]) for _ in range(2)])
x = torch.randn(b, l, cfg["d_model"])

def step():
    h = x
    for norm, mix in zip(norms, blocks):
        h = h + mix(norm(h))
    loss = h.pow(2).mean()
    loss.backward()
    for p in blocks.parameters():
        p.grad = None

rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
step()  # warm-up
times = []
for _ in range(reps):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
sec = statistics.median(times)
print(json.dumps({"sec_per_step": sec, "tokens_per_s": b * l / sec,
                  "tokens_per_s_best": b * l / min(times), "reps": reps,
                  "peak_rss_rise_mib": (rss1 - rss0) / 1024,
                  "backend": scan_backend("cpu", "selective_scan" if kind == "mamba" else "ssd")
                  if impl != "ref" else "reference"}))
"""


def _measure(kind: str, impl: str, b: int, length: int, reps: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, kind, impl, str(b), str(length), str(reps),
         json.dumps(CONFIGS[kind])],
        capture_output=True, text=True, check=False,
    )
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(console: Any, quick: bool) -> dict:
    from rich.table import Table

    shapes = SHAPES[:1] if quick else SHAPES
    reps_fast, reps_ref = (2, 1) if quick else (5, 2)
    results: dict[str, Any] = {"method": __doc__.split("\n\n")[-1].replace("\n", " ").strip(),
                               "rows": []}
    table = Table(title="SSM: 2-layer forward+backward, fast path vs. autograd recurrence")
    for col in ("mixer", "B x L", "fast tok/s", "(best)", "ref tok/s", "speed-up",
                "fast peak MiB", "ref peak MiB", "memory ratio"):
        table.add_column(col, justify="left" if col == "mixer" else "right")
    refs: dict[tuple, dict] = {}
    for kind in CONFIGS:
        for b, length in shapes:
            ref_len = REF_LEN.get(length, length)
            fast = _measure(kind, "auto", b, length, reps_fast)
            ref_kind = REF_OF.get(kind, kind)
            if (ref_kind, b, ref_len) not in refs:
                refs[(ref_kind, b, ref_len)] = _measure(ref_kind, "ref", b, ref_len, reps_ref)
            ref = refs[(ref_kind, b, ref_len)]
            row = {"mixer": kind, "config": CONFIGS[kind], "batch": b, "length": length,
                   "ref_length": ref_len, "fast": fast, "reference": ref}
            ok = "error" not in fast and "error" not in ref
            # memory is only compared at equal shapes (the reference may run shorter)
            same = ref_len == length
            if ok:
                row["speedup"] = fast["tokens_per_s"] / ref["tokens_per_s"]
                if same:
                    fm = max(fast["peak_rss_rise_mib"], 1e-9)
                    row["memory_ratio_ref_over_fast"] = ref["peak_rss_rise_mib"] / fm
            results["rows"].append(row)
            ref_note = "" if ref_len == length else f" (ref L={ref_len})"

            def f(d: dict, key: str, fmt: str) -> str:
                return format(d[key], fmt) if key in d else d.get("error", "?")[:30]

            table.add_row(
                kind, f"{b} x {length}{ref_note}",
                f(fast, "tokens_per_s", ",.0f"), f(fast, "tokens_per_s_best", ",.0f"),
                f(ref, "tokens_per_s", ",.0f"),
                f"{row['speedup']:.0f}x" if ok else "-",
                f(fast, "peak_rss_rise_mib", ".0f"), f(ref, "peak_rss_rise_mib", ".0f"),
                f"{row['memory_ratio_ref_over_fast']:.1f}x" if ok and same else "-",
            )
    console.print(table)
    console.print("tok/s: median over reps (best in brackets); peak MiB: rise of ru_maxrss during "
                  "the timed steps, one subprocess per cell. Cores may be shared: absolute tok/s "
                  "are indicative, ratios are from the same run.")
    return results
