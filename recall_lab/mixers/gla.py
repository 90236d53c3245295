"""`gla`: gated linear attention (Yang, Wang, Shen, Panda, Kim, "Gated Linear Attention
Transformers with Hardware-Efficient Training", ICML 2024, arXiv 2312.06635), per head, state
d_k x d_v with a data-dependent decay per key channel:

    S_t = diag(alpha_t) S_{t-1} + k_t v_t^T,   o_t = S_t^T q_t,
    alpha_t = exp(logsigmoid(W2 W1 x_t + b) / 16)   (low-rank gate, the paper's normaliser 16)

Three forms of it:

- `gla_recurrent`: the loop (the reference);
- `gla_chunked`: per chunk of C tokens with B_t the decay accumulated inside the chunk,
  O = (Q * B) S0 + A V, A_ts = sum_d q_td k_sd B_td / B_sd (s <= t), and
  S_end = diag(B_C) S0 + (K * B_C / B)^T V, all matrix products: A = (Q * B)(K / B)^T while
  every chunk's decay stays above exp(-20); beyond, the ratios are formed as
  exp(log B_td - log B_sd) per key channel (a [C, C, d_k] tensor per chunk), so no decay,
  however strong, overflows (the paper's secondary chunking solves the same problem);
- `gla_step`: one token (decoding).

The mixer follows the paper's layer: q, k, v projections (by default a short causal convolution
on each, as the reference layer offers; `conv_size=0` turns it off), key width d_model / 2,
the low-rank gate (rank 16), a per-head RMSNorm of the output times SiLU(W_g x), `out_proj`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import fla_kernels
from recall_lab.mixers._linear import (
    ShortConv,
    balanced_chunk,
    check_choice,
    check_positive,
    from_chunks,
    split_heads,
    to_chunks,
)
from recall_lab.mixers.memory import MemorySpec
from recall_lab.ssm import RMSNorm

IMPLS = ("chunk", "recurrent")
# the in-chunk decay ratios are factored B_t * (1 / B_s) while the chunk's decay stays within
# exp(-FACTOR_LIMIT) (each factor then stays within exp(+-20), far from float32's range)
FACTOR_LIMIT = 20.0


def gla_step(q: Tensor, k: Tensor, v: Tensor, g: Tensor, state: Tensor
             ) -> tuple[Tensor, Tensor]:
    """One token: q, k, g [b, h, d_k] (g = log alpha), v [b, h, d_v], state [b, h, d_k, d_v]."""
    state = state * g.exp()[..., None] + k[..., :, None] * v[..., None, :]
    return (q[..., :, None] * state).sum(-2), state


def gla_recurrent(q: Tensor, k: Tensor, v: Tensor, g: Tensor) -> Tensor:
    """The recurrence as a loop: q, k, g [b, h, l, d_k], v [b, h, l, d_v] -> [b, h, l, d_v]."""
    b, h, _, dk = q.shape
    state = q.new_zeros(b, h, dk, v.shape[-1])
    out = []
    for q_t, k_t, v_t, g_t in zip(q.unbind(2), k.unbind(2), v.unbind(2), g.unbind(2),
                                  strict=True):
        o, state = gla_step(q_t, k_t, v_t, g_t, state)
        out.append(o)
    return torch.stack(out, dim=2)


def gla_chunked(q: Tensor, k: Tensor, v: Tensor, g: Tensor, chunk: int) -> Tensor:
    """The recurrence in chunks of `chunk` tokens (module docstring); same arguments."""
    length = q.shape[2]
    chunk = balanced_chunk(length, chunk)
    qc, kc, vc, gc = (to_chunks(t, chunk) for t in (q, k, v, g))  # [b, h, n, c, .]
    gam = gc.cumsum(3)  # log B_t, per key channel
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    qg = qc * gam.exp()
    if -gam[..., -1, :].min().item() <= FACTOR_LIMIT:
        # B_td / B_sd = B_td * (1 / B_sd), each factor within exp(+-FACTOR_LIMIT): matmuls
        scores = qg @ (kc * (-gam).exp()).transpose(-1, -2)
    else:  # a decay too strong to factor: the ratios per key channel, in log space
        ratio = (gam[..., :, None, :] - gam[..., None, :, :]).masked_fill(
            ~causal[..., None], -math.inf).exp()
        scores = (qc[..., :, None, :] * ratio * kc[..., None, :, :]).sum(-1)
    intra = scores.masked_fill(~causal, 0.0) @ vc
    kg = kc * (gam[..., -1:, :] - gam).exp()
    end = gam[..., -1, :].exp()  # [b, h, n, d_k]
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
    out = []
    # per-chunk views by one unbind each (indexing in the loop: quadratic backward, see
    # deltanet.py)
    for qg_i, in_i, end_i, kg_i, v_i in zip(qg.unbind(2), intra.unbind(2), end.unbind(2),
                                            kg.unbind(2), vc.unbind(2), strict=True):
        out.append(qg_i @ state + in_i)
        state = end_i[..., None] * state + kg_i.transpose(-1, -2) @ v_i
    return from_chunks(torch.stack(out, dim=2), length)


@dataclass
class GLACache:
    state: Tensor  # [b, h, d_k, d_v]
    conv: Tensor | None  # [b, 2 key_dim + value_dim, conv_size - 1]


class GatedLinearAttention(nn.Module):
    """GLA mixer; options: `num_heads`, `expand_k` (key width / d_model, the paper's 0.5),
    `expand_v`, `gate_rank` (low-rank gate), `gate_normalizer` (16), `conv_size` (0 = none),
    `chunk_size`, `impl` ("chunk" or the "recurrent" reference loop)."""

    def __init__(self, d_model: int, layer_idx: int = 0, num_heads: int = 4,
                 expand_k: float = 0.5, expand_v: float = 1.0, gate_rank: int = 16,
                 gate_normalizer: float = 16.0, conv_size: int = 4, chunk_size: int = 32,
                 impl: str = "chunk") -> None:
        super().__init__()
        check_choice("impl", impl, IMPLS)
        for name, value in (("num_heads", num_heads), ("gate_rank", gate_rank),
                            ("chunk_size", chunk_size)):
            check_positive(name, value)
        if conv_size:
            check_positive("conv_size", conv_size)
        if not gate_normalizer > 0:
            raise RecallLabError(f"gate_normalizer must be > 0, got {gate_normalizer!r}")
        self.key_dim, self.value_dim = int(d_model * expand_k), int(d_model * expand_v)
        if min(self.key_dim, self.value_dim) < 1 or self.key_dim % num_heads \
                or self.value_dim % num_heads:
            raise RecallLabError(f"num_heads ({num_heads}) must divide the key width "
                                 f"({self.key_dim}) and the value width ({self.value_dim})")
        self.d_model, self.layer_idx, self.num_heads = d_model, layer_idx, num_heads
        self.chunk_size, self.impl, self.gate_normalizer = chunk_size, impl, gate_normalizer
        self.head_k, self.head_v = self.key_dim // num_heads, self.value_dim // num_heads
        width = 2 * self.key_dim + self.value_dim
        self.qkv = nn.Linear(d_model, width, bias=False)
        self.conv = ShortConv(width, conv_size, activation=False) if conv_size else None
        self.gk_proj = nn.Sequential(nn.Linear(d_model, gate_rank, bias=False),
                                     nn.Linear(gate_rank, self.key_dim, bias=True))
        self.g_proj = nn.Linear(d_model, self.value_dim, bias=False)
        self.g_norm = RMSNorm(self.head_v, eps=1e-5)
        self.out_proj = nn.Linear(self.value_dim, d_model, bias=False)

    def _parts(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """q (scaled), k, v, log alpha over the last axis, token-major."""
        u = self.qkv(x)
        q, k, v = u.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        g = F.logsigmoid(self.gk_proj(x)) / self.gate_normalizer
        return q * self.head_k ** -0.5, k, v, g

    def _output(self, o: Tensor, x: Tensor) -> Tensor:
        """Per-head o [.., h, d_v] (token-major) -> out_proj(RMSNorm(o) * SiLU(W_g x))."""
        gate = F.silu(self.g_proj(x)).view(o.shape)
        return self.out_proj((self.g_norm(o) * gate).flatten(-2))

    def forward(self, x: Tensor) -> Tensor:
        q, k, v, g = self._parts(x)
        if self.conv is not None:
            q, k, v = self.conv(torch.cat([q, k, v], -1)).split(
                [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q, k, v, g = (split_heads(t, self.num_heads) for t in (q, k, v, g))
        if self.impl == "recurrent":
            o = gla_recurrent(q, k, v, g)
        else:  # on CUDA, FLA's kernel (fla_kernels.py); None: the torch form, as on the CPU
            o = fla_kernels.gla(q, k, v, g, gla_chunked)
            if o is None:
                o = gla_chunked(q, k, v, g, self.chunk_size)
        return self._output(o.transpose(1, 2), x)

    def state_size(self, sequence_length: int = 2048) -> int:
        # recurrent state only; the short convolution's window is counted apart
        return self.num_heads * self.head_k * self.head_v

    def memory_spec(self) -> MemorySpec:
        """The layer as a memory (mixers/memory.py): k v^T superposed with every gate at 1,
        RMSNorm per head (the output gate left out)."""
        return MemorySpec("sum", self.num_heads, self.head_k, self.head_v, "identity",
                          self.head_k ** -0.5, "rms_head")

    def allocate_cache(self, batch_size: int, max_len: int) -> GLACache:
        p = self.qkv.weight
        state = p.new_zeros(batch_size, self.num_heads, self.head_k, self.head_v)
        return GLACache(state, None if self.conv is None else self.conv.allocate(batch_size))

    def step(self, x_t: Tensor, cache: GLACache) -> Tensor:
        b = x_t.shape[0]
        q, k, v, g = self._parts(x_t)
        if self.conv is not None:
            u, cache.conv = self.conv.step(torch.cat([q, k, v], -1), cache.conv)
            q, k, v = u.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q, k, v, g = (t.reshape(b, self.num_heads, -1) for t in (q, k, v, g))
        o, cache.state = gla_step(q, k, v, g, cache.state)
        return self._output(o, x_t)
