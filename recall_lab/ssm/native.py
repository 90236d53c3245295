"""Autograd functions over the native CPU kernels of recall_lab/native/ssm.c (built and loaded
by `recall_lab.native`): Mamba's selective scan (S6), Mamba2's SSD as its recurrence, and the
mixers' causal depthwise conv + SiLU.

S6: the torch path (scan.py) makes ~20 element-wise passes over [t, b, n, d] buffers per layer
and step (profiled: the scan was ~60% of a 2-layer Mamba step); the C loop touches each (t, n)
once in the forward and twice in the backward. SSD: the torch path (ssd.py) is chunked matmuls plus
their [T, T] decay masks; the recurrence does O(p n) work per head and step with one exp, and
measured 1.8x faster than the torch path's best chunk (32) at B=16, L=256, 8 heads of 16, state 32
(forward + backward, 1 thread); below 16 states the kernel runs channels-last instead (ssm.c:
at the lab's N = 4 the per-head loops filled half a vector register). Conv + SiLU: channels-last,
so the mixers need no transposes, and ~3x faster than conv1d's CPU backward on the mixers' shapes.

Where they do not apply (no build, float64 inputs such as the gradient checks, SSD initial states,
resets for the conv, more than `scan_max_state` S6 states), `backend.py` and the mixers take the
torch paths.
"""

from __future__ import annotations

import torch
from torch import Tensor

from recall_lab import native as kernels
from recall_lab.generators.errors import RecallLabError
from recall_lab.ssm.reference import reset_mask
from recall_lab.ssm.scan import finish_scan_output, prepare_scan_inputs
from recall_lab.ssm.ssd import finish_ssd_output, prepare_ssd_inputs

_ptr = kernels.ptr


# Each kernel pair is written once, as plain functions over real tensors (`_*_fwd`, `_*_bwd`),
# and reached two ways: an autograd.Function (the eager path: the least per-call overhead) and a
# torch custom op with a fake (shape-only) implementation and its autograd formula, which is what
# a `torch.compile`d model calls (`_dispatch`). Dynamo cannot trace a ctypes call: without the op
# every kernel was a graph break, and the frames resumed after it guard on the raw data pointers,
# so they recompiled each step until dynamo gave up on them. Both ways run the same C calls on the
# same inputs; tests/ssm/test_native_ops.py checks that values and gradients agree.


def _dispatch(fn: type[torch.autograd.Function], op, *args):
    """The custom op while dynamo traces (torch.compile), the autograd.Function otherwise."""
    return op(*args) if torch.compiler.is_compiling() else fn.apply(*args)


def _c(*ts: Tensor | None) -> list[Tensor | None]:
    """Contiguous copies where needed: under inductor an op's inputs may come in other strides
    than the eager caller made, and the C code and the fake implementations assume these."""
    return [None if t is None else t.contiguous() for t in ts]


def _none_if_empty(t: Tensor, was: Tensor | None) -> Tensor | None:
    """A custom op returns no None: an absent input's gradient comes back as an empty tensor."""
    return None if was is None else t


def _scan_fwd(u, delta, A, Bt, Ct, keep):
    lib = kernels.lib()
    b, d, length = u.shape
    n, g = A.shape[1], Bt.shape[1]
    y = torch.empty_like(u)
    last = u.new_empty(b, d, n)
    ptrs = [_ptr(t) for t in (u, delta, A, Bt, Ct, keep, y, last)]
    lib.scan_fwd(*ptrs, d, length, n, g, b, kernels.threads())
    return y, last


def _scan_bwd(u, delta, A, Bt, Ct, keep, gy, glast):
    lib = kernels.lib()
    b, d, length = u.shape
    n, g = A.shape[1], Bt.shape[1]
    gy = torch.zeros_like(u) if gy is None else gy.contiguous()
    glast = None if glast is None else glast.contiguous()
    gu, gdelta = torch.empty_like(u), torch.empty_like(u)
    gA = u.new_empty(b, d, n)
    gB, gC = torch.zeros_like(Bt), torch.zeros_like(Ct)
    ptrs = [_ptr(t) for t in (u, delta, A, Bt, Ct, keep, gy, glast, gu, gdelta, gA, gB, gC)]
    per = 2 * length * n  # scratch floats per row range
    buf = u.new_empty(kernels.ranges(b) * per)
    lib.scan_bwd(*ptrs, d, length, n, g, b, kernels.threads(), buf.data_ptr(), per)
    return gu, gdelta, gA.sum(0), gB, gC


