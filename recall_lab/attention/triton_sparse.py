"""Triton kernels of the sparse-attention op (forward and backward), used on CUDA.

Layout: ``q, k: [BH, L, d]``, ``v: [BH, L, dv]``, ``idx: int32 [BH, L, n]`` (-1 = empty slot).
One program per (query row, batch*head): it walks the row's slots in tiles of ``BLOCK_N``,
gathers the listed keys/values and keeps an online softmax (running max and sum) in fp32, so any
n works (the ``full`` pattern included). The forward stores the output (fp32) and the row's
log-sum-exp (``-inf`` for an empty row, whose output is 0). The backward recomputes the
probabilities from the log-sum-exp, writes dq per row and scatters dk, dv into fp32 buffers with
atomics. The kernels use elementwise products and reductions, no ``tl.dot``: with q/k sizes of
16 and gathered rows there is no tile to feed tensor cores, and it keeps the interpreter exact.

Importing this module imports Triton; :mod:`recall_lab.attention.sparse` imports it lazily.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

__all__ = ["forward", "backward"]


@triton.jit
def _fwd_kernel(Q, K, V, IDX, O, LSE, scale, L, NK,
                D: tl.constexpr, DV: tl.constexpr, BD: tl.constexpr, BDV: tl.constexpr,
                BLOCK_N: tl.constexpr):
    i = tl.program_id(0)
    bh = tl.program_id(1)
    offs_d = tl.arange(0, BD)
    offs_v = tl.arange(0, BDV)
    md = offs_d < D
    mv = offs_v < DV
    row = bh.to(tl.int64) * L
    q = tl.load(Q + (row + i) * D + offs_d, mask=md, other=0.0).to(tl.float32)
    m_i = tl.max(tl.full([BLOCK_N], float("-inf"), tl.float32), 0)
    l_i = tl.sum(tl.zeros([BLOCK_N], tl.float32), 0)
    acc = tl.zeros([BDV], tl.float32)
    for start in range(0, NK, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        j = tl.load(IDX + (row + i) * NK + offs_n, mask=offs_n < NK, other=-1)
        valid = j >= 0
        jr = row + tl.where(valid, j, 0).to(tl.int64)
        kg = tl.load(K + jr[:, None] * D + offs_d[None, :], mask=valid[:, None] & md[None, :],
                     other=0.0).to(tl.float32)
        s = tl.sum(kg * q[None, :], 1) * scale
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe)
        vg = tl.load(V + jr[:, None] * DV + offs_v[None, :], mask=valid[:, None] & mv[None, :],
                     other=0.0).to(tl.float32)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * vg, 0)
        m_i = m_new
    nonempty = l_i > 0
    out = tl.where(nonempty, acc / tl.where(nonempty, l_i, 1.0), 0.0)
    tl.store(O + (row + i) * DV + offs_v, out, mask=mv)
    lse = tl.where(nonempty, m_i + tl.log(tl.where(nonempty, l_i, 1.0)), float("-inf"))
    tl.store(LSE + row + i, lse)


@triton.jit
def _bwd_kernel(Q, K, V, IDX, O, LSE, DO, DQ, DK, DVV, scale, L, NK,
                D: tl.constexpr, DV: tl.constexpr, BD: tl.constexpr, BDV: tl.constexpr,
                BLOCK_N: tl.constexpr):
    i = tl.program_id(0)
    bh = tl.program_id(1)
    offs_d = tl.arange(0, BD)
    offs_v = tl.arange(0, BDV)
    md = offs_d < D
    mv = offs_v < DV
    row = bh.to(tl.int64) * L
    q = tl.load(Q + (row + i) * D + offs_d, mask=md, other=0.0).to(tl.float32)
    o = tl.load(O + (row + i) * DV + offs_v, mask=mv, other=0.0).to(tl.float32)
    do = tl.load(DO + (row + i) * DV + offs_v, mask=mv, other=0.0).to(tl.float32)
    delta = tl.sum(o * do, 0)
    lse = tl.load(LSE + row + i)
    lse = tl.where(lse == float("-inf"), 0.0, lse)
    dq = tl.zeros([BD], tl.float32)
    for start in range(0, NK, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        j = tl.load(IDX + (row + i) * NK + offs_n, mask=offs_n < NK, other=-1)
        valid = j >= 0
        jr = row + tl.where(valid, j, 0).to(tl.int64)
        kmask = valid[:, None] & md[None, :]
        vmask = valid[:, None] & mv[None, :]
        kg = tl.load(K + jr[:, None] * D + offs_d[None, :], mask=kmask, other=0.0).to(tl.float32)
        vg = tl.load(V + jr[:, None] * DV + offs_v[None, :], mask=vmask, other=0.0).to(tl.float32)
        s = tl.sum(kg * q[None, :], 1) * scale
        p = tl.where(valid, tl.exp(s - lse), 0.0)
        dp = tl.sum(vg * do[None, :], 1)
        ds = p * (dp - delta) * scale
        dq += tl.sum(ds[:, None] * kg, 0)
        tl.atomic_add(DK + jr[:, None] * D + offs_d[None, :], ds[:, None] * q[None, :], mask=kmask)
        tl.atomic_add(DVV + jr[:, None] * DV + offs_v[None, :], p[:, None] * do[None, :],
                      mask=vmask)
    tl.store(DQ + (row + i) * D + offs_d, dq, mask=md)


def _meta(d: int, dv: int, n: int) -> dict:
    return dict(D=d, DV=dv, BD=triton.next_power_of_2(d), BDV=triton.next_power_of_2(dv),
                BLOCK_N=min(64, triton.next_power_of_2(max(n, 1))))


def forward(q: Tensor, k: Tensor, v: Tensor, idx: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """Returns ``(out fp32 [BH, L, dv], lse fp32 [BH, L])``."""
    q, k, v, idx = (t.contiguous() for t in (q, k, v, idx))
    bh, length, d = q.shape
    dv, n = v.shape[-1], idx.shape[-1]
    out = torch.empty(bh, length, dv, device=q.device, dtype=torch.float32)
    lse = torch.empty(bh, length, device=q.device, dtype=torch.float32)
    if bh * length:
        _fwd_kernel[(length, bh)](q, k, v, idx, out, lse, scale, length, n, **_meta(d, dv, n))
    return out, lse


def backward(q: Tensor, k: Tensor, v: Tensor, idx: Tensor, out: Tensor, lse: Tensor,
             dout: Tensor, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """Returns fp32 ``(dq, dk, dv)``."""
    q, k, v, idx, out, lse, dout = (t.contiguous() for t in (q, k, v, idx, out, lse, dout))
    bh, length, d = q.shape
    dv, n = v.shape[-1], idx.shape[-1]
    dq = torch.empty(bh, length, d, device=q.device, dtype=torch.float32)
    dk = torch.zeros(bh, length, d, device=q.device, dtype=torch.float32)
    dvv = torch.zeros(bh, length, dv, device=q.device, dtype=torch.float32)
    if bh * length:
        _bwd_kernel[(length, bh)](q, k, v, idx, out, lse, dout, dq, dk, dvv, scale, length, n,
                                  **_meta(d, dv, n))
    return dq, dk, dvv
