"""Attamba: attention over SSM-compressed key/value chunks; and the lab's hybrid branch.

`attamba` (arch): Transformer blocks whose attention takes q = W_Q x per head, K = SSM_K(x) + x and
V = SSM_V(x) + x (Sec. 4, Fig. 11: no K/V projections; the release adds the residual), where the
SSMs are Mamba2 mixers that restart at every chunk start (Eq. 3-4, `reset` in recall_lab.ssm), so
the key at a chunk end summarises its chunk. RoPE on q and k (as in the release), the `attamba`
key pattern (chunk ends + leading tokens, cyclic offsets per layer; recall_lab.attention.attamba)
through the one `sparse_attention` op, then a SwiGLU MLP. `kv="proj"` swaps the SSMs for a
linear K/V projection with the same pattern (a control).

Test-time form (Eq. 6-7): `AttambaAttention.step` keeps the K/V SSM states and, as keys/values,
only the chunk-end entries plus the leading window (at most ceil(t/P) + leading); `decode` runs a
whole `RecallLM` token by token that way. It equals the parallel form (tests/models).

`mamba+attamba` (pattern on the hybrid branch) is an INVENTION OF THIS LAB, not in Attamba:
the sparse branch of a Mamba block (models/hybrid.py) takes its keys and values from chunk-reset
S6 scans over the branch input xc (K = W_K (S6_K(xc) + xc) of size d_qk, V = S6_V(xc) + xc) and
reads them with the attamba pattern. `kv="proj"` there is the plain branch (projected keys, v =
xc) with the same pattern: the control for what the key/value SSMs add.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recall_lab.attention import make_pattern, sparse_attention
from recall_lab.attention.attamba import AttambaDecoder, AttambaPattern, chunk_starts
from recall_lab.attention.decode import attend
from recall_lab.config import AttambaConfig, ModelConfig
from recall_lab.models.hybrid import SparseBranch
from recall_lab.models.layers import SwiGLU, rope
from recall_lab.ssm import Mamba2Mixer, RMSNorm, selective_scan
from recall_lab.ssm.mixers import dt_bias_init


def attamba_config(cfg: ModelConfig) -> AttambaConfig:
    return cfg.attamba or AttambaConfig()


def layer_pattern(cfg: ModelConfig, layer: int) -> AttambaPattern:
    """The attamba pattern of one layer (cyclic offsets and random seeds depend on the layer)."""
    a = attamba_config(cfg)
    return make_pattern("attamba", a.chunk, layer=layer, n_layers=cfg.n_layers,
                        **a.pattern_opts())


def kv_cache_slots(cfg: ModelConfig, length: int) -> int:
    """Keys (= values) one attention layer keeps at test time for a sequence of `length`.

    attamba: ceil(L/P) chunk ends + leading tokens (uniform chunking; the paper's L/P + l);
    transformer: L; a sliding-window transformer (`transformer+sw`): its window k.
    """
    if cfg.arch == "attamba":
        return min(length, layer_pattern(cfg, 0).max_keys(length))
    if cfg.arch == "transformer":
        return min(length, cfg.k) if cfg.pattern == "sw" else length
    raise ValueError(f"no KV-cache size for arch {cfg.arch!r}")


# --------------------------------------------------------------------------- attamba (paper)


@dataclass
class AttambaCache:
    """Decoding state of one attamba layer: the K/V SSM states and the pattern's decode state
    (chunk-end keys/values + the leading window, attention/attamba.AttambaDecoder)."""

    dec: AttambaDecoder
    k_state: object = None
    v_state: object = None
    max_kept: int = 0


class AttambaAttention(nn.Module):
    """q = W_Q x; K, V = chunk-reset Mamba2(x) + x; RoPE; attamba pattern; sparse attention."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        d, h = cfg.d_model, cfg.n_heads
        if d % h or (d // h) % 2:
            raise ValueError(f"d_model {d} must split into {h} even-sized heads")
        a = attamba_config(cfg)
        self.n_heads, self.head_dim = h, d // h
        self.q = nn.Linear(d, d, bias=False)
        self.kv_mode = a.kv
        if a.kv == "ssm":
            kw = dict(d_inner=a.kv_expand * d, d_state=a.kv_d_state, d_conv=cfg.d_conv,
                      headdim=min(a.kv_headdim, a.kv_expand * d))
            self.k_ssm = Mamba2Mixer(d, **kw)
            self.v_ssm = Mamba2Mixer(d, **kw)
        else:
            self.kv = nn.Linear(d, 2 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.pattern = layer_pattern(cfg, layer)

    def _heads(self, x: Tensor) -> Tensor:
        b, length, _ = x.shape
        return x.view(b, length, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: Tensor) -> Tensor:
        b, length, _ = x.shape
        ends = self.pattern.ends(length, x.device)
        if self.kv_mode == "ssm":
            starts = chunk_starts(ends)
            k = self.k_ssm(x, reset=starts) + x
            v = self.v_ssm(x, reset=starts) + x
        else:
            k, v = self.kv(x).chunk(2, dim=-1)
        q, k, v = self._heads(self.q(x)), self._heads(k), self._heads(v)
        idx = self.pattern.indices_for(ends)
        o = sparse_attention(rope(q), rope(k), v, idx, scale=self.head_dim**-0.5)
        return self.out(o.transpose(1, 2).reshape(b, length, -1))

    # ----------------------------------------------------------------- test-time form (Eq. 6-7)

    def allocate_cache(self, max_len: int | None = None, device=None) -> AttambaCache:
        return AttambaCache(AttambaDecoder(self.pattern))

    def step(self, x_t: Tensor, cache: AttambaCache) -> Tensor:
        """One token x_t [b, d] -> [b, d]; keeps only chunk-end keys/values + the window."""
        t = cache.dec.t
        b = x_t.shape[0]
        if self.kv_mode == "ssm":
            if cache.dec.starts_chunk(t):  # chunk start: the SSMs restart from zero
                cache.k_state = self.k_ssm.allocate_state(b, x_t.device, x_t.dtype)
                cache.v_state = self.v_ssm.allocate_state(b, x_t.device, x_t.dtype)
            k, cache.k_state = self.k_ssm.step(x_t, cache.k_state)
            v, cache.v_state = self.v_ssm.step(x_t, cache.v_state)
            k, v = k + x_t, v + x_t
        else:
            k, v = self.kv(x_t).chunk(2, dim=-1)
        q = rope(self.q(x_t).view(b, self.n_heads, 1, self.head_dim), start=t)[:, :, 0]
        k = rope(k.view(b, self.n_heads, 1, self.head_dim), start=t)[:, :, 0]
        keys = cache.dec.step(q, k, v.view(b, self.n_heads, self.head_dim))
        cache.max_kept = max(cache.max_kept, keys.pos.shape[-1])
        return self.out(attend(q, keys, self.head_dim**-0.5).reshape(b, -1))


class AttambaBlock(nn.Module):
    """x + Attamba(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)) (the Transformer block layout)."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.norm1 = RMSNorm(cfg.d_model, eps=1e-5)
        self.attn = AttambaAttention(cfg, layer)
        self.norm2 = RMSNorm(cfg.d_model, eps=1e-5)
        self.mlp = SwiGLU(cfg.d_model, cfg.mlp_mult)

    def forward(self, x: Tensor, aux: list, params: list | None) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def allocate_cache(self, batch: int, max_len: int) -> AttambaCache:
        return self.attn.allocate_cache(max_len)

    def step(self, x_t: Tensor, cache: AttambaCache) -> Tensor:
        x_t = x_t + self.attn.step(self.norm1(x_t), cache)
        return x_t + self.mlp(self.norm2(x_t))


def attamba_blocks(cfg: ModelConfig) -> list[nn.Module]:
    return [AttambaBlock(cfg, layer) for layer in range(cfg.n_layers)]


@torch.no_grad()
def decode(model: nn.Module, ids: Tensor) -> tuple[Tensor, int]:
    """Logits of an `attamba` RecallLM computed token by token from the caches (Eq. 6-7).

    Returns (logits [b, l, vocab], most keys any layer kept at once). Eval mode expected.
    """
    b, length = ids.shape
    cache = model.allocate_cache(b, length)
    out = [model.step(ids[:, t], cache) for t in range(length)]
    return torch.stack(out, dim=1), max(c.max_kept for c in cache.blocks)


# --------------------------------------------------------------------------- lab hybrid branch


class ChunkS6(nn.Module):
    """A bare chunk-reset selective scan over d channels (no in/out projection, no conv, no gate):
    Delta, B, C from the input as in Mamba (x_proj, dt_proj, A = 1..N, D = 1)."""

    def __init__(self, d: int, d_state: int) -> None:
        super().__init__()
        self.d_state, self.dt_rank = d_state, math.ceil(d / 16)
        self.x_proj = nn.Linear(d, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, d, bias=True)
        std = self.dt_rank**-0.5
        with torch.no_grad():
            nn.init.uniform_(self.dt_proj.weight, -std, std)
            self.dt_proj.bias.copy_(dt_bias_init(d, 1e-3, 1e-1, 1e-4))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1.0).repeat(d, 1)))
        self.D = nn.Parameter(torch.ones(d))
        # mamba-ssm's tags (as MambaMixer): the model init keeps the dt bias, no decay on A, D
        self.dt_proj.bias._no_reinit = True
        self.A_log._no_weight_decay = True
        self.D._no_weight_decay = True

    def forward(self, u: Tensor, reset: Tensor) -> Tensor:
        """u [b, l, d] -> [b, l, d], restarting at every `reset` position."""
        dt, B, C = torch.split(self.x_proj(u), [self.dt_rank, self.d_state, self.d_state], -1)
        dt = dt @ self.dt_proj.weight.t()
        y = selective_scan(u.transpose(1, 2), dt.transpose(1, 2), -torch.exp(self.A_log.float()),
                           B.transpose(1, 2), C.transpose(1, 2), self.D.float(),
                           delta_bias=self.dt_proj.bias.float(), delta_softplus=True,
                           reset=reset)
        return y.transpose(1, 2).to(u.dtype)


    def step(self, u: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        """One token u [b, d] from scan state h [b, d, n] (zeros at a chunk start); the same
        float32 A, D and bias as `forward`."""
        dt, B, C = torch.split(self.x_proj(u), [self.dt_rank, self.d_state, self.d_state], -1)
        delta = F.softplus(dt @ self.dt_proj.weight.t() + self.dt_proj.bias.float().to(u.dtype))
        A = -torch.exp(self.A_log.float()).to(u.dtype)
        h = torch.exp(delta[..., None] * A) * h + (delta * u)[..., None] * B[:, None, :]
        return (h * C[:, None, :]).sum(-1) + self.D.float().to(u.dtype) * u, h


@dataclass
class BranchCache:
    """Decode state of `AttambaBranch`: its pattern's decoder and the two chunk-reset scans."""

    dec: AttambaDecoder
    k_state: Tensor | None = None
    v_state: Tensor | None = None


class AttambaBranch(nn.Module):
    """LAB INVENTION (not in Attamba): the hybrid branch with chunk-reset S6 keys/values.

    q = W_q xc, k = W_k (S6_K(xc) + xc) (size d_qk), v = S6_V(xc) + xc (d_inner), one head,
    attamba pattern, sparse attention with scale 1/sqrt(d_qk), a learned per-channel output scale
    (as in `SparseBranch`).
    """

    def __init__(self, d_inner: int, d_qk: int, pattern: AttambaPattern, kv_d_state: int,
                 scale_init: float = 0.1) -> None:
        super().__init__()
        self.d_qk = d_qk
        self.q = nn.Linear(d_inner, d_qk, bias=False)
        self.k = nn.Linear(d_inner, d_qk, bias=False)
        self.k_ssm = ChunkS6(d_inner, kv_d_state)
        self.v_ssm = ChunkS6(d_inner, kv_d_state)
        self.pattern = pattern
        self.scale = nn.Parameter(torch.full((d_inner,), float(scale_init)))

    def forward(self, xc: Tensor, aux: list | None = None) -> Tensor:
        b, length, d_inner = xc.shape
        ends = self.pattern.ends(length, xc.device)
        starts = chunk_starts(ends)
        q = self.q(xc)[:, None]
        k = self.k(self.k_ssm(xc, starts) + xc)[:, None]
        v = (self.v_ssm(xc, starts) + xc)[:, None]
        idx = self.pattern.indices_for(ends)
        out = sparse_attention(q, k, v, idx, scale=self.d_qk**-0.5)
        return out[:, 0] * self.scale

    def allocate_cache(self) -> BranchCache:
        return BranchCache(AttambaDecoder(self.pattern))

    def step(self, xc: Tensor, cache: BranchCache) -> Tensor:
        """One token's xc [b, d_inner] -> [b, d_inner] (eval mode)."""
        if cache.dec.starts_chunk(cache.dec.t):  # the key/value scans restart at a chunk start
            zero = xc.new_zeros(*xc.shape, self.k_ssm.d_state)
            cache.k_state, cache.v_state = zero, zero.clone()
        ks, cache.k_state = self.k_ssm.step(xc, cache.k_state)
        vs, cache.v_state = self.v_ssm.step(xc, cache.v_state)
        q, k, v = self.q(xc)[:, None], self.k(ks + xc)[:, None], (vs + xc)[:, None]
        return attend(q, cache.dec.step(q, k, v), self.d_qk**-0.5)[:, 0] * self.scale


def attamba_branch(cfg: ModelConfig, mixer: nn.Module, layer: int) -> nn.Module:
    """The branch of `mamba+attamba` (kv="ssm") or its projected-key control (kv="proj")."""
    a = attamba_config(cfg)
    if a.kv == "ssm":
        return AttambaBranch(mixer.d_inner, mixer.d_state, layer_pattern(cfg, layer),
                             a.kv_d_state, cfg.side_scale_init)
    opts = {**a.pattern_opts(), "layer": layer, "n_layers": cfg.n_layers}
    return SparseBranch(mixer.d_inner, mixer.d_state, 1, "attamba", a.chunk, pattern_opts=opts,
                        scale_init=cfg.side_scale_init)


__all__ = [
    "AttambaAttention",
    "AttambaBlock",
    "AttambaBranch",
    "AttambaCache",
    "ChunkS6",
    "attamba_blocks",
    "attamba_branch",
    "decode",
    "kv_cache_slots",
    "layer_pattern",
]
