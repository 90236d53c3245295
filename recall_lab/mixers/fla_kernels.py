"""FLA's chunked kernels behind the zoo's mixers on CUDA (flash-linear-attention's `fla.ops`,
shipped in its `fla-core` distribution: the `[cuda]` extra).

A zoo mixer with ``impl="chunk"`` asks this module first; it answers None (and the mixer runs its
torch chunked form, exactly as before) unless the tensors are on CUDA, FLA imports, the kernel
takes their dtype, and the kernel passed its first-call self-check. On the CPU it answers None
before anything else, so no CPU number depends on this module.

    mixer (impl="chunk")                      FLA kernel
    linear-attn, identity or elu map          fla.ops.linear_attn.chunk_linear_attn
    linear-attn taylor map, based (linear)    fla.ops.based.fused_chunk_based  (d' <= 16)
    deltanet                                  fla.ops.delta_rule.chunk_delta_rule  (fp16 / bf16)
    gated-deltanet                            fla.ops.gated_delta_rule.chunk_gated_delta_rule
    gla                                       fla.ops.gla.chunk_gla

Based's sliding-window layers and Hyena have no FLA counterpart and always run the torch forms.

The mappings (``map_*``) take the tensors the torch chunked forms take, after the mixer's
projections, convolutions, feature maps and normalisations ([b, h, l, .], q already scaled), and
call FLA's convention: [B, T, H, .] layout, ``scale=1.0`` (q is scaled; for the Taylor kernel the
map's own 1/sqrt(d')), no normalisation inside the kernel (the mixers divide by the normaliser
column of ones they append to v, with their own eps), log-space decays as FLA takes them
(per head for Gated DeltaNet, per key channel for GLA, in float32). Key and value widths are
zero-padded to even widths of at least 16 (FLA's 16-bit backward asserts even K and V, and
linear attention's value width plus its normaliser column is odd; some of FLA's block widths are
next_power_of_2(width) without a floor, and Triton's tl.dot needs 16; the lab's heads are often
8 wide): padded key channels (with a zero decay in log space) add 0 to every score and to the
state, and padded value columns are dropped, so the result is the same.

Each mapping takes the kernel as its first argument, so the CPU tests pass FLA's plain-torch
``naive.py`` references in its place (tests/mixers/test_zoo_fla_dispatch.py); on CUDA
:func:`kernel` imports the real one.

Self-check (recall_lab/kernel_check.py, as for the Triton sparse attention and mamba-ssm): the
first time a process would run a kernel at a given (heads, key width, value width, dtype), one
small case at those widths (100 tokens: a full and a partial chunk of 64) runs through the
mapping and through the lab's torch chunked form (in float32 for 16-bit inputs), output and every
gradient; above the tolerance, or on any exception (an unsupported width, FLA's refusal of
Triton 3.4 to 3.7.0 on Hopper in the gated backward), that configuration runs the torch form
for the rest of the process, with one warning line. Keyed by widths and dtype because FLA's
kernels assert on some of them: a check at one fixed shape would not cover the mixer's own.

Dtype: under CUDA autocast the kernels get the autocast dtype (the lab trains in bf16), else the
values' dtype; decays are passed in float32. chunk_delta_rule refuses float32, so DeltaNet runs
FLA only under 16-bit autocast or in a 16-bit model, and its float32 runs stay on the torch form
(not silently rounded to bf16).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from recall_lab import kernel_check
from recall_lab.mixers._linear import feature_map

__all__ = ["KERNELS", "kernel", "describe", "linear_attn", "delta_rule", "gla", "map_linear_attn",
           "map_based", "map_delta_rule", "map_gla"]

# op -> (module, function) in FLA 0.6 (fla-core)
KERNELS = {
    "linear_attn": ("fla.ops.linear_attn", "chunk_linear_attn"),
    "based": ("fla.ops.based", "fused_chunk_based"),
    "delta_rule": ("fla.ops.delta_rule", "chunk_delta_rule"),
    "gated_delta_rule": ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule"),
    "gla": ("fla.ops.gla", "chunk_gla"),
}
_HALF = (torch.float16, torch.bfloat16)
_FLOATS = (torch.float32, *_HALF)
# the dtypes each kernel takes (chunk_delta_rule asserts q.dtype != float32)
DTYPES = {op: _HALF if op == "delta_rule" else _FLOATS for op in KERNELS}
# fused_chunk_based asserts q.shape[-1] <= 16 (it keeps the d'^2 second-order state on chip)
BASED_MAX_DIM = 16
# relative to max(1, max |reference|) (kernel_check.compare). fp32: FLA's tl.dot runs in TF32
# (~1e-3), as mamba-ssm's SSD; 16-bit: inputs, states and outputs rounded to 2^-8 (bf16) on the
# way; a wrong mapping (a missed scale, a decay's sign, a layout) is off by O(1)
_TOL = {torch.float32: 1e-2, torch.float16: 5e-2, torch.bfloat16: 5e-2}
_CHECK_BATCH, _CHECK_LENGTH = 2, 100


@functools.cache
def kernel(op: str) -> tuple[Callable[..., Any] | None, str]:
    """FLA's kernel for `op` (a key of KERNELS), or None and why it is unavailable."""
    module, name = KERNELS[op]
    try:
        return getattr(importlib.import_module(module), name), "ok"
    except Exception as exc:  # not installed, or a Triton / torch it cannot load: the torch form
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def describe(cuda: bool) -> str:
    """`recall-lab info`'s line: what the zoo's chunked mixers run here. On the CPU FLA is not
    imported (nothing there depends on it); on CUDA each kernel is imported, not yet checked (the
    self-check runs on a kernel's first call at the mixer's widths)."""
    torch_form = "torch chunked form"
    if not cuda:
        return f"{torch_form} (FLA's kernels run on CUDA only)"
    why = {op: kernel(op)[1] for op in KERNELS}
    missing = {op: w for op, w in why.items() if w != "ok"}
    if len(missing) == len(KERNELS):
        return f"{torch_form} (FLA unavailable: {next(iter(missing.values()))})"
    text = "FLA's kernels after their first-call self-checks (DeltaNet under 16-bit only)"
    return text + "".join(f"; {op}: {torch_form} ({w})" for op, w in missing.items())


