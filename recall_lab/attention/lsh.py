"""LSH attention (HAX paper Eq. 5-9): q, k centred by their causal prefix mean, binned by the
sign-bit rule (2^h bins) or the argmax rule (h bins); query i keeps the n most recent keys of its
own bin. O(L log L + L n) to build (one sort, one searchsorted, one gather)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from recall_lab.attention import native
from recall_lab.attention.base import Pattern, check_qk
from recall_lab.attention.decode import Decoder, Keys
from recall_lab.generators.errors import RecallLabError

LSH_RULES = ("sign", "argmax")


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
    nbins = int(torch.max(bin_q.max(), bin_k.max())) + 1 if bin_q.numel() else 0
    if (bin_q.device.type == "cpu" and native.available() and bin_q.numel()
            and int(torch.min(bin_q.min(), bin_k.min())) >= 0 and nbins * n <= 1 << 24):
        return native.bucket_window(bin_q, bin_k, n, nbins)
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


def native_lsh_applies(q: Tensor, k: Tensor, n: int, h: int, rule: str) -> bool:
    """Whether `LSHPattern` takes the one-pass native kernel (`native.lsh_window`: centring,
    normalising, projection, binning and the bucket rings in C) instead of `lsh_indices` on
    `causal_center`: CPU float32 q and k, the kernels built, d <= 256, and rings that fit as in
    `bucket_window_indices` (bins x n <= 2^24). It lists the same keys as the torch path (tested)
    but where a projection lies within float rounding of 0 (another summation order)."""
    bins = 2**h if rule == "sign" else h
    return (q.device.type == "cpu" and k.device.type == "cpu" and q.dtype == torch.float32
            and k.dtype == torch.float32 and native.available() and 0 < n and bins * n <= 1 << 24
            and q.shape[-1] <= 256 and q.shape[-2] > 0 and q.shape[0] > 0 and k.shape[0] > 0)


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
        check_qk(q, k)
        n_heads = max(q.shape[1], k.shape[1])
        planes = self.planes(q.shape[-1], n_heads, q.device)
        with torch.no_grad():
            if native_lsh_applies(q, k, self.budget, self.h, self.rule):
                return native.lsh_window(q.detach(), k.detach(), planes, self.budget,
                                         self.rule == "argmax"), None
            idx = lsh_indices(causal_center(q), causal_center(k), self.budget, planes, self.rule)
        return idx, None

    def decoder(self) -> LSHDecoder:
        return LSHDecoder(self)

    def extra_repr(self) -> str:
        return f"budget={self.budget}, h={self.h}, rule={self.rule!r}, seed={self.seed}"


class LSHDecoder(Decoder):
    """Decode state of LSH: the running sums of q and k (the causal centre of Eq. 5) and a ring of
    the n latest keys per bin, [B, H, bins, n] slots (2^h bins for sign-bit, h for argmax): the
    bin of key j is fixed when j arrives, so query t's n latest same-bin keys are in its bin's
    ring. Constant in L (bins x n x (d + dv) per head). Planes as the pattern's (eval: seeded)."""

    growth = "constant"
    # the hash planes are the same for every sequence (seeded): no state (mixers/state.py)
    state_parts = {"planes": "fixed"}

    def __init__(self, pattern: LSHPattern) -> None:
        super().__init__()
        self.pattern = pattern
        self.n_bins = 2**pattern.h if pattern.rule == "sign" else pattern.h
        self.sums: Tensor | None = None  # [2, B, H, d]: running sums of q and k
        self.planes: Tensor | None = None
        self.count = self.pos = self.k = self.v = None

    def _alloc(self, k: Tensor, v: Tensor, dt: torch.dtype) -> None:
        b, h, d = k.shape
        n, nb = self.pattern.budget, self.n_bins
        self.sums = torch.zeros(2, b, h, d, dtype=dt, device=k.device)
        self.planes = self.pattern.planes(d, h, k.device)
        self.count = torch.zeros(b, h, nb, dtype=torch.int64, device=k.device)
        self.pos = torch.full((b, h, nb * n), -1, dtype=torch.int64, device=k.device)
        self.k = k.new_zeros(b, h, nb * n, d)
        self.v = v.new_zeros(b, h, nb * n, v.shape[-1])

    def _step(self, q: Tensor, k: Tensor, v: Tensor) -> Keys:
        dt = _at_least_fp32(q.dtype)
        if self.sums is None:
            self._alloc(k, v, dt)
        x = torch.stack([q.to(dt), k.to(dt)])
        self.sums += x
        centred = F.normalize(x - self.sums / (self.t + 1), dim=-1, eps=1e-12)
        bins = lsh_bins(centred.unsqueeze(-2), self.planes, self.pattern.rule)[..., 0]  # [2,B,H]
        n = self.pattern.budget
        bq, bk = bins[0], bins[1]
        c = self.count.gather(-1, bk[..., None])  # [B, H, 1]
        slot = bk[..., None] * n + c % n
        self.count.scatter_add_(-1, bk[..., None], torch.ones_like(c))
        self.pos.scatter_(-1, slot, torch.full_like(slot, self.t))
        d, dv = k.shape[-1], v.shape[-1]
        self.k.scatter_(-2, slot[..., None].expand(*slot.shape, d), k.unsqueeze(-2))
        self.v.scatter_(-2, slot[..., None].expand(*slot.shape, dv), v.unsqueeze(-2))
        read = bq[..., None] * n + torch.arange(n, device=k.device)  # [B, H, n]
        return Keys(self.pos.gather(-1, read),
                    self.k.gather(-2, read[..., None].expand(*read.shape, d)),
                    self.v.gather(-2, read[..., None].expand(*read.shape, dv)))
