"""`linear-attn`: causal linear attention with a feature map (Katharopoulos et al., "Transformers
are RNNs", ICML 2020, arXiv 2006.16236; the Taylor map from Arora et al., "Simple linear attention
language models balance the recall-throughput tradeoff", ICML 2024, arXiv 2402.18668).

    S_t = S_{t-1} + phi(k_t) v_t^T,   o_t = S_t^T phi(q_t)   (/ (z_t^T phi(q_t) + eps),
    z_t = z_{t-1} + phi(k_t), when normalised)

per head, state phi-dim x d_v (+ phi-dim for the normaliser). The normaliser rides along as an
extra value column of ones, so the three forms below carry it without a second code path:

- `linear_attn_recurrent`: the loop above (the reference);
- `linear_attn_chunked`: per chunk of C tokens, the state before the chunk times phi(Q) plus the
  masked C x C scores times V (matrix products; for the Taylor map the in-chunk scores are
  1 + s + s^2/2 from q . k directly, without expanding the features);
- `linear_attn_step`: one token on the state (decoding).

The mixer: q, k, v projections (a short causal convolution on each by default, `conv_size=0`
turns it off), the feature map on q and k, heads of width d_model / num_heads for v, a per-head
RMSNorm on the output when not normalised, `out_proj` back to d_model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import fla_kernels
from recall_lab.mixers._linear import (
    FEATURE_MAPS,
    ShortConv,
    balanced_chunk,
    check_choice,
    check_positive,
    feature_dim_expanded,
    feature_map,
    from_chunks,
    merge_heads,
    split_heads,
    taylor_scores,
    to_chunks,
)
from recall_lab.mixers.memory import MemorySpec
from recall_lab.ssm import RMSNorm

IMPLS = ("chunk", "recurrent")


def linear_attn_recurrent(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """o_t = (sum_{s<=t} k_s v_s^T)^T q_t, as a loop over t. q, k [b, h, l, f], v [b, h, l, e]."""
    b, h, _, f = q.shape
    state = q.new_zeros(b, h, f, v.shape[-1])
    out = []
    for q_t, k_t, v_t in zip(q.unbind(2), k.unbind(2), v.unbind(2), strict=True):
        state = state + k_t[..., :, None] * v_t[..., None, :]
        out.append((q_t[..., :, None] * state).sum(-2))
    return torch.stack(out, dim=2)


def linear_attn_chunked(q: Tensor, k: Tensor, v: Tensor, chunk: int,
                        raw: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """The same sum in chunks of `chunk` tokens. `raw` = the unexpanded (q, k) of the Taylor map:
    the in-chunk scores are then `taylor_scores(q, k)` (equal to phi(q) phi(k)^T)."""
    length = q.shape[2]
    chunk = balanced_chunk(length, chunk)
    qc, kc, vc = (to_chunks(t, chunk) for t in (q, k, v))  # [b, h, n, c, .]
    if raw is None:
        scores = qc @ kc.transpose(-1, -2)
    else:
        scores = taylor_scores(to_chunks(raw[0], chunk), to_chunks(raw[1], chunk))
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    intra = scores.masked_fill(~causal, 0.0) @ vc
    kv = kc.transpose(-1, -2) @ vc  # [b, h, n, f, e]: each chunk's contribution
    before = torch.cat([torch.zeros_like(kv[:, :, :1]), kv[:, :, :-1].cumsum(2)], dim=2)
    return from_chunks(qc @ before + intra, length)


def linear_attn_step(q: Tensor, k: Tensor, v: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
    """One token: q, k [b, h, f], v [b, h, e], state [b, h, f, e] -> (o [b, h, e], new state)."""
    state = state + k[..., :, None] * v[..., None, :]
    return (q[..., :, None] * state).sum(-2), state


@dataclass
class LinearAttentionCache:
    state: Tensor  # [b, h, f, d_v (+1 normaliser)]
    conv: Tensor | None  # [b, 2 h f_in + d_model, conv_size - 1]


class LinearAttention(nn.Module):
    """Causal linear attention; options: `feature_map` (identity | elu | taylor), `feature_dim`
    (q/k width per head before the map), `num_heads`, `normalize` (default: on for the positive
    maps elu and taylor, off for identity), `conv_size` (short convolution on q, k, v; 0 = none),
    `chunk_size`, `impl` ("chunk" or the "recurrent" reference loop)."""

    def __init__(self, d_model: int, layer_idx: int = 0, num_heads: int = 1,
                 feature_map: str = "elu", feature_dim: int = 16, normalize: bool | None = None,
                 conv_size: int = 4, chunk_size: int = 64, impl: str = "chunk",
                 eps: float = 1e-6) -> None:
        super().__init__()
        check_choice("feature_map", feature_map, FEATURE_MAPS)
        check_choice("impl", impl, IMPLS)
        for name, value in (("num_heads", num_heads), ("feature_dim", feature_dim),
                            ("chunk_size", chunk_size)):
            check_positive(name, value)
        if d_model % num_heads:
            raise RecallLabError(f"num_heads ({num_heads}) must divide d_model ({d_model})")
        normalize = feature_map != "identity" if normalize is None else normalize
        if normalize and feature_map == "identity":
            raise RecallLabError("normalize needs a positive feature map (elu or taylor): with "
                                 "identity features the normaliser can be 0")
        self.d_model, self.layer_idx, self.num_heads = d_model, layer_idx, num_heads
        self.map, self.feature_dim, self.normalize = feature_map, feature_dim, normalize
        self.chunk_size, self.impl, self.eps = chunk_size, impl, eps
        self.head_v = d_model // num_heads
        self.features = feature_dim_expanded(feature_map, feature_dim)
        width = 2 * num_heads * feature_dim + d_model
        self.qkv = nn.Linear(d_model, width, bias=False)
        self.conv = ShortConv(width, conv_size, activation=False) if conv_size else None
        self.norm = None if normalize else RMSNorm(self.head_v, eps=1e-5)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    # -- shared pieces --
    def _split(self, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Projected (and convolved) u [.., width] -> raw q, k [.., h, feature_dim], v."""
        hf = self.num_heads * self.feature_dim
        q, k, v = u.split([hf, hf, self.d_model], dim=-1)
        return q, k, v

    def _scale(self) -> float:
        # identity features unnormalised: softmax attention's 1/sqrt(d); the ratio cancels it
        return self.feature_dim ** -0.5 if self.map == "identity" else 1.0

    def _values(self, v: Tensor) -> Tensor:
        """v with a column of ones when normalised (the normaliser's running sum)."""
        return torch.cat([v, torch.ones_like(v[..., :1])], dim=-1) if self.normalize else v

    def _finish(self, o: Tensor) -> Tensor:
        """Per-head output [.., h, e(+1)] -> normalised or RMS-normed [.., h, d_v]."""
        if self.normalize:
            return o[..., :-1] / (o[..., -1:] + self.eps)
        return self.norm(o)

    def forward(self, x: Tensor) -> Tensor:
        u = self.qkv(x)
        if self.conv is not None:
            u = self.conv(u)
        q, k, v = (split_heads(t, self.num_heads) for t in self._split(u))  # [b, h, l, .]
        q, v = q * self._scale(), self._values(v)
        # on CUDA, FLA's kernel (fla_kernels.py); None: the torch forms below, as on the CPU
        o = None
        if self.impl == "chunk":
            o = fla_kernels.linear_attn(q, k, v, self.map, linear_attn_chunked)
        if o is None:
            fq, fk = feature_map(self.map, q), feature_map(self.map, k)
            if self.impl == "recurrent":
                o = linear_attn_recurrent(fq, fk, v)
            else:
                o = linear_attn_chunked(fq, fk, v, self.chunk_size,
                                        raw=(q, k) if self.map == "taylor" else None)
        return self.out_proj(merge_heads(self._finish(o)))

    def state_size(self, sequence_length: int = 2048) -> int:
        # the state and its normaliser; the short convolution's window is counted apart
        return self.num_heads * self.features * (self.head_v + int(self.normalize))

    def memory_spec(self) -> MemorySpec:
        """The layer as a memory (mixers/memory.py): superposed phi(k) v^T per head."""
        return MemorySpec("sum", self.num_heads, self.feature_dim, self.head_v, self.map,
                          self._scale(), "z" if self.normalize else "rms_head")

    def allocate_cache(self, batch_size: int, max_len: int) -> LinearAttentionCache:
        p = self.qkv.weight
        e = self.head_v + int(self.normalize)
        state = p.new_zeros(batch_size, self.num_heads, self.features, e)
        return LinearAttentionCache(state, None if self.conv is None else
                                    self.conv.allocate(batch_size))

    def step(self, x_t: Tensor, cache: LinearAttentionCache) -> Tensor:
        u = self.qkv(x_t)
        if self.conv is not None:
            u, cache.conv = self.conv.step(u, cache.conv)
        b = x_t.shape[0]
        q, k, v = (t.reshape(b, self.num_heads, -1) for t in self._split(u))
        q = q * self._scale()
        o, cache.state = linear_attn_step(feature_map(self.map, q), feature_map(self.map, k),
                                          self._values(v), cache.state)
        return self.out_proj(self._finish(o).reshape(b, self.d_model))