class _NativeScanCore(torch.autograd.Function):
    """y [b, d, l], h_L [b, d, n] from u, delta [b, d, l], A [d, n], B, C [b, g, l, n] (note:
    n last), keep [b, l] or None; all float32 and contiguous."""

    @staticmethod
    def forward(ctx, u, delta, A, Bt, Ct, keep):
        ctx.save_for_backward(u, delta, A, Bt, Ct, keep)
        return _scan_fwd(u, delta, A, Bt, Ct, keep)

    @staticmethod
    def backward(ctx, gy, glast):
        return (*_scan_bwd(*ctx.saved_tensors, gy, glast), None)


@torch.library.custom_op("recall_lab::scan", mutates_args=())
def _scan_op(u: Tensor, delta: Tensor, A: Tensor, Bt: Tensor, Ct: Tensor,
             keep: Tensor | None) -> tuple[Tensor, Tensor]:
    return _scan_fwd(*_c(u, delta, A, Bt, Ct, keep))


@_scan_op.register_fake
def _(u, delta, A, Bt, Ct, keep):
    return u.new_empty(u.shape), u.new_empty(u.shape[0], u.shape[1], A.shape[1])


@torch.library.custom_op("recall_lab::scan_bwd", mutates_args=())
def _scan_bwd_op(u: Tensor, delta: Tensor, A: Tensor, Bt: Tensor, Ct: Tensor,
                 keep: Tensor | None, gy: Tensor, glast: Tensor | None) -> list[Tensor]:
    return list(_scan_bwd(*_c(u, delta, A, Bt, Ct, keep), gy, glast))


@_scan_bwd_op.register_fake
def _(u, delta, A, Bt, Ct, keep, gy, glast):
    return [t.new_empty(t.shape) for t in (u, u, A, Bt, Ct)]


def _scan_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _scan_grad(ctx, gy, glast):
    u = ctx.saved_tensors[0]
    gy = torch.zeros_like(u) if gy is None else gy
    return (*_scan_bwd_op(*ctx.saved_tensors, gy, glast), None)


_scan_op.register_autograd(_scan_grad, setup_context=_scan_setup)


def token_layout(t: Tensor) -> tuple[Tensor, int]:
    """(t, its token stride) for a [b, l, c] tensor with contiguous channels and rows (a column
    slice of a projection's output qualifies as is); a copy only when it does not."""
    if t.stride(2) != 1 or t.stride(0) != t.shape[1] * t.stride(1):
        t = t.contiguous()
    return t, t.stride(1)


def _s6f_prep(u, dtr, bias, A, B, C, D, z, side, dtw=None) -> tuple:
    """The fused scan's inputs in the layouts its C code reads, and their token strides."""
    u = u.contiguous()
    dtr, dts = token_layout(dtr)
    B, C = token_layout(B)[0], token_layout(C)[0]
    if B.stride(1) != C.stride(1):
        B, C = B.contiguous(), C.contiguous()
    z, zs = (None, 0) if z is None else token_layout(z)
    side = None if side is None else side.contiguous()
    AT = A.t().contiguous()
    bias, D = bias.contiguous(), None if D is None else D.contiguous()
    WT = None if dtw is None else dtw.t().contiguous()  # [r, d]
    return (u, dtr, bias, AT, B, C, D, z, side, WT), (dts, B.stride(1), zs)


def _s6f_fwd(saved: tuple, strides: tuple) -> tuple[Tensor, Tensor]:
    lib = kernels.lib()
    u, dtr, bias, AT, B, C, D, z, side, WT = saved
    dts, bcs, zs = strides
    b, length, d = u.shape
    n = AT.shape[0]
    out = u.new_empty(b, length, d)
    last = u.new_empty(b, d, n)
    buf = u.new_empty(kernels.ranges(b) * n * d)
    lib.s6f_fwd(_ptr(u), _ptr(dtr), dts, _ptr(WT), 0 if WT is None else WT.shape[0],
                _ptr(bias), _ptr(AT), _ptr(B), _ptr(C), bcs, _ptr(D), _ptr(z), zs, _ptr(side),
                _ptr(out), _ptr(last), length, d, n, b, kernels.threads(), buf.data_ptr(), n * d)
    return out, last


