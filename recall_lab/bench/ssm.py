"""Benchmark: SSM fast paths vs. the plain recurrence, forward+backward of a 2-layer stack.

Model: 2 pre-norm residual blocks x + mixer(rmsnorm(x)) on random [B, L, 64] inputs (no
embedding), loss = mean(y^2). Mamba: d_model 64, d_inner 128, state 16. Mamba2: 8 heads of headdim
16, state 32, chunk 64. "fast" is the mixer's default path on the device (`scan_backend`);
"reference" is the same mixer with the plain recurrence differentiated by autograd.

Each measurement runs in its own subprocess with torch.set_num_threads(2) and, for fast and
reference alike, `retain_freed_memory()` (glibc keeps freed blocks instead of unmapping them, see
recall_lab/ssm/cpu_malloc.py); the fast path is also timed without it ("default malloc"). Peak
memory is the rise of the process's resident-set high-water mark (resource.getrusage ru_maxrss)
from after model and input creation to after the timed steps: everything the step allocated at
its worst moment, including allocator caching, at page granularity. Timings are wall-clock
medians (and best) on a machine whose cores may be shared with other work (each cell records the
1-minute load average before and after), so absolute figures are indicative; ratios are from one
run.
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
# The autograd recurrence keeps every step's tensors (measured ~1.7 GB for the 2-layer Mamba at
# B=64, L=256, so ~7 GB at L=1058), so at the long setting the reference is timed at this length
# instead: its cost per token does not depend on L (one step of the recurrence per token).
REF_LEN = {1058: 128}

_CHILD = r"""
import json, os, resource, statistics, sys, time
import torch
torch.set_num_threads(2)
from torch import nn
from recall_lab.ssm import MambaMixer, Mamba2Mixer, scan_backend
from recall_lab.ssm.cpu_malloc import retain_freed_memory
malloc_retained = retain_freed_memory() if sys.argv[7] == "1" else False
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

load0 = os.getloadavg()[0]
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
                  "loadavg_1min": [load0, os.getloadavg()[0]], "malloc_retained": malloc_retained,
                  "peak_rss_rise_mib": (rss1 - rss0) / 1024,
                  "backend": scan_backend("cpu", "selective_scan" if kind == "mamba" else "ssd")
                  if impl != "ref" else "reference"}))
"""


def _measure(kind: str, impl: str, b: int, length: int, reps: int, retain: bool = True) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, kind, impl, str(b), str(length), str(reps),
         json.dumps(CONFIGS[kind]), "1" if retain else "0"],
        capture_output=True, text=True, check=False,
    )
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(console: Any, quick: bool) -> dict:
    from rich import box
    from rich.table import Table

    shapes = SHAPES[:1] if quick else SHAPES
    reps_fast, reps_ref = (2, 1) if quick else (5, 2)
    results: dict[str, Any] = {"method": __doc__.split("\n\n")[-1].replace("\n", " ").strip(),
                               "rows": []}
    table = Table(title="SSM: 2-layer fwd+bwd tokens/s, fast path vs. autograd recurrence",
                  box=box.SIMPLE, pad_edge=False)
    for col in ("mixer", "BxL", "fast", "no-retain", "ref", "ratio", "fast MiB", "ref MiB"):
        left = col == "mixer"
        table.add_column(col, justify="left" if left else "right", min_width=len(col))
    refs: dict[tuple, dict] = {}
    for kind in CONFIGS:
        for b, length in shapes:
            ref_len = REF_LEN.get(length, length)
            fast = _measure(kind, "auto", b, length, reps_fast)
            fast_default = _measure(kind, "auto", b, length, reps_fast, retain=False)
            ref_kind = REF_OF.get(kind, kind)
            if (ref_kind, b, ref_len) not in refs:
                refs[(ref_kind, b, ref_len)] = _measure(ref_kind, "ref", b, ref_len, reps_ref)
            ref = refs[(ref_kind, b, ref_len)]
            row = {"mixer": kind, "config": CONFIGS[kind], "batch": b, "length": length,
                   "ref_length": ref_len, "fast": fast, "fast_default_malloc": fast_default,
                   "reference": ref}
            ok = "error" not in fast and "error" not in ref
            # memory is only compared at equal shapes (the reference may run shorter)
            same = ref_len == length
            if ok:
                row["speedup"] = fast["tokens_per_s"] / ref["tokens_per_s"]
                if same:
                    fm = max(fast["peak_rss_rise_mib"], 1e-9)
                    row["memory_ratio_ref_over_fast"] = ref["peak_rss_rise_mib"] / fm
            results["rows"].append(row)
            ref_note = "" if ref_len == length else f"\nref L={ref_len}"

            def f(d: dict, key: str, fmt: str) -> str:
                if key not in d:
                    return d.get("error", "?")[:30]
                return f"{d[key] / 1e3:.1f}k" if fmt == "k" else format(d[key], fmt)

            ratio = "-"
            if ok:
                sp = row["speedup"]
                ratio = f"{sp:.0f}x" if sp >= 10 else f"{sp:.1f}x"
            table.add_row(
                kind.replace("-chunk", "/c"), f"{b}x{length}{ref_note}",
                f(fast, "tokens_per_s", "k"), f(fast_default, "tokens_per_s", "k"),
                f(ref, "tokens_per_s", "k"), ratio,
                f(fast, "peak_rss_rise_mib", ".0f"), f(ref, "peak_rss_rise_mib", ".0f"),
            )
    console.print(table)
    loads = [x for r in results["rows"] for x in r["fast"].get("loadavg_1min", [])]
    console.print("fast/ref: median tokens/s (no-retain: fast path with glibc's default malloc); "
                  "ratio: fast/ref; MiB: rise of ru_maxrss during the timed steps, one subprocess "
                  "per cell. 1-min load average around the fast runs: "
                  f"{min(loads, default=0):.1f}-{max(loads, default=0):.1f} (2 cores); with other "
                  "work on the cores absolute tokens/s drop sharply, ratios are from one run. "
                  "JSON has best-of-reps and the memory ratio at equal shapes.")
    return results
