"""The sparse-attention op's ``native`` backend: recall_lab/native/attention.c via ctypes.

Same math as the ``torch`` gather reference (sparse.py), one query at a time: scores of the listed
keys, softmax, weighted sum of their values; the backward recomputes the probabilities from the
saved log-sum-exp and accumulates dk, dv into the keys' rows. Nothing is gathered into new
buffers and no sparse structure is built, which is where the ``csr`` backend spent most of its
time (index layout, the transposed pattern's argsort, copies; bench attention). Rows (batch x
head) are split over torch's OpenMP threads (recall_lab/native); each row's keys are only written by
its own queries, so the result does not depend on the thread count. Float32 only (half inputs
are widened by the op, float64 goes to ``csr``/``torch``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from recall_lab import native as kernels


def forward(q: Tensor, k: Tensor, v: Tensor, idx: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """``q, k [R, L, d]``, ``v [R, L, dv]`` float32, ``idx int [R, L, n]`` -> (out, lse)."""
    lib = kernels.lib()
    q, k, v = (t.contiguous() for t in (q, k, v))
    idx = idx.to(torch.int32).contiguous()
    rows, length, d = q.shape
    n, dv = idx.shape[-1], v.shape[-1]
    out = q.new_empty(rows, length, dv)
    lse = q.new_empty(rows, length)
    ptrs = [kernels.ptr(t) for t in (q, k, v, idx, out, lse)]
    lib.sparse_attn_fwd(*ptrs, scale, length, n, d, dv, rows, kernels.threads())
    return out, lse


def backward(q: Tensor, k: Tensor, v: Tensor, idx: Tensor, out: Tensor, lse: Tensor,
             dout: Tensor, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    lib = kernels.lib()
    q, k, v, out, lse, dout = (t.contiguous() for t in (q, k, v, out, lse, dout))
    idx = idx.to(torch.int32).contiguous()
    rows, length, d = q.shape
    n, dv = idx.shape[-1], v.shape[-1]
    dq, dk, dvv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ptrs = [kernels.ptr(t) for t in (q, k, v, idx, out, lse, dout, dq, dk, dvv)]
    lib.sparse_attn_bwd(*ptrs, scale, length, n, d, dv, rows, kernels.threads())
    return dq, dk, dvv
