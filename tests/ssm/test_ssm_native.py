"""The native C cores (recall_lab/ssm/native.py: S6 selective scan, SSD recurrence) against the
plain recurrences, and how they are built, chosen and turned off."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from ssm_inputs import scan_inputs, ssd_inputs

from recall_lab import native as kernels
from recall_lab.ssm import (
    Mamba2Mixer,
    MambaMixer,
    backend,
    native,
    selective_scan,
    selective_scan_ref,
    ssd,
    ssd_ref,
)

KEYS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")

pytestmark = pytest.mark.skipif(not kernels.available(),
                                reason=f"native kernels not built here: {kernels.load()[1]}")


def _run(fn, inp, gy, glast, reset=None):
    leaves = {k: v.detach().clone().requires_grad_() for k, v in inp.items()}
    y, last = fn(**leaves, delta_softplus=True, return_last_state=True, reset=reset)
    torch.autograd.backward([y, last], [gy, glast])
    return [y.detach(), last.detach()] + [leaves[k].grad for k in KEYS]


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 3),
    d=st.sampled_from([2, 4, 6]),
    n=st.sampled_from([1, 3, 4, 5, 8, 16, 32, 64]),  # specialised sizes and the generic loop
    length=st.integers(1, 40),
    groups=st.sampled_from([0, 1, 2]),
    with_reset=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_values_and_grads_match_the_recurrence(b, d, n, length, groups, with_reset, seed):
    inp = scan_inputs(b, d, n, length, groups, dtype=torch.float32, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    gy = torch.randn(b, d, length, generator=gen)
    glast = torch.randn(b, d, n, generator=gen)
    reset = torch.rand(b, length, generator=gen) < 0.2 if with_reset else None
    got = _run(native.selective_scan_native, inp, gy, glast, reset)
    ref64 = {k: v.double() for k, v in inp.items()}
    want = _run(selective_scan_ref, ref64, gy.double(), glast.double(), reset)
    for name, a, w in zip(("y", "last", *KEYS), got, want, strict=True):
        scale = max(1.0, w.abs().max().item())
        torch.testing.assert_close(a.double() / scale, w / scale, rtol=1e-4, atol=1e-4,
                                   msg=f"{name}")


SSD_KEYS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")


def _run_ssd(fn, inp, gy, gfinal, reset=None):
    leaves = {k: inp[k].detach().clone().requires_grad_() for k in SSD_KEYS}
    y, final = fn(**leaves, dt_softplus=True, return_final_states=True, reset=reset)
    torch.autograd.backward([y, final], [gy, gfinal])
    return [y.detach(), final.detach()] + [leaves[k].grad for k in SSD_KEYS]


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 3),
    length=st.sampled_from([1, 7, 40, 64, 65, 140]),  # around the backward's 64-step checkpoints
    heads_groups=st.sampled_from([(2, 1), (4, 2), (3, 3)]),
    p=st.integers(1, 5),
    n=st.sampled_from([3, 8, 16, 32, 64, 128]),  # channels-last (< 16) and per-head paths
    with_reset=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_ssd_values_and_grads_match_the_recurrence(b, length, heads_groups, p, n, with_reset,
                                                   seed):
    h, g = heads_groups
    inp = ssd_inputs(b, length, h, p, g, n, dtype=torch.float32, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    gy = torch.randn(b, length, h, p, generator=gen)
    gfinal = torch.randn(b, h, p, n, generator=gen)
    reset = torch.rand(b, length, generator=gen) < 0.1 if with_reset else None
    got = _run_ssd(native.ssd_native, inp, gy, gfinal, reset)
    ref64 = {k: inp[k].double() for k in SSD_KEYS}
    want = _run_ssd(ssd_ref, ref64, gy.double(), gfinal.double(), reset)
    for name, a, w in zip(("y", "final", *SSD_KEYS), got, want, strict=True):
        scale = max(1.0, w.abs().max().item())
        torch.testing.assert_close(a.double() / scale, w / scale, rtol=1e-4, atol=1e-4,
                                   msg=f"{name}")


def test_ssd_refuses_initial_states_and_dispatch_sends_them_to_torch():
    inp = ssd_inputs(2, 9, 2, 3, 1, 4, dtype=torch.float32)
    with pytest.raises(RuntimeError, match="zero states"):
        native.ssd_native(**inp)
    assert backend.scan_backend("cpu", "ssd") == backend.NATIVE_SSD
    no_init = {k: v for k, v in inp.items() if k != "initial_states"}
    assert torch.equal(ssd(**no_init), native.ssd_native(**no_init))


@settings(max_examples=30, deadline=None)
@given(b=st.integers(1, 3), length=st.integers(1, 20), c=st.integers(1, 9),
       k=st.integers(1, 5), extra=st.integers(0, 3), bias=st.booleans(),
       seed=st.integers(0, 2**16))
def test_conv_silu_matches_conv1d_then_silu(b, length, c, k, extra, bias, seed):
    gen = torch.Generator().manual_seed(seed)
    full = torch.randn(b, length, c + extra, generator=gen, requires_grad=True)
    weight = torch.randn(c, 1, k, generator=gen, requires_grad=True)
    bvec = torch.randn(c, generator=gen, requires_grad=True) if bias else None
    x = full[..., extra:]  # a column slice with strided rows, as the mixers pass it
    got = native.conv_silu(x, weight, bvec)
    want = F.silu(F.conv1d(F.pad(x.transpose(1, 2), (k - 1, 0)), weight, bvec,
                           groups=c)).transpose(1, 2)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    g = torch.randn(want.shape, generator=gen)
    leaves = [full, weight] + ([bvec] if bias else [])
    for a, w in zip(torch.autograd.grad(got, leaves, g), torch.autograd.grad(want, leaves, g),
                    strict=True):
        torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cls, kw", [(MambaMixer, dict(d_state=16)),
                                     (Mamba2Mixer, dict(d_state=32, headdim=8, chunk_size=16))])
def test_mixer_native_paths_match_the_torch_paths(cls, kw):
    torch.manual_seed(0)
    fast = cls(32, **kw)
    slow = cls(32, **kw, scan_impl="torch")
    slow.load_state_dict(fast.state_dict())
    x = torch.randn(3, 50, 32)
    outs = []
    for mixer in (fast, slow):
        y = mixer(x)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        outs.append([y.detach()] + [p.grad for p in mixer.parameters()])
    for a, w in zip(*outs, strict=True):
        scale = max(1.0, w.abs().max().item())
        torch.testing.assert_close(a / scale, w / scale, rtol=1e-4, atol=1e-4)


def test_strong_decay_stays_finite_and_exact():
    inp = scan_inputs(2, 4, 16, 33, 0, dtype=torch.float32)
    inp["delta"] = inp["delta"].abs() * 60 + 1  # Delta * A of order -100 per step
    core = {k: inp[k] for k in ("u", "delta", "A", "B", "C", "D")}
    y = native.selective_scan_native(**core)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, selective_scan_ref(**core), rtol=1e-5, atol=1e-5)


def test_results_do_not_depend_on_the_thread_count():
    inp = scan_inputs(5, 6, 16, 29, 2, dtype=torch.float32, seed=3)
    gy, glast = torch.randn(5, 6, 29), torch.randn(5, 6, 16)
    inp2 = ssd_inputs(5, 70, 4, 3, 2, 16, dtype=torch.float32, seed=4)
    gy2, gfinal = torch.randn(5, 70, 4, 3), torch.randn(5, 4, 3, 16)
    xc = torch.randn(5, 30, 12, requires_grad=True)
    wc, bc = torch.randn(12, 1, 4, requires_grad=True), torch.randn(12, requires_grad=True)

    def conv():
        y = native.conv_silu(xc, wc, bc)
        return [y.detach(), *torch.autograd.grad(y.square().sum(), (xc, wc, bc))]

    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs.append(_run(native.selective_scan_native, inp, gy, glast)
                        + _run_ssd(native.ssd_native, inp2, gy2, gfinal) + conv())
    finally:
        torch.set_num_threads(before)
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)


def test_dispatch_sends_float32_on_cpu_to_the_native_core():
    assert backend.scan_backend("cpu") == backend.NATIVE_SCAN
    inp = scan_inputs(2, 4, 3, 11, 0, dtype=torch.float32)
    assert torch.equal(selective_scan(**inp), native.selective_scan_native(**inp))
    assert native.usable(inp["u"], inp["A"]) and not native.usable(inp["u"].double(), inp["A"])


def test_loading_leaves_denormals_alone():
    # a library linked with -ffast-math would turn on flush-to-zero for the whole process
    assert kernels.load()[0] is not None
    tiny = torch.tensor([1e-38]) / 1e3
    assert tiny.item() > 0


def test_a_failed_build_or_the_switch_falls_back_with_a_reason(tmp_path):
    code = ("from recall_lab import native; from recall_lab.ssm import backend; "
            "print(backend.scan_backend('cpu')); print(native.load()[1])")
    env = {**os.environ, "RECALL_LAB_CACHE": str(tmp_path), "CC": "false"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == backend.TORCH_SCAN
    assert out[1].startswith("compiling the native kernels failed")
    env = {**os.environ, kernels.ENV_SWITCH: "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == [backend.TORCH_SCAN, f"disabled by {kernels.ENV_SWITCH}=0"]


FUSED_KEYS = ("u", "dt", "A", "B", "C", "D", "z", "bias", "side", "dtw")


def _fused_ref(u, dt, A, B, C, D, z, bias, side, return_last_state=True, dt_weight=None):
    """The fused op's torch reference: dt_proj's product (with dt_weight), the scan on the
    transposed inputs, then side and gate."""
    def t(x):
        return x.transpose(1, 2)

    if dt_weight is not None:
        dt = dt @ dt_weight.t()
    y, last = selective_scan_ref(t(u), t(dt), A, t(B), t(C), D, delta_bias=bias,
                                 delta_softplus=True, return_last_state=True)
    y = t(y)
    if side is not None:
        y = y + side
    return (y if z is None else y * F.silu(z)), last


def _run_fused(fn, inp, gy, glast):
    leaves = {k: None if v is None else v.detach().clone().requires_grad_()
              for k, v in inp.items()}
    # B, C, z as column slices of one projection, as the mixer passes them (strided tokens)
    b, length, n = leaves["B"].shape
    proj = torch.cat([leaves["B"], leaves["C"]], -1)
    dt = leaves["dt"]
    if leaves["dtw"] is not None:  # the low-rank dt as a column slice too (x_proj's first r)
        dt = torch.cat([dt, torch.zeros_like(dt[..., :1])], -1)[..., :-1]
    y, last = fn(leaves["u"], dt, leaves["A"], proj[..., :n], proj[..., n:],
                 leaves["D"], leaves["z"], leaves["bias"], leaves["side"], return_last_state=True,
                 dt_weight=leaves["dtw"])
    torch.autograd.backward([y, last], [gy, glast])
    return [y.detach(), last.detach()] + [None if leaves[k] is None else leaves[k].grad
                                          for k in FUSED_KEYS]


@settings(max_examples=20, deadline=None)
@given(
    b=st.integers(1, 3),
    d=st.sampled_from([1, 3, 8, 20]),
    n=st.sampled_from([1, 4, 5, 16]),
    length=st.integers(1, 40),
    gated=st.booleans(),
    with_side=st.booleans(),
    with_d=st.booleans(),
    rank=st.sampled_from([0, 1, 4]),
    seed=st.integers(0, 2**16),
)
def test_fused_scan_matches_its_reference(b, d, n, length, gated, with_side, with_d, rank,
                                          seed):
    """values and every gradient of `selective_scan_fused` (float32) against the torch
    composition in float64; dt large enough to cross softplus's threshold sometimes; with
    rank > 0 the low-rank dt and dt_proj's weight (the product inside the kernel)."""
    gen = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen) * scale

    dt = r(b, length, rank, scale=4.0) if rank else r(b, length, d, scale=8.0)
    inp = dict(u=r(b, length, d), dt=dt, dtw=r(d, rank) if rank else None,
               A=-torch.rand(d, n, generator=gen) * 2 - 0.1, B=r(b, length, n),
               C=r(b, length, n), D=r(d) if with_d else None,
               z=r(b, length, d) if gated else None, bias=r(d, scale=0.5),
               side=r(b, length, d) if with_side else None)
    gy, glast = r(b, length, d), r(b, d, n)
    got = _run_fused(native.selective_scan_fused, inp, gy, glast)
    ref64 = {k: None if v is None else v.double() for k, v in inp.items()}
    want = _run_fused(_fused_ref, ref64, gy.double(), glast.double())
    for name, a, w in zip(("y", "last", *FUSED_KEYS), got, want, strict=True):
        assert (a is None) == (w is None), name
        if a is None:
            continue
        scale = max(1.0, w.abs().max().item())
        torch.testing.assert_close(a.double() / scale, w / scale, rtol=1e-4, atol=1e-4,
                                   msg=f"{name}")


