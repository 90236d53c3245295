"""`recall-lab bench attention|ssm --device cuda`: our GPU paths beside the GPU peers a user
would pick, in one process on one device (the CPU benches, attention.py and ssm.py, are untouched
by `--device`; `bench train --device cuda` runs train.py's cases on the GPU).

attention: one HAX layer's sparse op (H = 1, d_qk 16, d_v 128, k = 64 = LSH 32 + KS 32, indices
from the pattern in eval mode, computed once outside the timed steps), forward + backward of
``mean(out^2)``, at the release's batch (64 x 1058) and at long single rows (8K-64K):
* ``ours``: ``sparse_attention`` on its CUDA default (Triton, after its self-check);
* ``ours-torch``: the same op on the torch gather backend (the reference);
* ``flex``: ``torch.compile(flex_attention)`` with its backward, its block mask read from the
  same indices (recall_lab/attention/flex.py; its L x L table limits it to L <= 16384);
* ``sdpa``: dense causal ``scaled_dot_product_attention`` over all earlier keys (flash/efficient
  kernels): the cost of not being sparse, a different result by design.
Before timing, ``ours`` and ``flex`` are checked against ``ours-torch`` and their max relative
error is a row field (FLA's benchmarks do the same): a fast wrong kernel is not a result.

ssm: 2 pre-norm residual mixer blocks (ssm.py's sizes), forward + backward at 64 x 1058:
``ours`` (the dispatch: mamba-ssm's kernels where they load and pass their self-check),
``ours-torch`` (the torch implementation) and ``mamba-ssm`` (its own ``Mamba`` / ``Mamba2``
modules, fused in-projection included), when installed.

Times: CUDA events around each step after warm-up (`record.summarise`: median, p20, p80);
memory: peak allocated bytes above those allocated before the timed steps.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from recall_lab.bench.record import summarise

ATTN_SHAPES = [(64, 1058), (1, 8192), (1, 16384), (1, 65536)]
QUICK_ATTN_SHAPES = [(8, 1058), (1, 8192)]
FLEX_MAX_L = 16384
SSM_SHAPES = [(64, 1058)]
QUICK_SSM_SHAPES = [(16, 256)]
D_QK, D_V, K = 16, 128, 64


def time_cuda(step: Callable[[], Any], reps: int, warmup: int = 2) -> dict:
    """Per-step times (CUDA events) summarised, and the peak memory of the timed steps (MiB)."""
    import torch

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return {"time_s": summarise(times),
            "peak_mb": (torch.cuda.max_memory_allocated() - base) / 2**20}


def _rel_err(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _attention_case(method: str, q, k, v, idx, block_mask) -> Callable[[], list]:
    """A step of `method`: forward + backward, returning [out, dq, dk, dv]."""
    import torch.nn.functional as F

    from recall_lab.attention import sparse_attention
    from recall_lab.attention.flex import flex_sparse_attention

    def step() -> list:
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        if method == "ours":
            out = sparse_attention(*leaves, idx)
        elif method == "ours-torch":
            out = sparse_attention(*leaves, idx, backend="torch")
        elif method == "flex":
            out = flex_sparse_attention(*leaves, block_mask)
        else:
            out = F.scaled_dot_product_attention(*leaves, is_causal=True)
        out.square().mean().backward()
        return [out] + [t.grad for t in leaves]

    return step


def attention(console: Any, quick: bool, device: str) -> dict:
    import torch
    from rich.table import Table

    from recall_lab.attention import default_backend, make_pattern
    from recall_lab.attention.flex import flex_block_mask

    rows = []
    for batch, length in QUICK_ATTN_SHAPES if quick else ATTN_SHAPES:
        gen = torch.Generator(device=device).manual_seed(0)
        q, k = (torch.randn(batch, 1, length, D_QK, device=device, generator=gen)
                for _ in range(2))
        v = torch.randn(batch, 1, length, D_V, device=device, generator=gen)
        with torch.no_grad():
            idx, _ = make_pattern("hax", K, dim=D_QK).to(device).eval()(q, k)
        block_mask = flex_block_mask(idx, length) if length <= FLEX_MAX_L else None
        ref = _attention_case("ours-torch", q, k, v, idx, None)()
        for method in ("ours", "ours-torch", "flex", "sdpa"):
            row: dict[str, Any] = {"B": batch, "L": length, "method": method}
            if method == "flex" and block_mask is None:
                row["skipped"] = f"L > {FLEX_MAX_L} (flex's L x L mask table)"
                rows.append(row)
                continue
            step = _attention_case(method, q, k, v, idx, block_mask)
            try:
                if method in ("ours", "flex"):
                    row["max_rel_err"] = max(_rel_err(a, b) for a, b in zip(step(), ref,
                                                                             strict=True))
                row.update(time_cuda(step, reps=10 if length <= 16384 else 3))
            except Exception as exc:  # e.g. out of memory: the row says so, the bench goes on
                row["error"] = (f"{type(exc).__name__}: {exc}".splitlines() or ["?"])[0][:200]
                torch.cuda.empty_cache()
            rows.append(row)
    table = Table(title=f"sparse attention fwd+bwd on {torch.cuda.get_device_name(device)} "
                        f"(HAX k={K}, d_qk {D_QK}, d_v {D_V}; ours = {default_backend(device)})")
    for col in ("B x L", "method", "ms", "p20-p80", "peak MB", "max rel err", "vs ours"):
        table.add_column(col, justify="left" if col == "method" else "right")
    ours = {(r["B"], r["L"]): r["time_s"]["median"] for r in rows
            if r["method"] == "ours" and "time_s" in r}
    for r in rows:
        t = r.get("time_s")
        base = ours.get((r["B"], r["L"]))
        if t and base:
            r["time_over_ours"] = t["median"] / base
        table.add_row(f"{r['B']} x {r['L']}", r["method"],
                      f"{t['median'] * 1e3:.2f}" if t else r.get("skipped") or r.get("error"),
                      f"{t['p20'] * 1e3:.2f}-{t['p80'] * 1e3:.2f}" if t else "",
                      f"{r['peak_mb']:.0f}" if t else "",
                      f"{r['max_rel_err']:.1e}" if "max_rel_err" in r else "-",
                      f"{r['time_over_ours']:.2f}x" if "time_over_ours" in r else "-")
    console.print(table)
    return {"device": torch.cuda.get_device_name(device), "rows": rows,
            "setup": {"H": 1, "d_qk": D_QK, "d_v": D_V, "k": K, "pattern": "hax (eval)",
                      "ours_backend": default_backend(device), "mode": "fwd+bwd"}}


def _ssm_models(kind: str, impl: str, device: str):
    import torch
    from torch import nn

    from recall_lab.bench.ssm import CONFIGS

    cfg = CONFIGS[kind]
    torch.manual_seed(0)
    if impl == "mamba-ssm":
        from mamba_ssm import Mamba, Mamba2

        def mixer():
            if kind == "mamba":
                return Mamba(cfg["d_model"], d_state=cfg["d_state"], expand=2)
            return Mamba2(cfg["d_model"], d_state=cfg["d_state"], headdim=cfg["headdim"],
                          chunk_size=cfg["chunk_size"], expand=2)
    else:
        from recall_lab.ssm import Mamba2Mixer, MambaMixer

        cls = MambaMixer if kind == "mamba" else Mamba2Mixer
        scan_impl = "torch" if impl == "ours-torch" else "auto"

        def mixer():
            return cls(**cfg, scan_impl=scan_impl)
    blocks = nn.ModuleList([mixer() for _ in range(2)]).to(device)
    norms = nn.ModuleList([nn.RMSNorm(cfg["d_model"]) for _ in range(2)]).to(device)
    return blocks, norms


def ssm(console: Any, quick: bool, device: str) -> dict:
    import torch
    from rich.table import Table

    from recall_lab.bench.ssm import CONFIGS
    from recall_lab.ssm import scan_backend

    rows = []
    for kind in ("mamba", "mamba2"):
        for b, length in QUICK_SSM_SHAPES if quick else SSM_SHAPES:
            x = torch.randn(b, length, CONFIGS[kind]["d_model"], device=device)
            for impl in ("ours", "ours-torch", "mamba-ssm"):
                row: dict[str, Any] = {"mixer": kind, "B": b, "L": length, "implementation": impl}
                if impl == "mamba-ssm" and importlib.util.find_spec("mamba_ssm") is None:
                    row["missing"] = "mamba-ssm not installed (pip install -e '.[cuda]')"
                    rows.append(row)
                    continue
                try:
                    blocks, norms = _ssm_models(kind, impl, device)

                    def step(blocks=blocks, norms=norms, x=x):
                        h = x
                        for norm, mix in zip(norms, blocks, strict=True):
                            h = h + mix(norm(h))
                        h.pow(2).mean().backward()
                        for p in blocks.parameters():
                            p.grad = None

                    row.update(time_cuda(step, reps=10))
                    row["tokens_per_s"] = b * length / row["time_s"]["median"]
                    if impl == "ours":
                        op = "selective_scan" if kind == "mamba" else "ssd"
                        row["backend"] = scan_backend(device, op)
                except Exception as exc:
                    row["error"] = (f"{type(exc).__name__}: {exc}".splitlines() or ["?"])[0][:200]
                rows.append(row)
    table = Table(title=f"SSM 2-layer fwd+bwd on {torch.cuda.get_device_name(device)}")
    for col in ("mixer", "B x L", "implementation", "tokens/s", "peak MB"):
        table.add_column(col, justify="right" if col in ("tokens/s", "peak MB") else "left")
    for r in rows:
        label = r["implementation"] + (f" ({r['backend']})" if "backend" in r else "")
        if "tokens_per_s" in r:
            cells = [f"{r['tokens_per_s'] / 1e3:.0f}k", f"{r['peak_mb']:.0f}"]
        else:
            cells = [r.get("missing") or f"error: {r.get('error')}", ""]
        table.add_row(r["mixer"], f"{r['B']}x{r['L']}", label, *cells)
    console.print(table)
    return {"device": torch.cuda.get_device_name(device), "rows": rows,
            "configs": {k: CONFIGS[k] for k in ("mamba", "mamba2")}}


def run(name: str, console: Any, quick: bool, device: str) -> dict:
    """`name` ("attention", "ssm", "train") on the CUDA device `device`."""
    if name == "train":  # its cases run in subprocesses that take the GPU when there is one
        from recall_lab.bench import train

        return train.run(console, quick, device="cuda")
    return {"attention": attention, "ssm": ssm}[name](console, quick, device)
