"""DeciMamba in the language model: the decimated forward, layer choice by Mamba Mean Distance,
and the `--decimate` option (DeciMamba Sec. 4; docs/seeds/002-decimamba.md).

The forward carries, next to the hidden states, each kept token's original position; decimating
layers shorten the sequence (`SSMBlock` gathers the residual), and the logits are scattered back to
`[b, L, vocab]` with zeros at dropped positions and `LMOutput.kept` marking the positions that have
logits. Only context positions (before the first SEP) are ever dropped and no target sits there,
so training and evaluation code stay unchanged.
"""

from __future__ import annotations

import torch

from recall_lab.analysis.collect import capture
from recall_lab.analysis.mean_distance import mamba_mean_distance_last
from recall_lab.config import DecimationConfig
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.vocab import Vocab
from recall_lab.models.blocks import LMOutput, SSMBlock
from recall_lab.ssm.decimation import Decimate, first_sep, keep_count


def decimating_layers(cfg: DecimationConfig, n_layers: int) -> list[int]:
    """The SSM layer indices that decimate, shallowest first (s = 0, 1, ... in that order)."""
    if cfg.layers == "auto":
        raise RecallLabError(
            "decimation layers 'auto' must be chosen from data first "
            "(recall_lab.models.decimation.resolve_auto_layers)"
        )
    out = sorted({layer % n_layers for layer in cfg.layers})
    if any(not -n_layers <= layer < n_layers for layer in cfg.layers):
        raise RecallLabError(f"decimation layers {cfg.layers} out of range for {n_layers} layers")
    return out


def decimated_forward(model, ids: torch.Tensor, return_params: bool = False):
    """RecallLM.forward with `model.decimation` on."""
    cfg: DecimationConfig = model.decimation
    layers = decimating_layers(cfg, len(model.blocks))
    if any(not isinstance(model.blocks[i], SSMBlock) for i in layers):
        raise RecallLabError("decimation needs SSM layers (mamba / mamba2 models)")
    b, length = ids.shape
    x = model.embed(ids)
    pos = torch.arange(length, device=ids.device).expand(b, length)
    valid = torch.ones(b, length, dtype=torch.bool, device=ids.device)
    keep_from = first_sep(ids, Vocab.SEP)  # targets only come after SEP: never dropped
    aux: list[torch.Tensor] = []
    params: list | None = [] if return_params else None
    s = 0
    for i, block in enumerate(model.blocks):
        if i not in layers:
            x = block(x, aux, params)
            continue
        n_keep = keep_count(keep_from, s, cfg.L_base, cfg.beta, cfg.min_len, cfg.top_k)
        x, kept = block(x, aux, params, decimate=Decimate(n_keep, keep_from, cfg.score))
        pos = kept.gather(pos, 1)
        valid = kept.gather(valid, 1) & kept.valid
        keep_from = n_keep  # the kept context comes first in the new coordinates
        s += 1
    short = model.norm(x) @ model.output_weight().t()  # [b, l', vocab]
    vocab = short.shape[-1]
    # positions within a row are distinct (each index row is a prefix of a permutation)
    logits = short.new_zeros(b, length, vocab).scatter(
        1, pos[..., None].expand(-1, -1, vocab), short * valid[..., None]
    )
    kept_mask = torch.zeros(b, length, dtype=torch.bool, device=ids.device).scatter(1, pos, valid)
    aux_loss = torch.stack([a.float() for a in aux]).sum() if aux else None
    return LMOutput(logits=logits, aux_loss=aux_loss, params=params, kept=kept_mask)


