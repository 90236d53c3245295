"""CPU state-space duality (Mamba2 SSD): chunked; autograd plus two hand-written backward pieces.

Same signature and layouts as `ssd_ref` / mamba-ssm's `mamba_chunk_scan_combined`.

The sequence is cut into chunks of `chunk_size`. Inside a chunk the output is a masked
"attention" matmul, y = (C B^T * L) (dt x), with L[l, s] = exp(cumA_l - cumA_s) for s <= l
(differences of cumulative log-decays, exponentiated only where s <= l, so never overflowing);
each chunk also emits its end state from a zero start. A short sequential pass over chunks carries
the state (one step per chunk), and its contribution C_l exp(cumA_l) S_prev is added. Cost is
O(l T (n + p)) per head with T = chunk_size; memory O(b h l T) for the intra-chunk decay matrix.
Autograd differentiates the whole; the intra-chunk product and the batched matmuls have their own
backward (`_IntraChunk`, `_BatchedMatmul`). With the chunk loop unbound once, these took one
layer's fwd+bwd at B=16, L=256, 8 heads x 16, N=32, chunk 64 from ~43 to ~33 ms (1 thread).
Decays use exp2 with log2-scaled A (torch's exp measured ~6x slower than exp2 on this CPU build).

`reset` (chunk starts, see reference.py) is not written as -inf into the cumulative log-decays
(differences of two -inf would be NaN); instead each position gets a segment id, the number of
resets up to it inside its chunk, and every decay that would cross a reset is masked to 0: the
intra-chunk matrix keeps s <= l of the same segment, a chunk's end state sums its last segment
only, and the incoming state reaches (and passes) the chunk only before its first reset.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from recall_lab.generators.errors import RecallLabError
from recall_lab.ssm.reference import compute_dtype, reset_mask
from recall_lab.ssm.scan import LOG2E

LN2 = 0.6931471805599453


class _BatchedMatmul(torch.autograd.Function):
    """a @ b over matching leading dims; backward as two plain bmm calls on contiguous operands.

    Autograd's N-d matmul backward was seen falling back to one small GEMM per batch entry when
    the incoming gradient was not contiguous; this one makes it contiguous first.
    """

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        out = torch.bmm(a.reshape(-1, m, k), b.reshape(-1, k, n))
        return out.view(*a.shape[:-2], m, n)

    @staticmethod
    def backward(ctx, g: Tensor):
        a, b = ctx.saved_tensors
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        g3 = g.contiguous().view(-1, m, n)
        ga = gb = None
        if ctx.needs_input_grad[0]:
            bt = b.reshape(-1, k, n).transpose(1, 2).contiguous()
            ga = torch.bmm(g3, bt).view(a.shape)
        if ctx.needs_input_grad[1]:
            at = a.reshape(-1, m, k).transpose(1, 2).contiguous()
            gb = torch.bmm(at, g3).view(b.shape)
        return ga, gb


def _bmm(a: Tensor, b: Tensor) -> Tensor:
    return _BatchedMatmul.apply(a, b)


def _segment_decay(acs: Tensor, seg: Tensor | None = None) -> Tensor:
    """L[..., l, s] = 2^(acs_l - acs_s) for s <= l, else 0 (only s <= l is exponentiated).

    With segment ids seg (broadcasting to acs), also 0 unless seg_l == seg_s (no reset between).
    """
    T = acs.shape[-1]
    mask = torch.ones(T, T, dtype=torch.bool, device=acs.device).tril()
    if seg is not None:
        mask = mask & (seg.unsqueeze(-1) == seg.unsqueeze(-2))
    diff = acs.unsqueeze(-1) - acs.unsqueeze(-2)
    return torch.exp2(diff.masked_fill_(~mask, float("-inf")))


class _IntraChunk(torch.autograd.Function):
    """y = (L(acs) * CB) @ x inside each chunk, with L the causal decay matrix above.

    acs: [b, g, c, hg, T] cumulative log2-decays; CB: [b, g, c, 1, T, T] (C_l . B_s, shared by
    the hg heads of a group); x: [b, g, c, hg, T, p] (dt-scaled input). Saves L, CB, x and
    recomputes the product in backward (one [.., T, T] tensor per layer instead of two); the
    decay gradient is dacs = ln2 (rowsum(G) - colsum(G)) with G = dM * CB * L.
    """

    @staticmethod
    def forward(ctx, acs: Tensor, CB: Tensor, x: Tensor, seg: Tensor | None) -> Tensor:
        L = _segment_decay(acs, seg)
        ctx.save_for_backward(L, CB, x)
        return _bmm_nd(L * CB, x)

    @staticmethod
    def backward(ctx, gy: Tensor):
        L, CB, x = ctx.saved_tensors
        gy = gy.contiguous()
        gx = _bmm_nd((L * CB).transpose(-1, -2), gy)
        P = _bmm_nd(gy, x.transpose(-1, -2)).mul_(L)  # dM * L (zero above the diagonal)
        gCB = P.sum(3, keepdim=True)
        G = P.mul_(CB)
        gacs = (G.sum(-1) - G.sum(-2)).mul_(LN2)
        return gacs, gCB, gx, None


def _bmm_nd(a: Tensor, b: Tensor) -> Tensor:
    """a @ b over matching leading dims as one torch.bmm (no autograd)."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    return torch.bmm(a.reshape(-1, m, k), b.reshape(-1, k, n)).view(*a.shape[:-2], m, n)