@pytest.mark.parametrize("with_side", [False, True])
def test_mamba_mixer_fused_path_equals_its_reference_path(with_side):
    """MambaMixer's fused CPU path (auto) against the same weights on its torch path: output
    and every parameter's gradient, with and without a side branch; and the fused path is the
    one taken (its result differs from the unfused native path only by rounding)."""
    torch.manual_seed(0)
    fast = MambaMixer(16, d_state=4, scan_impl="auto")
    ref = MambaMixer(16, d_state=4, scan_impl="torch")
    ref.load_state_dict(fast.state_dict())
    side_w = torch.randn(fast.d_inner, fast.d_inner) * 0.1
    x = torch.randn(3, 21, 16)

    def grads(m):
        side = (lambda xc: torch.tanh(xc @ side_w)) if with_side else None
        out = m(x, side=side)
        gs = torch.autograd.grad(out.square().sum(), list(m.parameters()))
        return [out.detach(), *gs]

    for a, b in zip(grads(fast), grads(ref), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_fused_scan_does_not_depend_on_the_thread_count():
    gen = torch.Generator().manual_seed(5)
    b, length, d, n = 5, 17, 12, 4
    t = [torch.randn(*s, generator=gen, requires_grad=True)
         for s in ((b, length, d), (b, length, d), (b, length, n), (b, length, n), (d,),
                   (b, length, d), (d,), (b, length, d))]
    A = (-torch.rand(d, n, generator=gen) - 0.1).requires_grad_()
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            y = native.selective_scan_fused(t[0], t[1], A, t[2], t[3], t[4], t[5], t[6], t[7])
            runs.append([y.detach(), *torch.autograd.grad(y.square().sum(), [*t, A])])
    finally:
        torch.set_num_threads(before)
    for a, c in zip(*runs, strict=True):
        assert torch.equal(a, c)


def test_exp_fast_matches_expf_within_a_few_ulp():
    """The kernels' inlined exp (native/fastexp.h) against exp in float64: within 3 float32 ulp
    over the normal range, 0 below it (where expf is subnormal), and the same at both ends."""
    x = torch.cat([torch.linspace(-100.0, 88.3, 200_001), torch.tensor([0.0, -0.0, 1e-8, -1e-8]),
                   torch.randn(10_000) * 5]).float().contiguous()
    y = torch.empty_like(x)
    kernels.lib().exp_fast_array(x.data_ptr(), y.data_ptr(), x.numel())
    want = torch.exp(x.double())
    normal = x >= -87.33654
    ulp = torch.finfo(torch.float32).eps * want[normal]
    err = (y.double()[normal] - want[normal]).abs() / ulp
    assert err.max().item() <= 3.0, f"max error {err.max().item():.2f} ulp"
    assert torch.all(y[~normal] == 0)
    assert y[x == 0].eq(1.0).all()


def test_softplus_fast_matches_softplus_within_a_few_ulp():
    """The kernels' inlined softplus (native/fastexp.h) against torch's softplus in float64:
    within 4 float32 ulp of the value (relative, so tiny outputs far left are checked too), and
    x itself above torch's threshold of 20."""
    x = torch.cat([torch.linspace(-87.0, 30.0, 200_001), torch.tensor([0.0, -0.0, 20.0, 20.001]),
                   torch.randn(10_000) * 8]).float().contiguous()
    y = torch.empty_like(x)
    kernels.lib().softplus_fast_array(x.data_ptr(), y.data_ptr(), x.numel())
    want = F.softplus(x.double())
    err = (y.double() - want).abs() / (torch.finfo(torch.float32).eps * want)
    assert err.max().item() <= 4.0, f"max error {err.max().item():.2f} ulp at x = {x[err.argmax()]}"
    assert torch.equal(y[x > 20], x[x > 20])


@settings(max_examples=20, deadline=None)
@given(
    b=st.integers(1, 3),
    length=st.integers(1, 140),  # past the backward's checkpoint interval (64)
    heads=st.sampled_from([1, 2, 3]),
    p=st.sampled_from([1, 4, 16]),
    n=st.sampled_from([1, 4, 15]),
    with_d=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fused_ssd_matches_ssd_ref_on_the_split_inputs(b, length, heads, p, n, with_d, seed):
    """`ssd_fused` (float32, from one [x | B | C] buffer and a strided raw dt) against `ssd_ref`
    in float64 on the split inputs with dt_bias and softplus, plus D x: values and the gradients
    of the buffer, the raw dt, dt_bias, A and D."""
    gen = torch.Generator().manual_seed(seed)
    d = heads * p
    xbc = torch.randn(b, length, d + 2 * n, generator=gen)
    proj = torch.randn(b, length, heads + 3, generator=gen) * 3  # dt = columns 1 .. heads
    inp = dict(xbc=xbc, proj=proj, bias=torch.randn(heads, generator=gen),
               A=-torch.rand(heads, generator=gen) * 3 - 0.05,
               D=torch.randn(heads, generator=gen) if with_d else None)
    gy = torch.randn(b, length, d, generator=gen)

    def run(dtype, fused):
        leaves = {k: None if v is None else v.to(dtype).clone().requires_grad_()
                  for k, v in inp.items()}
        xbc_, dtr = leaves["xbc"], leaves["proj"][..., 1:heads + 1]
        if fused:
            y = native.ssd_fused(xbc_, dtr, leaves["bias"], leaves["A"], leaves["D"], heads, n)
        else:
            x, B, C = torch.split(xbc_, [d, n, n], dim=-1)
            y = ssd_ref(x.reshape(b, length, heads, p), dtr, leaves["A"],
                        B.reshape(b, length, 1, n), C.reshape(b, length, 1, n), 16,
                        D=leaves["D"], dt_bias=leaves["bias"], dt_softplus=True)
            y = y.reshape(b, length, d)
        y.backward(gy.to(dtype))
        return [y.detach()] + [None if v is None else v.grad for v in leaves.values()]

    assert native.ssd_fused_usable(xbc, n, 1)
    for name, a, w in zip(("y", *inp), run(torch.float32, True), run(torch.float64, False),
                          strict=True):
        assert (a is None) == (w is None), name
        if a is not None:
            scale = max(1.0, w.abs().max().item())
            torch.testing.assert_close(a.double() / scale, w / scale, rtol=1e-4, atol=1e-4,
                                       msg=name)


def test_mamba2_mixer_takes_the_fused_ssd_below_16_states_and_it_equals_the_torch_path():
    """Mamba2Mixer with N = 4 (fused SSD, with and without a side branch) against the same
    weights on the torch path, every parameter's gradient; N = 16 does not take it."""
    x = torch.randn(2, 19, 16)
    for side in (False, True):
        torch.manual_seed(4)
        fast = Mamba2Mixer(16, d_state=4, headdim=8)
        ref = Mamba2Mixer(16, d_state=4, headdim=8, scan_impl="torch")
        ref.load_state_dict(fast.state_dict())
        side_w = torch.randn(fast.d_inner, fast.d_inner) * 0.1

        def grads(m, side_w=side_w, side=side):
            fn = (lambda xc: torch.tanh(xc @ side_w)) if side else None
            out = m(x, side=fn)
            return [out.detach(), *torch.autograd.grad(out.square().sum(), list(m.parameters()))]

        for a, w in zip(grads(fast), grads(ref), strict=True):
            torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-5)
    assert native.ssd_fused_usable(torch.zeros(1, 1, 8), 4, 1)
    assert not native.ssd_fused_usable(torch.zeros(1, 1, 8), 16, 1)
    assert not native.ssd_fused_usable(torch.zeros(1, 1, 8), 4, 2)
    assert not native.ssd_fused_usable(torch.zeros(1, 1, 8, dtype=torch.float64), 4, 1)