def decimated_prefill(model, ids: torch.Tensor, caches: list) -> torch.Tensor:
    """Feed a context ids [b, l] (no SEP: all of it may be dropped) into empty block caches the
    DeciMamba way (DeciMamba Sec. 4): layer by layer, each block steps over its input sequence;
    a decimating layer first picks its kept tokens as the parallel forward does, then steps over
    every input token with the scan advancing on the kept ones only, and passes on the kept
    positions' outputs. Returns the logits [b, l, vocab], zeros at dropped positions. The
    inquiry then decodes token by token with `step` (no decimation after the prefill)."""
    cfg: DecimationConfig = model.decimation
    layers = decimating_layers(cfg, len(model.blocks))
    b, length = ids.shape
    if bool((ids == Vocab.SEP).any()):
        raise RecallLabError("a DeciMamba prefill is the context only: it must not hold SEP "
                             "(the inquiry from SEP on is decoded token by token)")
    x = model.embed(ids)
    pos = torch.arange(length, device=ids.device).expand(b, length)
    n_ctx = torch.full((b,), length, dtype=torch.int64, device=ids.device)
    s = 0
    for i, (block, cache) in enumerate(zip(model.blocks, caches, strict=True)):
        keep = None
        if i in layers:
            n_keep = keep_count(n_ctx, s, cfg.L_base, cfg.beta, cfg.min_len, cfg.top_k)
            _, kept = block(x, [], None, decimate=Decimate(n_keep, n_ctx, cfg.score))
            keep = torch.zeros(b, x.shape[1], dtype=torch.bool, device=ids.device)
            keep.scatter_(1, kept.idx, kept.valid)
        out = torch.stack([block.step(x[:, t], cache, **({} if keep is None else
                                                         {"keep": keep[:, t]}))
                           for t in range(x.shape[1])], dim=1)
        if keep is not None:  # every row keeps n_keep tokens: no SEP, one context length
            x, pos = kept.gather(out, 1), kept.gather(pos, 1)
            n_ctx = n_keep
            s += 1
        else:
            x = out
    short = model.norm(x) @ model.output_weight().t()
    vocab = short.shape[-1]
    return short.new_zeros(b, length, vocab).scatter(1, pos[..., None].expand(-1, -1, vocab),
                                                     short)


@torch.no_grad()
def resolve_auto_layers(model, ids: torch.Tensor) -> DecimationConfig:
    """Replace `layers="auto"` by the `n_auto` SSM layers with the largest Mamba Mean Distance of
    the last token (Eq. 8) on `ids`, measured without decimation (Sec. 4 "Decimation Scope");
    sets and returns the model's decimation config."""
    cfg: DecimationConfig = model.decimation
    if cfg is None or cfg.layers != "auto":
        return cfg
    model.decimation = None
    try:
        cap = capture(model, ids)
    finally:
        model.decimation = cfg
    md = [float(mamba_mean_distance_last(p).nanmean()) for p in cap.params]
    order = sorted(range(len(md)), key=lambda i: (-md[i], i))[: cfg.n_auto]
    model.decimation = cfg.model_copy(update={"layers": tuple(sorted(order))})
    return model.decimation


def _scalar(text: str) -> int | float | str:
    """A flag's `key=value` value as the type it spells (the config's fields take no strings
    for numbers: `recall_lab/generators/fields.py`)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_decimate(text: str) -> DecimationConfig:
    """`--decimate` text -> DecimationConfig: comma-separated key=value pairs, e.g.
    `L_base=64`, `L_base=64,layers=-1,score=mean`, `layers=0+1`, `layers=auto,n_auto=1`,
    `top_k=0.5`."""
    fields: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not value:
            raise RecallLabError(f"--decimate expects key=value pairs, got {part!r}")
        if key == "layers" and value != "auto":
            try:
                fields[key] = tuple(int(v) for v in value.split("+"))
            except ValueError:
                raise RecallLabError(f"--decimate layers must be ints joined by '+' or 'auto', "
                                     f"got {value!r}") from None
        else:
            fields[key] = _scalar(value)
    try:
        return DecimationConfig.model_validate(fields)
    except ValueError as exc:
        first = str(exc).splitlines()
        raise RecallLabError(f"--decimate {text!r}: {' '.join(first[:3])}") from None
