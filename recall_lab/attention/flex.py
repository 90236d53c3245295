"""torch FlexAttention driven by our index lists: the peer `recall-lab bench attention` times.

``flex_block_mask(idx, length)`` turns the index lists a pattern returns (``int [1, 1, L, n]`` or
``[B, H, L, n]``, -1 = empty slot) into a FlexAttention ``BlockMask``: the listed keys are
scattered into an ``L x L`` bool table (L^2 bytes) that ``mask_mod`` looks up, and the block
lists (which 128 x 128 tiles hold any listed key, which hold only listed keys) are read off the
same table. The mask is therefore the pattern's own (no second definition of sw/d/attamba), at
the price of O(L^2) memory for the table: a benchmark peer, not a model path.

``flex_sparse_attention(q, k, v, block_mask, scale, compiled=True)``: the same softmax as
:func:`recall_lab.attention.sparse_attention` over the listed keys (a row without keys gives 0);
``compiled`` runs ``torch.compile(flex_attention)`` (on CPU, inductor's C++ kernel; eager
FlexAttention materialises every score). torch 2.13 has no FlexAttention backward on CPU:
inputs that require grad raise there.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from recall_lab.generators.errors import RecallLabError

__all__ = ["flex_block_mask", "flex_sparse_attention", "BLOCK"]

BLOCK = 128  # FlexAttention's default tile


def _table(idx: Tensor, length: int, padded: int) -> Tensor:
    i = idx.to(torch.int64)
    table = torch.zeros(*i.shape[:2], padded, padded + 1, dtype=torch.bool, device=idx.device)
    rows = table[:, :, :length]
    rows.scatter_(-1, torch.where(i < 0, padded, i), True)
    return table[..., :padded].contiguous()


def _block_lists(hit: Tensor) -> tuple[Tensor, Tensor]:
    """[.., nq, nk] bool -> (count [.., nq] int32, indices [.., nq, nk] int32, listed first)."""
    order = torch.argsort(hit.to(torch.int8), dim=-1, descending=True, stable=True)
    return hit.sum(-1).to(torch.int32), order.to(torch.int32)


def flex_block_mask(idx: Tensor, length: int):
    """A FlexAttention ``BlockMask`` listing exactly the keys in ``idx [Bi, Hi, L, n]``."""
    from torch.nn.attention.flex_attention import BlockMask

    if idx.dim() != 4 or idx.shape[2] != length:
        raise RecallLabError(f"idx must be [B, H, L={length}, n], got {tuple(idx.shape)}")
    nb = -(-length // BLOCK)
    padded = nb * BLOCK
    table = _table(idx, length, padded)
    tiles = table.view(*table.shape[:2], nb, BLOCK, nb, BLOCK)
    full = tiles.all(dim=5).all(dim=3)
    partial = tiles.any(dim=5).any(dim=3) & ~full
    kv_num, kv_idx = _block_lists(partial)
    full_num, full_idx = _block_lists(full)
    broadcast_b, broadcast_h = table.shape[0] == 1, table.shape[1] == 1

    def mask_mod(b, h, q_idx, kv_idx):
        return table[0 if broadcast_b else b, 0 if broadcast_h else h, q_idx, kv_idx]

    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=BLOCK,
                                    mask_mod=mask_mod, seq_lengths=(length, length))


@functools.cache
def _compiled():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def flex_sparse_attention(q: Tensor, k: Tensor, v: Tensor, block_mask, scale: float | None = None,
                          compiled: bool = True) -> Tensor:
    """FlexAttention over the keys of ``block_mask`` (see the module docstring)."""
    from torch.nn.attention.flex_attention import flex_attention

    fn = _compiled() if compiled else flex_attention
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    # FlexAttention leaves rows without any key at 0 (its lse is -inf), as our op does.
    return fn(q, k, v, block_mask=block_mask, scale=scale)
