"""The architecture table: one row per `ModelConfig.arch`, read by the LM (its blocks), the
model registry (which names an architecture takes), the training-memory estimate
(`train.estimate_train_bytes`) and `recall-lab models` (its listing).

Adding an architecture: its blocks (a file, or rows of the existing blocks) and one `ArchRow`
here; `config.Arch` lists the names a config accepts (a test keeps the two equal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from recall_lab.config import ModelConfig
from recall_lab.models.attamba import attamba_blocks
from recall_lab.models.blocks import AttentionBlock, MLPBlock, SSMBlock, attention_layer
from recall_lab.models.mixer_block import mixer_blocks


def _ssm_activations(d_state: int, units: int = 1, keys: bool = False
                     ) -> Callable[[ModelConfig, int], int]:
    """Activation floats per token of `units` SSM layers per layer index: the mixer's (~32 per
    channel), one scan state (d_inner x d_state), and, with a sparse branch (or `keys`: Samba's
    window), its index list and q/k (k + 4 d_state). `d_state` stands in for a config's None."""

    def count(m: ModelConfig, max_len: int) -> int:
        d_inner = m.expand * m.d_model
        ds = m.d_state or d_state
        per_layer = 32 * d_inner + d_inner * ds
        if m.pattern is not None or keys:
            per_layer += min(m.k, max_len) + 4 * ds
        return m.n_layers * units * per_layer

    return count


def _attention_activations(m: ModelConfig, max_len: int) -> int:
    return m.n_layers * 48 * m.d_model  # SDPA does not keep L x L scores


def _ssm_blocks(cfg: ModelConfig) -> list[nn.Module]:
    return [SSMBlock(cfg, layer=i) for i in range(cfg.n_layers)]


def _mamba2_attn_blocks(cfg: ModelConfig) -> list[nn.Module]:
    """The Mamba-2-Hybrid shape of SE-Attn (Expansion Span), scaled down: attention after the
    listed Mamba2 layers."""
    out: list[nn.Module] = []
    for i in range(cfg.n_layers):
        out.append(SSMBlock(cfg, with_branch=False))
        if i in cfg.attention_layers.after:
            out.append(attention_layer(cfg))
    return out


def _transformer_blocks(cfg: ModelConfig) -> list[nn.Module]:
    window = cfg.k if cfg.pattern == "sw" else None  # "sw": the sliding-window Transformer
    return [AttentionBlock(cfg, window) for _ in range(cfg.n_layers)]


def _samba_blocks(cfg: ModelConfig) -> list[nn.Module]:
    """The joint-recall paper's App. D.1 (2 Mamba + 2 SWA layers, window k): units of Mamba, MLP,
    SWA+MLP, as in the Samba paper's layer layout."""
    out: list[nn.Module] = []
    for _ in range(cfg.n_layers):
        out += [SSMBlock(cfg, with_branch=False), MLPBlock(cfg), AttentionBlock(cfg, cfg.k)]
    return out


@dataclass(frozen=True)
class ArchRow:
    """`blocks(cfg)`: the model's residual blocks; `activations(cfg, max_len)`: activation floats
    per token over all layers (the memory estimate); `takes_names`: model names ARCH, ARCH-2x,
    ARCH+PATTERN and ARCH+deci build it (a branch hybrid); `branch`: what `recall-lab models`
    shows in its branch column when the config has no pattern; `ssm`: whether its blocks read
    the SSM fields (`SSM_FIELDS`; a report leaves them out of a label where they are not read)."""

    blocks: Callable[[ModelConfig], list[nn.Module]]
    activations: Callable[[ModelConfig, int], int]
    takes_names: bool = False
    branch: str = "-"
    ssm: bool = True


ARCH_TABLE: dict[str, ArchRow] = {
    "mamba": ArchRow(_ssm_blocks, _ssm_activations(16), takes_names=True),
    "mamba2": ArchRow(_ssm_blocks, _ssm_activations(64), takes_names=True),
    "samba": ArchRow(_samba_blocks, _ssm_activations(16, units=3, keys=True), branch="swa"),
    "transformer": ArchRow(_transformer_blocks, _attention_activations, ssm=False),
    # the estimate's state size for these stays 16 (what it assumed before the table)
    "mamba2-attn": ArchRow(_mamba2_attn_blocks, _ssm_activations(16)),
    "attamba": ArchRow(attamba_blocks, _ssm_activations(16)),
    # a contract mixer (models/mixer_block.py): what it keeps for its backward is unknown to the
    # lab; the estimate counts it as an attention layer's (a rough floor, not a measurement)
    "mixer": ArchRow(mixer_blocks, _attention_activations, ssm=False),
}
# the Mamba / Mamba2 mixer's fields (models/blocks.py `_mixer`): a transformer or a contract
# mixer's blocks never read them, whatever the config holds
SSM_FIELDS = ("d_state", "d_conv", "expand", "headdim")
BRANCH_ARCHS = tuple(a for a, row in ARCH_TABLE.items() if row.takes_names)