def _check(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor) -> tuple[int, int]:
    if x.dim() != 4:
        raise RecallLabError(f"x must be [b, l, h, p], got {tuple(x.shape)}")
    b, length, nh, _ = x.shape
    if dt.shape != (b, length, nh) or A.shape != (nh,):
        raise RecallLabError(f"dt must be [b, l, h] and A [h]; got {tuple(dt.shape)}, "
                             f"{tuple(A.shape)}")
    if B.dim() != 4 or B.shape[:2] != (b, length) or C.shape != B.shape:
        raise RecallLabError(f"B and C must be [b, l, g, n]; got {tuple(B.shape)}, "
                             f"{tuple(C.shape)}")
    g = B.shape[2]
    if nh % g:
        raise RecallLabError(f"{nh} heads do not split into {g} groups")
    return g, nh // g


def prepare_ssd_inputs(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
                       dt_bias: Tensor | None, dt_softplus: bool
                       ) -> tuple[torch.dtype, Tensor, Tensor]:
    """Checks the `ssd_ref` contract; returns (compute dtype, x, dt with bias and softplus) in
    that dtype. Shared by every CPU core (torch-chunked, native)."""
    _check(x, dt, A, B, C)
    ct = compute_dtype(x, dt, A, B, C)
    dt = dt.to(ct)
    if dt_bias is not None:
        dt = dt + dt_bias.to(ct)
    if dt_softplus:
        dt = F.softplus(dt)
    return ct, x.to(ct), dt


def finish_ssd_output(y: Tensor, x_in: Tensor, D: Tensor | None, z: Tensor | None,
                      dtype_in: torch.dtype) -> Tensor:
    """y [b, l, h, p] of the core -> + D x, times silu(z), in the input's dtype."""
    if D is not None:
        Dc = D.to(y.dtype)
        y = y + x_in * (Dc[:, None] if Dc.dim() == 1 else Dc)
    if z is not None:
        y = y * F.silu(z.to(y.dtype))
    return y.to(dtype_in)


