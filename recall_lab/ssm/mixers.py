"""Mamba and Mamba2 mixer layers (parallel forward + recurrent step), as in mamba-ssm.

Both expose the per-token SSM parameters (Delta, A, B, C, the scan input x, D) from the same
forward (`return_params=True`), and accept a `side` branch that is added to the SSM output before
the gate: the hook the hybrid (HAX) block uses for its sparse-attention branch.

`reset` (bool [l] or [b, l], optional): chunk starts. The scan drops its state there and the conv
taps that would read across a start are masked, so the output equals running every chunk from a
zero state on its own (Attamba's key/value SSMs, Attamba Sec. 4.1). In `step`, the caller
starts a fresh `allocate_state` at a chunk start (same thing).

`decimate` (a `decimation.Decimate`, optional): DeciMamba (its Alg. 1). Conv, projections and
Delta run at full length; the tokens are scored by Delta, the kept ones (`decimation.py`) are
gathered (scan input, Delta, B, C and the gate z) and the scan runs on them only. The forward then
returns `(out [b, l', d_model], kept)` (`kept.idx`, `kept.valid`: positions in the input), plus
SSMParams of the kept tokens with return_params.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.memory import MemorySpec
from recall_lab.ssm import native
from recall_lab.ssm.backend import selective_scan, ssd
from recall_lab.ssm.decimation import Decimate, decimate_indices, decimation_scores
from recall_lab.ssm.norm import GatedRMSNorm
from recall_lab.ssm.reference import reset_mask, selective_scan_ref, ssd_ref
from recall_lab.ssm.scan import selective_scan_torch
from recall_lab.ssm.ssd import ssd_torch

Side = Callable[[Tensor], Tensor]
# scan_impl: "auto" dispatches by device (backend.py; on the CPU also the native conv + SiLU);
# "torch" / "ref" force an implementation (and conv1d)
SCAN_IMPLS = {"auto": selective_scan, "torch": selective_scan_torch, "ref": selective_scan_ref}
SSD_IMPLS = {"auto": ssd, "torch": ssd_torch, "ref": ssd_ref}


def _impl(table: dict, name: str) -> Callable:
    if name not in table:
        raise RecallLabError(f"scan_impl must be one of {sorted(table)}, got {name!r}")
    return table[name]


@dataclass
class SSMParams:
    """Per-token SSM parameters of one forward (what hidden attention / Mamba Mean Distance need).

    Mamba:  delta [b, d_inner, l] (after bias + softplus), A [d_inner, n] (negative),
            B, C [b, n, l], x [b, d_inner, l] (the scan input u), D [d_inner].
    Mamba2: delta [b, h, l], A [h] (negative), B, C [b, l, g, n], x [b, l, h, p], D [h].
    Tensors are not detached; detach them if you only analyse.
    """

    delta: Tensor
    A: Tensor
    B: Tensor
    C: Tensor
    x: Tensor
    D: Tensor


@dataclass
class MixerState:
    """Recurrent state for `step`: the last d_conv - 1 conv inputs and the SSM state."""

    conv: Tensor  # [b, conv_channels, d_conv - 1]
    ssm: Tensor  # Mamba [b, d_inner, n]; Mamba2 [b, h, p, n]


def dt_bias_init(size: int, dt_min: float, dt_max: float, dt_floor: float) -> Tensor:
    """Bias whose softplus is log-uniform in [dt_min, dt_max] (Mamba's dt initialisation)."""
    dt = torch.exp(torch.rand(size) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    dt = dt.clamp(min=dt_floor)
    return dt + torch.log(-torch.expm1(-dt))  # inverse of softplus


def _causal_conv(x: Tensor, weight: Tensor, bias: Tensor | None,
                 reset: Tensor | None = None) -> Tensor:
    """Depthwise causal conv over the last axis of x [b, c, l] (left padding only).

    With `reset`, tap t-s counts only when no chunk starts in (t-s, t] (same segment id), i.e.
    each chunk is convolved as if it were a sequence of its own (the bias is added everywhere,
    as it would be there too).
    """
    if reset is None:
        return F.conv1d(F.pad(x, (weight.shape[-1] - 1, 0)), weight, bias, groups=x.shape[1])
    b, _, length = x.shape
    width = weight.shape[-1]
    seg = reset_mask(reset, b, length, x.device).to(torch.int64).cumsum(-1)  # [b, l]
    xp = F.pad(x, (width - 1, 0))
    segp = F.pad(seg, (width - 1, 0), value=-1)
    out = x.new_zeros(x.shape) if bias is None else bias[None, :, None].expand_as(x)
    for k in range(width):  # tap k reads x[t - (width - 1 - k)]
        same = (segp[:, k:k + length] == seg).to(x.dtype)[:, None, :]
        out = out + xp[:, :, k:k + length] * same * weight[None, :, 0, k, None]
    return out


def _conv_silu(x: Tensor, conv: nn.Conv1d, reset: Tensor | None, native_ok: bool) -> Tensor:
    """silu(causal depthwise conv over time) of x [b, l, c] -> [b, l, c]. The native kernel
    (native.py: no transposes, ~3x faster than conv1d's CPU backward on these shapes) where it
    applies: scan_impl "auto", no resets, float32 on the CPU; else conv1d."""
    if native_ok and reset is None and native.conv_usable(x, conv.weight, conv.bias):
        return native.conv_silu(x, conv.weight, conv.bias)
    return F.silu(_causal_conv(x.transpose(1, 2), conv.weight, conv.bias, reset)).transpose(1, 2)


def _conv_step(state: Tensor, x_t: Tensor, weight: Tensor, bias: Tensor | None):
    """One conv step: the window is state [b, c, k - 1] (the previous k - 1 inputs, the state
    convention's convolution cache) and x_t [b, c]; return (output [b, c], new state)."""
    window = torch.cat([state, x_t.unsqueeze(-1)], dim=-1)
    out = (window * weight.squeeze(1)).sum(-1)
    if bias is not None:
        out = out + bias
    return out, window[:, :, 1:]


def _fp(t: Tensor) -> Tensor:
    """At least float32 (parameters may be kept in half precision), float64 stays float64."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _check_d_model(x: Tensor, d_model: int) -> None:
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise RecallLabError(f"mixer input must be [b, l, {d_model}], got {tuple(x.shape)}")


def _check_decimate(decimate: Decimate | None, reset: Tensor | None) -> None:
    if decimate is not None and reset is not None:
        raise RecallLabError("decimation and chunk resets cannot be combined in one mixer call")


def _result(out: Tensor, kept, params: SSMParams | None):
    """out; (out, params); (out, kept); (out, kept, params) depending on what was asked."""
    res = (out,) + (() if kept is None else (kept,)) + (() if params is None else (params,))
    return res[0] if len(res) == 1 else res


class MambaMixer(nn.Module):
    """Mamba (S6) mixer: in_proj -> causal depthwise conv -> SiLU -> selective scan -> gate -> out.

    Initialisation follows Mamba: A = 1..N per channel (A_log = log A), D = 1, dt_proj bias the
    inverse softplus of a log-uniform dt in [dt_min, dt_max].
    """

    def __init__(
        self,
        d_model: int,
        d_inner: int | None = None,
        d_state: int = 16,
        d_conv: int = 4,
        dt_rank: int | str = "auto",
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        dt_init_floor: float = 1e-4,
        dt_scale: float = 1.0,
        conv_bias: bool = True,
        bias: bool = False,
        scan_impl: str = "auto",
    ) -> None:
        super().__init__()
        self._scan = _impl(SCAN_IMPLS, scan_impl)
        self._native_ok = scan_impl == "auto"
        self.d_model = d_model
        self.d_inner = d_inner or 2 * d_model
        self.d_state = d_state
        self.d_conv = d_conv
        self.dt_rank = math.ceil(d_model / 16) if dt_rank == "auto" else int(dt_rank)
        if min(self.d_inner, d_state, d_conv, self.dt_rank) < 1:
            raise RecallLabError("d_inner, d_state, d_conv and dt_rank must all be >= 1")
        di = self.d_inner
        self.in_proj = nn.Linear(d_model, 2 * di, bias=bias)
        self.conv1d = nn.Conv1d(di, di, d_conv, groups=di, bias=conv_bias)
        self.x_proj = nn.Linear(di, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, di, bias=True)
        std = self.dt_rank**-0.5 * dt_scale
        with torch.no_grad():
            nn.init.uniform_(self.dt_proj.weight, -std, std)
            self.dt_proj.bias.copy_(dt_bias_init(di, dt_min, dt_max, dt_init_floor))
        A = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(di, 1)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(di))
        # mamba-ssm's tags: the model's init keeps the dt bias; AdamW does not decay A or D
        self.dt_proj.bias._no_reinit = True
        self.A_log._no_weight_decay = True
        self.D._no_weight_decay = True
        self.out_proj = nn.Linear(di, d_model, bias=bias)

    def _ssm_inputs(self, xc: Tensor):
        """From the conv output xc [b, d, l]: raw dt [b, d, l] (no bias), B, C [b, n, l]."""
        x_dbl = self.x_proj(xc.transpose(1, 2))  # [b, l, r + 2n]
        dt, B, C = torch.split(x_dbl, [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = (dt @ self.dt_proj.weight.t()).transpose(1, 2)
        return dt, B.transpose(1, 2), C.transpose(1, 2)

    def forward(self, x: Tensor, side: Side | None = None, return_params: bool = False,
                reset: Tensor | None = None, decimate: Decimate | None = None):
        """x [b, l, d_model] -> y [b, l, d_model] (and SSMParams with return_params).

        reset: bool [l] or [b, l] chunk starts; decimate: DeciMamba (module docstring)."""
        _check_d_model(x, self.d_model)
        _check_decimate(decimate, reset)
        xs, z = self.in_proj(x).chunk(2, dim=-1)  # [b, l, d] each
        A = -torch.exp(_fp(self.A_log))
        if (self._native_ok and reset is None and decimate is None and not return_params
                and native.fused_usable(x, A, self.in_proj.weight, self.x_proj.weight)):
            return self._forward_fused(xs, z, A, side, x.dtype)
        xc = _conv_silu(xs, self.conv1d, reset, self._native_ok).transpose(1, 2)  # [b, d, l]
        z = z.transpose(1, 2)
        dt, B, C = self._ssm_inputs(xc)
        kept = None
        if decimate is not None:  # Alg. 1 l.5-6: select by Delta, gather after the conv
            delta = F.softplus(dt + self.dt_proj.bias[:, None])
            score = decimation_scores(delta, decimate.score, xc)
            kept = decimate_indices(score, decimate.n_keep, decimate.keep_from)
            xc, dt, B, C, z = (kept.gather(t, -1) for t in (xc, dt, B, C, z))
        scan_kw = dict(delta_bias=_fp(self.dt_proj.bias), delta_softplus=True)
        if reset is not None:
            scan_kw["reset"] = reset
        if side is None:  # the gate can go inside the scan (fused on the mamba-ssm kernel)
            y = self._scan(xc, dt, A, B, C, _fp(self.D), z=z, **scan_kw).transpose(1, 2)
        else:
            y = self._scan(xc, dt, A, B, C, _fp(self.D), **scan_kw)
            y = (y.transpose(1, 2) + side(xc.transpose(1, 2))) * F.silu(z.transpose(1, 2))
        out = self.out_proj(y.to(x.dtype))
        params = None
        if return_params:
            delta = F.softplus(dt + self.dt_proj.bias[:, None])
            params = SSMParams(delta=delta, A=A, B=B, C=C, x=xc, D=self.D)
        return _result(out, kept, params)

    def _forward_fused(self, xs: Tensor, z: Tensor, A: Tensor, side: Side | None, dtype):
        """The training path on the CPU: the same computation in the projections' own layout
        [b, l, *] (no transposes or copies), the scan and its element-wise chain (dt_proj's
        low-rank product, delta bias + softplus, D skip, side, SiLU gate) in one native call
        each way (native.py). The path below is its reference (tests/ssm/test_ssm_native.py
        compares the two)."""
        xc = native.conv_silu(xs, self.conv1d.weight, self.conv1d.bias)  # [b, l, d]
        dt, B, C = torch.split(self.x_proj(xc), [self.dt_rank, self.d_state, self.d_state],
                               dim=-1)  # dt [b, l, r]: dt_proj's product happens in the kernel
        y = native.selective_scan_fused(xc, dt, A, B, C, _fp(self.D), z, _fp(self.dt_proj.bias),
                                        side=None if side is None else side(xc),
                                        dt_weight=_fp(self.dt_proj.weight))
        return self.out_proj(y.to(dtype))

    def allocate_state(self, batch: int, device=None, dtype=None) -> MixerState:
        p = self.A_log
        device = device or p.device
        dtype = dtype or p.dtype
        return MixerState(
            conv=torch.zeros(batch, self.d_inner, self.d_conv - 1, device=device, dtype=dtype),
            ssm=torch.zeros(batch, self.d_inner, self.d_state, device=device, dtype=dtype),
        )

    def step(self, x_t: Tensor, state: MixerState, side: Side | None = None
             ) -> tuple[Tensor, MixerState]:
        """One token x_t [b, d_model] -> (y_t [b, d_model], new state). `side(xc_t [b, d_inner])`:
        the hybrid branch's step, added before the gate as in `forward`."""
        xs, z = self.in_proj(x_t).chunk(2, dim=-1)
        xc, conv = _conv_step(state.conv, xs, self.conv1d.weight, self.conv1d.bias)
        xc = F.silu(xc)
        dt, B, C = self._ssm_inputs(xc.unsqueeze(-1))
        delta = F.softplus(dt[..., 0] + self.dt_proj.bias)  # [b, d]
        A = -torch.exp(self.A_log)
        B_t, C_t = B[:, None, :, 0], C[:, None, :, 0]  # [b, 1, n]
        h = torch.exp(delta.unsqueeze(-1) * A) * state.ssm + (delta * xc).unsqueeze(-1) * B_t
        y = (h * C_t).sum(-1) + self.D * xc
        if side is not None:
            y = y + side(xc)
        y = y * F.silu(z)
        return self.out_proj(y), MixerState(conv=conv, ssm=h)


class Mamba2Mixer(nn.Module):
    """Mamba2 mixer: in_proj -> conv on xBC -> SiLU -> SSD (scalar decay per head) -> gated RMSNorm.

    Initialisation follows mamba-ssm's Mamba2: dt_bias the inverse softplus of a log-uniform dt in
    [dt_min, dt_max], A uniform in A_init_range (A_log = log A), D = 1 per head.
    """

    def __init__(
        self,
        d_model: int,
        d_inner: int | None = None,
        d_state: int = 64,
        d_conv: int = 4,
        headdim: int = 64,
        ngroups: int = 1,
        chunk_size: int = 64,
        A_init_range: tuple[float, float] = (1.0, 16.0),
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        dt_init_floor: float = 1e-4,
        conv_bias: bool = True,
        bias: bool = False,
        norm_eps: float = 1e-5,
        scan_impl: str = "auto",
    ) -> None:
        super().__init__()
        self._ssd = _impl(SSD_IMPLS, scan_impl)
        self._native_ok = scan_impl == "auto"
        self.d_model = d_model
        self.d_inner = d_inner or 2 * d_model
        self.d_state = d_state
        self.d_conv = d_conv
        self.headdim = headdim
        self.ngroups = ngroups
        self.chunk_size = chunk_size
        if min(self.d_inner, d_state, d_conv, headdim, ngroups, chunk_size) < 1:
            raise RecallLabError("Mamba2Mixer sizes must all be >= 1")
        if self.d_inner % headdim:
            raise RecallLabError(f"d_inner={self.d_inner} is not a multiple of headdim={headdim}")
        self.nheads = self.d_inner // headdim
        if self.nheads % ngroups:
            raise RecallLabError(f"{self.nheads} heads do not split into {ngroups} groups")
        di, gn = self.d_inner, ngroups * d_state
        self.conv_dim = di + 2 * gn
        self.in_proj = nn.Linear(d_model, 2 * di + 2 * gn + self.nheads, bias=bias)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim,
                                bias=conv_bias)
        self.dt_bias = nn.Parameter(dt_bias_init(self.nheads, dt_min, dt_max, dt_init_floor))
        A = torch.empty(self.nheads).uniform_(*A_init_range)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(self.nheads))
        for p in (self.dt_bias, self.A_log, self.D):  # mamba-ssm: not weight-decayed
            p._no_weight_decay = True
        self.norm = GatedRMSNorm(di, di // ngroups, eps=norm_eps)
        self.out_proj = nn.Linear(di, d_model, bias=bias)

    def _split(self, zxbcdt: Tensor):
        di, gn = self.d_inner, self.ngroups * self.d_state
        return torch.split(zxbcdt, [di, di + 2 * gn, self.nheads], dim=-1)

    def forward(self, x: Tensor, side: Side | None = None, return_params: bool = False,
                reset: Tensor | None = None, decimate: Decimate | None = None):
        """x [b, l, d_model] -> y [b, l, d_model] (and SSMParams with return_params).

        reset: bool [l] or [b, l] chunk starts; decimate: DeciMamba (module docstring). Delta is
        one scalar per head here, with the same role (Delta -> 0 skips the token): the score is
        its mean over heads."""
        _check_d_model(x, self.d_model)
        _check_decimate(decimate, reset)
        z, xBC, dt = self._split(self.in_proj(x))
        xBC = _conv_silu(xBC, self.conv1d, reset, self._native_ok)
        A = -torch.exp(_fp(self.A_log))
        if (self._native_ok and reset is None and decimate is None and not return_params
                and native.ssd_fused_usable(xBC, self.d_state, self.ngroups, dt, A, self.D,
                                            self.dt_bias)):
            # the CPU's fused SSD: dt's bias and softplus, the D skip and the slices in the C
            # code (native.py); the path below is its reference (tests/ssm/test_ssm_native.py)
            y = native.ssd_fused(xBC, dt, self.dt_bias, A, self.D, self.nheads, self.d_state)
            if side is not None:
                y = y + side(xBC[..., : self.d_inner])
            return self.out_proj(self.norm(y, z).to(x.dtype))
        kept = None
        if decimate is not None:
            delta = F.softplus(dt + self.dt_bias).transpose(1, 2)  # [b, h, l]
            xc_t = xBC[..., : self.d_inner].transpose(1, 2)
            score = decimation_scores(delta, decimate.score, xc_t)
            kept = decimate_indices(score, decimate.n_keep, decimate.keep_from)
            z, xBC, dt = (kept.gather(t, 1) for t in (z, xBC, dt))
        b, length, _ = xBC.shape
        gn = self.ngroups * self.d_state
        xc, B, C = torch.split(xBC, [self.d_inner, gn, gn], dim=-1)
        xh = xc.reshape(b, length, self.nheads, self.headdim)
        B = B.reshape(b, length, self.ngroups, self.d_state)
        C = C.reshape(b, length, self.ngroups, self.d_state)
        reset_kw = {} if reset is None else {"reset": reset}
        y = self._ssd(xh, dt, A, B, C, self.chunk_size, D=_fp(self.D), dt_bias=_fp(self.dt_bias),
                dt_softplus=True, **reset_kw)
        y = y.reshape(b, length, self.d_inner)
        if side is not None:
            y = y + side(xc)
        out = self.out_proj(self.norm(y, z).to(x.dtype))
        params = None
        if return_params:
            delta = F.softplus(dt + self.dt_bias).transpose(1, 2)
            params = SSMParams(delta=delta, A=A, B=B, C=C, x=xh, D=self.D)
        return _result(out, kept, params)

    def memory_spec(self) -> MemorySpec:
        """The layer as a memory (mixers/memory.py): key B in R^{d_state}, shared by the heads
        (one group), value x per head, query C, every decay and dt at 1, the gate and the D skip
        left out, RMSNorm over the group."""
        if self.ngroups != 1:
            raise RecallLabError("Mamba2's memory construction is written for one group of B/C")
        return MemorySpec("sum", self.nheads, self.d_state, self.headdim, "identity", 1.0,
                          "rms_all", shared_keys=True)

    def allocate_state(self, batch: int, device=None, dtype=None) -> MixerState:
        p = self.A_log
        device = device or p.device
        dtype = dtype or p.dtype
        return MixerState(
            conv=torch.zeros(batch, self.conv_dim, self.d_conv - 1, device=device, dtype=dtype),
            ssm=torch.zeros(batch, self.nheads, self.headdim, self.d_state, device=device,
                            dtype=dtype),
        )

    def step(self, x_t: Tensor, state: MixerState, side: Side | None = None
             ) -> tuple[Tensor, MixerState]:
        """One token x_t [b, d_model] -> (y_t [b, d_model], new state). `side(xc_t [b, d_inner])`:
        the hybrid branch's step, added before the gated norm as in `forward`."""
        b = x_t.shape[0]
        z, xBC, dt = self._split(self.in_proj(x_t))
        xBC, conv = _conv_step(state.conv, xBC, self.conv1d.weight, self.conv1d.bias)
        xBC = F.silu(xBC)
        gn = self.ngroups * self.d_state
        xc, B, C = torch.split(xBC, [self.d_inner, gn, gn], dim=-1)
        hg = self.nheads // self.ngroups
        xh = xc.reshape(b, self.nheads, self.headdim)
        B = B.reshape(b, self.ngroups, self.d_state).repeat_interleave(hg, dim=1)  # [b, h, n]
        C = C.reshape(b, self.ngroups, self.d_state).repeat_interleave(hg, dim=1)
        delta = F.softplus(dt + self.dt_bias)  # [b, h]
        decay = torch.exp(delta * -torch.exp(self.A_log))[:, :, None, None]
        h = decay * state.ssm + (delta[:, :, None] * xh).unsqueeze(-1) * B.unsqueeze(2)
        y = (h * C.unsqueeze(2)).sum(-1) + self.D[:, None] * xh
        y = y.reshape(b, self.d_inner)
        if side is not None:
            y = y + side(xc)
        y = self.norm(y, z)
        return self.out_proj(y), MixerState(conv=conv, ssm=h)
