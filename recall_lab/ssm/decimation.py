"""DeciMamba's token decimation (its paper's Sec. 4, Eq. 10-11, Alg. 1, App. D).

A decimating Mamba layer scores every context token by its Delta (Delta_t -> 0 means the scan
skips token t, Eq. 10), keeps the top-P tokens in their original order and runs the selective scan
on the kept tokens only; the block output, the residual stream and every later layer keep that
shorter length.

What may be dropped: only context positions t < b, where b ("keep_from") is the first SEP of the
row (its length when it has none: pure prefill). Every position >= b (SEP, the inquiry, every
target, right padding) is kept, so the kept set of a row is

    K = sort_asc(top_P {s_t : t < b}) U {b, ..., L-1},  P = min(n_keep, b).

It depends on every context token, so outputs at positions < b are not causal and are never
scored; for i >= b every input is <= i (strictly causal), and nothing depends on the padded length
(P comes from the config or from b, never from L).

Ties: stable sort on (-score, position), so equal scores keep the earlier token. Rows of a batch
keep different counts (ragged); they are padded at the end (`valid=False`), harmless to a causal
scan and dropped when logits are scattered back.

`decimate_indices_loop` is the per-row reference (plain Python); `decimate_indices` is the batched
path (one stable sort per row, no loop over the batch). The paper counts selection as O(L log P);
here it is one O(L log L) sort on [B, L] scores, which has no D or N factor (App. "Complexity").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from recall_lab.generators.errors import RecallLabError

SCORES = ("mean", "l2", "random", "xnorm")
RANDOM_SEED = 0x5EED  # "random" pooling: one fixed score per position (data-independent)


def decimation_scores(delta: Tensor, how: str = "mean", xc: Tensor | None = None) -> Tensor:
    """Importance of every token [b, l] from delta [b, c, l] (Mamba: c = channels, after
    softplus; Mamba2: c = heads).

    - "mean": mean_c Delta (Sec. 4, the paper's text; default);
    - "l2": ||Delta_t||_2 over channels (the public release);
    - "xnorm": ||xc_t||_2, the conv output that enters the scan ("max-norm pooling", App. D);
      needs `xc` [b, d, l];
    - "random": a fixed uniform score per position (App. D random pooling), the same for every
      row and prefix-consistent, so it stays causal and batch-independent.
    """
    if delta.dim() != 3:
        raise RecallLabError(f"delta must be [b, c, l], got {tuple(delta.shape)}")
    if how == "mean":
        return delta.mean(1)
    if how == "l2":
        return torch.linalg.vector_norm(delta, dim=1)
    if how == "xnorm":
        if xc is None:
            raise RecallLabError("score 'xnorm' needs the conv output xc")
        return torch.linalg.vector_norm(xc, dim=1)
    if how == "random":
        b, _, length = delta.shape
        g = torch.Generator().manual_seed(RANDOM_SEED)
        r = torch.rand(length, generator=g, dtype=torch.float64)
        return r.to(delta.device, delta.dtype).expand(b, length)
    raise RecallLabError(f"decimation score must be one of {', '.join(SCORES)}, got {how!r}")


def keep_count(
    n_ctx: Tensor, s: int, L_base: int, beta: float = 0.5, min_len: int = 20,
    top_k: float | None = None,
) -> Tensor:
    """Context tokens kept by the s-th decimating layer (s = 0 first), per row [b] int64.

    Top-P_s (Eq. 11): P_s = max(min_len, floor(L_base * beta^s)), at most n_ctx.
    Top-K% (App. D, `top_k` = K/100): max(min_len, ceil(K n_ctx)), at most n_ctx; a fraction of
    the row's context, never of the padded length.
    """
    n_ctx = n_ctx.to(torch.int64)
    if top_k is not None:
        if not 0 < top_k <= 1:
            raise RecallLabError(f"top_k must be a fraction in (0, 1], got {top_k}")
        p = torch.ceil(n_ctx.to(torch.float64) * top_k).to(torch.int64).clamp_min(min_len)
    else:
        p = torch.full_like(n_ctx, max(min_len, math.floor(L_base * beta**s)))
    return torch.minimum(p, n_ctx)


def first_sep(ids: Tensor, sep: int) -> Tensor:
    """keep_from of each row: index of its first SEP, its length L when it has none [b]."""
    is_sep = ids == sep
    pos = torch.argmax(is_sep.to(torch.int8), dim=1)
    return torch.where(is_sep.any(1), pos, torch.full_like(pos, ids.shape[1]))


@dataclass(frozen=True)
class Kept:
    """Kept positions of a decimated sequence: idx int64 [b, l'] (strictly increasing where
    valid), valid bool [b, l'] (False only at the end of a row: ragged padding)."""

    idx: Tensor
    valid: Tensor

    def gather(self, t: Tensor, dim: int) -> Tensor:
        """t [b, ..., l, ...] along `dim` -> [b, ..., l', ...]."""
        dim = dim % t.dim()
        shape = [1] * t.dim()
        shape[0], shape[dim] = self.idx.shape[0], self.idx.shape[1]
        index = self.idx.view(shape).expand(*[
            self.idx.shape[1] if d == dim else t.shape[d] for d in range(t.dim())
        ])
        return torch.gather(t, dim, index)


def decimate_indices(score: Tensor, n_keep: Tensor, keep_from: Tensor) -> Kept:
    """Batched selection: per row, the top n_keep[r] scores among positions < keep_from[r]
    (stable ties: earlier first) plus every position >= keep_from[r], in increasing order."""
    b, length = score.shape
    pos = torch.arange(length, device=score.device)
    keep_from = keep_from.to(torch.int64).clamp(0, length)
    n_keep = torch.minimum(n_keep.to(torch.int64).clamp_min(0), keep_from)
    ctx = pos[None, :] < keep_from[:, None]
    masked = torch.where(ctx, score, torch.full_like(score, float("-inf")))
    order = torch.sort(masked, dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(1, order, pos.expand(b, length).contiguous())
    keep = ~ctx | (rank < n_keep[:, None])
    count = keep.sum(1)
    width = int(count.max()) if b else 0
    # kept positions first, in increasing order (stable sort of the "dropped" flag)
    idx = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :width]
    valid = pos[None, :width] < count[:, None]
    return Kept(idx=idx, valid=valid)


def decimate_indices_loop(score: Tensor, n_keep: Tensor, keep_from: Tensor) -> Kept:
    """Reference for `decimate_indices`: one row at a time, plain Python sorting."""
    b, length = score.shape
    rows = []
    for r in range(b):
        kf = max(0, min(int(keep_from[r]), length))
        p = max(0, min(int(n_keep[r]), kf))
        s = [float(v) for v in score[r].detach()]
        top = sorted(range(kf), key=lambda t: (-s[t], t))[:p]
        rows.append(sorted(top) + list(range(kf, length)))
    width = max((len(r) for r in rows), default=0)
    idx = torch.zeros(b, width, dtype=torch.int64)
    valid = torch.zeros(b, width, dtype=torch.bool)
    for r, kept in enumerate(rows):
        idx[r, : len(kept)] = torch.tensor(kept, dtype=torch.int64)
        valid[r, : len(kept)] = True
    return Kept(idx=idx, valid=valid)


@dataclass(frozen=True)
class Decimate:
    """What one decimating mixer call needs: how many context tokens each row keeps, where each
    row's protected part starts (both [b] int64, in the coordinates of the mixer's input), and
    the score."""

    n_keep: Tensor
    keep_from: Tensor
    score: str = "mean"
