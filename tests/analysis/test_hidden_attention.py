"""Hidden attention (DeciMamba Eq. 4-5): the fast tiled map equals the position-loop reference,
reproduces the actual scan output y = alpha x exactly (float64), and is causal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.analysis import (
    apply_hidden_attention,
    hidden_attention,
    hidden_attention_loop,
    hidden_attention_row,
    iter_tiles,
)
from recall_lab.generators.errors import RecallLabError
from recall_lab.ssm.reference import selective_scan_ref, ssd_ref


def mamba_params(b=2, d=5, n=3, L=23, groups=0, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    delta = torch.nn.functional.softplus(torch.randn(b, d, L, generator=g, dtype=dtype))
    A = -torch.exp(torch.randn(d, n, generator=g, dtype=dtype))
    shape = (b, n, L) if groups == 0 else (b, groups, n, L)
    B = torch.randn(*shape, generator=g, dtype=dtype)
    C = torch.randn(*shape, generator=g, dtype=dtype)
    x = torch.randn(b, d, L, generator=g, dtype=dtype)
    D = torch.randn(d, generator=g, dtype=dtype)
    return SimpleNamespace(delta=delta, A=A, B=B, C=C, x=x, D=D)


def mamba2_params(b=2, h=4, p=3, n=5, L=23, groups=1, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    delta = torch.nn.functional.softplus(torch.randn(b, h, L, generator=g, dtype=dtype))
    A = -torch.exp(torch.randn(h, generator=g, dtype=dtype))
    B = torch.randn(b, L, groups, n, generator=g, dtype=dtype)
    C = torch.randn(b, L, groups, n, generator=g, dtype=dtype)
    x = torch.randn(b, L, h, p, generator=g, dtype=dtype)
    D = torch.randn(h, generator=g, dtype=dtype)
    return SimpleNamespace(delta=delta, A=A, B=B, C=C, x=x, D=D)


@pytest.mark.parametrize("groups", [0, 1, 5])
def test_mamba_alpha_x_equals_selective_scan(groups):
    p = mamba_params(groups=groups)
    y_scan = selective_scan_ref(p.x, p.delta, p.A, p.B, p.C, D=p.D)
    for alpha in (hidden_attention_loop(p),
                  hidden_attention(p, block=4, col_block=7, dtype=torch.float64)):
        y = apply_hidden_attention(p, alpha)
        torch.testing.assert_close(y, y_scan, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("groups", [1, 2])
def test_mamba2_alpha_x_equals_ssd(groups):
    p = mamba2_params(groups=groups)
    y_scan = ssd_ref(p.x, p.delta.transpose(1, 2), p.A, p.B, p.C, D=p.D)
    for alpha in (hidden_attention_loop(p),
                  hidden_attention(p, block=4, col_block=7, dtype=torch.float64)):
        y = apply_hidden_attention(p, alpha)
        torch.testing.assert_close(y, y_scan, rtol=1e-10, atol=1e-10)


@given(L=st.integers(1, 40), block=st.integers(1, 48), col_block=st.integers(1, 17),
       mamba2=st.booleans(), seed=st.integers(0, 2**16))
def test_tiled_equals_loop_and_is_causal(L, block, col_block, mamba2, seed):
    p = mamba2_params(L=L, seed=seed, b=1) if mamba2 else mamba_params(L=L, seed=seed, b=1)
    ref = hidden_attention_loop(p)
    fast = hidden_attention(p, block=block, col_block=col_block, dtype=torch.float64)
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-12)
    upper = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    assert bool((fast[..., upper] == 0).all())
    # tiles cover the lower triangle exactly once and skip what lies wholly above it
    count = torch.zeros(L, L, dtype=torch.int64)
    for i0, i1, j0, j1, _ in iter_tiles(p, block=block, col_block=col_block):
        assert j0 < i1
        count[i0:i1, j0:j1] += 1
    assert bool((count[~upper] == 1).all()) and int(count.max()) == 1


@given(L=st.integers(2, 30), cut=st.integers(1, 29), seed=st.integers(0, 2**16))
def test_future_inputs_do_not_change_past_rows(L, cut, seed):
    cut = min(cut, L - 1)
    p = mamba_params(L=L, seed=seed, b=1)
    q = mamba_params(L=L, seed=seed + 1, b=1)
    # q equals p up to position `cut` (and shares A), then differs
    q.A = p.A
    for name in ("delta", "B", "C"):
        getattr(q, name)[..., :cut] = getattr(p, name)[..., :cut]
    a = hidden_attention(p, block=3, dtype=torch.float64)
    b = hidden_attention(q, block=3, dtype=torch.float64)
    torch.testing.assert_close(a[..., :cut, :], b[..., :cut, :], rtol=0, atol=0)


@pytest.mark.parametrize("mamba2", [False, True])
def test_row_equals_full_map_and_channel_reductions(mamba2):
    p = mamba2_params() if mamba2 else mamba_params()
    full = hidden_attention(p, dtype=torch.float64)
    for i in (0, 7, -1):
        row = hidden_attention_row(p, i, col_block=5, dtype=torch.float64)
        ii = i % full.shape[-1]
        torch.testing.assert_close(row, full[:, :, ii, : ii + 1])
    torch.testing.assert_close(hidden_attention(p, reduce="mean", dtype=torch.float64),
                               full.mean(1))
    torch.testing.assert_close(hidden_attention(p, reduce="abs_mean", dtype=torch.float64),
                               full.abs().mean(1))
    sel = hidden_attention(p, channels=[1, 3], dtype=torch.float64)
    torch.testing.assert_close(sel, full[:, [1, 3]])


def test_long_sequence_does_not_overflow():
    # S_L * |A| ~ 1e5: exp(-A S_j) alone would overflow float32 and float64.
    p = mamba_params(b=1, d=2, n=2, L=2000, dtype=torch.float32)
    p.delta = p.delta * 0 + 5.0
    p.A = p.A * 0 - 10.0
    row = hidden_attention_row(p)
    full = hidden_attention(p, block=256)
    assert torch.isfinite(full).all() and torch.isfinite(row).all()
    torch.testing.assert_close(row, full[:, :, -1])


def test_bad_input_is_refused():
    p = mamba_params()
    p.A = -p.A
    with pytest.raises(RecallLabError):
        hidden_attention(p)
    q = mamba_params()
    q.delta = -q.delta
    with pytest.raises(RecallLabError):
        hidden_attention_row(q)
    with pytest.raises(RecallLabError):
        hidden_attention(mamba_params(), channels=[99])
    with pytest.raises(RecallLabError):
        hidden_attention(SimpleNamespace(delta=1))


@pytest.mark.parametrize("mamba2", [False, True])
def test_float32_default_path_close_to_float64(mamba2):
    p = mamba2_params(b=1, L=300, seed=4) if mamba2 else mamba_params(b=1, L=300, seed=4)
    ref = hidden_attention(p, dtype=torch.float64)
    fast = hidden_attention(p).double()  # float32, default tiles
    assert float((fast - ref).abs().max() / ref.abs().max()) < 1e-5
