"""Plain recurrences for the selective scan (Mamba, S6) and SSD (Mamba2).

These are the definitions every fast path is tested against: one Python loop over time, readable,
differentiable by autograd, slow. Layouts follow mamba-ssm.

S6 (DeciMamba paper, Sec. 2, Eq. 2-3), per channel d and state n::

    h_t = exp(Delta_t A) * h_{t-1} + Delta_t B_t u_t,     y_t = C_t . h_t + D u_t

SSD (Mamba2) is the same recurrence with one scalar decay per head and a state of shape [P, N].

`reset` (bool [l] or [b, l], optional, both scans): at a position t with reset[t] the state carried
in from t-1 is dropped (the decay exp(Delta_t A) is taken as 0, the input Delta_t B_t u_t kept), so
the scan restarts from zero there: a chunk-reset scan equals running every chunk on its own
(Attamba's `cu_seqlens`, Attamba Sec. 3.2). Zero padding between chunks cannot do this once a
conv bias is in front of the scan.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from recall_lab.generators.errors import RecallLabError


def compute_dtype(*tensors: Tensor) -> torch.dtype:
    """float64 stays float64; everything else computes in float32 (as mamba-ssm does)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def expand_groups(M: Tensor, channels: int) -> Tensor:
    """B or C [b, n, l] or [b, g, n, l] -> [b, channels, n, l]; channel d uses group d // (d/g)."""
    if M.dim() == 3:
        return M.unsqueeze(1).expand(-1, channels, -1, -1)
    g = M.shape[1]
    if channels % g:
        raise RecallLabError(f"{channels} channels do not split into {g} groups")
    return M.repeat_interleave(channels // g, dim=1)


def reset_mask(reset: Tensor | None, b: int, length: int, device) -> Tensor | None:
    """`reset` as bool [b, l] (a [l] flag is shared by the batch); None stays None."""
    if reset is None:
        return None
    r = torch.as_tensor(reset, device=device)
    if r.dtype != torch.bool:
        raise RecallLabError(f"reset must be a bool tensor, got {r.dtype}")
    if r.dim() == 1:
        r = r.unsqueeze(0)
    if r.dim() != 2 or r.shape[-1] != length or r.shape[0] not in (1, b):
        raise RecallLabError(f"reset must be [l] or [b, l] with b={b}, l={length}; "
                             f"got {tuple(r.shape)}")
    return r.expand(b, length)


def selective_scan_ref(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    reset: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Mamba selective scan. u, delta, z: [b, d, l]; A: [d, n]; B, C: [b, n, l] or [b, g, n, l].

    Returns y [b, d, l] (dtype of u) and, with return_last_state, h_L [b, d, n]. reset: see above.
    """
    dtype_in = u.dtype
    ct = compute_dtype(u, delta, A, B, C)
    u, delta, A, B, C = (t.to(ct) for t in (u, delta, A, B, C))
    if delta_bias is not None:
        delta = delta + delta_bias.to(ct)[:, None]
    if delta_softplus:
        delta = F.softplus(delta)
    b, d, length = u.shape
    B = expand_groups(B, d)
    C = expand_groups(C, d)
    h = u.new_zeros(b, d, A.shape[1])
    rst = reset_mask(reset, b, length, u.device)
    ys = []
    for t in range(length):
        decay = torch.exp(delta[:, :, t, None] * A)
        if rst is not None:
            decay = decay * (~rst[:, t]).to(ct)[:, None, None]
        h = decay * h + (delta[:, :, t] * u[:, :, t])[:, :, None] * B[:, :, :, t]
        ys.append((h * C[:, :, :, t]).sum(-1))
    y = torch.stack(ys, dim=-1) if ys else u.new_zeros(b, d, 0)
    if D is not None:
        y = y + u * D.to(ct)[:, None]
    if z is not None:
        y = y * F.silu(z.to(ct))
    y = y.to(dtype_in)
    return (y, h) if return_last_state else y


def ssd_ref(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    chunk_size: int = 64,
    D: Tensor | None = None,
    z: Tensor | None = None,
    dt_bias: Tensor | None = None,
    dt_softplus: bool = False,
    initial_states: Tensor | None = None,
    return_final_states: bool = False,
    reset: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Mamba2 scan as a recurrence. x, z: [b, l, h, p]; dt: [b, l, h]; A: [h]; B, C: [b, l, g, n].

    D: [h] or [h, p]; initial_states / final states: [b, h, p, n]. chunk_size is accepted for
    signature parity with the chunked version and does not change the result. reset: see above
    (a reset at t = 0 drops initial_states).
    """
    del chunk_size
    dtype_in = x.dtype
    ct = compute_dtype(x, dt, A, B, C)
    x, dt, A, B, C = (t.to(ct) for t in (x, dt, A, B, C))
    if dt_bias is not None:
        dt = dt + dt_bias.to(ct)
    if dt_softplus:
        dt = F.softplus(dt)
    b, length, nh, p = x.shape
    g = B.shape[2]
    if nh % g:
        raise RecallLabError(f"{nh} heads do not split into {g} groups")
    B = B.repeat_interleave(nh // g, dim=2)  # [b, l, h, n]
    C = C.repeat_interleave(nh // g, dim=2)
    if initial_states is None:
        h = x.new_zeros(b, nh, p, B.shape[-1])
    else:
        h = initial_states.to(ct)
    rst = reset_mask(reset, b, length, x.device)
    ys = []
    for t in range(length):
        decay = torch.exp(dt[:, t] * A)[:, :, None, None]
        if rst is not None:
            decay = decay * (~rst[:, t]).to(ct)[:, None, None, None]
        inp = (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
        h = decay * h + inp
        ys.append((h * C[:, t, :, None, :]).sum(-1))
    y = torch.stack(ys, dim=1) if ys else x.new_zeros(b, 0, nh, p)
    if D is not None:
        Dc = D.to(ct)
        y = y + x * (Dc[:, None] if Dc.dim() == 1 else Dc)
    if z is not None:
        y = y * F.silu(z.to(ct))
    y = y.to(dtype_in)
    return (y, h) if return_final_states else y
