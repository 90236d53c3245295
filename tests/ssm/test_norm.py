"""The native RMSNorm kernels (recall_lab/native/norm.c via recall_lab/ssm/norm.py) against
torch's: `RMSNorm` against `nn.RMSNorm`, `GatedRMSNorm` against its torch path; values and
every gradient, in float32 against float64 references."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import nn

from recall_lab import native as kernels
from recall_lab.ssm import GatedRMSNorm, RMSNorm
from recall_lab.ssm.norm import native_usable

pytestmark = pytest.mark.skipif(not kernels.available(),
                                reason=f"native kernels not built here: {kernels.load()[1]}")


def _grads(fn, leaves, gy):
    leaves = [t.detach().clone().requires_grad_() for t in leaves]
    out = fn(*leaves)
    return [out.detach(), *torch.autograd.grad(out, leaves, gy)]


def _close(got, want, what):
    for i, (a, w) in enumerate(zip(got, want, strict=True)):
        scale = max(1.0, w.abs().max().item())
        torch.testing.assert_close(a.double() / scale, w / scale, rtol=1e-5, atol=1e-5,
                                   msg=f"{what}: item {i}")


@settings(max_examples=25, deadline=None)
@given(shape=st.sampled_from([(3, 7, 64), (2, 1, 5), (4, 16), (9,), (2, 3, 4, 8)]),
       eps=st.sampled_from([1e-5, 1e-2, None]), seed=st.integers(0, 2**16))
def test_rmsnorm_matches_nn_rmsnorm(shape, eps, seed):
    """Output, the input's and the weight's gradient against nn.RMSNorm in float64, with a
    weight away from 1 and inputs of very different scales per row."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen) * torch.rand(*shape[:-1], 1, generator=gen) * 10
    gy = torch.randn(*shape, generator=gen)
    ours = RMSNorm(shape[-1], eps=eps)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(shape[-1], generator=gen))
    ref = nn.RMSNorm(shape[-1], eps=torch.finfo(torch.float32).eps if eps is None else eps)
    ref.load_state_dict(ours.state_dict())
    ref = ref.double()
    assert native_usable(x, ours.weight)
    got = _grads(lambda t, w: torch.func.functional_call(ours, {"weight": w}, (t,)),
                 [x, ours.weight], gy)
    want = _grads(lambda t, w: torch.func.functional_call(ref, {"weight": w}, (t,)),
                  [x.double(), ref.weight], gy.double())
    _close(got, want, "rmsnorm")


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 3), length=st.integers(1, 9), groups=st.sampled_from([1, 2, 4]),
       size=st.sampled_from([1, 3, 16]), strided_z=st.booleans(), seed=st.integers(0, 2**16))
@example(b=1, length=5, groups=4, size=1, strided_z=True, seed=5)
def test_gated_rmsnorm_matches_its_torch_path(b, length, groups, size, strided_z, seed):
    """Output and the gradients of y, z and the weight against the torch path in float64; z
    also as a column slice of a wider projection (strided tokens, as Mamba2 passes it). The
    example is a group of one channel, where r w - u^2 r^3 w cancels to eps r^3 w: written as
    the difference it missed the float64 gradient by 1.07e-5."""
    gen = torch.Generator().manual_seed(seed)
    d = groups * size
    y = torch.randn(b, length, d, generator=gen) * 3
    zfull = torch.randn(b, length, 2 * d + 1, generator=gen) * 3
    gy = torch.randn(b, length, d, generator=gen)
    norm = GatedRMSNorm(d, size)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(d, generator=gen))

    def ours(yy, zz, w):
        z = zz[..., 1:d + 1] if strided_z else zz[..., :d].contiguous()
        return torch.func.functional_call(norm, {"weight": w}, (yy, z))

    def ref(yy, zz, w):
        z = zz[..., 1:d + 1] if strided_z else zz[..., :d]
        return _gated(yy, z, w, size, norm.eps)

    assert native_usable(y, zfull, norm.weight)
    got = _grads(ours, [y, zfull, norm.weight], gy)
    want = _grads(ref, [y.double(), zfull.double(), norm.weight.double()], gy.double())
    _close(got, want, "gated")


def _gated(y, z, w, size, eps):
    """Mamba2's gated norm written out (as GatedRMSNorm.reference, on any dtype)."""
    u = y * torch.nn.functional.silu(z)
    ug = u.reshape(*u.shape[:-1], -1, size)
    ug = ug * torch.rsqrt(ug.pow(2).mean(-1, keepdim=True) + eps)
    return ug.reshape(u.shape) * w


def test_native_and_torch_paths_agree_in_a_mamba2_mixer_and_results_do_not_depend_on_threads():
    """The mixer with native norms against the same weights with the torch paths forced (every
    parameter's gradient), and the same gradients bit for bit at 1 and 2 threads."""
    from recall_lab.ssm import Mamba2Mixer

    torch.manual_seed(0)
    m = Mamba2Mixer(16, d_state=4, headdim=8)
    x = torch.randn(3, 11, 16)

    def grads():
        out = m(x)
        return [out.detach(), *torch.autograd.grad(out.square().sum(), list(m.parameters()))]

    before = torch.get_num_threads()
    try:
        runs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs.append(grads())
    finally:
        torch.set_num_threads(before)
    for a, c in zip(*runs, strict=True):
        assert torch.equal(a, c)
    ref = Mamba2Mixer(16, d_state=4, headdim=8, scan_impl="torch")
    ref.load_state_dict(m.state_dict())
    ref.norm.forward = lambda y, z: GatedRMSNorm.reference(ref.norm, y, z)
    out = ref(x)
    want = [out.detach(), *torch.autograd.grad(out.square().sum(), list(ref.parameters()))]
    for a, w in zip(runs[0], want, strict=True):
        torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-5)


def test_rmsnorm_takes_the_native_kernel_only_when_a_gradient_is_needed(monkeypatch):
    """Without a gradient (decoding, evaluation) torch's fused forward runs: it is the faster
    one there; with one, the native kernel (its backward is the slow part of torch's)."""
    from recall_lab.ssm import norm

    calls = []
    real = norm._NativeNorm.apply
    monkeypatch.setattr(norm._NativeNorm, "apply", lambda *a: calls.append(1) or real(*a))
    m = RMSNorm(8, eps=1e-5)
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        m(x)
    assert calls == []
    m(x).sum().backward()
    assert calls == [1]
