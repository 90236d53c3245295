"""Sequence mixers: the open contract every mixer enters by (`contract.py`), the names they are
known by (`registry.py`: built-ins and plug-ins through the `recall_lab.mixers` entry-point
group), and the lab's own mixers, each built on the contract as a user's would be.

A mixer is zoology's contract: `Mixer(d_model=..., layer_idx=..., **kwargs)`, `forward(x)`
mapping (B, L, D) to (B, L, D); optional `state_size(sequence_length=)` (by keyword, as zoology
calls it), `allocate_cache(batch_size, max_len)` and `step(x_t, cache)`. `state.py` holds the
one state convention (recurrent state and convolution caches apart). docs/mixers.md is its page.
"""

from recall_lab.mixers.contract import (
    CONTRACT_VERSION,
    build_mixer,
    load_mixer_class,
    mixer_label,
    required_kwargs,
)
from recall_lab.mixers.registry import named_mixers, resolve_mixer
from recall_lab.mixers.state import cache_parts, declared_state

__all__ = ["CONTRACT_VERSION", "build_mixer", "cache_parts", "declared_state", "load_mixer_class",
           "mixer_label", "named_mixers", "required_kwargs", "resolve_mixer"]