def _s6f_bwd(saved: tuple, strides: tuple, gout, glast) -> tuple:
    """The gradients of (u, dtr, bias, A, B, C, D, z, side, dtw); None for an absent input."""
    lib = kernels.lib()
    u, dtr, bias, AT, B, C, D, z, side, WT = saved
    dts, bcs, zs = strides
    b, length, d = u.shape
    n = AT.shape[0]
    r = 0 if WT is None else WT.shape[0]
    gout = torch.zeros_like(u) if gout is None else gout.contiguous()
    glast = None if glast is None else glast.contiguous()
    gu, gdtr = torch.empty_like(u), u.new_empty(b, length, r) if r else torch.empty_like(u)
    gz = None if z is None else torch.empty_like(u)
    gside = None if side is None else torch.empty_like(u)
    gB, gC = u.new_empty(b, length, n), u.new_empty(b, length, n)
    gbias, gD, gAT = u.new_empty(b, d), u.new_empty(b, d), u.new_empty(b, n, d)
    gWT = u.new_empty(b, r, d) if r else None
    per = (length * (2 * n + 3) + n + 6) * d  # scratch floats per row range (ssm.c)
    buf = u.new_empty(kernels.ranges(b) * per)
    ptrs = [_ptr(t) for t in (gout, glast, gu, gdtr, gz, gside, gB, gC, gbias, gD, gAT, gWT)]
    lib.s6f_bwd(_ptr(u), _ptr(dtr), dts, _ptr(WT), r, _ptr(bias), _ptr(AT), _ptr(B), _ptr(C),
                bcs, _ptr(D), _ptr(z), zs, _ptr(side), *ptrs, length, d, n, b,
                kernels.threads(), buf.data_ptr(), per)
    return (gu, gdtr, gbias.sum(0), gAT.sum(0).t(), gB, gC,
            None if D is None else gD.sum(0), gz, gside, None if gWT is None else gWT.sum(0).t())


class _NativeS6Fused(torch.autograd.Function):
    """out [b, l, d], h_L [b, d, n] of Mamba's scan with its element-wise chain (ssm.c, s6f_*):
    out = (scan(u, softplus(dtr + bias), A, B, C) + D u + side) * silu(z). u [b, l, d]; dtr,
    z [b, l, d] and B, C [b, l, n] with contiguous channels (strided tokens allowed); A [d, n];
    bias, D [d]; D, z, side optional; all float32. With dtw [d, r] (dt_proj's weight), dtr is
    the low-rank dt [b, l, r] and delta = softplus(dtr @ dtw.T + bias), the product in the C
    code too."""

    @staticmethod
    def forward(ctx, u, dtr, bias, A, B, C, D, z, side, dtw=None):
        saved, strides = _s6f_prep(u, dtr, bias, A, B, C, D, z, side, dtw)
        ctx.save_for_backward(*saved)
        ctx.strides = strides
        return _s6f_fwd(saved, strides)

    @staticmethod
    def backward(ctx, gout, glast):
        return _s6f_bwd(ctx.saved_tensors, ctx.strides, gout, glast)


@torch.library.custom_op("recall_lab::s6f", mutates_args=())
def _s6f_op(u: Tensor, dtr: Tensor, bias: Tensor, A: Tensor, B: Tensor, C: Tensor,
            D: Tensor | None, z: Tensor | None, side: Tensor | None,
            dtw: Tensor | None = None) -> tuple[Tensor, Tensor]:
    return _s6f_fwd(*_s6f_prep(u, dtr, bias, A, B, C, D, z, side, dtw))


@_s6f_op.register_fake
def _(u, dtr, bias, A, B, C, D, z, side, dtw=None):
    b, length, d = u.shape
    return u.new_empty(b, length, d), u.new_empty(b, d, A.shape[1])


@torch.library.custom_op("recall_lab::s6f_bwd", mutates_args=())
def _s6f_bwd_op(u: Tensor, dtr: Tensor, bias: Tensor, A: Tensor, B: Tensor, C: Tensor,
                D: Tensor | None, z: Tensor | None, side: Tensor | None, dtw: Tensor | None,
                gout: Tensor, glast: Tensor | None) -> list[Tensor]:
    # contiguous outputs: inductor lays out what follows by the fake implementation's strides
    grads = _s6f_bwd(*_s6f_prep(u, dtr, bias, A, B, C, D, z, side, dtw), gout, glast)
    return [u.new_empty(0) if g is None else g.contiguous() for g in grads]


