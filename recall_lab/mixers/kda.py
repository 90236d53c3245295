"""`kda`: Kimi Delta Attention (Kimi Team, "Kimi Linear: An Expressive, Efficient Attention
Architecture", arXiv 2510.26692), Gated DeltaNet with a decay per key channel instead of one per
head. Per head, state d_k x d_v:

    S_t = (I - beta_t k_t k_t^T) diag(alpha_t) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t

(alpha_t in (0, 1)^d_k). Three forms of it:

- `kda_recurrent`: the loop (the reference);
- `kda_chunked`: DeltaNet's WY / UT-transform form (deltanet.py) with the decay per channel.
  Within a chunk from state S0, with G_t the decay accumulated inside the chunk (a vector), the
  new values u_t = beta_t (v_t - k_t^T diag(alpha_t) S_{t-1}) solve
  (I + tril(diag(beta) A, -1)) U = diag(beta) V - diag(beta) (K * G) S0 with
  A_ts = sum_d k_td k_sd G_td / G_sd; then O = (Q * G) S0 + tril(Q K^T-with-ratios) U and
  S_end = diag(G_C) S0 + (K * G_C / G)^T U. The ratio matrices come from `decayed_scores`
  (_linear.py), which stays finite for any decay;
- `kda_step`: one token (decoding).

The mixer follows the paper's layer: q, k, v projections, a short causal convolution with SiLU
on each, L2-normalised q and k (q also scaled by 1/sqrt(d_k)), beta = sigmoid(W_beta x) per head
and token, the decay log alpha = -exp(A_log) softplus(W_up W_down x + dt_bias) per head and key
channel (a low-rank projection; A_log per head, dt_bias per channel), and the output
RMSNorm(o) * sigmoid(W_up W_down x) (low-rank too) before `out_proj`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import dplr_native
from recall_lab.mixers._linear import (
    ShortConv,
    balanced_chunk,
    check_choice,
    check_positive,
    decayed_scores,
    from_chunks,
    to_chunks,
)
from recall_lab.mixers.deltanet import DeltaLayer, l2norm
from recall_lab.ssm import RMSNorm

IMPLS = ("chunk", "recurrent")


def kda_step(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor, state: Tensor
             ) -> tuple[Tensor, Tensor]:
    """One token: q, k, g [b, h, d_k] (g = log alpha), v [b, h, d_v], beta [b, h],
    state [b, h, d_k, d_v]."""
    state = state * g.exp()[..., None]
    u = beta[..., None] * (v - (state * k[..., :, None]).sum(-2))  # the new value
    state = state + k[..., :, None] * u[..., None, :]
    return (q[..., :, None] * state).sum(-2), state


def kda_recurrent(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor
                  ) -> tuple[Tensor, Tensor]:
    """The recurrence as a loop: q, k, g [b, h, l, d_k], v [b, h, l, d_v], beta [b, h, l]
    -> (o [b, h, l, d_v], final state [b, h, d_k, d_v])."""
    b, h, _, dk = q.shape
    state = q.new_zeros(b, h, dk, v.shape[-1])
    out = []
    for q_t, k_t, v_t, beta_t, g_t in zip(q.unbind(2), k.unbind(2), v.unbind(2),
                                          beta.unbind(2), g.unbind(2), strict=True):
        o, state = kda_step(q_t, k_t, v_t, beta_t, g_t, state)
        out.append(o)
    return torch.stack(out, dim=2), state


def kda_chunked(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor, chunk: int
                ) -> tuple[Tensor, Tensor]:
    """The recurrence in chunks of at most `chunk` tokens (module docstring); same arguments
    and results as the loop."""
    length = q.shape[2]
    chunk = balanced_chunk(length, chunk)
    qc, kc, vc, gc = (to_chunks(t, chunk) for t in (q, k, v, g))  # [b, h, n, c, .]
    bc = to_chunks(beta[..., None], chunk)  # [b, h, n, c, 1]; zero on padding: no update
    gam = gc.cumsum(3)  # log G_t per key channel
    # K K^T and Q K^T with the ratios in one call (the solve reads kk's strict lower part only)
    both = decayed_scores(torch.cat([kc, qc], dim=-2), torch.cat([gam, gam], dim=-2), kc, gam,
                          chunk, strict=False)
    kk, scores = bc * both[..., :chunk, :], both[..., chunk:, :]
    dv = vc.shape[-1]
    # I + tril(kk, -1): the unit lower-triangular system of the module docstring
    sol = torch.linalg.solve_triangular(kk, torch.cat([bc * vc, bc * gam.exp() * kc], dim=-1),
                                        upper=False, unitriangular=True)
    u0, w = sol[..., :dv], sol[..., dv:]
    qg = qc * gam.exp()
    kg = kc * (gam[..., -1:, :] - gam).exp()
    end = gam[..., -1, :].exp()  # [b, h, n, d_k]
    state = q.new_zeros(*q.shape[:2], q.shape[-1], dv)
    out = []
    # per-chunk views by one unbind each (indexing in the loop: quadratic backward, deltanet.py)
    for u0_i, w_i, qg_i, s_i, kg_i, end_i in zip(u0.unbind(2), w.unbind(2), qg.unbind(2),
                                                  scores.unbind(2), kg.unbind(2), end.unbind(2),
                                                  strict=True):
        u = u0_i - w_i @ state
        out.append(qg_i @ state + s_i @ u)
        state = end_i[..., None] * state + kg_i.transpose(-1, -2) @ u
    return from_chunks(torch.stack(out, dim=2), length), state


class KimiDeltaAttention(DeltaLayer):
    """KDA mixer; options: `num_heads`, `expand_k`, `expand_v` (key / value widths as multiples
    of d_model), `conv_size` (0 = no short convolution), `allow_neg_eigval` (beta in (0, 2)
    instead of (0, 1)), `chunk_size`, `impl` ("chunk" or the "recurrent" reference loop).
    The low-rank projections of the decay and the output gate have rank d_v (the paper's
    layer: the head's value width)."""

    recurrent = staticmethod(kda_recurrent)
    chunked = staticmethod(kda_chunked)
    one_step = staticmethod(kda_step)
    native = staticmethod(dplr_native.delta_rule)

    def __init__(self, d_model: int, layer_idx: int = 0, num_heads: int = 4,
                 expand_k: float = 1.0, expand_v: float = 1.0, conv_size: int = 4,
                 allow_neg_eigval: bool = False, chunk_size: int = 16,
                 impl: str = "chunk") -> None:
        super().__init__()
        check_choice("impl", impl, IMPLS)
        for name, value in (("num_heads", num_heads), ("chunk_size", chunk_size)):
            check_positive(name, value)
        if conv_size:
            check_positive("conv_size", conv_size)
        self.key_dim, self.value_dim = int(d_model * expand_k), int(d_model * expand_v)
        if min(self.key_dim, self.value_dim) < 1:
            raise RecallLabError(f"expand_k ({expand_k}) and expand_v ({expand_v}) must give "
                                 f"widths of at least 1 at d_model {d_model}, got "
                                 f"{self.key_dim} and {self.value_dim}")
        if self.key_dim % num_heads or self.value_dim % num_heads:
            raise RecallLabError(f"num_heads ({num_heads}) must divide the key width "
                                 f"({self.key_dim}) and the value width ({self.value_dim})")
        self.d_model, self.layer_idx, self.num_heads = d_model, layer_idx, num_heads
        self.chunk_size, self.impl = chunk_size, impl
        self.beta_scale = 2.0 if allow_neg_eigval else 1.0
        self.head_k, self.head_v = self.key_dim // num_heads, self.value_dim // num_heads
        width = 2 * self.key_dim + self.value_dim
        self.qkv = nn.Linear(d_model, width, bias=False)
        self.conv = ShortConv(width, conv_size, activation=True) if conv_size else None
        self.b_proj = nn.Linear(d_model, num_heads, bias=False)
        self.f_proj = nn.Sequential(nn.Linear(d_model, self.head_v, bias=False),
                                    nn.Linear(self.head_v, self.key_dim, bias=False))
        # A in [1, 16] per head, dt in [0.001, 0.1] per channel (the authors' layer)
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(1, 16).log())
        dt = torch.exp(torch.rand(self.key_dim) * (math.log(0.1) - math.log(0.001))
                       + math.log(0.001)).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        self.A_log._no_weight_decay = True
        self.dt_bias._no_weight_decay = True
        self.g_proj = nn.Sequential(nn.Linear(d_model, self.head_v, bias=False),
                                    nn.Linear(self.head_v, self.value_dim, bias=True))
        self.o_norm = RMSNorm(self.head_v, eps=1e-5)
        self.out_proj = nn.Linear(self.value_dim, d_model, bias=False)

    def _parts(self, x: Tensor, u: Tensor) -> tuple[Tensor, ...]:
        """q (normalised, scaled), k (normalised), v, beta, log alpha from the input x and the
        convolved projections u, token-major with heads split off: [.., h, d]."""
        if self.conv is None:
            u = F.silu(u)
        q, k, v = u.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        lead, h = x.shape[:-1], self.num_heads
        q, k, v = (t.reshape(*lead, h, -1) for t in (q, k, v))
        g = -self.A_log.exp()[:, None] * F.softplus(
            (self.f_proj(x) + self.dt_bias).reshape(*lead, h, -1))
        beta = self.b_proj(x).sigmoid() * self.beta_scale
        return l2norm(q) * self.head_k ** -0.5, l2norm(k), v, beta, g

    def _output(self, o: Tensor, x: Tensor) -> Tensor:
        """Per-head o [.., h, d_v] (token-major) -> out_proj(RMSNorm(o) * sigmoid(gate))."""
        gate = self.g_proj(x).sigmoid().view(o.shape)
        return self.out_proj((self.o_norm(o) * gate).flatten(-2))

