"""Benchmark: one HAX attention layer, ours (index patterns + sparse op) vs release dense masks.

Setup (paper 004, App. D.1): B = 1, H = 1, q/k dim 16, v dim 128, k = 64 (LSH 32 sign-bit h=8 +
KS 32), training mode (fresh hash planes, KS ranking loss included). "fwd" is the training
forward (autograd recording); "fwd+bwd" adds the backward of ``mean(out^2) + aux_loss``. The
dense side is :func:`recall_lab.attention.release_reference.release_sparse_attention` with the
same scorer weights, run in the same invocation of this benchmark.

Method: every (method, L, mode) case runs in a fresh subprocess (``python -m
recall_lab.bench.attention --case ...``) with ``THREADS`` intra-op threads (env
``RECALL_LAB_BENCH_THREADS``, default 1), after a tiny warm-up call of both methods. Time = best
of the repeats (3 after 1 warm-up for L <= 4K, else 2). Peak memory = the case's peak resident
set above the resident set just before it: the process resets its RSS high-water mark
(``/proc/self/clear_refs`` <- 5) after building inputs and reads ``VmHWM`` afterwards (Linux);
elsewhere it falls back to ``ru_maxrss`` minus the RSS before (an upper bound). glibc's mmap
threshold is fixed at 64 KiB in the subprocesses so freed blocks leave the resident set (both
methods alike). Growth exponents are least-squares slopes of log(time) and log(memory) on log(L).
Absolute CPU times depend on machine load; compare the ratios measured side by side.

A third method, ``seattn``, times one SE-Attn layer (seed 001) in the same setup: the ``seattn``
pattern at the same budget k = 64 (chunk 32 + top-4 blocks of 8, prefix scoring, key summaries
because d_v != d_qk) plus ``sparse_attention``; its fitted exponent is reported beside HAX's. Its
scoring step is O(L^2 d / S) (every query against every earlier block summary), so the exponent
climbs from ~1 towards 2 once scoring dominates the O(L (M + kS) d) attention.

Two more methods time the ``attamba`` chunk pattern (seed 003) plus ``sparse_attention`` in the
same setup (the key/value SSMs are not included: the pattern and the attention are what scale
with L): ``attamba-p8`` with a fixed chunk size P = 8 and 8 leading tokens, O(L (L/8 + 8)) and so
still quadratic (exponent -> 2 with 8x fewer keys than dense; run up to L = 4096), and
``attamba-sqrt`` with P = leading = ceil(sqrt(L)), O(L^1.5): the sub-quadratic setting the paper
points to (Sec. 4.1), whose fitted exponent should approach 1.5 (run up to L = 16384).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

LENGTHS = (1024, 4096, 8192, 16384, 65536)
QUICK_LENGTHS = (256, 1024, 2048)
DENSE_MAX = 16384
D_QK, D_V, K = 16, 128, 64
ATTAMBA_P = 8
METHODS = ("ours", "dense", "seattn", "attamba-p8", "attamba-sqrt")
# Largest L per attamba case: their index lists hold L (L/P + P) slots, and the sparse op keeps
# ~100 bytes per slot (measured 234 MB at L = 4096, P = 8), so P = 8 stops at 4096 and
# P = sqrt(L) at 16384 (each ~0.5 GB) to keep a shared machine's memory.
ATTAMBA_MAX = {"attamba-p8": 4096, "attamba-sqrt": 16384}
MODES = ("fwd", "fwd+bwd")
# One intra-op thread by default: on a shared, oversubscribed CPU, OpenMP barriers make
# multi-threaded timings of small ops erratic (measured: 10-30 ms per op at load ~9 on 2 cores).
THREADS = int(os.environ.get("RECALL_LAB_BENCH_THREADS", "1"))
# A fixed glibc mmap threshold returns freed large blocks to the OS at once, so the resident set
# tracks live memory (glibc otherwise raises the threshold to 32 MiB after the first free and
# keeps freed blocks resident, which would charge one case's garbage to its peak).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def _rss_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def run_case(method: str, length: int, mode: str, reps: int, warmup: int, threads: int) -> dict:
    """Runs in the subprocess: build inputs, then time and measure one case."""
    import torch

    from recall_lab.attention import make_pattern, sparse_attention
    from recall_lab.attention.release_reference import release_sparse_attention

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    q = torch.randn(1, 1, length, D_QK, requires_grad=True)
    k = torch.randn(1, 1, length, D_QK, requires_grad=True)
    v = torch.randn(1, 1, length, D_V, requires_grad=True)
    pattern = make_pattern("hax", K, dim=D_QK).train()
    se_pattern = make_pattern("seattn", K, summary="key").train()
    chunk = ATTAMBA_P if method == "attamba-p8" else math.isqrt(length - 1) + 1
    at_pattern = make_pattern("attamba", chunk, chunking="uniform").train()

    def step() -> None:
        if method == "seattn":
            idx, _ = se_pattern(q, k, v)
            out, aux = sparse_attention(q, k, v, idx), torch.zeros(())
        elif method.startswith("attamba"):
            idx, _ = at_pattern(q, k, v)
            out, aux = sparse_attention(q, k, v, idx), torch.zeros(())
        elif method == "ours":
            idx, aux = pattern(q, k)
            out = sparse_attention(q, k, v, idx)
        else:
            out, aux = release_sparse_attention(q, k, v, "hax", K, score_mlp=pattern.parts[1].mlp)
        if mode == "fwd+bwd":
            (out.square().mean() + aux).backward()
        del out, aux
        for t in (q, k, v):
            t.grad = None
        pattern.zero_grad(set_to_none=True)

    # Load lazily initialised kernels/libraries outside the measured window.
    small = [t.detach()[:, :, :64].clone().requires_grad_() for t in (q, k, v)]
    idx, aux = pattern(small[0], small[1])
    (sparse_attention(*small, idx).square().mean() + aux).backward()
    out, aux = release_sparse_attention(*small, "hax", K, score_mlp=pattern.parts[1].mlp)
    (out.square().mean() + aux).backward()
    idx, _ = se_pattern(*small)
    sparse_attention(*small, idx).square().mean().backward()
    idx, _ = at_pattern(*small)
    sparse_attention(*small, idx).square().mean().backward()
    pattern.zero_grad(set_to_none=True)
    del small, idx, aux, out

    base = _rss_kb("VmRSS")
    exact = _reset_peak() and base is not None
    if not exact:
        base = base or 0
    times = []
    for r in range(warmup + reps):
        t0 = time.perf_counter()
        step()
        if r >= warmup:
            times.append(time.perf_counter() - t0)
    if exact:
        peak_kb = (_rss_kb("VmHWM") or 0) - base
        how = "VmHWM after clear_refs minus VmRSS before"
    else:
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
        how = "ru_maxrss minus VmRSS before (upper bound)"
    return {"time_s": min(times), "peak_mb": max(peak_kb, 0) / 1024, "memory_method": how,
            "threads": torch.get_num_threads()}


def _spawn(method: str, length: int, mode: str, timeout: float) -> dict | None:
    reps, warmup = (3, 1) if length <= 4096 else (2, 0)
    cmd = [sys.executable, "-m", "recall_lab.bench.attention", "--case", method, str(length),
           mode, str(reps), str(warmup), str(THREADS)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, **MALLOC_ENV}, check=False)
    except subprocess.TimeoutExpired:
        return None
    if res.returncode != 0:
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])


def _slope(xs: list[float], ys: list[float]) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if y and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def run(console, quick: bool) -> dict:
    """Measure every case (subprocesses), print one table, return JSON-able results."""
    from rich.table import Table

    lengths = QUICK_LENGTHS if quick else LENGTHS
    dense_max = max(QUICK_LENGTHS) if quick else DENSE_MAX
    cases: dict[str, dict] = {}
    with console.status("attention bench") as status:
        for length in lengths:
            for mode in MODES:
                for method in METHODS:
                    if method == "dense" and length > dense_max:
                        continue
                    if length > ATTAMBA_MAX.get(method, length):
                        continue
                    status.update(f"attention bench: {method} {mode} L={length}")
                    cases[f"{method}|{mode}|{length}"] = _spawn(method, length, mode, 900)

    def get(method: str, mode: str, length: int, key: str) -> float | None:
        c = cases.get(f"{method}|{mode}|{length}")
        return None if c is None else c[key]

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or a <= 0 else b / a

    table = Table(title="HAX attention layer (B=1, H=1, d_qk=16, d_v=128, k=64): "
                        "ours vs release dense masks")
    for col in ("L", "mode", "ours ms", "dense ms", "speed-up", "ours MB", "dense MB", "mem ratio",
                "se-attn ms", "se-attn MB", "attamba P8 ms", "attamba P=sqrtL ms"):
        table.add_column(col, justify="right")
    rows = []
    for length in lengths:
        for mode in MODES:
            ot, dt = get("ours", mode, length, "time_s"), get("dense", mode, length, "time_s")
            om, dm = get("ours", mode, length, "peak_mb"), get("dense", mode, length, "peak_mb")
            st, sm = get("seattn", mode, length, "time_s"), get("seattn", mode, length, "peak_mb")
            row = {"L": length, "mode": mode, "ours_s": ot, "dense_s": dt,
                   "speedup": ratio(ot, dt), "ours_peak_mb": om, "dense_peak_mb": dm,
                   "memory_ratio": ratio(om, dm), "seattn_s": st, "seattn_peak_mb": sm}
            for m in ("attamba-p8", "attamba-sqrt"):
                row[f"{m}_s"] = get(m, mode, length, "time_s")
                row[f"{m}_peak_mb"] = get(m, mode, length, "peak_mb")
            rows.append(row)
            at8, atq = row["attamba-p8_s"], row["attamba-sqrt_s"]
            table.add_row(str(length), mode, _fmt(ot and ot * 1e3), _fmt(dt and dt * 1e3),
                          _fmt(row["speedup"]), _fmt(om), _fmt(dm), _fmt(row["memory_ratio"]),
                          _fmt(st and st * 1e3), _fmt(sm), _fmt(at8 and at8 * 1e3),
                          _fmt(atq and atq * 1e3))
    exponents = {}
    for method in METHODS:
        for mode in MODES:
            ls = [r["L"] for r in rows if r["mode"] == mode and r[f"{method}_s"] is not None]
            ts = [r[f"{method}_s"] for r in rows if r["mode"] == mode and r["L"] in ls]
            ms = [r[f"{method}_peak_mb"] for r in rows if r["mode"] == mode and r["L"] in ls]
            exponents[f"{method} {mode}"] = {"time": _slope(ls, ts), "memory": _slope(ls, ms)}
    console.print(table)
    exp_table = Table(title="fitted growth exponents (log-log slope over L)")
    for col in ("case", "time", "memory"):
        exp_table.add_column(col, justify="right")
    for name, e in exponents.items():
        exp_table.add_row(name, _fmt(e["time"], ".2f"), _fmt(e["memory"], ".2f"))
    console.print(exp_table)
    method_note = next((c["memory_method"] for c in cases.values() if c), None)
    return {"setup": {"B": 1, "H": 1, "d_qk": D_QK, "d_v": D_V, "k": K, "pattern": "hax",
                      "training_mode": True, "dense_max_L": dense_max, "threads": THREADS},
            "memory_method": method_note, "rows": rows, "exponents": exponents,
            "failed_cases": [name for name, c in cases.items() if c is None]}


def _main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs=6,
                    metavar=("METHOD", "L", "MODE", "REPS", "WARMUP", "THREADS"))
    args = ap.parse_args(argv)
    if args.case:
        method, length, mode, reps, warmup, threads = args.case
        print(json.dumps(run_case(method, int(length), mode, int(reps), int(warmup),
                                  int(threads))))
    else:
        from rich.console import Console

        print(json.dumps(run(Console(), quick=True), indent=2))


if __name__ == "__main__":
    _main(sys.argv[1:])
