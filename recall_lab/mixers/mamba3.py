"""`mamba3`: Mamba-3 (Lahoti, Li, Chen, Wang, Bick, Kolter, Dao, Gu, "Mamba-3: Improved Sequence
Modeling using State Space Principles", ICLR 2026, arXiv 2603.15569), written from the paper's
equations. Per head, state h of d_state x headdim, scalar decay alpha_t = exp(Delta_t A_t):

    h_t = alpha_t h_{t-1} + beta_t k_{t-1} x_{t-1}^T + gamma_t k_t x_t^T,    y_t = h_t^T q_t
    beta_t = alpha_t Delta_t (1 - lambda_t),   gamma_t = lambda_t Delta_t

the exponential-trapezoidal rule (lambda_t = sigmoid(.) in (0, 1) per head and token; lambda = 1
is Mamba-2's exponential-Euler rule), with q = C and k = B rotated by a data-dependent angle: the
complex (rotary) state. Rotating q_t and k_s by the cumulative angle
phi_t = sum_{s<=t} tanh(theta_s) pi Delta_s (the "RoPE trick") equals a state transition that
rotates by each token's increment.
The channels are rotated in pairs (2i, 2i + 1) for the first `rope_fraction * d_state / 2` pairs;
the rest are not rotated. MIMO (`mimo_rank` R > 1): B and C have rank R per token, x is lifted
to R inputs x_r = x * w_x[r], and the state receives sum_r k_r x_r^T; each rank reads
y_r = h^T q_r (+ D x_r), gated by SiLU(z * w_z[r]), and the ranks are summed with weights w_o[r].

Three forms of the recurrence (q, k [b, h, l, R, N], v [b, h, l, R, P], angles [b, h, l, A]):

- `mamba3_recurrent`: the loop above (the reference);
- `mamba3_chunked`: the state-space-duality form. Unrolled, token s reaches h_t (s < t) with
  weight exp(G_t - G_s) w_s, w_s = gamma_s + Delta_{s+1} (1 - lambda_{s+1}) (its own gamma and
  the next token's trapezoid term), and itself (s = t) with gamma_t. Per chunk: a masked
  [C R, C R] score matrix (ranks folded into time) for the tokens inside, the state carried
  between chunks with the weights w; every decay factor is a ratio <= 1;
- `mamba3_step`: one token (decoding), carrying the previous token's rotated k and x.

The layer follows the paper's (and the authors' layer's) choices: one in-projection to z, x, B,
C, Delta, A, lambda and the angles; no short convolution; RMSNorm on B and C over d_state, then a
learned bias per head, rank and channel (initialised to 1); A_t = -softplus(.) <= -1e-4 per head
and token; Delta = softplus(. + dt_bias) (Mamba's initialisation); D skip; out_proj.

State (mixers/state.py): the recurrent state is h, `expand * d_model * d_state` numbers. The
previous token's rotated k (R x d_state per head), its x (headdim per head) and the cumulative
angle (A per head) are per-token caches, counted apart as the convolution caches are (the cache
marks them in `state_parts`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers._linear import (
    balanced_chunk,
    check_choice,
    check_positive,
    from_chunks,
    to_chunks,
)
from recall_lab.ssm import RMSNorm
from recall_lab.ssm.mixers import dt_bias_init

IMPLS = ("chunk", "recurrent")
ROPE_FRACTIONS = (0.5, 1.0)


def rotate(x: Tensor, angles: Tensor) -> Tensor:
    """x [..., N] with its channel pairs (2i, 2i + 1), i < A, rotated by angles [..., A] (the
    same leading shape, or one that broadcasts); the other channels unchanged."""
    n_rot = 2 * angles.shape[-1]
    pairs = x[..., :n_rot].unflatten(-1, (-1, 2))
    cos, sin = angles.cos(), angles.sin()
    a, b = pairs[..., 0], pairs[..., 1]
    rot = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return torch.cat([rot, x[..., n_rot:]], dim=-1)


def _rank_outer(k: Tensor, v: Tensor) -> Tensor:
    """sum_r k_r v_r^T: k [..., R, N], v [..., R, P] -> [..., N, P]."""
    return k.transpose(-1, -2) @ v


def mamba3_step(q: Tensor, k: Tensor, v: Tensor, adt: Tensor, dt: Tensor, trap: Tensor,
                state: Tensor, prev_k: Tensor, prev_v: Tensor) -> tuple[Tensor, Tensor]:
    """One token: q, k [b, h, R, N] (rotated), v [b, h, R, P], adt = Delta A, dt = Delta,
    trap = lambda [b, h], state [b, h, N, P], prev_k / prev_v the previous token's k and v
    (zeros before the first) -> (y [b, h, R, P], new state)."""
    alpha = adt.exp()[..., None, None]
    beta = alpha * (dt * (1 - trap))[..., None, None]
    gamma = (trap * dt)[..., None, None]
    state = alpha * state + beta * _rank_outer(prev_k, prev_v) + gamma * _rank_outer(k, v)
    return q @ state, state


def mamba3_recurrent(q: Tensor, k: Tensor, v: Tensor, adt: Tensor, dt: Tensor, trap: Tensor,
                     angles: Tensor) -> Tensor:
    """The recurrence as a loop. q, k [b, h, l, R, N] (not rotated), v [b, h, l, R, P],
    adt, dt, trap [b, h, l], angles [b, h, l, A] (cumulative) -> y [b, h, l, R, P]."""
    q, k = rotate(q, angles[..., None, :]), rotate(k, angles[..., None, :])
    b, h, _, _, n = q.shape
    state = q.new_zeros(b, h, n, v.shape[-1])
    prev_k, prev_v = torch.zeros_like(k[:, :, 0]), torch.zeros_like(v[:, :, 0])
    out = []
    for q_t, k_t, v_t, a_t, dt_t, tr_t in zip(q.unbind(2), k.unbind(2), v.unbind(2),
                                              adt.unbind(2), dt.unbind(2), trap.unbind(2),
                                              strict=True):
        y, state = mamba3_step(q_t, k_t, v_t, a_t, dt_t, tr_t, state, prev_k, prev_v)
        prev_k, prev_v = k_t, v_t
        out.append(y)
    return torch.stack(out, dim=2)


def mamba3_chunked(q: Tensor, k: Tensor, v: Tensor, adt: Tensor, dt: Tensor, trap: Tensor,
                   angles: Tensor, chunk: int) -> Tensor:
    """The recurrence in chunks of at most `chunk` tokens (module docstring); same arguments
    as the loop."""
    q, k = rotate(q, angles[..., None, :]), rotate(k, angles[..., None, :])
    b, h, length, rank, n = q.shape
    gamma = trap * dt
    eta = dt * (1 - trap)  # the trapezoid's term, paid by the token before
    w = gamma + F.pad(eta[..., 1:], (0, 1))  # token s's weight in every later state
    chunk = balanced_chunk(length, chunk)
    qc, kc, vc = (to_chunks(t, chunk).flatten(3, 4) for t in (q, k, v))  # [b, h, n, C R, .]
    gam, wc, gc = (to_chunks(t[..., None], chunk)[..., 0] for t in (adt, w, gamma))
    gam = gam.cumsum(-1)  # [b, h, n, C]: log of the decay since the chunk's start
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = (gam[..., :, None] - gam[..., None, :]).masked_fill(~causal, -math.inf).exp()
    eye = torch.eye(chunk, dtype=torch.bool, device=q.device)
    mask = decay * torch.where(eye, gc[..., None, :], wc[..., None, :])  # [b, h, n, C, C]
    if rank > 1:
        mask = mask.repeat_interleave(rank, -1).repeat_interleave(rank, -2)
    scores = (qc @ kc.transpose(-1, -2)) * mask
    qg = qc * gam.exp().repeat_interleave(rank, -1)[..., None]
    kw = kc * ((gam[..., -1:] - gam).exp() * wc).repeat_interleave(rank, -1)[..., None]
    ends = gam[..., -1, None, None].exp().unbind(2)
    state = q.new_zeros(b, h, n, v.shape[-1])
    out = []
    # per-chunk views by one unbind each (indexing inside the loop: quadratic backward, see
    # deltanet.py)
    for qg_i, s_i, v_i, kw_i, end in zip(qg.unbind(2), scores.unbind(2), vc.unbind(2),
                                         kw.unbind(2), ends, strict=True):
        out.append(qg_i @ state + s_i @ v_i)
        state = end * state + kw_i.transpose(-1, -2) @ v_i
    y = torch.stack(out, dim=2).unflatten(3, (chunk, rank))  # [b, h, n, C, R, P]
    return from_chunks(y, length)


@dataclass
class Mamba3Cache:
    state: Tensor  # h [b, heads, d_state, headdim]: the recurrent state
    prev_k: Tensor  # [b, heads, R, d_state]: the previous token's rotated k (per-token cache)
    prev_x: Tensor  # [b, heads, headdim]: the previous token's x (per-token cache)
    angle: Tensor  # [b, heads, A]: the cumulative rotary angle (per-token cache)

    # mixers/state.py: counted with the convolution caches, apart from the recurrent state
    state_parts = {"prev_k": "conv", "prev_x": "conv", "angle": "conv"}


class Mamba3(nn.Module):
    """Mamba-3 mixer; options: `d_state` (even: the rotary state pairs its channels),
    `expand` (d_inner = expand * d_model), `headdim`, `mimo_rank` (1 = SISO; R > 1: B and C of
    rank R), `rope_fraction` (0.5 or 1.0 of the channels rotated), `A_floor`, `chunk_size`,
    `impl` ("chunk" or the "recurrent" reference loop)."""

    def __init__(self, d_model: int, layer_idx: int = 0, d_state: int = 16, expand: int = 2,
                 headdim: int = 32, mimo_rank: int = 1, rope_fraction: float = 0.5,
                 A_floor: float = 1e-4, dt_min: float = 1e-3, dt_max: float = 0.1,
                 chunk_size: int = 32, impl: str = "chunk") -> None:
        super().__init__()
        check_choice("impl", impl, IMPLS)
        check_choice("rope_fraction", rope_fraction, ROPE_FRACTIONS)
        for name, value in (("d_state", d_state), ("expand", expand), ("headdim", headdim),
                            ("mimo_rank", mimo_rank), ("chunk_size", chunk_size)):
            check_positive(name, value)
        if d_state % 2:
            raise RecallLabError(f"d_state must be even (the rotary state rotates channel "
                                 f"pairs), got {d_state}")
        self.n_angles = int(d_state * rope_fraction) // 2
        if self.n_angles < 1:
            raise RecallLabError(f"rope_fraction {rope_fraction} of d_state {d_state} rotates "
                                 "no channel pair: use rope_fraction=1.0 or a larger d_state")
        if not A_floor > 0:
            raise RecallLabError(f"A_floor must be > 0, got {A_floor!r}")
        self.d_inner = expand * d_model
        if self.d_inner % headdim:
            raise RecallLabError(f"headdim ({headdim}) must divide expand * d_model "
                                 f"({self.d_inner})")
        self.d_model, self.layer_idx, self.d_state, self.headdim = d_model, layer_idx, d_state, \
            headdim
        self.nheads, self.rank = self.d_inner // headdim, mimo_rank
        self.A_floor, self.chunk_size, self.impl = A_floor, chunk_size, impl
        h, r, n = self.nheads, mimo_rank, d_state
        # [z, x, B, C, Delta, A, lambda, angles]
        self.sizes = [self.d_inner, self.d_inner, r * n, r * n, h, h, h, self.n_angles]
        self.in_proj = nn.Linear(d_model, sum(self.sizes), bias=False)
        self.dt_bias = nn.Parameter(dt_bias_init(h, dt_min, dt_max, 1e-4))
        self.B_bias = nn.Parameter(torch.ones(h, r, n))
        self.C_bias = nn.Parameter(torch.ones(h, r, n))
        self.B_norm = RMSNorm(n, eps=1e-5)
        self.C_norm = RMSNorm(n, eps=1e-5)
        if r > 1:  # the MIMO lifts (the authors' initialisation)
            self.mimo_x = nn.Parameter(torch.full((h, r, headdim), 1.0 / r))
            self.mimo_z = nn.Parameter(torch.ones(h, r, headdim))
            self.mimo_o = nn.Parameter(torch.full((h, r, headdim), 1.0 / r))
        self.D = nn.Parameter(torch.ones(h))
        for p in (self.dt_bias, self.D):
            p._no_weight_decay = True
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def projections(self, x: Tensor) -> dict[str, Tensor]:
        """The in-projection's pieces of x [..., d_model], token-major, before the recurrence:
        z, x [.., h, P]; B, C [.., R, N] after their RMSNorm (the bias not added); dt = Delta,
        adt = Delta A [.., h]; the raw trapezoid and angle projections `trap` [.., h] and
        `theta` [.., A] (sigmoid and tanh not applied): what mamba-ssm's kernel takes
        (tests/gpu/test_gpu_mamba3.py)."""
        z, xs, B, C, dd_dt, dd_A, trap, theta = self.in_proj(x).split(self.sizes, dim=-1)
        z, xs = (t.unflatten(-1, (self.nheads, self.headdim)) for t in (z, xs))
        B, C = (t.unflatten(-1, (self.rank, self.d_state)) for t in (B, C))
        dt = F.softplus(dd_dt + self.dt_bias)
        adt = (-F.softplus(dd_A)).clamp(max=-self.A_floor) * dt
        return {"z": z, "x": xs, "B": self.B_norm(B), "C": self.C_norm(C), "dt": dt,
                "adt": adt, "trap": trap, "theta": theta}

    def _parts(self, x: Tensor):
        """z, x [.., h, P]; q, k [.., h, R, N] (biased, not rotated); adt, dt, lambda [.., h];
        the angle increments tanh(theta) pi Delta [.., h, A]."""
        p = self.projections(x)
        k = p["B"][..., None, :, :] + self.B_bias  # [.., h, R, N]
        q = p["C"][..., None, :, :] + self.C_bias
        step = torch.tanh(p["theta"])[..., None, :] * math.pi * p["dt"][..., None]
        return p["z"], p["x"], q, k, p["adt"], p["dt"], torch.sigmoid(p["trap"]), step

    def _lift(self, xs: Tensor) -> Tensor:
        """x [.., h, P] -> the rank inputs [.., h, R, P]."""
        return xs[..., None, :] * self.mimo_x if self.rank > 1 else xs[..., None, :]

    def _gated(self, y: Tensor, xs: Tensor, z: Tensor) -> Tensor:
        """y [.., h, R, P] (the state's read-out) -> sum_r (y_r + D x_r) SiLU(z_r) w_o
        [.., d_inner]."""
        y = y + self.D[:, None, None] * self._lift(xs)
        if self.rank > 1:
            y = (y * F.silu(z[..., None, :] * self.mimo_z) * self.mimo_o).sum(-2)
        else:
            y = y[..., 0, :] * F.silu(z)
        return y.flatten(-2)

    def inner(self, x: Tensor) -> Tensor:
        """x [b, l, d_model] -> the gated read-out [b, l, d_inner], before out_proj."""
        z, xs, q, k, adt, dt, trap, step = self._parts(x)
        angles = step.cumsum(1)  # [b, l, h, A]
        heads = [t.transpose(1, 2) for t in (q, k, self._lift(xs), adt, dt, trap, angles)]
        if self.impl == "recurrent":
            y = mamba3_recurrent(*heads)
        else:
            y = mamba3_chunked(*heads, chunk=self.chunk_size)
        return self._gated(y.transpose(1, 2), xs, z)

    def forward(self, x: Tensor) -> Tensor:
        return self.out_proj(self.inner(x))

    def state_size(self, sequence_length: int = 2048) -> int:
        # the recurrent state h only; the previous token's k and x and the angle are
        # per-token caches, counted apart (mixers/state.py)
        return self.nheads * self.d_state * self.headdim

    def allocate_cache(self, batch_size: int, max_len: int) -> Mamba3Cache:
        p = self.in_proj.weight
        h = self.nheads
        return Mamba3Cache(p.new_zeros(batch_size, h, self.d_state, self.headdim),
                           p.new_zeros(batch_size, h, self.rank, self.d_state),
                           p.new_zeros(batch_size, h, self.headdim),
                           p.new_zeros(batch_size, h, self.n_angles))

    def step(self, x_t: Tensor, cache: Mamba3Cache) -> Tensor:
        z, xs, q, k, adt, dt, trap, step = self._parts(x_t)
        angle = cache.angle + step
        q, k = rotate(q, angle[..., None, :]), rotate(k, angle[..., None, :])
        y, cache.state = mamba3_step(q, k, self._lift(xs), adt, dt, trap, cache.state,
                                     cache.prev_k, self._lift(cache.prev_x))
        cache.prev_k, cache.prev_x, cache.angle = k, xs, angle
        return self.out_proj(self._gated(y, xs, z))
