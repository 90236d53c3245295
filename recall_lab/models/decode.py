"""Recurrent decoding of every model: one cache per block, one token at a time (docs/decoding.md).

`RecallLM.allocate_cache(batch, max_len)` -> `DecodeCache` (one entry per block: `SSMBlock` the
mixer's conv + scan state and its branch's pattern decode state, attention blocks their pattern's
decode state, i.e. the KV cache for full attention and, for a window of k, a ring of the k - 1
keys before the current one, `MLPBlock` nothing, `AttambaBlock` its chunk-end cache);
`RecallLM.step(ids_t, cache)` -> logits [b, vocab] of the next position. Every block class has
`allocate_cache(batch, max_len)` and `step(x_t, cache)`, so an architecture made of them
decodes with no code here.

`prefill(model, ids, cache)` feeds a prompt: token by token, except for DeciMamba models, whose
decimating layers drop context tokens during the prefill only (`models/decimation.py`,
DeciMamba Sec. 4); the inquiry is then stepped as usual. `decode(model, ids, n_prefill)` does both
and returns the logits the parallel forward gives (zeros where DeciMamba dropped the token).

`state_growth(model)`: how the decode state grows with the context length L ("constant", "L/P"
or "L"), from the blocks' decoders; `cache.nbytes()` its size now. The state convention's count
(recurrent state and convolution caches apart) is `models/state.py`'s `state_count`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from recall_lab.attention.decode import GROWTH_ORDER, make_decoder, tensor_bytes
from recall_lab.models.decimation import decimated_prefill
from recall_lab.models.layers import CausalSelfAttention
from recall_lab.models.mixer_block import MixerBlock


@dataclass
class DecodeCache:
    """The decode state of a whole model: one entry per block, and the next position."""

    blocks: list
    t: int = 0
    max_len: int = 0

    def nbytes(self) -> int:
        return tensor_bytes(self.blocks)


def allocate_cache(model: nn.Module, batch: int, max_len: int) -> DecodeCache:
    return DecodeCache([blk.allocate_cache(batch, max_len) for blk in model.blocks],
                       max_len=max_len)


def step(model: nn.Module, ids_t: Tensor, cache: DecodeCache) -> Tensor:
    """Token ids [b] at position cache.t -> next-token logits [b, vocab] (eval mode)."""
    if cache.t >= cache.max_len:
        raise ValueError(f"decode cache was allocated for {cache.max_len} tokens")
    x = model.embed(ids_t)
    if getattr(model, "pos", None) is not None:  # learned positions (eval: no dropout)
        x = x + model.pos.weight[cache.t]
    for blk, c in zip(model.blocks, cache.blocks, strict=True):
        x = blk.step(x, c, **({"ids": ids_t} if getattr(blk, "takes_ids", False) else {}))
    cache.t += 1
    return model.norm(x) @ model.output_weight().t()


def prefill(model: nn.Module, ids: Tensor, cache: DecodeCache) -> Tensor:
    """Feed a prompt ids [b, l] into an empty cache; its logits [b, l, vocab] (DeciMamba: zeros
    at the dropped positions, as `decimated_forward`)."""
    if getattr(model, "decimation", None) is not None:
        logits = decimated_prefill(model, ids, cache.blocks)
        cache.t += ids.shape[1]
        return logits
    return torch.stack([step(model, ids[:, t], cache) for t in range(ids.shape[1])], dim=1)


@torch.no_grad()
def decode(model: nn.Module, ids: Tensor, n_prefill: int = 0) -> Tensor:
    """Logits [b, l, vocab] of ids [b, l]: the first `n_prefill` tokens by `prefill`, the rest
    token by token. Equals `model(ids).logits` (tests/models/test_decode.py)."""
    b, length = ids.shape
    cache = allocate_cache(model, b, length)
    out = [prefill(model, ids[:, :n_prefill], cache)] if n_prefill else []
    out += [step(model, ids[:, t], cache)[:, None] for t in range(n_prefill, length)]
    return torch.cat(out, dim=1)


@torch.no_grad()
def decode_prompted(model: nn.Module, ids: Tensor, sep: int) -> Tensor:
    """`decode` of a batch of recall prompts: each row's information component (the tokens
    before its first `sep`) is the prefill, the inquiry is stepped; rows are grouped by where
    their first SEP is (DeciMamba's prefill keeps a count that depends on it)."""
    is_sep = ids == sep
    first = torch.where(is_sep.any(1), is_sep.to(torch.int8).argmax(1), ids.shape[1])
    out = None
    for n in sorted(set(first.tolist())):
        rows = (first == n).nonzero().flatten()
        logits = decode(model, ids[rows], n_prefill=n)
        if out is None:
            out = logits.new_zeros(*ids.shape, logits.shape[-1])
        out[rows] = logits
    return out


def state_growth(model: nn.Module) -> str:
    """How the model's decode state grows with L: the largest growth of its blocks' decoders."""
    growth = ["constant"]
    for module in model.modules():
        if isinstance(module, CausalSelfAttention):  # SDPA, no pattern: the full KV cache
            growth.append("L")
        elif isinstance(module, MixerBlock):  # a contract mixer: measured from its caches
            growth.append(module.growth)
        elif isinstance(getattr(module, "pattern", None), nn.Module):
            growth.append(getattr(make_decoder(module.pattern), "growth", "L"))
    return max(growth, key=GROWTH_ORDER.index)


def _size(n: int) -> str:
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def one_step_cache(model: nn.Module) -> DecodeCache:
    """A cache for one sequence after one step (every buffer is allocated by then)."""
    was = model.training
    model.eval()
    cache = allocate_cache(model, 1, 1)
    step(model, torch.zeros(1, dtype=torch.int64, device=model.embed.weight.device), cache)
    model.train(was)
    return cache


@torch.no_grad()
def decode_state(model: nn.Module) -> str:
    """What `recall-lab models` shows: the decode state's bytes for one sequence when they do
    not depend on L (measured after one step; every buffer is allocated by then), else how it
    grows ("grows as L", "grows as L/P")."""
    growth = state_growth(model)
    if growth != "constant":
        return f"grows as {growth}"
    return f"const {_size(one_step_cache(model).nbytes())}"


__all__ = ["DecodeCache", "allocate_cache", "decode", "decode_prompted", "decode_state",
           "one_step_cache", "prefill", "state_growth", "step"]
