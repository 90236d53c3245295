"""The diagonal-plus-rank-one recurrence on the native CPU kernel (recall_lab/native/dplr.c):

    S_t = diag(exp g_t) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T,   o_t = S_t^T q_t,  S_0 = 0

the recurrence of RWKV-7 (mixers/rwkv7.py, whose `dplr_recurrent` is its reference) and, with
a, b and g set per family, of the delta rules. Token-major inputs, as the mixers make them:
q, k, a, b, g [B, L, H, dk], v [B, L, H, dv] -> o [B, L, H, dv] and the final state
[B, H, dk, dv]. float32 and float64 on the CPU; `usable` says when it applies, and the mixers
keep their torch forms for everything else (CUDA, other dtypes, torch.compile, no compiler).

Why: at the lab's widths the torch chunked form is thousands of tiny batched matmuls; one C loop
per (batch element, head) does the recurrence's few MFLOP directly. Measured in
docs/performance.md; tests/mixers/test_dplr_native.py ties forward and every gradient to
`dplr_recurrent` in float64.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor

from recall_lab import native as kernels

_ptr = kernels.ptr
_SUFFIX = {torch.float32: "_f32", torch.float64: "_f64"}
_ENABLED = [True]  # `torch_forms()` turns it off


@contextlib.contextmanager
def torch_forms() -> Iterator[None]:
    """Inside: every mixer takes its torch form, as before this kernel existed (`bench grid`'s
    old way, the tests' reference)."""
    _ENABLED.append(False)
    try:
        yield
    finally:
        _ENABLED.pop()


def usable(*tensors: Tensor | None) -> bool:
    """Whether the native kernel takes these (None entries skipped): all on the CPU in one of
    float32 / float64, the kernels built, and not under torch.compile or a functorch
    transform."""
    tensors = tuple(t for t in tensors if t is not None)
    x = tensors[0]
    return (_ENABLED[-1] and x.device.type == "cpu" and x.dtype in _SUFFIX
            and all(t.device.type == "cpu" and t.dtype == x.dtype for t in tensors)
            and not torch.compiler.is_compiling()
            and not torch._C._functorch.is_functorch_wrapped_tensor(x)
            and kernels.available())


def _fn(name: str, dtype: torch.dtype):
    return getattr(kernels.lib(), name + _SUFFIX[dtype])


class _NativeDPLR(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, a, b, g):
        q, k, v, a, b, g = (t.contiguous() for t in (q, k, v, a, b, g))
        bsz, length, heads, dk = q.shape
        dv = v.shape[-1]
        ckpt = kernels.constant("dplr_checkpoint")
        o = v.new_empty(bsz, length, heads, dv)
        state = v.new_empty(bsz, heads, dk, dv)
        ck = v.new_empty(bsz, heads, -(-length // ckpt), dk, dv)
        _fn("dplr_fwd", q.dtype)(*map(_ptr, (q, k, v, a, b, g, o, state, ck)), bsz, length,
                                  heads, dk, dv, kernels.threads())
        ctx.save_for_backward(q, k, v, a, b, g, ck)
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None
        return o, state

    @staticmethod
    def backward(ctx, do, ds_end):
        q, k, v, a, b, g, ck = ctx.saved_tensors
        bsz, length, heads, dk = q.shape
        dv = v.shape[-1]
        do = torch.zeros_like(v) if do is None else do.contiguous()
        ds_end = None if ds_end is None else ds_end.contiguous()
        grads = [torch.empty_like(t) for t in (q, k, v, a, b, g)]
        _fn("dplr_bwd", q.dtype)(*map(_ptr, (q, k, v, a, b, g, ck, do, ds_end, *grads)), bsz,
                                  length, heads, dk, dv, kernels.threads())
        return tuple(grads)


def dplr(q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, g: Tensor
         ) -> tuple[Tensor, Tensor]:
    """(o [B, L, H, dv], final state [B, H, dk, dv]) of the recurrence on the native kernel;
    q, k, a, b, g [B, L, H, dk] (g = log of the decay), v [B, L, H, dv]. Check `usable` first."""
    return _NativeDPLR.apply(q, k, v, a, b, g)


def delta_rule_tokens(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor | None
                      ) -> tuple[Tensor, Tensor]:
    """The delta rule, gated or not, per head or per key channel, as the recurrence above:
    S_t = diag(alpha_t) S_{t-1} + beta_t k_t (v_t - (diag(alpha_t) S_{t-1})^T k_t)^T, i.e.
    a = -alpha * k, b = k~ = beta * k, g = log alpha. Token-major, as the mixers make them:
    q, k [b, l, h, d_k], v [b, l, h, d_v], beta [b, l, h], g None (DeltaNet), [b, l, h] (a decay
    per head: Gated DeltaNet) or [b, l, h, d_k] (per key channel: KDA) -> (o [b, l, h, d_v],
    final state [b, h, d_k, d_v])."""
    kb = beta[..., None] * k
    if g is None:
        a, gk = -k, k.new_zeros(()).expand_as(k)
    else:
        gk = (g[..., None] if g.dim() == 3 else g).expand_as(k)
        a = -(gk.exp() * k)
    return dplr(q, kb, v, a, kb, gk)


def delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor | None
               ) -> tuple[Tensor, Tensor]:
    """`delta_rule_tokens` with head-major arguments and output, as `delta_rule_chunked` and
    `kda_chunked` take them: q, k [b, h, l, d_k], v [b, h, l, d_v], beta [b, h, l], g None,
    [b, h, l] or [b, h, l, d_k] -> (o [b, h, l, d_v], final state)."""
    o, state = delta_rule_tokens(*(t.transpose(1, 2) for t in (q, k, v, beta)),
                                 None if g is None else g.transpose(1, 2))
    return o.transpose(1, 2), state


def delta_product(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor
                  ) -> tuple[Tensor, Tensor]:
    """Gated DeltaProduct's n_h delta steps per token as the recurrence above over L n_h
    interleaved sub-steps: the decay and the query at a token's first and last sub-step. Head-
    major arguments and results as `deltaproduct_chunked`: q [b, h, l, d_k], k [b, h, l, n_h,
    d_k], v [b, h, l, n_h, d_v], beta [b, h, l, n_h], g [b, h, l] -> (o [b, h, l, d_v], final
    state)."""
    bsz, heads, length, n_h, dk = k.shape
    steps = length * n_h

    def tokens(t: Tensor) -> Tensor:  # [b, h, l, n_h, d] -> [b, l n_h, h, d]
        return t.permute(0, 2, 3, 1, 4).reshape(bsz, steps, heads, t.shape[-1])

    first = torch.zeros(n_h, dtype=q.dtype, device=q.device)
    first[0] = 1.0
    last = torch.zeros(n_h, dtype=q.dtype, device=q.device)
    last[-1] = 1.0
    gk = g[..., None, None] * first[:, None]  # [b, h, l, n_h, 1]: log alpha at the first only
    kk = tokens(k)
    kb = tokens(beta[..., None] * k)
    gs = tokens(gk.expand(*k.shape))
    qs = tokens(q[..., None, :] * last[:, None])
    o, state = dplr(qs, kb, tokens(v), -(gs.exp() * kk), kb, gs)
    o = o.view(bsz, length, n_h, heads, -1)[:, :, -1]  # each token's last sub-step
    return o.transpose(1, 2), state
