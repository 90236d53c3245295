"""Key selection, KS (HAX paper Eq. 12-17): a scoring MLP over ``[k_j, normalize(prefix sum of
q)]`` on detached inputs; query i takes the top-n scores among keys 0..i (ties: the earlier key),
trained by a pairwise ranking loss against sampled reference attention. O(L n log n) to build."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recall_lab.attention import native
from recall_lab.attention.base import Pattern, check_qk
from recall_lab.attention.decode import Decoder, Keys
from recall_lab.generators.errors import RecallLabError


def causal_topk_indices(scores: Tensor, n: int) -> Tensor:
    """Eq. 13: for each i the positions of the top-n of ``scores[..., :i+1]`` (int32 [.., L, n]).

    On the CPU the native kernel (recall_lab/native: one heap of n per row, O(L log n)) where it
    built, else `causal_topk_indices_torch`. Both give ties to the earlier key, so they list the
    same set of keys per query (tested); slot order differs, and nothing downstream reads it (the
    sparse op sums over slots, the union sorts).
    """
    if scores.device.type == "cpu" and native.available() and n > 0:
        return native.causal_topk(scores, n)
    return causal_topk_indices_torch(scores, n)


def causal_topk_indices_torch(scores: Tensor, n: int) -> Tensor:
    """`causal_topk_indices` in torch ops (the reference of the native kernel).

    Block-wise running top-n: keys are cut into blocks of n; a log-depth inclusive scan of top-n
    merges gives each block the top-n of all earlier blocks; each query then takes the top-n of
    those n plus the causal part of its own block. Memory O(L n), work O(L n log n) (times
    log(L/n) for the scan). Slots with fewer than n candidates hold -1. NaN scores are not allowed.

    Ties: the earlier key wins. Each score is replaced by minus its rank in a stable descending
    sort of its row; the order of two keys then depends on their two scores and positions only,
    so query i's selection depends on neither the keys after i nor the padded length (with raw
    tied floats, topk's choice among equal values varied with L). O(L log L) for the sort.
    """
    *lead, length = scores.shape
    raw = scores.detach().float().reshape(-1, length)
    order = raw.sort(dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(
        -1, order, torch.arange(length, device=raw.device).expand_as(order))
    x = -rank.to(torch.float32 if length <= 1 << 24 else torch.float64)  # exact integers
    rows = x.shape[0]
    nb = max(1, math.ceil(length / n))
    ninf = float("-inf")
    xb = F.pad(x, (0, nb * n - length), value=ninf).view(rows, nb, n)
    pb = torch.arange(nb * n, device=x.device).view(1, nb, n).expand(rows, nb, n)
    rv, rp = xb, pb
    step = 1
    while step < nb:
        pv = F.pad(rv[:, :-step], (0, 0, step, 0), value=ninf)
        pp = F.pad(rp[:, :-step], (0, 0, step, 0), value=0)
        top = torch.cat([rv, pv], -1).topk(n, dim=-1)
        rv, rp = top.values, torch.cat([rp, pp], -1).gather(-1, top.indices)
        step *= 2
    ev = F.pad(rv[:, :-1], (0, 0, 1, 0), value=ninf)  # top-n of blocks strictly before
    ep = F.pad(rp[:, :-1], (0, 0, 1, 0), value=0)
    own = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()  # [query offset, key offset]
    own_v = xb[:, :, None, :].masked_fill(~own, ninf)
    cand_v = torch.cat([ev[:, :, None, :].expand(rows, nb, n, n), own_v], -1)
    cand_p = torch.cat([ep[:, :, None, :], pb[:, :, None, :]], -1).expand(rows, nb, n, 2 * n)
    top = cand_v.topk(n, dim=-1)
    idx = cand_p.gather(-1, top.indices).masked_fill(top.values == ninf, -1)
    return idx.reshape(rows, nb * n, n)[:, :length].reshape(*lead, length, n).to(torch.int32)


def sample_keys(scores: Tensor, n: int, generator: torch.Generator | None = None) -> Tensor:
    """`ks_ranking_loss`'s sampled keys: min(n, L) positions per row of ``scores [..., L]``
    without replacement (the top-n of uniform noise), int64 ``[..., n]``."""
    return sample_positions(scores.shape, n, scores.device, generator)


def sample_positions(shape: tuple[int, ...], n: int, device=None,
                     generator: torch.Generator | None = None) -> Tensor:
    """`sample_keys` from the scores' shape ``[..., L]`` alone (the same random draw)."""
    noise = torch.rand(shape, device=device, generator=generator)
    return noise.topk(min(n, shape[-1]), dim=-1).indices


