"""Optional: our scans against mamba-ssm's own references and Triton kernels (skips without it)."""

from __future__ import annotations

import pytest
import torch
from mamba_ssm_oracle import cpu_cuda_shims, load
from ssm_inputs import scan_inputs, ssd_inputs

from recall_lab.ssm import selective_scan_ref, selective_scan_torch, ssd_ref, ssd_torch

oracle = load()
pytestmark = pytest.mark.skipif(oracle is None, reason="mamba-ssm (with einops) not installed")


def _backward(fn, inp, **kw):
    leaves = {k: v.detach().clone().requires_grad_() for k, v in inp.items()}
    out = fn(**leaves, **kw)
    y, s = out if isinstance(out, tuple) else (out, None)
    gen = torch.Generator().manual_seed(7)
    loss = (y * torch.randn(y.shape, generator=gen, dtype=y.dtype)).sum()
    if s is not None:
        loss = loss + (s * torch.randn(s.shape, generator=gen, dtype=s.dtype)).sum()
    loss.backward()
    return y.detach(), None if s is None else s.detach(), {k: v.grad for k, v in leaves.items()}


@pytest.mark.parametrize("groups", [0, 2])
def test_selective_scan_matches_mamba_ssm_reference(groups):
    # mamba-ssm's reference computes in float32 whatever the input dtype
    inp = scan_inputs(2, 4, 3, 13, groups, dtype=torch.float32)
    kw = dict(delta_softplus=True, return_last_state=True)
    tol = dict(rtol=1e-4, atol=1e-4)
    y0, s0, g0 = _backward(oracle.selective_scan_ref, inp, **kw)
    for fn in (selective_scan_ref, lambda **a: selective_scan_torch(**a, chunk=4)):
        y, s, g = _backward(fn, inp, **kw)
        torch.testing.assert_close(y, y0, **tol)
        torch.testing.assert_close(s, s0, **tol)
        for k in inp:
            torch.testing.assert_close(g[k], g0[k], **tol, msg=f"grad of {k}")


def test_ssd_matches_mamba_ssm_minimal_discrete():
    b, length, h, p, g, n = 2, 16, 4, 3, 2, 5
    inp = ssd_inputs(b, length, h, p, g, n, dtype=torch.float64)
    dt = torch.nn.functional.softplus(inp["dt"])
    Bh = inp["B"].repeat_interleave(h // g, dim=2)
    Ch = inp["C"].repeat_interleave(h // g, dim=2)
    y0, s0 = oracle.ssd_minimal_discrete(inp["x"] * dt[..., None], inp["A"] * dt, Bh, Ch, 4)
    for fn in (ssd_ref, ssd_torch):
        y, s = fn(inp["x"], dt, inp["A"], inp["B"], inp["C"], 4, return_final_states=True)
        torch.testing.assert_close(y, y0)
        torch.testing.assert_close(s, s0)


@pytest.mark.slow
def test_ssd_matches_mamba_chunk_scan_combined_interpreted():
    inp = ssd_inputs(1, 20, 2, 4, 1, 8, dtype=torch.float32)
    kw = dict(chunk_size=8, dt_softplus=True, return_final_states=True)
    with cpu_cuda_shims():
        y0, s0, g0 = _backward(oracle.mamba_chunk_scan_combined, inp, **kw)
    y, s, g = _backward(ssd_torch, inp, **kw)
    tol = dict(rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(y, y0, **tol)
    torch.testing.assert_close(s, s0, **tol)
    for k in inp:
        torch.testing.assert_close(g[k], g0[k], **tol, msg=f"grad of {k}")
