"""Pieces the zoo's mixers share: the short causal convolution, feature maps, RoPE, chunking.

Layout everywhere: [b, h, l, d] for per-head tensors (batch, heads, time, channels).

- `ShortConv`: depthwise causal convolution over time with an optional SiLU (DeltaNet's and
  Hyena's short filters), with a `step` on a [b, c, kernel - 1] window of past inputs.
- `feature_map(name, x)`: identity, elu + 1, Based's 2nd-order Taylor map
  (phi(q) . phi(k) = 1 + s + s^2 / 2, s = q . k / sqrt(d), with 1 + d + d(d+1)/2 features: the
  distinct products x_i x_j, i <= j, as zoology's Based keeps them).
- `to_chunks` / `from_chunks`: right-pad time to a multiple of the chunk size and fold it to
  [b, h, n, c, d] (padded rows are zeros; the chunked forms drop their outputs).
- `decayed_scores`: the in-chunk score matrix of a per-channel decay (KDA's, RWKV-7's),
  without overflow however strong the decay.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.ssm import native

FEATURE_MAPS = ("identity", "elu", "taylor")


def feature_dim_expanded(name: str, dim: int) -> int:
    """Number of features `feature_map(name, .)` makes from `dim` input channels (Taylor: 1, the
    dim linear terms and the dim (dim + 1) / 2 distinct second-order products)."""
    return 1 + dim + dim * (dim + 1) // 2 if name == "taylor" else dim


def _taylor_pairs(d: int, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(i, j, scale) of the second-order features: every pair i <= j once, scaled 1 / sqrt(2 d)
    on the diagonal and 1 / sqrt(d) off it, so that sum_{i<=j} of the scaled products of q and
    k is (q . k)^2 / (2 d): an off-diagonal pair stands for both x_i x_j and x_j x_i."""
    i, j = torch.triu_indices(d, d, device=x.device)
    scale = torch.full(i.shape, 1.0 / math.sqrt(d), dtype=x.dtype, device=x.device)
    scale[i == j] = 1.0 / math.sqrt(2.0 * d)  # in x's dtype: float64 stays exact
    return i, j, scale


def feature_map(name: str, x: Tensor) -> Tensor:
    """phi(x) over the last axis: identity, elu(x) + 1, or Based's Taylor map of exp(q.k/sqrt(d))
    to 2nd order: [1, x / d^(1/4), x_i x_j / sqrt(2 d) for i = j, x_i x_j / sqrt(d) for i < j].
    phi(q) . phi(k) equals the full outer product's [1, x / d^(1/4), vec(x x^T) / sqrt(2 d)]
    with d (d - 1) / 2 fewer numbers (tests/mixers/test_zoo_linear_attn.py checks it)."""
    if name == "identity":
        return x
    if name == "elu":
        return F.elu(x) + 1.0
    if name == "taylor":
        d = x.shape[-1]
        i, j, scale = _taylor_pairs(d, x)
        x2 = x[..., i] * x[..., j] * scale
        return torch.cat([torch.ones_like(x[..., :1]), x / d ** 0.25, x2], dim=-1)
    raise RecallLabError(f"feature_map must be one of {list(FEATURE_MAPS)}, got {name!r}")