def ssd_torch(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    chunk_size: int = 64,
    D: Tensor | None = None,
    z: Tensor | None = None,
    dt_bias: Tensor | None = None,
    dt_softplus: bool = False,
    initial_states: Tensor | None = None,
    return_final_states: bool = False,
    reset: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Chunked SSD; same contract as `ssd_ref`."""
    if chunk_size < 1:
        raise RecallLabError(f"chunk_size must be >= 1, got {chunk_size}")
    ct, x_in, dt = prepare_ssd_inputs(x, dt, A, B, C, dt_bias, dt_softplus)
    g, hg = _check(x, dt, A, B, C)
    b, length, nh, p = x.shape
    n = B.shape[-1]
    T = int(min(chunk_size, max(length, 1)))
    nc = -(-length // T)
    pad = nc * T - length
    xdt = x_in * dt.unsqueeze(-1)
    a2 = dt * (A.to(ct) * LOG2E)  # log2 decays [b, l, h]
    Bc, Cc = B.to(ct), C.to(ct)
    rst = reset_mask(reset, b, length, x.device)
    if rst is not None and pad:
        rst = F.pad(rst, (0, pad))
    if pad:
        # dt = 0 on padding: decay 1 and no input, so states and outputs are unchanged
        xdt = F.pad(xdt, (0, 0, 0, 0, 0, pad))
        a2 = F.pad(a2, (0, 0, 0, pad))
        Bc = F.pad(Bc, (0, 0, 0, 0, 0, pad))
        Cc = F.pad(Cc, (0, 0, 0, 0, 0, pad))
    # layout [b, g, c, hg, T, *]: matmuls batch over (b, g, c[, hg]) on contiguous blocks; B and
    # C are shared by the hg heads of a group, and where they meet per-head tensors the heads are
    # folded into the matrix dimension, so no matmul broadcasts (its backward would then loop)
    xdt = xdt.view(b, nc, T, g, hg, p).permute(0, 3, 1, 4, 2, 5).contiguous()
    acs = torch.cumsum(a2.view(b, nc, T, g, hg).permute(0, 3, 1, 4, 2), dim=-1)  # [b,g,c,hg,T]
    Bg = Bc.view(b, nc, T, g, n).permute(0, 3, 1, 2, 4).contiguous()  # [b, g, c, T, n]
    Cg = Cc.view(b, nc, T, g, n).permute(0, 3, 1, 2, 4).contiguous()

    # segment id per position: resets so far inside its chunk, [b, 1, c, 1, T] (None: no reset)
    seg = None if rst is None else rst.view(b, nc, T).cumsum(-1)[:, None, :, None, :]

    # intra-chunk: masked decay "attention" (C_l . B_s) 2^(acs_l - acs_s) for s <= l
    CB = _bmm(Cg, Bg.transpose(-1, -2)).unsqueeze(3)  # [b, g, c, 1, T, T]
    y = _IntraChunk.apply(acs, CB, xdt, seg)  # [b, g, c, hg, T, p]

    # per-chunk end states from a zero start: sum_s 2^(acs_T - acs_s) dt_s x_s B_s^T
    w_end = torch.exp2(acs[..., -1:] - acs)
    if seg is not None:  # only the chunk's last segment reaches its end
        w_end = w_end * (seg == seg[..., -1:])
    xw = (xdt * w_end.unsqueeze(-1)).transpose(-1, -2)
    states = _bmm(xw.reshape(b, g, nc, hg * p, T), Bg).view(b, g, nc, hg, p, n)

    # sequential pass over chunks: S_{k+1} = 2^(chunk k's summed log2-decays) S_k + states_k
    w_in = torch.exp2(acs)  # how much of the incoming state position l still sees
    if seg is not None:  # none after the chunk's first reset
        w_in = w_in * (seg == 0)
    chunk_decay = w_in[..., -1][..., None, None]  # [b, g, c, hg, 1, 1]
    if initial_states is None:
        S = x_in.new_zeros(b, g, hg, p, n)
    else:
        S = initial_states.to(ct).reshape(b, g, hg, p, n)
    prev = []
    # unbind once: indexing per chunk would make autograd scatter nc full-size zero gradients
    for decay_k, states_k in zip(chunk_decay.unbind(2), states.unbind(2), strict=True):
        prev.append(S)
        S = decay_k * S + states_k
    prev_states = torch.stack(prev, dim=2)  # [b, g, c, hg, p, n]

    # contribution of the incoming state: 2^acs_l C_l . S_prev, heads folded into the columns
    ps = prev_states.permute(0, 1, 2, 5, 3, 4).reshape(b, g, nc, n, hg * p)
    y_off = _bmm(Cg, ps).view(b, g, nc, T, hg, p).transpose(3, 4)
    y = y + y_off * w_in.unsqueeze(-1)
    y = y.permute(0, 2, 4, 1, 3, 5).reshape(b, nc * T, nh, p)[:, :length]
    y = finish_ssd_output(y, x_in, D, z, x.dtype)
    if return_final_states:
        return y, S.reshape(b, nh, p, n)
    return y
