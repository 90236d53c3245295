"""Benchmark: SSM fast paths vs. the plain recurrence and HF transformers' torch Mamba/Mamba2.

Model: 2 pre-norm residual blocks x + mixer(rmsnorm(x)) on random [B, L, 64] inputs (no
embedding), loss = mean(y^2), forward + backward. Mamba: d_model 64, d_inner 128, state 16, conv 4,
dt rank 4. Mamba2: 8 heads of headdim 16, state 32, one group, chunk 64. "ours" is the mixer's
default path on the device (`scan_backend`: on the CPU the native C cores when they compiled; the
SSD core is the recurrence, so the chunk size does not change it); "ours, torch path" is the same
mixer with the torch implementation (what ran before the native cores, and what runs without a C
compiler; its chunk size matters); "recurrence" is the same mixer with the plain recurrence
differentiated by autograd.

Peers (the `bench` extra, `pip install -e .[bench]`): HF transformers' `MambaModel` /
`Mamba2Model` with the same sizes and 2 layers, fed `inputs_embeds` (their blocks are the same
pre-norm residual blocks, plus a final RMSNorm), in training mode, so they take their torch paths:
`mamba_selective_scan`'s sequential loop for Mamba (or mambapy's parallel scan with
`use_mambapy=True`, when mambapy is installed) and the chunked `torch_forward` SSD for Mamba2.
mamba-ssm and causal-conv1d are hidden from the peer's process (HF would otherwise pick their
CUDA kernels where they import), and the case checks that HF's scan functions resolved to its
torch fallbacks. Without transformers (or mambapy) the row says the peer is missing.

Each case runs in its own subprocess with `THREADS` intra-op threads (env
RECALL_LAB_BENCH_THREADS, default 2) and `retain_freed_memory()`
(glibc keeps freed blocks instead of unmapping them, see recall_lab/ssm/cpu_malloc.py) for every
implementation; ours is also timed without it ("default malloc"). Times: one warm-up step, then
`reps` timed steps, summarised by `record.summarise` (median, p20, p80); tokens/s from the
median. Peak memory is the rise of the process's resident-set high-water mark (ru_maxrss) from
after model and input creation to after the timed steps. At B=64, L=1058 the recurrence and HF's
Mamba paths run at L=128 (the autograd recurrence and HF's sequential loop keep every step's
tensors: ~7 GB at L=1058); their cost per token does not depend on L. The machine's cores may be
shared with other work (each case records the 1-minute load average before and after):
absolute figures are upper bounds, ratios are from one run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import types
from typing import Any

from recall_lab.bench.record import summarise

PEERS = ("transformers", "mambapy")
THREADS = int(os.environ.get("RECALL_LAB_BENCH_THREADS", "2"))
CONFIGS = {
    "mamba": dict(d_model=64, d_inner=128, d_state=16),
    "mamba2": dict(d_model=64, d_inner=128, d_state=32, headdim=16, chunk_size=64),
    # same model, smaller SSD chunk (measured faster on CPU); HF's Mamba2 with chunk 32 beside it
    "mamba2-chunk32": dict(d_model=64, d_inner=128, d_state=32, headdim=16, chunk_size=32),
}
SHAPES = [(16, 256), (64, 1058)]
SHORT_LEN = {1058: 128}  # length for the implementations that keep every step (see docstring)
# implementations per mixer: (name, label, runs at SHORT_LEN on long shapes)
IMPLS = {
    "mamba": [("ours", "ours", False), ("ours-malloc", "ours, default malloc", False),
              ("ours-torch", "ours, torch path (no native core)", False),
              ("ref", "autograd recurrence", True), ("hf", "HF transformers (torch loop)", True),
              ("hf-mambapy", "HF transformers + mambapy", True)],
    "mamba2": [("ours", "ours", False), ("ours-malloc", "ours, default malloc", False),
               ("ours-torch", "ours, torch path (no native core)", False),
               ("ref", "autograd recurrence", True), ("hf", "HF transformers (torch SSD)", False)],
    "mamba2-chunk32": [("ours", "ours", False), ("ours-malloc", "ours, default malloc", False),
                       ("ours-torch", "ours, torch path (no native core)", False),
                       ("hf", "HF transformers (torch SSD)", False)],
}


def _missing(impl: str) -> str | None:
    pkgs = ["transformers"] if impl.startswith("hf") else []
    if impl == "hf-mambapy":
        pkgs.append("mambapy")
    for pkg in pkgs:
        if importlib.util.find_spec(pkg) is None:
            return f"peer missing: {pkg} not installed (pip install -e .[bench])"
    return None


def hf_path(fn: Any) -> str:
    """"torch" or "kernel": which implementation HF's dispatch wrapper (transformers >= 5) chose
    for `fn`, read from the wrapper's closure (`implementation` is `torch_function` on the torch
    path); "unknown" when the closure is not HF's. The `kernels` package wraps the function once
    more in an nn.Module (`Func`) whose `forward` holds it as `func`: unwrapped here."""
    import inspect

    for _ in range(4):  # Func module -> its forward -> HF's wrapper
        if isinstance(fn, types.FunctionType):
            free = inspect.getclosurevars(fn).nonlocals
            if "implementation" in free and "torch_function" in free:
                return "torch" if free["implementation"] is free["torch_function"] else "kernel"
            fn = free.get("func", getattr(fn, "__wrapped__", None))
        else:
            fn = getattr(type(fn), "forward", None)
        if fn is None:
            break
    return "unknown"


def _hf_blocks(kind: str, impl: str, cfg: dict):
    """HF's 2-layer model with our sizes, its fused-kernel imports hidden (torch paths only)."""
    for mod in ("mamba_ssm", "causal_conv1d"):
        sys.modules[mod] = None  # `import mamba_ssm` now raises ImportError: HF falls back
    import transformers
    from transformers import Mamba2Config, Mamba2Model, MambaConfig, MambaModel

    common = dict(vocab_size=16, hidden_size=cfg["d_model"], num_hidden_layers=2,
                  state_size=cfg["d_state"], expand=cfg["d_inner"] // cfg["d_model"],
                  conv_kernel=4, use_bias=False, use_conv_bias=True, use_cache=False)
    if kind == "mamba":
        from transformers.models.mamba import modeling_mamba as mod

        model = MambaModel(MambaConfig(**common, time_step_rank=-(-cfg["d_model"] // 16),
                                       use_mambapy=impl == "hf-mambapy"))
        names = ["mamba_selective_scan", "mamba_inner_fn", "causal_conv1d_fn"]
    else:
        from transformers.models.mamba2 import modeling_mamba2 as mod

        model = Mamba2Model(Mamba2Config(**common, num_heads=cfg["d_inner"] // cfg["headdim"],
                                         head_dim=cfg["headdim"], n_groups=1,
                                         chunk_size=cfg["chunk_size"]))
        names = ["mamba2_chunk_scan", "mamba2_split_conv1d_scan_combined", "causal_conv1d_fn"]
    # by the name HF's module gives each: with the `kernels` package installed, transformers 5.x
    # hands out a `Func` module there, which has no __name__
    paths = {name: hf_path(getattr(mod, name)) for name in names}
    if "kernel" in paths.values():
        raise RuntimeError(f"HF chose a non-torch kernel: {paths}")
    model.train()
    return model, {"transformers": transformers.__version__, "hf_paths": paths}


def _case(kind: str, impl: str, b: int, length: int, reps: int) -> dict:
    """One subprocess case: build, warm up, time `reps` fwd+bwd steps (the child's entry)."""
    import resource
    import time

    import torch

    torch.set_num_threads(THREADS)
    from torch import nn

    from recall_lab.ssm import Mamba2Mixer, MambaMixer, RMSNorm, scan_backend
    from recall_lab.ssm.cpu_malloc import retain_freed_memory

    retained = retain_freed_memory() if impl != "ours-malloc" else False
    cfg = CONFIGS[kind]
    family = "mamba" if kind == "mamba" else "mamba2"
    torch.manual_seed(0)
    info: dict[str, Any] = {}
    if impl.startswith("hf"):
        model, info = _hf_blocks(family, impl, cfg)
        params = list(model.parameters())

        def forward(x):
            return model(inputs_embeds=x, use_cache=False).last_hidden_state
    else:
        cls = MambaMixer if family == "mamba" else Mamba2Mixer
        scan_impl = {"ref": "ref", "ours-torch": "torch"}.get(impl, "auto")
        blocks = nn.ModuleList([cls(**cfg, scan_impl=scan_impl) for _ in range(2)])
        # the lab's norm (native kernel) with its mixers; torch's with the torch/ref paths
        norm_cls = RMSNorm if scan_impl == "auto" else nn.RMSNorm
        norms = nn.ModuleList([norm_cls(cfg["d_model"]) for _ in range(2)])
        params = list(blocks.parameters()) + list(norms.parameters())
        op = "selective_scan" if family == "mamba" else "ssd"
        info["backend"] = {"ref": "reference", "ours-torch": "torch-chunked"}.get(
            impl, scan_backend("cpu", op))

        def forward(x):
            h = x
            for norm, mix in zip(norms, blocks, strict=True):
                h = h + mix(norm(h))
            return h
    info["parameters"] = sum(p.numel() for p in params)
    x = torch.randn(b, length, cfg["d_model"])

    def step():
        forward(x).pow(2).mean().backward()
        for p in params:
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
    return {"times": times, "loadavg_1min": [load0, os.getloadavg()[0]],
            "malloc_retained": retained, "peak_rss_rise_mib": (rss1 - rss0) / 1024, **info}


def _measure(kind: str, impl: str, b: int, length: int, reps: int) -> dict:
    missing = _missing(impl)
    if missing:
        return {"missing": missing}
    out = subprocess.run(
        [sys.executable, "-m", "recall_lab.bench.ssm", "--case", kind, impl, str(b), str(length),
         str(reps)],
        capture_output=True, text=True, check=False,
    )
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail}
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["seconds"] = summarise(res.pop("times"))
    sec = res["seconds"]
    res["tokens_per_s"] = b * length / sec["median"]
    # p20 of the times is the faster end: p80 of tokens/s
    res["tokens_per_s_p20_p80"] = [b * length / sec["p80"], b * length / sec["p20"]]
    return res


