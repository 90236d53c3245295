"""Context-independent patterns (HAX paper Sec. 2.1): sliding window SW(n), Sink(n), dilated D(n)
with a gap fixed by the configuration, and the dense causal baseline `full`. They read only the
sequence length and the device; O(L n) to build."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from recall_lab.attention.base import Pattern, UnionPattern, check_qk
from recall_lab.attention.decode import Decoder, FullDecoder, SlotDecoder, WindowDecoder
from recall_lab.generators.errors import RecallLabError

RELEASE_MAX_LEN = 2048


def _pos(length: int, device: torch.device | str | None) -> Tensor:
    return torch.arange(length, device=device, dtype=torch.int64)


def _finish(idx: Tensor) -> Tensor:
    return idx.to(torch.int32)[None, None]


def sliding_window_indices(length: int, n: int, device=None) -> Tensor:
    """SW(n): ``int32 [1, 1, L, n]``, slot s holds ``i - s`` (or -1 before the sequence start)."""
    j = _pos(length, device)[:, None] - _pos(n, device)[None, :]
    return _finish(torch.where(j >= 0, j, -1))


def sink_indices(length: int, n: int, device=None) -> Tensor:
    """Sink(n): ``int32 [1, 1, L, n]``, slot s holds ``s`` when ``s <= i``."""
    i = _pos(length, device)[:, None]
    s = _pos(n, device)[None, :]
    return _finish(torch.where(s <= i, s.expand(length, n), -1))


def dilation_for(n: int, dilation: int | str = "auto", max_len: int = RELEASE_MAX_LEN) -> int:
    """The gap g of D(n), fixed by the config: ``auto`` = ceil(max_len / n); ``release`` =
    max_len // n; or a given int. Never a function of the sequence at hand."""
    if isinstance(dilation, bool):
        raise RecallLabError(f"dilation must be 'auto', 'release' or an int >= 1, got {dilation!r}")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise RecallLabError(f"max_len of the dilated pattern must be an int >= 1, got {max_len!r}")
    if dilation == "auto":
        return max(1, math.ceil(max_len / n))
    if dilation == "release":
        if max_len // n < 1:
            raise RecallLabError(f"release dilation max_len // k is 0 (max_len={max_len}, k={n})")
        return max_len // n
    if isinstance(dilation, int) and dilation >= 1:
        return dilation
    raise RecallLabError(f"dilation must be 'auto', 'release' or an int >= 1, got {dilation!r}")


def dilated_indices(length: int, n: int, dilation: int, device=None) -> Tensor:
    """D(n) with gap g: the n most recent ``j <= i`` with ``j % g == g - 1``. ``[1, 1, L, n]``."""
    g = int(dilation)
    # m-th dilated position is m*g + g-1; the newest one <= i has m = (i+1)//g - 1.
    newest = (_pos(length, device) + 1) // g - 1
    m = newest[:, None] - _pos(n, device)[None, :]
    return _finish(torch.where(m >= 0, m * g + g - 1, -1))


def full_indices(length: int, device=None) -> Tensor:
    """Dense causal baseline: ``[1, 1, L, L]`` with slot j = j for j <= i. Quadratic by design."""
    i = _pos(length, device)[:, None]
    j = _pos(length, device)[None, :]
    return _finish(torch.where(j <= i, j.expand(length, length), -1))


class FixedPattern(Pattern):
    """Context-independent patterns: sw, sink, d, full (they only read L and the device)."""

    def __init__(self, kind: str, n: int, dilation: int | str = "auto",
                 max_len: int = RELEASE_MAX_LEN) -> None:
        super().__init__()
        self.name, self.budget = kind, n
        self.dilation, self.max_len = dilation, max_len
        if kind == "d":
            self.gap = dilation_for(n, dilation, max_len)

    def indices(self, length: int, device=None) -> Tensor:
        if self.name == "sw":
            return sliding_window_indices(length, self.budget, device)
        if self.name == "sink":
            return sink_indices(length, self.budget, device)
        if self.name == "d":
            return dilated_indices(length, self.budget, self.gap, device)
        return full_indices(length, device)

    def forward(self, q: Tensor, k: Tensor, v: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        return self.indices(check_qk(q, k), q.device), None

    def decoder(self) -> Decoder:
        """SW keeps the n - 1 keys before the current one (`WindowDecoder`); Sink fills slots
        0..n-1 once; D writes dilated position t = m g + g - 1 into slot m mod n (the n latest:
        between dilated positions all n are past keys); full keeps every key."""
        n = self.budget
        if self.name == "sw":
            return WindowDecoder(n)
        if self.name == "sink":
            return SlotDecoder(n, lambda t: t if t < n else None)
        if self.name == "d":
            g = self.gap
            return SlotDecoder(n, lambda t: (t // g) % n if t % g == g - 1 else None)
        return FullDecoder()


def a_pattern(k: int) -> UnionPattern:
    """A-shaped = SW(k - k//2) u Sink(k//2)."""
    return UnionPattern("a", [FixedPattern("sw", k - k // 2), FixedPattern("sink", k // 2)])


def sw_d_pattern(k: int, **d_opts) -> UnionPattern:
    """SW(k - k//2) u D(k//2); `d_opts`: dilation, max_len."""
    return UnionPattern("sw+d", [FixedPattern("sw", k - k // 2),
                                 FixedPattern("d", k // 2, **d_opts)])
