"""Sparse attention patterns as key indices (paper 004, Sec. 2.1-2.2, 4; App. D.1).

Every pattern maps ``q, k: [B, H, L, d]`` to ``idx: int32 [B, H, L, n]`` (or a shape that
broadcasts to it, e.g. ``[1, 1, L, n]`` for context-independent patterns): entry ``idx[..., i, s]``
is a key position ``j <= i`` or ``-1`` for an empty slot. No pattern ever builds an ``L x L``
tensor except ``full`` (the dense baseline, whose index list is ``L`` long by definition).

Semantics (all strictly causal: the keys chosen for query ``i`` depend on tokens ``<= i`` only,
never on the sequence length ``L`` or on batch padding; every pattern parameter, such as the gap
of ``d``, is fixed by the configuration):

* ``sw`` SW(n): keys ``i-n+1 .. i``.
* ``sink`` Sink(n): keys ``0 .. n-1`` (those ``<= i``).
* ``d`` D(n): keys ``j`` with ``j % g == g-1`` (the phase of the original release), ``j <= i``,
  the ``n`` most recent of them. Gap ``g`` from the config's ``max_len`` (the longest sequence
  the model is built for; 2048 when not given): ``dilation="auto"`` -> ``g = ceil(max_len / n)``,
  the smallest gap for which no query of a sequence up to ``max_len`` has more than ``n``
  candidates; ``dilation="release"`` -> ``g = max_len // n``, the release's rule; an int fixes
  it. (Deriving g from the padded batch length L, as an earlier version did, made query i's keys
  depend on the tokens after i and on its batch-mates: seed 004 Eq. 10-11 forbid that.)
* ``a`` = SW(n - n//2) u Sink(n//2); ``sw+d`` = SW(n - n//2) u D(n//2).
* ``lsh`` (Eq. 5-9): q, k centred by their causal prefix mean and normalised per vector; bins by
  the sign-bit rule (Eq. 7, 2^h bins, most significant bit = plane 1) or the argmax rule (Eq. 6,
  h bins); query ``i`` keeps the ``n`` most recent keys ``j <= i`` of its own bin (it may select
  its own position). Planes ``[H, d, h]`` ~ N(0, 1): fresh per call in training mode, drawn from
  ``seed`` in eval mode.
* ``ks`` (Eq. 12-17): score ``x_j = MLP([k_j, normalize(sum_{p<=j} q_p)])`` on detached inputs;
  query ``i`` takes the top-n scores among ``x_0 .. x_i`` (ties: the earlier key wins). In
  training mode the module also returns the pairwise ranking loss on n randomly sampled keys.
* ``hax`` (Eq. 19-20) = LSH(n - n//2) u KS(n//2); ``full``: every ``j <= i``.
* ``seattn``, ``seattn-nomem``, ``seattn-random``, ``seattn-landmark`` (seed 001, SE-Attn): own
  chunk + top-k retrieved memory blocks; defined in :mod:`recall_lab.attention.seattn`.
* ``attamba`` (paper 003 Eq. 5, Fig. 5; module ``attamba.py``): chunk ends ``j <= i`` plus a
  leading window; here ``n`` is the chunk size P, and a query gets up to ceil(L/P) + leading keys.

A union counts a key once (OR of masks); slot order within a row carries no meaning.

Cost of building indices: O(L n) for the fixed patterns, O(L log L + L n) for LSH (one sort of
``(bin, position)`` codes, one ``searchsorted``, one gather), O(L n log n) for KS (block-wise
running top-n: a log-depth scan over blocks of n keys, then one top-n over 2n candidates per
query).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from generators.errors import RecallLabError
from recall_lab import native
from recall_lab.attention.seattn import OPTIONS as SEATTN_OPTIONS
from recall_lab.attention.seattn import VARIANTS as SEATTN_VARIANTS
from recall_lab.attention.seattn import make_seattn

PATTERNS = ("sw", "d", "sink", "a", "sw+d", "lsh", "ks", "hax", "full", *SEATTN_VARIANTS,
            "attamba")
LSH_RULES = ("sign", "argmax")
RELEASE_MAX_LEN = 2048

__all__ = [
    "PATTERNS",
    "LSH_RULES",
    "make_pattern",
    "sliding_window_indices",
    "sink_indices",
    "dilated_indices",
    "dilation_for",
    "full_indices",
    "union_indices",
    "causal_center",
    "sample_planes",
    "lsh_bins",
    "bucket_window_indices",
    "lsh_indices",
    "causal_topk_indices",
    "ks_ranking_loss",
    "Pattern",
    "FixedPattern",
    "UnionPattern",
    "LSHPattern",
    "KSPattern",
]


# --------------------------------------------------------------------------- fixed patterns


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
        width = cat.shape[-1]
        rows = cat.numel() // width
        keys = int(cat.max()) + 1
        native.lib().union_rows(cat.data_ptr(), width, keys, rows, native.threads())
        return cat
    return union_indices_torch(cat)


def union_indices_torch(cat: Tensor) -> Tensor:
    """The torch path of `union_indices` on the concatenated int32 lists."""
    srt = cat.sort(dim=-1).values
    dup = torch.zeros_like(srt, dtype=torch.bool)
    dup[..., 1:] = srt[..., 1:] == srt[..., :-1]
    return torch.where(dup, -1, srt)


# --------------------------------------------------------------------------- LSH


def _at_least_fp32(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def causal_center(x: Tensor, eps: float = 1e-12) -> Tensor:
    """Eq. 5 with a causal mean: ``normalize(x_i - mean_{p<=i} x_p)`` over the last dim.

    Computed in fp32 (fp64 stays fp64); a prefix cumsum, so row i reads rows <= i only.
    """
    x = x.to(_at_least_fp32(x.dtype))
    count = torch.arange(1, x.shape[-2] + 1, device=x.device, dtype=x.dtype)[:, None]
    return F.normalize(x - x.cumsum(dim=-2) / count, dim=-1, eps=eps)


def sample_planes(dim: int, h: int, n_heads: int = 1, *, generator: torch.Generator | None = None,
                  device=None) -> Tensor:
    """Hash planes ``H ~ N(0, 1)`` of shape ``[n_heads, dim, h]`` (fp32; drawn on CPU if seeded)."""
    if generator is not None:
        return torch.randn(n_heads, dim, h, generator=generator).to(device)
    return torch.randn(n_heads, dim, h, device=device)


def lsh_bins(x: Tensor, planes: Tensor, rule: str = "sign") -> Tensor:
    """Bins of vectors ``x [..., L, d]`` under planes ``[..., d, h]`` (int64 ``[..., L]``).

    ``sign`` (Eq. 7): sum_j 1[(x H)_j > 0] 2^(h-j), in ``[0, 2^h)``. ``argmax`` (Eq. 6): in
    ``[0, h)``. Positive rescaling of x (normalisation) does not change either bin.
    """
    dt = _at_least_fp32(torch.promote_types(x.dtype, planes.dtype))
    proj = x.to(dt) @ planes.to(dt)
    h = planes.shape[-1]
    if rule == "sign":
        weights = 2 ** torch.arange(h - 1, -1, -1, device=x.device, dtype=torch.int64)
        return ((proj > 0).to(torch.int64) * weights).sum(-1)
    if rule == "argmax":
        return proj.argmax(dim=-1)
    raise RecallLabError(f"unknown LSH rule {rule!r}; choose from {', '.join(LSH_RULES)}")


def bucket_window_indices(bin_q: Tensor, bin_k: Tensor, n: int) -> Tensor:
    """Eq. 8-9: query i keeps the n most recent keys ``j <= i`` with ``bin_k[j] == bin_q[i]``.

    ``bin_q, bin_k: int [..., L]`` (non-negative). Returns ``int32 [..., L, n]``. Keys are sorted
    by the code ``bin * L + j`` (unique, so this is the stable sort by (bin, position)); the
    entries before ``searchsorted(code_q = bin_q * L + i, right)`` that share the query's bin are
    its candidates, newest first. On the CPU the native kernel (recall_lab/native: one ring of the
    n latest keys per bin) writes the same lists in the same order (tested), where it built and the
    rings fit (bins x n <= 2^24).
    """
    bin_q, bin_k = torch.broadcast_tensors(bin_q.to(torch.int64), bin_k.to(torch.int64))
    length = bin_q.shape[-1]
    nbins = int(torch.max(bin_q.max(), bin_k.max())) + 1 if bin_q.numel() else 0
    if (bin_q.device.type == "cpu" and native.available() and bin_q.numel()
            and int(torch.min(bin_q.min(), bin_k.min())) >= 0 and nbins * n <= 1 << 24):
        bq, bk = bin_q.contiguous(), bin_k.contiguous()
        rows = bq.numel() // max(length, 1)
        out = torch.empty(*bq.shape, n, dtype=torch.int32)
        native.lib().bucket_window(bq.data_ptr(), bk.data_ptr(), out.data_ptr(), length, n, nbins,
                                   rows, native.threads())
        return out
    return bucket_window_indices_torch(bin_q, bin_k, n)


def bucket_window_indices_torch(bin_q: Tensor, bin_k: Tensor, n: int) -> Tensor:
    """`bucket_window_indices` in torch ops (the reference of the native kernel)."""
    bin_q, bin_k = torch.broadcast_tensors(bin_q.to(torch.int64), bin_k.to(torch.int64))
    length = bin_q.shape[-1]
    pos = torch.arange(length, device=bin_q.device, dtype=torch.int64)
    if int(torch.max(bin_q.max(), bin_k.max())) >= (2**62) // max(length, 1):
        raise RecallLabError("too many LSH bins for this sequence length (bin * L overflows int64)")
    base_q = bin_q * length
    sorted_k = (bin_k * length + pos).sort(dim=-1).values.contiguous()
    end = torch.searchsorted(sorted_k, (base_q + pos).contiguous(), right=True)
    cand = end[..., None] - 1 - torch.arange(n, device=bin_q.device, dtype=torch.int64)
    flat = cand.clamp_min(0).flatten(-2)
    code = sorted_k.gather(-1, flat).view(cand.shape)
    valid = (cand >= 0) & (code >= base_q[..., None])
    return torch.where(valid, code - base_q[..., None], -1).to(torch.int32)


def lsh_indices(qc: Tensor, kc: Tensor, n_keys: int, planes: Tensor, rule: str = "sign") -> Tensor:
    """LSH key indices (int32 ``[..., L, n_keys]``) from centred ``qc, kc: [..., L, d]``.

    ``planes: [..., d, h]`` (broadcast like a matmul, e.g. ``[d, h]`` or ``[H, d, h]``); ``rule``
    'sign' (Eq. 7) or 'argmax' (Eq. 6). A plain function, no module state, no randomness:
    ``bucket_window_indices(lsh_bins(qc), lsh_bins(kc), n_keys)``. Use :func:`causal_center`
    first to get the paper's Eq. 5 inputs (causal prefix mean, per-vector normalisation).
    """
    return bucket_window_indices(lsh_bins(qc, planes, rule), lsh_bins(kc, planes, rule), n_keys)


# --------------------------------------------------------------------------- KS


def causal_topk_indices(scores: Tensor, n: int) -> Tensor:
    """Eq. 13: for each i the positions of the top-n of ``scores[..., :i+1]`` (int32 [.., L, n]).

    On the CPU the native kernel (recall_lab/native: one heap of n per row, O(L log n)) where it
    built, else `causal_topk_indices_torch`. Both give ties to the earlier key, so they list the
    same set of keys per query (tested); slot order differs, and nothing downstream reads it (the
    sparse op sums over slots, the union sorts).
    """
    *lead, length = scores.shape
    if scores.device.type == "cpu" and native.available() and n > 0:
        x = scores.detach().float().reshape(-1, length).contiguous()
        out = torch.empty(x.shape[0], length, n, dtype=torch.int32)
        native.lib().causal_topk(x.data_ptr(), out.data_ptr(), length, n, x.shape[0],
                                 native.threads())
        return out.reshape(*lead, length, n)
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
    n = min(n, length)
    noise = torch.rand(scores.shape, device=scores.device, generator=generator)
    sel = noise.topk(n, dim=-1).indices
    x = scores.gather(-1, sel) if score_at is None else score_at(sel)
    with torch.no_grad():
        qq, kk = torch.broadcast_tensors(q.detach(), k.detach())
        ksel = kk.gather(-2, sel[..., None].expand(*sel.shape, kk.shape[-1]))
        a = (qq.float() @ ksel.float().transpose(-1, -2)) * scale
        pos = torch.arange(length, device=scores.device)
        seen = pos[:, None] >= sel[..., None, :]
        y = torch.where(seen, a.sigmoid(), 0.0).sum(-2)
        target = ((y[..., :, None] > y[..., None, :]).float()
                  + (y[..., :, None] >= y[..., None, :]).float()) / 2
    logits = x[..., :, None] - x[..., None, :]
    return F.binary_cross_entropy_with_logits(logits.float(), target)


# --------------------------------------------------------------------------- modules


def _check_qk(q: Tensor, k: Tensor) -> int:
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

    ``budget`` is the most keys any query can get (Eq. 4); ``slots`` may be larger for unions.
    """

    name: str = ""
    budget: int = 0

    def extra_repr(self) -> str:
        return f"name={self.name!r}, budget={self.budget}"


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
        return self.indices(_check_qk(q, k), q.device), None


