"""The sparse-attention op: softmax over the selected keys only (joint-recall paper, Eq. 2).

``sparse_attention(q, k, v, idx, scale=None)``: ``q, k: [B, H, L, d]``, ``v: [B, H, L, dv]``,
``idx: int [B, H, L, n]`` (broadcastable over B and H); ``idx[..., i, s]`` is a key position or
-1 (empty slot). ``out_i = sum_s softmax_s(scale * q_i . k_{idx_s}) v_{idx_s}`` over the
non-empty slots; a row without any key outputs zeros (never uniform attention). A key listed
twice in a row counts twice (patterns never emit duplicates). ``scale`` defaults to ``d**-0.5``.

Two backends behind one autograd function:

* ``torch`` (CPU default, and the reference): gathers the selected keys/values chunk by chunk
  over queries, so peak extra memory is O(chunk * n * d) rather than O(L * n * d); the backward is
  hand-written (recomputes the chunk's probabilities from the saved log-sum-exp and scatters dk,
  dv with ``index_add_``), so autograd never keeps gathered ``[B, H, L, n, d]`` tensors.
  Half/bfloat16 inputs are computed in float32.
* ``triton`` (CUDA default when Triton imports): one program per (query, batch*head) with an
  online softmax over tiles of slots; the backward scatters dk, dv with fp32 atomics (so GPU
  gradients are not bit-deterministic; tests/gpu/ measures how far two runs differ). Tested
  against the torch backend under ``TRITON_INTERPRET=1`` on CPU and compiled in tests/gpu/.
  Before ``auto`` first dispatches to it, one small case is checked against ``torch``
  (:func:`check_triton`, recall_lab/kernel_check.py); if it differs, ``auto`` runs ``torch``.

* ``native`` (CPU default where the native kernels build, recall_lab/native): the gather math one
  query at a time in C, nothing gathered or re-laid out (attention/native.py). Float32; tested
  against ``torch``.

* ``csr`` (CPU default without the native kernels): the same math with torch's sparse CSR kernels:
  the scores are a sampled dense-dense product (``torch.sparse.sampled_addmm``), ``out = P @ V`` and
  the backward's ``dq = dS @ K``, ``dk = dS^T @ Q``, ``dv = P^T @ dO`` are CSR x dense products (the
  transposed pattern by one stable argsort of the key indices). Memory O(L n + L (d + dv)); measured
  much faster than the gather path on CPU (recall_lab/bench/attention.py). Tested against ``torch``.

The package imports without Triton; ``backend="triton"`` then raises.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from recall_lab import kernel_check
from recall_lab import native as kernels
from recall_lab.attention import native
from recall_lab.generators.errors import RecallLabError

__all__ = ["sparse_attention", "triton_available", "check_triton", "BACKENDS"]

BACKENDS = ("auto", "torch", "csr", "native", "triton")
# Elements of one gathered chunk [BH, C, n, width]; 2^22 fp32 = 16 MiB.
_CHUNK_ELEMS = 1 << 22
# csr: store only the filled slots when at most this fraction is filled (see _Layout).
_COMPACT_FILL = 0.75


def triton_available() -> bool:
    try:
        from recall_lab.attention import triton_sparse  # noqa: F401
    except Exception:  # ImportError, or a Triton that fails to initialise
        return False
    return True


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _chunk(length: int, bh: int, n: int, width: int) -> int:
    return max(1, min(length, _CHUNK_ELEMS // max(1, bh * n * width)))


def _csr(crow: Tensor, col: Tensor, values: Tensor, size: int) -> Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "CSR support is in beta"
        return torch.sparse_csr_tensor(crow, col, values.reshape(-1), (size, size),
                                       check_invariants=False)


class _Layout:
    """The block-diagonal ``[BH*L, BH*L]`` CSR pattern of ``idx [BH, L, n]``: row pointers and
    global columns, row-major, plus the ``[BH, L, n]`` mask of non-empty slots.

    When at most :data:`_COMPACT_FILL` of the slots are filled, empty slots are left out (at
    short lengths most LSH slots are empty: 46% of HAX slots filled at the training bench's
    L = 158, and each sparse product costs per stored entry); otherwise every slot is stored,
    empty ones as column 0 of their block with value 0 (packing costs more than it saves there).
    """

    def __init__(self, idx: Tensor) -> None:
        bh, length, n = idx.shape
        self.shape, self.rows, self.n = idx.shape, bh * length, n
        self.valid = idx >= 0
        base = (torch.arange(bh, device=idx.device) * length).view(bh, 1, 1)
        filled = int(self.valid.sum())
        self.compact = filled <= _COMPACT_FILL * idx.numel()
        if self.compact:
            self.crow = torch.zeros(self.rows + 1, dtype=torch.int64, device=idx.device)
            self.crow[1:] = self.valid.view(-1, n).sum(-1).cumsum(0)
            self.pos = self.valid.view(-1).nonzero().squeeze(1)  # flat slots, row-major
            self.col = (idx + base).view(-1).index_select(0, self.pos)
        else:
            self.crow = torch.arange(0, self.rows * n + 1, n, device=idx.device)
            self.col = idx.clamp_min(0).to(torch.int64).add_(base).reshape(-1)

    def pack(self, x: Tensor) -> Tensor:
        """``[BH, L, n]`` -> the stored entries' values."""
        return x.reshape(-1).index_select(0, self.pos) if self.compact else x.reshape(-1)

    def unpack(self, vals: Tensor) -> Tensor:
        """Stored entries' values -> ``[BH, L, n]`` (0 in left-out slots)."""
        if self.compact:
            flat = vals.new_zeros(self.valid.numel())
            return flat.index_copy_(0, self.pos, vals).view(self.shape)
        return vals.view(self.shape)

    def entry_rows(self) -> Tensor:
        """The query row of every stored entry."""
        if self.compact:
            return self.pos // self.n
        return torch.arange(self.rows, device=self.col.device).repeat_interleave(self.n)

    def csr(self, vals: Tensor) -> Tensor:
        return _csr(self.crow, self.col, vals, self.rows)

    def transposed(self, *vals: Tensor) -> list[Tensor]:
        """The transposed pattern (rows = keys, columns = queries) carrying ``vals``: entries
        sorted by key, stably (int32 keys sort about twice as fast as int64)."""
        col = self.col
        order = torch.argsort(col.to(torch.int32) if self.rows < 2**31 else col, stable=True)
        crow_t = torch.zeros(self.rows + 1, dtype=torch.int64, device=col.device)
        crow_t[1:] = torch.bincount(col, minlength=self.rows).cumsum(0)
        moved = [v[order] for v in vals]
        # in place where possible: this is the backward's memory peak
        qrow = self.entry_rows()[order] if self.compact else order.floor_divide_(self.n)
        return [_csr(crow_t, qrow, v, self.rows) for v in moved]


