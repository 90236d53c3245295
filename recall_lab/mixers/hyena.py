"""`hyena`: the Hyena operator of order 2 (Poli, Massaroli, Nguyen, Fu, Dao, Baccus, Bengio,
Ermon, Re, "Hyena Hierarchy: Towards Larger Convolutional Language Models", ICML 2023,
arXiv 2302.10866), the convolution baseline of the recall zoo, as the reference layer builds it:

    x1, x2, v = ShortConv_3(W_in x)            (three projections, explicit short filters)
    y = W_out ( x2 * (h * (x1 * v) + D * (x1 * v)) )

with `*` between h and a sequence the causal convolution over time, h the implicit long filter:
h_t = MLP(z_t) * exp(-|delta| t / (l_max - 1)) per channel, z_t = [t / (l_max - 1), cos(f w_t),
-sin(f w_t)], w_t = 2 pi t / l_max (an MLP with sine activations of shared, learned frequency;
exponential modulation from fast to slow decay across channels; D a learned skip).

The filter is a function of the position alone, so it is defined at any length (`l_max` sets its
time scale, not a limit). Forms: `causal_conv_direct` (the loop sum_{s<=t} h_{t-s} u_s, the
reference), `causal_conv_fft` (by FFT of size 2L, used in `forward`), and `step`, which keeps
every past x1 * v: Hyena has no fixed-size state, so its decode state grows with the length
(d_model numbers per token, `state_size`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers._linear import ShortConv, check_choice, check_positive

IMPLS = ("fft", "recurrent")


def causal_conv_direct(u: Tensor, h: Tensor) -> Tensor:
    """y_t = sum_{s<=t} h_{t-s} u_s per channel, as a loop. u [b, d, l], h [d, l] -> [b, d, l]."""
    out = []
    for t in range(u.shape[-1]):
        out.append((u[..., :t + 1] * h[:, :t + 1].flip(-1)).sum(-1))
    return torch.stack(out, dim=-1)


def causal_conv_fft(u: Tensor, h: Tensor) -> Tensor:
    """The same by FFT (zero-padded to 2L, so the circular convolution is the causal one)."""
    length = u.shape[-1]
    n = 2 * length
    y = torch.fft.irfft(torch.fft.rfft(u, n=n) * torch.fft.rfft(h, n=n), n=n)
    return y[..., :length]


class Sin(nn.Module):
    def __init__(self, dim: int, w: float) -> None:
        super().__init__()
        self.freq = nn.Parameter(w * torch.ones(1, dim))

    def forward(self, x: Tensor) -> Tensor:
        return torch.sin(self.freq * x)


class ImplicitFilter(nn.Module):
    """h [d, l] at positions 0 .. l - 1: sine MLP of the positional features, modulated."""

    def __init__(self, d_model: int, l_max: int, order: int, emb_dim: int, w: float,
                 fast_decay_pct: float = 0.3, slow_decay_pct: float = 1.5,
                 target: float = 1e-2) -> None:
        super().__init__()
        if emb_dim < 3 or emb_dim % 2 == 0:
            raise RecallLabError(f"emb_dim must be odd and >= 3, got {emb_dim!r}")
        self.l_max, self.bands = l_max, (emb_dim - 1) // 2
        # one sine activation whose frequency all three hidden layers share, as in the reference
        # layer (held once, so the state dict has one `freq`)
        self.act = Sin(order, w)
        self.linears = nn.ModuleList([nn.Linear(emb_dim, order), nn.Linear(order, order),
                                      nn.Linear(order, order)])
        self.out = nn.Linear(order, d_model, bias=False)
        for layer in self.linears:
            layer.bias._no_reinit = True  # the filter's init is the layer's, not the LM's
        deltas = torch.linspace(math.log(target) / slow_decay_pct,
                                math.log(target) / fast_decay_pct, d_model)
        self.register_buffer("deltas", deltas, persistent=False)

    def forward(self, length: int) -> Tensor:
        p = self.deltas
        i = torch.arange(length, device=p.device, dtype=p.dtype)[:, None]
        t = i / max(self.l_max - 1, 1)
        f = torch.linspace(1e-4, self.bands - 1, self.bands, device=p.device, dtype=p.dtype)
        ang = f[None, :] * (2 * math.pi * i / self.l_max)
        z = torch.cat([t, ang.cos(), -ang.sin()], dim=-1)  # [l, emb_dim]
        for layer in self.linears:
            z = self.act(layer(z))
        h = self.out(z) * torch.exp(-t * p.abs())  # [l, d]
        return h.t()


@dataclass
class HyenaCache:
    history: Tensor  # [b, d_model, max_len]: every x1 * v so far
    conv: Tensor  # [b, 3 d_model, short_filter_order - 1]
    t: int = 0


class Hyena(nn.Module):
    """Hyena (order 2) mixer; options: `l_max` (the filter's time scale), `filter_order` (MLP
    width), `emb_dim`, `short_filter_order`, `w` (initial sine frequency), `impl` ("fft" or the
    "recurrent" direct loop)."""

    def __init__(self, d_model: int, layer_idx: int = 0, l_max: int = 1024,
                 filter_order: int = 64, emb_dim: int = 3, short_filter_order: int = 3,
                 w: float = 1.0, impl: str = "fft") -> None:
        super().__init__()
        check_choice("impl", impl, IMPLS)
        for name, value in (("l_max", l_max), ("filter_order", filter_order),
                            ("short_filter_order", short_filter_order)):
            check_positive(name, value)
        self.d_model, self.layer_idx, self.impl = d_model, layer_idx, impl
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.short = ShortConv(3 * d_model, short_filter_order, activation=False, bias=True)
        self.filter = ImplicitFilter(d_model, l_max, filter_order, emb_dim, w)
        self.bias = nn.Parameter(torch.randn(d_model))  # D, the long convolution's skip
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        u = self.short(self.in_proj(x)).transpose(1, 2)  # [b, 3d, l]
        x1, x2, v = u.split(self.d_model, dim=1)
        v = x1 * v
        h = self.filter(x.shape[1])
        conv = causal_conv_direct if self.impl == "recurrent" else causal_conv_fft
        y = x2 * (conv(v, h) + self.bias[:, None] * v)
        return self.out_proj(y.transpose(1, 2))

    def state_size(self, sequence_length: int = 2048) -> int:
        # the long convolution's input history, as zoology counts it (the short convolution's
        # window is the convolution cache, counted apart: mixers/state.py)
        return self.d_model * sequence_length

    def allocate_cache(self, batch_size: int, max_len: int) -> HyenaCache:
        p = self.in_proj.weight
        return HyenaCache(p.new_zeros(batch_size, self.d_model, max_len),
                          self.short.allocate(batch_size))

    def step(self, x_t: Tensor, cache: HyenaCache) -> Tensor:
        if cache.t >= cache.history.shape[-1]:
            raise RecallLabError(f"hyena: decoding past the cache's {cache.history.shape[-1]} "
                                 "tokens (allocate_cache's max_len)")
        u, cache.conv = self.short.step(self.in_proj(x_t), cache.conv)
        x1, x2, v = u.split(self.d_model, dim=-1)
        v = x1 * v
        t = cache.t
        cache.history = torch.cat([cache.history[..., :t], v[..., None],
                                   cache.history[..., t + 1:]], dim=-1)
        cache.t = t + 1
        h = self.filter(t + 1)  # [d, t + 1]
        y = x2 * ((cache.history[..., :t + 1] * h.flip(-1)).sum(-1) + self.bias * v)
        return self.out_proj(y)
