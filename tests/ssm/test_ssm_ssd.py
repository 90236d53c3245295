"""ssd (chunked state-space duality) against the plain Mamba2 recurrence."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from ssm_inputs import ssd_inputs

from recall_lab.generators.errors import RecallLabError
from recall_lab.ssm import scan_backend, ssd, ssd_ref, ssd_torch

KEYS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")


@pytest.mark.parametrize("chunk", [2, 4])
def test_gradcheck_float64(chunk):
    inp = ssd_inputs(1, 5, 4, 2, 2, 2)
    args = [inp[k].requires_grad_() for k in KEYS]

    def f(x, dt, A, B, C, D, z, dt_bias, h0):
        return ssd_torch(x, dt, A, B, C, chunk, D=D, z=z, dt_bias=dt_bias, dt_softplus=True,
                         initial_states=h0, return_final_states=True)

    assert torch.autograd.gradcheck(f, args)


def _run(fn, inp, chunk, gy, gs):
    leaves = {k: v.detach().clone().requires_grad_() for k, v in inp.items()}
    y, s = fn(**leaves, chunk_size=chunk, dt_softplus=True, return_final_states=True)
    torch.autograd.backward([y, s], [gy, gs])
    return y.detach(), s.detach(), {k: v.grad for k, v in leaves.items()}


@given(
    b=st.integers(1, 3),
    length=st.integers(1, 40),
    heads_groups=st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]),
    p=st.integers(1, 4),
    n=st.integers(1, 5),
    chunk=st.sampled_from([1, 4, 8, 16, 64]),
    d_form=st.sampled_from(["none", "head", "head_p"]),
    seed=st.integers(0, 2**16),
)
def test_float32_values_and_grads_match_reference(b, length, heads_groups, p, n, chunk, d_form,
                                                 seed):
    h, g = heads_groups
    inp = ssd_inputs(b, length, h, p, g, n, dtype=torch.float32, seed=seed)
    if d_form == "none":
        del inp["D"]
    elif d_form == "head_p":
        inp["D"] = torch.randn(h, p, generator=torch.Generator().manual_seed(seed))
    gen = torch.Generator().manual_seed(seed + 1)
    gy = torch.randn(b, length, h, p, generator=gen)
    gs = torch.randn(b, h, p, n, generator=gen)
    y1, s1, g1 = _run(ssd_torch, inp, chunk, gy, gs)
    y2, s2, g2 = _run(ssd_ref, inp, chunk, gy, gs)
    tol = dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(y1, y2, **tol)
    torch.testing.assert_close(s1, s2, **tol)
    for k in inp:
        scale = max(1.0, g2[k].abs().max().item())
        torch.testing.assert_close(g1[k] / scale, g2[k] / scale, **tol, msg=f"grad of {k}")


def test_strong_decay_is_finite_and_exact():
    inp = ssd_inputs(2, 40, 2, 3, 1, 4, dtype=torch.float32)
    inp["dt"] = inp["dt"].abs() * 50 + 1
    y = ssd_torch(**inp, chunk_size=16)
    assert torch.isfinite(y).all()
    # cumulative log-decays reach ~1e3 here, so float32 differences carry ~1e-4 relative error
    torch.testing.assert_close(y, ssd_ref(**inp), rtol=1e-3, atol=1e-3)


def test_dispatch_on_cpu_runs_float64_and_initial_states_on_the_torch_path():
    # the native recurrence computes in float32 from zero states (tests/ssm/test_ssm_native.py)
    assert scan_backend("cpu", "ssd") in ("torch-ssd-chunked", "native-c-recurrence")
    inp = ssd_inputs(1, 5, 2, 2, 1, 3)
    assert inp["initial_states"] is not None
    torch.testing.assert_close(ssd(**inp, chunk_size=4), ssd_torch(**inp, chunk_size=4),
                               rtol=1e-12, atol=1e-12)
    inp32 = {k: v.float() for k, v in inp.items()}
    assert torch.equal(ssd(**inp32, chunk_size=4), ssd_torch(**inp32, chunk_size=4))


def test_bad_input_raises_recall_lab_error():
    inp = ssd_inputs(1, 5, 3, 2, 1, 3)
    with pytest.raises(RecallLabError):
        ssd_torch(inp["x"], inp["dt"], inp["A"], inp["B"].repeat(1, 1, 2, 1),
                  inp["C"].repeat(1, 1, 2, 1))
    with pytest.raises(RecallLabError):
        ssd_torch(inp["x"], inp["dt"][:, :, :2], inp["A"], inp["B"], inp["C"])
    with pytest.raises(RecallLabError):
        ssd_torch(inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], chunk_size=0)
