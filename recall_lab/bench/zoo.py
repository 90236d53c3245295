"""Benchmark: the recall zoo's mixers, forward + backward, each chunked form beside its own
recurrent loop, FLA's naive ops (the only CPU peer) and the lab's `mamba` / `mamba2`, in one
process. The 2025-26 families (`rwkv7`, `kda`, `gated-deltaproduct`) are also set against
`deltanet`'s model row at each shape: their target is at least half of its tokens/s
(GOAL_DELTANET; 0.8 for `rwkv7` and `gated-deltaproduct` once the DPLR recurrence had a native
kernel: GOALS), and where a row misses it the bench prints why (WHY_SLOWER). On the CPU the
"chunked" rows of the DPLR families (`deltanet`, `gated-deltanet`, `kda`, `rwkv7`,
`gated-deltaproduct`) run the native kernel (mixers/dplr_native.py).

Model rows: 2 pre-norm residual blocks x + mixer(RMSNorm(x)) (layer_idx 0 and 1) on random
[B, L, 64] inputs (no embedding), loss mean(y^2), forward + backward; each zoo mixer at its
default options, "chunked" (its `forward`'s default; Hyena: FFT) and "loop" (`impl="recurrent"`:
the reference loop, Hyena's direct convolution), with the same weights; the largest difference
between the two outputs is recorded with the row (float32). `mamba` and `mamba2` are the lab's
mixers at `bench ssm`'s sizes (d_inner 128; mamba2 8 heads of 16, state 32) in the same blocks.
Shapes: the capacity experiment's (batch 32, 34 and 130 tokens) and 16 x 1024. `mamba3` and
`log-linear-mamba2` (the 2026 families) are also compared with `deltanet`'s model row at each
shape (the goal: at least half its tokens/s; where not, the bench says why).

Core rows: the recurrence alone, at the shapes the default mixer gives it at d_model 64, forward +
backward of mean(o^2): ours chunked, ours loop, and FLA's `fla/ops/<op>/naive.py` function (plain
torch loops; loaded by itself, without the `fla` package's layers), where FLA has one (for
log-linear attention an O(L^2) masked-matrix form; Mamba-3 has no CPU function by its authors).

Times: one warm-up, then `reps` steps (fewer for the loops at 1024 tokens), `record.summarise`;
tokens/s = B L / median. The process's torch threads: env RECALL_LAB_BENCH_THREADS, default 1.
Roofline: each chunked model row's effective GFLOP/s (6 x parameters x tokens per step: a lower
bound that leaves out the recurrences' own FLOPs) over one thread's measured float32 matmul peak
(`bench train`'s 512^3, fastest of 20). On a shared machine absolute figures are upper bounds;
ratios come from one run.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from recall_lab.bench.record import summarise, time_reps

PEERS = ("flash-linear-attention",)
THREADS = int(os.environ.get("RECALL_LAB_BENCH_THREADS", "1"))
D_MODEL = 64
ZOO = ("linear-attn", "based", "deltanet", "gated-deltanet", "gla", "hyena", "rwkv7", "kda",
       "gated-deltaproduct", "mamba3", "log-linear-mamba2")
# the 2025-26 families, each held to GOAL_DELTANET
NEW = ("rwkv7", "kda", "gated-deltaproduct", "mamba3", "log-linear-mamba2")
SHAPES = [(32, 34), (32, 130), (16, 1024)]
QUICK_SHAPES = [(32, 130), (16, 256)]
# the goals: chunked >= 20x its loop at 1024 tokens; within 1.5x of mamba2 at the capacity shapes
GOAL_LOOP, GOAL_MAMBA2 = 20.0, 1.5
# the new families' goal: model row tokens/s >= this fraction of deltanet's, at every shape
GOAL_DELTANET = 0.5
GOALS = {"rwkv7": 0.8, "gated-deltaproduct": 0.8}  # the goal per family, where not 0.5
NAIVE_LOG_LINEAR_MAX = 256  # tokens: FLA's naive_log_linear_attn is O(L^2) in memory
# why a new family's row can fall short of GOAL_DELTANET (printed only for a row that does;
# written from the forms' costs and the measured rows in docs/performance.md)
WHY_SLOWER = {
    "gated-deltaproduct": "n_h = 2 delta steps per token: the native recurrence runs 2L "
                          "sub-steps, twice deltanet's (at 32 x 130 71 of its 165 ms a step "
                          "against deltanet's 36 of 97), and its key and value projections and "
                          "convolutions are twice as wide (61,616 parameters against 34,976); "
                          "0.8x would take a kernel that does both sub-steps of a token in one "
                          "pass over the state",
    "kda": "its decay per key channel puts factors exp(+-(G - m)) on every q and k row of a "
           "chunk (element-wise products deltanet does not have; ratios in log space beyond "
           "exp(-60)), and its low-rank decay and gate projections add 4 matmuls per layer",
    "rwkv7": "the recurrence runs on the native kernel as deltanet's does (at 32 x 130 34 of "
             "its 126 ms a step); the rest is the layer: 59,136 parameters against 34,976, and "
             "6 token-shift mixes, 3 low-rank projections with their nonlinearities, the "
             "removal key's normalisation, a GroupNorm and the bonus, each a few torch ops "
             "forward and backward (59 ms of element-wise work against deltanet's 35); 0.8x "
             "would take fusing that prologue and epilogue into native code",
    "mamba3": "its chunked form is Mamba-2's SSD plus the rotation of q and k and a per-key "
              "trapezoid weight; MIMO (rank R) multiplies the score matrix by R^2. A fused "
              "kernel (mamba-ssm's, CUDA only) would take it.",
    "log-linear-mamba2": "each query reads ceil(log2 L) + 1 states: the intra-chunk scores "
                         "take a level weight per pair (a gather) and the chunk-level Fenwick "
                         "loop adds one read per level; a fused kernel (FLA's chunk_log_linear"
                         "_attn, CUDA only) would take it.",
}


def _mixer(name: str, layer_idx: int, impl: str | None):
    from recall_lab.mixers.based import Based
    from recall_lab.mixers.deltanet import DeltaNet, GatedDeltaNet
    from recall_lab.mixers.deltaproduct import GatedDeltaProduct
    from recall_lab.mixers.gla import GatedLinearAttention
    from recall_lab.mixers.hyena import Hyena
    from recall_lab.mixers.kda import KimiDeltaAttention
    from recall_lab.mixers.linear_attn import LinearAttention
    from recall_lab.mixers.log_linear import LogLinearMamba2
    from recall_lab.mixers.mamba3 import Mamba3
    from recall_lab.mixers.rwkv7 import RWKV7
    from recall_lab.ssm import Mamba2Mixer, MambaMixer

    if name == "mamba":
        return MambaMixer(D_MODEL, d_inner=128, d_state=16)
    if name == "mamba2":
        return Mamba2Mixer(D_MODEL, d_inner=128, d_state=32, headdim=16, chunk_size=64)
    cls = {"linear-attn": LinearAttention, "based": Based, "deltanet": DeltaNet,
           "gated-deltanet": GatedDeltaNet, "gla": GatedLinearAttention, "hyena": Hyena,
           "rwkv7": RWKV7, "kda": KimiDeltaAttention,
           "gated-deltaproduct": GatedDeltaProduct, "mamba3": Mamba3,
           "log-linear-mamba2": LogLinearMamba2}[name]
    kw = {} if impl is None else {"impl": impl}
    return cls(D_MODEL, layer_idx=layer_idx, **kw)


def _model(name: str, impl: str | None):
    from torch import nn

    from recall_lab.ssm import RMSNorm

    class Blocks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norms = nn.ModuleList([RMSNorm(D_MODEL, eps=1e-5) for _ in range(2)])
            self.mixers = nn.ModuleList([_mixer(name, i, impl) for i in range(2)])

        def forward(self, x):
            for norm, mixer in zip(self.norms, self.mixers, strict=True):
                x = x + mixer(norm(x))
            return x

    return Blocks()


def _timed(fn, reps: int) -> dict:
    return summarise(time_reps(fn, reps, warmup=1))


def model_row(name: str, impl: str | None, batch: int, length: int, reps: int,
              reference=None) -> tuple[dict, Any]:
    """One model row; `reference`: another row's model whose output this one is compared with."""
    import torch

    torch.manual_seed(0)
    model = _model(name, impl)
    x = torch.randn(batch, length, D_MODEL, generator=torch.Generator().manual_seed(1))

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()

    row: dict = {"mixer": name, "impl": impl or "default", "batch": batch, "length": length,
                 "params": sum(p.numel() for p in model.parameters())}
    if reference is not None:
        with torch.no_grad():
            row["max_err"] = float((model(x) - reference(x)).abs().max())
    row["time"] = _timed(step, reps)
    row["tokens_per_s"] = batch * length / row["time"]["median"]
    return row, model