def taylor_scores(q: Tensor, k: Tensor) -> Tensor:
    """phi(q) phi(k)^T of the Taylor map without expanding it: 1 + s + s^2 / 2, s = q k^T / sqrt(d)
    (q [..., t, d], k [..., s, d] -> [..., t, s])."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return 1.0 + s + 0.5 * s * s


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise RecallLabError(f"{name} must be one of {list(choices)}, got {value!r}")


def check_positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RecallLabError(f"{name} must be a positive integer, got {value!r}")


def split_heads(x: Tensor, heads: int) -> Tensor:
    """[b, l, h * d] -> [b, h, l, d]."""
    b, length, _ = x.shape
    return x.view(b, length, heads, -1).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """[b, h, l, d] -> [b, l, h * d]."""
    b, h, length, d = x.shape
    return x.transpose(1, 2).reshape(b, length, h * d)


def balanced_chunk(length: int, size: int) -> int:
    """The chunk length for `length` tokens in chunks of at most `size`: as many chunks as
    `size` needs, of equal length, so padding stays under one token per chunk (130 tokens in
    chunks of at most 64: 3 chunks of 44, not 3 of 64)."""
    n = -(-max(length, 1) // size)
    return -(-max(length, 1) // n)


def to_chunks(x: Tensor, size: int) -> Tensor:
    """[b, h, l, *rest] -> [b, h, n, size, *rest], time right-padded with zeros."""
    length = x.shape[2]
    pad = (-length) % size
    if pad:
        x = torch.cat([x, x.new_zeros(*x.shape[:2], pad, *x.shape[3:])], dim=2)
    return x.view(*x.shape[:2], -1, size, *x.shape[3:])


def from_chunks(x: Tensor, length: int) -> Tensor:
    """[b, h, n, c, *rest] -> [b, h, length, *rest] (the padding dropped)."""
    return x.reshape(*x.shape[:2], -1, *x.shape[4:])[:, :, :length]


# decayed_scores factors exp(gx - gy) = exp(gx - m) exp(m - gy) about the chunk's midpoint m
# while every chunk's decay stays within exp(-FACTOR_LIMIT): each factor is then within
# exp(+-FACTOR_LIMIT / 2), far from float32's range
FACTOR_LIMIT = 60.0


def decayed_scores(x: Tensor, gx: Tensor, y: Tensor, gy: Tensor, chunk: int,
                   strict: bool | tuple[bool, ...]) -> Tensor:
    """M[.., t, s] = sum_d x_td y_sd exp(gx_td - gy_sd) for s <= t (s < t where `strict`), zero
    elsewhere. x, gx [.., m c, d] and y, gy [.., p c, d] hold m and p blocks of one chunk's
    c = `chunk` rows each, stacked along time, so one matmul serves several score matrices of
    a chunk; the mask applies to every block pair by position within the chunk, and `strict`
    may be given per row block. gx, gy are log decays accumulated inside the chunk (<= 0, and
    gx_t - gy_s <= 0 where s is kept). One matmul of factors while the chunk's decay allows it
    (FACTOR_LIMIT); beyond, the ratios are formed per channel in log space (a [m c, p c, d]
    tensor), so no decay, however strong, overflows."""
    c = chunk
    blocks = x.shape[-2] // c
    stricts = (strict,) * blocks if isinstance(strict, bool) else strict
    one = torch.ones(c, c, dtype=torch.bool, device=x.device)
    causal = torch.cat([one.tril(-1 if st else 0) for st in stricts]).repeat(1, y.shape[-2] // c)
    # the products do not depend on the midpoint: no gradient through it
    floor = torch.minimum(gx.amin(-2, keepdim=True), gy.amin(-2, keepdim=True)).detach()
    if -floor.min().item() <= FACTOR_LIMIT:
        mid = floor / 2
        scores = (x * (gx - mid).exp()) @ (y * (mid - gy).exp()).transpose(-1, -2)
        return scores.masked_fill(~causal, 0.0)
    ratio = (gx[..., :, None, :] - gy[..., None, :, :]).masked_fill(
        ~causal[..., None], -math.inf).exp()
    return (x[..., :, None, :] * ratio * y[..., None, :, :]).sum(-1)


def rope(x: Tensor, start: int = 0, base: float = 10000.0) -> Tensor:
    """Rotary position embedding of x [b, h, l, d] (d even) at positions start .. start + l - 1."""
    half = x.shape[-1] // 2
    inv = base ** (-torch.arange(half, device=x.device, dtype=x.dtype) / half)
    pos = torch.arange(start, start + x.shape[-2], device=x.device, dtype=x.dtype)
    ang = pos[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class ShortConv(nn.Module):
    """Depthwise causal convolution over time of x [b, l, c] (left padding only), optional SiLU
    (with SiLU, float32 on the CPU: Mamba's native kernel, no layout changes; else conv1d).

    `step(x_t [b, c], window [b, c, kernel - 1])` -> (y_t, new window): the same taps on the last
    kernel - 1 inputs kept in the window."""

    def __init__(self, channels: int, kernel: int = 4, activation: bool = True,
                 bias: bool = False) -> None:
        super().__init__()
        check_positive("conv_size", kernel)
        self.kernel, self.activation = kernel, activation
        self.conv1d = nn.Conv1d(channels, channels, kernel, groups=channels, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        w = self.conv1d
        if self.activation and native.conv_usable(x, w.weight, w.bias):
            return native.conv_silu(x, w.weight, w.bias)  # float32 CPU: the lab's C kernel
        y = F.conv1d(F.pad(x.transpose(1, 2), (self.kernel - 1, 0)), w.weight, w.bias,
                     groups=w.groups).transpose(1, 2)
        return F.silu(y) if self.activation else y

    def allocate(self, batch_size: int) -> Tensor:
        w = self.conv1d.weight
        return w.new_zeros(batch_size, w.shape[0], self.kernel - 1)

    def step(self, x_t: Tensor, window: Tensor) -> tuple[Tensor, Tensor]:
        full = torch.cat([window, x_t[:, :, None]], dim=-1)  # [b, c, kernel]
        y = (full * self.conv1d.weight[:, 0]).sum(-1)
        if self.conv1d.bias is not None:
            y = y + self.conv1d.bias
        return (F.silu(y) if self.activation else y), full[:, :, 1:]
