"""Benchmark: one HAX attention layer, ours (index patterns + sparse op) vs release dense masks.

Setup (HAX paper, App. D.1): B = 1, H = 1, q/k dim 16, v dim 128, k = 64 (LSH 32 sign-bit h=8 +
KS 32), training mode (fresh hash planes, KS ranking loss included). "fwd" is the training
forward (autograd recording); "fwd+bwd" adds the backward of ``mean(out^2) + aux_loss``. The
dense side is :func:`recall_lab.attention.release_reference.release_sparse_attention` with the
same scorer weights, run in the same invocation of this benchmark. "ours" runs the sparse op's
default CPU backend (``native`` where the C kernels built, recall_lab/native); "ours-csr" is the
same layer on the ``csr`` backend (the default before the native kernel, and without a compiler),
in the same run.

The release's own training shape (B = 64, L = 1057) is one more row of the HAX-vs-dense table.

Method: every (method, L, mode, B) case runs in a fresh subprocess (``python -m
recall_lab.bench.attention --case ...``) with ``THREADS`` intra-op threads (env
``RECALL_LAB_BENCH_THREADS``, default 1), after a tiny warm-up call of every method and one
warm-up step at the case's own size (none for dense at L >= 16K, 55 s a step). Times: every
repetition (3, or 2 from L = 16K), summarised by ``record.summarise`` (median, p20, p80); ratios
use medians. Peak memory = the timed steps' peak resident set above the resident set just before
them: the process resets its RSS high-water mark (``/proc/self/clear_refs`` <- 5) after the
warm-up and reads ``VmHWM`` afterwards (Linux); elsewhere it falls back to ``ru_maxrss`` minus
the RSS before (an upper bound). glibc's mmap
threshold is fixed at 64 KiB in the subprocesses so freed blocks leave the resident set (both
methods alike). Growth exponents are least-squares slopes of log(time) and log(memory) on log(L).
Absolute CPU times depend on machine load; compare the ratios measured side by side.

A third method, ``seattn``, times one SE-Attn layer (Expansion Span) in the same setup: the
``seattn`` pattern at the same budget k = 64 (chunk 32 + top-4 blocks of 8, prefix scoring, key
summaries because d_v != d_qk) plus ``sparse_attention``; its fitted exponent is reported beside
HAX's. Its scoring step is O(L^2 d / S) (every query against every earlier block summary), so the
exponent climbs from ~1 towards 2 once scoring dominates the O(L (M + kS) d) attention.

Two more methods time the ``attamba`` chunk pattern (Attamba) plus ``sparse_attention`` in the
same setup (the key/value SSMs are not included: the pattern and the attention are what scale
with L): ``attamba-p8`` with a fixed chunk size P = 8 and 8 leading tokens, O(L (L/8 + 8)) and so
still quadratic (exponent -> 2 with 8x fewer keys than dense; run up to L = 4096), and
``attamba-sqrt`` with P = leading = ceil(sqrt(L)), O(L^1.5): the sub-quadratic setting the paper
points to (Sec. 4.1), whose fitted exponent should approach 1.5 (run up to L = 16384).

FlexAttention peer (``torch.nn.attention.flex_attention``) for the fixed patterns ``sw`` (64
keys), ``d`` (64 keys, gap 32: the paper's ``max_len`` 2048) and ``attamba`` (P = leading =
ceil(sqrt(L))): its mask is read from the very index lists our pattern functions return
(``flex_block_mask``: the listed keys scattered into an ``L x L`` bool table that ``mask_mod``
looks up; no second pattern definition), and ``flex_attention`` runs under ``torch.compile``
(inductor's C++ kernel; eager FlexAttention materialises the full score matrix). FlexAttention
has no CPU backward in torch 2.13, so these cases time the inference forward (no autograd) of
both: ours = the pattern's indices + ``sparse_attention``; flex = the compiled kernel with the
block mask built once per length outside the timed steps (its ``L x L`` table, L^2 bytes, is
resident before the peak is measured and so not counted in flex's peak).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys

from recall_lab.bench.record import summarise, time_reps

PEERS = ("torch",)  # FlexAttention ships with torch
# Env RECALL_LAB_BENCH_LENGTHS (e.g. "1024,8192"), RECALL_LAB_BENCH_DENSE_MAX and
# RECALL_LAB_BENCH_METHODS (e.g. "ours,dense") narrow a run on a loaded machine (dense at L = 16K
# costs minutes per step there).
LENGTHS = tuple(int(x) for x in os.environ.get("RECALL_LAB_BENCH_LENGTHS",
                                                "1024,4096,8192,16384,65536").split(","))
QUICK_LENGTHS = (256, 1024, 2048)
TRAIN_SHAPE = (64, 1057)  # the release's training batch x length (joint-recall paper App. D.1)
QUICK_TRAIN_SHAPE = (8, 1057)
FIXED = ("sw", "d", "attamba")  # patterns with a FlexAttention peer
FLEX_LENGTHS = tuple(x for x in LENGTHS if 1024 <= x <= 16384)
QUICK_FLEX_LENGTHS = (1024, 2048)
DENSE_MAX = int(os.environ.get("RECALL_LAB_BENCH_DENSE_MAX", "16384"))
D_QK, D_V, K = 16, 128, 64
ATTAMBA_P = 8
METHODS = tuple(m for m in ("ours", "ours-csr", "dense", "seattn", "attamba-p8", "attamba-sqrt")
                if m in os.environ.get("RECALL_LAB_BENCH_METHODS", m).split(","))
# Largest L per attamba case: their index lists hold L (L/P + P) slots, and the sparse op keeps
# ~100 bytes per slot (measured 234 MB at L = 4096, P = 8), so P = 8 stops at 4096 and
# P = sqrt(L) at 16384 (each ~0.5 GB) to keep a shared machine's memory.
ATTAMBA_MAX = {"attamba-p8": 4096, "attamba-sqrt": 16384}
MODES = ("fwd", "fwd+bwd")  # "infer" (no autograd) for the FlexAttention cases
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


def _fixed_pattern(name: str, length: int):
    from recall_lab.attention import make_pattern

    if name == "attamba":
        return make_pattern("attamba", math.isqrt(length - 1) + 1, chunking="uniform")
    return make_pattern(name, K, **({"max_len": 2048} if name == "d" else {}))


def run_case(method: str, length: int, mode: str, reps: int, warmup: int, threads: int,
             batch: int = 1) -> dict:
    """Runs in the subprocess: build inputs, warm up, then time and measure one case.

    ``method``: ours | dense | seattn | attamba-p8 | attamba-sqrt (HAX-layer setup), or
    ``<fixed>-ours`` / ``<fixed>-flex`` with fixed in :data:`FIXED` (mode ``infer``)."""
    import torch

    from recall_lab.attention import make_pattern, sparse_attention
    from recall_lab.attention.release_reference import release_sparse_attention

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    grad = mode != "infer"
    q = torch.randn(batch, 1, length, D_QK, requires_grad=grad)
    k = torch.randn(batch, 1, length, D_QK, requires_grad=grad)
    v = torch.randn(batch, 1, length, D_V, requires_grad=grad)
    pattern = make_pattern("hax", K, dim=D_QK).train()
    se_pattern = make_pattern("seattn", K, summary="key").train()
    chunk = ATTAMBA_P if method == "attamba-p8" else math.isqrt(length - 1) + 1
    at_pattern = make_pattern("attamba", chunk, chunking="uniform").train()
    fixed, _, peer = method.partition("-")
    if peer in ("ours", "flex") and fixed in FIXED:
        return _run_fixed(fixed, peer, q, k, v, reps, warmup)

    def step() -> None:
        if method == "seattn":
            idx, _ = se_pattern(q, k, v)
            out, aux = sparse_attention(q, k, v, idx), torch.zeros(())
        elif method.startswith("attamba"):
            idx, _ = at_pattern(q, k, v)
            out, aux = sparse_attention(q, k, v, idx), torch.zeros(())
        elif method in ("ours", "ours-csr"):
            idx, aux = pattern(q, k)
            out = sparse_attention(q, k, v, idx, backend="csr" if method == "ours-csr" else "auto")
        else:
            out, aux = release_sparse_attention(q, k, v, "hax", K, score_mlp=pattern.parts[1].mlp)
        if mode == "fwd+bwd":
            (out.square().mean() + aux).backward()
        del out, aux
        for t in (q, k, v):
            t.grad = None
        pattern.zero_grad(set_to_none=True)

    # Load lazily initialised kernels/libraries outside the measured window.
    small = [t.detach()[:1, :, :64].clone().requires_grad_() for t in (q, k, v)]
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
    return _measure(step, reps, warmup)


def _run_fixed(name: str, peer: str, q, k, v, reps: int, warmup: int) -> dict:
    """Inference forward of a fixed pattern: our indices + op, or compiled FlexAttention."""
    import torch

    from recall_lab.attention import sparse_attention
    from recall_lab.attention.flex import flex_block_mask, flex_sparse_attention

    length = q.shape[-2]
    pattern = _fixed_pattern(name, length).eval()
    extra = {}
    if peer == "flex":
        with torch.no_grad():
            block_mask = flex_block_mask(pattern(q, k)[0], length)

        def step() -> None:
            with torch.no_grad():
                flex_sparse_attention(q, k, v, block_mask)

        extra = {"compiled": True, "block_sparsity": block_mask.sparsity()}
    else:
        def step() -> None:
            with torch.no_grad():
                sparse_attention(q, k, v, pattern(q, k)[0])

    return {**_measure(step, reps, max(1, warmup)), **extra}


def _measure(step, reps: int, warmup: int) -> dict:
    import torch

    for _ in range(warmup):  # one-off costs (compilation, first allocations) before the peak
        step()
    base = _rss_kb("VmRSS")
    exact = _reset_peak() and base is not None
    if not exact:
        base = base or 0
    times = time_reps(step, reps)
    if exact:
        peak_kb = (_rss_kb("VmHWM") or 0) - base
        how = "VmHWM after clear_refs minus VmRSS before"
    else:
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
        how = "ru_maxrss minus VmRSS before (upper bound)"
    return {"times": times, "peak_mb": max(peak_kb, 0) / 1024, "memory_method": how,
            "threads": torch.get_num_threads(), "loadavg_after": os.getloadavg()[0]}


def _spawn(method: str, length: int, mode: str, timeout: float, batch: int = 1) -> dict | None:
    reps = 3 if length <= 8192 else 2
    warmup = 0 if method == "dense" and length >= 16384 else 1
    cmd = [sys.executable, "-m", "recall_lab.bench.attention", "--case", method, str(length),
           mode, str(reps), str(warmup), str(THREADS), str(batch)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, **MALLOC_ENV}, check=False)
    except subprocess.TimeoutExpired:
        return None
    if res.returncode != 0:
        return None
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["time_s"] = summarise(out.pop("times"))
    return out


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


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or a <= 0 else b / a


def run(console, quick: bool) -> dict:
    """Measure every case (subprocesses), print the tables, return JSON-able results."""
    from rich.table import Table

    from recall_lab.attention import default_backend

    lengths = QUICK_LENGTHS if quick else LENGTHS
    dense_max = max(QUICK_LENGTHS) if quick else DENSE_MAX
    train_b, train_l = QUICK_TRAIN_SHAPE if quick else TRAIN_SHAPE
    flex_lengths = QUICK_FLEX_LENGTHS if quick else FLEX_LENGTHS
    plan = []
    for length in lengths:
        for mode in MODES:
            for method in METHODS:
                if method == "dense" and length > dense_max:
                    continue
                if length > ATTAMBA_MAX.get(method, length):
                    continue
                plan.append((method, length, mode, 1))
    plan += [(m, train_l, mode, train_b) for mode in MODES for m in ("ours", "ours-csr", "dense")
             if m in METHODS]
    plan += [(f"{p}-{peer}", length, "infer", 1) for length in flex_lengths for p in FIXED
             for peer in ("ours", "flex")]
    cases: dict[str, dict | None] = {}
    with console.status("attention bench") as status:
        for method, length, mode, batch in plan:
            status.update(f"attention bench: {method} {mode} B={batch} L={length}")
            cases[f"{method}|{mode}|{length}|{batch}"] = _spawn(method, length, mode, 900, batch)

    def get(method: str, mode: str, length: int, key: str, batch: int = 1) -> float | None:
        c = cases.get(f"{method}|{mode}|{length}|{batch}")
        if c is None:
            return None
        return c["time_s"]["median"] if key == "time_s" else c[key]

    def pair(a: str, b: str, mode: str, length: int, batch: int = 1):
        """((a's time, b's time), (a's peak, b's peak)) of one case, side by side."""
        return tuple(tuple(get(m, mode, length, key, batch) for m in (a, b))
                     for key in ("time_s", "peak_mb"))

    def table_of(title: str, *cols: str) -> Table:
        t = Table(title=title)
        for col in cols:
            t.add_column(col, justify="right")
        return t

    table = table_of("HAX attention layer (H=1, d_qk=16, d_v=128, k=64, training mode): ours "
                     f"(sparse op backend {default_backend('cpu')}) vs release dense masks; "
                     "medians", "B x L", "mode", "ours ms", "csr ms", "dense ms", "speed-up",
                     "ours MB", "dense MB", "mem ratio")
    rows = []
    shapes = [(1, length) for length in lengths] + [(train_b, train_l)]
    for batch, length in shapes:
        for mode in MODES:
            (ot, dt), (om, dm) = pair("ours", "dense", mode, length, batch)
            row = {"B": batch, "L": length, "mode": mode, "ours_s": ot, "dense_s": dt,
                   "speedup": _ratio(ot, dt), "ours_peak_mb": om, "dense_peak_mb": dm,
                   "memory_ratio": _ratio(om, dm)}
            for m in ("ours-csr", "seattn", "attamba-p8", "attamba-sqrt"):
                row[f"{m}_s"] = get(m, mode, length, "time_s", batch)
                row[f"{m}_peak_mb"] = get(m, mode, length, "peak_mb", batch)
            rows.append(row)
            ct = row["ours-csr_s"]
            table.add_row(f"{batch} x {length}", mode, _fmt(ot and ot * 1e3),
                          _fmt(ct and ct * 1e3), _fmt(dt and dt * 1e3), _fmt(row["speedup"]),
                          _fmt(om), _fmt(dm), _fmt(row["memory_ratio"]))
    console.print(table)
    other = table_of("other patterns in the same setup (B=1), medians", "L", "mode",
                     "se-attn ms", "se-attn MB", "attamba P8 ms", "attamba P8 MB",
                     "attamba P=sqrtL ms", "attamba P=sqrtL MB")
    for r in rows:
        if r["B"] != 1:
            continue
        vals = [r["seattn_s"], r["seattn_peak_mb"], r["attamba-p8_s"], r["attamba-p8_peak_mb"],
                r["attamba-sqrt_s"], r["attamba-sqrt_peak_mb"]]
        other.add_row(str(r["L"]), r["mode"], *(
            _fmt(x and x * 1e3) if i % 2 == 0 else _fmt(x) for i, x in enumerate(vals)))
    console.print(other)
    exponents = {}
    for method in METHODS:
        for mode in MODES:
            sel = [r for r in rows if r["B"] == 1 and r["mode"] == mode
                   and r[f"{method}_s"] is not None]
            exponents[f"{method} {mode}"] = {
                "time": _slope([r["L"] for r in sel], [r[f"{method}_s"] for r in sel]),
                "memory": _slope([r["L"] for r in sel], [r[f"{method}_peak_mb"] for r in sel])}
    exp_table = table_of("fitted growth exponents (log-log slope over L, B=1)", "case", "time",
                         "memory")
    for name, e in exponents.items():
        exp_table.add_row(name, _fmt(e["time"], ".2f"), _fmt(e["memory"], ".2f"))
    console.print(exp_table)
    flex_table = table_of("fixed patterns, inference forward (no autograd; FlexAttention has no "
                          "CPU backward): ours vs torch.compile'd FlexAttention, medians",
                          "pattern", "L", "ours ms", "flex ms", "flex / ours", "ours MB",
                          "flex MB", "flex tiles kept")
    flex_rows = []
    for p in FIXED:
        for length in flex_lengths:
            (ot, ft), (om, fm) = pair(f"{p}-ours", f"{p}-flex", "infer", length)
            sp = get(f"{p}-flex", "infer", length, "block_sparsity")
            row = {"pattern": p, "L": length, "ours_s": ot, "flex_s": ft,
                   "flex_over_ours": _ratio(ot, ft), "ours_peak_mb": om, "flex_peak_mb": fm,
                   "flex_block_sparsity_pct": sp}
            flex_rows.append(row)
            flex_table.add_row(p, str(length), _fmt(ot and ot * 1e3), _fmt(ft and ft * 1e3),
                               _fmt(row["flex_over_ours"], ".2f"), _fmt(om), _fmt(fm),
                               "-" if sp is None else f"{100 - sp:.1f}%")
    console.print(flex_table)
    method_note = next((c["memory_method"] for c in cases.values() if c), None)
    return {"setup": {"H": 1, "d_qk": D_QK, "d_v": D_V, "k": K, "pattern": "hax",
                      "sparse_backend": default_backend("cpu"),
                      "training_mode": True, "dense_max_L": dense_max, "threads": THREADS,
                      "train_shape": [train_b, train_l], "flex": "torch.compile(flex_attention)"},
            "memory_method": method_note, "rows": rows, "exponents": exponents,
            "flex_rows": flex_rows, "cases": cases,
            "failed_cases": [name for name, c in cases.items() if c is None]}


def _main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs="+",
                    metavar="METHOD L MODE REPS WARMUP THREADS [BATCH]")
    args = ap.parse_args(argv)
    if args.case:
        method, length, mode, reps, warmup, threads, *batch = args.case
        print(json.dumps(run_case(method, int(length), mode, int(reps), int(warmup),
                                  int(threads), int(batch[0]) if batch else 1)))
    else:
        from rich.console import Console

        print(json.dumps(run(Console(), quick=True), indent=2))


if __name__ == "__main__":
    _main(sys.argv[1:])
