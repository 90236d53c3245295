"""Plain building blocks shared by the models: RMSNorm, SwiGLU MLP, RoPE, attention layers.

Attention layers of the baselines (not the hybrid branch, which lives in `hybrid.py`):
- `CausalSelfAttention`: full causal attention through `torch.nn.functional.scaled_dot_product_
  attention(is_causal=True)`. Chosen over the project's `sparse_attention` with the "full" pattern
  because that pattern materialises L x L indices (O(L^2) memory for the gather), while SDPA uses
  fused kernels and is exact; both compute the same softmax over all j <= i.
- `SlidingWindowAttention`: Samba's SWA layer, through the project's `sparse_attention` with the
  "sw" pattern (O(L k) memory), so the window has exactly the hybrid models' semantics.
- `PatternAttention`: the same with any pattern module (SE-Attn layers of `mamba2-attn-se`: the
  pattern sees the RoPE'd q, k and v of each head, so its value summaries are defined).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from recall_lab.attention import make_pattern, sparse_attention
from recall_lab.attention.decode import Decoder, FullDecoder, attend, make_decoder


class SwiGLU(nn.Module):
    """Gated MLP used by Samba and the Transformer: W2(silu(W1 x) * W3 x)."""

    def __init__(self, d_model: int, mult: int = 4) -> None:
        super().__init__()
        hidden = mult * d_model
        self.w13 = nn.Linear(d_model, 2 * hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(a) * b)


def rope(x: torch.Tensor, base: float = 10000.0, start: int = 0) -> torch.Tensor:
    """Rotary position embedding of x [b, h, l, d] (d even), position = start + index along l
    (`start` for one-token decoding steps)."""
    _, _, length, d = x.shape
    half = d // 2
    inv = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    pos = torch.arange(start, start + length, device=x.device, dtype=torch.float32)
    ang = pos[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class _HeadsAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, use_rope: bool = True,
                 dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        if d_model % n_heads or (d_model // n_heads) % 2:
            raise ValueError(f"d_model {d_model} must split into {n_heads} even-sized heads")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        # use_rope False: the model adds learned positions instead; dropout on the attention
        # probabilities in training (CausalSelfAttention; zoology's MHA)
        self.use_rope, self.dropout = use_rope, dropout
        # bias: zoology's MHA (Wqkv, out_proj); the model's init sets biases to zero
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, length, _ = x.shape
        q, k, v = self.qkv(x).view(b, length, 3, self.n_heads, self.head_dim).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [b, h, l, d]
        return (rope(q), rope(k), v) if self.use_rope else (q, k, v)

    def _merge(self, o: torch.Tensor) -> torch.Tensor:
        b, _, length, _ = o.shape
        return self.out(o.transpose(1, 2).reshape(b, length, -1))

    def allocate_cache(self) -> Decoder:
        pattern = getattr(self, "pattern", None)
        return FullDecoder() if pattern is None else make_decoder(pattern)

    def step(self, x_t: torch.Tensor, dec: Decoder) -> torch.Tensor:
        """One token x_t [b, d_model] at position dec.t -> [b, d_model]: the decode state lists
        the keys (full attention: every key, the KV cache), RoPE at the token's position."""
        b = x_t.shape[0]
        q, k, v = self.qkv(x_t).view(b, 3, self.n_heads, self.head_dim).unbind(1)
        if self.use_rope:
            q, k = (rope(x.unsqueeze(2), start=dec.t)[:, :, 0] for x in (q, k))
        o = attend(q, dec.step(q, k, v), self.head_dim**-0.5)
        return self.out(o.reshape(b, -1))


class CausalSelfAttention(_HeadsAttention):
    """Multi-head full causal attention with RoPE (the Transformer baseline; without RoPE where
    the model adds learned positions)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)
        p = self.dropout if self.training else 0.0
        return self._merge(F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p))


class PatternAttention(_HeadsAttention):
    """Multi-head attention with RoPE over the keys a pattern module lists (one sparse op)."""

    def __init__(self, d_model: int, n_heads: int, pattern: nn.Module) -> None:
        super().__init__(d_model, n_heads)
        self.pattern = pattern

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)
        idx, _ = self.pattern(q, k, v)
        return self._merge(sparse_attention(q, k, v, idx, scale=self.head_dim**-0.5))


class SlidingWindowAttention(PatternAttention):
    """Multi-head sliding-window attention with RoPE (Samba's SWA layer), window = k keys."""

    def __init__(self, d_model: int, n_heads: int, window: int) -> None:
        super().__init__(d_model, n_heads, make_pattern("sw", window))
