"""RMSNorm and Mamba2's gated RMSNorm, each with a native CPU path (recall_lab/native/norm.c).

`RMSNorm` is `nn.RMSNorm` (same parameter, state dict and torch path) whose float32 CPU calls
run the native kernel: torch's CPU `rms_norm` runs its backward as the composite's ~10
element-wise ops, and `GatedRMSNorm`'s torch path is ~15 more, which on the lab's small training
shapes cost about 0.4 and 1.2 ms per layer and step (norm.c says more). The torch paths are the
references; tests/ssm/test_norm.py ties the kernels to them, values and gradients. Under
torch.compile, in float64 or bfloat16, off the CPU, or without the native build, the torch paths
run.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from recall_lab import native as kernels
from recall_lab.generators.errors import RecallLabError
from recall_lab.ssm.native import token_layout

_ptr = kernels.ptr


def _rows(x: Tensor) -> Tensor:
    """x as [rows, tokens, C] (contiguous): rows are what the kernel splits over threads."""
    return x.reshape(x.shape[0] if x.dim() >= 3 else 1, -1, x.shape[-1]).contiguous()


class _NativeNorm(torch.autograd.Function):
    """y = u r w, u = x (z None) or x silu(z), r = 1 / sqrt(mean(u^2) + eps) over each of
    `groups` equal channel groups; x, z [..., C] float32, weight [C]."""

    @staticmethod
    def forward(ctx, x, z, weight, groups: int, eps: float):
        lib = kernels.lib()
        x3 = _rows(x)
        rows, length, c = x3.shape
        z3, zs = (None, 0) if z is None else token_layout(z.reshape(x3.shape))
        w = weight.contiguous()
        y = torch.empty_like(x3)
        rstd = x3.new_empty(rows, length, groups)
        lib.norm_fwd(_ptr(x3), _ptr(z3), zs, _ptr(w), _ptr(y), _ptr(rstd), length, c, groups,
                     eps, rows, kernels.threads())
        ctx.save_for_backward(x3, z3, w, rstd)
        ctx.zs, ctx.groups, ctx.eps, ctx.shape = zs, groups, eps, x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, gy):
        lib = kernels.lib()
        x3, z3, w, rstd = ctx.saved_tensors
        rows, length, c = x3.shape
        gy = gy.reshape(x3.shape).contiguous()
        gx = torch.empty_like(x3)
        gz = None if z3 is None else torch.empty_like(x3)
        gw = x3.new_empty(rows, c)
        lib.norm_bwd(_ptr(x3), _ptr(z3), ctx.zs, _ptr(w), _ptr(rstd), _ptr(gy), _ptr(gx),
                     _ptr(gz), _ptr(gw), length, c, ctx.groups, ctx.eps, rows,
                     kernels.threads())
        return (gx.view(ctx.shape), None if gz is None else gz.view(ctx.shape), gw.sum(0),
                None, None)


def native_usable(x: Tensor, *others: Tensor | None) -> bool:
    """Whether the native kernel takes these: float32 on the CPU, built, not being compiled."""
    return (x.device.type == "cpu" and not torch.compiler.is_compiling() and kernels.available()
            and all(t is None or t.dtype == torch.float32 for t in (x, *others)))


class RMSNorm(nn.RMSNorm):
    """`nn.RMSNorm` over the last axis with an elementwise weight, on the native kernel for
    float32 CPU inputs that need a gradient (the module docstring); everything else is
    nn.RMSNorm's. Without a gradient torch's fused forward is the faster one (no grad, one
    thread: [4, 64] 24 against 41 us, [32, 34, 64] 61 against 68 us), so decoding and
    evaluation keep it."""

    def forward(self, x: Tensor) -> Tensor:
        needs_grad = torch.is_grad_enabled() and (x.requires_grad or self.weight is not None
                                                  and self.weight.requires_grad)
        if (needs_grad and self.weight is not None and len(self.normalized_shape) == 1
                and native_usable(x, self.weight)):
            eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
            return _NativeNorm.apply(x, None, self.weight, 1, eps)
        return super().forward(x)


class GatedRMSNorm(nn.Module):
    """RMSNorm(y * silu(z)) per channel group, times a weight (Mamba2, norm_before_gate=False)."""

    def __init__(self, d: int, group_size: int, eps: float = 1e-5) -> None:
        super().__init__()
        if d % group_size:
            raise RecallLabError(f"norm group size {group_size} does not divide {d}")
        self.group_size = group_size
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, y: Tensor, z: Tensor) -> Tensor:
        if native_usable(y, z, self.weight):
            return _NativeNorm.apply(y, z, self.weight, y.shape[-1] // self.group_size,
                                     self.eps)
        return self.reference(y, z)

    def reference(self, y: Tensor, z: Tensor) -> Tensor:
        """The torch path (the definition the kernel is tested against)."""
        y = y * torch.nn.functional.silu(z)
        shape = y.shape
        yg = y.reshape(*shape[:-1], shape[-1] // self.group_size, self.group_size)
        yg = yg * torch.rsqrt(yg.pow(2).mean(-1, keepdim=True) + self.eps)
        return yg.reshape(shape) * self.weight
