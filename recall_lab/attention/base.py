"""What every sparse pattern shares: the module contract (`Pattern`), the q/k shape check, and
the union of index lists (OR of masks: a key counts once), as a function and as a pattern."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from recall_lab.attention import native
from recall_lab.attention.decode import Decoder, PrefixDecoder, UnionDecoder, make_decoder
from recall_lab.generators.errors import RecallLabError


def check_qk(q: Tensor, k: Tensor) -> int:
    """The sequence length of ``q, k: [B, H, L, d]``; one clear error for any other shape."""
    if q.dim() != 4 or k.dim() != 4:
        raise RecallLabError(f"pattern expects q, k of shape [B, H, L, d]; got {tuple(q.shape)}, "
                             f"{tuple(k.shape)}")
    if q.shape[-2] != k.shape[-2] or q.shape[-1] != k.shape[-1]:
        raise RecallLabError(f"q and k disagree in length or dim: {tuple(q.shape)} vs "
                             f"{tuple(k.shape)}")
    return q.shape[-2]


class Pattern(nn.Module):
    """Base: ``forward(q, k, v=None) -> (idx int32 [.., L, slots], aux_loss or None)``.

    ``v`` is read only by patterns that need it (SE-Attn's value summaries); callers pass it.
    ``takes_ids``: the pattern reads the token ids too (the oracle): callers then pass
    ``ids=`` (int ``[B, L]``; a hybrid branch passes the model's input ids, and its decoder
    gets each step's ids), and never pass it to any other pattern.

    ``budget`` is the most keys any query can get (Eq. 4); ``slots`` may be larger for unions.
    """

    name: str = ""
    budget: int = 0
    takes_ids: bool = False

    def extra_repr(self) -> str:
        return f"name={self.name!r}, budget={self.budget}"

    def decoder(self) -> Decoder:
        """Decode state for one query at a time (attention/decode.py); this default keeps every
        token and re-runs the pattern on the prefix (exact for a causal pattern, grows as L)."""
        return PrefixDecoder(self)


def union_indices(*parts: Tensor) -> Tensor:
    """Union of index lists (OR of the masks): a key occurs once (repeats become -1 slots).

    Parts broadcast over their leading dims; the slot count is the sum of the parts' slot counts.
    Each row is the sorted concatenation with repeats set to -1; on the CPU the native kernel
    (recall_lab/native) writes the same result as the torch sort (tested equal).
    """
    if len(parts) == 1:
        return parts[0]
    lead = torch.broadcast_shapes(*(p.shape[:-1] for p in parts))
    # int32 sorts ~1.3x faster than int64 here (measured; pairwise compares were slower still).
    cat = torch.cat([p.to(torch.int32).expand(*lead, p.shape[-1]) for p in parts], dim=-1)
    if cat.device.type == "cpu" and cat.numel() and native.available():
        return native.union_rows(cat)
    return union_indices_torch(cat)


def union_indices_torch(cat: Tensor) -> Tensor:
    """The torch path of `union_indices` on the concatenated int32 lists."""
    srt = cat.sort(dim=-1).values
    dup = torch.zeros_like(srt, dtype=torch.bool)
    dup[..., 1:] = srt[..., 1:] == srt[..., :-1]
    return torch.where(dup, -1, srt)


class UnionPattern(Pattern):
    """OR of several patterns (a key counts once); aux losses are summed."""

    def __init__(self, name: str, parts: Sequence[Pattern]) -> None:
        super().__init__()
        self.name = name
        self.parts = nn.ModuleList(parts)
        self.budget = sum(p.budget for p in parts)

    def forward(self, q: Tensor, k: Tensor, v: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        idxs, aux = [], None
        for part in self.parts:
            idx, a = part(q, k, v)
            idxs.append(idx)
            if a is not None:
                aux = a if aux is None else aux + a
        return union_indices(*idxs), aux

    def decoder(self) -> Decoder:
        return UnionDecoder([make_decoder(p) for p in self.parts])
