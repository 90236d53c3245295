"""`rwkv7`: RWKV-7 "Goose" time mixing (Peng, Zhang, Goldstein, Alcaide, Du, Hou, Lin, Liu, Lu,
Merrill, Song, Tan, Utpala, Wilce, Wind, Wu, Wuttke, Zhou-Zheng, "RWKV-7 "Goose" with Expressive
Dynamic State Evolution", arXiv 2503.14456): the generalised delta rule with a decay per
channel w, an in-context learning rate a per channel and a removal key kappa-hat. Per head,
state d x d (keys x values; the paper's wkv transposed):

    S_t = (diag(w_t) - kappa_hat_t (a_t * kappa_hat_t)^T) S_{t-1} + k~_t v_t^T,   o_t = S_t^T r_t

It is a diagonal-plus-rank-one recurrence, written here in the general form

    S_t = diag(exp g_t) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T,   o_t = S_t^T q_t

with a = -kappa_hat, b = kappa_hat * a (RWKV's a), g = log w, q = r. Three forms of it:

- `dplr_recurrent`: the loop (the reference);
- `dplr_chunked`: per chunk from state S0, with G_t the decay accumulated inside the chunk
  (G_{t-1} before token t), the removals x_t = a_t^T S_{t-1} solve the unit lower-triangular
  system (I - A_ab) X = (A * G_prev) S0 + A_ak V, A_ab[t, s] = sum_d a_td b_sd G_{t-1,d} / G_sd
  (s < t; A_ak the same with k), so X = X' + W S0 from one triangular solve per chunk; then
  O = (Q * G) S0 + A_qb X + A_qk V (s <= t) and S_end = diag(G_C) S0 + (B * G_C / G)^T X +
  (K * G_C / G)^T V. The ratio matrices come from `decayed_scores` (_linear.py), which stays
  finite for any decay;
- `dplr_step`: one token (decoding).

The mixer follows the paper's time-mixing layer: token shift (each of r, w, k, v, a, g reads
x_t + mu * (x_{t-1} - x_t), with its own learned mu per channel), r, k, v projections, the decay
w = exp(-e^-0.5 sigmoid(d)) with d = tanh(x W1) W2 + bias (low rank), a = sigmoid(low rank +
bias), the removal key kappa_hat = L2-normalised (k * xi) per head, the replacement key
k~ = k * (1 + (a - 1) * alpha), a per-head GroupNorm of o, the bonus (sum over the head of
r * k~ * rho) v, the gate g = sigmoid(x W1) W2 (low rank) and `out_proj`.

Left out: the value residual (layer 0's values mixed into every later layer's v). The mixer
contract builds one layer at a time and passes each only its input, so layer 0's values cannot
reach the others; zoology's port leaves it out too. The token shift's previous column (one per
channel) is a convolution-like cache, counted apart from the recurrent state (its cache field
is named `conv`, mixers/state.py). Initialisation: the authors' schedule for the mixing
coefficients, decay and learning-rate biases, xi, alpha and rho (as for the first layer of a
stack: a layer does not know the stack's depth); the projections keep torch's default, as the
zoo's other mixers do (the authors zero the output projection and the low-rank down-projections,
which would leave the other weights without a gradient at the first step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import dplr_native
from recall_lab.mixers._linear import (
    balanced_chunk,
    check_choice,
    check_positive,
    decayed_scores,
    from_chunks,
    to_chunks,
)

IMPLS = ("chunk", "recurrent")
MIXES = ("r", "w", "k", "v", "a", "g")  # the inputs the token shift makes
W_SCALE = math.exp(-0.5)  # log w = -e^-0.5 sigmoid(d): w in (e^-e^-0.5, 1) = (0.545, 1)


def dplr_step(q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, g: Tensor,
              state: Tensor) -> tuple[Tensor, Tensor]:
    """One token: q, k, a, b, g [b, h, d_k] (g = log w), v [b, h, d_v], state [b, h, d_k, d_v]."""
    removal = (a[..., :, None] * state).sum(-2)  # a^T S_{t-1}, [b, h, d_v]
    state = state * g.exp()[..., None] + b[..., :, None] * removal[..., None, :] \
        + k[..., :, None] * v[..., None, :]
    return (q[..., :, None] * state).sum(-2), state


def dplr_recurrent(q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, g: Tensor
                   ) -> tuple[Tensor, Tensor]:
    """The recurrence as a loop: q, k, a, b, g [b, h, l, d_k], v [b, h, l, d_v]
    -> (o [b, h, l, d_v], final state [b, h, d_k, d_v])."""
    bsz, h, _, dk = q.shape
    state = q.new_zeros(bsz, h, dk, v.shape[-1])
    out = []
    for t in zip(q.unbind(2), k.unbind(2), v.unbind(2), a.unbind(2), b.unbind(2), g.unbind(2),
                 strict=True):
        o, state = dplr_step(*t, state)
        out.append(o)
    return torch.stack(out, dim=2), state


def dplr_chunked(q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, g: Tensor, chunk: int
                 ) -> tuple[Tensor, Tensor]:
    """The recurrence in chunks of at most `chunk` tokens (module docstring); same arguments
    and results as the loop."""
    length = q.shape[2]
    chunk = balanced_chunk(length, chunk)
    # [b, h, n, c, .]; padded rows are zeros: no write, no removal, no decay
    qc, kc, vc, ac, bc, gc = (to_chunks(t, chunk) for t in (q, k, v, a, b, g))
    gam = gc.cumsum(3)  # log G_t per key channel
    prev = gam - gc  # log G_{t-1}
    # the four in-chunk score matrices in one call: rows a (s < t) and q (s <= t) against
    # columns b and k
    both = decayed_scores(torch.cat([ac, qc], dim=-2), torch.cat([prev, gam], dim=-2),
                          torch.cat([bc, kc], dim=-2), torch.cat([gam, gam], dim=-2), chunk,
                          strict=(True, False))
    (a_b, a_k), (q_b, q_k) = (half.split(chunk, dim=-1) for half in both.split(chunk, dim=-2))
    dv = vc.shape[-1]
    # I - tril(a_b, -1): solve_triangular reads the strict lower triangle only (unitriangular)
    sol = torch.linalg.solve_triangular(-a_b, torch.cat([a_k @ vc, ac * prev.exp()], dim=-1),
                                        upper=False, unitriangular=True)
    x0, w = sol[..., :dv], sol[..., dv:]
    intra = q_k @ vc
    qg = qc * gam.exp()
    tail = (gam[..., -1:, :] - gam).exp()
    bg, kv = bc * tail, (kc * tail).transpose(-1, -2) @ vc
    end = gam[..., -1, :].exp()  # [b, h, n, d_k]
    state = q.new_zeros(*q.shape[:2], q.shape[-1], dv)
    out = []
    # per-chunk views by one unbind each (indexing in the loop: quadratic backward, deltanet.py)
    for x0_i, w_i, qg_i, qb_i, in_i, bg_i, kv_i, end_i in zip(
            x0.unbind(2), w.unbind(2), qg.unbind(2), q_b.unbind(2), intra.unbind(2),
            bg.unbind(2), kv.unbind(2), end.unbind(2), strict=True):
        x = x0_i + w_i @ state
        out.append(qg_i @ state + qb_i @ x + in_i)
        state = end_i[..., None] * state + bg_i.transpose(-1, -2) @ x + kv_i
    return from_chunks(torch.stack(out, dim=2), length), state


def token_shift(x: Tensor, prev: Tensor, mu: Tensor) -> tuple[Tensor, ...]:
    """Each input the layer reads, x_t + mu_i * (x_{t-1} - x_t), one per row mu_i of mu
    [n, d_model] (one broadcast product for all n)."""
    mu = mu.view(mu.shape[0], *(1,) * (x.dim() - 1), mu.shape[-1])
    return torch.addcmul(x, prev - x, mu).unbind(0)


def replacement_key(k: Tensor, a: Tensor, alpha: Tensor) -> Tensor:
    """k~ = k * lerp(1, a, alpha) = k * (1 + (a - 1) * alpha): the key written to the state."""
    return k + k * (a - 1) * alpha


def bonus_and_gate(o: Tensor, r: Tensor, k: Tensor, rho: Tensor, v: Tensor, gate: Tensor
                   ) -> Tensor:
    """(o + (sum over each head of r * k~ * rho) v) * gate: o, gate [.., h d], r, k, v [.., h, d],
    rho [h, d]."""
    bonus = (r * k * rho).sum(-1, keepdim=True) * v
    return (o + bonus.flatten(-2)) * gate


def low_rank(d_model: int, rank: int, out: int, bias: bool) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_model, rank, bias=False), nn.Linear(rank, out, bias=bias))


def default_rank(d_model: int, multiplier: float, head_size: int) -> int:
    """The authors' low-rank width: max(32, multiplier sqrt(d_model) (head_size / 64), rounded
    to a multiple of 32)."""
    return max(32, int(round(multiplier * d_model ** 0.5 * head_size / 64 / 32)) * 32)


@dataclass
class RWKV7Cache:
    state: Tensor  # [b, h, d, d]
    conv: Tensor  # [b, d_model]: the token shift's previous input (a convolution-like cache)


class RWKV7(nn.Module):
    """RWKV-7 time-mixing mixer; options: `head_size` (d_k = d_v per head; must divide
    d_model), `decay_rank`, `a_rank`, `gate_rank` (the low-rank widths; default the authors'
    formula, 32 at small widths), `chunk_size`, `impl` ("chunk" or the "recurrent" reference
    loop). "chunk" trains on the native CPU kernel of the recurrence (mixers/dplr_native.py)
    where it applies (CPU, float32 or float64) and on `dplr_chunked` elsewhere."""

    def __init__(self, d_model: int, layer_idx: int = 0, head_size: int = 16,
                 decay_rank: int | None = None, a_rank: int | None = None,
                 gate_rank: int | None = None, chunk_size: int = 16,
                 impl: str = "chunk") -> None:
        super().__init__()
        check_choice("impl", impl, IMPLS)
        for name, value in (("head_size", head_size), ("chunk_size", chunk_size)):
            check_positive(name, value)
        if d_model % head_size:
            raise RecallLabError(f"head_size ({head_size}) must divide d_model ({d_model})")
        decay_rank = decay_rank or default_rank(d_model, 2.5, head_size)
        a_rank = a_rank or default_rank(d_model, 2.5, head_size)
        gate_rank = gate_rank or default_rank(d_model, 5.0, 64)
        for name, value in (("decay_rank", decay_rank), ("a_rank", a_rank),
                            ("gate_rank", gate_rank)):
            check_positive(name, value)
        self.d_model, self.layer_idx, self.head_size = d_model, layer_idx, head_size
        self.num_heads, self.chunk_size, self.impl = d_model // head_size, chunk_size, impl
        # the authors' initial values (their layer 0 of a stack: a layer does not know the depth)
        n = torch.arange(d_model, dtype=torch.float32)
        ddd = n / d_model
        linear = n / max(d_model - 1, 1) - 0.5
        half = max((head_size - 1) / 2, 0.5)
        zigzag = ((n % head_size) - (head_size - 1) / 2) / half
        zigzag = zigzag * zigzag.abs()
        powers = {"r": 0.2, "w": 0.9, "k": 0.7, "v": 0.7, "a": 0.9, "g": 0.2}
        self.mu = nn.Parameter(torch.stack([1.0 - ddd ** powers[m] for m in MIXES]))  # [6, d]
        self.r_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.w_lora = low_rank(d_model, decay_rank, d_model, bias=True)
        self.a_lora = low_rank(d_model, a_rank, d_model, bias=True)
        self.g_lora = low_rank(d_model, gate_rank, d_model, bias=False)
        with torch.no_grad():
            www = -6 + 6 * (n / max(d_model - 1, 1))
            self.w_lora[1].bias.copy_(www + 0.5 + zigzag * 2.5)
            self.a_lora[1].bias.copy_(-0.19 + zigzag * 0.3 + linear * 0.4)
        self.k_k = nn.Parameter(0.71 - linear * 0.1)  # xi: the removal key's channel weights
        self.k_a = nn.Parameter(torch.full((d_model,), 1.02))  # alpha: the replacement's mix
        self.r_k = nn.Parameter(torch.full((self.num_heads, head_size), -0.04))  # rho: bonus
        self.g_norm = nn.GroupNorm(self.num_heads, d_model, eps=head_size * 1e-5)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def _parts(self, x: Tensor, prev: Tensor) -> tuple[Tensor, ...]:
        """r, log w, k~, v, -kappa_hat, kappa_hat * a (each [.., h, d]) and the gate
        [.., d_model] from the input x and the previous input prev (zero before the first)."""
        mixed = dict(zip(MIXES, token_shift(x, prev, self.mu), strict=True))
        lead, h = x.shape[:-1], self.num_heads
        r = self.r_proj(mixed["r"])
        logw = -W_SCALE * self.w_lora[1](torch.tanh(self.w_lora[0](mixed["w"]))).sigmoid()
        k = self.k_proj(mixed["k"])
        v = self.v_proj(mixed["v"])
        a = self.a_lora(mixed["a"]).sigmoid()
        gate = self.g_lora[1](self.g_lora[0](mixed["g"]).sigmoid())
        kappa = F.normalize((k * self.k_k).reshape(*lead, h, -1), dim=-1)
        k = replacement_key(k, a, self.k_a)
        r, logw, k, v, a = (t.reshape(*lead, h, -1) for t in (r, logw, k, v, a))
        return r, logw, k, v, -kappa, kappa * a, gate

    def _output(self, o: Tensor, r: Tensor, k: Tensor, v: Tensor, gate: Tensor) -> Tensor:
        """Per-head o, r, k~, v [.., h, d] (token-major) -> out_proj((GroupNorm(o) + bonus)
        * gate)."""
        normed = self.g_norm(o.reshape(-1, self.d_model)).view(*o.shape[:-2], self.d_model)
        return self.out_proj(bonus_and_gate(normed, r, k, self.r_k, v, gate))

    def forward(self, x: Tensor) -> Tensor:
        prev = F.pad(x, (0, 0, 1, -1))  # x_{t-1}, zero before the first token
        r, logw, k, v, a, b, gate = self._parts(x, prev)
        if self.impl == "chunk" and dplr_native.usable(r, k, v, a, b, logw):
            o, _ = dplr_native.dplr(r, k, v, a, b, logw)  # token-major in and out
            return self._output(o, r, k, v, gate)
        heads = [t.transpose(1, 2) for t in (r, k, v, a, b, logw)]  # [b, h, l, d]
        if self.impl == "recurrent":
            o, _ = dplr_recurrent(*heads)
        else:
            o, _ = dplr_chunked(*heads, self.chunk_size)
        return self._output(o.transpose(1, 2), r, k, v, gate)

    def state_size(self, sequence_length: int = 2048) -> int:
        # recurrent state only: h heads of d x d; the token shift's previous column is a
        # convolution-like cache, counted apart (mixers/state.py)
        return self.num_heads * self.head_size * self.head_size

    def allocate_cache(self, batch_size: int, max_len: int) -> RWKV7Cache:
        p = self.r_proj.weight
        state = p.new_zeros(batch_size, self.num_heads, self.head_size, self.head_size)
        return RWKV7Cache(state, p.new_zeros(batch_size, self.d_model))

    def step(self, x_t: Tensor, cache: RWKV7Cache) -> Tensor:
        r, logw, k, v, a, b, gate = self._parts(x_t, cache.conv)
        cache.conv = x_t
        o, cache.state = dplr_step(r, k, v, a, b, logw, cache.state)
        return self._output(o, r, k, v, gate)