@_s6f_bwd_op.register_fake
def _(u, dtr, bias, A, B, C, D, z, side, dtw, gout, glast):
    b, length, d = u.shape
    n = A.shape[1]
    like = (u, dtr, bias, A, None, None, D, z, side, dtw)
    grads = [u.new_empty(0) if t is None else t.new_empty(t.shape) for t in like]
    grads[4], grads[5] = u.new_empty(b, length, n), u.new_empty(b, length, n)
    return grads


def _s6f_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _s6f_grad(ctx, gout, glast):
    saved = ctx.saved_tensors
    gout = torch.zeros_like(saved[0]) if gout is None else gout
    grads = _s6f_bwd_op(*saved, gout, glast)
    return tuple(_none_if_empty(g, t) if i >= 6 else g
                 for i, (g, t) in enumerate(zip(grads, saved, strict=True)))


_s6f_op.register_autograd(_s6f_grad, setup_context=_s6f_setup)


def _ssd_fwd(x, dt, A, B, C, keep):
    lib = kernels.lib()
    b, length, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    y = torch.empty_like(x)
    final = x.new_empty(b, h, p, n)
    ptrs = [_ptr(t) for t in (x, dt, A, B, C, keep, y, final)]
    per = (n + 2) * h * p  # scratch floats per row range (ssm.c)
    buf = x.new_empty(kernels.ranges(b) * per)
    lib.ssd_fwd(*ptrs, length, h, p, n, g, b, kernels.threads(), buf.data_ptr(), per)
    return y, final


