"""Sequence mixers: the open contract every mixer enters by (`contract.py`), the names they are
known by (`registry.py`: built-ins and plug-ins through the `recall_lab.mixers` entry-point
group), and the lab's own mixers, each built on the contract as a user's would be.

A mixer is zoology's contract: `Mixer(d_model=..., layer_idx=..., **kwargs)`, `forward(x)`
mapping (B, L, D) to (B, L, D); optional `state_size(batch_size=, sequence_length=)`,
`allocate_cache(batch_size, max_len)` and `step(x_t, cache)`. docs/mixers.md is its page.
"""

from recall_lab.mixers.contract import (
    CONTRACT_VERSION,
    build_mixer,
    load_mixer_class,
    mixer_label,
    state_numbers,
)
from recall_lab.mixers.registry import named_mixers, resolve_mixer

__all__ = ["CONTRACT_VERSION", "build_mixer", "load_mixer_class", "mixer_label", "named_mixers",
           "resolve_mixer", "state_numbers"]