def _masked_softmax_(sc: Tensor, valid: Tensor) -> Tensor:
    """Softmax over the valid slots of ``sc [.., n]``, in place (sc is a fresh buffer)."""
    sc = sc.masked_fill_(~valid, float("-inf"))
    m = sc.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = sc.sub_(m).exp_()
    return p.div_(p.sum(-1, keepdim=True).clamp_min(torch.finfo(p.dtype).tiny))


def _csr_forward(q: Tensor, k: Tensor, v: Tensor, idx: Tensor, scale: float
                 ) -> tuple[Tensor, Tensor]:
    """CPU fast path: scores by a sampled dense-dense product (SDDMM), ``out = P @ V`` by a
    CSR x dense product; no gathered ``[.., n, dv]`` tensor. Returns ``(out, p [BH, L, n])``:
    the probabilities (O(L n), 0 in empty slots) are kept for the backward instead of a
    log-sum-exp."""
    bh, length, _ = q.shape
    lay = _Layout(idx)
    if lay.col.numel() == 0:
        return q.new_zeros(bh, length, v.shape[-1]), q.new_zeros(idx.shape)
    qf, kf, vf = q.reshape(lay.rows, -1), k.reshape(lay.rows, -1), v.reshape(lay.rows, -1)
    pat = lay.csr(q.new_zeros(lay.col.shape))
    sc = torch.sparse.sampled_addmm(pat, qf, kf.t(), beta=0.0, alpha=scale).values()
    p = _masked_softmax_(lay.unpack(sc), lay.valid)
    out = lay.csr(lay.pack(p)) @ vf
    return out.view(bh, length, -1), p


