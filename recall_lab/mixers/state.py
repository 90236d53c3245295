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
  planes, the same for every sequence) is not counted; one it lists as ``"conv"`` is counted
  with the convolution caches (Mamba-3's previous token's k and x and its rotary angle: caches
  of one token, like a convolution's window, whatever their names);
- every other floating tensor is recurrent state.

A user's cache follows the same rule; docs/mixers.md says so.

A mixer's own count is its optional ``state_size(sequence_length=L)`` (the contract, version 2:
called by keyword, exactly as zoology's ``_compute_state_size`` calls it, never with
``batch_size``), in numbers of recurrent state for one sequence.

How a state grows with the length L (`growth_class`, from sizes at three lengths): "constant";
"log L" when it grows by the same amount per doubling of L (log-linear attention's Fenwick
levels: one state per head per doubling); "L" otherwise. `cache_growth` probes a mixer's decode
cache allocated for 4, 64 and 1,024 tokens; `declared_growth` its `state_size` at L, 4L, 16L.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from recall_lab.generators.errors import RecallLabError

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
            walk(v, conv or "conv" in name.lower() or marks.get(name) == "conv",
                 fixed or marks.get(name) == "fixed")

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


CACHE_PROBES = (4, 64, 1024)  # max_len of the decode caches `cache_growth` compares


def growth_class(sizes: dict[int, int]) -> str:
    """"constant", "log L" or "L" from a state's sizes at three or more lengths (length ->
    size): "log L" when every step between probes adds the same amount per doubling and the
    state does grow; anything else that changes is "L" (a window capped below the longest
    probe included, as before this class)."""
    lengths = sorted(sizes)
    values = [sizes[n] for n in lengths]
    if len(set(values)) == 1:
        return "constant"
    per_doubling = {(b - a) / math.log2(m / n)
                    for n, m, a, b in zip(lengths, lengths[1:], values, values[1:],
                                          strict=False)}
    return "log L" if len(per_doubling) == 1 and per_doubling.pop() > 0 else "L"


def cache_growth(mixer: nn.Module, lengths: tuple[int, ...] = CACHE_PROBES) -> str:
    """How a mixer's decode cache grows with `max_len` (it must have `allocate_cache`): its
    floating numbers allocated for one sequence at each probe length, classified."""
    return growth_class({n: cache_numbers(mixer.allocate_cache(1, n)) for n in lengths})


def cache_numbers(cache) -> int:
    """Numbers of state (recurrent and convolution parts) in a decode cache."""
    parts = cache_parts(cache)
    return sum(p.numbers for p in parts.values())


def declared_growth(mixer: nn.Module, sequence_length: int) -> str | None:
    """How the declared count grows: `growth_class` of `state_size` at L, 4L and 16L; None
    without `state_size`."""
    sizes = {n: declared_state(mixer, n) for n in (sequence_length, 4 * sequence_length,
                                                   16 * sequence_length)}
    return None if None in sizes.values() else growth_class(sizes)


__all__ = ["CACHE_PROBES", "COUNTED", "Part", "cache_growth", "cache_numbers", "cache_parts",
           "declared_growth", "declared_grows", "declared_state", "growth_class"]