def _ssd_bwd(x, dt, A, B, C, keep, gy, gfinal):
    lib = kernels.lib()
    b, length, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    gy = torch.zeros_like(x) if gy is None else gy.contiguous()
    gfinal = None if gfinal is None else gfinal.contiguous()
    gx, gdt = torch.empty_like(x), torch.empty_like(dt)
    gA = x.new_empty(b, h)
    gB, gC = torch.zeros_like(B), torch.zeros_like(C)  # the per-head kernel accumulates
    ptrs = [_ptr(t) for t in (x, dt, A, B, C, keep, gy, gfinal, gx, gdt, gA, gB, gC)]
    ck = kernels.constant("ssd_checkpoint")
    per = ((-(-length // ck) + ck + 1) * n + 4) * h * p  # scratch floats per row range (ssm.c)
    buf = x.new_empty(kernels.ranges(b) * per)
    lib.ssd_bwd(*ptrs, length, h, p, n, g, b, kernels.threads(), buf.data_ptr(), per)
    return gx, gdt, gA.sum(0), gB, gC


class _NativeSSDCore(torch.autograd.Function):
    """y [b, l, h, p], S_L [b, h, p, n] from x [b, l, h, p], dt [b, l, h] (after bias and
    softplus), A [h], B, C [b, l, g, n], keep [b, l] or None; all float32 and contiguous."""

    @staticmethod
    def forward(ctx, x, dt, A, B, C, keep):
        ctx.save_for_backward(x, dt, A, B, C, keep)
        return _ssd_fwd(x, dt, A, B, C, keep)

    @staticmethod
    def backward(ctx, gy, gfinal):
        return (*_ssd_bwd(*ctx.saved_tensors, gy, gfinal), None)


@torch.library.custom_op("recall_lab::ssd", mutates_args=())
def _ssd_op(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
            keep: Tensor | None) -> tuple[Tensor, Tensor]:
    return _ssd_fwd(*_c(x, dt, A, B, C, keep))


@_ssd_op.register_fake
def _(x, dt, A, B, C, keep):
    b, _, h, p = x.shape
    return x.new_empty(x.shape), x.new_empty(b, h, p, B.shape[3])


@torch.library.custom_op("recall_lab::ssd_bwd", mutates_args=())
def _ssd_bwd_op(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, keep: Tensor | None,
                gy: Tensor, gfinal: Tensor | None) -> list[Tensor]:
    return list(_ssd_bwd(*_c(x, dt, A, B, C, keep), gy, gfinal))


@_ssd_bwd_op.register_fake
def _(x, dt, A, B, C, keep, gy, gfinal):
    return [t.new_empty(t.shape) for t in (x, dt, A, B, C)]


def _ssd_grad(ctx, gy, gfinal):
    x = ctx.saved_tensors[0]
    gy = torch.zeros_like(x) if gy is None else gy
    return (*_ssd_bwd_op(*ctx.saved_tensors, gy, gfinal), None)


_ssd_op.register_autograd(_ssd_grad, setup_context=_scan_setup)


class _NativeSSDFused(torch.autograd.Function):
    """Mamba2Mixer's SSD with its element-wise chain (ssm.c, ssdf_*): y [b, l, h p] =
    SSD(x, softplus(dtr + dt_bias), A, B, C) + D x, from the conv's output xbc [b, l, w] (x, B
    and C its column slices, one group) and the raw dtr [b, l, h] (a column slice of in_proj's
    output); float32, N below `ssd_channels_below`. The gradient of xbc comes back as one
    buffer, so nothing is concatenated."""

    @staticmethod
    def forward(ctx, xbc, dtr, dt_bias, A, D, heads: int, n: int):
        lib = kernels.lib()
        xbc, dtr = xbc.contiguous(), token_layout(dtr)[0]
        b, length, w = xbc.shape
        d = w - 2 * n
        y = xbc.new_empty(b, length, d)
        per = (n + 2) * d + heads
        buf = xbc.new_empty(kernels.ranges(b) * per)
        lib.ssdf_fwd(_ptr(xbc), w, _ptr(dtr), dtr.stride(1), _ptr(dt_bias), _ptr(A), _ptr(D),
                     _ptr(y), length, heads, d // heads, n, 1, b, kernels.threads(),
                     buf.data_ptr(), per)
        ctx.save_for_backward(xbc, dtr, dt_bias, A, D)
        ctx.sizes = heads, n
        return y

    @staticmethod
    def backward(ctx, gy):
        lib = kernels.lib()
        xbc, dtr, dt_bias, A, D = ctx.saved_tensors
        heads, n = ctx.sizes
        b, length, w = xbc.shape
        d = w - 2 * n
        gy = gy.contiguous()
        gxbc, gdtr = torch.empty_like(xbc), xbc.new_empty(b, length, heads)
        gA, gD = xbc.new_empty(b, heads), xbc.new_empty(b, heads)
        ck = kernels.constant("ssd_checkpoint")
        per = (-(-length // ck) + ck + 1) * n * d + 4 * d + heads  # scratch floats (ssm.c)
        buf = xbc.new_empty(kernels.ranges(b) * per)
        lib.ssdf_bwd(_ptr(xbc), w, _ptr(dtr), dtr.stride(1), _ptr(dt_bias), _ptr(A), _ptr(D),
                     _ptr(gy), _ptr(gxbc), _ptr(gdtr), _ptr(gA), _ptr(gD), length, heads,
                     d // heads, n, 1, b, kernels.threads(), buf.data_ptr(), per)
        return (gxbc, gdtr, gdtr.sum((0, 1)), gA.sum(0), None if D is None else gD.sum(0),
                None, None)


def ssd_fused_usable(xbc: Tensor, n: int, groups: int, *tensors: Tensor | None) -> bool:
    """Whether `ssd_fused` takes these: CPU float32, one group, fewer states than
    `ssd_channels_below` (the channels-last kernel), not being compiled."""
    if xbc.device.type != "cpu" or torch.compiler.is_compiling() or not kernels.available():
        return False
    return (groups == 1 and n < kernels.constant("ssd_channels_below")
            and all(t is None or t.dtype == torch.float32 for t in (xbc, *tensors)))


def ssd_fused(xbc: Tensor, dtr: Tensor, dt_bias: Tensor, A: Tensor, D: Tensor | None,
              heads: int, n: int) -> Tensor:
    """Mamba2Mixer's ``ssd(x, dt, A, B, C, D=D, dt_bias=dt_bias, dt_softplus=True)`` from the
    conv output xbc = [x | B | C] [b, l, h p + 2 n] and the raw dt [b, l, h]; returns y
    [b, l, h p] (`_NativeSSDFused`; `ssd_ref` on the split inputs is its reference)."""
    return _NativeSSDFused.apply(xbc, dtr, dt_bias, A, D, heads, n)


def _conv_prep(x, weight, bias):
    if x.stride(2) != 1 or x.stride(0) != x.shape[1] * x.stride(1):
        x = x.contiguous()
    wT = weight[:, 0, :].t().contiguous()
    return x, wT, None if bias is None else bias.contiguous()


def _conv_fwd(x, wT, bias):
    lib = kernels.lib()
    b, length, c = x.shape
    y = x.new_empty(b, length, c)
    lib.conv_silu_fwd(_ptr(x), x.stride(1), _ptr(wT), _ptr(bias), _ptr(y), length, c,
                      wT.shape[0], b, kernels.threads())
    return y


def _conv_bwd(x, wT, bias, gy):
    """(gx, gweight [c, 1, k], the bias's gradient or None)."""
    lib = kernels.lib()
    b, length, c = x.shape
    k = wT.shape[0]
    gy = gy.contiguous()
    gx = x.new_empty(b, length, c)
    gw = x.new_empty(b, k, c)
    gb = x.new_empty(b, c)
    ptrs = (_ptr(x), x.stride(1), _ptr(wT), _ptr(bias), _ptr(gy), _ptr(gx), _ptr(gw), _ptr(gb))
    lib.conv_silu_bwd(*ptrs, length, c, k, b, kernels.threads())
    return gx, gw.sum(0).t().unsqueeze(1), None if bias is None else gb.sum(0)


class _NativeConvSilu(torch.autograd.Function):
    """silu(depthwise causal conv) of x [b, l, c] (channels contiguous, rows may be strided);
    weight [c, 1, k], bias [c] or None; float32."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        x, wT, bias_c = _conv_prep(x, weight, bias)
        ctx.save_for_backward(x, wT, bias_c)
        return _conv_fwd(x, wT, bias_c)

    @staticmethod
    def backward(ctx, gy):
        return _conv_bwd(*ctx.saved_tensors, gy)


@torch.library.custom_op("recall_lab::conv_silu", mutates_args=())
def _conv_op(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return _conv_fwd(*_conv_prep(x, weight, bias))


@_conv_op.register_fake
def _(x, weight, bias):
    return x.new_empty(x.shape)


@torch.library.custom_op("recall_lab::conv_silu_bwd", mutates_args=())
def _conv_bwd_op(x: Tensor, weight: Tensor, bias: Tensor | None, gy: Tensor) -> list[Tensor]:
    gx, gw, gb = _conv_bwd(*_conv_prep(x, weight, bias), gy)
    return [gx, gw.contiguous(), x.new_empty(0) if gb is None else gb]


@_conv_bwd_op.register_fake
def _(x, weight, bias, gy):
    return [x.new_empty(x.shape), weight.new_empty(weight.shape),
            x.new_empty(0) if bias is None else bias.new_empty(bias.shape)]


def _conv_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _conv_grad(ctx, gy):
    x, weight, bias = ctx.saved_tensors
    gx, gw, gb = _conv_bwd_op(x, weight, bias, gy)
    return gx, gw, _none_if_empty(gb, bias)


_conv_op.register_autograd(_conv_grad, setup_context=_conv_setup)


def conv_silu(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """silu(causal depthwise conv1d) over time of x [b, l, c] -> [b, l, c] (contiguous), the
    same as ``F.silu(F.conv1d(F.pad(x.transpose(1, 2), (k - 1, 0)), weight, bias,
    groups=c)).transpose(1, 2)`` without the layout changes; weight [c, 1, k]."""
    return _dispatch(_NativeConvSilu, _conv_op, x, weight, bias)


def conv_usable(x: Tensor, weight: Tensor, bias: Tensor | None) -> bool:
    """Whether `conv_silu` takes these: a CPU, float32 x, weight and bias."""
    tensors = [x, weight] + ([] if bias is None else [bias])
    return (x.device.type == "cpu" and kernels.available()
            and all(t.dtype == torch.float32 for t in tensors))


def usable(u: Tensor, A: Tensor, *tensors: Tensor) -> bool:
    """Whether a native core takes these inputs: CPU, float32 compute, and for the S6 scan
    (A [d, n]) at most `scan_max_state()` states."""
    if u.device.type != "cpu" or not kernels.available():
        return False
    if any(t is not None and t.dtype == torch.float64 for t in (u, A, *tensors)):
        return False
    return A.dim() == 1 or 0 < A.shape[-1] <= kernels.constant("scan_max_state")


def selective_scan_native(
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
    """Selective scan on the native core; same contract as `selective_scan_ref`."""
    if not kernels.available():  # (`available`, not `lib`: dynamo can constant-fold it)
        kernels.lib()  # raises with the reason
    ct, u_c, delta_c, A_c, B4, C4, rst = prepare_scan_inputs(u, delta, A, B, C, delta_bias,
                                                             delta_softplus, reset)
    if ct != torch.float32:
        raise RuntimeError("the native selective scan computes in float32 only")
    keep = None if rst is None else (~rst).to(ct).contiguous()
    y, last = _dispatch(_NativeScanCore, _scan_op, u_c.contiguous(), delta_c.contiguous(),
                        A_c.contiguous(), B4.transpose(-1, -2).contiguous(),
                        C4.transpose(-1, -2).contiguous(), keep)
    y = finish_scan_output(y, u_c, D, z, u.dtype)
    return (y, last) if return_last_state else y


def ssd_native(
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
    """Mamba2 SSD as its recurrence on the native core; same contract as `ssd_ref`, except that
    `initial_states` is not taken (the dispatcher sends those calls to the torch path) and
    `chunk_size` only has to be valid (the recurrence has no chunks)."""
    if not kernels.available():
        kernels.lib()  # raises with the reason
    if initial_states is not None:
        raise RuntimeError("the native SSD starts from zero states; use ssd_torch")
    if chunk_size < 1:
        raise RecallLabError(f"chunk_size must be >= 1, got {chunk_size}")
    ct, x_in, dt_c = prepare_ssd_inputs(x, dt, A, B, C, dt_bias, dt_softplus)
    if ct != torch.float32:
        raise RuntimeError("the native SSD computes in float32 only")
    b, length = x.shape[:2]
    rst = reset_mask(reset, b, length, x.device)
    keep = None if rst is None else (~rst).to(ct).contiguous()
    y, final = _dispatch(_NativeSSDCore, _ssd_op, x_in.contiguous(), dt_c.contiguous(),
                         A.to(ct).contiguous(), B.to(ct).contiguous(), C.to(ct).contiguous(), keep)
    y = finish_ssd_output(y, x_in, D, z, x.dtype)
    return (y, final) if return_final_states else y


def fused_usable(u: Tensor, A: Tensor, *tensors: Tensor | None) -> bool:
    """Whether `selective_scan_fused` takes these: CPU, all float32, A [d, n] with at most
    `scan_max_state()` states (one group of B and C)."""
    if u.device.type != "cpu" or not kernels.available() or A.dim() != 2:
        return False
    if any(t is not None and t.dtype != torch.float32 for t in (u, A, *tensors)):
        return False
    return 0 < A.shape[-1] <= kernels.constant("scan_max_state")


def selective_scan_fused(u: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
                         D: Tensor | None, z: Tensor | None, delta_bias: Tensor,
                         side: Tensor | None = None, return_last_state: bool = False,
                         dt_weight: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """MambaMixer's scan and the element-wise chain around it, channels-last, in one native
    call each way: ``(scan(u, softplus(dt + delta_bias), A, B, C) + D u + side) * silu(z)``.

    u, dt, z, side: [b, l, d]; B, C: [b, l, n] (column slices of the projections are taken
    without copies); A: [d, n]; D, delta_bias: [d]. The same as ``selective_scan_ref`` on the
    transposed inputs with delta_softplus (and z=None, side added, then the gate), which is the
    torch reference it is tested against (tests/ssm/test_ssm_native.py). No resets, groups or
    float64 (`fused_usable`); the mixer takes its other path for those.

    dt_weight [d, r]: dt is then the low-rank dt [b, l, r] (x_proj's first r columns) and the
    kernel computes ``dt @ dt_weight.T`` itself (ssm.c says why)."""
    y, last = _dispatch(_NativeS6Fused, _s6f_op, u, dt, delta_bias, A, B, C, D, z, side,
                        dt_weight)
    return (y, last) if return_last_state else y
