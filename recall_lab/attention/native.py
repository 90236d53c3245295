"""Every call from `recall_lab/attention/` into the native CPU kernels (recall_lab/native, via
ctypes): the sparse-attention op's ``native`` backend, and the index kernels of the patterns
(union of index lists, LSH bucket windows, causal top-n), and the HAX branch's pattern in one
call per part: LSH indices from q, k (`lsh_window`), KS inputs + scores + top-n (`ks_scores`),
the ranking loss's targets (`ks_target`) and the loss with its scorer gradients
(`ks_rank_loss`), or all of the pattern but the loss in one (`hax_pattern`). Callers check
`available()` and keep a torch path beside each (tested equal, tests/attention/
test_hax_fast_paths.py for the HAX ones).

The op: recall_lab/native/attention.c.

Same math as the ``torch`` gather reference (sparse.py), one query at a time: scores of the listed
keys, softmax, weighted sum of their values; the backward recomputes the probabilities from the
saved log-sum-exp and accumulates dk, dv into the keys' rows. q, k, v are read through their
strides, and the output and gradients keep v's (and q's, k's) layout where it is dense, so the
hybrid branch's permuted views cost no copies either way. Nothing is gathered into new
buffers and no sparse structure is built, which is where the ``csr`` backend spent most of its
time (index layout, the transposed pattern's argsort, copies; bench attention). Rows (batch x
head) are split over torch's OpenMP threads (recall_lab/native); each row's keys are only written by
its own queries, so the result does not depend on the thread count. Float32 only (half inputs
are widened by the op, float64 goes to ``csr``/``torch``).
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from recall_lab import native as kernels


def _last_dim_dense(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def _strides(*ts: Tensor) -> ctypes.Array:
    """The (batch, head, position) strides of [B, H, L, *] operands, as the kernels read them (a
    ctypes array: a tensor would cost an op per call)."""
    flat = [s for t in ts for s in t.stride()[:3]]
    return (ctypes.c_long * len(flat))(*flat)


def forward(q: Tensor, k: Tensor, v: Tensor, idx: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """``q, k [B, H, L, d]``, ``v [B, H, L, dv]`` float32 (any batch, head and position strides;
    the last dim is made contiguous where it is not), ``idx int [B*H, L, n]`` -> (out in v's
    layout, lse ``[B*H, L]``)."""
    lib = kernels.lib()
    q, k, v = (_last_dim_dense(t) for t in (q, k, v))
    idx = idx.to(torch.int32).contiguous()
    b, h, length, d = q.shape
    n, dv = idx.shape[-1], v.shape[-1]
    # empty_like keeps a dense input's strides (else contiguous): out in v's layout, so the
    # hybrid branch's transpose back to [b, l, h * dv] is a view
    out = torch.empty_like(v)
    lse = q.new_empty(b * h, length)
    st = _strides(q, k, v, out)
    ptrs = [kernels.ptr(t) for t in (q, k, v, idx, out, lse)]
    lib.sparse_attn_fwd(*ptrs, scale, length, n, d, dv, h, ctypes.addressof(st), b * h,
                        kernels.threads())
    return out, lse


def backward(q: Tensor, k: Tensor, v: Tensor, idx: Tensor, out: Tensor, lse: Tensor,
             dout: Tensor, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of `forward` (the same layouts; dq, dk, dv in q's, k's and v's layout where
    those are dense, else contiguous)."""
    lib = kernels.lib()
    q, k, v, out, dout = (_last_dim_dense(t) for t in (q, k, v, out, dout))
    idx = idx.to(torch.int32).contiguous()
    b, h, length, d = q.shape
    n, dv = idx.shape[-1], v.shape[-1]
    dq, dk, dvv = (torch.empty_like(t) for t in (q, k, v))
    st = _strides(q, k, v, out, dout, dq, dk, dvv)
    ptrs = [kernels.ptr(t) for t in (q, k, v, idx, out, lse, dout, dq, dk, dvv)]
    lib.sparse_attn_bwd(*ptrs, scale, length, n, d, dv, h, ctypes.addressof(st), b * h,
                        kernels.threads())
    return dq, dk, dvv


def available() -> bool:
    """Whether the native kernels built (else every caller takes its torch path)."""
    return kernels.available()


def union_rows(cat: Tensor) -> Tensor:
    """`union_indices` on concatenated int32 lists ``cat [..., width]`` (CPU), in place: each
    row sorted, repeats set to -1."""
    width = cat.shape[-1]
    rows = cat.numel() // width
    keys = int(cat.max()) + 1
    kernels.lib().union_rows(cat.data_ptr(), width, keys, rows, kernels.threads())
    return cat


def bucket_window(bin_q: Tensor, bin_k: Tensor, n: int, nbins: int) -> Tensor:
    """`bucket_window_indices` on non-negative int64 bins ``[..., L]`` (CPU): one ring of the n
    latest keys per bin; ``int32 [..., L, n]``."""
    bq, bk = bin_q.contiguous(), bin_k.contiguous()
    length = bq.shape[-1]
    rows = bq.numel() // max(length, 1)
    out = torch.empty(*bq.shape, n, dtype=torch.int32)
    kernels.lib().bucket_window(bq.data_ptr(), bk.data_ptr(), out.data_ptr(), length, n, nbins,
                                rows, kernels.threads())
    return out


