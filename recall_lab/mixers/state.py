"""The state convention, for one mixer or one decode cache (DESIGN "State, one convention").

The **recurrent state** is what carries information across the whole sequence, counted as
zoology counts it: an SSM's ``expand * d_model * d_state``, a linear-attention or delta-rule
state with its normaliser, attention's KV cache, a window's buffer, a sparse branch's key and
value slots. **Convolution caches** are a separate part: ``kernel - 1`` columns per channel,
for every family. Both are counted per sequence, in numbers and in bytes at the cache's dtype.

A decode cache is split by walking it (dataclasses, plain objects, dicts, lists, tensors):

- a tensor reached through a name containing ``conv`` is the convolution cache;
- an integer or boolean tensor is bookkeeping (slot positions, counts): not counted;
- a name an object lists in its class attribute ``state_parts`` as ``"fixed"`` (LSH's hash
  planes, the same for every sequence) is not counted;
- every other floating tensor is recurrent state.

A user's cache follows the same rule; docs/mixers.md says so.

A mixer's own count is its optional ``state_size(sequence_length=L)`` (the contract, version 2:
called by keyword, exactly as zoology's ``_compute_state_size`` calls it, never with
``batch_size``), in numbers of recurrent state for one sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from generators.errors import RecallLabError

COUNTED = ("recurrent", "conv")


@dataclass(frozen=True)
class Part:
    """Numbers and bytes of one part of a state."""

    numbers: int = 0
    nbytes: int = 0

    def __add__(self, other: Part) -> Part:
        return Part(self.numbers + other.numbers, self.nbytes + other.nbytes)


def cache_parts(obj) -> dict[str, Part]:
    """The recurrent and convolution parts of a decode cache (any nesting of dataclasses,
    objects, dicts, lists and tensors; modules are parameters, not state)."""
    found = {part: Part() for part in COUNTED}
    seen: set[int] = set()

    def walk(x, conv: bool, fixed: bool) -> None:
        if id(x) in seen:
            return
        seen.add(id(x))
        if torch.is_tensor(x):
            if fixed or not (x.is_floating_point() or x.is_complex()):
                return
            part = "conv" if conv else "recurrent"
            found[part] = found[part] + Part(x.numel(), x.numel() * x.element_size())
            return
        if isinstance(x, nn.Module):
            return
        if isinstance(x, dict):
            items = [(str(k), v) for k, v in x.items()]
        elif isinstance(x, (list, tuple)):
            items = [("", v) for v in x]
        elif hasattr(x, "__dict__"):
            items = list(vars(x).items())
        else:
            return
        marks = getattr(type(x), "state_parts", {}) if not isinstance(x, dict) else {}
        for name, v in items:
            walk(v, conv or "conv" in name.lower(), fixed or marks.get(name) == "fixed")

    walk(obj, False, False)
    return found


def declared_state(mixer: nn.Module, sequence_length: int) -> int | None:
    """The mixer's own count (`state_size(sequence_length=L)`), or None when it has none. A
    `state_size` that raises or returns something other than a non-negative integer ends in
    one `RecallLabError` line naming the call."""
    fn = getattr(mixer, "state_size", None)
    if not callable(fn):
        return None
    call = f"mixer {type(mixer).__name__}: state_size(sequence_length={sequence_length})"
    try:
        n = fn(sequence_length=sequence_length)
    except Exception as exc:
        raise RecallLabError(f"{call} failed: {type(exc).__name__}: {exc}") from None
    if isinstance(n, torch.Tensor) and n.numel() == 1:
        n = n.item()
    if isinstance(n, bool) or not isinstance(n, (int, float)) or n != int(n) or n < 0:
        raise RecallLabError(f"{call} returned {n!r}, not a non-negative integer")
    return int(n)


def declared_grows(mixer: nn.Module, sequence_length: int) -> bool | None:
    """Whether the declared count changes with the length (zoology's Hyena `d_model * L`, MHA
    `2 * d_model * L`): probed at L and 2L. None without `state_size`."""
    a = declared_state(mixer, sequence_length)
    if a is None:
        return None
    return declared_state(mixer, 2 * sequence_length) != a


__all__ = ["COUNTED", "Part", "cache_parts", "declared_grows", "declared_state"]
