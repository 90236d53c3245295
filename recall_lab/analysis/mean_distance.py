"""Mamba Mean Distance (DeciMamba Eq. 6-8), the Delta-sum divergence (Eq. 9), and the attention
mean distance of a sparse-attention branch, so both memories of a hybrid can be compared.

Mean distance of row i of an attention-like matrix M (Eq. 6 with the normalisation of Eq. 7):

    MD_i = sum_{j <= i} N(M)_{i,j} (i - j),   N(M)_{i,j} = |M_{i,j}| / sum_{k <= i} |M_{i,k}|

Eq. 8 is MD of the last row. "Normalised" divides MD_i by the number of positions row i can see,
i + 1 (for the last row: the sequence length L, as in DeciMamba Fig. 4 right). A row whose weights
are all zero has no distribution; its mean distance is NaN.

Per-channel values are averaged over channels (heads) the way DeciMamba averages them: the mean of
the per-channel mean distances, not the mean distance of a channel-averaged map.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from recall_lab.analysis.hidden_attention import hidden_attention_row, iter_tiles, ssm_kernel
from recall_lab.generators.errors import RecallLabError


def mean_distance(matrix: torch.Tensor) -> torch.Tensor:
    """Mean distance of every row of explicit square matrices [..., L, L] -> [..., L].
    Only the lower triangle (j <= i) counts."""
    L = matrix.shape[-1]
    if matrix.dim() < 2 or matrix.shape[-2] != L:
        raise RecallLabError(f"need square matrices [..., L, L], got {tuple(matrix.shape)}")
    pos = torch.arange(L, device=matrix.device)
    dist = (pos[:, None] - pos[None, :]).clamp_min(0).to(matrix.real.dtype)
    w = matrix.abs().tril()
    return (w * dist).sum(-1) / w.sum(-1)


def mean_distance_loop(matrix: torch.Tensor) -> torch.Tensor:
    """Reference for `mean_distance` on one matrix [L, L]: Eq. 6-7 written as loops."""
    L = matrix.shape[-1]
    out = torch.empty(L, dtype=torch.float64)
    for i in range(L):
        total = sum(abs(float(matrix[i, j])) for j in range(i + 1))
        if total == 0:
            out[i] = float("nan")
            continue
        out[i] = sum(abs(float(matrix[i, j])) / total * (i - j) for j in range(i + 1))
    return out


def normalise_by_length(md: torch.Tensor) -> torch.Tensor:
    """MD_i / (i + 1) along the last axis (positions 0..L-1)."""
    L = md.shape[-1]
    return md / torch.arange(1, L + 1, device=md.device, dtype=md.dtype)


def mamba_mean_distance(params: Any, *, channels: Sequence[int] | None = None, block: int = 64,
                        col_block: int = 512, dtype: torch.dtype = torch.float32
                        ) -> torch.Tensor:
    """Mean distance of every token [b, c, L] from the hidden attention, streamed tile by tile
    (the L x L map is never held: memory O(b c block col_block))."""
    k = ssm_kernel(params, channels)
    b, c, L = k.delta.shape
    num = torch.zeros(b, c, L, dtype=torch.float64, device=k.delta.device)
    den = torch.zeros_like(num)
    for i0, i1, j0, j1, t in iter_tiles(k, block=block, col_block=col_block, dtype=dtype):
        w = t.abs().to(torch.float64)
        dist = (torch.arange(i0, i1, device=w.device)[:, None]
                - torch.arange(j0, j1, device=w.device)[None, :]).clamp_min(0)
        num[:, :, i0:i1] += (w * dist).sum(-1)
        den[:, :, i0:i1] += w.sum(-1)
    return num / den


def mamba_mean_distance_last(params: Any, *, channels: Sequence[int] | None = None,
                             col_block: int = 4096, dtype: torch.dtype = torch.float32
                             ) -> torch.Tensor:
    """Eq. 8: mean distance of the last token [b, c], from the last row of alpha alone
    (O(L) memory per channel)."""
    row = hidden_attention_row(params, -1, channels=channels, col_block=col_block, dtype=dtype)
    L = row.shape[-1]
    w = row.abs().to(torch.float64)
    dist = torch.arange(L - 1, -1, -1, device=w.device, dtype=torch.float64)
    return (w * dist).sum(-1) / w.sum(-1)


def delta_sum(delta: torch.Tensor) -> torch.Tensor:
    """Eq. 9's input-length dependent term: sum_{k=2..l} Delta_k for every prefix length l
    (l = 1..L, so entry 0 is 0), same shape as delta [b, c, L]."""
    if delta.dim() != 3:
        raise RecallLabError(f"delta must be [b, c, L], got {tuple(delta.shape)}")
    d = delta.to(torch.float64)
    return torch.cumsum(d, -1) - d[..., :1]


def attention_mean_distance(idx: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean distance of a sparse attention [b, h, L] from its key indices idx [b, h, L, kk]
    (-1 = empty slot) and the attention weights on those slots (same shape, e.g. from
    `sparse_attention_weights`). Rows with no selected key are NaN."""
    if idx.shape[-1] != weights.shape[-1] or idx.dim() != 4:
        raise RecallLabError(f"idx {tuple(idx.shape)} and weights {tuple(weights.shape)} must "
                             "both be [b, h, L, k]")
    idx, weights = torch.broadcast_tensors(idx, weights)
    L = idx.shape[-2]
    valid = idx >= 0
    pos = torch.arange(L, device=idx.device)[:, None]
    if bool((idx > pos).any()):
        raise RecallLabError("idx selects a key after its query (not causal)")
    dist = torch.where(valid, pos - idx, 0).to(torch.float64)
    w = torch.where(valid, weights.abs().to(torch.float64), 0.0)
    return (w * dist).sum(-1) / w.sum(-1)


