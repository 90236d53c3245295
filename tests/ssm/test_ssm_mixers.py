"""MambaMixer / Mamba2Mixer: step mode, causality, exposed parameters, the `side` hook."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.generators.errors import RecallLabError
from recall_lab.ssm import Mamba2Mixer, MambaMixer, selective_scan_ref, ssd_ref


def make(kind: str, seed: int = 0, dtype=torch.float64):
    torch.manual_seed(seed)
    if kind == "mamba":
        m = MambaMixer(12, d_state=4)
    else:
        m = Mamba2Mixer(12, d_state=6, headdim=6, ngroups=2, chunk_size=4)
    return m.to(dtype)


KINDS = ["mamba", "mamba2"]


@pytest.mark.parametrize("kind", KINDS)
def test_step_mode_equals_parallel_forward(kind):
    m = make(kind)
    x = torch.randn(3, 11, 12, dtype=torch.float64)
    y = m(x)
    state = m.allocate_state(3)
    ys = []
    for t in range(x.shape[1]):
        y_t, state = m.step(x[:, t], state)
        ys.append(y_t)
    torch.testing.assert_close(torch.stack(ys, 1), y, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
@given(length=st.integers(2, 20), t=st.integers(0, 19), seed=st.integers(0, 1000))
def test_causality(kind, length, t, seed):
    t = t % (length - 1)
    m = make(kind, seed=seed % 3, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, length, 12, generator=gen)
    x2 = x.clone()
    x2[:, t + 1:] = torch.randn(2, length - t - 1, 12, generator=gen) * 3
    with torch.no_grad():
        y, y2 = m(x), m(x2)
    assert torch.equal(y[:, : t + 1], y2[:, : t + 1])
    assert not torch.allclose(y[:, t + 1:], y2[:, t + 1:])  # the perturbation does reach later


def test_mamba_params_reproduce_output():
    m = make("mamba")
    x = torch.randn(2, 9, 12, dtype=torch.float64)
    y, p = m(x, return_params=True)
    assert p.delta.shape == (2, m.d_inner, 9) and p.A.shape == (m.d_inner, m.d_state)
    assert p.B.shape == (2, m.d_state, 9) and p.C.shape == (2, m.d_state, 9)
    assert (p.A < 0).all() and (p.delta > 0).all()
    z = m.in_proj(x)[..., m.d_inner:]
    ys = selective_scan_ref(p.x, p.delta, p.A, p.B, p.C, p.D)
    torch.testing.assert_close(m.out_proj(ys.transpose(1, 2) * F.silu(z)), y)


def test_mamba2_params_reproduce_output():
    m = make("mamba2")
    x = torch.randn(2, 9, 12, dtype=torch.float64)
    y, p = m(x, return_params=True)
    assert p.delta.shape == (2, m.nheads, 9) and p.A.shape == (m.nheads,)
    assert p.B.shape == (2, 9, m.ngroups, m.d_state) and p.x.shape == (2, 9, m.nheads, m.headdim)
    assert (p.A < 0).all() and (p.delta > 0).all()
    z = m.in_proj(x)[..., : m.d_inner]
    ys = ssd_ref(p.x, p.delta.transpose(1, 2), p.A, p.B, p.C, D=p.D).reshape(2, 9, m.d_inner)
    torch.testing.assert_close(m.out_proj(m.norm(ys, z)), y)


@pytest.mark.parametrize("kind", KINDS)
def test_side_is_added_before_the_gate(kind):
    m = make(kind)
    x = torch.randn(2, 7, 12, dtype=torch.float64)
    y0, p = m(x, return_params=True)
    seen = []
    w = torch.randn(m.d_inner, dtype=torch.float64)

    def side(xc):
        seen.append(xc)
        return xc * w

    y1 = m(x, side=side)
    xc = seen[0]
    assert xc.shape == (2, 7, m.d_inner)
    if kind == "mamba":
        torch.testing.assert_close(xc, p.x.transpose(1, 2))
        z = m.in_proj(x)[..., m.d_inner:]
        # out_proj is linear without bias, so the side contribution separates
        torch.testing.assert_close(y1 - y0, m.out_proj(xc * w * F.silu(z)))
    else:
        torch.testing.assert_close(xc, p.x.reshape(2, 7, m.d_inner))
        z = m.in_proj(x)[..., : m.d_inner]
        ys = ssd_ref(p.x, p.delta.transpose(1, 2), p.A, p.B, p.C, D=p.D).reshape(2, 7, -1)
        torch.testing.assert_close(y1, m.out_proj(m.norm(ys + xc * w, z)))


def test_mamba_init_follows_mamba():
    torch.manual_seed(0)
    m = MambaMixer(32, d_state=8)
    assert m.d_inner == 64 and m.dt_rank == 2
    torch.testing.assert_close(torch.exp(m.A_log[0]), torch.arange(1.0, 9.0))
    dt = F.softplus(m.dt_proj.bias)
    assert dt.min() >= 1e-4 - 1e-7 and dt.max() <= 0.1 + 1e-6
    torch.testing.assert_close(m.D, torch.ones(64))


def test_mamba2_init_and_bad_sizes():
    torch.manual_seed(0)
    m = Mamba2Mixer(32, d_state=16, headdim=16)
    assert m.nheads == 4 and m.d_inner == 64
    dt = F.softplus(m.dt_bias)
    assert dt.min() >= 1e-4 - 1e-7 and dt.max() <= 0.1 + 1e-6
    A = torch.exp(m.A_log)
    assert A.min() >= 1 and A.max() <= 16
    with pytest.raises(RecallLabError):
        Mamba2Mixer(32, headdim=24)
    with pytest.raises(RecallLabError):
        Mamba2Mixer(32, headdim=16, ngroups=3)
    with pytest.raises(RecallLabError):
        m(torch.randn(2, 5, 31))


@pytest.mark.parametrize("kind", KINDS)
def test_scan_impls_agree(kind):
    x = torch.randn(2, 10, 12, dtype=torch.float64)
    outs = []
    for impl in ("auto", "torch", "ref"):
        torch.manual_seed(3)
        cls = MambaMixer if kind == "mamba" else Mamba2Mixer
        kw = {} if kind == "mamba" else dict(headdim=6, ngroups=2, chunk_size=4)
        outs.append(cls(12, d_state=4, scan_impl=impl, **kw).double()(x))
    torch.testing.assert_close(outs[0], outs[2])
    torch.testing.assert_close(outs[1], outs[2])
    with pytest.raises(RecallLabError):
        MambaMixer(12, scan_impl="cuda-please")