class LSHPattern(Pattern):
    """Eq. 5-9 with a causal prefix mean; planes fresh per training call, seeded in eval."""

    def __init__(self, n: int, h: int = 8, rule: str = "sign", seed: int = 0) -> None:
        super().__init__()
        if rule not in LSH_RULES:
            raise RecallLabError(f"unknown LSH rule {rule!r}; choose from {', '.join(LSH_RULES)}")
        if not isinstance(h, int) or not 1 <= h <= (40 if rule == "sign" else 1 << 20):
            raise RecallLabError(f"LSH h must be an int in [1, 40] for sign-bit, got {h!r}")
        self.name, self.budget, self.h, self.rule, self.seed = "lsh", n, h, rule, seed

    def planes(self, dim: int, n_heads: int, device=None) -> Tensor:
        if self.training:
            return sample_planes(dim, self.h, n_heads, device=device)
        gen = torch.Generator().manual_seed(self.seed)
        return sample_planes(dim, self.h, n_heads, generator=gen, device=device)

    def forward(self, q: Tensor, k: Tensor, v: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        _check_qk(q, k)
        n_heads = max(q.shape[1], k.shape[1])
        planes = self.planes(q.shape[-1], n_heads, q.device)
        with torch.no_grad():
            idx = lsh_indices(causal_center(q), causal_center(k), self.budget, planes, self.rule)
        return idx, None

    def extra_repr(self) -> str:
        return f"budget={self.budget}, h={self.h}, rule={self.rule!r}, seed={self.seed}"


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

    def forward(self, q: Tensor, k: Tensor, v: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        _check_qk(q, k)
        if q.shape[-1] != self.dim:
            raise RecallLabError(f"ks was built for dim {self.dim}, got q/k dim {q.shape[-1]}")
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


_OPTS = {
    "sw": set(), "sink": set(), "full": set(), "a": set(),
    "d": {"dilation", "max_len"}, "sw+d": {"dilation", "max_len"},
    "lsh": {"h", "rule", "seed"},
    "ks": {"dim", "hidden", "scale"},
    "hax": {"h", "rule", "seed", "dim", "hidden", "scale"},
    **{name: SEATTN_OPTIONS - set(fixed) for name, fixed in SEATTN_VARIANTS.items()},
    "attamba": {"leading", "chunking", "offset", "layer", "n_layers", "seed", "eval_chunking",
                "eval_chunk"},
}


def make_pattern(name: str, k: int, **opts) -> Pattern:
    """Build a pattern module by name (see :data:`PATTERNS`) with total key budget ``k``.

    Options: ``d``/``sw+d``: ``dilation`` ('auto' | 'release' | int), ``max_len`` (2048; the
    longest sequence planned for, which fixes the gap);
    ``lsh``/``hax``: ``h`` (8), ``rule`` ('sign' | 'argmax'), ``seed`` (0, eval planes);
    ``ks``/``hax``: ``dim`` (q/k size, required), ``hidden`` (2*dim), ``scale`` (dim**-0.5, for
    the ranking-loss target). Two-part patterns (a, sw+d, hax) give k//2 to the second part and
    the rest to the first (32 + 32 for the paper's k = 64). ``full`` ignores k.
    ``seattn*`` (SE-Attn, :mod:`recall_lab.attention.seattn`): ``chunk``, ``block``, ``topk``,
    ``chunk_choices``, ``scoring``, ``summary``, ``pool``, ``retrieval``, ``seed``.
    ``attamba``: k is the chunk size P; options ``leading`` (P; an int or 'chunk'), ``chunking``
    ('uniform' | 'cyclic' | 'random'), ``offset``, ``layer``/``n_layers`` (cyclic offsets, random
    seeds), ``seed``, ``eval_chunking``, ``eval_chunk`` (see ``attamba.py``).
    """
    if name not in PATTERNS:
        raise RecallLabError(
            f"unknown attention pattern {name!r}; choose from {', '.join(PATTERNS)}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise RecallLabError(f"attention budget k must be an int >= 1, got {k!r}")
    bad = set(opts) - _OPTS[name]
    if bad:
        raise RecallLabError(f"pattern {name!r} takes no option {sorted(bad)[0]!r}; "
                             f"allowed: {sorted(_OPTS[name]) or 'none'}")
    half, rest = k // 2, k - k // 2
    if name in ("a", "sw+d", "hax") and half < 1:
        raise RecallLabError(f"pattern {name!r} splits k in two; k must be >= 2, got {k}")
    d_opts = {o: opts[o] for o in ("dilation", "max_len") if o in opts}
    lsh_opts = {o: opts[o] for o in ("h", "rule", "seed") if o in opts}
    ks_opts = {o: opts[o] for o in ("dim", "hidden", "scale") if o in opts}
    if name in ("ks", "hax") and "dim" not in ks_opts:
        raise RecallLabError(f"pattern {name!r} needs dim= (the q/k feature size)")
    if name in SEATTN_VARIANTS:
        return make_seattn(name, k, **opts)
    if name == "attamba":
        from recall_lab.attention.attamba import AttambaPattern

        return AttambaPattern(k, **opts)
    if name in ("sw", "sink", "full"):
        return FixedPattern(name, k)
    if name == "d":
        return FixedPattern("d", k, **d_opts)
    if name == "a":
        return UnionPattern("a", [FixedPattern("sw", rest), FixedPattern("sink", half)])
    if name == "sw+d":
        return UnionPattern("sw+d", [FixedPattern("sw", rest), FixedPattern("d", half, **d_opts)])
    if name == "lsh":
        return LSHPattern(k, **lsh_opts)
    if name == "ks":
        return KSPattern(k, **ks_opts)
    return UnionPattern("hax", [LSHPattern(rest, **lsh_opts), KSPattern(half, **ks_opts)])
