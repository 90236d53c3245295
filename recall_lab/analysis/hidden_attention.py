"""Hidden attention of selective SSM layers (DeciMamba Eq. 4-5): the matrix alpha with y = alpha x.

For a Mamba (S6) channel c with per-state decay A[c, n] < 0, discretised as Abar_k = exp(Delta_k A)
and Bbar_k = Delta_k B_k (Mamba's zero-order-hold for A, Euler for B):

    alpha[c, i, j] = sum_n C_i[n] exp(A[c, n] (S_i - S_j)) Delta_j B_j[n],  S_i = sum_{k<=i} Delta_k

for j <= i and 0 above the diagonal. A Mamba2 head h has a scalar decay A[h], so the sum over the
state factorises: alpha[h, i, j] = exp(A[h] (S_i - S_j)) Delta_j (C_i . B_j).

The SSM output (before the D skip and the gate) is y[c, i] = sum_j alpha[c, i, j] x[c, j].

The fast path works tile by tile (no Python loop over positions). Prefix sums S are taken in
float64 and only their *differences* S_i - S_r >= 0 are exponentiated, so every factor lies in
(0, 1]: values can underflow (the true value is below the dtype's range) but never overflow.
Below-diagonal tiles factorise through a reference position r between their columns and rows,
exp(A (S_i - S_j)) = exp(A (S_i - S_r)) exp(A (S_r - S_j)), which turns a tile into one batched
matmul over the state (and the channel-mean map into one matmul over channels x state); diagonal
tiles do the same between small sub-blocks and use the differences inside them.

`hidden_attention_loop` is the readable reference (a loop over positions multiplying the Abar_k
themselves, no prefix sums); the tests tie the two together and tie both to the mixers' outputs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from recall_lab.generators.errors import RecallLabError

Reduce = Literal["mean", "abs_mean"] | None


@dataclass(frozen=True)
class SSMKernel:
    """SSM parameters in one canonical layout, channels (Mamba) or heads (Mamba2) as `c`.

    delta: [b, c, L] (>= 0); A: [c, n] for Mamba, [c] for Mamba2 (<= 0);
    B, C: [b, c or 1, n, L]; x: [b, c, L] (Mamba) or [b, c, L, p] (Mamba2), or None;
    D: [c] or None.
    """

    kind: Literal["mamba", "mamba2"]
    delta: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    x: torch.Tensor | None = None
    D: torch.Tensor | None = None

    @property
    def batch(self) -> int:
        return self.delta.shape[0]

    @property
    def channels(self) -> int:
        return self.delta.shape[1]

    @property
    def length(self) -> int:
        return self.delta.shape[2]


def _group_index(n_channels: int, n_groups: int) -> torch.Tensor:
    if n_channels % n_groups:
        raise RecallLabError(f"{n_channels} channels/heads do not split into {n_groups} groups")
    return torch.arange(n_channels) // (n_channels // n_groups)


def _select(t: torch.Tensor | None, dim: int, channels: torch.Tensor | None) -> torch.Tensor | None:
    if t is None or channels is None or t.shape[dim] == 1:
        return t
    return t.index_select(dim, channels.to(t.device))


def ssm_kernel(params: Any, channels: Sequence[int] | torch.Tensor | None = None) -> SSMKernel:
    """Normalise an `SSMParams` (or any object with delta, A, B, C and optional x, D) to SSMKernel.

    The kind is read from A: 2-D (d_inner, n) is Mamba, 1-D (heads,) is Mamba2. Layouts follow the
    recall_lab.ssm contract: Mamba delta/x [b, d, L], B/C [b, n, L] or [b, g, n, L]; Mamba2 delta
    [b, h, L], B/C [b, L, g, n], x [b, L, h, p] or [b, L, h*p]. `channels` keeps only those
    channels (heads for Mamba2).
    """
    if isinstance(params, SSMKernel):
        kern = params
    else:
        try:
            # analysis never needs gradients; the mixers return tensors still in the graph
            delta, A, B, C = (t.detach() for t in (params.delta, params.A, params.B, params.C))
        except AttributeError as exc:
            raise RecallLabError(f"not SSM parameters: {exc}") from exc
        x = getattr(params, "x", None)
        D = getattr(params, "D", None)
        x = x.detach() if x is not None else None
        D = D.detach() if D is not None else None
        if A.dim() == 2:
            kern = _mamba_kernel(delta, A, B, C, x, D)
        elif A.dim() == 1:
            kern = _mamba2_kernel(delta, A, B, C, x, D)
        else:
            raise RecallLabError(f"A must be [d_inner, n] (Mamba) or [heads] (Mamba2), got "
                                 f"{tuple(A.shape)}")
    if channels is None:
        return kern
    idx = torch.as_tensor(channels, dtype=torch.long).reshape(-1)
    if idx.numel() == 0 or int(idx.min()) < 0 or int(idx.max()) >= kern.channels:
        raise RecallLabError(f"channels must lie in [0, {kern.channels})")
    return SSMKernel(
        kind=kern.kind,
        delta=_select(kern.delta, 1, idx),
        A=_select(kern.A, 0, idx),
        B=_select(kern.B, 1, idx),
        C=_select(kern.C, 1, idx),
        x=_select(kern.x, 1, idx),
        D=_select(kern.D, 0, idx),
    )


def _check_signs(delta: torch.Tensor, A: torch.Tensor) -> None:
    # Both signs are what make every exponent <= 0; without them the tiles could overflow.
    if bool((A > 0).any()):
        raise RecallLabError("A must be <= 0 (a decaying state); got positive entries")
    if bool((delta < 0).any()):
        raise RecallLabError("delta must be >= 0 (after softplus); got negative entries")


def _mamba_kernel(delta, A, B, C, x, D) -> SSMKernel:
    if delta.dim() != 3:
        raise RecallLabError(f"Mamba delta must be [b, d_inner, L], got {tuple(delta.shape)}")
    b, d, L = delta.shape
    if A.shape[0] != d:
        raise RecallLabError(f"A has {A.shape[0]} channels, delta has {d}")
    n = A.shape[1]

    def bc(t: torch.Tensor, name: str) -> torch.Tensor:
        if t.dim() == 3:  # [b, n, L] shared by all channels
            t = t.unsqueeze(1)
        if t.dim() != 4 or t.shape[0] != b or t.shape[2] != n or t.shape[3] != L:
            raise RecallLabError(f"Mamba {name} must be [b, n, L] or [b, g, n, L] with n={n}, "
                                 f"L={L}; got {tuple(t.shape)}")
        g = t.shape[1]
        if g > 1:
            t = t.index_select(1, _group_index(d, g).to(t.device))
        return t

    _check_signs(delta, A)
    if x is not None and tuple(x.shape) != (b, d, L):
        raise RecallLabError(f"Mamba x must be [b, d_inner, L] = {(b, d, L)}, got "
                             f"{tuple(x.shape)}")
    return SSMKernel("mamba", delta, A, bc(B, "B"), bc(C, "C"), x, D)


def _mamba2_kernel(delta, A, B, C, x, D) -> SSMKernel:
    if delta.dim() != 3:
        raise RecallLabError(f"Mamba2 delta must be [b, heads, L], got {tuple(delta.shape)}")
    b, h, L = delta.shape
    if A.shape[0] != h:
        raise RecallLabError(f"A has {A.shape[0]} heads, delta has {h}")

    def bc(t: torch.Tensor, name: str) -> torch.Tensor:
        if t.dim() != 4 or t.shape[0] != b or t.shape[1] != L:
            raise RecallLabError(f"Mamba2 {name} must be [b, L, g, n] with L={L}, got "
                                 f"{tuple(t.shape)}")
        t = t.permute(0, 2, 3, 1)  # [b, g, n, L]
        g = t.shape[1]
        if g > 1:
            t = t.index_select(1, _group_index(h, g).to(t.device))
        return t

    _check_signs(delta, A)
    if x is not None:
        if x.dim() == 3:
            if x.shape[2] % h:
                raise RecallLabError(f"Mamba2 x width {x.shape[2]} is not a multiple of {h} heads")
            x = x.reshape(b, L, h, x.shape[2] // h)
        if x.dim() != 4 or tuple(x.shape[:3]) != (b, L, h):
            raise RecallLabError(f"Mamba2 x must be [b, L, h, p], got {tuple(x.shape)}")
        x = x.permute(0, 2, 1, 3)  # [b, h, L, p]
    return SSMKernel("mamba2", delta, A, bc(B, "B"), bc(C, "C"), x, D)


# ---------------------------------------------------------------------------------------------
# Reference: the recurrence of Eq. 4 written out, one position at a time.
# ---------------------------------------------------------------------------------------------


def hidden_attention_loop(params: Any, channels: Sequence[int] | None = None) -> torch.Tensor:
    """Reference alpha [b, c, L, L]: a loop over positions i that multiplies the running products
    prod_{k=j+1..i} Abar_k by Abar_i (no prefix sums, no exp of differences). O(L^2 c n) time."""
    k = ssm_kernel(params, channels)
    dtype = torch.float64
    delta = k.delta.to(dtype)
    A = k.A.to(dtype)
    if k.kind == "mamba2":
        A = A[:, None].expand(-1, k.B.shape[2])
    Abar = torch.exp(delta[..., None] * A[None, :, None, :])  # [b, c, L, n]
    Bbar = delta[..., None] * k.B.to(dtype).transpose(2, 3)  # [b, c, L, n]
    b, c, L, n = Abar.shape
    C = k.C.to(dtype).transpose(2, 3).expand(b, c, L, n)
    alpha = torch.zeros(b, c, L, L, dtype=dtype, device=delta.device)
    prods = torch.zeros(b, c, 0, n, dtype=dtype, device=delta.device)
    one = torch.ones(b, c, 1, n, dtype=dtype, device=delta.device)
    for i in range(L):
        prods = torch.cat([prods * Abar[:, :, i, None, :], one], 2)
        alpha[:, :, i, : i + 1] = torch.einsum("bcn,bcjn->bcj", C[:, :, i],
                                               prods * Bbar[:, :, : i + 1])
    return alpha


# ---------------------------------------------------------------------------------------------
# Fast path: tiles.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Prepared:
    kind: str
    S: torch.Tensor  # [b, c, L'] float64 prefix sums of delta (L' = L padded, see _prepare)
    A: torch.Tensor  # [c, n] or [c], compute dtype
    delta: torch.Tensor  # [b, c, L'] compute dtype
    Bt: torch.Tensor  # [b, c|1, L', n] compute dtype
    Ct: torch.Tensor  # [b, c|1, L', n] compute dtype
    bbar: torch.Tensor | None  # Mamba: Delta_j B_j as [b, c, n, L'] compute dtype
    dtype: torch.dtype


def _prepare(k: SSMKernel, dtype: torch.dtype, multiple: int = 1) -> _Prepared:
    """Cast once, and pad the sequence with Delta = B = C = 0 to a multiple of `multiple`: the
    padding lies after every real position, so (causality) it changes no real entry."""
    pad = -k.length % multiple

    def padded(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, pad)) if pad else t

    delta = padded(k.delta)
    B, C = padded(k.B).to(dtype), padded(k.C).to(dtype)
    bbar = None
    if k.kind == "mamba":
        bbar = (B * delta.to(dtype)[:, :, None, :]).contiguous()
    return _Prepared(
        kind=k.kind,
        S=torch.cumsum(delta.to(torch.float64), dim=-1),
        A=k.A.to(dtype),
        delta=delta.to(dtype),
        Bt=B.transpose(2, 3),
        Ct=C.transpose(2, 3),
        bbar=bbar,
        dtype=dtype,
    )


# Differences of the float64 prefix sums are taken first and only then cast to the compute dtype,
# so a float32 exponent carries the rounding of a small number, not of S_L ~ sum of all deltas.


def _left(p: _Prepared, a0: int, a1: int, r: int) -> torch.Tensor:
    """C_i exp(A (S_i - S_r)) for i in [a0, a1), r < a0: [b, c, s, n], every factor in (0, 1]."""
    d = (p.S[:, :, a0:a1] - p.S[:, :, r, None]).to(p.dtype)
    return p.Ct[:, :, a0:a1] * torch.exp(p.A[None, :, None, :] * d[..., None])


def _right(p: _Prepared, r: int, j0: int, j1: int) -> torch.Tensor:
    """exp(A (S_r - S_j)) Delta_j B_j for j in [j0, j1), j1 <= r + 1: [b, c, n, Tc]."""
    d = (p.S[:, :, r, None] - p.S[:, :, j0:j1]).to(p.dtype)  # [b, c, Tc]
    e = torch.exp(p.A[None, :, :, None] * d[:, :, None, :])  # [b, c, n, Tc]
    return e.mul_(p.bbar[:, :, :, j0:j1])


def _mamba2_tile(p: _Prepared, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
    # Scalar decay per head: the [T, Tc] decay matrix costs no more than the C.B product.
    rows = torch.arange(i0, i1, device=p.S.device)
    cols = torch.arange(j0, j1, device=p.S.device)
    mask = cols[None, :] <= rows[:, None]
    d = (p.S[:, :, i0:i1, None] - p.S[:, :, None, j0:j1]).clamp_min(0).to(p.dtype)
    decay = torch.exp(p.A[None, :, None, None] * d) * mask
    cb = p.Ct[:, :, i0:i1] @ p.Bt[:, :, j0:j1].transpose(2, 3)  # [b, c|1, T, Tc]
    return decay * cb * p.delta[:, :, None, j0:j1]


def _diag_tile(p: _Prepared, i0: int, i1: int, sub: int) -> torch.Tensor:
    """The diagonal tile [i0, i1)^2 of a Mamba layer, (i1 - i0) a multiple of `sub`, in a fixed
    number of tensor ops per tile: sub-row a factors through its reference r_a = a0 - 1 for the
    columns left of its own sub-block; the band i - j < sub (which holds every pair inside a
    sub-block) is then written offset by offset from the differences S_i - S_{i-d}."""
    b, c = p.S.shape[:2]
    n = p.A.shape[1]
    T = i1 - i0
    na = T // sub
    S = p.S[:, :, i0:i1]
    # S at each sub-row's reference r_a = a0 - 1 (S_{-1} = 0)
    starts = torch.arange(i0, i1, sub, device=S.device)
    S_ref = torch.where(starts > 0, p.S[:, :, (starts - 1).clamp_min(0)], 0.0)  # [b, c, na]
    # left factors, every row against its own sub-row reference: [b, c, na, sub, n]
    dl = (S.view(b, c, na, sub) - S_ref[..., None]).to(p.dtype)
    Ct = p.Ct[:, :, i0:i1]
    left = Ct.reshape(b, Ct.shape[1], na, sub, n) * torch.exp(
        p.A[None, :, None, None, :] * dl[..., None])
    # right factors of every column of the tile against every reference; columns at or right of
    # a sub-row's own block get a clamped (finite, unused) exponent and are masked below
    dr = (S_ref[..., None] - S[:, :, None, :]).clamp_min(0).to(p.dtype)  # [b, c, na, T]
    right = torch.exp(p.A[None, :, None, :, None] * dr[:, :, :, None, :])  # [b, c, na, n, T]
    right = right * p.bbar[:, :, None, :, i0:i1]
    out = (left @ right).view(b, c, T, T)
    row_start = starts.repeat_interleave(sub) - i0  # first column of each row's own sub-block
    cols = torch.arange(T, device=S.device)
    out = out * (cols[None, :] < row_start[:, None])
    # the band: alpha[i, i - d] = sum_n C_i[n] exp(A (S_i - S_{i-d})) Delta_{i-d} B_{i-d}[n]
    bbar_t = p.bbar[:, :, :, i0:i1].transpose(2, 3)  # [b, c, T, n]
    for d in range(min(sub, T)):
        diff = (S[:, :, d:] - S[:, :, : T - d]).to(p.dtype)  # [b, c, T - d]
        e = torch.exp(p.A[None, :, None, :] * diff[..., None])
        band = (Ct[:, :, d:] * e * bbar_t[:, :, : T - d]).sum(-1)
        out.diagonal(-d, 2, 3).copy_(band)
    return out


def _contract(left: torch.Tensor, right: torch.Tensor, channel_sum: bool) -> torch.Tensor:
    """[b, c, T, n] x [b, c, n, Tc] -> per channel [b, c, T, Tc], or summed over channels
    [b, T, Tc] as one matmul with inner size c n (far better shaped than c matmuls of size n)."""
    if not channel_sum:
        return left @ right
    b, c, T, n = left.shape
    return left.permute(0, 2, 1, 3).reshape(b, T, c * n) @ right.reshape(b, c * n, -1)


def iter_tiles(params: Any, *, channels: Sequence[int] | None = None, block: int = 64,
               col_block: int = 512, dtype: torch.dtype = torch.float32,
               channel_sum: bool = False, sub: int = 8,
               ) -> Iterator[tuple[int, int, int, int, torch.Tensor]]:
    """Yield (i0, i1, j0, j1, alpha[:, :, i0:i1, j0:j1]) covering the lower triangle of alpha
    (tiles wholly above the diagonal are skipped: they are zero). With `channel_sum` the tiles
    are summed over channels/heads, [b, T, Tc].

    Mamba tiles below the diagonal factor through a reference position r between their columns
    and rows: exp(A (S_i - S_j)) = exp(A (S_i - S_r)) exp(A (S_r - S_j)), both exponents <= 0.
    For column blocks on the fixed grid r is the block's last column, so the right factor of a
    column block is computed once and reused by every row block below it; the partial block next
    to the diagonal uses r = i0 - 1. Extra memory: O(b c n L) for the cached right factors plus
    one tile (O(b c n block sub) on the diagonal)."""
    k = ssm_kernel(params, channels)
    if block < 1 or col_block < 1 or sub < 1:
        raise RecallLabError("block sizes must be positive")
    sub = min(sub, block)
    block = -(-block // sub) * sub  # diagonal tiles are whole sub-blocks
    p = _prepare(k, dtype, multiple=block if k.kind == "mamba" else 1)
    L = k.length
    right_cache: dict[int, torch.Tensor] = {}
    for i0 in range(0, L, block):
        i1 = min(i0 + block, L)
        for j0 in range(0, i0, col_block):
            j1 = min(j0 + col_block, i0)
            if k.kind == "mamba2":
                t = _mamba2_tile(p, i0, i1, j0, j1)
                yield i0, i1, j0, j1, (t.sum(1) if channel_sum else t)
                continue
            if j1 == j0 + col_block:
                r = j1 - 1
                if j0 not in right_cache:
                    right_cache[j0] = _right(p, r, j0, j1)
                right = right_cache[j0]
            else:
                r = i0 - 1
                right = _right(p, r, j0, j1)
            yield i0, i1, j0, j1, _contract(_left(p, i0, i1, r), right, channel_sum)
        if k.kind == "mamba2":
            t = _mamba2_tile(p, i0, i1, i0, i1)
        else:  # the padded tile, cut back to the real positions
            t = _diag_tile(p, i0, i0 + block, sub)[:, :, : i1 - i0, : i1 - i0]
        yield i0, i1, i0, i1, (t.sum(1) if channel_sum else t)


def hidden_attention(params: Any, *, channels: Sequence[int] | None = None, reduce: Reduce = None,
                     block: int = 64, col_block: int = 512,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Full hidden attention. reduce=None: [b, c, L, L] per channel (head for Mamba2);
    "mean": the signed mean over channels [b, L, L] (as the DeciMamba notebook averages);
    "abs_mean": the mean of |alpha| over channels [b, L, L]. Lower-triangular by construction.
    Reducing is done tile by tile, so the per-channel map is never held in memory."""
    k = ssm_kernel(params, channels)
    b, c, L = k.delta.shape
    shape = (b, c, L, L) if reduce is None else (b, L, L)
    if reduce not in (None, "mean", "abs_mean"):
        raise RecallLabError(f"reduce must be None, 'mean' or 'abs_mean', got {reduce!r}")
    out = torch.zeros(shape, dtype=dtype, device=k.delta.device)
    tiles = iter_tiles(k, block=block, col_block=col_block, dtype=dtype,
                       channel_sum=reduce == "mean")
    for i0, i1, j0, j1, t in tiles:
        if reduce is None:
            out[:, :, i0:i1, j0:j1] = t
        elif reduce == "mean":
            out[:, i0:i1, j0:j1] = t / c
        else:
            out[:, i0:i1, j0:j1] = t.abs().mean(1)
    return out