def on_cuda(t: Tensor) -> bool:
    """Whether the dispatch may consider FLA for `t` (the CPU tests replace this)."""
    return t.is_cuda


# -- the mappings: our tensors [b, h, l, .] -> FLA's call -> our layout --

def _wide(n: int) -> int:
    """The width a key or value axis of n channels is zero-padded to: even, and at least 16 (FLA
    takes some block widths as next_power_of_2(width) without a floor, and Triton's tl.dot
    needs 16)."""
    return max(16, n + n % 2)


def _bthd(x: Tensor, width: int | None = None) -> Tensor:
    """[b, h, l, d] -> [b, l, h, d], the last axis zero-padded to `width` (default `_wide(d)`;
    zero channels change no score and padded value columns are dropped: module docstring)."""
    x = x.transpose(1, 2)
    pad = (_wide(x.shape[-1]) if width is None else width) - x.shape[-1]
    return F.pad(x, (0, pad)) if pad else x


def _back(o: Tensor, width: int, dtype: torch.dtype) -> Tensor:
    """FLA's [b, l, h, e'] -> [b, h, l, width] in `dtype` (padded value columns dropped)."""
    return o[..., :width].transpose(1, 2).to(dtype)


def map_linear_attn(fn: Callable, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """= linear_attn_chunked(q, k, v): features q (scaled), k [b, h, l, f], v [b, h, l, e]."""
    o, _ = fn(_bthd(q), _bthd(k), _bthd(v), scale=1.0, normalize=False)
    return _back(o, v.shape[-1], v.dtype)


def map_based(fn: Callable, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """= linear_attn_chunked(phi(q), phi(k), v, raw=(q, k)) for the Taylor map phi, from the raw
    q, k [b, h, l, d']: the kernel's scores 1 + s + s^2 / 2 with s = q . k * scale."""
    # fused_chunk_based's value block is min(V, 32) wide, which Triton needs to be a power of 2
    e = v.shape[-1]
    e_wide = 1 << (e - 1).bit_length() if e < 32 else _wide(e)
    o = fn(_bthd(q), _bthd(k), _bthd(v, e_wide), scale=q.shape[-1] ** -0.5, use_norm=False)
    return _back(o, e, v.dtype)


def map_delta_rule(fn: Callable, q: Tensor, k: Tensor, v: Tensor, beta: Tensor,
                   g: Tensor | None = None) -> Tensor:
    """= delta_rule_chunked(q, k, v, beta, g): q (normalised, scaled), k (normalised)
    [b, h, l, d_k], v [b, h, l, d_v], beta and g (log alpha; None: DeltaNet) [b, h, l]."""
    kw = {"q": _bthd(q), "k": _bthd(k), "v": _bthd(v), "beta": beta.transpose(1, 2),
          "scale": 1.0}
    if g is not None:
        kw["g"] = g.transpose(1, 2)
    o, _ = fn(**kw)
    return _back(o, v.shape[-1], v.dtype)


def map_gla(fn: Callable, q: Tensor, k: Tensor, v: Tensor, g: Tensor) -> Tensor:
    """= gla_chunked(q, k, v, g): q (scaled), k, g (log alpha per key channel) [b, h, l, d_k],
    v [b, h, l, d_v]."""
    o, _ = fn(q=_bthd(q), k=_bthd(k), v=_bthd(v), g=_bthd(g), scale=1.0)
    return _back(o, v.shape[-1], v.dtype)


_MAPS = {"linear_attn": map_linear_attn, "based": map_based, "delta_rule": map_delta_rule,
         "gated_delta_rule": map_delta_rule, "gla": map_gla}


# -- the self-check --

def _reference(op: str, chunked: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """The mapping's arguments -> the lab's torch chunked form of `op`, `chunked` (the mixers
    pass theirs: linear_attn_chunked, delta_rule_chunked, gla_chunked; this module imports no
    mixer, which imports it)."""
    if op == "linear_attn":
        return lambda q, k, v: chunked(q, k, v, 64)
    if op == "based":
        return lambda q, k, v: chunked(feature_map("taylor", q), feature_map("taylor", k), v, 64,
                                       raw=(q, k))
    if op == "gla":
        return lambda q, k, v, g: chunked(q, k, v, g, 64)
    return lambda q, k, v, beta, g=None: chunked(q, k, v, beta, g, 64)


def _case(op: str, heads: int, dk: int, dv: int, dtype: torch.dtype,
          device: torch.device) -> dict[str, Tensor]:
    """One small input of `op` at the mixer's widths, with the ranges the mixers produce."""
    gen = torch.Generator().manual_seed(0)
    b, t = _CHECK_BATCH, _CHECK_LENGTH

    def r(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen)

    q, k, v = r(b, heads, t, dk), r(b, heads, t, dk), r(b, heads, t, dv)
    case = {"q": q, "k": k, "v": v}
    if op == "linear_attn":  # positive features, as elu + 1
        case.update(q=(F.elu(q) + 1) * dk ** -0.5, k=F.elu(k) + 1)
    elif op in ("delta_rule", "gated_delta_rule"):
        case.update(q=F.normalize(q, dim=-1) * dk ** -0.5, k=F.normalize(k, dim=-1),
                    beta=torch.rand(b, heads, t, generator=gen))
        if op == "gated_delta_rule":
            case["g"] = -torch.rand(b, heads, t, generator=gen)  # alpha in (e^-1, 1)
    elif op == "gla":
        case.update(q=q * dk ** -0.5, g=F.logsigmoid(r(b, heads, t, dk)) / 16)
    return {n: x.to(device, torch.float32 if n == "g" else dtype) for n, x in case.items()}


def check_name(op: str, heads: int, dk: int, dv: int, dtype: torch.dtype) -> str:
    return f"fla {KERNELS[op][1]} (H={heads}, K={dk}, V={dv}, {str(dtype).split('.')[-1]})"


def check(op: str, heads: int, dk: int, dv: int, dtype: torch.dtype,
          device: torch.device | str, chunked: Callable[..., Tensor]) -> bool:
    """Whether `op` may run FLA's kernel at these widths and dtype: checked on the first call in
    the process against the torch chunked form `chunked` (module docstring)."""
    def check_once() -> dict[str, float]:
        fn, mapping, ref = kernel(op)[0], _MAPS[op], _reference(op, chunked)
        wide = torch.promote_types(dtype, torch.float32)  # the reference's precision
        inputs = _case(op, heads, dk, dv, dtype, torch.device(device))
        return kernel_check.errors(
            lambda **t: mapping(fn, **t),
            lambda **t: ref(**{n: x.to(wide) for n, x in t.items()}), inputs)

    return kernel_check.checked(check_name(op, heads, dk, dv, dtype), check_once,
                                _TOL.get(dtype, 1e-2), fallback="the torch chunked form")


# -- the dispatch the mixers call --

def _compute_dtype(v: Tensor) -> torch.dtype:
    """The dtype the kernel runs in: CUDA autocast's where it is on, else the values'."""
    if v.is_cuda and torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return v.dtype


def _run(op: str, chunked: Callable[..., Tensor], **tensors: Tensor) -> Tensor | None:
    """FLA's `op` on `tensors` (the mapping's arguments), or None where the torch form runs."""
    v = tensors["v"]
    dtype = _compute_dtype(v)
    if dtype not in DTYPES[op] or kernel(op)[0] is None:
        return None
    q = tensors["q"]
    if not check(op, q.shape[1], q.shape[-1], v.shape[-1], dtype, q.device, chunked):
        return None
    cast = {n: x.to(torch.float32 if n == "g" else dtype) for n, x in tensors.items()}
    return _MAPS[op](kernel(op)[0], **cast)


def linear_attn(q: Tensor, k: Tensor, v: Tensor, feature: str,
                chunked: Callable[..., Tensor]) -> Tensor | None:
    """chunked(phi(q), phi(k), v) (linear_attn_chunked; the self-check's reference) for the
    feature map `feature` on FLA's kernel, or None. q (scaled), k: before the map [b, h, l, d'];
    v: with the normaliser's column if any. The Taylor map runs FLA's Based kernel on the raw
    q, k (never expanded), for d' <= 16."""
    if not on_cuda(q):
        return None
    if feature == "taylor":
        return _run("based", chunked, q=q, k=k, v=v) if q.shape[-1] <= BASED_MAX_DIM else None
    return _run("linear_attn", chunked, q=feature_map(feature, q), k=feature_map(feature, k),
                v=v)


def delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor | None,
               chunked: Callable[..., Tensor]) -> Tensor | None:
    """chunked(q, k, v, beta, g) (delta_rule_chunked) on FLA's kernel (gated when g is given),
    or None."""
    if not on_cuda(q):
        return None
    if g is None:
        return _run("delta_rule", chunked, q=q, k=k, v=v, beta=beta)
    return _run("gated_delta_rule", chunked, q=q, k=k, v=v, beta=beta, g=g)


def gla(q: Tensor, k: Tensor, v: Tensor, g: Tensor,
        chunked: Callable[..., Tensor]) -> Tensor | None:
    """chunked(q, k, v, g) (gla_chunked) on FLA's kernel, or None."""
    if not on_cuda(q):
        return None
    return _run("gla", chunked, q=q, k=k, v=v, g=g)
