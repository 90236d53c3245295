"""`log-linear-mamba2`: log-linear attention on Mamba-2 (Guo, Yang, Goel, Xing, Dao, Kim,
"Log-Linear Attention", ICLR 2026, arXiv 2506.04761, its Mamba-2 variant). Mamba-2's scalar decay
per head, with the prefix of each query split into Fenwick-tree buckets, each read with its own
learned weight:

    o_t = sum_{s <= t} lambda_t^{level(t, s)} exp(G_t - G_s) (q_t . k_s) v_s,
    level(t, s) = bit_length(t XOR s)   (0 for s = t; level l >= 1 holds the 2^(l-1) tokens that
                                         share t's bits above l - 1 and have bit l - 1 clear)

so query t reads at most ceil(log2 L) + 1 states per head, one per level (q = C, k = B, v = Delta x,
G the cumulative Delta A, as Mamba-2). Three forms of it:

- `log_linear_recurrent`: the loop (the reference) over the Fenwick states. Going from token t - 1
  to t every state decays by exp(Delta_t A); with r the number of trailing zeros of t, levels
  0..r merge into level r + 1, levels 1..r empty, and level 0 becomes k_t v_t^T;
- `log_linear_chunked`: in chunks of C = 2^c tokens (a power of two, so chunks align with the
  buckets): levels 0..c lie inside a chunk (a masked [C, C] score matrix with each pair's
  lambda); level c + l' (l' >= 1) is the chunk-level Fenwick bucket l' of whole earlier chunks,
  carried by the same merge rule over chunks. Every decay factor is a ratio <= 1;
- `log_linear_step`: one token (decoding).

The layer is Mamba-2's (in_proj to z, x, B, C, Delta; short convolution with SiLU on x, B, C;
A = -exp(A_log); D skip; gated RMSNorm; out_proj) plus the level weights of the authors' layer:
lambda_t^l = softplus(L_{h,l} * (W_lambda x_t)_{h,l}), with L initialised to ones, for
`max_levels` levels (15: sequences up to 2^14 = 16,384 tokens; longer inputs are refused).

State (mixers/state.py): ceil(log2 L) + 1 states of d_state x headdim per head for a sequence of
length L, so the recurrent state grows by one state per head per doubling of L ("grows as
log L"); `allocate_cache(batch, max_len)` allocates the levels max_len needs, and a decode that
runs past them adds levels. The short convolution's window is counted apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers._linear import (
    ShortConv,
    check_choice,
    check_positive,
    from_chunks,
    to_chunks,
)
from recall_lab.ssm import GatedRMSNorm
from recall_lab.ssm.mixers import dt_bias_init

IMPLS = ("chunk", "recurrent")


def levels_for(length: int) -> int:
    """Fenwick levels a sequence of `length` tokens reads: ceil(log2 L) + 1 (1 for L <= 1)."""
    return max(length - 1, 0).bit_length() + 1


def _trailing_zeros(t: int) -> int:
    return (t & -t).bit_length() - 1


def log_linear_step(q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor, states: Tensor,
                    t: int) -> tuple[Tensor, Tensor]:
    """Token t: q, k [b, h, N], v [b, h, P], g [b, h] (log decay), lam [b, h, >= levels],
    states [b, h, levels, N, P] (the Fenwick states after token t - 1; levels grow here when t
    needs more) -> (o [b, h, P], the states after token t)."""
    kv = (k[..., :, None] * v[..., None, :])[:, :, None]  # [b, h, 1, N, P]
    if t == 0:
        states = torch.cat([kv, torch.zeros_like(states[:, :, 1:])], dim=2)
    else:
        r = _trailing_zeros(t)
        if states.shape[2] < r + 2:
            states = torch.cat([states, states.new_zeros(*states.shape[:2], r + 2 -
                                                         states.shape[2], *states.shape[3:])], 2)
        decayed = states * g.exp()[..., None, None, None]
        merged = decayed[:, :, : r + 1].sum(2, keepdim=True)
        states = torch.cat([kv, torch.zeros_like(decayed[:, :, 1: r + 1]), merged,
                            decayed[:, :, r + 2:]], dim=2)
    n = states.shape[2]
    if lam.shape[-1] < n:
        raise RecallLabError(f"log-linear: position {t} reads {n} Fenwick levels, the level "
                             f"weights have {lam.shape[-1]} (max_levels)")
    read = (q[:, :, None, None, :] @ states).squeeze(-2)  # [b, h, levels, P]
    return (lam[..., :n, None] * read).sum(2), states


def log_linear_recurrent(q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor) -> Tensor:
    """The loop: q, k [b, h | 1, l, N] (1: shared by the heads, Mamba-2's one group),
    v [b, h, l, P], g [b, h, l], lam [b, h, l, levels] -> o [b, h, l, P]."""
    b, h, length, p = v.shape
    states = v.new_zeros(b, h, levels_for(length), q.shape[-1], p)
    out = []
    for t, (q_t, k_t, v_t, g_t, lam_t) in enumerate(zip(q.unbind(2), k.unbind(2), v.unbind(2),
                                                        g.unbind(2), lam.unbind(2),
                                                        strict=True)):
        o, states = log_linear_step(q_t, k_t, v_t, g_t, lam_t, states, t)
        out.append(o)
    return torch.stack(out, dim=2)


def _level_index(chunk: int, device) -> Tensor:
    """[C, C] int64: level(i, j) = bit_length(i XOR j) (at most c for C = 2^c)."""
    i = torch.arange(chunk, device=device)
    x = i[:, None] ^ i[None, :]
    lev = torch.zeros_like(x)
    while bool((x > 0).any()):
        lev, x = lev + (x > 0).long(), x >> 1
    return lev


def log_linear_chunked(q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor,
                       chunk: int) -> Tensor:
    """The chunked form (module docstring) with chunks of `chunk` tokens (a power of two),
    fewer when the sequence is shorter; same arguments as the loop (q, k shared by the heads
    form their scores once)."""
    length = q.shape[2]
    chunk = min(chunk, 1 << max(length - 1, 0).bit_length())
    c = chunk.bit_length() - 1
    if lam.shape[-1] < levels_for(length):
        raise RecallLabError(f"log-linear: {length} tokens read {levels_for(length)} Fenwick "
                             f"levels, the level weights have {lam.shape[-1]} (max_levels)")
    qc, kc, vc, lc = (to_chunks(t, chunk) for t in (q, k, v, lam))  # [b, h, n, C, .]
    gam = to_chunks(g[..., None], chunk)[..., 0].cumsum(-1)  # [b, h, n, C]
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = (gam[..., :, None] - gam[..., None, :]).masked_fill(~causal, -math.inf).exp()
    lev = _level_index(chunk, q.device).expand(*lc.shape[:-1], chunk)
    weight = torch.gather(lc, -1, lev)  # lambda_i^{level(i, j)}; zeroed above by the decay
    intra = ((qc @ kc.transpose(-1, -2)) * decay * weight) @ vc
    qg = qc * gam.exp()[..., None]
    kv = (kc * (gam[..., -1:] - gam).exp()[..., None]).transpose(-1, -2) @ vc  # [b,h,n,N,P]
    ends = gam[..., -1, None, None].exp()
    levels: dict[int, Tensor] = {}  # chunk-level Fenwick states, at the last chunk's end
    out = []
    # per-chunk views by one unbind each (indexing inside the loop: quadratic backward, see
    # deltanet.py)
    for m, (qg_m, in_m, lam_m, kv_m, end_m) in enumerate(zip(
            qg.unbind(2), intra.unbind(2), lc.unbind(2), kv.unbind(2), ends.unbind(2),
            strict=True)):
        if m:  # chunk m's buckets: levels 0..r of chunk m - 1 merge into level r + 1
            r = _trailing_zeros(m)
            merged = sum(levels.pop(lv) for lv in range(r + 1) if lv in levels)
            levels[r + 1] = merged
            for lv, s in levels.items():
                in_m = in_m + lam_m[..., c + lv, None] * (qg_m @ s)
        out.append(in_m)
        levels = {lv: s * end_m for lv, s in levels.items()}
        levels[0] = kv_m
    return from_chunks(torch.stack(out, dim=2), length)


@dataclass
class LogLinearCache:
    states: Tensor  # [b, heads, levels, d_state, headdim]: the Fenwick states (recurrent)
    conv: Tensor | None  # [b, d_inner + 2 d_state, conv_size - 1]
    t: int = 0  # tokens seen (bookkeeping, not state)


class LogLinearMamba2(nn.Module):
    """Log-linear Mamba-2 mixer; options: `d_state`, `expand`, `headdim`, `conv_size` (0 =
    none), `max_levels` (Fenwick levels the weights cover: sequences up to 2^(max_levels - 1)
    tokens), `chunk_size` (a power of two), `impl` ("chunk" or the "recurrent" reference
    loop)."""

    def __init__(self, d_model: int, layer_idx: int = 0, d_state: int = 16, expand: int = 2,
                 headdim: int = 32, conv_size: int = 4, max_levels: int = 15,
                 chunk_size: int = 32, A_init_range: tuple[float, float] = (1.0, 16.0),
                 dt_min: float = 1e-3, dt_max: float = 0.1, impl: str = "chunk") -> None:
        super().__init__()
        check_choice("impl", impl, IMPLS)
        for name, value in (("d_state", d_state), ("expand", expand), ("headdim", headdim),
                            ("max_levels", max_levels), ("chunk_size", chunk_size)):
            check_positive(name, value)
        if conv_size:
            check_positive("conv_size", conv_size)
        if chunk_size & (chunk_size - 1):
            raise RecallLabError(f"chunk_size must be a power of two (chunks align with the "
                                 f"Fenwick buckets), got {chunk_size}")
        self.d_inner = expand * d_model
        if self.d_inner % headdim:
            raise RecallLabError(f"headdim ({headdim}) must divide expand * d_model "
                                 f"({self.d_inner})")
        self.d_model, self.layer_idx, self.d_state, self.headdim = d_model, layer_idx, d_state, \
            headdim
        self.nheads, self.max_levels = self.d_inner // headdim, max_levels
        self.chunk_size, self.impl = chunk_size, impl
        h, n = self.nheads, d_state
        self.sizes = [self.d_inner, self.d_inner + 2 * n, h, h * max_levels]  # z, xBC, dt, dl
        self.in_proj = nn.Linear(d_model, sum(self.sizes), bias=False)
        self.conv = ShortConv(self.d_inner + 2 * n, conv_size, activation=True) \
            if conv_size else None
        self.dt_bias = nn.Parameter(dt_bias_init(h, dt_min, dt_max, 1e-4))
        self.A_log = nn.Parameter(torch.empty(h).uniform_(*A_init_range).log())
        self.L = nn.Parameter(torch.ones(h, max_levels))
        self.D = nn.Parameter(torch.ones(h))
        for p in (self.dt_bias, self.A_log, self.L, self.D):
            p._no_weight_decay = True
        self.norm = GatedRMSNorm(self.d_inner, self.d_inner, eps=1e-5)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def _split(self, u: Tensor):
        return u.split(self.sizes, dim=-1)

    def _ssm_inputs(self, xbc: Tensor, dt: Tensor, dl: Tensor):
        """From the convolved xBC [.., d_inner + 2N] and dt [.., h], dl [.., h * levels]:
        x, q, k, v, g, lambda (token-major; heads on the second-to-last axis)."""
        xs, B, C = xbc.split([self.d_inner, self.d_state, self.d_state], dim=-1)
        xs = xs.unflatten(-1, (self.nheads, self.headdim))
        delta = F.softplus(dt + self.dt_bias)
        g = -self.A_log.exp() * delta
        lam = F.softplus(self.L * dl.unflatten(-1, (self.nheads, self.max_levels)))
        # one group: B and C shared by the heads (a head axis of 1; the forms broadcast it)
        return xs, C[..., None, :], B[..., None, :], xs * delta[..., None], g, lam

    def _output(self, o: Tensor, xs: Tensor, z: Tensor) -> Tensor:
        y = (o + self.D[:, None] * xs).flatten(-2)
        return self.out_proj(self.norm(y, z))

    def forward(self, x: Tensor) -> Tensor:
        length = x.shape[1]
        if levels_for(length) > self.max_levels:
            raise RecallLabError(f"log-linear-mamba2: {length} tokens need "
                                 f"{levels_for(length)} Fenwick levels, max_levels is "
                                 f"{self.max_levels}")
        z, xbc, dt, dl = self._split(self.in_proj(x))
        xbc = self.conv(xbc) if self.conv is not None else F.silu(xbc)
        xs, q, k, v, g, lam = self._ssm_inputs(xbc, dt, dl)
        heads = [t.transpose(1, 2) for t in (q, k, v, g, lam)]  # [b, h, l, .]
        if self.impl == "recurrent":
            o = log_linear_recurrent(*heads)
        else:
            o = log_linear_chunked(*heads, chunk=self.chunk_size)
        return self._output(o.transpose(1, 2), xs, z)

    def state_size(self, sequence_length: int = 2048) -> int:
        # the Fenwick states a sequence of this length reads (ceil(log2 L) + 1 per head); the
        # short convolution's window is counted apart (mixers/state.py)
        return self.nheads * levels_for(sequence_length) * self.d_state * self.headdim

    def allocate_cache(self, batch_size: int, max_len: int) -> LogLinearCache:
        p = self.in_proj.weight
        states = p.new_zeros(batch_size, self.nheads, levels_for(max_len), self.d_state,
                             self.headdim)
        return LogLinearCache(states, None if self.conv is None else self.conv.allocate(
            batch_size))

    def step(self, x_t: Tensor, cache: LogLinearCache) -> Tensor:
        z, xbc, dt, dl = self._split(self.in_proj(x_t))
        if self.conv is not None:
            xbc, cache.conv = self.conv.step(xbc, cache.conv)
        else:
            xbc = F.silu(xbc)
        xs, q, k, v, g, lam = self._ssm_inputs(xbc, dt, dl)
        o, cache.states = log_linear_step(q, k, v, g, lam, cache.states, cache.t)
        cache.t += 1
        return self._output(o, xs, z)


__all__ = ["LogLinearMamba2", "levels_for", "log_linear_chunked", "log_linear_recurrent",
           "log_linear_step"]