def causal_topk(scores: Tensor, n: int) -> Tensor:
    """`causal_topk_indices` of ``scores [..., L]`` (CPU): one heap of n per row, O(L log n);
    ``int32 [..., L, n]``."""
    *lead, length = scores.shape
    x = scores.detach().float().reshape(-1, length).contiguous()
    out = torch.empty(x.shape[0], length, n, dtype=torch.int32)
    kernels.lib().causal_topk(x.data_ptr(), out.data_ptr(), length, n, x.shape[0],
                              kernels.threads())
    return out.reshape(*lead, length, n)


def lsh_window(q: Tensor, k: Tensor, planes: Tensor, n: int, argmax: bool) -> Tensor:
    """`lsh_indices(causal_center(q), causal_center(k), n, planes, rule)` in one native pass
    (CPU, float32): ``q, k [B, H|1, L, d]`` (any strides over B, H, L; a broadcast head is read
    with stride 0), ``planes [H|1, d, h]``; ``int32 [B, H, L, n]``."""
    b = max(q.shape[0], k.shape[0])
    heads = max(q.shape[1], k.shape[1], planes.shape[0])
    length, d = q.shape[-2], q.shape[-1]
    h = planes.shape[-1]
    q, k = (t.expand(b, heads, length, d) for t in (q, k))
    q, k = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k))
    planes = planes.float().contiguous()
    out = torch.empty(b, heads, length, n, dtype=torch.int32)
    ps = 0 if planes.shape[0] == 1 else d * h
    kernels.lib().lsh_window(q.data_ptr(), k.data_ptr(), planes.data_ptr(), out.data_ptr(),
                             heads, length, d, h, n, int(argmax), *q.stride()[:3],
                             *k.stride()[:3], ps, b * heads, kernels.threads())
    return out


def _rows_view(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, int, int]:
    """q, k ``[B, H|1, L, d]`` expanded to one shape, the feature dim contiguous; (b, heads)."""
    if q.shape != k.shape:
        b, heads = max(q.shape[0], k.shape[0]), max(q.shape[1], k.shape[1])
        q, k = (t.expand(b, heads, *q.shape[2:]) for t in (q, k))
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    return q, k, q.shape[0], q.shape[1]


def _scorer_weights(mlp) -> list[Tensor]:
    """The KS scorer's (w1, b1, w2, b2, w3, b3) as the kernels read them (nn.Linear layouts,
    contiguous float32; parameters already are, so this is no copy)."""
    w = [t for lin in (mlp[0], mlp[2], mlp[4]) for t in (lin.weight, lin.bias)]
    return [t if t.is_contiguous() else t.contiguous() for t in w]


