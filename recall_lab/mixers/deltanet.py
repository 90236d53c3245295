"""`deltanet` and `gated-deltanet`: the delta rule, without and with a data-dependent decay.

DeltaNet (Yang, Wang, Zhang, Shen, Kim, "Parallelizing Linear Transformers with the Delta Rule
over Sequence Length", NeurIPS 2024, arXiv 2406.06484; the rule from Schlag, Irie, Schmidhuber,
ICML 2021, arXiv 2102.11174) and Gated DeltaNet (Yang, Kautz, Hatamizadeh, "Gated Delta Networks:
Improving Mamba2 with Delta Rule", ICLR 2025, arXiv 2412.06464), per head, state d_k x d_v:

    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t

(alpha_t = 1 for DeltaNet). Three forms of it:

- `delta_rule_recurrent`: the loop (the reference);
- `delta_rule_chunked`: the WY / UT-transform form. Within a chunk starting from state S0, with
  G_t the decay accumulated inside the chunk and Gamma_ts = G_t / G_s (s <= t), the new values
  u_t = beta_t (v_t - alpha_t S_{t-1}^T k_t) solve the unit lower-triangular system
  (I + tril(diag(beta) (K K^T * Gamma), -1)) U = diag(beta) V - diag(beta G) K S0, so
  U = U' - W S0 with [U', W] from one triangular solve per chunk (no state needed); then
  O = (Q * G) S0 + tril(Q K^T * Gamma) U and S_end = G_C S0 + (K * G_C / G)^T U;
- `delta_rule_step`: one token (decoding).

The mixers follow the papers' layers: q, k, v projections, a short causal convolution with SiLU
on each, L2-normalised q and k (q also scaled by 1/sqrt(d_k)), beta = sigmoid(W_beta x) per head
and token, a per-head RMSNorm on the output, `out_proj`. Gated DeltaNet adds
alpha = exp(-exp(A_log) softplus(W_alpha x + dt_bias)) per head and token (Mamba2's decay
parametrisation) and an output gate RMSNorm(o) * SiLU(W_g x).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import dplr_native, fla_kernels
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


def delta_rule_recurrent(q: Tensor, k: Tensor, v: Tensor, beta: Tensor,
                         g: Tensor | None = None) -> Tensor:
    """The delta rule as a loop. q, k [b, h, l, d_k], v [b, h, l, d_v], beta [b, h, l],
    g [b, h, l] = log alpha (None: no decay) -> o [b, h, l, d_v]."""
    b, h, length, dk = q.shape
    state = q.new_zeros(b, h, dk, v.shape[-1])
    gs = [None] * length if g is None else g.unbind(2)
    out = []
    for q_t, k_t, v_t, beta_t, g_t in zip(q.unbind(2), k.unbind(2), v.unbind(2),
                                          beta.unbind(2), gs, strict=True):
        o, state = delta_rule_step(q_t, k_t, v_t, beta_t, g_t, state)
        out.append(o)
    return torch.stack(out, dim=2)


def delta_rule_step(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor | None,
                    state: Tensor) -> tuple[Tensor, Tensor]:
    """One token: q, k [b, h, d_k], v [b, h, d_v], beta, g [b, h], state [b, h, d_k, d_v]."""
    if g is not None:
        state = state * g.exp()[..., None, None]
    u = beta[..., None] * (v - (state * k[..., :, None]).sum(-2))  # the new value
    state = state + k[..., :, None] * u[..., None, :]
    return (q[..., :, None] * state).sum(-2), state


def delta_rule_chunked(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor | None,
                       chunk: int, return_state: bool = False):
    """The delta rule in chunks of at most `chunk` tokens (module docstring); same arguments as
    the loop. `return_state`: (o, the final state [b, h, d_k, d_v]) (Gated DeltaProduct's tests
    compare it with its loop's)."""
    length = q.shape[2]
    chunk = balanced_chunk(length, chunk)
    qc, kc, vc = (to_chunks(t, chunk) for t in (q, k, v))  # [b, h, n, c, .]
    bc = to_chunks(beta[..., None], chunk)  # [b, h, n, c, 1]; zero on padding: no update
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    kk = bc * (kc @ kc.transpose(-1, -2))
    scores = qc @ kc.transpose(-1, -2)
    if g is None:
        gam, scores = None, scores.masked_fill(~causal, 0.0)
        kb = bc * kc
    else:
        gam = to_chunks(g[..., None], chunk)[..., 0].cumsum(-1)  # [b, h, n, c]: log G_t
        decay = (gam[..., :, None] - gam[..., None, :]).masked_fill(~causal, -math.inf).exp()
        kk, scores = kk * decay, scores * decay  # both zero above the diagonal now
        kb = bc * gam.exp()[..., None] * kc
    dv = vc.shape[-1]
    # I + tril(kk, -1): solve_triangular reads the strict lower triangle only (unitriangular),
    # and its gradient with respect to the matrix lives there too
    sol = torch.linalg.solve_triangular(kk, torch.cat([bc * vc, kb], dim=-1), upper=False,
                                        unitriangular=True)
    u0, w = sol[..., :dv], sol[..., dv:]
    qg = qc if gam is None else qc * gam.exp()[..., None]
    kg = kc if gam is None else kc * (gam[..., -1:] - gam).exp()[..., None]
    state = q.new_zeros(*q.shape[:2], q.shape[-1], dv)
    out = []
    # per-chunk views by one unbind each (indexing inside the loop would make autograd write
    # every chunk's gradient into a zeroed full-size tensor: quadratic in the number of chunks)
    ends = [None] * qc.shape[2] if gam is None else gam[..., -1, None, None].exp().unbind(2)
    for u0_i, w_i, qg_i, s_i, kg_i, end in zip(u0.unbind(2), w.unbind(2), qg.unbind(2),
                                                scores.unbind(2), kg.unbind(2), ends,
                                                strict=True):
        u = u0_i - w_i @ state
        out.append(qg_i @ state + s_i @ u)
        if end is not None:
            state = state * end
        state = state + kg_i.transpose(-1, -2) @ u
    o = from_chunks(torch.stack(out, dim=2), length)
    return (o, state) if return_state else o


def mamba2_decay(num_heads: int) -> tuple[nn.Parameter, nn.Parameter]:
    """A_log and dt_bias of a per-head decay alpha = exp(-exp(A_log) softplus(. + dt_bias)),
    initialised as Mamba2's layer (A in [1, 16], dt log-uniform in [0.001, 0.1]); kept out of
    weight decay. Shared by the gated delta rules."""
    A_log = nn.Parameter(torch.empty(num_heads).uniform_(0, 16).log())
    dt = torch.exp(torch.rand(num_heads) * (math.log(0.1) - math.log(0.001))
                   + math.log(0.001)).clamp(min=1e-4)
    dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
    A_log._no_weight_decay = True
    dt_bias._no_weight_decay = True
    return A_log, dt_bias


def l2norm(x: Tensor, eps: float = 1e-6) -> Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


@dataclass
class DeltaCache:
    state: Tensor  # [b, h, d_k, d_v]
    conv: Tensor | None  # [b, width of the q/k/v projections, conv_size - 1]


class DeltaLayer(nn.Module):
    """What a delta-rule family's layer shares once its projections are made (KDA, Gated
    DeltaProduct): the convolved projections through `_parts` (q, k, v, beta, log alpha,
    token-major) into its recurrence (`recurrent` the loop, `chunked` the fast form, `one_step`
    decoding; each returns (o, state)), then `_output`; a d_k x d_v state per head. A subclass
    sets `qkv`, `conv`, `num_heads`, `head_k`, `head_v`, `chunk_size`, `impl` and the three
    functions."""

    recurrent: Callable
    chunked: Callable
    one_step: Callable
    native: Callable  # the recurrence on the native CPU kernel (mixers/dplr_native.py)

    def forward(self, x: Tensor) -> Tensor:
        u = self.qkv(x)
        if self.conv is not None:
            u = self.conv(u)
        q, k, v, beta, g = (t.transpose(1, 2) for t in self._parts(x, u))  # [b, h, l, ..]
        if self.impl == "recurrent":
            o, _ = self.recurrent(q, k, v, beta, g)
        elif dplr_native.usable(q, k, v, beta, g):
            o, _ = self.native(q, k, v, beta, g)
        else:
            o, _ = self.chunked(q, k, v, beta, g, self.chunk_size)
        return self._output(o.transpose(1, 2), x)

    def state_size(self, sequence_length: int = 2048) -> int:
        # recurrent state only, as zoology counts it; the short convolution's window is the
        # convolution cache, counted apart (mixers/state.py)
        return self.num_heads * self.head_k * self.head_v

    def allocate_cache(self, batch_size: int, max_len: int) -> DeltaCache:
        p = self.qkv.weight
        state = p.new_zeros(batch_size, self.num_heads, self.head_k, self.head_v)
        return DeltaCache(state, None if self.conv is None else self.conv.allocate(batch_size))

    def step(self, x_t: Tensor, cache: DeltaCache) -> Tensor:
        u = self.qkv(x_t)
        if self.conv is not None:
            u, cache.conv = self.conv.step(u, cache.conv)
        q, k, v, beta, g = self._parts(x_t, u)
        o, cache.state = self.one_step(q, k, v, beta, g, cache.state)
        return self._output(o, x_t)


class DeltaNet(nn.Module):
    """DeltaNet mixer; options: `num_heads`, `expand_k`, `expand_v` (key / value widths as
    multiples of d_model), `conv_size` (0 = no short convolution), `chunk_size`, `impl` ("chunk"
    or the "recurrent" reference loop)."""

    gated = False

    def __init__(self, d_model: int, layer_idx: int = 0, num_heads: int = 4,
                 expand_k: float = 1.0, expand_v: float = 1.0, conv_size: int = 4,
                 chunk_size: int = 16, impl: str = "chunk") -> None:
        super().__init__()
        check_choice("impl", impl, IMPLS)
        for name, value in (("num_heads", num_heads), ("chunk_size", chunk_size)):
            check_positive(name, value)
        if conv_size:
            check_positive("conv_size", conv_size)
        self.key_dim, self.value_dim = int(d_model * expand_k), int(d_model * expand_v)
        if min(self.key_dim, self.value_dim) < 1 or self.key_dim % num_heads \
                or self.value_dim % num_heads:
            raise RecallLabError(f"num_heads ({num_heads}) must divide the key width "
                                 f"({self.key_dim}) and the value width ({self.value_dim})")
        self.d_model, self.layer_idx, self.num_heads = d_model, layer_idx, num_heads
        self.chunk_size, self.impl = chunk_size, impl
        self.head_k, self.head_v = self.key_dim // num_heads, self.value_dim // num_heads
        width = 2 * self.key_dim + self.value_dim
        self.qkv = nn.Linear(d_model, width, bias=False)
        self.b_proj = nn.Linear(d_model, num_heads, bias=False)
        self.conv = ShortConv(width, conv_size, activation=True) if conv_size else None
        self.o_norm = RMSNorm(self.head_v, eps=1e-5)
        self.out_proj = nn.Linear(self.value_dim, d_model, bias=False)

    def _qkv(self, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.conv is None:
            u = F.silu(u)
        q, k, v = u.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        return q, k, v

    def _heads(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return l2norm(q) * self.head_k ** -0.5, l2norm(k)

    def _decay(self, x: Tensor) -> Tensor | None:
        return None  # log alpha; Gated DeltaNet's below

    def _output(self, o: Tensor, x: Tensor) -> Tensor:
        """Per-head output [.., h, d_v] (token-major) -> the normed, flattened [.., value_dim]."""
        return self.o_norm(o).flatten(-2)

    def forward(self, x: Tensor) -> Tensor:
        u = self.qkv(x)
        if self.conv is not None:
            u = self.conv(u)
        q, k, v = self._qkv(u)
        if (self.impl != "recurrent" and not fla_kernels.on_cuda(x)
                and dplr_native.usable(x, u)):
            return self._native(x, q, k, v)
        q, k = self._heads(split_heads(q, self.num_heads), split_heads(k, self.num_heads))
        v = split_heads(v, self.num_heads)
        beta = self.b_proj(x).sigmoid().transpose(1, 2)  # [b, h, l]
        g = self._decay(x)
        g = None if g is None else g.transpose(1, 2)
        if self.impl == "recurrent":
            o = delta_rule_recurrent(q, k, v, beta, g)
        else:  # on CUDA, FLA's kernel (fla_kernels.py); else the torch form (on the CPU the
            # native kernel took it above)
            o = fla_kernels.delta_rule(q, k, v, beta, g, delta_rule_chunked)
            if o is None:
                o = delta_rule_chunked(q, k, v, beta, g, self.chunk_size)
        return self.out_proj(self._output(o.transpose(1, 2), x))

    def _native(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """The forward on the CPU's native kernel (dplr_native.py), token-major throughout:
        the head-major views of the torch forms made every element-wise op on q and k strided
        (about a tenth of the 16-pair cell's step)."""
        h = self.num_heads
        q, k = self._heads(q.unflatten(-1, (h, -1)), k.unflatten(-1, (h, -1)))  # [b, l, h, d]
        g = self._decay(x)
        o, _ = dplr_native.delta_rule_tokens(q, k, v.unflatten(-1, (h, -1)),
                                             self.b_proj(x).sigmoid(), g)
        return self.out_proj(self._output(o, x))

    def state_size(self, sequence_length: int = 2048) -> int:
        # recurrent state only, as zoology counts it; the short convolution's window is the
        # convolution cache, counted apart (mixers/state.py)
        return self.num_heads * self.head_k * self.head_v

    def memory_spec(self) -> MemorySpec:
        """The layer as a memory (mixers/memory.py): the delta rule with beta = 1 on L2-normed
        keys, no decay (Gated DeltaNet's alpha = 1, its output gate left out), RMSNorm per head."""
        return MemorySpec("delta", self.num_heads, self.head_k, self.head_v, "l2",
                          self.head_k ** -0.5, "rms_head")

    def allocate_cache(self, batch_size: int, max_len: int) -> DeltaCache:
        p = self.qkv.weight
        state = p.new_zeros(batch_size, self.num_heads, self.head_k, self.head_v)
        return DeltaCache(state, None if self.conv is None else self.conv.allocate(batch_size))

    def step(self, x_t: Tensor, cache: DeltaCache) -> Tensor:
        b = x_t.shape[0]
        u = self.qkv(x_t)
        if self.conv is not None:
            u, cache.conv = self.conv.step(u, cache.conv)
        q, k, v = (t.reshape(b, self.num_heads, -1) for t in self._qkv(u))
        q, k = self._heads(q, k)
        g = self._decay(x_t)
        o, cache.state = delta_rule_step(q, k, v, self.b_proj(x_t).sigmoid(), g, cache.state)
        return self.out_proj(self._output(o, x_t))


class GatedDeltaNet(DeltaNet):
    """Gated DeltaNet mixer: DeltaNet's options, plus the decay alpha per head and token
    (A_log, dt_bias initialised as Mamba2's / the paper's layer) and the SiLU output gate."""

    gated = True

    def __init__(self, d_model: int, layer_idx: int = 0, num_heads: int = 4,
                 expand_k: float = 1.0, expand_v: float = 1.0, conv_size: int = 4,
                 chunk_size: int = 16, impl: str = "chunk") -> None:
        super().__init__(d_model, layer_idx, num_heads, expand_k, expand_v, conv_size,
                         chunk_size, impl)
        self.a_proj = nn.Linear(d_model, num_heads, bias=False)
        self.g_proj = nn.Linear(d_model, self.value_dim, bias=False)
        self.A_log, self.dt_bias = mamba2_decay(num_heads)

    def _decay(self, x: Tensor) -> Tensor:
        return -self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)

    def _output(self, o: Tensor, x: Tensor) -> Tensor:
        gate = F.silu(self.g_proj(x)).view(o.shape)
        return (self.o_norm(o) * gate).flatten(-2)
