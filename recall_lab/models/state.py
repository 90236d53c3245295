"""A whole model's state under the lab's one convention (recall_lab/mixers/state.py): the
recurrent state and the convolution caches, per sequence, in numbers and bytes. `recall-lab
models`, `recall-lab check`, `report`, its figures and `place` all read `state_count`.

Block by block:

- a contract mixer with `allocate_cache` / `step`: **measured** from its decode cache after one
  step (every buffer is allocated by then), split by `cache_parts`; its own `state_size`, where
  it has one, is kept beside as `declared` (`recall-lab check` compares the two). A cache whose
  size grows by a constant per doubling of max_len ("log L": log-linear attention's Fenwick
  levels) is measured as allocated for `sequence_length` (the zoo's caches allocate every level
  up front); a cache growing faster "grows with L";
- a contract mixer without `step`: its `state_size(sequence_length=...)` probed at L, 4L, 16L:
  the same count is **declared** state (a count growing by a constant per doubling: declared,
  growth "log L"), a count that changes otherwise is **grows with L** (zoology's Hyena and
  MHA); without `state_size` the state is **unknown** (never "L": the lab's exact
  prefix-recompute decoding grows as L, but that says nothing of the mixer);
- any other block (SSM, hybrid branch, attention, MLP, Attamba): measured from its decode cache
  when its decoders are constant in L, else it **grows** as they say (attention's KV cache "L",
  Attamba's chunk ends "L/P").

The model's count is the sum over blocks; one unknown block makes it unknown, one growing block
makes it grow; "declared" where some block was counted from a declaration only. A count with a
"log L" block is a count at `sequence_length`, and its `growth` says "log L" (GROWTH_ORDER).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from recall_lab.attention.decode import GROWTH_ORDER
from recall_lab.mixers.contract import has_step
from recall_lab.mixers.state import Part, cache_parts, declared_growth, declared_state
from recall_lab.models.decode import allocate_cache, one_step_cache, state_growth
from recall_lab.models.mixer_block import MixerBlock, MixerCache

# Where a count comes from, weakest last: a model's source is its weakest block's.
SOURCES = ("measured", "declared", "grows with L", "unknown")


@dataclass(frozen=True)
class StateCount:
    """A model's state per sequence at `sequence_length`. `recurrent` and `conv` are None when
    the state grows with L or is unknown (`source` says which; `growth` how it grows)."""

    recurrent: Part | None
    conv: Part | None  # also None where a block's count is declared only (its caches unknown)
    source: str
    growth: str | None  # "constant", "log L" (counted at sequence_length), "L/P", "L"; None:
    # unknown
    declared: int | None  # the contract mixers' own `state_size` sum, where all have one
    sequence_length: int
    n_layers: int
    # each block's recurrent numbers, in order (None where `recurrent` is): a model whose
    # layers differ (Based's window and Taylor layers) has no one count per layer
    layers: tuple[int, ...] | None = None

    @property
    def fixed(self) -> bool:
        return self.recurrent is not None

    def per_layer(self, part: str = "recurrent") -> float | None:
        p = self.recurrent if part == "recurrent" else self.conv
        return None if p is None else p.numbers / self.n_layers

    def text(self) -> str:
        """The state column of `recall-lab models`: recurrent numbers per sequence, "(declared)"
        where a mixer's own count stands in, "at L=64 (log L)" where it grows as log L, "grows
        as L", or "unknown"."""
        if self.recurrent is not None:
            return (f"{self.recurrent.numbers:,}"
                    + (f" at L={self.sequence_length} (log L)" if self.growth == "log L" else "")
                    + (" (declared)" if self.source == "declared" else ""))
        if self.source == "grows with L":
            return "grows as " + (self.growth or "L")
        return "unknown"

    def conv_text(self) -> str:
        return "-" if self.conv is None else f"{self.conv.numbers:,}"


@dataclass(frozen=True)
class _Block:
    source: str
    recurrent: Part = Part()
    conv: Part = Part()
    growth: str = "constant"
    declared: int | None = None


def _param_bytes(module: nn.Module) -> int:
    p = next(module.parameters(), None)
    return 4 if p is None else p.element_size()


def _mixer_block(block: MixerBlock, cache, length: int) -> _Block:
    mixer = block.mixer
    growth = block.growth if has_step(mixer) else None
    if growth == "log L":  # measured at the length asked for: its levels follow max_len
        parts = cache_parts(mixer.allocate_cache(1, length))
        return _Block("measured", parts["recurrent"], parts["conv"], growth="log L",
                      declared=declared_state(mixer, length))
    if growth is not None and growth != "constant":  # its cache's size follows max_len
        return _Block("grows with L", growth=growth, declared=declared_state(mixer, length))
    if growth is not None:
        parts = cache_parts(cache.state if isinstance(cache, MixerCache) else cache)
        return _Block("measured", parts["recurrent"], parts["conv"],
                      declared=declared_state(mixer, length))
    growth = declared_growth(mixer, length)
    if growth is None:
        return _Block("unknown", growth="")
    declared = declared_state(mixer, length)
    if growth == "L":
        return _Block("grows with L", growth="L", declared=declared)
    return _Block("declared", Part(declared, declared * _param_bytes(mixer)), growth=growth,
                  declared=declared)


def _block(block: nn.Module, cache, length: int) -> _Block:
    if isinstance(block, MixerBlock):
        return _mixer_block(block, cache, length)
    growth = state_growth(block)
    if growth != "constant":
        return _Block("grows with L", growth=growth)
    parts = cache_parts(cache)
    return _Block("measured", parts["recurrent"], parts["conv"])


@torch.no_grad()
def state_count(model: nn.Module, sequence_length: int) -> StateCount:
    """The model's state per sequence at `sequence_length` (see the module docstring). A
    mixer's `state_size` that raises ends in one `RecallLabError` line."""
    try:
        cache = one_step_cache(model)
    except Exception:  # noqa: BLE001  a user's mixer without `step` recomputed at length 1
        # (zoology's BigBIRD raises there): its count is declared anyway, and the contract
        # mixers with `step` allocate their caches whole
        cache = allocate_cache(model, 1, 1)
    blocks = [_block(b, c, sequence_length)
              for b, c in zip(model.blocks, cache.blocks, strict=True)]
    source = max((b.source for b in blocks), key=SOURCES.index)
    mixers = [b for b, m in zip(blocks, model.blocks, strict=True) if isinstance(m, MixerBlock)]
    declared = (sum(b.declared for b in mixers)
                if mixers and all(b.declared is not None for b in mixers) else None)
    n_layers = getattr(getattr(model, "config", None), "n_layers", None) or len(blocks)
    if source in ("grows with L", "unknown"):
        growth = (None if source == "unknown" else
                  max((b.growth for b in blocks), key=GROWTH_ORDER.index))
        return StateCount(None, None, source, growth, declared, sequence_length, n_layers)
    recurrent = sum((b.recurrent for b in blocks), Part())
    # a block counted from its declaration alone says nothing of its convolution caches
    conv = (None if any(b.source == "declared" for b in blocks)
            else sum((b.conv for b in blocks), Part()))
    growth = max((b.growth for b in blocks), key=GROWTH_ORDER.index)  # "constant" or "log L"
    return StateCount(recurrent, conv, source, growth, declared, sequence_length, n_layers,
                      tuple(b.recurrent.numbers for b in blocks))


__all__ = ["SOURCES", "StateCount", "state_count"]
