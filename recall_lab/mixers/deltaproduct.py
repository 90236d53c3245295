"""`gated-deltaproduct`: Gated DeltaProduct (Siems, Carstensen, Zela, Hutter, Pontil, Grazzi,
"DeltaProduct: Improving State-Tracking in Linear RNNs via Householder Products",
arXiv 2502.10297): n_h delta-rule steps per token, so the state transition is a product of n_h
generalised Householder matrices (its rank grows with n_h, the state does not), under one
Gated DeltaNet decay per head and token. Per head, state d_k x d_v:

    S_t = H_{t,n_h} ... H_{t,1} (alpha_t S_{t-1}) + (the n_h writes),
    each step j:  S <- S + beta_{t,j} k_{t,j} (v_{t,j} - S^T k_{t,j})^T,   o_t = S_t^T q_t

(n_h = 1 is Gated DeltaNet). Three forms of it:

- `deltaproduct_recurrent`: the loop over tokens and their n_h steps (the reference);
- `deltaproduct_chunked`: the same steps as one delta rule over n_h L interleaved sub-steps
  (keys, values and betas in the order t1 j1, t1 j2, ..., the decay on each token's first
  sub-step, the query on its last), run by DeltaNet's WY / UT chunked form (deltanet.py) in
  chunks of `chunk` tokens (n_h chunk sub-steps); only the last sub-step's outputs are kept;
- `deltaproduct_step`: one token (decoding).

The mixer follows the paper's layer: a query projection, n_h key and value projections and n_h
betas per head, a short causal convolution with SiLU on q, k and v, L2-normalised q and k (q
also scaled by 1/sqrt(d_k)), beta = sigmoid(W_beta x), times 2 by default (the paper's
negative-eigenvalue range (0, 2)), Gated DeltaNet's decay alpha = exp(-exp(A_log)
softplus(W_alpha x + dt_bias)) per head, and the output RMSNorm(o) * SiLU(W_g x) before
`out_proj`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import dplr_native
from recall_lab.mixers._linear import ShortConv, check_choice, check_positive
from recall_lab.mixers.deltanet import DeltaLayer, delta_rule_chunked, l2norm, mamba2_decay
from recall_lab.ssm import RMSNorm

IMPLS = ("chunk", "recurrent")


def deltaproduct_step(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor,
                      state: Tensor) -> tuple[Tensor, Tensor]:
    """One token: q [b, h, d_k], k [b, h, n_h, d_k], v [b, h, n_h, d_v], beta [b, h, n_h],
    g [b, h] (log alpha), state [b, h, d_k, d_v]."""
    state = state * g.exp()[..., None, None]
    for k_j, v_j, beta_j in zip(k.unbind(2), v.unbind(2), beta.unbind(2), strict=True):
        u = beta_j[..., None] * (v_j - (state * k_j[..., :, None]).sum(-2))  # the new value
        state = state + k_j[..., :, None] * u[..., None, :]
    return (q[..., :, None] * state).sum(-2), state


def deltaproduct_recurrent(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor
                           ) -> tuple[Tensor, Tensor]:
    """The recurrence as a loop: q [b, h, l, d_k], k [b, h, l, n_h, d_k], v [b, h, l, n_h, d_v],
    beta [b, h, l, n_h], g [b, h, l] -> (o [b, h, l, d_v], final state [b, h, d_k, d_v])."""
    b, h, _, dk = q.shape
    state = q.new_zeros(b, h, dk, v.shape[-1])
    out = []
    for q_t, k_t, v_t, beta_t, g_t in zip(q.unbind(2), k.unbind(2), v.unbind(2),
                                          beta.unbind(2), g.unbind(2), strict=True):
        o, state = deltaproduct_step(q_t, k_t, v_t, beta_t, g_t, state)
        out.append(o)
    return torch.stack(out, dim=2), state


def deltaproduct_chunked(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor, chunk: int
                         ) -> tuple[Tensor, Tensor]:
    """The recurrence as one delta rule over the interleaved sub-steps (module docstring); same
    arguments and results as the loop."""
    b, h, length, n = beta.shape
    qs = torch.cat([q.new_zeros(b, h, length, n - 1, q.shape[-1]), q[..., None, :]], dim=3)
    gs = torch.cat([g[..., None], g.new_zeros(b, h, length, n - 1)], dim=3)
    o, state = delta_rule_chunked(qs.flatten(2, 3), k.flatten(2, 3), v.flatten(2, 3),
                                  beta.flatten(2, 3), gs.flatten(2, 3), chunk * n,
                                  return_state=True)
    return o[:, :, n - 1::n], state


class GatedDeltaProduct(DeltaLayer):
    """Gated DeltaProduct mixer; options: `num_householder` (n_h delta steps per token; 1 =
    Gated DeltaNet), `num_heads`, `expand_k`, `expand_v` (key / value widths as multiples of
    d_model), `conv_size` (0 = no short convolution), `allow_neg_eigval` (beta in (0, 2), the
    paper's default; False: (0, 1)), `chunk_size` (tokens), `impl` ("chunk" or the "recurrent"
    reference loop)."""

    recurrent = staticmethod(deltaproduct_recurrent)
    chunked = staticmethod(deltaproduct_chunked)
    one_step = staticmethod(deltaproduct_step)
    native = staticmethod(dplr_native.delta_product)

    def __init__(self, d_model: int, layer_idx: int = 0, num_householder: int = 2,
                 num_heads: int = 4, expand_k: float = 1.0, expand_v: float = 1.0,
                 conv_size: int = 4, allow_neg_eigval: bool = True, chunk_size: int = 16,
                 impl: str = "chunk") -> None:
        super().__init__()
        check_choice("impl", impl, IMPLS)
        for name, value in (("num_householder", num_householder), ("num_heads", num_heads),
                            ("chunk_size", chunk_size)):
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
        self.num_householder, self.chunk_size, self.impl = num_householder, chunk_size, impl
        self.beta_scale = 2.0 if allow_neg_eigval else 1.0
        self.head_k, self.head_v = self.key_dim // num_heads, self.value_dim // num_heads
        n = num_householder
        self.widths = [self.key_dim, n * self.key_dim, n * self.value_dim]  # q, k's, v's
        self.qkv = nn.Linear(d_model, sum(self.widths), bias=False)
        self.conv = ShortConv(sum(self.widths), conv_size, activation=True) if conv_size \
            else None
        self.b_proj = nn.Linear(d_model, n * num_heads, bias=False)
        self.a_proj = nn.Linear(d_model, num_heads, bias=False)
        self.A_log, self.dt_bias = mamba2_decay(num_heads)
        self.g_proj = nn.Linear(d_model, self.value_dim, bias=False)
        self.o_norm = RMSNorm(self.head_v, eps=1e-5)
        self.out_proj = nn.Linear(self.value_dim, d_model, bias=False)

    def _parts(self, x: Tensor, u: Tensor) -> tuple[Tensor, ...]:
        """q [.., h, d_k] (normalised, scaled), k [.., h, n_h, d_k] (normalised), v [.., h, n_h,
        d_v], beta [.., h, n_h], log alpha [.., h] from the input x and the convolved
        projections u, token-major."""
        if self.conv is None:
            u = F.silu(u)
        q, k, v = u.split(self.widths, dim=-1)
        lead, h, n = x.shape[:-1], self.num_heads, self.num_householder
        q = q.reshape(*lead, h, self.head_k)
        k = k.reshape(*lead, n, h, self.head_k).transpose(-2, -3)  # the layer's (n h d) order
        v = v.reshape(*lead, n, h, self.head_v).transpose(-2, -3)
        beta = (self.b_proj(x).sigmoid() * self.beta_scale).reshape(*lead, n, h).transpose(-1, -2)
        g = -self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)
        return l2norm(q) * self.head_k ** -0.5, l2norm(k), v, beta, g

    def _output(self, o: Tensor, x: Tensor) -> Tensor:
        """Per-head o [.., h, d_v] (token-major) -> out_proj(RMSNorm(o) * SiLU(W_g x))."""
        gate = F.silu(self.g_proj(x)).view(o.shape)
        return self.out_proj((self.o_norm(o) * gate).flatten(-2))