def ks_ranking_loss(scores: Tensor, q: Tensor, k: Tensor, n: int, scale: float,
                    generator: torch.Generator | None = None,
                    score_at: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """Eq. 15-17 as in the release: n keys sampled per (batch, head) without replacement.

    Target ``y_s = sum_i 1[i >= j_s] sigmoid(scale * q_i . k_{j_s})`` (detached): the reference
    attention each sampled key receives from the queries allowed to see it. Loss = mean over the
    n x n pairs of BCE-with-logits(x_a - x_b, T_ab) with T = 1 / 0.5 / 0 for y_a >,=,< y_b.

    ``score_at(sel) -> [..., n]``: the scores of the sampled positions, recomputed with autograd
    (then ``scores`` may be detached: only its shape is read). KSPattern uses it so that the
    scorer's backward runs over n keys instead of all L (the other L - n get zero gradient).
    """
    length = scores.shape[-1]
    sel = sample_keys(scores, n, generator)
    x = scores.gather(-1, sel) if score_at is None else score_at(sel)
    if (q.device.type == "cpu" == k.device.type and q.dtype == k.dtype == torch.float32
            and native.available() and q.dim() == k.dim() == 4 and q.shape[-2] == length
            and tuple(sel.shape[:-1]) == torch.broadcast_shapes(q.shape[:2], k.shape[:2])):
        # the same targets but where two keys' y lie within float rounding (tested)
        target = native.ks_target(q.detach(), k.detach(), sel, scale)
    else:
        target = ks_ranking_target_torch(q, k, sel, scale, length)
    logits = x[..., :, None] - x[..., None, :]
    return F.binary_cross_entropy_with_logits(logits.float(), target)


def ks_ranking_target_torch(q: Tensor, k: Tensor, sel: Tensor, scale: float, length: int
                            ) -> Tensor:
    """`ks_ranking_loss`'s pairwise targets in torch ops (the reference of `native.ks_target`)."""
    with torch.no_grad():
        qq, kk = torch.broadcast_tensors(q.detach(), k.detach())
        ksel = kk.gather(-2, sel[..., None].expand(*sel.shape, kk.shape[-1]))
        a = (qq.float() @ ksel.float().transpose(-1, -2)) * scale
        pos = torch.arange(length, device=q.device)
        seen = pos[:, None] >= sel[..., None, :]
        y = torch.where(seen, a.sigmoid(), 0.0).sum(-2)
        return ((y[..., :, None] > y[..., None, :]).float()
                + (y[..., :, None] >= y[..., None, :]).float()) / 2


class KSPattern(Pattern):
    """Key selection (Eq. 12-17): scoring MLP as in the release (2d -> 2d -> 2d -> 1, ReLU).

    ``scale`` multiplies ``q . k`` in the ranking loss's reference scores. Default ``dim**-0.5``:
    the release divides k by sqrt(d) before it; Eq. 15 as printed has no scale (``scale=1.0``).
    It matters: the sigmoid is applied before the sum over queries, so the target order of two
    keys can change with it.
    """

    def __init__(self, n: int, dim: int, hidden: int | None = None,
                 scale: float | None = None) -> None:
        super().__init__()
        if not isinstance(dim, int) or dim < 1:
            raise RecallLabError(f"ks needs dim (the q/k feature size) as an int >= 1, got {dim!r}")
        hidden = hidden or 2 * dim
        self.name, self.budget, self.dim = "ks", n, dim
        self.scale = scale if scale is not None else dim ** -0.5
        self.mlp = nn.Sequential(
            nn.Linear(2 * dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def inputs(self, q: Tensor, k: Tensor) -> Tensor:
        """The scorer's inputs ``[k_j, normalize(sum_{p<=j} q_p)]``, detached: ``[B, H, L, 2d]``."""
        qs = F.normalize(q.detach().float().cumsum(dim=-2), dim=-1)
        kk, qs = torch.broadcast_tensors(k.detach().float(), qs)
        return torch.cat([kk, qs], dim=-1).to(self.mlp[0].weight.dtype)

    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        """Eq. 14 on detached inputs: ``[B, H, L]``."""
        return self.mlp(self.inputs(q, k)).squeeze(-1)

    def native_applies(self, q: Tensor, k: Tensor) -> bool:
        """Whether `forward` builds inputs, scores and top-n in one native pass
        (`native.ks_scores`) instead of `inputs`, the MLP and `causal_topk_indices`: CPU float32
        q, k and scorer, the kernels built, d <= 256, hidden <= 512. The scores equal the torch
        path's to float rounding (another summation order), the indices too but where two scores
        lie within rounding of each other (tested)."""
        w = self.mlp[0].weight
        return (q.device.type == "cpu" and k.device.type == "cpu" and w.device.type == "cpu"
                and q.dtype == k.dtype == w.dtype == torch.float32 and native.available()
                and self.budget > 0 and self.dim <= 256 and w.shape[0] <= 512
                and q.shape[-2] > 0 and q.shape[0] > 0 and k.shape[0] > 0)

    def forward(self, q: Tensor, k: Tensor, v: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        check_qk(q, k)
        if q.shape[-1] != self.dim:
            raise RecallLabError(f"ks was built for dim {self.dim}, got q/k dim {q.shape[-1]}")
        if self.native_applies(q, k):
            qd, kd = q.detach(), k.detach()
            inp, x, idx = native.ks_scores(qd, kd, self.mlp, self.budget)
            if not self.training:
                return idx, None
            # ks_ranking_loss with score_at, as below: the same sampled keys (same random
            # stream), the targets and the scorer's forward and backward in native calls
            sel = sample_keys(x, self.budget)
            target = native.ks_target(qd, kd, sel, self.scale)
            return idx, native.ks_rank_loss(inp, sel, target, self.mlp)
        inp = self.inputs(q, k)
        with torch.no_grad():  # the top-n is not differentiable; the loss re-scores its keys
            x = self.mlp(inp).squeeze(-1)
        idx = causal_topk_indices(x, self.budget)
        if not self.training:
            return idx, None

        def score_at(sel: Tensor) -> Tensor:
            rows = inp.gather(-2, sel[..., None].expand(*sel.shape, inp.shape[-1]))
            return self.mlp(rows).squeeze(-1)

        return idx, ks_ranking_loss(x, q, k, self.budget, self.scale, score_at=score_at)

    def decoder(self) -> KSDecoder:
        return KSDecoder(self)


class KSDecoder(Decoder):
    """Decode state of KS: the running sum of q (Eq. 14's prefix, float32 as `KSPattern.inputs`)
    and the n best (score, position, k, v) so far. Key j's score is fixed at j, so the top-n
    among 0..t is the top-n of (the top-n among 0..t-1) and x_t: constant in L. Scores are
    compared in float32 with ties to the earlier key, as `causal_topk_indices`."""

    growth = "constant"

    def __init__(self, pattern: KSPattern) -> None:
        super().__init__()
        self.pattern = pattern
        self.sum_q: Tensor | None = None
        self.score = self.pos = self.k = self.v = None

    def _step(self, q: Tensor, k: Tensor, v: Tensor) -> Keys:
        n = self.pattern.budget
        b, h, d = k.shape
        if self.sum_q is None:
            self.sum_q = torch.zeros(b, h, d, dtype=torch.float32, device=k.device)
            self.score = torch.full((b, h, n), float("-inf"), device=k.device)
            self.pos = torch.full((b, h, n), -1, dtype=torch.int64, device=k.device)
            self.k = k.new_zeros(b, h, n, d)
            self.v = v.new_zeros(b, h, n, v.shape[-1])
        self.sum_q += q.detach().float()
        inp = torch.cat([k.detach().float(), F.normalize(self.sum_q, dim=-1)], -1)
        with torch.no_grad():
            x = self.pattern.mlp(inp.to(self.pattern.mlp[0].weight.dtype)).squeeze(-1).float()
        score = torch.cat([self.score, x[..., None]], -1)  # [B, H, n + 1]
        pos = torch.cat([self.pos, torch.full_like(self.pos[..., :1], self.t)], -1)
        # best first, ties to the earlier position: sort by position, then stably by score
        by_pos = pos.masked_fill(pos < 0, 1 << 62).argsort(-1)
        by_score = score.gather(-1, by_pos).sort(dim=-1, descending=True, stable=True).indices
        keep = by_pos.gather(-1, by_score)[..., :n]
        kk = torch.cat([self.k, k.unsqueeze(-2)], -2)
        vv = torch.cat([self.v, v.unsqueeze(-2)], -2)
        self.score, self.pos = score.gather(-1, keep), pos.gather(-1, keep)
        self.k = kk.gather(-2, keep[..., None].expand(*keep.shape, d))
        self.v = vv.gather(-2, keep[..., None].expand(*keep.shape, vv.shape[-1]))
        return Keys(self.pos, self.k, self.v)