def _fla_naive(op: str):
    """FLA's naive module for `op`, loaded from its file (None where FLA is not installed)."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "ops" / op / "naive.py"
    if not path.is_file():
        return None
    module_spec = importlib.util.spec_from_file_location(f"fla_naive_{op}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def core_cases(batch: int, length: int) -> dict[str, dict]:
    """Per mixer: {impl: callable -> output} for ours chunked, ours loop and FLA's naive function,
    at the default mixer's shapes for d_model 64; every impl of a mixer returns the same tensor
    ([b, h, l, d_v], normalised where the mixer normalises), so they can be compared too."""
    import torch
    import torch.nn.functional as F

    from recall_lab.mixers._linear import feature_map
    from recall_lab.mixers.deltanet import delta_rule_chunked, delta_rule_recurrent
    from recall_lab.mixers.deltaproduct import deltaproduct_chunked, deltaproduct_recurrent
    from recall_lab.mixers.gla import gla_chunked, gla_recurrent
    from recall_lab.mixers.hyena import causal_conv_direct, causal_conv_fft
    from recall_lab.mixers.kda import kda_chunked, kda_recurrent
    from recall_lab.mixers.linear_attn import linear_attn_chunked, linear_attn_recurrent
    from recall_lab.mixers.log_linear import levels_for, log_linear_chunked, log_linear_recurrent
    from recall_lab.mixers.mamba3 import mamba3_chunked, mamba3_recurrent
    from recall_lab.mixers.rwkv7 import W_SCALE, dplr_chunked, dplr_recurrent

    gen = torch.Generator().manual_seed(0)

    def rnd(*shape, unit=False):
        t = torch.randn(*shape, generator=gen)
        return (F.normalize(t, dim=-1) if unit else t).requires_grad_(True)

    def ours(form, fmap, *args, **kw):  # a linear attention with the normaliser's column
        fq, fk = feature_map(fmap, q), feature_map(fmap, k)
        o = form(fq, fk, torch.cat([v, torch.ones_like(v[..., :1])], -1), *args, **kw)
        return o[..., :-1] / (o[..., -1:] + 1e-10)

    def fla(op, fn, *args, layout_bthd=False, first=True, **kw):
        """FLA's naive `fn`; `first`: it returns (output, state)."""
        naive = _fla_naive(op)
        if naive is None:
            return {}
        if not layout_bthd:
            return {"fla naive": lambda: getattr(naive, fn)(*args, **kw)}

        def call():
            out = getattr(naive, fn)(*(t.transpose(1, 2) for t in args), **kw)
            return (out[0] if first else out).transpose(1, 2)
        return {"fla naive": call}

    b, n = batch, length
    cases: dict[str, dict] = {}
    # linear-attn: 1 head, elu features of 16, d_v 64, normalised
    q, k, v = rnd(b, 1, n, 16), rnd(b, 1, n, 16), rnd(b, 1, n, D_MODEL)
    naive = _fla_naive("linear_attn")
    cases["linear-attn"] = {
        "chunked": lambda: ours(linear_attn_chunked, "elu", 64),
        "loop": lambda: ours(linear_attn_recurrent, "elu"),
        **({} if naive is None else {"fla naive": lambda: naive.naive_recurrent_linear_attn(
            *(t.transpose(1, 2) for t in (feature_map("elu", q), feature_map("elu", k), v)),
            scale=1.0, normalize=True)[0].transpose(1, 2)}),
    }
    # based's Taylor layer: 1 head, feature dim 16 (273 features), d_v 64, normalised
    cases["based"] = {
        "chunked": lambda: ours(linear_attn_chunked, "taylor", 64, raw=(q, k)),
        "loop": lambda: ours(linear_attn_recurrent, "taylor"),
        **fla("based", "naive_parallel_based", q, k, v, use_norm=True),
    }
    # deltanet / gated-deltanet: 4 heads of d_k = d_v = 16 (FLA scales q by d_k^-1/2 itself)
    dq, dk_, dv = rnd(b, 4, n, 16), rnd(b, 4, n, 16, unit=True), rnd(b, 4, n, 16)
    beta = torch.rand(b, 4, n, generator=gen)
    g = (-torch.rand(b, 4, n, generator=gen)).requires_grad_(True)
    delta = _fla_naive("delta_rule")
    cases["deltanet"] = {
        "chunked": lambda: delta_rule_chunked(dq * 0.25, dk_, dv, beta, None, 16),
        "loop": lambda: delta_rule_recurrent(dq * 0.25, dk_, dv, beta),
        **({} if delta is None else {
            "fla naive": lambda: delta.delta_rule_recurrence(dq, dk_, dv, beta)[0]}),
    }
    cases["gated-deltanet"] = {
        "chunked": lambda: delta_rule_chunked(dq * 0.25, dk_, dv, beta, g, 16),
        "loop": lambda: delta_rule_recurrent(dq * 0.25, dk_, dv, beta, g),
        **fla("gated_delta_rule", "naive_recurrent_gated_delta_rule", dq, dk_, dv, beta, g,
              layout_bthd=True),
    }
    # gla: 4 heads, d_k 8, d_v 16, decays of the layer's size (logsigmoid / 16)
    gq, gk, gv = rnd(b, 4, n, 8), rnd(b, 4, n, 8), rnd(b, 4, n, 16)
    gg = (F.logsigmoid(torch.randn(b, 4, n, 8, generator=gen)) / 16).requires_grad_(True)
    cases["gla"] = {
        "chunked": lambda: gla_chunked(gq * 8 ** -0.5, gk, gv, gg, 32),
        "loop": lambda: gla_recurrent(gq * 8 ** -0.5, gk, gv, gg),
        **fla("gla", "naive_recurrent_gla", gq, gk, gv, gg, layout_bthd=True),
    }
    u, h = rnd(b, D_MODEL, n), rnd(D_MODEL, n)
    cases["hyena"] = {"chunked": lambda: causal_conv_fft(u, h),
                      "loop": lambda: causal_conv_direct(u, h)}
    # rwkv7: 4 heads of 16, w in the layer's range (0.545, 1); FLA's generalised delta rule
    # with q = r sqrt(d) (it scales q by d^-1/2 itself)
    kappa = F.normalize(torch.randn(b, 4, n, 16, generator=gen), dim=-1)
    lr = torch.rand(b, 4, n, 16, generator=gen)
    ra, rb = (-kappa).requires_grad_(True), (kappa * lr).requires_grad_(True)
    logw = (-W_SCALE * torch.rand(b, 4, n, 16, generator=gen)).requires_grad_(True)
    dplr = _fla_naive("generalized_delta_rule/dplr")
    cases["rwkv7"] = {
        "chunked": lambda: dplr_chunked(dq, dk_, dv, ra, rb, logw, 16)[0],
        "loop": lambda: dplr_recurrent(dq, dk_, dv, ra, rb, logw)[0],
        **({} if dplr is None else {"fla naive": lambda: dplr.dplr_recurrence(
            dq * 4.0, dk_, dv, ra, rb, logw)[0]}),
    }
    # kda: 4 heads of d_k = d_v = 16, a decay per key channel of the layer's initial size
    kg = (-0.5 * torch.rand(b, 4, n, 16, generator=gen)).requires_grad_(True)
    cases["kda"] = {
        "chunked": lambda: kda_chunked(dq * 0.25, dk_, dv, beta, kg, 16)[0],
        "loop": lambda: kda_recurrent(dq * 0.25, dk_, dv, beta, kg)[0],
        **fla("kda", "naive_recurrent_kda", dq, dk_, dv, kg, beta, layout_bthd=True),
    }
    # gated-deltaproduct: n_h = 2 keys, values and betas (in (0, 2)) per token and head
    pk = rnd(b, 4, n, 2, 16, unit=True)
    pv = rnd(b, 4, n, 2, 16)
    pb = 2 * torch.rand(b, 4, n, 2, generator=gen)
    cases["gated-deltaproduct"] = {
        "chunked": lambda: deltaproduct_chunked(dq * 0.25, pk, pv, pb, g, 16)[0],
        "loop": lambda: deltaproduct_recurrent(dq * 0.25, pk, pv, pb, g)[0],
        **fla("gated_delta_product", "naive_recurrent_gated_delta_product", dq,
              pk.flatten(2, 3), pv.flatten(2, 3), g, pb.flatten(2, 3), layout_bthd=True,
              scale=0.25, num_householder=2),
    }
    # mamba3: 4 heads, rank 1, d_state 16 (4 rotated pairs), headdim 32, chunks of 32
    mq, mk, mv = rnd(b, 4, n, 1, 16), rnd(b, 4, n, 1, 16), rnd(b, 4, n, 1, 32)
    mdt = torch.rand(b, 4, n, generator=gen) * 0.1
    madt, mtrap = -mdt * 4, torch.rand(b, 4, n, generator=gen)
    mang = (torch.randn(b, 4, n, 4, generator=gen) * 0.1).cumsum(2)
    cases["mamba3"] = {
        "chunked": lambda: mamba3_chunked(mq, mk, mv, madt, mdt, mtrap, mang, 32),
        "loop": lambda: mamba3_recurrent(mq, mk, mv, madt, mdt, mtrap, mang),
    }
    # log-linear-mamba2: 4 heads sharing q = C, k = B of d_state 16, headdim 32, chunks of 32.
    # FLA's naive function is O(L^2) in memory (a [B, H, L, L] mask per level, a
    # [B, H, L, L, d_state] product): only up to NAIVE_LOG_LINEAR_MAX tokens (at 16 x 1024 it
    # needs well over the 2-core CI machine's 23 GB: a first run was killed there)
    lq, lk, lv = rnd(b, 1, n, 16), rnd(b, 1, n, 16), rnd(b, 4, n, 32)
    lg = (-torch.rand(b, 4, n, generator=gen) * 0.1).requires_grad_(True)
    lam = torch.rand(b, 4, n, levels_for(n), generator=gen).requires_grad_(True)
    cases["log-linear-mamba2"] = {
        "chunked": lambda: log_linear_chunked(lq, lk, lv, lg, lam, 32),
        "loop": lambda: log_linear_recurrent(lq, lk, lv, lg, lam),
        **(fla("log_linear_attn", "naive_log_linear_attn",
               *(t.expand(-1, 4, -1, -1) for t in (lq, lk)), lv, lg, lam, layout_bthd=True,
               scale=1.0, first=False) if n <= NAIVE_LOG_LINEAR_MAX else {}),
    }
    return cases


