"""`based`: Based's layer mix scaled to the lab (Arora, Eyuboglu, Zhang, Timalsina, Alberti,
Zinsley, Zou, Rudra, Re, "Simple linear attention language models balance the recall-throughput
tradeoff", ICML 2024, arXiv 2402.18668).

Based combines two primitives: global linear attention with the 2nd-order Taylor feature map
(phi(q) . phi(k) = 1 + s + s^2 / 2, s = q . k / sqrt(d'), feature dim d' = 16, normalised), and
short sliding-window softmax attention for exact local detail. The paper's 360M model repeats a
period of five layers (gated convolution, linear attention, sliding window, convolution,
convolution), so one mixer class per layer position, picked by the layer index. The lab's models
have two layers and no gated-convolution layer, so `based` cycles through `layers` by `layer_idx`,
by default ("sliding", "linear"): layer 0 is a sliding window of 4 keys (local: it binds each
token to its neighbours), layer 1 is Taylor linear attention over the whole prefix (global
lookup), the order in which a two-layer model recalls. A 4-layer model alternates the two. The
window is short as in the paper (64 to 128 keys at 2048 tokens there; 4 at the lab's 34-130
tokens): on `recall-lab check`'s learning gate (d_model 32, one seed), windows of 4 and 8 keys
reached test accuracy 0.965 (step 400) and 0.924 (step 600), while 16 keys, which cover the
gate's whole sequences, stayed at 0.776 after 600 steps.

State per sequence: the keys and values before the current token (2 x (window - 1) x d_model:
the current one arrives with the input, as in a short convolution's cache) for a sliding layer,
num_heads x (1 + d' + d'(d'+1)/2) x (d_model / num_heads + 1) for a linear layer (the Taylor
map's distinct second-order products, as zoology's Based counts them).

Forms: the Taylor layer uses `linear_attn.py`'s recurrent loop / chunked form / step; the window
layer has its loop (`window_attention_recurrent`), a chunked form (each chunk of C queries
against its C + window - 1 keys: one masked C x (C + window - 1) softmax per chunk) and a step on
the last `window - 1` keys and values plus the current one (RoPE on q and k, as in the paper's
window layers).
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
    balanced_chunk,
    check_choice,
    check_positive,
    feature_dim_expanded,
    feature_map,
    from_chunks,
    merge_heads,
    rope,
    split_heads,
    to_chunks,
)
from recall_lab.mixers.linear_attn import (
    linear_attn_chunked,
    linear_attn_recurrent,
    linear_attn_step,
)
from recall_lab.mixers.memory import MemorySpec

KINDS = ("sliding", "linear")
IMPLS = ("chunk", "recurrent")


def window_attention_recurrent(q: Tensor, k: Tensor, v: Tensor, window: int) -> Tensor:
    """Softmax attention of each position t over keys max(0, t - window + 1) .. t, as a loop.
    q (already scaled), k, v [b, h, l, d] -> [b, h, l, d]."""
    out = []
    for t in range(q.shape[2]):
        lo = max(0, t - window + 1)
        s = (k[:, :, lo:t + 1] @ q[:, :, t, :, None])[..., 0]
        out.append((s.softmax(-1)[..., None] * v[:, :, lo:t + 1]).sum(-2))
    return torch.stack(out, dim=2)


def window_attention_chunked(q: Tensor, k: Tensor, v: Tensor, window: int, chunk: int
                             ) -> Tensor:
    """The same, per chunk of `chunk` queries against the chunk's keys and the window - 1 before
    it (one masked softmax per chunk)."""
    length = q.shape[2]
    chunk = balanced_chunk(length, chunk)
    qc = to_chunks(q, chunk)  # [b, h, n, c, d]
    n = qc.shape[2]
    span = chunk + window - 1
    pad = (0, 0, window - 1, n * chunk - length)
    kw = F.pad(k, pad).unfold(2, span, chunk)  # [b, h, n, d, span]: key j at start - w + 1 + j
    vw = F.pad(v, pad).unfold(2, span, chunk)
    i = torch.arange(chunk, device=q.device)[:, None]
    j = torch.arange(span, device=q.device)[None, :]
    starts = torch.arange(n, device=q.device)[:, None, None] * chunk
    allowed = (j >= i) & (j <= i + window - 1) & (starts - (window - 1) + j >= 0)
    s = (qc @ kw).masked_fill(~allowed, -math.inf)
    return from_chunks(s.softmax(-1) @ vw.transpose(-1, -2), length)


@dataclass
class BasedCache:
    state: Tensor | None = None  # linear layer: [b, h, 1 + d' + d'(d'+1)/2, d_v + 1]
    keys: Tensor | None = None  # sliding layer: [b, h, window - 1, d] (RoPE'd), oldest first
    values: Tensor | None = None
    t: int = 0  # tokens seen


class Based(nn.Module):
    """One Based layer: a sliding window or Taylor linear attention, by `layers[layer_idx %
    len(layers)]`. Options: `layers`, `window` (keys per query, the current one included),
    `window_heads`, `feature_dim` (d'), `num_heads` (linear attention heads), `chunk_size`,
    `impl` ("chunk" or the "recurrent" reference loops)."""

    def __init__(self, d_model: int, layer_idx: int = 0,
                 layers: tuple[str, ...] | list[str] = KINDS, window: int = 4,
                 window_heads: int = 1, feature_dim: int = 16, num_heads: int = 1,
                 chunk_size: int = 64, impl: str = "chunk", eps: float = 1e-6) -> None:
        super().__init__()
        if isinstance(layers, str) or not layers:
            raise RecallLabError(f"layers must be a non-empty list of {list(KINDS)}, "
                                 f"got {layers!r}")
        for kind in layers:
            check_choice("layers", kind, KINDS)
        check_choice("impl", impl, IMPLS)
        for name, value in (("window", window), ("window_heads", window_heads),
                            ("feature_dim", feature_dim), ("num_heads", num_heads),
                            ("chunk_size", chunk_size)):
            check_positive(name, value)
        self.kind = layers[layer_idx % len(layers)]
        heads = window_heads if self.kind == "sliding" else num_heads
        if d_model % heads or (self.kind == "sliding" and (d_model // heads) % 2):
            raise RecallLabError(f"d_model ({d_model}) must split into {heads} heads"
                                 + (" of even width (RoPE)" if self.kind == "sliding" else ""))
        self.d_model, self.layer_idx, self.heads = d_model, layer_idx, heads
        self.window, self.feature_dim = window, feature_dim
        self.chunk_size, self.impl, self.eps = chunk_size, impl, eps
        self.head_v = d_model // heads
        qk = d_model if self.kind == "sliding" else heads * feature_dim
        self.qkv = nn.Linear(d_model, 2 * qk + d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def _split(self, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        qk = (u.shape[-1] - self.d_model) // 2
        q, k, v = u.split([qk, qk, self.d_model], dim=-1)
        return q, k, v

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = (split_heads(t, self.heads) for t in self._split(self.qkv(x)))
        if self.kind == "sliding":
            q, k = rope(q) * (q.shape[-1] ** -0.5), rope(k)
            if self.impl == "recurrent":
                o = window_attention_recurrent(q, k, v, self.window)
            else:
                o = window_attention_chunked(q, k, v, self.window, self.chunk_size)
            return self.out_proj(merge_heads(o))
        v = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # the normaliser's column
        # on CUDA, FLA's Based kernel (fla_kernels.py); None: the torch forms, as on the CPU
        o = None
        if self.impl == "chunk":
            o = fla_kernels.linear_attn(q, k, v, "taylor", linear_attn_chunked)
        if o is None:
            fq, fk = feature_map("taylor", q), feature_map("taylor", k)
            if self.impl == "recurrent":
                o = linear_attn_recurrent(fq, fk, v)
            else:
                o = linear_attn_chunked(fq, fk, v, self.chunk_size, raw=(q, k))
        return self.out_proj(merge_heads(o[..., :-1] / (o[..., -1:] + self.eps)))

    def state_size(self, sequence_length: int = 2048) -> int:
        if self.kind == "sliding":
            return 2 * (self.window - 1) * self.d_model
        f = feature_dim_expanded("taylor", self.feature_dim)
        return self.heads * f * (self.head_v + 1)

    def memory_spec(self) -> MemorySpec | None:
        """The layer as a memory (mixers/memory.py): the Taylor layer superposes phi(k) v^T; a
        window of `window` keys holds no pair by the time its query comes (None)."""
        if self.kind == "sliding":
            return None
        return MemorySpec("sum", self.heads, self.feature_dim, self.head_v, "taylor", 1.0, "z")

    def allocate_cache(self, batch_size: int, max_len: int) -> BasedCache:
        p = self.qkv.weight
        if self.kind == "sliding":
            shape = (batch_size, self.heads, self.window - 1, self.head_v)
            return BasedCache(keys=p.new_zeros(shape), values=p.new_zeros(shape))
        f = feature_dim_expanded("taylor", self.feature_dim)
        return BasedCache(state=p.new_zeros(batch_size, self.heads, f, self.head_v + 1))

    def step(self, x_t: Tensor, cache: BasedCache) -> Tensor:
        b = x_t.shape[0]
        q, k, v = (t.reshape(b, self.heads, -1) for t in self._split(self.qkv(x_t)))
        if self.kind == "sliding":
            q = rope(q[:, :, None], start=cache.t)[:, :, 0] * (q.shape[-1] ** -0.5)
            k = rope(k[:, :, None], start=cache.t)
            keys = torch.cat([cache.keys, k], dim=2)  # [b, h, window, d]: the past, then now
            values = torch.cat([cache.values, v[:, :, None]], dim=2)
            cache.keys, cache.values = keys[:, :, 1:], values[:, :, 1:]
            cache.t += 1
            s = (keys @ q[..., None])[..., 0]  # [b, h, window]
            empty = torch.arange(self.window, device=x_t.device) < self.window - cache.t
            w = s.masked_fill(empty, -math.inf).softmax(-1)
            return self.out_proj((w[..., None] * values).sum(-2).reshape(b, -1))
        v = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
        o, cache.state = linear_attn_step(feature_map("taylor", q), feature_map("taylor", k), v,
                                          cache.state)
        cache.t += 1
        return self.out_proj((o[..., :-1] / (o[..., -1:] + self.eps)).reshape(b, -1))
