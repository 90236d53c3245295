"""The 2-layer language model around every mixer: embedding, pre-norm residual blocks, final
RMSNorm, output projection (untied by default), and the model's own initialisation and
weight-decay rule.

The blocks of each architecture come from its row of `models/archs.ARCH_TABLE`. Block kinds
(models/blocks.py): `SSMBlock` (Mamba / Mamba2 mixer, optionally with a sparse
branch), `AttentionBlock`, `MLPBlock`; `AttambaBlock` (models/attamba.py): the Transformer block
with chunk-reset SSM keys/values.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from recall_lab.config import ModelConfig
from recall_lab.generators import IGNORE
from recall_lab.generators.errors import RecallLabError
from recall_lab.models.archs import ARCH_TABLE
from recall_lab.models.blocks import LMOutput, make_norm
from recall_lab.models.decimation import decimated_forward
from recall_lab.models.decode import DecodeCache, allocate_cache, step


class RecallLM(nn.Module):
    """Embedding (+ learned positions, dropout: zoology's options) -> blocks -> RMSNorm (or
    LayerNorm) -> output head. forward(ids) -> LMOutput.

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
        self.blocks = nn.ModuleList(ARCH_TABLE[cfg.arch].blocks(cfg))
        self.norm = make_norm(cfg)
        # zoology's attention rows: learned absolute positions, dropout on the embedding
        self.pos = (nn.Embedding(cfg.max_len or 2048, cfg.d_model)
                    if cfg.positions == "learned" else None)
        self.drop = nn.Dropout(cfg.dropout) if cfg.dropout else None
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
            if self.pos is not None:  # zoology's: N(0, 0.02)
                nn.init.normal_(self.pos.weight, std=0.02)
            for module in self.modules():
                if isinstance(module, nn.Linear) and module.bias is not None:
                    if not getattr(module.bias, "_no_reinit", False):
                        nn.init.zeros_(module.bias)
            if cfg.init == "zoology" and not ARCH_TABLE[cfg.arch].ssm:
                # zoology's `_init_weights` for its TransformerBlock: every Linear N(0, 0.02),
                # the residual writers N(0, 0.02 / sqrt(2 n_layers)) (whatever the number of
                # writers); the SSM archs keep their mixers' init, as zoology's MambaBlock does
                for module in self.modules():
                    if isinstance(module, nn.Linear) and module is not self.lm_head:
                        nn.init.normal_(module.weight, std=0.02)
                for module in writers:
                    nn.init.normal_(module.weight, std=0.02 / (2 * cfg.n_layers) ** 0.5)
                return
            for module in writers:
                module.weight.mul_(scale)

    def output_weight(self) -> torch.Tensor:
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, ids: torch.Tensor, return_params: bool = False,
                at: torch.Tensor | None = None) -> LMOutput:
        """Logits [b, l, vocab]; with `at` (int [b, k], positions per row, from
        `scored_positions`) only at those positions: [b, k, vocab] (the head's cost falls from
        l to k rows per sample; the logits there are the full forward's)."""
        if self.decimation is not None:
            if at is not None:
                raise ValueError("a decimating model computes its own kept positions")
            return decimated_forward(self, ids, return_params)
        x = self.embed(ids)
        if self.pos is not None:
            if ids.shape[1] > self.pos.num_embeddings:
                raise RecallLabError(f"learned positions cover {self.pos.num_embeddings} tokens; "
                                     f"this batch has {ids.shape[1]}")
            x = x + self.pos.weight[: ids.shape[1]]
        if self.drop is not None:
            x = self.drop(x)
        aux: list[torch.Tensor] = []
        params: list | None = [] if return_params else None
        for block in self.blocks:
            # a block whose branch reads the token ids (the oracle pattern) gets them
            extra = {"ids": ids} if getattr(block, "takes_ids", False) else {}
            x = block(x, aux, params, **extra)
        if at is not None:  # the norm is per position: gathering first changes no value
            x = x.gather(1, at.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        logits = self.norm(x) @ self.output_weight().t()
        aux_loss = torch.stack([a.float() for a in aux]).sum() if aux else None
        return LMOutput(logits=logits, aux_loss=aux_loss, params=params)

    def allocate_cache(self, batch: int, max_len: int) -> DecodeCache:
        """Empty decode state for `step` (models/decode.py), for up to max_len tokens."""
        return allocate_cache(self, batch, max_len)

    def step(self, ids_t: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """Token ids [b] -> next-token logits [b, vocab]; eval mode (LSH planes fixed)."""
        return step(self, ids_t, cache)

    def param_groups(self, weight_decay: float, decay_all: bool = False) -> list[dict]:
        """AdamW groups (nanoGPT's `configure_optimizers` rule, with mamba-ssm's tags): weight
        matrices and conv kernels (ndim >= 2) are decayed; biases, norms, the embedding, the
        branch scales and every parameter tagged `_no_weight_decay` (Mamba's A_log and D,
        Mamba2's dt_bias) are not. `decay_all` (`train.decay = "all"`, zoology's): every
        parameter is decayed. Frozen parameters are left out."""
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            if not p.requires_grad:  # frozen by an adapter (fine-tuning)
                continue
            skip = not decay_all and (p.ndim < 2 or getattr(p, "_no_weight_decay", False)
                                      or name.startswith("embed."))
            (no_decay if skip else decay).append(p)
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


# The vocabulary size from which training and evaluation compute the head's logits only at the
# scored positions (`uses_scored_head`). The largest vocabulary of any committed run is 51
# (docs/results/; a test keeps every committed run below this), so every committed run trains
# through the full head, bit-identically. `recall-lab bench head` (docs/performance.md): a
# training step 5.8x faster at V = 8,192 (4 of 64 positions scored), 1.03x at V = 51.
SCORED_HEAD_MIN_VOCAB = 1024


def uses_scored_head(model: nn.Module) -> bool:
    """Whether training and evaluation give `model` only the scored positions: a `RecallLM`
    (no DeciMamba) whose vocabulary is at least SCORED_HEAD_MIN_VOCAB."""
    return (isinstance(model, RecallLM) and model.decimation is None
            and model.config.vocab_size >= SCORED_HEAD_MIN_VOCAB)


def scored_positions(targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions int [b, k], targets [b, k]): each row's scored positions (target != IGNORE)
    in order, k = the most any row has; a row with fewer is padded with unscored positions
    whose target is IGNORE. Metrics over (logits at the positions, these targets) are the
    full ones: the same targets per row, the rest ignored."""
    mask = targets != IGNORE
    n = mask.sum(1)
    k = max(int(n.max()) if n.numel() else 0, 1)
    at = torch.sort((~mask).to(torch.uint8), dim=1, stable=True).indices[:, :k]
    keep = torch.arange(k, device=targets.device)[None, :] < n[:, None]
    return at, targets.gather(1, at).masked_fill(~keep, IGNORE)


def forward_scored(model: nn.Module, x: torch.Tensor, y: torch.Tensor
                   ) -> tuple[LMOutput, torch.Tensor]:
    """(output, targets) of batch (x, y) for the loss and metrics: the full logits and `y`, or
    where `uses_scored_head(model)` the logits at the scored positions and their targets."""
    if not uses_scored_head(model):
        return model(x), y
    at, yc = scored_positions(y)
    return model(x, at=at), yc


# Projections that write into the residual stream (GPT-2 / mamba-ssm rescale these); not the
# out-projections of mixers that only make keys/values inside an attention layer (Attamba).
_RESIDUAL_OUT = re.compile(r"blocks\.\d+\.(mixer\.out_proj|attn\.out|(mlp\.)+w2)")
