"""The residual blocks every model is built from, and the language model's output type.

- `SSMBlock`: x + Mixer(RMSNorm(x)); the mixer is `MambaMixer` / `Mamba2Mixer`, optionally with a
  `SparseBranch` passed as its `side` hook (the hybrid of the joint-recall paper's Fig. 3).
- `AttentionBlock`: x + Attn(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)) (Transformer, Samba's SWA;
  without the MLP when `mlp_mult` is 0; with `norm2_residual`, zoology's identity state mixer,
  x + norm2(x) in the MLP's place).
- `MLPBlock`: x + SwiGLU(RMSNorm(x)) (Samba's MLP after each Mamba layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from recall_lab.attention import make_pattern
from recall_lab.config import ModelConfig, SEAttnConfig
from recall_lab.models.attamba import attamba_branch
from recall_lab.models.hybrid import SparseBranch
from recall_lab.models.layers import (
    CausalSelfAttention,
    PatternAttention,
    SlidingWindowAttention,
    SwiGLU,
)
from recall_lab.ssm import Mamba2Mixer, MambaMixer, RMSNorm


@dataclass
class LMOutput:
    logits: torch.Tensor  # [b, l, vocab]
    aux_loss: torch.Tensor | None  # KS ranking loss summed over layers (joint-recall paper Eq. 18)
    params: list | None = None  # per SSM layer: SSMParams (Delta, A, B, C, x, D) when asked
    kept: torch.Tensor | None = None  # DeciMamba: bool [b, l], positions that have logits


def make_norm(cfg: ModelConfig) -> nn.Module:
    """The transformer's norm: RMSNorm, or LayerNorm with `norm = "layer"` (zoology's)."""
    if cfg.norm == "layer":
        return nn.LayerNorm(cfg.d_model, eps=1e-5)
    return RMSNorm(cfg.d_model, eps=1e-5)


def _mixer(cfg: ModelConfig, d_model: int) -> nn.Module:
    kw: dict = {"d_inner": cfg.expand * d_model, "d_conv": cfg.d_conv}
    if cfg.d_state is not None:
        kw["d_state"] = cfg.d_state
    if cfg.arch in ("mamba2", "mamba2-attn"):
        kw["headdim"] = cfg.headdim or min(64, kw["d_inner"])  # 64 = mamba-ssm's default
        return Mamba2Mixer(d_model, **kw)
    return MambaMixer(d_model, **kw)


def _n_heads(mixer: nn.Module) -> int:
    for attr in ("nheads", "n_heads"):
        if hasattr(mixer, attr):
            return int(getattr(mixer, attr))
    if hasattr(mixer, "headdim"):
        return mixer.d_inner // int(mixer.headdim)
    return 1


@dataclass
class SSMCache:
    """Decode state of an SSM block: the mixer's conv + scan state and the branch's state."""

    state: object
    branch: object = None


class SSMBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, with_branch: bool = True, layer: int = 0) -> None:
        super().__init__()
        self.norm = RMSNorm(cfg.d_model, eps=1e-5)
        self.mixer = _mixer(cfg, cfg.d_model)
        self.branch = None
        if with_branch and cfg.pattern == "attamba":  # per-layer chunk offsets (lab hybrid)
            self.branch = attamba_branch(cfg, self.mixer, layer)
        elif with_branch and cfg.pattern is not None:
            heads = _n_heads(self.mixer) if cfg.branch_heads == "mixer" else 1
            self.branch = SparseBranch(
                self.mixer.d_inner, self.mixer.d_state, heads, cfg.pattern, cfg.k,
                cfg.lsh_bits, cfg.pattern_options(), cfg.side_scale_init, max_len=cfg.max_len,
                layer=layer, semantics=cfg.branch_semantics,
            )
        # the model hands the token ids to a block whose branch reads them (the oracle)
        self.takes_ids = bool(getattr(self.branch, "takes_ids", False))

    def forward(self, x: torch.Tensor, aux: list, params: list | None, decimate=None,
                ids: torch.Tensor | None = None):
        """x + mixer(norm(x)); with `decimate` (DeciMamba) the residual is gathered at the kept
        positions too and the block returns (x' [b, l', d], kept). `ids` [b, l]: the input ids,
        for a branch that `takes_ids`."""
        side = None
        if self.branch is not None:
            branch = self.branch
            extra = {"ids": ids} if self.takes_ids else {}

            def side(xc: torch.Tensor) -> torch.Tensor:
                return branch(xc, aux, **extra)

        out = self.mixer(self.norm(x), side=side, return_params=params is not None,
                         **({} if decimate is None else {"decimate": decimate}))
        if params is not None:
            *out, p = out
            params.append(p)
            out = out[0] if len(out) == 1 else tuple(out)
        if decimate is None:
            return x + out
        out, kept = out
        return kept.gather(x, 1) + out, kept

    def allocate_cache(self, batch: int, max_len: int) -> SSMCache:
        p = self.mixer.A_log
        branch = None if self.branch is None else self.branch.allocate_cache()
        return SSMCache(self.mixer.allocate_state(batch, p.device, p.dtype), branch)

    def step(self, x_t: torch.Tensor, cache: SSMCache, keep: torch.Tensor | None = None,
             ids: torch.Tensor | None = None) -> torch.Tensor:
        """One token x_t [b, d] -> [b, d]. `keep` (bool [b], DeciMamba's prefill): rows where it
        is False advance the conv state only, so the scan sees the kept tokens alone (the conv
        of a decimating layer runs at full length, Alg. 1). `ids` [b]: the token's ids, for a
        branch that `takes_ids`."""
        side = None
        if self.branch is not None:
            branch, dec = self.branch, cache.branch
            extra = {"ids": ids} if self.takes_ids else {}

            def side(xc: torch.Tensor) -> torch.Tensor:
                return branch.step(xc, dec, **extra)

        out, new = self.mixer.step(self.norm(x_t), cache.state, side=side)
        if keep is not None:
            k = keep.view(-1, *[1] * (new.ssm.dim() - 1))
            new.ssm = torch.where(k, new.ssm, cache.state.ssm)
        cache.state = new
        return x_t + out


class MLPBlock(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm = make_norm(cfg)
        self.mlp = SwiGLU(cfg.d_model, cfg.mlp_mult)

    def forward(self, x: torch.Tensor, aux: list, params: list | None) -> torch.Tensor:
        return x + self.mlp(self.norm(x))

    def allocate_cache(self, batch: int, max_len: int) -> None:
        return None  # position-wise: no state

    def step(self, x_t: torch.Tensor, cache: None) -> torch.Tensor:
        return x_t + self.mlp(self.norm(x_t))


class AttentionBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, window: int | None, attn: nn.Module | None = None
                 ) -> None:
        super().__init__()
        self.norm1 = make_norm(cfg)
        self.attn = attn or (
            CausalSelfAttention(cfg.d_model, cfg.n_heads, use_rope=cfg.positions != "learned",
                                dropout=cfg.dropout or 0.0, bias=bool(cfg.attn_bias))
            if window is None else SlidingWindowAttention(cfg.d_model, cfg.n_heads, window)
        )
        self.mlp = MLPBlock(cfg) if cfg.mlp_mult else None  # 0: zoology's Figure 2 (none)
        # zoology's TransformerBlock with `state_mixer` identity: its norm2's output is added to
        # the stream (the next block's, or the final norm's, residual), so x += norm2(x)
        self.norm2 = make_norm(cfg) if cfg.norm2_residual else None

    def _state(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.norm2 is None else x + self.norm2(x)

    def forward(self, x: torch.Tensor, aux: list, params: list | None) -> torch.Tensor:
        x = self._state(x + self.attn(self.norm1(x)))
        return x if self.mlp is None else self.mlp(x, aux, params)

    def allocate_cache(self, batch: int, max_len: int):
        return self.attn.allocate_cache()

    def step(self, x_t: torch.Tensor, cache) -> torch.Tensor:
        x_t = self._state(x_t + self.attn.step(self.norm1(x_t), cache))
        return x_t if self.mlp is None else self.mlp.step(x_t, None)


def attention_layer(cfg: ModelConfig) -> AttentionBlock:
    """An attention block of `mamba2-attn`: full (SDPA), sliding window k, or SE-Attn (budget
    k, options from `cfg.seattn`; value summaries: each head's v has q's width)."""
    kind = cfg.attention_layers.attention
    if kind != "se":
        return AttentionBlock(cfg, cfg.k if kind == "sw" else None)
    pattern = make_pattern("seattn", cfg.k, **(cfg.seattn or SEAttnConfig()).options())
    return AttentionBlock(cfg, None, PatternAttention(cfg.d_model, cfg.n_heads, pattern))