def _k(v: float) -> str:
    return f"{v / 1e3:.1f}k"


def _ratio(r: float) -> str:
    return f"{r:.0f}x" if r >= 10 else f"{r:.2f}x"


def run(console: Any, quick: bool) -> dict:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    shapes = SHAPES[:1] if quick else SHAPES
    reps_fast, reps_slow = (3, 1) if quick else (7, 3)
    results: dict[str, Any] = {"method": __doc__.split("\n\n", 1)[1].replace("\n", " ").strip(),
                               "threads": THREADS, "cases": []}
    table = Table(title="SSM: 2-layer fwd+bwd tokens/s, ours vs. recurrence and HF peers "
                  f"({THREADS} threads)", box=box.SIMPLE, pad_edge=False)
    for col in ("mixer", "B x L", "implementation", "tokens/s", "p80-p20", "ours / this",
                "peak MiB"):
        right = col in ("tokens/s", "p80-p20", "ours / this", "peak MiB")
        table.add_column(col, justify="right" if right else "left", overflow="fold")
    for kind, impls in IMPLS.items():
        for b, length in shapes:
            ours = None
            for impl, label, short in impls:
                run_len = SHORT_LEN.get(length, length) if short else length
                slow = impl in ("ref", "hf", "hf-mambapy")
                res = _measure(kind, impl, b, run_len, reps_slow if slow else reps_fast)
                case = {"mixer": kind, "config": CONFIGS[kind], "batch": b, "length": run_len,
                        "implementation": impl, "label": label, **res}
                if impl == "ours":
                    ours = res
                elif ours and "tokens_per_s" in ours and "tokens_per_s" in res:
                    case["ours_over_this"] = ours["tokens_per_s"] / res["tokens_per_s"]
                results["cases"].append(case)
                shape = f"{b}x{length}" + (f" (L={run_len})" if run_len != length else "")
                if "tokens_per_s" in res:
                    lo, hi = res["tokens_per_s_p20_p80"]
                    cells = [_k(res["tokens_per_s"]), f"{_k(lo)}-{_k(hi)}",
                             _ratio(case["ours_over_this"]) if "ours_over_this" in case else "-",
                             f"{res['peak_rss_rise_mib']:.0f}"]
                else:
                    # escape: "[bench]" would be read as rich markup and vanish
                    cells = [escape(res.get("missing") or f"error: {res.get('error')}"), "", "", ""]
                table.add_row(kind, shape, label, *cells)
    console.print(table)
    loads = [x for c in results["cases"] for x in c.get("loadavg_1min", [])]
    results["loadavg_1min_range"] = [min(loads, default=0.0), max(loads, default=0.0)]
    console.print(
        "tokens/s from the median of the timed steps (p80-p20: the slower and faster fifth); "
        "ours / this: ours' median tokens/s over this row's, same mixer and shape, same run; "
        "rows marked (L=128) ran shorter (cost per token independent of L). 1-min load average "
        f"during the run: {results['loadavg_1min_range'][0]:.1f}-"
        f"{results['loadavg_1min_range'][1]:.1f} ({os.cpu_count()} cores): absolute figures are "
        "upper bounds under load, ratios are from one run.")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one `bench ssm` case (internal)")
    parser.add_argument("--case", nargs=5, required=True,
                        metavar=("KIND", "IMPL", "B", "L", "REPS"))
    kind, impl, b, length, reps = parser.parse_args(argv).case
    print(json.dumps(_case(kind, impl, int(b), int(length), int(reps))))


if __name__ == "__main__":
    main()