def sparse_attention_weights(q: torch.Tensor, k: torch.Tensor, idx: torch.Tensor,
                             scale: float | None = None) -> torch.Tensor:
    """Softmax weights over the selected keys [b, h, L, kk] with the semantics of
    `recall_lab.attention.sparse_attention`: empty slots (-1) get 0, empty rows are all 0."""
    b, h, L, d = q.shape
    scale = d ** -0.5 if scale is None else scale
    idx = idx.expand(b, h, L, idx.shape[-1]).long()
    valid = idx >= 0
    keys = k.unsqueeze(2).expand(b, h, L, k.shape[2], d)  # a view; gather picks kk rows per query
    kk = torch.gather(keys, 3, idx.clamp_min(0)[..., None].expand(-1, -1, -1, -1, d))
    logits = (q.unsqueeze(3) * kk).sum(-1) * scale
    logits = logits.masked_fill(~valid, float("-inf"))
    w = torch.softmax(logits, -1)
    return torch.nan_to_num(w, nan=0.0) * valid


@dataclass
class LayerMeanDistance:
    """Mean-distance measurements of one SSM layer on one batch (per channel/head, batch-mean)."""

    layer: int
    kind: str
    length: int
    last: torch.Tensor  # [c] Eq. 8
    all_tokens: torch.Tensor | None = None  # [c] mean over tokens of MD_i
    all_tokens_norm: torch.Tensor | None = None  # [c] mean over tokens of MD_i / (i + 1)
    delta_sum: torch.Tensor = field(default_factory=lambda: torch.empty(0))  # [L] channel-mean

    @property
    def last_norm(self) -> torch.Tensor:
        return self.last / self.length

    def summary(self) -> dict[str, float | int | str]:
        """Channel means as plain floats (JSON-able)."""
        out: dict[str, float | int | str] = {
            "layer": self.layer, "kind": self.kind, "length": self.length,
            "md_last": float(self.last.nanmean()),
            "md_last_norm": float(self.last_norm.nanmean()),
            "delta_sum_last": float(self.delta_sum[-1]) if self.delta_sum.numel() else float("nan"),
        }
        if self.all_tokens is not None and self.all_tokens_norm is not None:
            out["md_all"] = float(self.all_tokens.nanmean())
            out["md_all_norm"] = float(self.all_tokens_norm.nanmean())
        return out


def layer_mean_distance(params: Any, layer: int = 0, *, all_tokens: bool = True,
                        dtype: torch.dtype = torch.float32) -> LayerMeanDistance:
    """Mean distances of one layer (last token, and every token when `all_tokens`), averaged over
    the batch, kept per channel/head, plus the channel-mean Delta-sum curve (Eq. 9)."""
    k = ssm_kernel(params)
    last = mamba_mean_distance_last(k, dtype=dtype).nanmean(0)
    res = LayerMeanDistance(layer=layer, kind=k.kind, length=k.length, last=last,
                            delta_sum=delta_sum(k.delta).mean((0, 1)))
    if all_tokens:
        md = mamba_mean_distance(k, dtype=dtype)  # [b, c, L]
        res.all_tokens = md.nanmean(-1).nanmean(0)
        res.all_tokens_norm = normalise_by_length(md).nanmean(-1).nanmean(0)
    return res