def ks_scores(q: Tensor, k: Tensor, mlp, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """`KSPattern`'s inputs, scores (no gradient) and causal top-n in one native pass (CPU,
    float32): ``q, k [B, H|1, L, d]`` -> (inp ``[B, H, L, 2d]``, scores ``[B, H, L]``, idx
    ``int32 [B, H, L, n]``). ``mlp``: the pattern's Linear, ReLU, Linear, ReLU, Linear."""
    q, k, b, heads = _rows_view(q, k)
    length, d = q.shape[-2], q.shape[-1]
    w = _scorer_weights(mlp)
    hid = w[0].shape[0]
    inp = q.new_empty(b, heads, length, 2 * d)
    scores = q.new_empty(b, heads, length)
    idx = torch.empty(b, heads, length, n, dtype=torch.int32)
    kernels.lib().ks_scores(q.data_ptr(), k.data_ptr(), *[t.data_ptr() for t in w],
                            inp.data_ptr(), scores.data_ptr(), idx.data_ptr(), heads, length, d,
                            hid, n, *q.stride()[:3], *k.stride()[:3], b * heads,
                            kernels.threads())
    return inp, scores, idx


def ks_target(q: Tensor, k: Tensor, sel: Tensor, scale: float) -> Tensor:
    """`ks_ranking_loss`'s pairwise targets (CPU, float32, no gradient): ``q, k [B, H|1, L, d]``,
    sampled key positions ``sel [B, H, m]`` -> ``[B, H, m, m]``."""
    q, k, b, heads = _rows_view(q, k)
    m = sel.shape[-1]
    if sel.dtype != torch.int64 or tuple(sel.shape) != (b, heads, m) or not sel.is_contiguous():
        sel = sel.to(torch.int64).expand(b, heads, m).contiguous()
    target = q.new_empty(b, heads, m, m)
    kernels.lib().ks_target(q.data_ptr(), k.data_ptr(), sel.data_ptr(), target.data_ptr(), scale,
                            heads, q.shape[-2], q.shape[-1], m, *q.stride()[:3],
                            *k.stride()[:3], b * heads, kernels.threads())
    return target


def hax_pattern(q: Tensor, k: Tensor, planes: Tensor, mlp, n_lsh: int, n_ks: int, argmax: bool,
                sel: Tensor | None, scale: float) -> tuple[Tensor, Tensor, Tensor | None]:
    """`lsh_window`, `ks_scores`, `union_rows` of their two lists and, with ``sel``, `ks_target`
    in one native call (CPU, float32; `HAXPattern`'s fast path): ``q, k [B, H|1, L, d]``,
    ``planes [H|1, d, h]``, sampled positions ``sel [B, H, m]`` or None -> (idx ``int32
    [B, H, L, n_lsh + n_ks]``, the scorer's inputs ``[B, H, L, 2d]``, targets ``[B, H, m, m]``
    or None)."""
    q, k, b, heads = _rows_view(q, k)
    heads = max(heads, planes.shape[0])
    q, k = (t.expand(b, heads, *t.shape[2:]) for t in (q, k))
    length, d = q.shape[-2], q.shape[-1]
    planes = planes.float().contiguous()
    w = _scorer_weights(mlp)
    inp = q.new_empty(b, heads, length, 2 * d)
    scores = q.new_empty(b, heads, length)
    idx = torch.empty(b, heads, length, n_lsh + n_ks, dtype=torch.int32)
    plane_stride = 0 if planes.shape[0] == 1 else d * planes.shape[-1]
    m, target = 0, None
    if sel is not None:
        m = sel.shape[-1]
        if sel.dtype != torch.int64 or tuple(sel.shape) != (b, heads, m) or not sel.is_contiguous():
            sel = sel.to(torch.int64).expand(b, heads, m).contiguous()
        target = q.new_empty(b, heads, m, m)
    kernels.lib().hax_pattern(
        q.data_ptr(), k.data_ptr(), planes.data_ptr(), *[t.data_ptr() for t in w],
        kernels.ptr(sel), scale, inp.data_ptr(), scores.data_ptr(), kernels.ptr(target),
        idx.data_ptr(), heads, length, d, planes.shape[-1], n_lsh, int(argmax), w[0].shape[0],
        n_ks, m, *q.stride()[:3], *k.stride()[:3], plane_stride, b * heads, kernels.threads())
    return idx, inp, target


class _KSRankLoss(torch.autograd.Function):
    """`ks_ranking_loss` with KSPattern's `score_at` (the scorer re-run on the sampled rows) as
    one native call each way; gradients flow to the scorer's six parameters only."""

    @staticmethod
    def forward(ctx, inp, sel, target, w1, b1, w2, b2, w3, b3):
        b, heads, length, d2 = inp.shape
        rows, m, hid = b * heads, sel.shape[-1], w1.shape[0]
        h = inp.new_empty(2, rows * m * hid)
        x, loss = inp.new_empty(rows * m), inp.new_empty(())
        kernels.lib().ks_rank_fwd(inp.data_ptr(), sel.data_ptr(), target.data_ptr(),
                                  w1.data_ptr(), b1.data_ptr(), w2.data_ptr(), b2.data_ptr(),
                                  w3.data_ptr(), b3.data_ptr(), h[0].data_ptr(), h[1].data_ptr(),
                                  x.data_ptr(), loss.data_ptr(), rows, length, d2, hid, m)
        ctx.save_for_backward(inp, sel, target, w2, w3, h, x)
        ctx.sizes = (rows, length, d2, hid, m)
        return loss

    @staticmethod
    def backward(ctx, g):
        inp, sel, target, w2, w3, h, x = ctx.saved_tensors
        rows, length, d2, hid, m = ctx.sizes
        flat = inp.new_zeros(hid * d2 + hid + hid * hid + hid + hid + 1)
        grads = flat.split([hid * d2, hid, hid * hid, hid, hid, 1])
        kernels.lib().ks_rank_bwd(inp.data_ptr(), sel.data_ptr(), target.data_ptr(),
                                  w2.data_ptr(), w3.data_ptr(), h[0].data_ptr(), h[1].data_ptr(),
                                  x.data_ptr(), float(g), *[t.data_ptr() for t in grads], rows,
                                  length, d2, hid, m)
        shapes = ((hid, d2), (hid,), (hid, hid), (hid,), (1, hid), (1,))
        return (None, None, None, *(t.view(s) for t, s in zip(grads, shapes, strict=True)))


def ks_rank_loss(inp: Tensor, sel: Tensor, target: Tensor, mlp) -> Tensor:
    """The KS ranking loss from the scorer's inputs ``inp [B, H, L, 2d]`` (contiguous float32,
    CPU: as `ks_scores` makes them), the sampled positions ``sel [B, H, m]`` and their pairwise
    targets ``[B, H, m, m]`` (`ks_target`), differentiable in the scorer's parameters."""
    if sel.dtype != torch.int64 or not sel.is_contiguous():
        sel = sel.to(torch.int64).contiguous()
    return _KSRankLoss.apply(inp.contiguous(), sel, target.contiguous(), *_scorer_weights(mlp))