def _print_versus(console, versus: list[tuple[str, str, float]]) -> None:
    """The new families' model rows over deltanet's, and why a row below the goal is."""
    from rich.table import Table

    table = Table(title=f"2025-26 families: model row tokens/s over deltanet's (goal >= "
                        f"{GOAL_DELTANET}; {', '.join(f'{n} {g}' for n, g in GOALS.items())})")
    for col in ("mixer", "B x L", "/ deltanet", "goal"):
        table.add_column(col, justify="left" if col == "mixer" else "right")
    short = []
    for name, shape, ratio in versus:
        met = ratio >= GOALS.get(name, GOAL_DELTANET)
        table.add_row(name, shape, f"{ratio:.2f}", "met" if met else "missed")
        if not met and name not in short:
            short.append(name)
    console.print(table)
    for name in short:
        console.print(f"{name} below {GOALS.get(name, GOAL_DELTANET)}x deltanet: "
                      f"{WHY_SLOWER[name]}")


def run(console, quick: bool, shapes: list[tuple[int, int]] | None = None,
        mixers: tuple[str, ...] = ZOO, reps: int | None = None,
        peak: float | None = None) -> dict:
    """The tables above; `shapes`, `mixers`, `reps` and a known matmul `peak` (GFLOP/s) narrow
    the run (the tests use them)."""
    import torch
    from rich.table import Table

    from recall_lab.bench.train import matmul_peak

    shapes = shapes or (QUICK_SHAPES if quick else SHAPES)
    reps = reps or (3 if quick else 7)
    peak = peak or matmul_peak()
    torch.set_num_threads(THREADS)
    out: dict = {"threads": THREADS, "peak_gflops": peak, "model": [], "core": [],
                 "goals": {"loop_ratio_at_longest": GOAL_LOOP, "mamba2_ratio": GOAL_MAMBA2,
                           "deltanet_ratio_2026": GOAL_DELTANET,
                           "deltanet_ratio_per_family": GOALS}}
    table = Table(title=f"zoo: forward + backward, 2 layers, d_model {D_MODEL}, tokens/s "
                        f"({THREADS} thread{'s' if THREADS > 1 else ''})")
    for col in ("mixer", "B x L", "chunked", "loop", "chunked / loop", "max |diff|",
                "mamba2 / chunked", "GFLOP/s (of peak)"):
        table.add_column(col, justify="left" if col == "mixer" else "right")
    versus = []  # (name, shape, its tokens/s over deltanet's)
    for batch, length in shapes:
        slow = max(1, reps // 3) if length > 256 else reps
        base = {}
        for name in ("mamba", "mamba2"):
            row, _ = model_row(name, None, batch, length, reps)
            out["model"].append(row)
            base[name] = row["tokens_per_s"]
            table.add_row(name, f"{batch} x {length}", f"{row['tokens_per_s']:,.0f}", "", "",
                          "", "", "")
        for name in mixers:
            fast, model = model_row(name, None, batch, length, reps)
            loop, _ = model_row(name, "recurrent", batch, length, slow, reference=model)
            gflops = 6 * fast["params"] * batch * length / fast["time"]["median"] / 1e9
            fast.update(gflops=gflops, of_peak=gflops / peak,
                        vs_loop=fast["tokens_per_s"] / loop["tokens_per_s"],
                        mamba2_over=base["mamba2"] / fast["tokens_per_s"])
            if name in NEW and "deltanet" in base:
                fast["vs_deltanet"] = fast["tokens_per_s"] / base["deltanet"]
                versus.append((name, f"{batch} x {length}", fast["vs_deltanet"]))
            if name == "deltanet":
                base["deltanet"] = fast["tokens_per_s"]
            out["model"] += [fast, loop]
            table.add_row(name, f"{batch} x {length}", f"{fast['tokens_per_s']:,.0f}",
                          f"{loop['tokens_per_s']:,.0f}", f"{fast['vs_loop']:.1f}x",
                          f"{loop['max_err']:.1e}", f"{fast['mamba2_over']:.2f}",
                          f"{gflops:.1f} ({gflops / peak:.0%})")
    console.print(table)
    if versus:
        _print_versus(console, versus)
    core = Table(title="zoo: the recurrence alone, forward + backward, tokens/s")
    for col in ("mixer", "B x L", "chunked", "loop", "FLA naive", "chunked / loop",
                "chunked / FLA"):
        core.add_column(col, justify="left" if col == "mixer" else "right")
    for batch, length in shapes:
        slow = max(1, reps // 3) if length > 256 else reps
        for name, impls in core_cases(batch, length).items():
            if name not in mixers:
                continue
            rates = {}
            for impl, fn in impls.items():
                timing = _timed(lambda fn=fn: fn().pow(2).mean().backward(),
                                reps if impl == "chunked" else slow)
                rates[impl] = batch * length / timing["median"]
                out["core"].append({"mixer": name, "impl": impl, "batch": batch,
                                    "length": length, "time": timing,
                                    "tokens_per_s": rates[impl]})
            fla = rates.get("fla naive")
            core.add_row(name, f"{batch} x {length}", f"{rates['chunked']:,.0f}",
                         f"{rates['loop']:,.0f}", "-" if fla is None else f"{fla:,.0f}",
                         f"{rates['chunked'] / rates['loop']:.1f}x",
                         "-" if fla is None else f"{rates['chunked'] / fla:.1f}x")
    console.print(core)
    console.print(f"peak: one thread's float32 matmul 512^3, {peak:.1f} GFLOP/s; goals: chunked "
                  f">= {GOAL_LOOP:.0f}x its loop at the longest shape, mamba2 / chunked <= "
                  f"{GOAL_MAMBA2} at the capacity shapes")
    return out