def _csr_backward(q: Tensor, k: Tensor, v: Tensor, idx: Tensor, out: Tensor, p: Tensor,
                  dout: Tensor, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    lay = _Layout(idx)
    if lay.col.numel() == 0:
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    qf, kf, vf, dof = (t.reshape(lay.rows, -1) for t in (q, k, v, dout))
    pat = lay.csr(q.new_zeros(lay.col.shape))
    dp = lay.unpack(torch.sparse.sampled_addmm(pat, dof, vf.t(), beta=0.0).values())
    delta = torch.linalg.vecdot(dout, out).unsqueeze(-1)
    ds = lay.pack(dp.sub_(delta).mul_(p).mul_(scale))
    dq = lay.csr(ds) @ kf
    ds_t, p_t = lay.transposed(ds, lay.pack(p))
    return dq.view_as(q), (ds_t @ qf).view_as(k), (p_t @ dof).view_as(v)


def _torch_forward(q: Tensor, k: Tensor, v: Tensor, idx: Tensor, scale: float
                   ) -> tuple[Tensor, Tensor]:
    """``q, k, v: [BH, L, *]`` (compute dtype), ``idx: int64 [BH, L, n]`` -> (out, lse [BH, L])."""
    bh, length, _ = q.shape
    n = idx.shape[-1]
    kf, vf = k.reshape(bh * length, -1), v.reshape(bh * length, -1)
    base = (torch.arange(bh, device=q.device) * length).view(bh, 1, 1)
    out = q.new_empty(bh, length, v.shape[-1])
    lse = q.new_empty(bh, length)
    step = _chunk(length, bh, n, max(k.shape[-1], v.shape[-1]))
    for s in range(0, length, step):
        e = min(length, s + step)
        ic = idx[:, s:e]
        valid = ic >= 0
        flat = base + ic.clamp_min(0)
        sc = torch.einsum("bcnd,bcd->bcn", kf[flat], q[:, s:e]) * scale
        sc = sc.masked_fill(~valid, float("-inf"))
        m = sc.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(sc - m)
        den = p.sum(-1, keepdim=True)
        lse[:, s:e] = (m + den.log()).squeeze(-1)
        p = p / den.clamp_min(torch.finfo(p.dtype).tiny)
        out[:, s:e] = torch.einsum("bcn,bcnd->bcd", p, vf[flat])
    return out, lse


def _torch_backward(q: Tensor, k: Tensor, v: Tensor, idx: Tensor, out: Tensor, lse: Tensor,
                    dout: Tensor, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    bh, length, dq_w = q.shape
    n = idx.shape[-1]
    kf, vf = k.reshape(bh * length, -1), v.reshape(bh * length, -1)
    base = (torch.arange(bh, device=q.device) * length).view(bh, 1, 1)
    dq = torch.empty_like(q)
    dk = torch.zeros_like(kf)
    dv = torch.zeros_like(vf)
    delta = (dout * out).sum(-1)
    lse_safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    step = _chunk(length, bh, n, max(k.shape[-1], v.shape[-1]))
    for s in range(0, length, step):
        e = min(length, s + step)
        ic = idx[:, s:e]
        valid = ic >= 0
        flat = base + ic.clamp_min(0)
        kg, vg, qc, doc = kf[flat], vf[flat], q[:, s:e], dout[:, s:e]
        sc = torch.einsum("bcnd,bcd->bcn", kg, qc) * scale
        p = torch.exp(sc - lse_safe[:, s:e, None]).masked_fill(~valid, 0.0)
        dp = torch.einsum("bcnd,bcd->bcn", vg, doc)
        ds = p * (dp - delta[:, s:e, None]) * scale
        dq[:, s:e] = torch.einsum("bcn,bcnd->bcd", ds, kg)
        fl = flat.reshape(-1)
        dk.index_add_(0, fl, (ds[..., None] * qc[:, :, None, :]).reshape(-1, dq_w))
        dv.index_add_(0, fl, (p[..., None] * doc[:, :, None, :]).reshape(-1, vf.shape[-1]))
    return dq, dk.view_as(k), dv.view_as(v)


class _SparseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, idx, scale, backend):
        b, h, length, d = q.shape
        dv = v.shape[-1]
        cdt = _compute_dtype(q.dtype)
        q3 = q.reshape(b * h, length, d)
        k3 = k.reshape(b * h, length, d)
        v3 = v.reshape(b * h, length, dv)
        i3 = idx.expand(b, h, length, idx.shape[-1]).reshape(b * h, length, -1)
        if backend == "triton":
            from recall_lab.attention import triton_sparse

            i3 = i3.to(torch.int32).contiguous()
            out, stats = triton_sparse.forward(q3, k3, v3, i3, scale)
        elif backend == "csr":  # any integer dtype (patterns give int32: half the saved bytes)
            out, stats = _csr_forward(q3.to(cdt), k3.to(cdt), v3.to(cdt), i3, scale)
        elif backend == "native":
            # [B, H, L, *] through their strides (the hybrid branch's permuted q, k, v: no
            # copies), saved as they are; the output comes in v's layout
            q3, k3, v3 = (t.to(cdt) for t in (q, k, v))
            i3 = i3.to(torch.int32).contiguous()
            out, stats = native.forward(q3, k3, v3, i3, scale)
        else:
            i3 = i3.to(torch.int64)
            out, stats = _torch_forward(q3.to(cdt), k3.to(cdt), v3.to(cdt), i3, scale)
        ctx.save_for_backward(q3, k3, v3, i3, out, stats)
        ctx.scale, ctx.backend, ctx.shape = scale, backend, (b, h, length, d, dv)
        ctx.dtypes = (q.dtype, k.dtype, v.dtype)
        return out.to(v.dtype).view(b, h, length, dv)

    @staticmethod
    def backward(ctx, dout):
        q3, k3, v3, i3, out, stats = ctx.saved_tensors
        b, h, length, d, dv = ctx.shape
        do3 = dout if ctx.backend == "native" else dout.reshape(b * h, length, dv)
        if ctx.backend == "triton":
            from recall_lab.attention import triton_sparse

            dq, dk, dvv = triton_sparse.backward(q3, k3, v3, i3, out, stats, do3, ctx.scale)
        else:
            cdt = _compute_dtype(q3.dtype)
            bwd = {"csr": _csr_backward, "native": native.backward}.get(ctx.backend,
                                                                         _torch_backward)
            dq, dk, dvv = bwd(q3.to(cdt), k3.to(cdt), v3.to(cdt), i3, out, stats,
                                          do3.to(cdt), ctx.scale)
        qt, kt, vt = ctx.dtypes
        return (dq.to(qt).view(b, h, length, d), dk.to(kt).view(b, h, length, d),
                dvv.to(vt).view(b, h, length, dv), None, None, None)


def default_backend(device: torch.device | str) -> str:
    """What ``backend="auto"`` runs on `device`: CPU ``native`` when the native kernels built,
    else ``csr``; CUDA ``triton`` when importable, else ``torch``. The one place that decides
    (``recall-lab info`` reports it; float64 inputs on the CPU run ``csr``)."""
    if torch.device(device).type == "cuda":
        return "triton" if triton_available() else "torch"
    return "native" if kernels.available() else "csr"


TRITON_CHECK = "triton sparse attention"
# fp32 kernel without tl.dot: measured errors are ~1e-7 (order of sums, atomics); a wrong kernel
# is off by O(1)
_TRITON_TOL = 1e-3


def _triton_case(device: torch.device | str) -> tuple[dict[str, Tensor], Tensor]:
    """One small case that covers the kernel's branches: two 64-slot tiles (n = 70), empty
    slots, an empty row, a key listed twice, dims that are not powers of two."""
    gen = torch.Generator().manual_seed(0)
    b, h, length, d, dv, n = 1, 2, 37, 12, 20, 70
    qkv = {name: torch.randn(b, h, length, w, generator=gen).to(device)
           for name, w in (("q", d), ("k", d), ("v", dv))}
    pos = torch.arange(length)[:, None]
    idx = torch.randint(0, length, (b, h, length, n), generator=gen) % (pos + 1)
    idx = idx.masked_fill(torch.rand(idx.shape, generator=gen) < 0.4, -1)
    idx[..., 5, :] = -1  # an empty row: output 0
    idx[..., 9, :2] = 3  # a duplicate key
    return qkv, idx.to(torch.int32).to(device)


def check_triton(device: torch.device | str = "cuda") -> bool:
    """Whether ``auto`` may dispatch to the Triton kernels on `device`: on the first call in the
    process, :data:`TRITON_CHECK` runs :func:`_triton_case` through ``triton`` and ``torch``
    (output and every gradient) and records the verdict (recall_lab/kernel_check.py)."""
    def check() -> dict[str, float]:
        qkv, idx = _triton_case(device)
        return kernel_check.errors(
            lambda **t: sparse_attention(**t, idx=idx, backend="triton"),
            lambda **t: sparse_attention(**t, idx=idx, backend="torch"), qkv)

    return kernel_check.checked(TRITON_CHECK, check, _TRITON_TOL, fallback="torch")


def sparse_attention(q: Tensor, k: Tensor, v: Tensor, idx: Tensor, scale: float | None = None,
                     *, backend: str = "auto") -> Tensor:
    """Attention of each query over its listed keys only; see the module docstring.

    ``backend``: ``auto`` (CPU: ``native`` when built, else ``csr``; CUDA: ``triton`` when
    importable, else ``torch``), ``torch`` (the gather reference), ``csr``, ``native`` or
    ``triton``.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise RecallLabError("sparse_attention expects q, k, v of shape [B, H, L, d]")
    if q.shape != k.shape or v.shape[:3] != q.shape[:3]:
        raise RecallLabError(f"sparse_attention shapes disagree: q {tuple(q.shape)}, "
                             f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if idx.dim() != 4 or idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise RecallLabError("idx must be an integer tensor [B, H, L, n] (-1 = empty slot)")
    b, h, length, _ = q.shape
    # by hand: torch.broadcast_shapes took 20-40 us a call, a tenth of the native op at the
    # hybrids' sizes
    if any(got not in (1, want) for got, want in zip(idx.shape[:3], (b, h, length), strict=True)):
        raise RecallLabError(f"idx of shape {tuple(idx.shape)} does not broadcast to "
                             f"[{b}, {h}, {length}, n]")
    if idx.shape[2] != length:
        raise RecallLabError(f"idx covers {idx.shape[2]} queries, expected {length}")
    if idx.numel() and int(idx.max()) >= length:
        raise RecallLabError(f"idx lists key position {int(idx.max())} >= sequence length {length}")
    if backend not in BACKENDS:
        raise RecallLabError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if backend == "auto":
        backend = default_backend(q.device)
        if backend == "triton" and not check_triton(q.device):
            backend = "torch"
        if backend == "native" and torch.float64 in (q.dtype, k.dtype, v.dtype):
            backend = "csr"  # the native kernel computes in float32
    elif backend == "triton" and not triton_available():
        raise RecallLabError("backend='triton' requested but Triton is not importable")
    elif backend == "native" and not kernels.available():
        raise RecallLabError(f"backend='native' requested but {kernels.load()[1]}")
    if backend == "native" and (q.device.type != "cpu"
                                or torch.float64 in (q.dtype, k.dtype, v.dtype)):
        raise RecallLabError("backend='native' takes CPU tensors in float32/16")
    if backend == "csr" and idx.shape[-1] > length:
        # torch's sampled_addmm rejects more stored entries than the dense size (n > L only
        # happens on toy lengths): the gather path gives the same result.
        backend = "torch"
    if scale is None:
        scale = q.shape[-1] ** -0.5
    return _SparseAttention.apply(q, k, v, idx, float(scale), backend)
