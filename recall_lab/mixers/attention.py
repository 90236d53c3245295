"""`mha`: causal multi-head softmax attention on the mixer contract (zoology's attention mixer:
q, k, v projections, softmax over the prefix, an output projection), with a key/value cache for
decoding. The lab's `transformer` keeps its own block (attention + MLP, RoPE-free SDPA); this one
exists so that the lab's own models exercise the open contract exactly as a user's mixer does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class KVCache:
    k: Tensor  # [b, heads, max_len, head_dim]
    v: Tensor
    t: int = 0


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, layer_idx: int = 0, num_heads: int = 1,
                 bias: bool = True) -> None:
        super().__init__()
        if num_heads < 1 or d_model % num_heads:
            raise ValueError(f"num_heads ({num_heads}) must divide d_model ({d_model})")
        self.d_model, self.num_heads, self.layer_idx = d_model, num_heads, layer_idx
        self.head_dim = d_model // num_heads
        self.Wqkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.Wqkv(x).chunk(3, dim=-1)
        shape = (*x.shape[:-1], self.num_heads, self.head_dim)
        return tuple(t.reshape(shape).transpose(-3, -2) if x.dim() == 3 else t.reshape(shape)
                     for t in (q, k, v))

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self._heads(x)  # [b, h, l, hd]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out_proj(y.transpose(1, 2).reshape(x.shape))

    def state_size(self, sequence_length: int = 2048) -> int:
        return 2 * self.d_model * sequence_length  # the key/value cache

    def allocate_cache(self, batch_size: int, max_len: int) -> KVCache:
        p = self.Wqkv.weight
        shape = (batch_size, self.num_heads, max_len, self.head_dim)
        return KVCache(p.new_zeros(shape), p.new_zeros(shape))

    def step(self, x_t: Tensor, cache: KVCache) -> Tensor:
        q, k, v = self._heads(x_t)  # [b, h, hd]
        cache.k[:, :, cache.t] = k
        cache.v[:, :, cache.t] = v
        cache.t += 1
        keys, values = cache.k[:, :, : cache.t], cache.v[:, :, : cache.t]
        w = torch.softmax((keys @ q[..., None]).squeeze(-1) * self.head_dim ** -0.5, dim=-1)
        y = (w[..., None] * values).sum(-2)  # [b, h, hd]
        return self.out_proj(y.reshape(x_t.shape))
