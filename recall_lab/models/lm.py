"""The 2-layer language model around every mixer: embedding, pre-norm residual blocks, final
RMSNorm, output projection (untied by default), and the model's own initialisation and
weight-decay rule.

Block kinds:
- `SSMBlock`: x + Mixer(RMSNorm(x)); the mixer is `MambaMixer` / `Mamba2Mixer`, optionally with a
  `SparseBranch` passed as its `side` hook (the hybrid of seed 004 Fig. 3).
- `AttentionBlock`: x + Attn(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)) (Transformer, Samba's SWA).
- `MLPBlock`: x + SwiGLU(RMSNorm(x)) (Samba's MLP after each Mamba layer).
- `AttambaBlock` (models/attamba.py): the Transformer block with chunk-reset SSM keys/values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

from recall_lab.config import ModelConfig, SEAttnConfig
from recall_lab.models.hybrid import SparseBranch
from recall_lab.models.layers import (
    CausalSelfAttention,
    PatternAttention,
    SlidingWindowAttention,
    SwiGLU,
)


@dataclass
class LMOutput:
    logits: torch.Tensor  # [b, l, vocab]
    aux_loss: torch.Tensor | None  # KS ranking loss summed over layers (seed 004 Eq. 18)
    params: list | None = None  # per SSM layer: SSMParams (Delta, A, B, C, x, D) when asked
    kept: torch.Tensor | None = None  # DeciMamba: bool [b, l], positions that have logits


def _mixer(cfg: ModelConfig, d_model: int) -> nn.Module:
    from recall_lab.ssm import Mamba2Mixer, MambaMixer

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


class SSMBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, with_branch: bool = True, layer: int = 0) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(cfg.d_model, eps=1e-5)
        self.mixer = _mixer(cfg, cfg.d_model)
        self.branch = None
        if with_branch and cfg.pattern == "attamba":  # per-layer chunk offsets (lab hybrid)
            from recall_lab.models.attamba import attamba_branch

            self.branch = attamba_branch(cfg, self.mixer, layer)
        elif with_branch and cfg.pattern is not None:
            heads = _n_heads(self.mixer) if cfg.branch_heads == "mixer" else 1
            self.branch = SparseBranch(
                self.mixer.d_inner, self.mixer.d_state, heads, cfg.pattern, cfg.k,
                cfg.lsh_bits, cfg.pattern_options(), cfg.side_scale_init, max_len=cfg.max_len,
                layer=layer, semantics=cfg.branch_semantics,
            )

    def forward(self, x: torch.Tensor, aux: list, params: list | None, decimate=None):
        """x + mixer(norm(x)); with `decimate` (DeciMamba) the residual is gathered at the kept
        positions too and the block returns (x' [b, l', d], kept)."""
        side = None
        if self.branch is not None:
            branch = self.branch

            def side(xc: torch.Tensor) -> torch.Tensor:
                return branch(xc, aux)

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


class MLPBlock(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(cfg.d_model, eps=1e-5)
        self.mlp = SwiGLU(cfg.d_model, cfg.mlp_mult)

    def forward(self, x: torch.Tensor, aux: list, params: list | None) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class AttentionBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, window: int | None, attn: nn.Module | None = None
                 ) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.d_model, eps=1e-5)
        self.attn = attn or (
            CausalSelfAttention(cfg.d_model, cfg.n_heads) if window is None
            else SlidingWindowAttention(cfg.d_model, cfg.n_heads, window)
        )
        self.mlp = MLPBlock(cfg)

    def forward(self, x: torch.Tensor, aux: list, params: list | None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return self.mlp(x, aux, params)


def _attention_layer(cfg: ModelConfig) -> AttentionBlock:
    """An attention block of `mamba2-attn`: full (SDPA), sliding window k, or SE-Attn (budget
    k, options from `cfg.seattn`; value summaries: each head's v has q's width)."""
    kind = cfg.attention_layers.attention
    if kind != "se":
        return AttentionBlock(cfg, cfg.k if kind == "sw" else None)
    from recall_lab.attention import make_pattern

    pattern = make_pattern("seattn", cfg.k, **(cfg.seattn or SEAttnConfig()).options())
    return AttentionBlock(cfg, None, PatternAttention(cfg.d_model, cfg.n_heads, pattern))


def _blocks(cfg: ModelConfig) -> list[nn.Module]:
    if cfg.arch in ("mamba", "mamba2"):
        return [SSMBlock(cfg, layer=i) for i in range(cfg.n_layers)]
    if cfg.arch == "mamba2-attn":  # seed 001's Mamba-2-Hybrid shape, scaled down
        out = []
        for i in range(cfg.n_layers):
            out.append(SSMBlock(cfg, with_branch=False))
            if i in cfg.attention_layers.after:
                out.append(_attention_layer(cfg))
        return out
    if cfg.arch == "transformer":  # pattern "sw": the sliding-window Transformer (window k)
        window = cfg.k if cfg.pattern == "sw" else None
        return [AttentionBlock(cfg, window) for _ in range(cfg.n_layers)]
    if cfg.arch == "attamba":
        from recall_lab.models.attamba import attamba_blocks

        return attamba_blocks(cfg)
    # Samba (seed 004 App. D.1: 2 Mamba + 2 SWA layers, window k): units of
    # Mamba, MLP, SWA+MLP, as in the Samba paper's layer layout.
    out: list[nn.Module] = []
    for _ in range(cfg.n_layers):
        out += [SSMBlock(cfg, with_branch=False), MLPBlock(cfg), AttentionBlock(cfg, cfg.k)]
    return out


class RecallLM(nn.Module):
    """Embedding -> blocks -> RMSNorm -> output head. forward(ids) -> LMOutput.

    Initialisation (`_init_weights`, after mamba-ssm's `mixer_seq_simple._init_weights` and
    GPT-2's residual scaling): the embedding keeps PyTorch's N(0, 1) (`ModelConfig.embed_std`),
    the output head is a separate Linear with PyTorch's default init (`tie_embeddings=False`),
    Linear biases start at zero (except those tagged `_no_reinit`, such as Mamba's dt bias), and
    every projection that writes into the residual stream (mixer `out_proj`, attention `out`,
    MLP `w2`) is divided by sqrt(n_residuals_per_layer * n_layers).

    Why not mamba-ssm's std-0.02 tied embedding: measured on MQAR (4-8 pairs, |V| = 16, batch
    64, lr 3e-3, see README "Initialisation"), a tied std-0.02 embedding keeps the Transformer
    and Mamba on the 0.47 plateau (a bag-of-values guess, no key-value binding) for thousands of
    steps, while N(0, 1) with an untied head solves it (Transformer 1.00 in 500 steps). With
    pre-norm blocks every block reads a normalised input, so the embedding's scale only sets how
    loud a token's own identity is in the residual stream next to the block outputs; at std 0.02
    (RMS 0.02 against block outputs of RMS ~0.1-0.5) the identity the second layer must read out
    is a small component, and when tied, the same tiny matrix also gives near-zero logits.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(_blocks(cfg))
        self.norm = nn.RMSNorm(cfg.d_model, eps=1e-5)
        # DeciMamba; may be replaced on a built model for zero-shot evaluation (`--decimate`)
        self.decimation = cfg.decimation
        self.lm_head = (
            None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        )
        self._init_weights()

    def _init_weights(self) -> None:
        cfg = self.config
        # GPT-2 / mamba-ssm: each projection that writes into the residual stream is divided by
        # sqrt(number of such writes in the whole model), so the stream's variance at the output
        # does not grow with depth (transformer: 2 per layer, mamba: 1, samba: 4 per unit).
        writers = [m for n, m in self.named_modules() if _RESIDUAL_OUT.match(n)]
        scale = len(writers) ** -0.5 if cfg.rescale_residual and writers else 1.0
        with torch.no_grad():
            nn.init.normal_(self.embed.weight, std=cfg.embed_std)
            for module in self.modules():
                if isinstance(module, nn.Linear) and module.bias is not None:
                    if not getattr(module.bias, "_no_reinit", False):
                        nn.init.zeros_(module.bias)
            for module in writers:
                module.weight.mul_(scale)

    def output_weight(self) -> torch.Tensor:
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, ids: torch.Tensor, return_params: bool = False) -> LMOutput:
        if self.decimation is not None:
            from recall_lab.models.decimation import decimated_forward

            return decimated_forward(self, ids, return_params)
        x = self.embed(ids)
        aux: list[torch.Tensor] = []
        params: list | None = [] if return_params else None
        for block in self.blocks:
            x = block(x, aux, params)
        logits = self.norm(x) @ self.output_weight().t()
        aux_loss = torch.stack([a.float() for a in aux]).sum() if aux else None
        return LMOutput(logits=logits, aux_loss=aux_loss, params=params)

    def param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW groups (nanoGPT's `configure_optimizers` rule, with mamba-ssm's tags): weight
        matrices and conv kernels (ndim >= 2) are decayed; biases, norms, the embedding, the
        branch scales and every parameter tagged `_no_weight_decay` (Mamba's A_log and D,
        Mamba2's dt_bias) are not. Frozen parameters are left out."""
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            if not p.requires_grad:  # frozen by an adapter (fine-tuning)
                continue
            skip = p.ndim < 2 or getattr(p, "_no_weight_decay", False) or name.startswith("embed.")
            (no_decay if skip else decay).append(p)
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


# Projections that write into the residual stream (GPT-2 / mamba-ssm rescale these); not the
# out-projections of mixers that only make keys/values inside an attention layer (Attamba).
_RESIDUAL_OUT = re.compile(r"blocks\.\d+\.(mixer\.out_proj|attn\.out|(mlp\.)+w2)")