def hidden_attention_row(params: Any, i: int = -1, *, channels: Sequence[int] | None = None,
                         col_block: int = 4096, dtype: torch.dtype = torch.float32
                         ) -> torch.Tensor:
    """Row i of alpha, [b, c, i + 1] (default: the last row), in O(b c n col_block) extra memory:
    alpha[c, i, j] = sum_n C_i[n] exp(A[c, n] (S_i - S_j)) Delta_j B_j[n]."""
    k = ssm_kernel(params, channels)
    L = k.length
    if i < 0:
        i += L
    if not 0 <= i < L:
        raise RecallLabError(f"row {i} outside a sequence of length {L}")
    p = _prepare(k, dtype)
    c_i = p.Ct[:, :, i, None, :]  # [b, c|1, 1, n]
    parts = []
    for j0 in range(0, i + 1, col_block):
        j1 = min(j0 + col_block, i + 1)
        if k.kind == "mamba2":
            d = (p.S[:, :, i, None] - p.S[:, :, j0:j1]).to(dtype)  # [b, c, Tc], >= 0
            cb = (c_i @ p.Bt[:, :, j0:j1].transpose(2, 3))[:, :, 0]  # [b, c|1, Tc]
            parts.append(torch.exp(p.A[None, :, None] * d) * cb * p.delta[:, :, j0:j1])
        else:
            parts.append((c_i @ _right(p, i, j0, j1))[:, :, 0])
    return torch.cat(parts, dim=-1)


def apply_hidden_attention(params: Any, alpha: torch.Tensor, *, with_skip: bool = True
                           ) -> torch.Tensor:
    """y = alpha x (+ D x): the SSM output rebuilt from the hidden attention, in the layout of the
    scan output: Mamba [b, d, L]; Mamba2 [b, L, h, p]. Requires params.x."""
    k = ssm_kernel(params)
    if k.x is None:
        raise RecallLabError("these SSM parameters carry no input x")
    x = k.x.to(alpha.dtype)
    if k.kind == "mamba":
        y = torch.einsum("bcij,bcj->bci", alpha, x)
        if with_skip and k.D is not None:
            y = y + k.D.to(alpha.dtype)[None, :, None] * x
        return y
    y = torch.einsum("bhij,bhjp->bhip", alpha, x)
    if with_skip and k.D is not None:
        D = k.D.to(alpha.dtype)
        D = D[:, None] if D.numel() == k.channels else D.reshape(k.channels, -1)  # [h, 1|p]
        y = y + D[None, :, None, :] * x
    return y.permute(0, 2, 1, 3)
